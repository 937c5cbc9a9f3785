//! Deferred load checks (halt mode with optimization): a load's verdict is branched on later, but
//! always before any store, any control flow, any redefinition of the load's address register,
//! and any access whose address derives from a deferred load's value.

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

fn module(body: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n\t.reg .b64 %rd<10>;\n\t.reg .f32 %f<10>;\n\t.reg .pred %p<4>;\n\tld.param.u64 %rd1, [p];\n{body}\tret;\n}}\n"
    )
}

/// Lines of the body in order: "L:<addr>" for a load, "S:<addr>" for a store, "B" for a deferred
/// branch, "b" for an immediate check branch, "X" for other control flow.
fn shape(ptx: &str) -> Vec<String> {
    let mut v = Vec::new();
    // The kernel body only, up to the out-of-line report blocks.
    let body = &ptx[ptx.find(".entry k").unwrap()..];
    let body = &body[..body.find("$gasan_fail_0:").unwrap_or(body.len())];
    for l in body.lines().map(str::trim) {
        if l.starts_with("@%gsq") && l.contains("bra $gasan_fail_") {
            v.push("B".to_string());
        } else if l.starts_with("@%gsp1 bra $gasan_fail_") {
            v.push("b".to_string());
        } else if l.starts_with("ld.global") {
            v.push(format!("L:{}", l.split('[').nth(1).unwrap().split(']').next().unwrap()));
        } else if l.starts_with("st.global") {
            v.push(format!("S:{}", l.split('[').nth(1).unwrap().split(']').next().unwrap()));
        } else if l.starts_with("bra") || l.starts_with("ret") || l.ends_with(':') && l.starts_with("$L") {
            v.push("X".to_string());
        }
    }
    v
}

fn run(body: &str) -> Vec<String> {
    let r = instrument_ptx(&module(body), &InstrumentOptions::default()).unwrap();
    shape(&r.ptx)
}

#[test]
fn loads_go_ahead_and_verdicts_come_before_the_store() {
    let s = run("\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n\tadd.f32 %f3, %f1, %f2;\n\tst.global.f32 [%rd1+8], %f3;\n");
    assert_eq!(s, ["L:%rd1", "L:%rd1+4", "B", "B", "b", "S:%rd1+8", "X"]);
}

#[test]
fn an_address_loaded_from_memory_waits_for_the_verdict() {
    // Pointer chasing: the second load's address is the first load's value.
    let s = run("\tld.global.u64 %rd2, [%rd1];\n\tadd.s64 %rd3, %rd2, 8;\n\tld.global.f32 %f1, [%rd3];\n");
    assert_eq!(s, ["L:%rd1", "B", "L:%rd3", "B", "X"]);
}

#[test]
fn redefining_the_address_register_or_branching_flushes() {
    let s = run("\tld.global.f32 %f1, [%rd1];\n\tadd.s64 %rd1, %rd1, 4;\n\tld.global.f32 %f2, [%rd1];\n\tbra $L__BB0_1;\n$L__BB0_1:\n");
    assert_eq!(s, ["L:%rd1", "B", "L:%rd1", "B", "X", "X", "X"]);
}

#[test]
fn a_load_that_overwrites_its_address_register_is_checked_in_place() {
    let s = run("\tld.global.u64 %rd1, [%rd1];\n");
    assert_eq!(s, ["b", "L:%rd1", "X"]);
}

#[test]
fn recover_mode_and_no_optimization_do_not_defer() {
    let body = "\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n";
    for opts in [InstrumentOptions { optimize: false, ..Default::default() }, InstrumentOptions { recover: true, ..Default::default() }] {
        let r = instrument_ptx(&module(body), &opts).unwrap();
        assert!(!r.ptx.contains("%gsq"), "{opts:?}");
    }
}
