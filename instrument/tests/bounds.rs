//! Kernel-parameter bounds (instrument/src/ptx/bounds.rs): a straight-line kernel finds, once,
//! the pool block each pointer parameter points into, and a check of an address derived from that
//! parameter skips its shadow load inside the block's whole granules. What gets a fast path and
//! what does not; the emitted PTX assembles (corpus tests run ptxas over every module).

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

mod common;

fn module(params: &str, body: &str) -> String {
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k({params})\n{{\n\t.reg .b64 %rd<20>;\n\t.reg .f32 %f<10>;\n\t.reg .b32 %r<10>;\n\t.reg .pred %p<3>;\n{body}\tret;\n}}\n")
}

fn checked(params: &str, body: &str, opts: InstrumentOptions) -> String {
    instrument_ptx(&module(params, body), &opts).unwrap().ptx
}

/// Two parameters, the addresses of both computed from them (cvta, mad.wide, add).
const TWO_PARAMS: &str = ".param .u64 k_out, .param .u64 k_in, .param .u32 k_n";
/// The same, declared as Triton declares its pointers.
const TWO_PTR_PARAMS: &str = ".param .u64 .ptr .global .align 1 k_out, .param .u64 .ptr .global .align 16 k_in, .param .u32 k_n";
const STRAIGHT: &str = "\tld.param.u64 %rd1, [k_out];\n\tld.param.u64 %rd2, [k_in];\n\tmov.u32 %r1, %tid.x;\n\tcvta.to.global.u64 %rd3, %rd2;\n\tmul.wide.s32 %rd4, %r1, 4;\n\tadd.s64 %rd5, %rd3, %rd4;\n\tld.global.f32 %f1, [%rd5];\n\tld.global.f32 %f2, [%rd5+4096];\n\tadd.f32 %f3, %f1, %f2;\n\tcvta.to.global.u64 %rd6, %rd1;\n\tadd.s64 %rd7, %rd6, %rd4;\n\tst.global.f32 [%rd7], %f3;\n";

fn fast_paths(ptx: &str) -> usize {
    ptx.matches("bra $gasan_inb_").count()
}

#[test]
fn straight_line_kernels_read_each_pointer_parameter_once() {
    for opts in [InstrumentOptions::default(), InstrumentOptions { aligned_pool: true, ..Default::default() }, InstrumentOptions { recover: true, ..Default::default() }] {
        let ptx = checked(TWO_PARAMS, STRAIGHT, opts);
        // Each parameter read once, at the body's top; the u32 not at all. Both may be tagged by
        // launches, so their bounds are decoded from their values (no extent-table lookup).
        assert_eq!(ptx.matches("[k_in]; //gasan").count(), 1, "{ptx}");
        assert_eq!(ptx.matches("[k_out]; //gasan").count(), 1, "{ptx}");
        assert!(!ptx.contains("[k_n]; //gasan"));
        assert_eq!(ptx.matches("ld.global.nc.v2.u64 {%gsbl").count(), 0);
        assert!(ptx.find("ld.param.u64 %gsbp").unwrap() < ptx.find("ld.param.u64 %rd1").unwrap(), "lookups before the body's statements");
        // The checks have fast paths (at least one per parameter), each label defined once.
        assert!(fast_paths(&ptx) >= 2, "{ptx}");
        let labels: Vec<&str> = ptx.lines().filter_map(|l| l.trim().strip_suffix(": //gasan").or_else(|| l.trim().strip_suffix(':'))).filter(|l| l.starts_with("$gasan_inb_")).collect();
        let mut unique = labels.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(labels.len(), unique.len(), "labels defined once: {labels:?}");
        assert_eq!(labels.len(), fast_paths(&ptx), "each fast path has its label");
        // Both parameters are tagged and indexed `P + 4·%r1` (mul.wide.s32, add): the test is on
        // the index against the reach in 4-byte elements, decoded at the entry, not on the address.
        assert!(ptx.contains("setp.ge.u32 %gsp0, %r1, %gsbi0_2;") || ptx.contains("setp.ge.u32 %gsp0, %r1, %gsbi1_2;"), "{ptx}");
        assert!(ptx.contains("add.s32 %gsi, %r1, 1024;"), "the read 4096 bytes on: {ptx}");
        assert_eq!(ptx.matches("cvt.u32.u64 %gsbi").count(), 2, "{ptx}");
        assert!(!ptx.contains("setp.lt.u64 %gsp0, %gsa0, %gsbl"), "{ptx}");
    }
    // A 64-bit offset (no 32-bit index) tests the address against the block's whole granules.
    let wide = STRAIGHT.replace("mul.wide.s32 %rd4, %r1, 4", "mul.lo.s64 %rd4, %rd9, 4").replace("mov.u32 %r1, %tid.x;", "mov.u64 %rd9, 5;");
    let ptx = checked(TWO_PARAMS, &wide, InstrumentOptions::default());
    assert!(ptx.contains("setp.lt.u64 %gsp0, %gsa0, %gsbl") && !ptx.contains("%gsbi"), "{ptx}");
}

#[test]
fn kernels_with_a_loop_test_addresses_and_device_functions_get_none() {
    // A loop: the parameters' bounds, tested on the address, never on an index (the index test
    // rests on definitions a loop may redo).
    let looped = format!("{STRAIGHT}$L1:\n\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.s32 %p1, %r2, 10;\n\t@%p1 bra $L1;\n");
    let ptx = checked(TWO_PARAMS, &looped, InstrumentOptions::default());
    assert!(ptx.contains("setp.lt.u64 %gsp0, %gsa0, %gsbl") && !ptx.contains("%gsbi"), "{ptx}");
    let func = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .func f(.param .b64 f_p)\n{\n\t.reg .b64 %rd<4>;\n\t.reg .f32 %f<2>;\n\tld.param.u64 %rd1, [f_p];\n\tld.global.f32 %f1, [%rd1];\n\tret;\n}\n";
    assert!(!instrument_ptx(func, &InstrumentOptions::default()).unwrap().ptx.contains("%gsbl"));
}

#[test]
fn addresses_not_derived_from_a_parameter_take_the_plain_check() {
    // A pointer loaded from memory, and the sum of two parameters, derive from no parameter.
    let chased =
        "\tld.param.u64 %rd1, [k_out];\n\tld.param.u64 %rd2, [k_in];\n\tld.global.u64 %rd3, [%rd1];\n\tld.global.f32 %f1, [%rd3];\n\tadd.s64 %rd4, %rd1, %rd2;\n\tld.global.f32 %f2, [%rd4];\n";
    let ptx = checked(TWO_PARAMS, chased, InstrumentOptions { optimize: false, ..Default::default() });
    // Only the first load (through k_out itself) is looked up and fast-pathed.
    assert_eq!(ptx.matches("ld.param.u64 %gsb").count(), 1, "{ptx}");
    assert!(ptx.contains("ld.param.u64 %gsbp0, [k_out];"));
    assert_eq!(fast_paths(&ptx), 1, "{ptx}");
    // A return value read with ld.param is not a kernel parameter.
    let retval = "\t{\n\t.param .b64 retval0;\n\tld.param.b64 %rd5, [retval0];\n\tld.global.f32 %f1, [%rd5];\n\t}\n";
    assert!(!checked(TWO_PARAMS, retval, InstrumentOptions::default()).contains("%gsbl"));
}

#[test]
fn the_option_turns_it_off() {
    let off = checked(TWO_PARAMS, STRAIGHT, InstrumentOptions { param_bounds: false, ..Default::default() });
    assert!(!off.contains("%gsbl") && !off.contains("%gsbt") && !off.contains("gasan_inb") && !off.contains("__gasan_no_extent"), "{off}");
    // (instrument/identical.sh with NEW_FLAGS=--no-param-bounds: byte-identical to the rewriter before it.)
}

/// Launch-time tags (gasan_instrument::abi::param_tag): a pointer parameter the program reads only
/// as a whole 64-bit `ld.param` may be tagged, and each such read is untagged right after it; a
/// parameter read any other way (in part, its address taken) is never listed.
#[test]
fn parameters_read_whole_are_listed_for_tags_and_untagged_after_each_read() {
    // Declared as pointers (`.ptr`, Triton's form) or not, the same table and the same entry.
    let plain = instrument_ptx(&module(TWO_PARAMS, STRAIGHT), &InstrumentOptions::default()).unwrap();
    let pointers = instrument_ptx(&module(TWO_PTR_PARAMS, STRAIGHT), &InstrumentOptions::default()).unwrap();
    assert_eq!(pointers.param_tags, plain.param_tags);
    let body = |ptx: &str| ptx[ptx.find(")\n{").unwrap()..].to_string();
    assert_eq!(body(&pointers.ptx), body(&plain.ptx));
    // A pointer into another space is never tagged: looked up in the extent table.
    let shared = instrument_ptx(&module(&TWO_PTR_PARAMS.replacen(".ptr .global .align 1 ", ".ptr .shared .align 1 ", 1), STRAIGHT), &InstrumentOptions::default()).unwrap();
    assert_eq!(shared.param_tags.kernels["k"].tagged, vec![1]);
    assert_eq!(shared.ptx.matches("ld.global.nc.v2.u64 {%gsbl").count(), 1);
    let r = plain;
    let k = &r.param_tags.kernels["k"];
    assert_eq!((k.count, k.tagged.clone()), (3, vec![0, 1]), "{:?}", r.param_tags);
    // Each program read is followed by the copy of the untagged pointer the entry kept; the
    // entry decodes both without a branch (an untagged launch: empty bounds, values unchanged).
    for (reg, param) in [("%rd1", "k_out"), ("%rd2", "k_in")] {
        let entry_read = r.ptx.lines().find(|l| l.contains(&format!("[{param}]; //gasan"))).unwrap();
        let k = entry_read.trim().strip_prefix("ld.param.u64 %gsbp").unwrap().split(',').next().unwrap();
        let read = r.ptx.find(&format!("ld.param.u64 {reg}, [")).unwrap();
        let next = r.ptx[read..].lines().nth(1).unwrap();
        assert_eq!(next.trim(), format!("mov.b64 {reg}, %gsbp{k}; //gasan"), "right after the read");
    }
    assert!(!r.ptx.contains("$gasan_pb_") && !r.ptx.contains("ld.global.nc.v2.u64 {%gsb"), "no branch, no lookup: {}", r.ptx);
    assert_eq!(r.ptx.matches("selp.b64 %gsbt7, 281474976710655, -1, %gsbr;").count(), 1, "one mask: {}", r.ptx);
    assert_eq!(r.ptx.matches("and.b64 %gsbp").count(), 2, "masked when decoded: {}", r.ptx);
    // The table reads back from its text (the runtime's copy of it).
    assert_eq!(gasan_instrument::abi::ParamTagTable::from_text(&r.param_tags.to_text()), Some(r.param_tags.clone()));

    // k_out also read as two halves / its address taken: k_out is not listed, k_in still is.
    for extra in ["\tld.param.u32 %r5, [k_out+4];\n", "\tmov.u64 %rd9, k_out;\n", "\t@%p1 ld.param.u64 %rd9, [k_out];\n"] {
        let r = instrument_ptx(&module(TWO_PARAMS, &format!("{STRAIGHT}{extra}")), &InstrumentOptions::default()).unwrap();
        assert_eq!(r.param_tags.kernels["k"].tagged, vec![1], "{extra}");
        // Never tagged, k_out looks its block up in the extent table; k_in is decoded.
        assert_eq!(r.ptx.matches("ld.global.nc.v2.u64 {%gsbl").count(), 1, "{extra}: {}", r.ptx);
        assert!(!r.ptx.contains("mov.b64 %rd1, %gsbp"), "{extra}");
        assert!(r.ptx.contains("mov.b64 %rd2, %gsbp"), "{extra}");
    }
    // A loop: listed as without one.
    let looped = format!("{STRAIGHT}$L1:\n\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.s32 %p1, %r2, 10;\n\t@%p1 bra $L1;\n");
    let r = instrument_ptx(&module(TWO_PARAMS, &looped), &InstrumentOptions::default()).unwrap();
    assert_eq!(r.param_tags.kernels["k"].tagged, vec![0, 1], "{:?}", r.param_tags);
    // Declared pointers in a kernel with a loop: looked up, never tagged (ptxas re-moves untagged
    // pointers to uniform registers in every iteration); loop-free, tagged as plain ones.
    let r = instrument_ptx(&module(TWO_PTR_PARAMS, &looped), &InstrumentOptions::default()).unwrap();
    assert!(r.param_tags.kernels.get("k").is_none_or(|k| k.tagged.is_empty()), "{:?}", r.param_tags);
    assert_eq!(r.ptx.matches("ld.global.nc.v2.u64 {%gsbl").count(), 2, "{}", r.ptx);
    assert!(!r.ptx.contains("mov.b64 %rd1, %gsbp") && !r.ptx.contains("mov.b64 %rd2, %gsbp"), "{}", r.ptx);
    // No bounds (the option off): nothing listed, nothing untagged.
    let r = instrument_ptx(&module(TWO_PARAMS, STRAIGHT), &InstrumentOptions { param_bounds: false, ..Default::default() }).unwrap();
    assert!(r.param_tags.kernels.is_empty());
    assert!(!r.ptx.contains("mov.b64 %rd2, %gsbp"));
}

/// The entry's three shapes assemble: every parameter taggable (decoded with `selp`, no branch),
/// one never taggable (looked up in the extent table) beside a taggable one, and none taggable;
/// with the parameters declared plain and as Triton's pointers; in halt and recover mode and with
/// the aligned pool's checks.
#[test]
fn every_entry_shape_assembles() {
    let dir = common::scratch("bounds_entry_shapes");
    let shapes = [("tagged", String::new()), ("mixed", "\tld.param.u32 %r5, [k_out+4];\n".to_string()), ("untagged", "\tmov.u64 %rd9, k_out;\n\tmov.u64 %rd8, k_in;\n".to_string())];
    let opts =
        [("halt", InstrumentOptions::default()), ("recover", InstrumentOptions { recover: true, ..Default::default() }), ("aligned", InstrumentOptions { aligned_pool: true, ..Default::default() })];
    for ((shape, extra), (decl, params)) in shapes.iter().flat_map(|s| [("plain", TWO_PARAMS), ("ptr", TWO_PTR_PARAMS)].map(|p| (s, p))) {
        for (mode, o) in &opts {
            let r = instrument_ptx(&module(params, &format!("{STRAIGHT}{extra}")), o).unwrap();
            let lookups = r.ptx.matches("ld.global.nc.v2.u64 {%gsbl").count();
            let tagged = r.param_tags.kernels.get("k").map_or(0, |k| k.tagged.len());
            assert_eq!(lookups + tagged, 2, "{shape}/{mode}: each parameter decoded or looked up:\n{}", r.ptx);
            assert_eq!(r.ptx.contains("selp.b64 %gsbt7"), tagged > 0, "{shape}/{mode}");
            common::assemble(&dir, &format!("{shape}_{decl}_{mode}"), &r.ptx);
        }
    }
}
