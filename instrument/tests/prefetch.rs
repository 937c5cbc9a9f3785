//! Shadow prefetch: in a basic block with several checks, the shadow byte of a later access is
//! loaded as soon as its address register holds its final value, ahead of the earlier checks'
//! branches (which ptxas will not move a load across).

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

fn module(body: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n\t.reg .b64 %rd<10>;\n\t.reg .f32 %f<10>;\n\t.reg .pred %p<3>;\n\tld.param.u64 %rd1, [p];\n{body}\tret;\n}}\n"
    )
}

fn checked(body: &str, opts: InstrumentOptions) -> String {
    instrument_ptx(&module(body), &opts).unwrap().ptx
}

/// Index of the last line before `before` containing `needle`.
fn last_before(ptx: &str, before: usize, needle: &str) -> Option<usize> {
    ptx.lines().collect::<Vec<_>>()[..before].iter().rposition(|l| l.contains(needle))
}

/// Index (in lines) of the first line containing `needle`.
fn line_of(ptx: &str, needle: &str) -> usize {
    ptx.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle} not in\n{ptx}"))
}

#[test]
fn a_later_load_s_shadow_is_loaded_before_the_first_check_branch() {
    let body = "\tadd.s64 %rd2, %rd1, 4096;\n\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd2];\n\tld.global.f32 %f2, [%rd3];\n";
    let ptx = checked(body, InstrumentOptions::default());
    assert_eq!(ptx.matches(".reg .b32 %gsv").count(), 1, "only the second access gains from a prefetch:\n{ptx}");
    let prefetch = line_of(&ptx, "ld.global.nc.u8 %gsv");
    assert!(prefetch > line_of(&ptx, "add.s64 %rd3, %rd1, 8192;"), "after its address is final");
    assert!(prefetch < line_of(&ptx, "@%gsp1 bra $gasan_fail_0"), "before the first check's branch");
    // The second check compares the prefetched byte, and still guards its own access.
    let second_branch = line_of(&ptx, "@%gsp1 bra $gasan_fail_1");
    let compare = last_before(&ptx, second_branch, "setp.le.u32 %gsp1, %gsv").expect("compare of the prefetched byte");
    assert!(compare > line_of(&ptx, "ld.global.f32 %f1, [%rd2];"));
    assert!(second_branch < line_of(&ptx, "ld.global.f32 %f2, [%rd3];"));
}

#[test]
fn no_prefetch_across_a_write_of_the_address_register_or_a_block_end() {
    // The address comes from the first load: nothing can be loaded earlier.
    let chased = "\tld.global.u64 %rd2, [%rd1];\n\tld.global.f32 %f1, [%rd2];\n";
    assert!(!checked(chased, InstrumentOptions::default()).contains("%gsv"));
    // A label between the accesses starts a new block.
    let label = "\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd1];\n$L1:\n\tld.global.f32 %f2, [%rd3];\n";
    assert!(!checked(label, InstrumentOptions::default()).contains("%gsv"));
}

#[test]
fn prefetch_lands_after_the_last_write_even_between_checks() {
    let body = "\tld.global.f32 %f1, [%rd1];\n\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f2, [%rd1+1024];\n\tld.global.f32 %f3, [%rd3];\n";
    let ptx = checked(body, InstrumentOptions::default());
    assert_eq!(ptx.matches(".reg .b32 %gsv").count(), 2, "[%rd1+1024] and [%rd3]:\n{ptx}");
    let prefetch = line_of(&ptx, "mov.b64 %gsa0, %rd3;");
    assert!(prefetch > line_of(&ptx, "add.s64 %rd3, %rd1, 8192;"));
    assert!(prefetch < line_of(&ptx, "ld.global.f32 %f2, [%rd1+1024];"));
}

#[test]
fn predicated_accesses_keep_their_guard_at_the_compare() {
    let body = "\tadd.s64 %rd3, %rd1, 8192;\n\tsetp.ne.u64 %p1, %rd1, 0;\n\tld.global.f32 %f1, [%rd1];\n\t@%p1 ld.global.f32 %f2, [%rd3];\n";
    let ptx = checked(body, InstrumentOptions::default());
    assert!(ptx.contains("ld.global.nc.u8 %gsv"), "{ptx}");
    let branch = line_of(&ptx, "@%gsp1 bra $gasan_fail_1");
    let guard = last_before(&ptx, branch, "and.pred %gsp1, %gsp1, %gsp3").expect("guard applied");
    assert!(guard > line_of(&ptx, "ld.global.f32 %f1, [%rd1];"));
}

#[test]
fn only_halt_mode_with_optimization_prefetches() {
    let body = "\tadd.s64 %rd2, %rd1, 4096;\n\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd2];\n\tld.global.f32 %f2, [%rd3];\n";
    assert!(!checked(body, InstrumentOptions { optimize: false, ..Default::default() }).contains("%gsv"));
    assert!(!checked(body, InstrumentOptions { recover: true, ..Default::default() }).contains("%gsv"));
}

#[test]
fn address_arithmetic_after_a_check_is_recomputed_ahead_of_it() {
    // %rd5 is computed after the first check from registers final before it: the prefetch
    // recomputes the chain into temporaries at the top of the block.
    let body = "\tmul.wide.s32 %rd2, %r1, 4;\n\tld.global.f32 %f1, [%rd1];\n\tadd.s64 %rd3, %rd1, %rd2;\n\tadd.s64 %rd5, %rd3, 64;\n\tld.global.f32 %f2, [%rd5];\n";
    let src = module(body).replace(".reg .pred %p<3>;", ".reg .pred %p<3>;\n\t.reg .b32 %r<3>;");
    let ptx = instrument_ptx(&src, &InstrumentOptions::default()).unwrap().ptx;
    // The whole chain back to %r1 (never written in the block) is recomputed, in order.
    let (mul, add1, add2) = (line_of(&ptx, "mul.wide.s32 %gst"), line_of(&ptx, "add.s64 %gst"), line_of(&ptx, "_1, 64;"));
    assert!(mul < add1 && add1 < add2, "{ptx}");
    assert!(ptx.contains(&format!("add.s64 %gst{0}_2, %gst{0}_1, 64;", ptx.split("%gsv").nth(1).unwrap().split(';').next().unwrap())), "{ptx}");
    assert!(line_of(&ptx, "ld.global.nc.u8 %gsv") < line_of(&ptx, "@%gsp1 bra $gasan_fail_0"), "{ptx}");
    // Originals untouched.
    assert!(ptx.contains("\tadd.s64 %rd5, %rd3, 64;\n"));
    // A chain through a load's result cannot move above that load.
    let chased = "\tld.global.u64 %rd2, [%rd1];\n\tadd.s64 %rd3, %rd2, 8;\n\tld.global.f32 %f2, [%rd3];\n";
    assert!(!checked(chased, InstrumentOptions::default()).contains("%gsv"));
}

/// A grid-stride loop of one block: `%rd3` advances by `%rd2` each iteration.
const LOOP: &str = "\tmov.u64 %rd3, %rd1;\n$L__loop:\n\tshl.b64 %rd4, %rd3, 2;\n\tadd.s64 %rd5, %rd1, %rd4;\n\tld.global.f32 %f1, [%rd5];\n\tadd.f32 %f2, %f2, %f1;\n\tadd.s64 %rd3, %rd3, %rd2;\n\tsetp.lt.u64 %p1, %rd3, %rd6;\n\t@%p1 bra $L__loop;\n";

#[test]
fn single_block_loops_load_the_next_iteration_s_shadow_byte_ahead() {
    let ptx = checked(LOOP, InstrumentOptions::default());
    let label = line_of(&ptx, "$L__loop:");
    let edge = line_of(&ptx, "@%p1 bra $L__loop;");
    // Preheader: declares both registers and loads the first iteration's byte.
    let decl = line_of(&ptx, ".reg .b32 %gsv");
    assert!(decl < label && ptx.lines().nth(decl + 1).unwrap().contains(".reg .b32 %gsn"), "{ptx}");
    assert!(line_of(&ptx, "ld.global.nc.u8 %gsv") < label);
    // Top of the body: the next iteration's address, with the induction step applied first.
    let next = line_of(&ptx, "ld.global.nc.u8 %gsn");
    assert!(label < next && next < line_of(&ptx, "shl.b64 %rd4, %rd3, 2;"), "{ptx}");
    let first_in_body = ptx.lines().skip(label).find(|l| l.contains("%gst") && !l.contains(".reg")).unwrap();
    assert!(first_in_body.contains("add.s64 %gst") && first_in_body.contains("%rd3, %rd2;"), "induction step recomputed first:\n{ptx}");
    // The check compares the current byte; the back edge moves the next one into place.
    assert!(ptx.contains("setp.le.u32 %gsp1, %gsv"));
    let mv = line_of(&ptx, "mov.b32 %gsv");
    assert!(mv > line_of(&ptx, "ld.global.f32 %f1, [%rd5];") && mv + 1 == edge, "{ptx}");
}

#[test]
fn loops_entered_elsewhere_or_dense_with_accesses_are_not_pipelined() {
    let entered = format!("\t@%p2 bra $L__loop;\n{LOOP}");
    assert!(!checked(&entered, InstrumentOptions::default()).contains("%gsn"), "label reached from outside");
    let dense = LOOP.replace(
        "\tld.global.f32 %f1, [%rd5];\n",
        "\tld.global.f32 %f1, [%rd5];\n\tld.global.f32 %f3, [%rd5+4096];\n\tld.global.f32 %f4, [%rd5+8192];\n\tld.global.f32 %f5, [%rd5+12288];\n\tld.global.f32 %f6, [%rd5+16384];\n",
    );
    let ptx = checked(&dense, InstrumentOptions::default());
    assert!(!ptx.contains("%gsn"), "five checks in the body: plain prefetch only\n{ptx}");
    assert!(ptx.contains("%gsv"), "the plain in-block prefetch still applies");
}
