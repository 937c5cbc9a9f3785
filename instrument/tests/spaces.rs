//! Shared- and local-memory checks on the detection suite's own programs (tests/suite), compiled
//! with the pinned nvcc: each planted bug's access (the `// BUG:` line) gets a check of the right
//! space bounding the right variable, the checked PTX assembles with ptxas in both modes, and a
//! module with no shared or local variable is instrumented exactly as before (no space checks).

mod common;
use common::*;
use gasan_instrument::abi::MemorySpace;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::ffi::OsStr;
use std::path::Path;

/// (suite program, space of the bug's check, demangled variable name the check bounds, if fixed).
const CASES: &[(&str, MemorySpace, Option<&str>)] = &[
    ("shared_static_overflow", MemorySpace::Shared, Some("k_shared_static(float*, int)::s")),
    ("shared_read_past", MemorySpace::Shared, Some("k_shared_neighbour(float const*, float*, int)::tile")),
    ("shared_next_array", MemorySpace::Shared, Some("k_two_arrays(int const*, int*, int)::keys")),
    ("shared_histogram_bad_bin", MemorySpace::Shared, Some("k_shared_histo(int const*, int, unsigned int*)::bins")),
    ("shared_cp_async_overflow", MemorySpace::Shared, Some("k_stage_tile(float4 const*, float*, int)::tile")),
    ("shared_ldmatrix_overflow", MemorySpace::Shared, Some("k_ldmatrix_tile(float*, int)::tile")),
    ("shared_wmma_overflow", MemorySpace::Shared, Some("k_wmma_tile(__half const*, __half const*, float*, int)::sa")),
    ("shared_dynamic_overflow", MemorySpace::Shared, Some("d")),
    ("shared_dynamic_read_past", MemorySpace::Shared, Some("buf")),
    ("local_overflow", MemorySpace::Local, None),
    ("local_negative_index", MemorySpace::Local, None),
    ("local_write_negative", MemorySpace::Local, None),
    ("use_after_return_scope", MemorySpace::LocalOutOfScope, None),
];

fn bug_line(src: &str, case: &str) -> u32 {
    let marker = format!("// BUG:{case}");
    src.lines().position(|l| l.contains(&marker)).unwrap_or_else(|| panic!("{case}: no {marker}")) as u32 + 1
}

/// Is the site's access on source line `line` of file 1: its `.loc`, or the `inlined_at` of the
/// `.loc` lines just before it (an inlined header function such as `atomicAdd`)?
fn at_line(ptx: &str, site: &gasan_instrument::ptx::Site, line: u32) -> bool {
    if site.loc.as_ref().is_some_and(|l| l.line == line) {
        return true;
    }
    let lines: Vec<&str> = ptx.lines().collect();
    let inlined = format!("inlined_at 1 {line} ");
    lines[..site.ptx_line as usize - 1].iter().rev().take_while(|l| l.trim_start().starts_with(".loc")).any(|l| l.contains(&inlined))
}

#[test]
fn every_planted_shared_or_local_bug_gets_a_check_that_assembles() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/suite");
    let dir = scratch("spaces-suite");
    for &(case, space, var) in CASES {
        let src = suite.join(format!("{case}.cu"));
        let ptx = dir.join(format!("{case}.ptx"));
        run_tool("nvcc", &[OsStr::new("-O2"), OsStr::new("-lineinfo"), OsStr::new("-ptx"), OsStr::new("-arch"), OsStr::new("sm_90"), OsStr::new("-o"), ptx.as_os_str(), src.as_os_str()]);
        let text = std::fs::read_to_string(&ptx).unwrap();
        let line = bug_line(&std::fs::read_to_string(&src).unwrap(), case);
        for recover in [false, true] {
            let opts = InstrumentOptions { recover, ..Default::default() };
            let out = instrument_ptx(&text, &opts).unwrap_or_else(|e| panic!("{case}: {e}"));
            let at_bug: Vec<_> = out.sites.sites.iter().filter(|s| s.space.is_some() && at_line(&text, s, line)).collect();
            assert!(
                at_bug.iter().any(|s| {
                    let sp = s.space.as_ref().unwrap();
                    sp.space == space && var.is_none_or(|v| sp.variable_demangled == v)
                }),
                "{case}: no {space:?} check of {var:?} at line {line}: {at_bug:#?}"
            );
            let checked = dir.join(format!("{case}.{recover}.ptx"));
            std::fs::write(&checked, &out.ptx).unwrap();
            let obj = dir.join(format!("{case}.{recover}.cubin"));
            run_tool("ptxas", &[OsStr::new("-arch=sm_90"), checked.as_os_str(), OsStr::new("-o"), obj.as_os_str()]);
        }
    }
}

#[test]
fn clean_global_only_module_gets_no_space_check() {
    let dir = scratch("spaces-global-only");
    let src = dir.join("g.cu");
    std::fs::write(&src, "__global__ void k(float* a, const float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = b[i] * 2.0f; }\n").unwrap();
    let ptx = dir.join("g.ptx");
    run_tool("nvcc", &[OsStr::new("-ptx"), OsStr::new("-arch"), OsStr::new("sm_90"), OsStr::new("-o"), ptx.as_os_str(), src.as_os_str()]);
    let out = instrument_ptx(&std::fs::read_to_string(&ptx).unwrap(), &InstrumentOptions::default()).unwrap();
    assert!(out.sites.sites.iter().all(|s| s.space.is_none()));
    assert!(!out.ptx.contains("%gso") && !out.ptx.contains("$gasan_fail_space"));
}

/// Use after return is checked in kernels only: a called function may legally reach its callers'
/// frames on either side of its own (ptxas places a callee's frame above its caller's when the
/// call graph has no recursion), so its untraced local accesses get no frame check; the kernel's
/// read through the pointer the callee returned is tested against the kernel's whole frame.
#[test]
fn use_after_return_is_checked_in_kernels_only() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/suite");
    let dir = scratch("spaces-frame");
    let ptx = dir.join("uar.ptx");
    let src = suite.join("use_after_return_scope.cu");
    run_tool("nvcc", &[OsStr::new("-O2"), OsStr::new("-ptx"), OsStr::new("-arch"), OsStr::new("sm_90"), OsStr::new("-o"), ptx.as_os_str(), src.as_os_str()]);
    let out = instrument_ptx(&std::fs::read_to_string(&ptx).unwrap(), &InstrumentOptions::default()).unwrap();
    let scope: Vec<_> = out.sites.sites.iter().filter(|s| s.space.as_ref().is_some_and(|sp| sp.space == MemorySpace::LocalOutOfScope)).collect();
    assert!(!scope.is_empty(), "the kernel's read through the returned pointer is checked");
    assert!(scope.iter().all(|s| s.kernel.contains("k_use_after_return")), "only in the kernel: {scope:#?}");
    // The test is the whole frame (below its start or past its end), on local-window addresses.
    assert!(out.ptx.contains("isspacep.local %gsq1,") && !out.ptx.contains("setp.lt.s64 %gsq0, %gso0, 0;"));
}
