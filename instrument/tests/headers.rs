//! A function's header is read by one parser (ptx/ir/func.rs) in every pass. Until REVISION 71
//! the pass that finds bodies named them by its own reading, which found `.entry` and `.func`
//! anywhere in a line's text, while the frame-top pass read directive words: `.entryk(` (no space;
//! ptxas reads one unknown directive `.entryk`) was a kernel `k` to the one and no header to the
//! other. It is no header now, to every pass: its text passes through unchecked, as any text
//! outside a function does (ptxas refuses the module either way).

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, MARKER};

/// A kernel storing through its parameter, its header's first line written as `head`.
fn module(head: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n{head}(.param .u64 p)\n{{\n\t.reg .b64 %rd<3>;\n\
         \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tst.global.u32 [%rd2], 0;\n\tret;\n}}\n"
    )
}

#[test]
fn a_directive_glued_to_a_name_declares_no_function_to_any_pass() {
    for opts in [InstrumentOptions::default(), InstrumentOptions { optimize: false, ..Default::default() }, InstrumentOptions { param_bounds: false, ..Default::default() }] {
        // The header as PTX writes it: a kernel `k`, its store checked.
        for head in [".visible .entry k", ".entry\tk", ".visible .entry k "] {
            let r = instrument_ptx(&module(head), &opts).unwrap();
            let t = r.stats.total();
            assert_eq!((t.found, t.checked), (1, 1), "{head:?}");
            assert_eq!(r.stats.functions.keys().collect::<Vec<_>>(), ["k"], "{head:?}");
        }
        // Glued: no function, nothing found or checked, the text unchanged.
        for head in [".visible .entryk", ".entryk", ".visible .funck"] {
            let input = module(head);
            let r = instrument_ptx(&input, &opts).unwrap();
            let t = r.stats.total();
            assert_eq!((t.found, t.checked), (0, 0), "{head:?}");
            assert!(r.stats.functions.is_empty(), "{head:?}: {:?}", r.stats.functions);
            let original: Vec<&str> = r.ptx.lines().filter(|l| !l.contains(MARKER)).filter(|l| input.lines().any(|i| i == *l)).collect();
            assert_eq!(original.len(), input.lines().count(), "{head:?}: every input line is in the output");
            let after_header = r.ptx.split("(.param .u64 p)").nth(1).unwrap();
            assert!(!after_header.contains(MARKER), "{head:?}: nothing added past the header");
        }
    }
}
