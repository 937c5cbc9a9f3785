//! A module rewritten in parts on several threads (`instrument_ptx_threads`) is the module
//! rewritten in one piece: the same checked PTX, site table, statistics and parameter tags (or the
//! same error), for the repository's PTX fixtures, the identity corpus when it has been built, and
//! generated modules of many functions.

#[path = "common/adversarial.rs"]
mod adversarial;
use gasan_instrument::ptx::{instrument_ptx_threads, InstrumentOptions};
use gasan_instrument::shadow::Scale;
use proptest::prelude::*;
use std::path::Path;

/// The option sets of `instrument/identical.sh`.
fn option_sets() -> Vec<InstrumentOptions> {
    let d = InstrumentOptions::default();
    vec![
        d,
        InstrumentOptions { scale: Scale::S7, ..d },
        InstrumentOptions { optimize: false, ..d },
        InstrumentOptions { recover: true, ..d },
        InstrumentOptions { hoist_loops: false, ..d },
        InstrumentOptions { aligned_pool: true, ..d },
    ]
}

/// Rewrites `ptx` in one piece and in up to each of `threads` parts; panics naming `what` on the
/// first difference.
fn assert_same(what: &str, ptx: &str, opts: &InstrumentOptions, threads: &[usize]) {
    let one = instrument_ptx_threads(ptx, opts, 1);
    for &n in threads {
        let parts = instrument_ptx_threads(ptx, opts, n);
        match (&one, &parts) {
            (Ok(a), Ok(b)) => {
                assert!(a.ptx == b.ptx, "{what} {opts:?}: checked PTX differs with {n} threads");
                assert_eq!(a.sites, b.sites, "{what} {opts:?}: site table differs with {n} threads");
                assert_eq!(a.stats, b.stats, "{what} {opts:?}: statistics differ with {n} threads");
                assert_eq!(a.param_tags, b.param_tags, "{what} {opts:?}: parameter tags differ with {n} threads");
            }
            (a, b) => assert_eq!(a.as_ref().err(), b.as_ref().err(), "{what} {opts:?}: result differs with {n} threads"),
        }
    }
}

fn ptx_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "ptx")).collect();
    v.sort();
    v
}

#[test]
fn fixtures_rewritten_in_parts_are_rewritten_in_one_piece() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["tests/corpus", "tests/data", "../fuzz/seeds/ptx_rewrite", "../.cache/identical-corpus"] {
        files.extend(ptx_files(&root.join(dir)));
    }
    assert!(files.len() >= 3, "fixtures missing");
    for f in &files {
        let ptx = std::fs::read_to_string(f).unwrap();
        for opts in option_sets() {
            assert_same(&f.display().to_string(), &ptx, &opts, &[2, 3, 64]);
        }
    }
}

/// One function of a generated module: an adversarial shape's kernel renamed `k{i}`, or a function
/// touching a shared variable of the module.
fn function(i: usize, shape: u8, n: usize) -> String {
    let module = match shape {
        0 => adversarial::loads_one_block(n),
        1 => adversarial::many_loops(n),
        2 => adversarial::many_labels(n),
        3 => adversarial::nested_loops(n),
        4 => adversarial::bases_one_block(n),
        5 => adversarial::huge_function(n),
        _ => adversarial::kernel(4, &format!("\tmov.u64 %rd3, sh{i};\n\tst.shared.u32 [%rd3+8], %r1;\n\tld.shared.u32 %r2, [sh{i}+{}];\n\tld.global.u32 %r3, [%rd2];\n", (n % 16) * 4)),
    };
    let body = &module[module.find(".visible").expect("a kernel")..];
    let shared = if shape > 5 { format!(".shared .align 4 .b8 sh{i}[64];\n") } else { String::new() };
    format!("{shared}{}\n", body.replace(".entry k(", &format!(".entry k{i}(")).replace("k_param_0", &format!("k{i}_param_0")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn generated_modules_rewritten_in_parts_are_rewritten_in_one_piece(
        functions in prop::collection::vec((0u8..7, 1usize..12), 1..9),
        threads in 2usize..6,
        opts in prop::sample::select(option_sets()),
    ) {
        let mut ptx = String::from(".version 8.0\n.target sm_90\n.address_size 64\n\n");
        for (i, &(shape, n)) in functions.iter().enumerate() {
            ptx.push_str(&function(i, shape, n));
        }
        assert_same("generated module", &ptx, &opts, &[threads]);
    }
}
