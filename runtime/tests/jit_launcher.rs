//! gasan-run's switches for kernels compiled at run time (runtime/src/bin/launcher/jit.rs), without
//! a GPU: the child's Triton and XLA find gasan-ptxas (TRITON_PTXAS_PATH, the Blackwell one, PATH),
//! a ptxas the user named runs behind it, Inductor's cache is apart from native runs' and keyed
//! by the checks' options, JAX's persistent cache is off, Numba-CUDA <= 0.15 links through the
//! driver (NUMBA_CUDA_ENABLE_PYNVJITLINK=0), PyTorch extensions built for a SASS-only
//! TORCH_CUDA_ARCH_LIST gain PTX in a directory of their own; a gasan-run under another adds nothing
//! twice; `instrument=0` sets nothing. A Python child that imports a stand-in `jax._src.lib`
//! whose CUDA directory is the pinned toolchain runs, at `<jax cuda_path>/bin/ptxas`, the front
//! end in front of that toolchain's ptxas (as XLA does): its cubin is checked and marked; so does
//! one whose `cuda_path` names no ptxas (jax 0.11's `"None"`) with the toolchain on `PATH`.

mod common;
use std::path::{Path, PathBuf};
use std::process::Command;

const VARS: &[&str] = &[
    "TRITON_PTXAS_PATH",
    "TRITON_PTXAS_BLACKWELL_PATH",
    "GASAN_REAL_PTXAS",
    "GASAN_REAL_PTXAS_BLACKWELL",
    "TORCHINDUCTOR_CACHE_DIR",
    "JAX_ENABLE_COMPILATION_CACHE",
    "PATH",
    "NUMBA_CUDA_ENABLE_PYNVJITLINK",
    "GASAN_JIT_TOOLS",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_EXTENSIONS_DIR",
    "XLA_FLAGS",
];

fn front_end() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("gasan-ptxas")
}

/// The runtime library and gasan-ptxas are built next to gasan-run (scripts/test.d/10-cargo.sh
/// builds the workspace first).
fn built() -> bool {
    let ok = front_end().is_file() && front_end().with_file_name("libgasan_runtime.so").is_file();
    if !ok {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "gasan-ptxas or libgasan_runtime.so not built next to gasan-run");
        eprintln!("skipped: build the workspace first (gasan-ptxas, libgasan_runtime.so)");
    }
    ok
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gasan-jit-launcher-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// gasan-run with none of the variables inherited (PATH: /usr/bin:/bin) and its cache in `cache`.
fn gasan_run(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gasan-run"));
    for k in VARS {
        c.env_remove(k);
    }
    c.env("PATH", "/usr/bin:/bin").env_remove("GASAN_OPTIONS").env_remove("XLA_FLAGS").arg("--cache-dir").arg(cache);
    c
}

/// The child's values of VARS (`-` for unset).
fn child_env(cmd: &mut Command) -> Vec<String> {
    let script = VARS.iter().map(|k| format!("${{{k}-<unset>}}")).collect::<Vec<_>>().join("|");
    let out = cmd.args(["--", "/bin/sh", "-c", &format!("echo \"{script}\"")]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().split('|').map(|s| if s == "<unset>" { "-".into() } else { s.into() }).collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (x, y) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    (x.dev(), x.ino()) == (y.dev(), y.ino())
}

#[test]
fn triton_inductor_and_xla_are_pointed_at_the_front_end() {
    if !built() {
        return;
    }
    let cache = tmp("env");
    let got = child_env(&mut gasan_run(&cache));
    let (ptxas, blackwell) = (Path::new(&got[0]), Path::new(&got[1]));
    assert_eq!(ptxas.file_name().unwrap(), "ptxas");
    assert_eq!(blackwell.file_name().unwrap(), "ptxas-blackwell");
    assert_eq!(ptxas.parent(), blackwell.parent());
    let tools = ptxas.parent().unwrap();
    assert!(tools.starts_with(&cache), "{}", tools.display());
    assert!(same_file(ptxas, &front_end()) && same_file(blackwell, &front_end()));
    assert_eq!(got[2..4], ["-", "-"], "no real ptxas named: the front end finds Triton's own");
    let inductor = &got[4];
    assert!(Path::new(inductor).starts_with(&cache) && inductor.contains("torchinductor-"), "{inductor}");
    assert_eq!(got[5], "false");
    assert_eq!(got[6], format!("{}:/usr/bin:/bin", tools.display()));
    assert_eq!(got[7], "0", "Numba links through the driver");
    assert_eq!(Path::new(&got[8]), tools, "the Python hook makes XLA's directory there");
    assert_eq!(got[11], "--xla_gpu_generate_line_info=true", "XLA's PTX carries lines");

    // Options that change the checks change Inductor's directory; others do not.
    let recover = child_env(gasan_run(&cache).args(["--halt-on-error", "0"]));
    assert_ne!(recover[4], *inductor);
    let verbose = child_env(gasan_run(&cache).args(["--verbosity", "1"]));
    assert_eq!(verbose[4], *inductor);

    // The user's choices: their ptxas runs behind the front end, their caches hold ours apart.
    let got_user = child_env(
        gasan_run(&cache)
            .env("TRITON_PTXAS_PATH", "/opt/cuda/bin/ptxas")
            .env("TRITON_PTXAS_BLACKWELL_PATH", "/opt/cuda13/bin/ptxas")
            .env("TORCHINDUCTOR_CACHE_DIR", "/data/inductor")
            .env("JAX_ENABLE_COMPILATION_CACHE", "true")
            .env("NUMBA_CUDA_ENABLE_PYNVJITLINK", "1"),
    );
    assert_eq!(got_user[..2], got[..2]);
    assert_eq!(got_user[2..4], ["/opt/cuda/bin/ptxas", "/opt/cuda13/bin/ptxas"]);
    assert!(got_user[4].starts_with("/data/inductor/gasan-"), "{}", got_user[4]);
    assert_eq!(got_user[5], "true");
    assert_eq!(got_user[7], "1", "the user's Numba linker is kept");
    let flags = child_env(gasan_run(&cache).env("XLA_FLAGS", "--xla_dump_to=/tmp/x"));
    assert_eq!(flags[11], "--xla_dump_to=/tmp/x --xla_gpu_generate_line_info=true");
    let flags = child_env(gasan_run(&cache).env("XLA_FLAGS", "--xla_gpu_generate_line_info=false"));
    assert_eq!(flags[11], "--xla_gpu_generate_line_info=false", "the user's choice is kept");

    // A gasan-run under another: the front end is not taken for the real ptxas, PATH not doubled,
    // Inductor's directory the same.
    let mut nested = gasan_run(&cache);
    for (k, v) in VARS.iter().zip(&got) {
        if v != "-" {
            nested.env(k, v);
        }
    }
    let got_nested = child_env(&mut nested);
    assert_eq!(got_nested[2..4], ["-", "-"]);
    assert_eq!(got_nested[6], got[6]);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn pytorch_extensions_built_for_sass_only_gain_ptx_apart_from_native_builds() {
    if !built() {
        return;
    }
    let cache = tmp("ext");
    let got = child_env(&mut gasan_run(&cache));
    assert_eq!(got[9..11], ["-", "-"], "unset: PyTorch adds +PTX for the GPU itself");
    let got = child_env(gasan_run(&cache).env("TORCH_CUDA_ARCH_LIST", "8.0 9.0a"));
    assert_eq!(got[9], "8.0;9.0a+PTX");
    assert_eq!(Path::new(&got[10]), cache.join("torch-extensions"));
    let got = child_env(gasan_run(&cache).env("TORCH_CUDA_ARCH_LIST", "9.0a").env("TORCH_EXTENSIONS_DIR", "/data/ext"));
    assert_eq!(got[9..11], ["9.0a+PTX", "/data/ext/gasan"]);
    // A list with PTX already is the user's, and so is their extensions directory.
    let got = child_env(gasan_run(&cache).env("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX").env("TORCH_EXTENSIONS_DIR", "/data/ext"));
    assert_eq!(got[9..11], ["8.0;9.0+PTX", "/data/ext"]);
    let off = child_env(gasan_run(&cache).env("TORCH_CUDA_ARCH_LIST", "9.0a").args(["--instrument", "0"]));
    assert_eq!(off[9..11], ["9.0a", "-"], "instrument=0 sets nothing");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn verbosity_1_says_what_was_set_and_what_xla_will_run() {
    if !built() {
        return;
    }
    let cache = tmp("say");
    let out = gasan_run(&cache).env("XLA_FLAGS", "--xla_gpu_cuda_data_dir=/opt/cuda").args(["--verbosity", "1", "--", "/bin/true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("JIT kernels: Triton and XLA run"), "{err}");
    assert!(err.contains("TORCHINDUCTOR_CACHE_DIR="), "{err}");
    assert!(err.contains("JAX_ENABLE_COMPILATION_CACHE=false"), "{err}");
    assert!(err.contains("NUMBA_CUDA_ENABLE_PYNVJITLINK=0"), "{err}");
    assert!(err.contains("XLA_FLAGS=--xla_gpu_cuda_data_dir=/opt/cuda names a CUDA directory"), "{err}");
    let quiet = gasan_run(&cache).args(["--", "/bin/true"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("JIT kernels"));
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn nothing_is_set_without_instrumentation() {
    if !built() {
        return;
    }
    let cache = tmp("off");
    for how in ["flag", "env"] {
        let mut c = gasan_run(&cache);
        if how == "flag" {
            c.args(["--instrument", "0"]);
        } else {
            c.env("GASAN_OPTIONS", "instrument=0");
        }
        let got = child_env(&mut c);
        assert_eq!(got, ["-", "-", "-", "-", "-", "-", "/usr/bin:/bin", "-", "-", "-", "-", "-"], "{how}");
    }
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn an_unwritable_cache_puts_the_links_in_a_private_temporary_directory() {
    if !built() {
        return;
    }
    let t = tmp("tmpdir");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gasan-run"));
    for k in VARS {
        c.env_remove(k);
    }
    c.env("PATH", "/usr/bin:/bin").env_remove("GASAN_OPTIONS").env("TMPDIR", &t).args(["--cache-dir", "/proc/gasan-no-such-dir"]);
    let got = child_env(&mut c);
    let tools = Path::new(&got[0]).parent().unwrap();
    assert!(tools.starts_with(&t), "{}", tools.display());
    assert!(same_file(Path::new(&got[0]), &front_end()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(tools).unwrap().permissions().mode() & 0o777, 0o700);
    let _ = std::fs::remove_dir_all(&t);
}

#[test]
fn the_childs_ptxas_on_path_is_the_front_end() {
    if !built() {
        return;
    }
    // The pinned toolchain's ptxas as the real one, reached the way XLA reaches it: `ptxas` on PATH.
    let root = common::cuda_root();
    let cache = tmp("path");
    let real = Command::new(root.join("bin/ptxas")).arg("--version").output().unwrap();
    let out = gasan_run(&cache).env("GASAN_REAL_PTXAS", root.join("bin/ptxas")).args(["--", "ptxas", "--version"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let (real, ours) = (String::from_utf8(real.stdout).unwrap(), String::from_utf8(out.stdout).unwrap());
    assert!(ours.starts_with(&real) && ours.contains("gasan ptxas front end"), "{ours}");
    let _ = std::fs::remove_dir_all(&cache);
}

/// A stand-in `jax._src.lib` whose `cuda_path` is `cuda` (JAX's own CUDA directory), under `dir/fake`.
fn fake_jax(dir: &Path, cuda: &Path) {
    let lib = dir.join("fake/jax/_src/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(dir.join("fake/jax/__init__.py"), "").unwrap();
    std::fs::write(dir.join("fake/jax/_src/__init__.py"), "").unwrap();
    std::fs::write(lib.join("__init__.py"), format!("cuda_path = {:?}\n", cuda.display().to_string())).unwrap();
}

/// What XLA does with JAX's CUDA directory: runs its `bin/ptxas` on a module (sm_90a).
const XLA_LIKE: &str = r#"
import os, subprocess, sys
import jax._src.lib as lib
ptx, out = sys.argv[1], sys.argv[2]
print(lib.cuda_path)
subprocess.run([os.path.join(lib.cuda_path, "bin", "ptxas"), ptx, "-o", out, "-arch=sm_90a", "-O3"], check=True)
"#;

#[test]
fn jaxs_own_cuda_directory_runs_the_front_end_before_its_ptxas() {
    if !built() || Command::new("python3").arg("-c").arg("pass").output().map_or(true, |o| !o.status.success()) {
        eprintln!("skipped: no python3 or not built");
        return;
    }
    let root = common::cuda_root();
    let d = tmp("jax");
    fake_jax(&d, &root);
    let ptx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/ptxas/tests/fixtures/triton_vector_add.ptx");
    // Triton's real ptxas named as one that fails: XLA's must be JAX's own, not Triton's.
    let wrong = d.join("wrong-ptxas");
    std::fs::write(&wrong, "#!/bin/sh\nexit 99\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |pools: &str, out: &str| {
        let mut c = gasan_run(&d.join("cache"));
        c.env("PYTHONPATH", d.join("fake")).env("GASAN_REAL_PTXAS", &wrong).env("TMPDIR", &d);
        c.args(["--verbosity", "1", "--framework-pools", pools, "--", "python3", "-c", XLA_LIKE]).arg(&ptx).arg(d.join(out)).output().unwrap()
    };
    let out = run("1", "xla.cubin");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let cuda_path = PathBuf::from(stdout.trim());
    assert!(cuda_path.starts_with(d.join("cache")) && cuda_path.file_name().unwrap().to_str().unwrap().starts_with("xla-cuda-"), "{}", cuda_path.display());
    assert!(same_file(&cuda_path.join("bin/ptxas"), &front_end()));
    assert_eq!(std::fs::canonicalize(cuda_path.join("nvvm")).unwrap(), std::fs::canonicalize(root.join("nvvm")).unwrap(), "libdevice is JAX's");
    assert!(stderr.contains("==gasan== python: XLA's CUDA directory is"), "{stderr}");
    let cubin = std::fs::read(d.join("xla.cubin")).unwrap();
    assert!(gasan_jit::find_in_cubin(&cubin).unwrap().is_some(), "XLA's cubin is checked and marked");

    // framework_pools=0: no hook, JAX's directory and its ptxas as they are (said at verbosity 1).
    let out = run("0", "native.cubin");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(Path::new(stdout.trim()), root);
    assert!(stderr.contains("framework_pools=0: no Python start-up hook"), "{stderr}");
    assert_eq!(gasan_jit::find_in_cubin(&std::fs::read(d.join("native.cubin")).unwrap()).unwrap(), None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn without_a_jax_cuda_directory_xla_runs_the_front_end_with_the_ptxas_its_search_finds() {
    if !built() || Command::new("python3").arg("-c").arg("pass").output().map_or(true, |o| !o.status.success()) {
        eprintln!("skipped: no python3 or not built");
        return;
    }
    // jax 0.11 names the string "None" when pip's nvidia.cu13 has no bin/ptxas (as in an image
    // with PyTorch's CUDA wheels but no nvcc wheel); the CUDA toolkit is on PATH after gasan's tools.
    let root = common::cuda_root();
    let d = tmp("jax-none");
    fake_jax(&d, Path::new("None"));
    let ptx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../jit/ptxas/tests/fixtures/triton_vector_add.ptx");
    let mut c = gasan_run(&d.join("cache"));
    c.env("PATH", format!("/usr/bin:/bin:{}", root.join("bin").display())).env("PYTHONPATH", d.join("fake")).env("TMPDIR", &d);
    let out = c.args(["--verbosity", "1", "--", "python3", "-c", XLA_LIKE]).arg(&ptx).arg(d.join("xla.cubin")).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let cuda_path = PathBuf::from(stdout.trim());
    assert!(cuda_path.file_name().unwrap().to_str().unwrap().starts_with("xla-cuda-"), "{}", cuda_path.display());
    assert!(same_file(&cuda_path.join("bin/ptxas"), &front_end()));
    assert_eq!(std::fs::canonicalize(cuda_path.join("nvvm")).unwrap(), std::fs::canonicalize(root.join("nvvm")).unwrap());
    assert!(stderr.contains(&format!("JAX's CUDA directory None has no bin/ptxas: XLA's search finds {}", root.display())), "{stderr}");
    assert!(gasan_jit::find_in_cubin(&std::fs::read(d.join("xla.cubin")).unwrap()).unwrap().is_some(), "XLA's cubin is checked and marked");
    let _ = std::fs::remove_dir_all(&d);
}
