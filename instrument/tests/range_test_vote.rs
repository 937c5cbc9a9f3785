//! The exit of a loop's range test (loops.rs `Emitter::leave_unless_ok`) and, in functions that
//! wait for `wgmma` groups, the place of each check's branch to its report (emit.rs
//! `Form::fails_after_joins`): both keep ptxas from treating the code after them as divergent,
//! which cost the pipelined matmul's fast loop its uniform registers (jit/FORMS.md item 9).

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

/// A counted loop over a buffer in a module of PTX `version` for `target`.
fn loop_module(version: &str, target: &str) -> String {
    format!(
        ".version {version}\n.target {target}\n.address_size 64\n.visible .entry k(.param .u64 p, .param .u32 n)\n{{\n\
         \t.reg .pred %p<3>;\n\t.reg .f32 %f<3>;\n\t.reg .b32 %r<6>;\n\t.reg .b64 %rd<6>;\n\
         \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [n];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r2, 0;\n\
         $L__BB0_1:\n\tmul.wide.u32 %rd3, %r2, 4;\n\tadd.s64 %rd4, %rd2, %rd3;\n\tld.global.f32 %f1, [%rd4];\n\
         \tadd.f32 %f2, %f1, 0f3F800000;\n\tst.global.f32 [%rd4], %f2;\n\tadd.s32 %r2, %r2, 1;\n\
         \tsetp.lt.u32 %p1, %r2, %r1;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}}\n"
    )
}

/// The range test's lines: from the first control-block load to the fast copy's label.
fn range_test(checked: &str) -> &str {
    let end = checked.find("$gasan_loop0:").expect("the loop is versioned");
    let start = checked[..end].rfind("ld.const.u64").expect("a range test");
    &checked[start..end]
}

#[test]
fn the_warp_votes_on_the_range_test_where_ptx_has_activemask() {
    let dir = scratch("range-test-vote");
    for (version, target, votes) in [("8.0", "sm_90", true), ("6.2", "sm_70", true), ("6.1", "sm_70", false)] {
        let checked = instrument_ptx(&loop_module(version, target), &InstrumentOptions::default()).unwrap().ptx;
        let test = range_test(&checked);
        let exits: Vec<&str> = test.lines().filter(|l| l.contains("bra") && l.contains("$L__BB0_1")).collect();
        assert_eq!(exits.len(), 1, "{version}: one exit to the checked loop:\n{test}");
        if votes {
            // The verdict is and-ed over the active lanes right before the uniform branch on it.
            let lines: Vec<&str> = test.lines().map(str::trim).collect();
            let at = lines.iter().position(|l| l.contains("bra.uni $L__BB0_1;")).expect("a uniform exit");
            assert!(lines[at - 1].starts_with("vote.sync.all.pred ") && lines[at - 2].starts_with("activemask.b32 "), "{version}:\n{test}");
            let ok = lines[at].trim_start_matches("@!").split(' ').next().unwrap();
            assert!(lines[at - 1].starts_with(&format!("vote.sync.all.pred {ok}, {ok}, ")), "{version}: the vote is over the test's own predicate:\n{test}");
        } else {
            assert!(!test.contains("activemask") && !test.contains("vote.") && exits[0].contains(" bra $L__BB0_1;"), "{version}: no activemask before PTX 6.2:\n{test}");
        }
        assemble(&dir, &format!("v{}", version.replace('.', "_")), &checked);
    }
}

#[test]
fn in_wgmma_functions_no_report_branch_leaves_a_fast_path_skip() {
    // Triton's pipelined matmul (tests/data/triton_matmul_hinted.ptx) waits for wgmma groups;
    // a CUDA kernel with a parameter fast path does not, and keeps the form that skips the
    // encoding test too.
    let inside = |checked: &str| -> usize {
        let mut open: Option<String> = None;
        let mut n = 0;
        for l in checked.lines().map(str::trim) {
            if let Some(label) = l.strip_prefix("@!%gsp0 bra ").and_then(|r| r.split(';').next()).filter(|l| l.starts_with("$gasan_inb_")) {
                open = Some(label.to_string());
            } else if open.as_deref().is_some_and(|o| l.starts_with(&format!("{o}:"))) {
                open = None;
            } else if open.is_some() && l.contains(" bra $gasan_fail_") {
                n += 1;
            }
        }
        n
    };
    let skips = |checked: &str| checked.matches("bra $gasan_inb_").count();
    let matmul = instrument_ptx(include_str!("data/triton_matmul_hinted.ptx"), &InstrumentOptions::default()).unwrap().ptx;
    assert!(skips(&matmul) > 0, "the matmul's checks have fast paths");
    assert_eq!(inside(&matmul), 0, "a report branch inside a fast path's skip in a wgmma function");
    let dir = scratch("range-test-vote-cuda");
    let cuda = nvcc_ptx_of(&dir, "k", "__global__ void k(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f; }");
    let checked = instrument_ptx(&cuda, &InstrumentOptions::default()).unwrap().ptx;
    assert!(skips(&checked) > 0 && inside(&checked) > 0, "a kernel without wgmma keeps its branches inside the skips:\n{checked}");
}
