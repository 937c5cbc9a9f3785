//! How report blocks publish error records. ptxas keeps a kernel's result-less `atom` as `ATOMG`
//! instead of `REDG` when the kernel, or a function it calls, holds a `fence.sc` / `fence.acq_rel`
//! (ptxas 13.0, sm_90; benches/results/variants.md: histogram 1.32x native with the fences, 1.00x
//! without). So on targets with the PTX memory model no checked module may hold such a fence: the
//! records are published with release stores. Older targets keep `membar.sys`.

mod common;

use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, MARKER};
use gasan_instrument::shadow::Scale;

/// Global, shared and local accesses and a result-less atomic: every kind of report block (inline
/// global, shared, space, the slow-path function).
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

/// Each error record the module writes (from its slot's seq zeroed to its `$gasan_rec_done`
/// label): the memory orderings in it, in order (fences, and the scope of release stores), and
/// whether the thread traps after it.
fn records(ptx: &str) -> Vec<(Vec<String>, bool)> {
    let mut out = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut lines = ptx.lines().map(str::trim).peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("st.volatile.global.u32 [%ra2+48], 0;") {
            current = Some(Vec::new());
        } else if let Some(r) = current.as_mut() {
            let op = l.split([' ', ';']).next().unwrap_or("");
            if op.starts_with("fence.") || op.starts_with("membar.") || op.starts_with("st.release.") || op.starts_with("atom.release.") {
                r.push(op.to_string());
            }
            if l.starts_with("$gasan_rec_done") {
                let trap = lines.peek().is_some_and(|n| n.starts_with("trap;"));
                out.push((current.take().unwrap(), trap));
            }
        }
    }
    out
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
        // Every report block publishes its record with release fences (PTX 9.0, sm_90), three
        // each: before a trap (halt mode's inline global, shared and space blocks) the first two
        // at GPU scope and the last at sys scope, so the whole record reaches the host before the
        // trap (a sys fence costs each kernel's load; see emit::record_body); where the thread goes
        // on (the slow-path function, which recover mode's kernel calls) all three at sys scope.
        let recs = records(&out);
        let (traps, goes_on): (Vec<_>, Vec<_>) = recs.iter().partition(|(_, trap)| *trap);
        assert_eq!(traps.is_empty(), opts.recover, "{opts:?}");
        assert_eq!(goes_on.len(), 1, "the slow-path function, {opts:?}");
        for (fences, _) in &traps {
            assert_eq!(fences, &["fence.release.gpu", "fence.release.gpu", "fence.release.sys"], "{opts:?}");
        }
        assert_eq!(goes_on[0].0, ["fence.release.sys"; 3], "{opts:?}");
        assemble(&dir, &format!("histo{k}"), &out);
        // PTX 8.5 has no release fence: each field store is a release (at GPU scope before a trap)
        // and the sequence number a sys-scope exchange.
        let out = instrument_ptx(&at_version(&ptx, "8.5"), &opts).unwrap().ptx;
        assert_eq!(added_fences(&out), Vec::<&str>::new(), "8.5, {opts:?}");
        assert!(!out.contains("fence.release"), "8.5, {opts:?}");
        let recs = records(&out);
        assert_eq!(recs.iter().filter(|(_, trap)| !trap).count(), 1, "8.5, {opts:?}");
        assert_eq!(recs.iter().any(|(_, trap)| *trap), !opts.recover, "8.5, {opts:?}");
        for (orders, trap) in &recs {
            let field = if *trap { "st.release.gpu.global" } else { "st.release.sys.global" };
            assert_eq!(orders.len(), 11, "{orders:?}, 8.5, {opts:?}");
            assert!(orders[..10].iter().all(|o| o.starts_with(field)), "{orders:?}, 8.5, {opts:?}");
            assert_eq!(orders[10], "atom.release.sys.global.exch.b32", "8.5, {opts:?}");
        }
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
        // Besides the report blocks' own (two each before a trap).
        let traps = records(&out).iter().filter(|(_, trap)| *trap).count();
        assert_eq!(lines_with(&out, "fence.release.gpu;"), 2 + 2 * traps, "alloc and free ({opts:?})");
        assemble(&dir, &format!("heap{k}"), &out);
        // Before PTX 8.6: `membar.gl`, and no other fence.
        let out = instrument_ptx(&at_version(&ptx, "8.5"), &opts).unwrap().ptx;
        let fences: Vec<_> = added_fences(&out).into_iter().filter(|l| !l.contains("membar.sys")).collect();
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
    // Before a trap the record's inner fences are GPU-scope, its last one sys-scope.
    let recs = records(&out);
    assert!(recs.iter().any(|(_, trap)| *trap));
    for (fences, trap) in &recs {
        let inner = if *trap { "membar.gl" } else { "membar.sys" };
        assert_eq!(fences, &[inner, inner, "membar.sys"], "{recs:?}");
    }
}

/// `wmma` tiles with a run-time stride: accesses of a width computed at run time (two probes
/// each, first and last byte).
const WMMA_SRC: &str = r#"
#include <mma.h>
using namespace nvcuda;
__global__ void tile(const __half* a, const __half* b, float* c, int ld) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a + blockIdx.x * 16, ld);
    wmma::load_matrix_sync(fb, b + blockIdx.y * 16, ld);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c + blockIdx.x * 16, fc, ld, wmma::mem_row_major);
}
"#;

/// The kernel of `ptx` (its one `.entry`, to the closing brace at the start of a line).
fn kernel_of(ptx: &str) -> &str {
    let start = ptx.find(".visible .entry").expect("a kernel");
    let len = ptx[start..].find("\n}").expect("the kernel's closing brace");
    &ptx[start..start + len + 2]
}

#[test]
fn run_time_widths_report_through_the_shared_block() {
    let dir = scratch("publish_wmma");
    let ptx = nvcc_ptx_of(&dir, "wmma", WMMA_SRC);
    for (k, opts) in option_sets().into_iter().enumerate().filter(|(_, o)| !o.recover) {
        let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
        let kernel = kernel_of(&out);
        // Three tiles, two probes each, each probe's stub naming its site to the shared block,
        // with the byte count packed (saturated to the width field's 24 bits) at run time.
        assert_eq!(lines_with(kernel, "bra.uni $gasan_fail_shared;"), 6, "{opts:?}");
        assert_eq!(lines_with(kernel, "min.u64 %gsa5, %gsa5, 16777215;"), 6, "{opts:?}");
        // One record writer (the shared block's) in the kernel, whatever its accesses.
        assert_eq!(lines_with(kernel, "atom.global.add.u32 %rr4"), 1, "{opts:?}");
        assert_eq!(lines_with(kernel, "$gasan_fail_shared:"), 1, "{opts:?}");
        assemble(&dir, &format!("wmma{k}"), &out);
    }
}

/// The bodies (`.entry` and `.func`, to their closing brace at the start of a line) of `ptx`.
fn bodies(ptx: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(start) = rest.find("\n{\n") {
        let Some(len) = rest[start..].find("\n}\n") else { break };
        out.push(&rest[start..start + len + 3]);
        rest = &rest[start + len + 3..];
    }
    out
}

#[test]
fn each_function_holds_at_most_one_record_writer_per_report_kind() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let (mut bodies_seen, mut with_block) = (0, 0);
    for dir in ["corpus", "data"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "ptx") {
                continue;
            }
            let ptx = std::fs::read_to_string(&path).unwrap();
            for opts in option_sets().into_iter().filter(|o| !o.recover) {
                let out = instrument_ptx(&ptx, &opts).unwrap().ptx;
                for body in bodies(&out) {
                    // The global and the shared/local block, each once at most (gasan's own
                    // functions write a record each too: the slow path, the heap's free).
                    let blocks = [lines_with(body, "$gasan_fail_shared:"), lines_with(body, "$gasan_fail_space:")];
                    assert!(blocks.iter().all(|&n| n <= 1), "{}: {blocks:?}", path.display());
                    let writers = lines_with(body, "atom.global.add.u32 %rr4");
                    assert!(writers <= 2, "{}: {writers} record writers in one function", path.display());
                    bodies_seen += 1;
                    with_block += usize::from(blocks[0] + blocks[1] > 0);
                }
            }
        }
    }
    assert!(bodies_seen >= 4 && with_block >= 2, "{bodies_seen} bodies, {with_block} with report blocks");
}
