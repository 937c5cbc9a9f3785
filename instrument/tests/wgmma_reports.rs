//! Halt mode in a kernel that uses `wgmma`: Triton's pipelined f16 matmul (jit/triton/kernels.py
//! `matmul` with the alignment hints PyTorch's tensors get, compiled by Triton 3.6.0 for sm_90a:
//! tests/data/triton_matmul_hinted.ptx) issues its tiles' copies and checks while a `wgmma` group
//! is in flight. With the checks' branches to report blocks that never come back, ptxas serialized
//! its `wgmma` (C7518, REVISION 87); reporting through calls where a group can be in flight (in
//! loops, and between an issue and its wait: REVISION 100) it does not. Triton's attention
//! (tests/data/triton_attention_hinted.ptx), which waits for every group, was serialized until
//! REVISION 99.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::ffi::OsStr;

/// ptxas's `-v` report of `ptx`, which must assemble for sm_90a.
fn ptxas_report(dir: &std::path::Path, name: &str, ptx: &str) -> String {
    let f = dir.join(format!("{name}.ptx"));
    std::fs::write(&f, ptx).unwrap();
    let out = run_tool("ptxas", &[OsStr::new("-arch=sm_90a"), OsStr::new("-v"), f.as_os_str(), OsStr::new("-o"), dir.join(format!("{name}.cubin")).as_os_str()]);
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_pipelined_wgmma_matmul_keeps_its_wgmma_unserialized() {
    let dir = scratch("wgmma-reports");
    let native = include_str!("data/triton_matmul_hinted.ptx");
    assert!(!ptxas_report(&dir, "native", native).contains("C7518"));
    for (name, opts) in [("default", InstrumentOptions::default()), ("scale7", InstrumentOptions { scale: gasan_instrument::shadow::Scale::S7, ..Default::default() })] {
        let checked = instrument_ptx(native, &opts).unwrap().ptx;
        assert!(checked.contains("call __gasan_halt_global") && checked.contains("call __gasan_halt_space"), "{name}: reports through calls");
        let report = ptxas_report(&dir, name, &checked);
        assert!(!report.contains("C7518"), "{name}: ptxas serialized the checked kernel's wgmma:\n{report}");
        checks_before_the_loop_keep_their_jumps(name, &checked);
    }
}

/// No group is in flight before the K loop's first issue: the checks there (the pipeline's
/// prologue) keep their plain jumps to report blocks, which cost their fast path nothing.
fn checks_before_the_loop_keep_their_jumps(name: &str, checked: &str) {
    let first_loop = checked.find("$gasan_loop0:").expect("the K loop is versioned");
    let before = &checked[..first_loop];
    assert!(before.contains("bra $gasan_fail_") && !before.contains("$gasan_rejoin_"), "{name}: checks before the loop keep their plain jumps");
}

#[test]
fn an_attention_waiting_for_every_group_keeps_its_wgmma_unserialized() {
    // Triton's attention forward (jit/triton/kernels.py `attention_fwd_hinted`, compiled by Triton
    // 3.6.0 for sm_90a) waits for every group (`wgmma.wait_group 0`), so no group is in flight
    // outside its loop; with every stub jumping to a report block that never comes back, ptxas
    // still serialized its `wgmma` (C7518, REVISION 98): its loop's checked copy checks between
    // an iteration's issue and its wait. Stubs in loops report through calls.
    let dir = scratch("wgmma-attention");
    let native = include_str!("data/triton_attention_hinted.ptx");
    assert!(native.contains("wgmma.wait_group.sync.aligned 0;") && !native.contains("wgmma.wait_group.sync.aligned 1;"));
    assert!(!ptxas_report(&dir, "native", native).contains("C7518"));
    for (name, opts) in [("default", InstrumentOptions::default()), ("scale7", InstrumentOptions { scale: gasan_instrument::shadow::Scale::S7, ..Default::default() })] {
        let checked = instrument_ptx(native, &opts).unwrap().ptx;
        let report = ptxas_report(&dir, name, &checked);
        assert!(!report.contains("C7518"), "{name}: ptxas serialized the checked kernel's wgmma:\n{report}");
        assert!(checked.contains("call __gasan_halt_"), "{name}: the loop's stubs report through calls");
        checks_before_the_loop_keep_their_jumps(name, &checked);
    }
}

#[test]
fn the_fast_loop_leaves_the_staged_shared_copies_to_the_range_test() {
    // The K loop copies each tile into one of three 16 KiB buffers of dynamic shared memory,
    // picked by a stage counter that wraps (%r454: 0, 1, 2), at a swizzled offset of the thread's
    // index: A's up to byte 49,152, B's up to 98,304, the kernel's whole shared size. The range
    // test proves all 16 copies for every thread and iteration; the checked loop keeps them, one
    // check each (in a `wgmma` kernel's loops shared accesses are not grouped through sums of
    // registers: spaces.rs `Sums`).
    let native = include_str!("data/triton_matmul_hinted.ptx");
    let checked = instrument_ptx(native, &InstrumentOptions::default()).unwrap().ptx;
    let between = |from: &str, to: &str| {
        let s = checked.find(from).unwrap_or_else(|| panic!("{from}"));
        let e = s + checked[s..].find(to).unwrap_or_else(|| panic!("{to}"));
        checked[s..e].to_string()
    };
    let fast = between("$gasan_loop0:", "bra $gasan_loop0_done");
    let test = between("\t{", "$gasan_loop0:");
    let test = &test[test.rfind("ld.const.u64").unwrap()..];
    let original = between("$L__BB0_2:", "@%p33 bra");
    let shared_checks = |s: &str| s.matches("%dynamic_smem_size").count();
    assert_eq!(shared_checks(&fast), 0, "fast copy:\n{fast}");
    assert_eq!(shared_checks(&original), 16, "checked loop:\n{original}");
    assert_eq!(original.matches("cp.async.cg.shared.global").count(), 16);
    assert_eq!(fast.matches("cp.async.cg.shared.global").count(), 16);
    assert!(test.contains("%dynamic_smem_size;") && test.contains(", 98304;"), "range test:\n{test}");
    assert!(test.contains("%r454, 0;") && test.contains("%r454, 2,"), "the stage counter's entry is tested:\n{test}");
    assert!(!test.contains("%r453"), "a counter no covered copy uses is not tested");
    // Before the loop (no group in flight), each stage's eight copies into its buffer, one
    // register plus constants, share one range check.
    let prologue = &checked[..checked.find("$gasan_loop0:").unwrap()];
    let prologue = &prologue[prologue.find("cp.async.cg.shared.global").map(|p| prologue[..p].rfind(".reg .b32 %gso").unwrap()).unwrap()..];
    assert!(shared_checks(prologue) < prologue.matches("cp.async.cg.shared.global").count() / 2, "prologue:\n{prologue}");
}

#[test]
fn a_fast_path_in_a_wgmma_kernel_skips_the_whole_test_and_reports_after_its_join() {
    // In a kernel that uses `wgmma`, a check's branch to its report comes after its
    // kernel-parameter fast path has joined; the verdict is "good" before the skip, so the shadow
    // load and the encoding test are both inside it, and nothing of the test runs on the path
    // nearly every access takes.
    for (name, native) in [("matmul", include_str!("data/triton_matmul_hinted.ptx")), ("attention", include_str!("data/triton_attention_hinted.ptx"))] {
        let checked = instrument_ptx(native, &InstrumentOptions::default()).unwrap().ptx;
        let lines: Vec<&str> = checked.lines().map(|l| l.split("//gasan").next().unwrap().trim()).collect();
        let mut fast_paths = 0;
        for (k, l) in lines.iter().enumerate() {
            let Some(label) = l.strip_prefix("@!%gsp0 bra ").and_then(|t| t.strip_suffix(';')).filter(|t| t.starts_with("$gasan_inb_")) else { continue };
            let join = k + lines[k..].iter().position(|m| *m == format!("{label}:")).expect("the skip joins");
            let verdict_set = lines[..k].iter().rposition(|m| *m == "setp.ne.u32 %gsp1, 0, 0;").expect("a verdict before the skip");
            assert!(!lines[verdict_set + 1..k].iter().any(|m| m.contains("%gsp1")), "{name}: the verdict stands until the skip:\n{}", lines[verdict_set..=join + 1].join("\n"));
            let skipped = &lines[k + 1..join];
            assert!(
                skipped.iter().any(|m| m.starts_with("@%gsp0 ld.global.nc.u8")) && skipped.iter().any(|m| m.starts_with("setp.le.u32 %gsp1,")),
                "{name}: load and test are skipped:\n{}",
                skipped.join("\n")
            );
            assert!(!skipped.iter().any(|m| m.contains(" bra ")), "{name}: no branch leaves the skip");
            assert!(lines[join + 1].starts_with("@%gsp1 bra $gasan_fail_"), "{name}: the report's branch follows the join");
            fast_paths += 1;
        }
        assert!(fast_paths >= 16, "{name}: {fast_paths} fast paths");
    }
}

#[test]
fn range_tests_divide_by_a_power_of_two_with_shifts() {
    // Triton's K loops step by a power of two (BN = 64, BK = 32). ptxas 13.0 calls a division
    // subroutine for `div.u64` even by a constant: five calls on the path before attention's
    // loop, six before the matmul's. The trip counts are shifts instead.
    for (name, native) in [("matmul", include_str!("data/triton_matmul_hinted.ptx")), ("attention", include_str!("data/triton_attention_hinted.ptx"))] {
        let checked = instrument_ptx(native, &InstrumentOptions::default()).unwrap().ptx;
        let test = &checked[..checked.find("$gasan_loop0:").expect("the loop is versioned")];
        assert!(!test.contains("div.u64") && !test.contains("rem.u64"), "{name}: a division left in the range test");
        assert!(test.contains("shr.u64 %gsh0_"), "{name}: the trip count is a shift");
    }
}
