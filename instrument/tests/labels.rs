//! A label sharing its line with the statement it names (`L: ld.global.f32 ...`, legal PTX that
//! inline asm can write) is a label to every pass: its access is checked, a block begins there
//! (no check before it covers the access, which a jump to the label reaches), and the checked
//! PTX is the one of the same module with the label on a line of its own (issue 37, defect 3).

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use gasan_instrument::shadow::Scale;

/// A loop whose head is labelled: the access at the label reads the address an access before
/// the loop checked; the back edge reaches it with the address moved on.
fn module(label_line: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p, .param .u32 n)\n{{\n\
         \t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<4>;\n\t.reg .f32 %f<3>;\n\
         \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [n];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r2, 0;\n\
         \tld.global.f32 %f1, [%rd2];\n{label_line}\tadd.s32 %r2, %r2, 1;\n\tadd.s64 %rd2, %rd2, 4;\n\
         \tsetp.lt.s32 %p1, %r2, %r1;\n\t@%p1 bra L;\n\tst.global.f32 [%rd2], %f2;\n\tret;\n}}\n"
    )
}

fn option_sets() -> [InstrumentOptions; 5] {
    [
        InstrumentOptions::default(),
        InstrumentOptions { scale: Scale::S7, hoist_loops: false, ..Default::default() },
        InstrumentOptions { optimize: false, recover: true, ..Default::default() },
        InstrumentOptions { outside_checks: true, aligned_pool: true, ..Default::default() },
        InstrumentOptions { param_bounds: false, ..Default::default() },
    ]
}

#[test]
fn a_label_sharing_its_line_with_an_access_is_a_label() {
    let shared = module("\tL: ld.global.f32 %f2, [%rd2];\n");
    let own_line = module("\tL:\n\tld.global.f32 %f2, [%rd2];\n");
    let dir = scratch("label-sharing-line");
    for (n, opts) in option_sets().into_iter().enumerate() {
        let a = instrument_ptx(&shared, &opts).unwrap();
        let b = instrument_ptx(&own_line, &opts).unwrap();
        let (ta, tb) = (a.stats.total(), b.stats.total());
        assert_eq!((ta.found, ta.unknown), (3, 0), "{opts:?}: {ta:?}");
        assert_eq!(ta, tb, "{opts:?}: the same counts as the label on its own line");
        // The access at the label is checked (no check before the label covers it), at its line.
        assert!(a.sites.sites.iter().any(|s| s.ptx_line == 15), "{opts:?}: {:?}", a.sites.sites);
        assert_eq!(ta.checked + ta.eliminated, 3, "{opts:?}: {ta:?}");
        assert_eq!(ta.eliminated, 0, "{opts:?}: the label's access is reached by a jump: {ta:?}");
        // The same checked PTX as the clean twin; its sites one line earlier from the label on.
        assert_eq!(a.ptx, b.ptx, "{opts:?}");
        let lines = |r: &gasan_instrument::ptx::Instrumented| r.sites.sites.iter().map(|s| s.ptx_line).collect::<Vec<_>>();
        let shifted: Vec<u32> = lines(&b).into_iter().map(|l| if l > 15 { l - 1 } else { l }).collect();
        assert_eq!(lines(&a), shifted, "{opts:?}");
        assemble(&dir, &format!("k{n}"), &a.ptx);
    }
}

/// Errors name the input's lines, not those of the text the passes read.
#[test]
fn errors_after_a_shared_label_name_input_lines() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tL: ret;\n\tM: ret;\n}\n}\n";
    let err = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap_err();
    assert_eq!(err, gasan_instrument::ptx::PtxError::Unbalanced(9), "{err}");
}

/// A declaration sharing its line with the statements after it (`.reg .f32 %f; ld.global.f32 %f,
/// [%rd2];`, as hand-written PTX may lay it out) hides none of them: each access is found and
/// checked, and the checked PTX assembles. (Before REVISION 76 a line that began with a directive
/// was passed over whole, its accesses silently unchecked.)
#[test]
fn a_declaration_sharing_its_line_hides_no_access() {
    let module = |line: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n\
             \t.reg .b64 %rd<4>;\n\t.reg .f32 %f<3>;\n\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
             {line}\tst.global.f32 [%rd2+8], %f1;\n\tret;\n}}\n"
        )
    };
    let shared = module("\t.reg .f32 %g; ld.global.f32 %g, [%rd2+4]; add.f32 %f1, %g, %g;\n");
    let own_lines = module("\t.reg .f32 %g;\n\tld.global.f32 %g, [%rd2+4];\n\tadd.f32 %f1, %g, %g;\n");
    let dir = scratch("directive-sharing-line");
    for (n, opts) in option_sets().into_iter().enumerate() {
        let a = instrument_ptx(&shared, &opts).unwrap();
        let b = instrument_ptx(&own_lines, &opts).unwrap();
        let (ta, tb) = (a.stats.total(), b.stats.total());
        assert_eq!((ta.found, ta.unknown), (2, 0), "{opts:?}: {ta:?}");
        assert_eq!(ta, tb, "{opts:?}: the same counts as the statements on lines of their own");
        // The load is checked at its line (the shared line, 10).
        assert!(a.sites.sites.iter().any(|s| s.ptx_line == 10), "{opts:?}: {:?}", a.sites.sites);
        assemble(&dir, &format!("k{n}"), &a.ptx);
    }
}

/// A function whose body's opening brace shares the header's line with statements
/// (`.entry k(.param .u64 p) { .reg .b64 %rd<4>;`) is a function to every pass: its accesses are
/// found and checked, as with the brace ending its line. (Before REVISION 77 no pass found such a
/// function, and its accesses went unchecked and uncounted.)
#[test]
fn a_body_brace_sharing_its_line_hides_no_function() {
    let module = |open: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p){open}\
             \t.reg .f32 %f<3>;\n\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
             \tld.global.f32 %f1, [%rd2];\n\tst.global.f32 [%rd2+8], %f1;\n\tret;\n}}\n"
        )
    };
    let shared = module(" { .reg .b64 %rd<4>;\n");
    let own_line = module("\n{\n.reg .b64 %rd<4>;\n");
    let dir = scratch("brace-sharing-line");
    for (n, opts) in option_sets().into_iter().enumerate() {
        let a = instrument_ptx(&shared, &opts).unwrap();
        let b = instrument_ptx(&own_line, &opts).unwrap();
        let (ta, tb) = (a.stats.total(), b.stats.total());
        assert_eq!((ta.found, ta.unknown), (2, 0), "{opts:?}: {ta:?}");
        assert_eq!(ta, tb, "{opts:?}: the same counts as the brace on a line of its own");
        assert_eq!(a.sites.sites.iter().map(|s| s.ptx_line).collect::<Vec<_>>(), b.sites.sites.iter().map(|s| s.ptx_line - 2).collect::<Vec<_>>(), "{opts:?}: sites name the input's lines");
        assemble(&dir, &format!("k{n}"), &a.ptx);
    }
}
