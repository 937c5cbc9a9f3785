//! In-kernel malloc/free go through gasan's checked heap (instrument/src/ptx/heap.rs): nvcc 13's
//! own output for every heap form (tests/data/device_heap.cu), for sm_90 and sm_75, whole-program
//! and RDC, under both scales and modes: every driver heap call is renamed, every free call carries
//! its own site, lines keep their numbers, and the checked PTX assembles with ptxas.

mod common;
use common::*;
use gasan_instrument::abi::AccessKind;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, MARKER};
use gasan_instrument::shadow::Scale;
use std::ffi::OsStr;
use std::path::Path;

fn nvcc_ptx(dir: &Path, arch: &str, rdc: bool) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/device_heap.cu");
    let out = dir.join(format!("device_heap.{arch}.{rdc}.ptx"));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-ptx"), OsStr::new("-lineinfo"), OsStr::new("-arch"), OsStr::new(arch), OsStr::new("-o"), out.as_os_str(), src.as_os_str()];
    if rdc {
        args.push(OsStr::new("-rdc=true"));
    }
    run_tool("nvcc", &args);
    std::fs::read_to_string(out).unwrap()
}

/// Identifier tokens of a PTX text, comments removed.
fn tokens(ptx: &str) -> Vec<String> {
    ptx.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '%')).map(str::to_string).collect::<Vec<_>>())
        .filter(|t| !t.is_empty())
        .collect()
}

#[test]
fn nvcc_heap_calls_are_rewritten_and_assemble() {
    let dir = scratch("device-heap");
    for (arch, rdc) in [("sm_90", false), ("sm_90", true), ("sm_75", false)] {
        let ptx = nvcc_ptx(&dir, arch, rdc);
        let count = |t: &[String], name: &str| t.iter().filter(|x| *x == name).count();
        let input = tokens(&ptx);
        let (frees, mallocs, aligned) = (count(&input, "free"), count(&input, "malloc"), count(&input, "__cuda_syscall_aligned_malloc"));
        // One declaration each, and the calls of the source: 4 frees (free, delete, delete[],
        // and the device function's), 3 mallocs (malloc, new, new[]) + 1 in only_free's module.
        assert!(frees > 5 && mallocs > 3 && aligned == 2, "{arch} rdc={rdc}: {frees} {mallocs} {aligned}");
        for scale in [Scale::S7, Scale::S8] {
            for recover in [false, true] {
                let opts = InstrumentOptions { scale, recover, ..Default::default() };
                let out = instrument_ptx(&ptx, &opts).unwrap();
                let label = format!("{arch} rdc={rdc} {scale:?} recover={recover}");
                // Lines of the input keep their numbers: the rewrite changes lines, never adds
                // (loop versioning, off here, copies loops whole).
                let flat = instrument_ptx(&ptx, &InstrumentOptions { hoist_loops: false, ..opts }).unwrap();
                assert_eq!(flat.ptx.lines().filter(|l| !l.contains(MARKER)).count(), ptx.lines().count(), "{label}");
                let kept: Vec<&str> = out.ptx.lines().filter(|l| !l.contains(MARKER)).collect();
                // Every call and declaration is renamed; the driver's names appear only in the
                // appended fallback declarations and calls (one declaration and one call each).
                let checked_part: String = kept.join("\n");
                let t = tokens(&checked_part);
                assert_eq!((count(&t, "free"), count(&t, "malloc"), count(&t, "__cuda_syscall_aligned_malloc")), (0, 0, 0), "{label}");
                assert_eq!(count(&t, "__gasan_free"), frees, "{label}");
                assert_eq!(count(&t, "__gasan_malloc"), mallocs, "{label}");
                assert_eq!(count(&t, "__gasan_aligned_malloc"), aligned, "{label}");
                let all = tokens(&out.ptx);
                assert_eq!(count(&all, "free"), 2, "{label}");
                assert_eq!(count(&all, "malloc"), 2, "{label}");
                // One site per free call, in the function that calls it.
                let free_sites: Vec<_> = out.sites.sites.iter().filter(|s| s.kind == AccessKind::Free).collect();
                assert_eq!(free_sites.len(), frees - 1, "{label}");
                assert!(free_sites.iter().any(|s| s.kernel == "_Z9only_freePPi"), "{label}");
                assert!(free_sites.iter().any(|s| s.kernel_demangled.starts_with("release")), "{label}");
                assert!(free_sites.iter().all(|s| s.loc.is_some()), "{label}");
                for s in &free_sites {
                    let line = ptx.lines().nth(s.ptx_line as usize - 1).unwrap();
                    assert!(line.contains(';'), "{label}: site line {} is {line:?}", s.ptx_line);
                }
                let f = dir.join(format!("checked.{arch}.{rdc}.{scale:?}.{recover}.ptx"));
                std::fs::write(&f, &out.ptx).unwrap();
                let obj = dir.join("checked.o");
                let mut args: Vec<&OsStr> = vec![OsStr::new("-arch"), OsStr::new(arch), f.as_os_str(), OsStr::new("-o"), obj.as_os_str()];
                if rdc {
                    args.insert(0, OsStr::new("-c"));
                }
                run_tool("ptxas", &args);
            }
        }
    }
}

#[test]
fn modules_without_heap_calls_get_no_heap_code() {
    let ptx = "\
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 r) mallocx (.param .b64 p);
.visible .entry k(.param .u64 a)
{
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [a];
\tst.global.u32 [%rd1], 1;
\tret;
}
";
    let out = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    assert!(!out.ptx.contains("__gasan_malloc") && !out.ptx.contains("_heap") && out.ptx.contains("mallocx"), "{}", out.ptx);
}

#[test]
fn single_line_calls_and_guarded_calls_are_rewritten() {
    let ptx = "\
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 r) malloc (.param .b64 p);
.extern .func free (.param .b64 p);
.visible .entry k(.param .u64 a)
{
\t.reg .b64 %rd<3>;
\t.reg .pred %p<2>;
\tld.param.u64 %rd1, [a];
\t{
\t.param .b64 param0;
\t.param .b64 retval0;
\tst.param.b64 [param0], 64;
\tcall.uni (retval0), malloc, (param0);
\tld.param.b64 %rd2, [retval0];
\tst.param.b64 [param0], %rd2;
\tsetp.ne.u64 %p1, %rd2, 0;
\t@%p1 call free, (param0); // guarded
\t}
\tret;
}
";
    let out = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    assert!(out.ptx.contains("call.uni (retval0), __gasan_malloc, (param0);"), "{}", out.ptx);
    assert!(out.ptx.contains("@%p1 call __gasan_free, (param0, 0); // guarded"), "{}", out.ptx);
    assert!(out.ptx.contains(".func free (.param .b64 gasan_ptr);"), "{}", out.ptx);
    assert!(out.ptx.contains(" .func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);"), "{}", out.ptx);
    assemble(&scratch("device-heap-single-line"), "k", &out.ptx);
}

/// A `free` call with no argument list (invalid PTX, found by fuzzing) is left as written and
/// takes no site: every free site names a call that carries it.
#[test]
fn free_call_without_arguments_takes_no_site() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.extern .func free (.param .b64 p);\n.visible .entry k()\n{\n\tcall.uni\n\tfree;\n\tret;\n}\n";
    let out = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    assert!(out.sites.sites.iter().all(|s| s.kind != AccessKind::Free), "{:?}", out.sites.sites);
    assert!(out.ptx.contains("\tcall.uni\n\tfree;\n"), "{}", out.ptx);
    // A well-formed call in the same module still gets its site.
    let ok = ptx.replace("\tfree;", "\tfree, (p);");
    let out = instrument_ptx(&ok, &InstrumentOptions::default()).unwrap();
    assert_eq!(out.sites.sites.iter().filter(|s| s.kind == AccessKind::Free).count(), 1, "{}", out.ptx);
}

/// A module that only frees (the blocks came from another kernel): nvcc declares `free` alone,
/// right after the header directives, and that declaration alone routes its calls to gasan's heap.
#[test]
fn nvcc_free_only_module_is_rewritten() {
    let dir = scratch("device-heap-free-only");
    let ptx = nvcc_ptx_of(&dir, "free_only", "__global__ void release(int **blocks) { free(blocks[threadIdx.x]); }\n");
    assert!(!ptx.contains("malloc"), "{ptx}");
    let out = instrument_ptx(&ptx, &InstrumentOptions::default()).unwrap();
    assert_eq!(out.sites.sites.iter().filter(|s| s.kind == AccessKind::Free).count(), 1, "{}", out.ptx);
    assert!(tokens(&out.ptx).iter().any(|t| t == "__gasan_free"), "{}", out.ptx);
    assemble(&dir, "checked", &out.ptx);
}

/// A block comment inside a heap declaration that spans lines stays in its place: the declaration's
/// lines are held until its `;`, and the comment's lines with them.
#[test]
fn block_comment_inside_a_heap_declaration_keeps_its_place() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.extern .func free\n/* the pointer\n   to free */\n(.param .b64 p);\n.visible .entry k(.param .u64 a)\n{\n\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [a];\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd1;\n\tcall.uni free, (param0);\n\t}\n\tret;\n}\n";
    let out = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    assert!(out.ptx.contains(".func __gasan_free\n/* the pointer\n   to free */\n(.param .b64 p, .param .b32 __gasan_free_site);"), "{}", out.ptx);
    assert!(out.ptx.contains("call.uni __gasan_free, (param0, 0);"), "{}", out.ptx);
    assemble(&scratch("device-heap-block-comment"), "k", &out.ptx);
}
