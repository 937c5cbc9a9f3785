//! Shared/local checks need the variable an address derives from (spaces.rs's provenance). A
//! fixed point of whole-function rounds, bounded at 16, gave up on functions whose chains of
//! definitions were longer and then kept no provenance at all: every shared access of such a
//! function went unchecked, silently (issue 37, defect 1: 271 of 2,787 shared accesses checked
//! in 14 of 50 CUB/Thrust functions). The worklist over the definitions converges however long
//! the chains are; `Stats::space_found` counts the shared/local accesses, so a loss shows.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

/// A kernel whose shared address passes through `links` additions before its one store.
fn chain(links: usize) -> String {
    let mut body = String::new();
    for k in 0..links {
        body.push_str(&format!("\tadd.s32 %r{}, %r{}, 4;\n", k + 2, k + 1));
    }
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u32 v)\n{{\n\
         \t.reg .b32 %r<{n}>;\n\t.shared .align 4 .b8 tile[4096];\n\
         \tld.param.u32 %r0, [v];\n\tmov.u32 %r1, tile;\n{body}\tst.shared.u32 [%r{last}], %r0;\n\tret;\n}}\n",
        n = links + 3,
        last = links + 1
    )
}

#[test]
fn a_long_chain_of_definitions_keeps_its_variable() {
    let no_elim = InstrumentOptions { optimize: false, ..Default::default() };
    // The clean twin (a short chain) and the bug class (longer than the old bound of 16 rounds).
    for links in [3, 40, 200] {
        let r = instrument_ptx(&chain(links), &no_elim).unwrap();
        let t = r.stats.total();
        assert_eq!((t.space_found, t.space_checked), (1, 1), "{links} links: {t:?}");
        let site = r.sites.sites.iter().find_map(|s| s.space.as_ref()).expect("a shared site");
        assert_eq!(site.variable, "tile", "{links} links");
    }
}

/// A register that may hold either of two variables' addresses bounds neither.
#[test]
fn two_variables_on_two_paths_bound_neither() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u32 v)\n{\n\
               \t.reg .pred %p<2>;\n\t.reg .b32 %r<8>;\n\t.shared .align 4 .b8 a[64];\n\t.shared .align 4 .b8 b[64];\n\
               \tld.param.u32 %r0, [v];\n\tsetp.ne.u32 %p1, %r0, 0;\n\tmov.u32 %r1, a;\n\t@%p1 mov.u32 %r1, b;\n\
               \tadd.s32 %r2, %r1, 4;\n\tst.shared.u32 [%r2], %r0;\n\tret;\n}\n";
    let r = instrument_ptx(ptx, &InstrumentOptions { optimize: false, ..Default::default() }).unwrap();
    let t = r.stats.total();
    assert_eq!(t.space_found, 1, "{t:?}");
    assert!(r.sites.sites.iter().filter_map(|s| s.space.as_ref()).all(|s| s.variable != "a" && s.variable != "b"), "{:?}", r.sites.sites);
}

/// CUB and Thrust (shipped with the pinned toolchain) compiled with the pinned nvcc: with check
/// elimination off, every shared/local access of every function gets its check.
#[test]
fn cub_and_thrust_kernels_check_every_shared_access() {
    let dir = scratch("provenance-cub");
    let ptx = nvcc_ptx_of(
        &dir,
        "cub_scan_select_sort",
        "#include <thrust/device_vector.h>\n#include <thrust/scan.h>\n#include <thrust/copy.h>\n#include <thrust/sort.h>\n\
         struct IsOdd { __device__ bool operator()(int x) const { return x & 1; } };\n\
         int main() { thrust::device_vector<int> v(1 << 20, 1), o(1 << 20);\n\
         thrust::inclusive_scan(v.begin(), v.end(), o.begin());\n thrust::copy_if(v.begin(), v.end(), o.begin(), IsOdd());\n\
         thrust::sort(v.begin(), v.end()); return 0; }\n",
    );
    let r = instrument_ptx(&ptx, &InstrumentOptions { optimize: false, ..Default::default() }).unwrap();
    let mut short = Vec::new();
    for (name, f) in &r.stats.functions {
        if f.space_checked < f.space_found {
            short.push(format!("{name}: {} of {}", f.space_checked, f.space_found));
        }
    }
    let t = r.stats.total();
    assert!(t.space_found > 500, "the program's kernels use shared memory: {t:?}");
    assert!(short.is_empty(), "shared/local accesses left unchecked:\n{}", short.join("\n"));
}
