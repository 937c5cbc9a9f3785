//! Every pass reads the registers declared above a line the same way (ir/regs.rs, issue 37's
//! "register types" row): a loop whose registers are declared between it and an earlier loop is
//! versioned as it is when they are declared at the top. Before REVISION 78 loop versioning fixed a
//! function's register types at its first loop, so the second loop here was left unversioned.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, Instrumented};
use gasan_instrument::shadow::Scale;

const DECL: &str = "\t.reg .b64 %rx<3>;\n";

/// Two counted loops over a buffer; the second one's address registers (`%rx`) declared at `top`
/// (with the others) or between the loops.
fn module(top: bool) -> String {
    let (at_top, between) = if top { (DECL, "") } else { ("", DECL) };
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p, .param .u32 n)\n{{\n\
         \t.reg .pred %p<4>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\t.reg .f32 %f<8>;\n{at_top}\
         \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [n];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
         \tmov.u32 %r2, 0;\n\tmov.f32 %f1, 0f00000000;\nL1:\n\tmul.wide.s32 %rd3, %r2, 4;\n\
         \tadd.s64 %rd4, %rd2, %rd3;\n\tld.global.f32 %f2, [%rd4];\n\tadd.f32 %f1, %f1, %f2;\n\
         \tadd.s32 %r2, %r2, 1;\n\tsetp.lt.s32 %p1, %r2, %r1;\n\t@%p1 bra L1;\n{between}\
         \tmov.u32 %r3, 0;\nL2:\n\tmul.wide.s32 %rx1, %r3, 4;\n\tadd.s64 %rx2, %rd2, %rx1;\n\
         \tst.global.f32 [%rx2], %f1;\n\tadd.s32 %r3, %r3, 1;\n\tsetp.lt.s32 %p2, %r3, %r1;\n\
         \t@%p2 bra L2;\n\tret;\n}}\n"
    )
}

#[test]
fn a_loop_sees_the_registers_declared_above_it() {
    let without_decl = |ptx: &str| ptx.lines().filter(|l| l.trim() != DECL.trim()).collect::<Vec<_>>().join("\n");
    let dir = scratch("declared-regs");
    let option_sets = [InstrumentOptions::default(), InstrumentOptions { scale: Scale::S7, ..Default::default() }, InstrumentOptions { param_bounds: false, ..Default::default() }];
    for (n, opts) in option_sets.into_iter().enumerate() {
        let top = instrument_ptx(&module(true), &opts).unwrap();
        let between = instrument_ptx(&module(false), &opts).unwrap();
        assert_eq!(top.stats.total(), between.stats.total(), "{opts:?}");
        // The same checked code, the declaration aside: the second loop versioned in both.
        assert_eq!(without_decl(&top.ptx), without_decl(&between.ptx), "{opts:?}");
        assemble(&dir, &format!("k{n}"), &between.ptx);
    }
}

/// A shared-memory kernel whose address registers (`%ra`, 32-bit) are declared once, with a block
/// comment after the declaration holding a `.reg` line of another type for them when `commented`.
fn shared_module(commented: bool) -> String {
    let comment = if commented { "\t/*\n\t.reg .b64 %ra<3>;\n\t*/\n" } else { "" };
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry s(.param .u64 p, .param .u32 i)\n{{\n\
         \t.reg .b32 %r<4>;\n\t.reg .b64 %rd<4>;\n\t.reg .f32 %f<4>;\n\t.reg .b32 %ra<3>;\n{comment}\
         \t.shared .align 4 .b8 sh[256];\n\
         \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [i];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
         \tmov.u32 %ra0, sh;\n\tshl.b32 %r2, %r1, 2;\n\tadd.s32 %ra1, %ra0, %r2;\n\
         \tld.shared.f32 %f1, [%ra1];\n\tst.global.f32 [%rd2], %f1;\n\tret;\n}}\n"
    )
}

/// A `.reg` line inside a block comment declares nothing: the shared access through `%ra1` is
/// checked as with no comment there, a 32-bit window address. This pins the one reader's rule
/// (ir/regs.rs) for spaces.rs; it passes at 4997502 too (before REVISION 78): spaces.rs's own
/// builder gave the same checks on this shape. The shape on which the old builders differed is
/// loop versioning's, below.
#[test]
fn a_reg_line_in_a_block_comment_declares_nothing() {
    let dir = scratch("declared-regs-comment");
    for (n, opts, plain, commented) in with_and_without_comment(shared_module) {
        assert_eq!(plain.stats.total(), commented.stats.total(), "{opts:?}");
        assert!(commented.ptx.contains("$gasan_sfail"), "the shared access is checked: {opts:?}");
        assert_eq!(without_comment(&plain.ptx, ".reg .b64 %ra<3>;"), without_comment(&commented.ptx, ".reg .b64 %ra<3>;"), "{opts:?}");
        assemble(&dir, &format!("s{n}"), &commented.ptx);
    }
}

/// `module(false)` and `module(true)` (its block comment added), each instrumented under the
/// default options and at shadow scale 7: (index, options, plain, commented).
fn with_and_without_comment(module: fn(bool) -> String) -> Vec<(usize, InstrumentOptions, Instrumented, Instrumented)> {
    [InstrumentOptions::default(), InstrumentOptions { scale: Scale::S7, ..Default::default() }]
        .into_iter()
        .enumerate()
        .map(|(n, opts)| (n, opts, instrument_ptx(&module(false), &opts).unwrap(), instrument_ptx(&module(true), &opts).unwrap()))
        .collect()
}

/// `ptx` without the block comment's lines (`/*`, `*/` and the commented `reg_line`).
fn without_comment(ptx: &str, reg_line: &str) -> String {
    ptx.lines().filter(|l| !matches!(l.trim(), "/*" | "*/") && l.trim() != reg_line).collect::<Vec<_>>().join("\n")
}

/// A counted loop over a buffer; when `commented`, a block comment after the declarations holds a
/// `.reg` line giving the loop's 32-bit registers another type (16 bits, which no affine rule
/// takes).
fn commented_loop_module(commented: bool) -> String {
    let comment = if commented { "\t/*\n\t.reg .b16 %r<6>;\n\t*/\n" } else { "" };
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p, .param .u32 n)\n{{\n\
         \t.reg .pred %p<3>;\n\t.reg .f32 %f<3>;\n\t.reg .b32 %r<6>;\n\t.reg .b64 %rd<6>;\n{comment}\
         \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [n];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r2, 0;\n\
         $L__BB0_1:\n\tmul.wide.u32 %rd3, %r2, 4;\n\tadd.s64 %rd4, %rd2, %rd3;\n\tld.global.f32 %f1, [%rd4];\n\
         \tadd.f32 %f2, %f1, 0f3F800000;\n\tst.global.f32 [%rd4], %f2;\n\tadd.s32 %r2, %r2, 1;\n\
         \tsetp.lt.u32 %p1, %r2, %r1;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}}\n"
    )
}

/// REVISION 78's other shape: a `.reg` line inside a block comment gave loop versioning's own
/// register types a 16-bit induction variable, and the loop was left unversioned (at 4997502:
/// `gasan-ptx instrument` versions the plain module's loop and not the commented one's). With one
/// reader of register types the comment declares nothing there either: both modules get the same
/// versioned loop.
#[test]
fn a_reg_line_in_a_block_comment_does_not_change_loop_versioning() {
    let dir = scratch("declared-regs-loop-comment");
    for (n, opts, plain, commented) in with_and_without_comment(commented_loop_module) {
        assert!(commented.ptx.contains("$gasan_loop0:"), "{opts:?}: the loop is versioned");
        assert_eq!(without_comment(&plain.ptx, ".reg .b16 %r<6>;"), without_comment(&commented.ptx, ".reg .b16 %r<6>;"), "{opts:?}");
        assemble(&dir, &format!("l{n}"), &commented.ptx);
    }
}
