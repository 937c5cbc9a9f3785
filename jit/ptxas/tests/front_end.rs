//! gasan-ptxas as Triton runs it, with the pinned CUDA 13.0 ptxas as the real one (no GPU): its
//! `--version` answer, a checked and marked cubin that carries its site table, and the
//! cases where it must assemble the original or step aside.
//!
//! The fixture `triton_vector_add.ptx` is Triton 3.6's PTX of `vector_add` in jit/triton/kernels.py
//! (masked loads and stores in predicated inline-asm blocks, `@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];`).

use gasan_jit::marker::{decode_options, find_in_cubin, module_key, tables_in_cubin};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const FIXTURE: &str = include_str!("fixtures/triton_vector_add.ptx");

/// The pinned CUDA toolchain's ptxas (`$GASAN_CUDA_ROOT`, else installed by scripts/cuda-toolchain.sh).
fn real_ptxas() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let root = match std::env::var_os("GASAN_CUDA_ROOT") {
            Some(r) => PathBuf::from(r),
            None => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cuda-toolchain.sh");
                let out = Command::new("bash").arg(&script).output().expect("run cuda-toolchain.sh");
                assert!(out.status.success(), "cuda-toolchain.sh: {}", String::from_utf8_lossy(&out.stderr));
                PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
            }
        };
        root.join("bin/ptxas")
    })
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("front-end-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// gasan-ptxas with the pinned ptxas as the real one, `options` as GASAN_OPTIONS, the cache in
/// `dir/cache`.
fn front_end(dir: &Path, options: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gasan-ptxas"));
    c.env("GASAN_REAL_PTXAS", real_ptxas()).env("GASAN_OPTIONS", format!("cache_dir={}:{options}", dir.join("cache").display())).env_remove("GASAN_REAL_PTXAS_BLACKWELL");
    c
}

/// Triton's command line: `-lineinfo -v --gpu-name=sm_90a IN -o OUT`.
fn triton_compile(c: &mut Command, input: &Path, output: &Path) -> Output {
    c.args(["-lineinfo", "-v", "--gpu-name=sm_90a"]).arg(input).arg("-o").arg(output).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_is_the_real_answer_plus_gasans_line_and_changes_with_the_options() {
    let d = scratch("version");
    let real = Command::new(real_ptxas()).arg("--version").output().unwrap();
    let ours = front_end(&d, "").arg("--version").output().unwrap();
    assert!(ours.status.success());
    let (real, ours) = (text(&real.stdout), text(&ours.stdout));
    assert!(ours.starts_with(&real), "{ours}");
    assert_ne!(ours, real);
    assert!(ours.contains(&format!("REVISION {}", gasan_instrument::ptx::REVISION)), "{ours}");
    // Triton reads `release N.N`, XLA `VN.N.N`: the first of each is the real one.
    assert!(ours.contains("release 13.0, V13.0"), "{ours}");
    let recover = text(&front_end(&d, "halt_on_error=0").arg("--version").output().unwrap().stdout);
    assert_ne!(recover, ours, "options that change the checks change the answer (Triton's cache key)");
    let verbose = text(&front_end(&d, "verbosity=1").arg("-V").output().unwrap().stdout);
    assert_eq!(verbose, ours, "options that do not change the checks leave it");
    // instrument=0: nothing is checked, so the cubins are native and so is the answer.
    let off = text(&front_end(&d, "instrument=0").arg("--version").output().unwrap().stdout);
    assert_eq!(off, real);
}

#[test]
fn a_triton_module_is_checked_marked_and_carries_its_sites() {
    let d = scratch("check");
    let input = d.join("vector_add.ptx");
    std::fs::write(&input, FIXTURE).unwrap();
    let out = triton_compile(&mut front_end(&d, "verbosity=1"), &input, &d.join("checked.cubin"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    // ptxas's own -v lines reach Triton's log, and the front end's count.
    assert!(log.contains("Compiling entry function 'vector_add' for 'sm_90a'"), "{log}");
    assert!(log.contains("24 accesses, 24 checked"), "{log}");

    let cubin = std::fs::read(d.join("checked.cubin")).unwrap();
    let marker = find_in_cubin(&cubin).unwrap().expect("the cubin carries the marker");
    assert_eq!(marker.revision, gasan_instrument::ptx::REVISION);
    let opts = decode_options(marker.options).unwrap();
    assert_eq!(opts.scale.shift(), 8);
    assert!(!opts.recover && !opts.aligned_pool && opts.hoist_loops && opts.param_bounds);
    let code_key = gasan_runtime::options::Options::parse(&format!("cache_dir={}:verbosity=1", d.join("cache").display())).unwrap().code_key();
    assert_eq!(marker.key, module_key(FIXTURE, &opts, &code_key));

    // The cubin carries its site table and parameter tags: the kernel, its Python lines.
    let tables = tables_in_cubin(&cubin).unwrap().expect("the cubin carries its tables");
    let sites = &tables.sites;
    assert_eq!(sites.len(), 24);
    let site = sites.get(0).unwrap();
    assert_eq!(site.kernel, "vector_add");
    let loc = site.loc.as_ref().unwrap();
    assert!(loc.file.ends_with("kernels.py") && loc.line > 0, "{loc:?}");
    // Nothing is left in gasan's cache: the cubin is self-contained.
    assert!(!d.join("cache").exists());

    // The native compile has neither marker nor checks.
    let native = Command::new(real_ptxas()).args(["-lineinfo", "-v", "--gpu-name=sm_90a"]).arg(&input).arg("-o").arg(d.join("native.cubin")).output().unwrap();
    assert!(native.status.success());
    let native = std::fs::read(d.join("native.cubin")).unwrap();
    assert_eq!(find_in_cubin(&native).unwrap(), None);
    assert_eq!(tables_in_cubin(&native).unwrap(), None);

    // What the runtime will make of these cubins.
    let halt = gasan_jit::Expected { scale: opts.scale, recover: false };
    match gasan_jit::recognise(&cubin, halt) {
        gasan_jit::Recognition::Checked { marker: m, tables: t, linked } => assert!(m == marker && t == tables && linked.is_empty()),
        r => panic!("{r:?}"),
    }
    assert_eq!(gasan_jit::recognise(&native, halt), gasan_jit::Recognition::Native);
    let other_scale = gasan_jit::Expected { scale: gasan_instrument::shadow::Scale::S7, recover: false };
    assert!(matches!(gasan_jit::recognise(&cubin, other_scale), gasan_jit::Recognition::Foreign { why, .. } if why.contains("shadow_scale=8")));
    let recover = gasan_jit::Expected { scale: opts.scale, recover: true };
    assert!(matches!(gasan_jit::recognise(&cubin, recover), gasan_jit::Recognition::Foreign { why, .. } if why.contains("halt_on_error=1")));

    // A marker from another revision, or with option bits this build does not know: foreign.
    let at = cubin.windows(8).position(|w| w == b"GASANJIT").unwrap();
    let mut other = cubin.clone();
    other[at + 12..at + 16].copy_from_slice(&(gasan_instrument::ptx::REVISION + 1).to_le_bytes());
    assert!(matches!(gasan_jit::recognise(&other, halt), gasan_jit::Recognition::Foreign { why, .. } if why.contains("REVISION")));
    let mut other = cubin.clone();
    other[at + 23] = 0x80;
    assert!(matches!(gasan_jit::recognise(&other, halt), gasan_jit::Recognition::Foreign { why, .. } if why.contains("does not know")));

    // recover mode: another key, the recover bit set.
    let out = triton_compile(&mut front_end(&d, "halt_on_error=0"), &input, &d.join("recover.cubin"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let m2 = find_in_cubin(&std::fs::read(d.join("recover.cubin")).unwrap()).unwrap().unwrap();
    assert_ne!(m2.key, marker.key);
    assert!(decode_options(m2.options).unwrap().recover);
}

#[test]
fn what_cannot_be_checked_is_assembled_as_it_is() {
    let d = scratch("fallback");
    // A module that defines the marker's name itself: the rewriter refuses a module naming
    // gasan's reserved names, so the original is assembled, with a warning.
    let clash = d.join("clash.ptx");
    std::fs::write(&clash, format!("{FIXTURE}\n.visible .global .align 8 .b8 __gasan_jit[8];\n")).unwrap();
    let out = triton_compile(&mut front_end(&d, ""), &clash, &d.join("clash.cubin"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("gasan-ptxas: warning:") && err.contains("names __gasan_jit") && err.contains("assembling it unchecked"), "{err}");
    let cubin = std::fs::read(d.join("clash.cubin")).unwrap();
    assert!(find_in_cubin(&cubin).is_err(), "the user's 8-byte __gasan_jit is not a marker");
    let halt = gasan_jit::Expected { scale: gasan_instrument::shadow::Scale::S8, recover: false };
    assert!(matches!(gasan_jit::recognise(&cubin, halt), gasan_jit::Recognition::Damaged(_)));

    // A real ptxas that refuses the checked copy (it has the marker) and assembles the original:
    // the original's cubin, with a warning that names the refusal.
    let picky = d.join("picky-ptxas");
    std::fs::write(
        &picky,
        format!("#!/bin/sh\nfor a in \"$@\"; do case $a in *.ptx) grep -q __gasan_jit \"$a\" && {{ echo 'picky: no' >&2; exit 3; }};; esac; done\nexec '{}' \"$@\"\n", real_ptxas().display()),
    )
    .unwrap();
    std::fs::set_permissions(&picky, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plain = d.join("plain.ptx");
    std::fs::write(&plain, FIXTURE).unwrap();
    let out = triton_compile(front_end(&d, "").env("GASAN_REAL_PTXAS", &picky), &plain, &d.join("plain.cubin"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("refused the checked copy") && err.contains("picky: no") && err.contains("assembled the original unchecked"), "{err}");
    assert!(find_in_cubin(&std::fs::read(d.join("plain.cubin")).unwrap()).unwrap().is_none(), "the original has no marker");

    // PTX the rewriter refuses (32-bit addresses): a warning, then the real ptxas's verdict on the
    // original, whatever it is.
    let narrow = d.join("narrow.ptx");
    std::fs::write(&narrow, FIXTURE.replace(".address_size 64", ".address_size 32")).unwrap();
    let ours = triton_compile(&mut front_end(&d, ""), &narrow, &d.join("narrow.cubin"));
    let real = Command::new(real_ptxas()).args(["-lineinfo", "-v", "--gpu-name=sm_90a"]).arg(&narrow).arg("-o").arg(d.join("narrow-real.cubin")).output().unwrap();
    assert!(text(&ours.stderr).contains("unsupported .address_size"), "{}", text(&ours.stderr));
    assert_eq!(ours.status.code(), real.status.code());

    // Bad GASAN_OPTIONS: a warning naming the option, the original assembled, no marker.
    let input = d.join("vector_add.ptx");
    std::fs::write(&input, FIXTURE).unwrap();
    let out = triton_compile(&mut front_end(&d, "no_such_option=1"), &input, &d.join("bad-options.cubin"));
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("no_such_option"), "{}", text(&out.stderr));
    assert_eq!(find_in_cubin(&std::fs::read(d.join("bad-options.cubin")).unwrap()).unwrap(), None);

    // Checked PTX (the runtime's own compiles find this ptxas on PATH): assembled as it is, quietly.
    let checked = gasan_jit::check_module(FIXTURE, &Default::default(), "").unwrap();
    let again = d.join("again.ptx");
    std::fs::write(&again, &checked.text).unwrap();
    let out = triton_compile(&mut front_end(&d, ""), &again, &d.join("again.cubin"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("gasan-ptxas"), "{}", text(&out.stderr));
    assert_eq!(find_in_cubin(&std::fs::read(d.join("again.cubin")).unwrap()).unwrap(), Some(checked.marker));
}

#[test]
fn bad_arguments_reach_the_real_ptxas_unchanged() {
    let d = scratch("args");
    let input = d.join("vector_add.ptx");
    std::fs::write(&input, FIXTURE).unwrap();
    for args in [vec!["--no-such-flag", "-arch=sm_90a"], vec!["--gpu-name=sm_9999"], vec!["-c", "--gpu-name=sm_90a"]] {
        let run = |c: &mut Command| c.args(&args).arg(&input).arg("-o").arg(d.join("x.o")).output().unwrap();
        let ours = run(&mut front_end(&d, ""));
        let real = run(&mut Command::new(real_ptxas()));
        assert_eq!(ours.status.code(), real.status.code(), "{args:?}");
        assert_eq!(text(&ours.stderr).replace(env!("CARGO_BIN_EXE_gasan-ptxas"), "ptxas"), text(&real.stderr), "{args:?}");
    }
}

#[test]
fn no_real_ptxas_is_a_clear_error() {
    let d = scratch("none");
    let out =
        Command::new(env!("CARGO_BIN_EXE_gasan-ptxas")).arg("--version").env_remove("GASAN_REAL_PTXAS").env_remove("CUDA_HOME").env_remove("CUDA_PATH").env("PATH", d.join("empty")).output().unwrap();
    if Path::new("/usr/local/cuda/bin/ptxas").exists() {
        eprintln!("skipped: /usr/local/cuda/bin/ptxas exists on this machine");
        return;
    }
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no real ptxas found: set GASAN_REAL_PTXAS"), "{}", text(&out.stderr));
}

#[test]
fn xlas_command_line_and_the_blackwell_name_are_checked_too() {
    let d = scratch("xla");
    let input = d.join("module.ptx");
    std::fs::write(&input, FIXTURE).unwrap();
    // XLA: input first, `-arch=`, `-O3`.
    let out = front_end(&d, "").arg(&input).arg("-o").arg(d.join("xla.cubin")).args(["-arch=sm_90a", "-O3", "--warn-on-spills", "-v"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(find_in_cubin(&std::fs::read(d.join("xla.cubin")).unwrap()).unwrap().is_some());

    // Run as `ptxas-blackwell` (Triton's TRITON_PTXAS_BLACKWELL_PATH): the Blackwell real tool.
    let link = d.join("ptxas-blackwell");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gasan-ptxas"), &link).unwrap();
    let blackwell_ptx = FIXTURE.replace(".target sm_90a", ".target sm_100a");
    std::fs::write(&input, blackwell_ptx).unwrap();
    // The sm_90 tool named: one that always fails, so taking it for the Blackwell one shows.
    let wrong = d.join("wrong-ptxas");
    std::fs::write(&wrong, "#!/bin/sh\nexit 99\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = Command::new(&link);
    c.env("GASAN_REAL_PTXAS_BLACKWELL", real_ptxas()).env("GASAN_REAL_PTXAS", &wrong).env("GASAN_OPTIONS", format!("cache_dir={}", d.join("cache").display()));
    let out = c.args(["-lineinfo", "-v", "--gpu-name=sm_100a"]).arg(&input).arg("-o").arg(d.join("blackwell.cubin")).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(find_in_cubin(&std::fs::read(d.join("blackwell.cubin")).unwrap()).unwrap().is_some());

    // Run as JAX's data directory's `bin/ptxas` (gasan's Python hook makes `xla-cuda-*/bin/ptxas`
    // a link to the front end): the real tool is GASAN_REAL_PTXAS_XLA, JAX's own ptxas, not
    // Triton's GASAN_REAL_PTXAS (here one that always fails).
    std::fs::write(&input, FIXTURE).unwrap();
    let bin = d.join("jit-tools/xla-cuda-0123456789abcdef/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gasan-ptxas"), bin.join("ptxas")).unwrap();
    let xla = |real_xla: Option<&Path>, out: &str| {
        let mut c = Command::new(bin.join("ptxas"));
        c.env("GASAN_REAL_PTXAS", &wrong).env_remove("GASAN_REAL_PTXAS_XLA").env("GASAN_OPTIONS", format!("cache_dir={}", d.join("cache").display()));
        if let Some(r) = real_xla {
            c.env("GASAN_REAL_PTXAS_XLA", r);
        }
        c.arg(&input).arg("-o").arg(d.join(out)).args(["-arch=sm_90a", "-O3"]).output().unwrap()
    };
    let out = xla(Some(real_ptxas()), "xla-role.cubin");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cubin = std::fs::read(d.join("xla-role.cubin")).unwrap();
    assert_eq!(find_in_cubin(&cubin).unwrap().map(|m| m.revision), Some(gasan_instrument::ptx::REVISION));
    assert_eq!(tables_in_cubin(&cubin).unwrap().map(|t| t.sites.len()), Some(24));
    // The same link as Triton's `ptxas` (not under `xla-cuda-*/bin`): Triton's real tool, which fails.
    let triton = d.join("jit-tools/ptxas");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gasan-ptxas"), &triton).unwrap();
    let out = Command::new(&triton)
        .env("GASAN_REAL_PTXAS", &wrong)
        .env("GASAN_REAL_PTXAS_XLA", real_ptxas())
        .env("GASAN_OPTIONS", format!("cache_dir={}", d.join("cache").display()))
        .arg(&input)
        .arg("-o")
        .arg(d.join("t.cubin"))
        .args(["-arch=sm_90a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(99), "{}", text(&out.stderr));
}
