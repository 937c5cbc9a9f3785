//! Range coalescing: same-register accesses of one basic block spanning less than the minimum
//! redzone are checked at the first of them, at their lowest and highest ends, each with its own site.

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

fn module(body: &str) -> String {
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n\t.reg .b64 %rd<10>;\n\t.reg .f32 %f<10>;\n\tld.param.u64 %rd1, [p];\n{body}\tret;\n}}\n")
}

/// (checks emitted, sites recorded with their PTX lines)
fn run(body: &str, opts: InstrumentOptions) -> (usize, Vec<u32>) {
    let src = module(body);
    let r = instrument_ptx(&src, &opts).unwrap();
    let checks = r.ptx.matches("@%gsp1 bra $gasan_fail_").count() + r.ptx.matches("@%gsp1 call").count();
    (checks, r.sites.sites.iter().map(|s| s.ptx_line).collect())
}

#[test]
fn a_row_of_loads_is_checked_at_both_ends_only() {
    let body = "\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n\tld.global.f32 %f3, [%rd1+8];\n\tst.global.f32 [%rd1+12], %f3;\n";
    let (checks, lines) = run(body, InstrumentOptions::default());
    assert_eq!(checks, 2, "lowest (+0) and highest (+12) ends");
    // The hoisted check keeps the store's own PTX line (line 13 of the module: the 4th body line).
    assert_eq!(lines.len(), 2);
    assert!(lines.contains(&10) && lines.contains(&13), "{lines:?}");
}

#[test]
fn groups_stop_at_the_redzone_span_redefinitions_and_block_ends() {
    let far = "\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+256];\n";
    assert_eq!(run(far, InstrumentOptions::default()).0, 2, "256 bytes apart: both checked");
    let redefined = "\tld.global.f32 %f1, [%rd1];\n\tadd.s64 %rd1, %rd1, 4;\n\tld.global.f32 %f2, [%rd1+4];\n";
    assert_eq!(run(redefined, InstrumentOptions::default()).0, 2);
    let branch = "\tld.global.f32 %f1, [%rd1];\n\tbra $L1;\n$L1:\n\tld.global.f32 %f2, [%rd1+4];\n";
    assert_eq!(run(branch, InstrumentOptions::default()).0, 2);
}

#[test]
fn only_halt_mode_with_optimization_coalesces() {
    let body = "\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n\tld.global.f32 %f3, [%rd1+8];\n";
    assert_eq!(run(body, InstrumentOptions { optimize: false, ..Default::default() }).0, 3);
    assert_eq!(run(body, InstrumentOptions { recover: true, ..Default::default() }).0, 3);
}

#[test]
fn an_end_the_first_access_reaches_is_not_checked_again() {
    // A read-modify-write of one element with other loads between: the store's check is the
    // load's, so one check, at the load, with the load's site.
    let rmw = "\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n\tst.global.f32 [%rd1], %f2;\n";
    let (checks, lines) = run(rmw, InstrumentOptions::default());
    assert_eq!((checks, lines.len()), (2, 2), "+0 (load and store) and +4: {lines:?}");
    let same = "\tld.global.f32 %f1, [%rd1];\n\tadd.f32 %f1, %f1, %f1;\n\tst.global.f32 [%rd1], %f1;\n";
    let (checks, lines) = run(same, InstrumentOptions::default());
    assert_eq!((checks, lines), (1, vec![10]), "the load's own check covers its store");
    // The first access holds the highest end: only the lowest is hoisted to it.
    let top_first = "\tld.global.f32 %f1, [%rd1+8];\n\tld.global.f32 %f2, [%rd1];\n\tst.global.f32 [%rd1+8], %f2;\n";
    let (checks, lines) = run(top_first, InstrumentOptions::default());
    assert_eq!(checks, 2);
    assert!(lines.contains(&10) && lines.contains(&11) && lines.len() == 2, "{lines:?}");
}
