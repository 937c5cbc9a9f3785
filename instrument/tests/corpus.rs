//! The CUDA corpus in tests/corpus/, compiled with the pinned nvcc for sm_90 and sm_75 (with and
//! without -lineinfo, RDC for the extern-function file): every module instruments under both scales
//! and both modes and assembles with ptxas; untouched statements are byte-identical; the number of
//! checked accesses matches an independent count of global/generic memory instructions.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, FunctionStats, InstrumentOptions, MARKER};
use gasan_instrument::shadow::Scale;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension() == Some(OsStr::new("cu"))).collect();
    v.sort();
    v
}

/// (label, PTX text) for every corpus file and build variant.
fn ptx_variants(tag: &str) -> Vec<(String, String)> {
    let dir = scratch(&format!("corpus-ptx-{tag}"));
    let mut out = Vec::new();
    for src in corpus() {
        let stem = src.file_stem().unwrap().to_str().unwrap().to_string();
        let rdc = stem.contains("rdc") || stem == "device_fn";
        for (arch, extra) in [("sm_90", "-lineinfo"), ("sm_90", ""), ("sm_75", "")] {
            if arch == "sm_75" && stem.contains("bulk") {
                continue; // Hopper-only instructions
            }
            let ptx = dir.join(format!("{stem}.{arch}{extra}.ptx"));
            let mut args: Vec<&OsStr> = vec![OsStr::new("-ptx"), OsStr::new("-arch"), OsStr::new(arch), OsStr::new("-o"), ptx.as_os_str(), src.as_os_str()];
            if !extra.is_empty() {
                args.push(OsStr::new(extra));
            }
            if rdc {
                args.push(OsStr::new("-rdc=true"));
            }
            run_tool("nvcc", &args);
            out.push((format!("{stem} {arch} {extra}"), std::fs::read_to_string(&ptx).unwrap()));
        }
    }
    out
}

/// Independent count: statements whose opcode is ld/st/atom/red/ldu (not in the shared, local,
/// param or const space and not a `[var]` address) or a global-side async copy.
fn count_global_accesses(ptx: &str) -> usize {
    let mut n = 0;
    for line in ptx.lines() {
        let code = line.split("//").next().unwrap().trim();
        let code = if code.starts_with('@') { code.split_once(char::is_whitespace).map_or("", |(_, rest)| rest).trim() } else { code };
        let op = code.split_whitespace().next().unwrap_or("");
        let parts: Vec<&str> = op.split('.').collect();
        let first = parts[0];
        let spaces_ok = !parts.iter().any(|p| ["shared", "local", "param", "const"].iter().any(|s| p.starts_with(s)));
        let plain = ["ld", "st", "atom", "red", "ldu"].contains(&first) && !op.starts_with("st.async") && !op.starts_with("red.async");
        if plain && spaces_ok && code.ends_with(';') {
            // `[name]` addresses (module variables) are not pool memory.
            let addr = code.split('[').nth(1).unwrap_or("");
            if addr.starts_with('%') || addr.starts_with(|c: char| c.is_ascii_digit()) {
                n += 1;
            }
        } else if (op.starts_with("cp.async") && op.contains("global") && !op.contains("tensor") && !op.contains("prefetch"))
            || (op.starts_with("cp.reduce.async.bulk") && op.contains("global") && !op.contains("tensor"))
        {
            n += 1;
        }
    }
    n
}

#[test]
fn corpus_instruments_assembles_and_counts() {
    let dir = scratch("corpus-checked");
    let variants = ptx_variants("all");
    assert!(variants.len() >= 10, "corpus too small");
    for (label, ptx) in &variants {
        let expected = count_global_accesses(ptx);
        for scale in [Scale::S7, Scale::S8] {
            for recover in [false, true] {
                for (optimize, aligned_pool) in [(false, false), (true, false), (true, true)] {
                    let opts = InstrumentOptions { scale, optimize, recover, aligned_pool, hoist_loops: true, param_bounds: true, outside_checks: false };
                    let r = instrument_ptx(ptx, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
                    let t = r.stats.total();
                    assert_eq!(t.unknown, 0, "{label}: unknown opcodes {:?}", r.stats.unknown_opcodes);
                    assert_eq!(t.found as usize, expected, "{label}: found vs independent count");
                    assert_eq!((t.checked + t.eliminated) as usize, expected, "{label}");
                    if !optimize {
                        assert_eq!(t.eliminated, 0);
                    }
                    // Shared/local checks (spaces.rs) have sites of their own.
                    assert_eq!(r.sites.len(), (t.checked + t.space_checked) as usize);
                    // Untouched statements are byte-identical: dropping our lines (and undoing the
                    // frame tops called functions get, frames.rs) gives the input back.
                    let stripped: String = r.ptx.split_inclusive('\n').filter(|l| !l.contains(MARKER)).collect();
                    let stripped = gasan_instrument::ptx::undo_frame_tops(&stripped);
                    assert_eq!(stripped, *ptx, "{label}: original statements changed");
                    if optimize {
                        let arch = if label.contains("sm_75") { "sm_75" } else { "sm_90" };
                        let f = dir.join("m.ptx");
                        std::fs::write(&f, &r.ptx).unwrap();
                        let o = dir.join("m.cubin");
                        let mut args: Vec<&OsStr> = vec![OsStr::new("-arch"), OsStr::new(arch), f.as_os_str(), OsStr::new("-o"), o.as_os_str()];
                        if label.contains("rdc") || label.contains("device_fn") {
                            args.insert(0, OsStr::new("-c"));
                        }
                        run_tool("ptxas", &args);
                    }
                }
            }
        }
    }
}

#[test]
fn sites_carry_source_locations_with_lineinfo() {
    let (_, ptx) = ptx_variants("sites").into_iter().find(|(l, _)| l.starts_with("mixed sm_90 -lineinfo")).unwrap();
    let r = instrument_ptx(&ptx, &InstrumentOptions::default()).unwrap();
    let vec_add = r.sites.sites.iter().find(|s| s.kernel_demangled.starts_with("vecAdd(")).expect("vecAdd site");
    let loc = vec_add.loc.as_ref().expect(".loc");
    assert!(loc.file.ends_with("mixed.cu"), "{loc:?}");
    assert_eq!(loc.line, 2);
    let json = r.sites.to_json();
    assert_eq!(gasan_instrument::ptx::SiteTable::from_json(&json).unwrap(), r.sites);
}

#[test]
fn rdc_modules_link_after_instrumentation() {
    // Two checked relocatable modules, each with its own weak control block and slow path, link.
    let dir = scratch("corpus-link");
    let mut objs = Vec::new();
    for name in ["bulk_rdc", "device_fn"] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/corpus/{name}.cu"));
        let ptx = dir.join(format!("{name}.ptx"));
        run_tool("nvcc", &[OsStr::new("-ptx"), OsStr::new("-rdc=true"), OsStr::new("-arch=sm_90"), OsStr::new("-o"), ptx.as_os_str(), src.as_os_str()]);
        let r = instrument_ptx(&std::fs::read_to_string(&ptx).unwrap(), &InstrumentOptions::default()).unwrap();
        let checked = dir.join(format!("{name}.checked.ptx"));
        std::fs::write(&checked, r.ptx).unwrap();
        let obj = dir.join(format!("{name}.o"));
        run_tool("ptxas", &[OsStr::new("-c"), OsStr::new("-arch=sm_90"), checked.as_os_str(), OsStr::new("-o"), obj.as_os_str()]);
        objs.push(obj);
    }
    let out = dir.join("linked.cubin");
    run_tool("nvlink", &[OsStr::new("-arch=sm_90"), objs[0].as_os_str(), objs[1].as_os_str(), OsStr::new("-o"), out.as_os_str()]);
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

#[test]
fn versioned_loops_assemble_and_keep_their_counts() {
    // tests/data/loops.ptx: nvcc's output for the loop shapes loop versioning handles. Each
    // versioned loop adds a range test and a fast copy (whose statements are not counted again).
    let ptx = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/loops.ptx")).unwrap();
    let expected = count_global_accesses(&ptx);
    let dir = scratch("loops-checked");
    for scale in [Scale::S7, Scale::S8] {
        for aligned_pool in [false, true] {
            let opts = InstrumentOptions { scale, aligned_pool, ..Default::default() };
            let r = instrument_ptx(&ptx, &opts).unwrap();
            let versioned = r.ptx.lines().filter(|l| l.starts_with("$gasan_loop") && !l.contains("_done")).count();
            assert!(versioned >= 12, "{versioned} loops versioned");
            let t = r.stats.total();
            assert_eq!(t.found as usize, expected);
            assert_eq!((t.checked + t.eliminated) as usize, expected);
            // Without versioning the same module gets fewer sites: the fast copies' checks add
            // some, and count apart.
            let plain = instrument_ptx(&ptx, &InstrumentOptions { hoist_loops: false, ..opts }).unwrap();
            assert_eq!(plain.stats.total(), FunctionStats { copy_checked: 0, ..t.clone() });
            assert!(t.copy_checked > 0, "some fast copy keeps a check (an access its range test does not cover)");
            let global_sites = |sites: &gasan_instrument::ptx::SiteTable| sites.sites.iter().filter(|s| s.space.is_none()).count();
            assert_eq!(global_sites(&r.sites), global_sites(&plain.sites) + t.copy_checked as usize, "one global site per check, in fast copies too");
            assert!(r.sites.len() >= plain.sites.len() + t.copy_checked as usize);
            let f = dir.join("loops.ptx");
            std::fs::write(&f, &r.ptx).unwrap();
            let o = dir.join("loops.cubin");
            run_tool("ptxas", &[OsStr::new("-arch"), OsStr::new("sm_90"), f.as_os_str(), OsStr::new("-o"), o.as_os_str()]);
        }
    }
    // tests/data/loops_triton.ptx: Triton's loop forms (sm_90a), both loops versioned, every
    // global access of them range-tested (no check left in a fast copy), and the result assembles.
    let ptx = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/loops_triton.ptx")).unwrap();
    let r = instrument_ptx(&ptx, &InstrumentOptions::default()).unwrap();
    assert_eq!(r.ptx.lines().filter(|l| l.starts_with("$gasan_loop") && !l.contains("_done")).count(), 2);
    assert_eq!(r.stats.total().copy_checked, 0);
    let f = dir.join("loops_triton.ptx");
    std::fs::write(&f, &r.ptx).unwrap();
    let o = dir.join("loops_triton.cubin");
    run_tool("ptxas", &[OsStr::new("-arch"), OsStr::new("sm_90a"), f.as_os_str(), OsStr::new("-o"), o.as_os_str()]);
}
