//! A statement that ends the elimination window (a barrier, a fence, a call) ends it wherever it
//! stands on its line: inline asm writes its statements on one line (`mov.u32 %r3, 0; bar.sync
//! 0;`), and until REVISION 70 only a line's first statement was asked, so a later access to an
//! address checked before the barrier lost its check (memory freed by another thread while this
//! one waited went unreported).

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

/// A kernel that loads from the same address before and after `between`.
fn module(between: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n\
         \t.reg .b32 %r<4>;\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<3>;\n\
         \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
         \tld.global.f32 %f1, [%rd2];\n{between}\tld.global.f32 %f2, [%rd2];\n\tret;\n}}\n"
    )
}

#[test]
fn a_barrier_after_another_statement_on_its_line_ends_the_elimination_window() {
    let opts = InstrumentOptions::default();
    let checked = |between: &str| {
        let t = instrument_ptx(&module(between), &opts).unwrap().stats.total();
        (t.checked, t.eliminated)
    };
    // Nothing between the loads: the second is covered by the first's check.
    assert_eq!(checked("\tmov.u32 %r3, 0;\n"), (1, 1));
    for between in ["\tbar.sync 0;\n", "\tmov.u32 %r3, 0; bar.sync 0;\n", "\tmov.u32 %r3, 0; membar.gl;\n", "\tmov.u32 %r3, 0; fence.acq_rel.gpu;\n", "\tmov.u32 %r3, 0;  ; barrier.sync 0;\n"] {
        assert_eq!(checked(between), (2, 0), "{between:?}");
    }
    // Several statements none of which ends the window keep the elimination.
    assert_eq!(checked("\tmov.u32 %r3, 0; add.s32 %r3, %r3, 1;\n"), (1, 1));
}
