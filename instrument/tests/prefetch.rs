//! Shadow prefetch and batching: in a basic block with several checks, the shadow bytes are loaded
//! as soon as the addresses are known and tested together behind one branch before the block's
//! first access (ptxas will not move a load across a branch); what cannot join the batch is still
//! loaded ahead; single-block loops load the next iteration's byte one iteration ahead.

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

fn module(body: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 p)\n{{\n\t.reg .b64 %rd<10>;\n\t.reg .f32 %f<10>;\n\t.reg .pred %p<3>;\n\tld.param.u64 %rd1, [p];\n{body}\tret;\n}}\n"
    )
}

fn checked(body: &str, opts: InstrumentOptions) -> String {
    instrument_ptx(&module(body), &opts).unwrap().ptx
}

/// The text of the out-of-line block whose label starts with `label`, up to its `trap`.
fn block_at<'a>(ptx: &'a str, label: &str) -> &'a str {
    let at = ptx.find(&format!("\n{label}")).map(|p| p + 1).unwrap_or_else(|| panic!("{label} not in\n{ptx}"));
    &ptx[at..ptx[at..].find("trap;").map_or(ptx.len(), |e| at + e)]
}

fn per_access_branches(ptx: &str) -> usize {
    ptx.matches("@%gsp1 bra $gasan_fail_").count() - ptx.matches("@%gsp1 bra $gasan_fail_shared").count()
}

#[test]
fn a_block_s_checks_are_tested_together_behind_one_branch() {
    let body = "\tadd.s64 %rd2, %rd1, 4096;\n\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd2];\n\tld.global.f32 %f2, [%rd3];\n";
    let r = instrument_ptx(&module(body), &InstrumentOptions::default()).unwrap();
    let ptx = &r.ptx;
    assert_eq!(ptx.matches("bra $gasan_batch_").count(), 1, "{ptx}");
    assert_eq!(per_access_branches(ptx), 0, "no per-access branch left:\n{ptx}");
    // Both bytes loaded and tested before the branch, which precedes the first access.
    let branch = line_of(ptx, "bra $gasan_batch_");
    assert_eq!(ptx.lines().take(branch).filter(|l| l.contains("ld.global.nc.u8 %gsv")).count(), 2);
    assert!(ptx.lines().take(branch).any(|l| l.contains("or.pred %gsb")));
    assert!(branch < line_of(ptx, "ld.global.f32 %f1, [%rd2];"));
    // Each access keeps its own site (its own PTX line), and the recheck names both.
    let lines: Vec<u32> = r.sites.sites.iter().map(|s| s.ptx_line).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.contains(&13) && lines.contains(&14), "{lines:?}");
    let recheck = block_at(ptx, "$gasan_batch_");
    assert!(recheck.contains("mov.b64 %gsa0, %rd2;") && recheck.contains("mov.b64 %gsa0, %rd3;"), "{recheck}");
    assert_eq!(recheck.matches("bra $gasan_fail_shared").count(), 2);
    assert_eq!(r.stats.total().checked, 2);
}

#[test]
fn addresses_computed_after_the_first_check_join_through_recomputed_chains() {
    // %rd5 is computed after the first access from registers final before it: the batch
    // recomputes the chain into temporaries at the top of the block.
    let body = "\tmul.wide.s32 %rd2, %r1, 4;\n\tld.global.f32 %f1, [%rd1];\n\tadd.s64 %rd3, %rd1, %rd2;\n\tadd.s64 %rd5, %rd3, 64;\n\tld.global.f32 %f2, [%rd5];\n";
    let src = module(body).replace(".reg .pred %p<3>;", ".reg .pred %p<3>;\n\t.reg .b32 %r<3>;");
    let ptx = instrument_ptx(&src, &InstrumentOptions::default()).unwrap().ptx;
    let (mul, add1, add2) = (line_of(&ptx, "mul.wide.s32 %gst"), line_of(&ptx, "add.s64 %gst"), line_of(&ptx, "_1, 64;"));
    assert!(mul < add1 && add1 < add2, "the chain in order:\n{ptx}");
    assert!(add2 < line_of(&ptx, "bra $gasan_batch_"));
    // Originals untouched; the recheck reads the recomputed address.
    assert!(ptx.contains("\tadd.s64 %rd5, %rd3, 64;\n"));
    assert!(block_at(&ptx, "$gasan_batch_").contains("mov.b64 %gsa0, %gst"));
}

#[test]
fn batches_are_capped_and_the_rest_check_on_their_own() {
    let body: String = (0..12).map(|k| format!("\tld.global.f32 %f1, [%rd1+{}];\n", k * 1024)).collect();
    let ptx = checked(&body, InstrumentOptions::default());
    assert_eq!(ptx.matches("bra $gasan_batch_").count(), 1);
    assert_eq!(block_at(&ptx, "$gasan_batch_").matches("bra $gasan_fail_shared").count(), 8, "{ptx}");
    assert_eq!(per_access_branches(&ptx), 4);
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
fn no_prefetch_across_a_write_of_the_address_register_or_a_block_end() {
    // The address comes from the first load: nothing can be loaded earlier.
    let chased = "\tld.global.u64 %rd2, [%rd1];\n\tld.global.f32 %f1, [%rd2];\n";
    assert!(!checked(chased, InstrumentOptions::default()).contains("%gsv"));
    // A label between the accesses starts a new block.
    let label = "\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd1];\n$L1:\n\tld.global.f32 %f2, [%rd3];\n";
    assert!(!checked(label, InstrumentOptions::default()).contains("%gsv"));
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

/// Pipelining is what a loop gets without loop versioning (loops.rs), or in its checked copy.
fn pipelining() -> InstrumentOptions {
    InstrumentOptions { hoist_loops: false, ..Default::default() }
}

/// A grid-stride loop of one block: `%rd3` advances by `%rd2` each iteration.
const LOOP: &str = "\tmov.u64 %rd3, %rd1;\n$L__loop:\n\tshl.b64 %rd4, %rd3, 2;\n\tadd.s64 %rd5, %rd1, %rd4;\n\tld.global.f32 %f1, [%rd5];\n\tadd.f32 %f2, %f2, %f1;\n\tadd.s64 %rd3, %rd3, %rd2;\n\tsetp.lt.u64 %p1, %rd3, %rd6;\n\t@%p1 bra $L__loop;\n";

#[test]
fn single_block_loops_load_the_next_iteration_s_shadow_byte_ahead() {
    let ptx = checked(LOOP, pipelining());
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
    assert!(!checked(&entered, pipelining()).contains("%gsn"), "label reached from outside");
    let dense = LOOP.replace(
        "\tld.global.f32 %f1, [%rd5];\n",
        "\tld.global.f32 %f1, [%rd5];\n\tld.global.f32 %f3, [%rd5+4096];\n\tld.global.f32 %f4, [%rd5+8192];\n\tld.global.f32 %f5, [%rd5+12288];\n\tld.global.f32 %f6, [%rd5+16384];\n",
    );
    let ptx = checked(&dense, pipelining());
    assert!(!ptx.contains("%gsn"), "five checks in the body: plain prefetch only\n{ptx}");
    assert!(ptx.contains("%gsv"), "the plain in-block prefetch still applies");
}

#[test]
fn batched_loads_outside_loops_also_prefetch_their_data() {
    let body = "\tadd.s64 %rd2, %rd1, 4096;\n\tadd.s64 %rd3, %rd1, 8192;\n\tld.global.f32 %f1, [%rd2];\n\tst.global.f32 [%rd3], %f1;\n";
    // Without kernel-parameter bounds every check loads its shadow byte.
    let no_bounds = || InstrumentOptions { param_bounds: false, ..InstrumentOptions::default() };
    let ptx = checked(body, no_bounds());
    assert_eq!(ptx.matches("prefetch.L2 [%gsa0];").count(), 1, "the load only, not the store:\n{ptx}");
    assert!(line_of(&ptx, "prefetch.L2") < line_of(&ptx, "bra $gasan_batch_"));
    // Inside a loop (a branch back to a label above): no data prefetch.
    let looped = format!("$L__top:\n{body}\t@%p1 bra $L__top;\n");
    assert!(!checked(&looped, no_bounds()).contains("prefetch.L2"));
    // With the parameter's bounds the batch members branch past their shadow loads and encoding
    // tests (the first one leaving the batch predicate false); a batch of two keeps no data
    // prefetch, one of three keeps its loads'.
    let ptx = checked(body, InstrumentOptions::default());
    assert!(!ptx.contains("prefetch.L2"), "{ptx}");
    let three = format!("\tadd.s64 %rd4, %rd1, 12288;\n\tld.global.f32 %f2, [%rd4];\n{body}");
    let ptx3 = checked(&three, InstrumentOptions::default());
    assert_eq!(ptx3.matches("prefetch.L2 [%gsa0];").count(), 2, "the two loads of three members:\n{ptx3}");
    let first = line_of(&ptx, "mov.pred %gsb");
    let skip = line_of(&ptx, "@!%gsp0 bra $gasan_inb_p0;");
    assert!(ptx.lines().nth(first).unwrap().contains(", %gsp0;") && first + 1 == skip, "{ptx}");
    let label = line_of(&ptx, "$gasan_inb_p0:");
    let test = ptx.lines().enumerate().skip(skip).find(|(_, l)| l.contains("setp.le.u32 %gsp1") || l.contains("setp.lt.u32 %gsp1")).unwrap().0;
    assert!(skip < test && test < label, "the encoding test is on the skipped path:\n{ptx}");
}

/// A strided walk whose base comes from a load (transpose's tile fill: `p2 = p1 + s`, `p1` loaded
/// from a parameter and final at the first check): recomputing as far back as possible reaches
/// the load and fails, but only the stride and the later addresses need recomputing, so all four
/// accesses join one batch. (Transpose on the H100: 1.65x native before, 1.21x with it.)
#[test]
fn strided_addresses_from_a_loaded_base_join_the_batch() {
    // The base's own arithmetic (an offset added 11 times) is longer than a recompute chain may be.
    let base = "\tadd.s64 %rd3, %rd3, 16;\n".repeat(11);
    let body = "\tld.param.u64 %rd2, [p];\n\tcvta.to.global.u64 %rd3, %rd2;\n".to_string() + &base + "\tld.global.f32 %f1, [%rd3];\n\tshl.b32 %r2, %r1, 3;\n\tmul.wide.s32 %rd4, %r2, 4;\n\tadd.s64 %rd5, %rd3, %rd4;\n\tld.global.f32 %f2, [%rd5];\n\tadd.s64 %rd6, %rd5, %rd4;\n\tld.global.f32 %f3, [%rd6];\n\tadd.s64 %rd7, %rd6, %rd4;\n\tld.global.f32 %f4, [%rd7];\n";
    let src = module(&body).replace(".reg .pred %p<3>;", ".reg .pred %p<3>;\n\t.reg .b32 %r<3>;\n\tld.param.u32 %r1, [p];");
    let ptx = instrument_ptx(&src, &InstrumentOptions::default()).unwrap().ptx;
    assert_eq!(ptx.matches("bra $gasan_batch_").count(), 1, "{ptx}");
    assert_eq!(per_access_branches(&ptx), 0, "no per-access branch left:\n{ptx}");
    let branch = line_of(&ptx, "bra $gasan_batch_");
    assert_eq!(ptx.lines().take(branch).filter(|l| l.contains("ld.global.nc.u8 %gsv")).count(), 4);
    assert!(branch < line_of(&ptx, "ld.global.f32 %f1, [%rd3];"));
    // The originals are untouched, the recomputed chain reads the loaded base where it is final.
    assert!(ptx.contains("\tadd.s64 %rd7, %rd6, %rd4;\n"));
    assert!(ptx.lines().take(branch).any(|l| l.contains("add.s64 %gst") && l.contains("%rd3")), "{ptx}");
}

/// A back edge that shares its line with another statement is no back edge for the passes that
/// move code around it (Line::sole_instr): the loop is neither pipelined nor versioned, and its
/// access is still checked where it is. A loop whose entry is the last statement of a line of
/// several (`...; bra.uni`) is not entered by falling through.
#[test]
fn back_edges_sharing_their_line_are_left_alone() {
    let shared_edge = LOOP.replace("\tsetp.lt.u64 %p1, %rd3, %rd6;\n\t@%p1 bra $L__loop;\n", "\tsetp.lt.u64 %p1, %rd3, %rd6; @%p1 bra $L__loop;\n");
    for opts in [pipelining(), InstrumentOptions::default()] {
        let plain = checked(LOOP, opts);
        assert!(plain.contains("%gsn") || plain.contains("$gasan_loop"), "the one-statement back edge is transformed:\n{plain}");
        let ptx = checked(&shared_edge, opts);
        assert!(!ptx.contains("%gsn") && !ptx.contains("$gasan_loop"), "{opts:?}:\n{ptx}");
        let r = instrument_ptx(&module(&shared_edge), &opts).unwrap();
        assert_eq!(r.stats.total().checked, 1, "{opts:?}");
        assert!(ptx.contains("\tsetp.lt.u64 %p1, %rd3, %rd6; @%p1 bra $L__loop;\n"), "the line kept as written:\n{ptx}");
    }
    // The statement before the label jumps away at the end of a line of several: the loop is not
    // entered by falling through, so nothing is placed in a preheader (the line's first statement
    // decided this before, and the loop was pipelined).
    let fall = LOOP.replacen("\tmov.u64 %rd3, %rd1;\n", "\tmov.u64 %rd3, %rd1;\n\tadd.s64 %rd7, %rd1, 1; bra.uni $L__out;\n", 1);
    let jumped = format!("{fall}$L__out:\n");
    assert!(checked(&format!("{LOOP}$L__out:\n"), pipelining()).contains("%gsn"));
    assert!(!checked(&jumped, pipelining()).contains("%gsn"), "{}", checked(&jumped, pipelining()));
}
