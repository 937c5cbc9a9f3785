//! Triton's masked tiles are checked as runs without branches (instrument/src/ptx/masked_runs.rs,
//! issue 39): on Triton 3.6's real PTX of a masked vector add (tests/data/triton_vector_add.ptx),
//! every masked access is checked under its own mask and runs under its check's verdict, the run
//! has one branch, and the checked module assembles with the pinned ptxas without spilling, as the
//! native one does. (Execution: loops_sim.rs's masked-run tests.)

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

const TRITON_VECTOR_ADD: &str = include_str!("data/triton_vector_add.ptx");

/// The global accesses of `ptx` in order: (guard, statement without it).
fn global_accesses(ptx: &str) -> Vec<(Option<&str>, String)> {
    ptx.lines()
        .map(|l| l.split("//").next().unwrap().trim())
        .filter(|s| s.contains("ld.global.b") || s.contains("st.global.b"))
        .map(|s| match s.strip_prefix('@') {
            Some(g) => {
                let (guard, rest) = g.split_once(char::is_whitespace).unwrap();
                (Some(guard), rest.trim().to_string())
            }
            None => (None, s.to_string()),
        })
        .collect()
}

#[test]
fn each_masked_access_runs_under_its_own_mask_and_its_verdict() {
    let r = instrument_ptx(TRITON_VECTOR_ADD, &InstrumentOptions::default()).unwrap();
    let native = global_accesses(TRITON_VECTOR_ADD);
    let checked = global_accesses(&r.ptx);
    assert_eq!(native.len(), 24, "Triton's vector add: 16 masked loads, 8 masked stores");
    assert_eq!(checked.len(), native.len());
    let lines: Vec<&str> = r.ptx.lines().collect();
    let mut at = 0;
    for ((mask, stmt), (verdict, checked_stmt)) in native.iter().zip(&checked) {
        assert_eq!(stmt, checked_stmt, "the access itself is unchanged");
        let (mask, verdict) = (mask.expect("Triton masks every access"), verdict.expect("a verdict"));
        assert!(verdict.starts_with("%gsg"), "{checked_stmt} runs under its check's verdict, not {verdict}");
        // Its check is the block right before it, and copies its own mask.
        at += lines[at..].iter().position(|l| l.contains(checked_stmt.as_str()) && l.contains(verdict)).unwrap();
        let block: Vec<&str> = lines[..at].iter().rev().take_while(|l| l.trim_end().ends_with("//gasan")).copied().collect();
        assert!(block.iter().any(|l| l.contains(&format!("mov.pred %gsp2, {mask};"))), "the check of {stmt} reads its mask {mask}");
        assert!(block.iter().any(|l| l.contains(&format!("and.pred {verdict}, %gsp0, %gsp2;"))), "the verdict of {stmt} keeps its mask");
        assert!(!block.iter().any(|l| l.contains(" bra ")), "no branch in the run");
        at += 1;
    }
    assert_eq!(r.ptx.matches("bra $gasan_fail_shared;").count(), 1, "one branch after the run");
    assert_eq!(r.stats.functions["vector_add"].checked, 24);
}

/// Registers and spill-store bytes ptxas reports for the entry (Triton's own flags: `-lineinfo -v
/// --gpu-name=sm_90a`).
fn ptxas_cost(name: &str, ptx: &str) -> (u32, u32) {
    let dir = scratch(&format!("masked-runs-{name}"));
    let f = dir.join("k.ptx");
    std::fs::write(&f, ptx).unwrap();
    let out = run_tool("ptxas", &["-lineinfo".as_ref(), "-v".as_ref(), "--gpu-name=sm_90a".as_ref(), f.as_os_str(), "-o".as_ref(), dir.join("k.cubin").as_os_str()]);
    let info = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let entry = info.split("Compiling entry function 'vector_add'").nth(1).expect("the entry's report");
    let number_before = |word: &str| -> u32 {
        let head = &entry[..entry.find(word).unwrap_or_else(|| panic!("no {word} in {entry}"))];
        head.split_whitespace().last().unwrap().parse().unwrap()
    };
    (number_before(" registers"), number_before(" bytes spill stores"))
}

#[test]
fn the_checked_vector_add_assembles_without_spilling() {
    let (_, native_spill) = ptxas_cost("native", TRITON_VECTOR_ADD);
    assert_eq!(native_spill, 0);
    let r = instrument_ptx(TRITON_VECTOR_ADD, &InstrumentOptions::default()).unwrap();
    let (regs, spill) = ptxas_cost("checked", &r.ptx);
    assert_eq!(spill, 0, "the checked kernel spills ({regs} registers)");
}
