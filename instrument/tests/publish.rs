//! How report blocks publish error records. ptxas keeps a kernel's result-less `atom` as `ATOMG`
//! instead of `REDG` when the kernel, or a function it calls, holds a `fence.sc` / `fence.acq_rel`
//! (ptxas 13.0, sm_90; benches/results/variants.md: histogram 1.32x native with the fences, 1.00x
//! without). So on targets with the PTX memory model no checked module may hold such a fence: the
//! records are published with release stores. Older targets keep `membar.sys`.

mod common;

use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, MARKER};
use gasan_instrument::shadow::Scale;

/// Global, shared and local accesses and a result-less atomic: every kind of report (the module's
/// global and shared/local report functions, the slow-path function).
const SRC: &str = r#"
__global__ void histo(unsigned* h, const unsigned* x, int n, int j) {
    __shared__ unsigned s[256];
    unsigned local[8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = x[i];
    __syncthreads();
    if (i < n) atomicAdd(&h[s[(threadIdx.x + j) % 256] % 4096], 1u);
    for (int q = 0; q < 8; q++) local[q] = x[q + j];
    h[1] += local[j & 15];
}
"#;

/// The same with a device-heap allocation: gasan's heap functions order their header and shadow
/// writes before the pointer escapes, with `fence.release.gpu` where the PTX version has it and
/// `membar.gl` before (the one sc fence a checked module may then hold).
const HEAP_SRC: &str = r#"
__global__ void histo(unsigned* h, const unsigned* x, int n, int j) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&h[x[i] % 4096], 1u);
    if (j == 99) { void* p = malloc(16); free(p); }
}
"#;

fn option_sets() -> Vec<InstrumentOptions> {
    let halt = InstrumentOptions::default();
    vec![halt, InstrumentOptions { recover: true, ..halt }, InstrumentOptions { aligned_pool: true, scale: Scale::S7, ..halt }]
}

/// `ptx` (nvcc's, PTX 9.0) declared as PTX `version`.
fn at_version(ptx: &str, version: &str) -> String {
    let at = ptx.replacen(".version 9.0", &format!(".version {version}"), 1);
    assert_ne!(at, ptx, "nvcc's header changed: update the test");
    at
}

/// How many lines of `ptx` hold `needle`.
fn lines_with(ptx: &str, needle: &str) -> usize {
    ptx.lines().filter(|l| l.contains(needle)).count()
}

/// The lines gasan added that order memory with a fence.
fn added_fences(ptx: &str) -> Vec<&str> {
    ptx.lines().filter(|l| l.contains(MARKER)).filter(|l| ["fence.sc", "fence.acq_rel", "membar"].iter().any(|f| l.contains(f))).collect()
}

#[test]
fn checked_modules_hold_no_fence_that_keeps_atomics_from_reducing() {
    let dir = scratch("publish");
    let ptx = nvcc_ptx_of(&dir, "histo", SRC);
    for (k, opts) in option_sets().into_iter().enumerate() {
        let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
        assert_eq!(added_fences(&out), Vec::<&str>::new(), "{opts:?}");
        // Every record writer publishes its record with release fences (PTX 9.0, sm_90): three
        // each. Halt mode: the slow-path function and the module's global and shared/local
        // report functions; recover mode: the kernel calls the slow-path function.
        let releases = lines_with(&out, "fence.release.sys;");
        let blocks = if opts.recover { 1 } else { 3 };
        assert!(releases >= 3 * blocks, "{releases} release fences, {opts:?}");
        assemble(&dir, &format!("histo{k}"), &out);
        // PTX 8.5 has no release fence: each field store is a release and the sequence number an
        // exchange.
        let out = instrument_ptx(&at_version(&ptx, "8.5"), &opts).unwrap().ptx;
        assert_eq!(added_fences(&out), Vec::<&str>::new(), "8.5, {opts:?}");
        assert!(!out.contains("fence.release"), "8.5, {opts:?}");
        let exchanges = lines_with(&out, "atom.release.sys.global.exch.b32");
        let stores = out.lines().filter(|l| l.contains(MARKER) && l.contains("st.release.sys.global.")).count();
        assert!(exchanges >= blocks, "{exchanges} report blocks, 8.5, {opts:?}");
        assert_eq!(stores, 10 * exchanges, "8.5, {opts:?}");
        assemble(&dir, &format!("histo{k}_85"), &out);
    }
}

#[test]
fn heap_functions_order_with_release_fences() {
    let dir = scratch("publish_heap");
    let ptx = nvcc_ptx_of(&dir, "heap", HEAP_SRC);
    for (k, opts) in option_sets().into_iter().enumerate() {
        let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
        assert!(out.contains("__gasan_heap_alloc"), "the module routes its heap calls through gasan's heap ({opts:?})");
        assert_eq!(added_fences(&out), Vec::<&str>::new(), "{opts:?}");
        assert_eq!(lines_with(&out, "fence.release.gpu;"), 2, "alloc and free ({opts:?})");
        assemble(&dir, &format!("heap{k}"), &out);
        // Before PTX 8.6: `membar.gl`, and no other fence.
        let out = instrument_ptx(&at_version(&ptx, "8.5"), &opts).unwrap().ptx;
        let fences = added_fences(&out);
        assert_eq!(fences.len(), 2, "{fences:?} ({opts:?})");
        assert!(fences.iter().all(|l| l.trim_start().starts_with("membar.gl;")), "{fences:?} ({opts:?})");
    }
}

#[test]
fn targets_before_the_memory_model_publish_with_membar() {
    let dir = scratch("publish_old");
    let ptx = nvcc_ptx_of(&dir, "histo", SRC);
    // The same module declared for sm_60 / PTX 6.0 (not assembled: the pinned ptxas has no sm_60).
    let old = at_version(&ptx, "6.0").replacen(".target sm_90", ".target sm_60", 1);
    let out = instrument_ptx(&old, &InstrumentOptions::default()).unwrap_or_else(|e| panic!("{e}")).ptx;
    assert!(!out.contains(".release"), "no release stores before sm_70");
    assert!(added_fences(&out).iter().all(|l| l.contains("membar.sys")));
    assert!(added_fences(&out).len() >= 6);
}

/// The module's halt-mode report functions, by symbol.
const REPORT_FNS: [&str; 2] = ["__gasan_fail_global", "__gasan_fail_space"];

/// The text of the function or kernel whose header line starts with `header` (to its closing
/// brace at the start of a line).
fn body_of<'p>(ptx: &'p str, header: &str) -> &'p str {
    let at = ptx.lines().position(|l| l.starts_with(header)).unwrap_or_else(|| panic!("no {header}"));
    let start = ptx.lines().take(at).map(|l| l.len() + 1).sum::<usize>();
    let len = ptx[start..].find("\n}").unwrap_or_else(|| panic!("{header} has no closing brace"));
    &ptx[start..start + len + 2]
}

/// Every call of a report function in `ptx` targets one the module defines, each defined exactly
/// once, as `.noreturn`.
fn report_calls_resolve(ptx: &str) -> Result<usize, String> {
    for f in REPORT_FNS {
        let defs: Vec<&str> = ptx.lines().filter(|l| l.starts_with(&format!(".func {f}("))).collect();
        match defs[..] {
            [d] if d.contains(") .noreturn") => {}
            _ => return Err(format!("{f}: definitions {defs:?}")),
        }
    }
    let mut calls = 0;
    for l in ptx.lines().filter(|l| l.contains("call.uni __gasan_fail_")) {
        let callee = l.trim_start().strip_prefix("call.uni ").and_then(|c| c.split(',').next()).unwrap_or("");
        if !REPORT_FNS.contains(&callee) {
            return Err(format!("call of an undefined report function: {l}"));
        }
        calls += 1;
    }
    Ok(calls)
}

#[test]
fn halt_reports_call_one_noreturn_function_per_kind() {
    let dir = scratch("publish_calls");
    let ptx = nvcc_ptx_of(&dir, "histo", SRC);
    for (k, opts) in option_sets().into_iter().enumerate().filter(|(_, o)| !o.recover) {
        let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
        assert_eq!(report_calls_resolve(&out), Ok(2), "one call per kind in the kernel ({opts:?})");
        for f in REPORT_FNS {
            // The whole report: every field stored, the release ordering, then the trap.
            let body = body_of(&out, &format!(".func {f}("));
            assert_eq!(lines_with(body, "st.volatile.global.u64 [%ra2+"), 1, "{f}: the address");
            assert_eq!(lines_with(body, "fence.release.sys;"), 3, "{f}");
            assert_eq!(lines_with(body, "trap;"), 1, "{f}");
            assert!(body.find("atom.global.add.u32").unwrap() < body.find("trap;").unwrap(), "{f}");
        }
        // The kernel holds no record writer of its own: its report blocks are the calls.
        let kernel = body_of(&out, ".visible .entry");
        assert!(!kernel.contains("[%ra2+") && !kernel.contains("fence.release.sys"), "{kernel}");
        assert!(kernel.contains("$gasan_fail_shared:") && kernel.contains("call.uni __gasan_fail_global, (%gsx, %gss);"));
        assert!(kernel.contains("$gasan_fail_space:") && kernel.contains("call.uni __gasan_fail_space, (%gsx, %gss);"));
        assemble(&dir, &format!("calls{k}"), &out);
    }
    // Recover mode reports through the slow path: no report function.
    let out = instrument_ptx(&ptx, &InstrumentOptions { recover: true, ..InstrumentOptions::default() }).unwrap().ptx;
    assert!(!out.contains("__gasan_fail_"));
}

#[test]
fn before_noreturn_the_report_blocks_stay_inline() {
    let dir = scratch("publish_inline");
    let ptx = nvcc_ptx_of(&dir, "histo", SRC);
    // `.noreturn` is PTX 6.4: a 6.3 module writes its records in the kernel, as 6.4 does not.
    for (version, inline) in [("6.3", true), ("6.4", false)] {
        let at = at_version(&ptx, version).replacen(".target sm_90", ".target sm_75", 1);
        let out = instrument_ptx(&at, &InstrumentOptions::default()).unwrap_or_else(|e| panic!("{e}")).ptx;
        let kernel = body_of(&out, ".visible .entry");
        assert_eq!(out.contains(".noreturn"), !inline, "{version}");
        assert_eq!(kernel.contains("call.uni __gasan_fail_"), !inline, "{version}");
        // Inline: both blocks write the whole record (release stores, sm_75) and trap.
        assert_eq!(lines_with(kernel, "atom.release.sys.global.exch.b32"), if inline { 2 } else { 0 }, "{version}");
        if inline {
            assert!(lines_with(kernel, "trap;") >= 2, "{version}");
        }
        assemble(&dir, &format!("inline_{version}"), &out);
    }
}

#[test]
fn report_calls_resolve_across_the_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut checked = 0;
    for dir in ["corpus", "data"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "ptx") {
                continue;
            }
            let ptx = std::fs::read_to_string(&path).unwrap();
            for opts in option_sets().into_iter().filter(|o| !o.recover) {
                let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
                report_calls_resolve(&out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                checked += 1;
            }
        }
    }
    assert!(checked >= 4, "{checked} modules");
}
