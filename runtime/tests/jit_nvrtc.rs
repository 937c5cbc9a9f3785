//! NVRTC and nvJitLink interposed (runtime/src/hooks/nvrtc.rs, nvjitlink.rs; issue 39 items 6
//! and 5), without a GPU: C programs compile CUDA C++ with the pinned NVRTC 13.0 straight to an
//! sm_90 cubin, or link PTX (Numba-CUDA's, made on a CPU: jit/numba/compile_ptx.py) with the
//! pinned nvJitLink 13.0 (jit/nvrtc/nvrtc.sh), under the preloaded runtime, reaching the library
//! the ways programs do (dlopen + dlsym on the handle, `dlsym(RTLD_DEFAULT)` first as cuda-bindings
//! does, linked). The cubin they get must be one the runtime's load recognises as checked
//! (`plan_cubin`), with its sites and kernels' parameter tags; where gasan's part fails, the
//! program still gets the library's own cubin. Link-time-optimised links (`-lto`) get LTO-IR the
//! way Numba-CUDA 0.30 makes it, from NVRTC `-dlto` (tests/fixtures/jit_lto_app.c).

mod common;
use gasan_runtime::modules::{plan_cubin, CubinPlan, ModuleOptions};
use gasan_runtime::options::Options;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The pinned NVRTC's library directory.
fn nvrtc_dir() -> PathBuf {
    let s = Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/nvrtc/nvrtc.sh");
    let out = Command::new("bash").arg(&s).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

struct Setup {
    runtime: PathBuf,
    nvrtc: PathBuf,
    cuda: PathBuf,
    dir: PathBuf,
    app: PathBuf,
    linked: PathBuf,
    link_app: PathBuf,
    link_linked: PathBuf,
    lto_app: PathBuf,
}

/// Builds the test programs once; `None` (skipped, never under CI) when the runtime is not built.
fn setup() -> Option<&'static Setup> {
    static S: OnceLock<Option<Setup>> = OnceLock::new();
    S.get_or_init(|| {
        let runtime = common::runtime_or_skip()?;
        let nvrtc = nvrtc_dir();
        let cuda = common::cuda_root();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nvrtc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload/nvrtc_app.c");
        let (app, linked) = (dir.join("nvrtc_app"), dir.join("nvrtc_app_linked"));
        let gcc = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("gcc").args(args).output().expect("gcc");
            assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        gcc(&["-o".as_ref(), app.as_os_str(), src.as_os_str(), "-ldl".as_ref()]);
        let l = format!("-L{}", nvrtc.display());
        let rpath = format!("-Wl,-rpath,{}", nvrtc.display());
        gcc(&["-DLINKED".as_ref(), "-o".as_ref(), linked.as_os_str(), src.as_os_str(), l.as_ref(), "-l:libnvrtc.so.13".as_ref(), rpath.as_ref()]);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload/nvjitlink_app.c");
        let (link_app, link_linked) = (dir.join("nvjitlink_app"), dir.join("nvjitlink_app_linked"));
        gcc(&["-o".as_ref(), link_app.as_os_str(), src.as_os_str(), "-ldl".as_ref()]);
        gcc(&["-DLINKED".as_ref(), "-o".as_ref(), link_linked.as_os_str(), src.as_os_str(), l.as_ref(), "-l:libnvJitLink.so.13".as_ref(), rpath.as_ref()]);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jit_lto_app.c");
        let lto_app = dir.join("jit_lto_app");
        gcc(&["-o".as_ref(), lto_app.as_os_str(), src.as_os_str(), "-ldl".as_ref()]);
        Some(Setup { runtime, nvrtc, cuda, dir, app, linked, link_app, link_linked, lto_app })
    })
    .as_ref()
}

/// Runs the NVRTC program in `mode` (with the runtime preloaded and `options` when `gasan`);
/// returns its output and the cubin it wrote.
fn run(s: &Setup, mode: &str, gasan: Option<&str>) -> (Output, Vec<u8>) {
    run_program(s, if mode == "linked" { &s.linked } else { &s.app }, &[mode.as_ref(), s.nvrtc.join("libnvrtc.so.13").as_os_str()], gasan)
}

/// Numba-CUDA's PTX (jit/numba/compile_ptx.py).
fn numba_ptx() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/numba_k_numba_write.ptx")
}

/// Runs the nvJitLink program in `mode` on `ptx`, as [`run`].
fn run_link(s: &Setup, mode: &str, ptx: &Path, gasan: Option<&str>) -> (Output, Vec<u8>) {
    run_link_inputs(s, mode, &[ptx], gasan)
}

/// Runs the nvJitLink program in `mode` on the PTX inputs `ptx`, in order, as [`run`].
fn run_link_inputs(s: &Setup, mode: &str, ptx: &[&Path], gasan: Option<&str>) -> (Output, Vec<u8>) {
    let lib = s.nvrtc.join("libnvJitLink.so.13");
    let mut args: Vec<&std::ffi::OsStr> = vec![mode.as_ref(), lib.as_os_str()];
    args.extend(ptx.iter().map(|p| p.as_os_str()));
    run_program(s, if mode == "linked" { &s.link_linked } else { &s.link_app }, &args, gasan)
}

/// A fixture of tests/fixtures.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Compiles `kernel` to LTO-IR with NVRTC `-dlto` and links it (added as `kind`: `ltoir` or
/// `any`, with `more` PTX when given) with nvJitLink `-arch=sm_90 -lto`, as [`run`].
fn run_lto(s: &Setup, kind: &str, kernel: &str, more: Option<&Path>, gasan: Option<&str>) -> (Output, Vec<u8>) {
    let (nvrtc, link, kernel) = (s.nvrtc.join("libnvrtc.so.13"), s.nvrtc.join("libnvJitLink.so.13"), fixture(kernel));
    let mut args: Vec<&std::ffi::OsStr> = vec![kind.as_ref(), nvrtc.as_os_str(), link.as_os_str(), kernel.as_os_str()];
    args.extend(more.map(Path::as_os_str));
    run_program(s, &s.lto_app, &args, gasan)
}

fn run_program(s: &Setup, program: &Path, args: &[&std::ffi::OsStr], gasan: Option<&str>) -> (Output, Vec<u8>) {
    static N: AtomicU32 = AtomicU32::new(0);
    let mode = args[0].to_string_lossy();
    let out_file = s.dir.join(format!("{mode}-{}.cubin", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_file(&out_file);
    let mut c = Command::new(program);
    c.args(args).arg(&out_file);
    // libnvrtc opens libnvrtc-builtins by name; CUDA_HOME names the pinned ptxas.
    c.env("LD_LIBRARY_PATH", &s.nvrtc).env("CUDA_HOME", &s.cuda).env_remove("GASAN_OPTIONS").env_remove("LD_PRELOAD");
    if let Some(o) = gasan {
        c.env("LD_PRELOAD", &s.runtime).env("GASAN_OPTIONS", format!("cache_dir={}:{o}", s.dir.join("cache").display()));
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{mode} {gasan:?}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let cubin = std::fs::read(&out_file).unwrap();
    (out, cubin)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn lowered(o: &Output) -> String {
    stdout(o).lines().find_map(|l| l.strip_prefix("lowered=")).expect("lowered name").to_string()
}

/// What the runtime's load makes of `cubin` under default options.
fn at_load(cubin: &[u8]) -> CubinPlan {
    plan_cubin(cubin, &(&Options::default()).into(), |_| 1)
}

#[test]
fn nvrtc_cubins_are_checked_however_nvrtc_is_reached() {
    let Some(s) = setup() else { return };
    let (native, native_cubin) = run(s, "handle", None);
    assert!(matches!(at_load(&native_cubin), CubinPlan::Native), "without gasan NVRTC's cubin is native");
    let want_lowered = lowered(&native);
    for mode in ["handle", "default", "linked"] {
        let (out, cubin) = run(s, mode, Some("verbosity=1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NVRTC program nvrtc_app.cu: checked cubin for sm_90"), "{mode}: {err}");
        assert_ne!(cubin, native_cubin, "{mode}: the program got NVRTC's own cubin");
        let tables = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
        assert_eq!(tables.sites.sites.len(), 2, "{mode}: one store per kernel: {:?}", tables.sites.sites);
        let CubinPlan::Checked { param_tags, .. } = at_load(&cubin) else { panic!("{mode}: not recognised as checked at load") };
        // Both kernels, the template one under the name NVRTC lowered for the program.
        let mut kernels: Vec<&String> = param_tags.kernels.keys().collect();
        kernels.sort();
        assert_eq!(kernels, [&want_lowered, &"k_nvrtc_write".to_string()], "{mode}");
        assert_eq!(lowered(&out), want_lowered, "{mode}: the program's lowered name is NVRTC's");
        if mode == "default" {
            // As without gasan: NVRTC opened RTLD_LOCAL (or not at all) is not found by RTLD_DEFAULT.
            let o = stdout(&out);
            assert!(o.contains("default_before=0") && o.contains("default_after_local_open=0"), "{o}");
        }
    }
}

#[test]
fn without_gasan_rtld_default_lookups_answer_as_glibc_does() {
    let Some(s) = setup() else { return };
    let (out, _) = run(s, "default", None);
    let o = stdout(&out);
    assert!(o.contains("default_before=0") && o.contains("default_after_local_open=0"), "{o}");
}

#[test]
fn a_failure_on_gasans_side_hands_out_nvrtcs_own_cubin() {
    let Some(s) = setup() else { return };
    let (_, native_cubin) = run(s, "handle", None);
    // A ptxas that fails: warned, and the program runs on with NVRTC's cubin.
    let (out, cubin) = run(s, "handle", Some("ptxas=/bin/false:verbosity=1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARNING: NVRTC program nvrtc_app.cu: not checked (") && err.contains("the program gets NVRTC's own cubin"), "{err}");
    // The exit summary says so by framework (verbosity=1).
    assert!(err.contains("==gasan== JIT-compiled modules from NVRTC: 0 checked; not checked: 1 failed on gasan's side (warned)"), "{err}");
    assert_eq!(cubin, native_cubin);
    // instrument=0: nothing checked, nothing said.
    let (out, cubin) = run(s, "linked", Some("instrument=0"));
    assert_eq!(cubin, native_cubin);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("NVRTC"));
}

#[test]
fn numbas_ptx_linked_by_nvjitlink_gives_a_checked_cubin() {
    let Some(s) = setup() else { return };
    let ptx = numba_ptx();
    let (_, native_cubin) = run_link(s, "handle", &ptx, None);
    assert!(matches!(at_load(&native_cubin), CubinPlan::Native));
    for mode in ["handle", "linked"] {
        let (out, cubin) = run_link(s, mode, &ptx, Some("verbosity=1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("nvJitLink link: checked cubin"), "{mode}: {err}");
        if mode == "handle" {
            assert!(stdout(&out).contains("default_before=0"), "nvJitLink not loaded: RTLD_DEFAULT finds nothing, as without gasan");
        }
        let tables = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
        // The one store, at the line of its source that Numba's PTX names.
        let [site] = &tables.sites.sites[..] else { panic!("{mode}: {:?}", tables.sites.sites) };
        assert!(site.kernel.contains("k_numba_write"), "{}", site.kernel);
        let loc = site.loc.as_ref().expect("Numba's PTX has .loc lines");
        let want = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/numba/compile_ptx.py")).unwrap().lines().position(|l| l.contains("BUG:numba_overflow")).unwrap() + 1;
        assert!(loc.file.ends_with("compile_ptx.py"), "{mode}: {loc:?}");
        assert_eq!(loc.line, want as u32, "{mode}");
        assert!(matches!(at_load(&cubin), CubinPlan::Checked { .. }), "{mode}: not recognised as checked at load");
    }
    // instrument=0: nvJitLink's own cubin.
    let (_, cubin) = run_link(s, "linked", &ptx, Some("instrument=0"));
    assert_eq!(cubin, native_cubin);
}

#[test]
fn every_ptx_input_of_a_link_is_checked() {
    let Some(s) = setup() else { return };
    // Numba's kernel; a kernel with a store past its buffer that calls a device function of the
    // third input; that function.
    let (numba, second, third) = (numba_ptx(), fixture("nvjitlink_second.ptx"), fixture("nvjitlink_third.ptx"));
    let inputs = [numba.as_path(), second.as_path(), third.as_path()];
    let (_, native_cubin) = run_link_inputs(s, "handle", &inputs, None);
    assert!(matches!(at_load(&native_cubin), CubinPlan::Native));
    for mode in ["handle", "linked"] {
        let (out, cubin) = run_link_inputs(s, mode, &inputs, Some("verbosity=1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("nvJitLink link: checked cubin") && err.contains("3 PTX input(s) of 3 checked"), "{mode}: {err}");
        assert!(!err.contains("unchecked") && !err.contains("nvJitLink link: not checked"), "{mode}: {err}");
        // The first input's tables as a single module's; each further input's apart, naming the
        // control block its checks read.
        let first = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
        assert!(first.sites.sites.len() == 1 && first.sites.sites[0].kernel.contains("k_numba_write"), "{mode}: {:?}", first.sites.sites);
        let linked = gasan_jit::linked_tables_in_cubin(&cubin).unwrap();
        let blocks: Vec<&str> = linked.iter().map(|l| l.control_block.as_str()).collect();
        assert_eq!(blocks, ["__gasan_ctl_l1", "__gasan_ctl_l2"], "{mode}");
        // The planted overflow of the second input is a checked site: a 4-byte store in its kernel.
        let [overflow] = &linked[0].tables.sites.sites[..] else { panic!("{mode}: {:?}", linked[0].tables.sites.sites) };
        assert_eq!((overflow.kernel.as_str(), overflow.width), ("k_second_overflow", 4), "{mode}");
        assert_eq!(overflow.kind, gasan_instrument::abi::AccessKind::Write, "{mode}");
        let [callee] = &linked[1].tables.sites.sites[..] else { panic!("{mode}: {:?}", linked[1].tables.sites.sites) };
        assert_eq!(callee.kernel, "store_at", "{mode}");
        // Every input's control block and slow path are in the cubin, apart.
        let names = ["__gasan_ctl", "__gasan_ctl_l1", "__gasan_ctl_l2"];
        let found = gasan_instrument::container::symbol_data_ranges(&cubin, names);
        assert!(found.iter().all(Option::is_some), "{mode}: {:?}", names.iter().zip(&found).collect::<Vec<_>>());
        // At load: one module id per input, each further one with its control block to write,
        // and every input's kernels in the parameter tags.
        let mut registered = Vec::new();
        let plan = plan_cubin(&cubin, &(&Options::default()).into(), |m| {
            registered.push(m.into_table());
            registered.len() as u64
        });
        let CubinPlan::Checked { id, param_tags, linked: inputs } = plan else { panic!("{mode}: not recognised as checked at load") };
        assert_eq!(id, 1);
        let ids: Vec<(u64, &str)> = inputs.iter().map(|i| (i.module_id, i.ctl_symbol.as_str())).collect();
        assert_eq!(ids, [(2, "__gasan_ctl_l1"), (3, "__gasan_ctl_l2")], "{mode}");
        assert_eq!(registered[1], linked[0].tables.sites, "{mode}: the second input's sites are module 2's");
        assert!(param_tags.kernels.contains_key("k_second_overflow") && param_tags.kernels.keys().any(|k| k.contains("k_numba_write")), "{mode}: {:?}", param_tags.kernels.keys());
    }
}

#[test]
fn a_link_gasan_cannot_check_gets_nvjitlinks_own_cubin() {
    let Some(s) = setup() else { return };
    // PTX that carries gasan's control block already is refused by the rewriter: warned, and the
    // program gets the link nvJitLink made.
    let checked = s.dir.join("checked-already.ptx");
    let text = std::fs::read_to_string(numba_ptx()).unwrap();
    let c = gasan_jit::check_module(&text, &ModuleOptions::from(&Options::default()).instrument_options(false), "test").unwrap();
    std::fs::write(&checked, c.text).unwrap();
    let (_, native_cubin) = run_link(s, "handle", &checked, None);
    let (out, cubin) = run_link(s, "handle", &checked, Some("verbosity=0"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARNING: nvJitLink link: not checked (the rewriter refused its PTX") && err.contains("the program gets nvJitLink's own cubin"), "{err}");
    assert_eq!(cubin, native_cubin);
}

#[test]
fn numbas_ptx_is_checked_and_assembled_by_the_pinned_ptxas() {
    // What Numba-CUDA <= 0.15 hands the driver's cuLink*, and gasan-ptxas-style checking: the
    // rewriter checks its one store and the pinned ptxas accepts the checked PTX.
    let text = std::fs::read_to_string(numba_ptx()).unwrap();
    let c = gasan_jit::check_module(&text, &ModuleOptions::from(&Options::default()).instrument_options(false), "test").unwrap();
    let t = c.instrumented.stats.total();
    assert_eq!((t.found, t.checked, t.unknown), (1, 1, 0));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("numba-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k.ptx"), &c.text).unwrap();
    let out = Command::new(common::cuda_root().join("bin/ptxas")).args(["-arch=sm_90", "-o"]).arg(dir.join("k.cubin")).arg(dir.join("k.ptx")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cubin = std::fs::read(dir.join("k.cubin")).unwrap();
    assert!(matches!(at_load(&cubin), CubinPlan::Checked { .. }));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_warm_run_takes_the_checked_nvrtc_cubin_from_the_cache() {
    let Some(s) = setup() else { return };
    let (_, first) = run(s, "linked", Some("verbosity=2"));
    let (out, again) = run(s, "linked", Some("verbosity=2"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("from the cache"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(first, again);
    // Other checks (the stubs go on after a report) are another entry, and another cubin.
    let (out, other) = run(s, "linked", Some("verbosity=2:halt_on_error=0"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("from the cache"), "{err}");
    assert_ne!(other, first);
    assert!(matches!(at_load(&other), CubinPlan::Foreign(_)), "checked with halt_on_error=0, loaded where it is 1");
}

#[test]
fn an_lto_link_gives_a_checked_cubin_of_its_optimised_ptx() {
    let Some(s) = setup() else { return };
    let (native_out, native_cubin) = run_lto(s, "ltoir", "jit_lto_kernel.cu", None, None);
    assert!(stdout(&native_out).contains("cubin="), "{}", stdout(&native_out));
    assert!(matches!(at_load(&native_cubin), CubinPlan::Native), "without gasan nvJitLink's cubin is native");
    let want_line = std::fs::read_to_string(fixture("jit_lto_kernel.cu")).unwrap().lines().position(|l| l.contains("the one checked store")).unwrap() as u32 + 1;
    for kind in ["ltoir", "any"] {
        let (out, cubin) = run_lto(s, kind, "jit_lto_kernel.cu", None, Some("verbosity=1"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("nvJitLink link: checked cubin") && err.contains("LTO-IR inputs (1) optimised to one PTX module"), "{kind}: {err}");
        assert_ne!(cubin, native_cubin, "{kind}: the program got nvJitLink's own cubin");
        let tables = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
        // The kernel's one store, at its line of the CUDA C++ (NVRTC -lineinfo reaches the PTX).
        let [site] = &tables.sites.sites[..] else { panic!("{kind}: {:?}", tables.sites.sites) };
        assert_eq!(site.kernel, "k_lto_write", "{kind}");
        let loc = site.loc.as_ref().expect("the linked PTX has .loc lines");
        assert!(loc.file.ends_with("jit_lto_kernel.cu"), "{kind}: {loc:?}");
        assert_eq!(loc.line, want_line, "{kind}");
        let CubinPlan::Checked { param_tags, .. } = at_load(&cubin) else { panic!("{kind}: not recognised as checked at load") };
        assert!(param_tags.kernels.contains_key("k_lto_write"), "{kind}: {:?}", param_tags.kernels.keys());
    }
    // instrument=0: nvJitLink's own cubin, and nothing said.
    let (out, cubin) = run_lto(s, "ltoir", "jit_lto_kernel.cu", None, Some("instrument=0:verbosity=1"));
    assert_eq!(cubin, native_cubin);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("nvJitLink"));
}

#[test]
fn numbas_lto_ir_linked_with_lto_gives_a_checked_cubin() {
    // Numba-CUDA 0.30.4's LTO-IR of the same kernel as its PTX fixture (jit/numba/compile_ptx.py),
    // linked as cuda.core links it (`-arch=sm_90 -lto`, LTO-IR input).
    let Some(s) = setup() else { return };
    let (_, native_cubin) = run_lto(s, "ltoir", "jit_numba_k_numba_write.ltoir", None, None);
    assert!(matches!(at_load(&native_cubin), CubinPlan::Native));
    let (out, cubin) = run_lto(s, "ltoir", "jit_numba_k_numba_write.ltoir", None, Some("verbosity=1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nvJitLink link: checked cubin"), "{err}");
    let tables = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
    let [site] = &tables.sites.sites[..] else { panic!("{:?}", tables.sites.sites) };
    assert!(site.kernel.contains("k_numba_write"), "{}", site.kernel);
    let loc = site.loc.as_ref().expect("Numba's LTO-IR (lineinfo=True) keeps its lines through the link");
    let want = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/numba/compile_ptx.py")).unwrap().lines().position(|l| l.contains("BUG:numba_overflow")).unwrap() + 1;
    assert!(loc.file.ends_with("compile_ptx.py"), "{loc:?}");
    assert_eq!(loc.line, want as u32);
    assert!(matches!(at_load(&cubin), CubinPlan::Checked { .. }), "not recognised as checked at load");
}

#[test]
fn an_lto_links_other_inputs_are_linked_with_the_checked_code() {
    let Some(s) = setup() else { return };
    // LTO-IR and a PTX input (Numba's kernel): the LTO-IR's kernel is checked as the first input,
    // the PTX (which nvJitLink compiles apart) as a further one, and the cubin holds both kernels.
    let (out, cubin) = run_lto(s, "ltoir", "jit_lto_kernel.cu", Some(&numba_ptx()), Some("verbosity=1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nvJitLink link: checked cubin") && err.contains("1 PTX input(s) checked; 0 other inputs as they were"), "{err}");
    assert!(!err.contains("unchecked") && !err.contains("nvJitLink link: not checked"), "{err}");
    let tables = gasan_jit::tables_in_cubin(&cubin).unwrap().expect("tables");
    let kernels: Vec<&str> = tables.sites.sites.iter().map(|x| x.kernel.as_str()).collect();
    assert_eq!(kernels, ["k_lto_write"]);
    let linked = gasan_jit::linked_tables_in_cubin(&cubin).unwrap();
    let [ptx] = &linked[..] else { panic!("{linked:?}") };
    assert!(ptx.control_block == "__gasan_ctl_l1" && ptx.tables.sites.sites.iter().all(|x| x.kernel.contains("k_numba_write")) && ptx.tables.sites.len() == 1, "{ptx:?}");
    let CubinPlan::Checked { param_tags, linked, .. } = at_load(&cubin) else { panic!("not recognised as checked at load") };
    assert_eq!(linked.len(), 1);
    assert!(param_tags.kernels.contains_key("k_lto_write") && param_tags.kernels.keys().any(|k| k.contains("k_numba_write")));
    let elf = String::from_utf8_lossy(&cubin);
    assert!(elf.contains("k_numba_write"), "the PTX input's kernel is linked in");
}

#[test]
fn an_lto_link_gasan_cannot_check_gets_nvjitlinks_own_cubin() {
    let Some(s) = setup() else { return };
    // The optimised PTX defines a symbol of gasan's own name, which the rewriter refuses: warned,
    // counted, and the program gets the cubin nvJitLink made.
    let (_, native_cubin) = run_lto(s, "ltoir", "jit_lto_kernel_gasan_named.cu", None, None);
    let (out, cubin) = run_lto(s, "ltoir", "jit_lto_kernel_gasan_named.cu", None, Some("verbosity=1"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARNING: nvJitLink link: not checked (the rewriter refused its PTX") && err.contains("the program gets nvJitLink's own cubin"), "{err}");
    assert!(err.contains("JIT-compiled modules from nvJitLink (Numba-CUDA): 0 checked; not checked: 1 failed on gasan's side (warned)"), "{err}");
    assert_eq!(cubin, native_cubin);
    assert!(matches!(at_load(&cubin), CubinPlan::Native));
}
