//! gasan-run's framework-pool switches (option `framework_pools`), without a GPU: the child gets
//! PyTorch's, CuPy's, Numba's and JAX's switches unless the user set them or the option is 0, and
//! the Python start-up hook (run by a real `python3` child) turns a fake CuPy's pools off at its
//! import, without importing it early, and still runs the user's own `sitecustomize`. A JAX
//! buffer allocated as XLA allocates it under the allocator gasan-run chose
//! (tests/fixtures/xla_alloc_app.c, on a stand-in libcuda whose device memory is host memory) comes
//! from gasan's pool: a copy one byte past it is reported; under XLA's `platform` allocator it would
//! not be. Under PyTorch's cudaMallocAsync backend (tests/fixtures/torch_async_alloc_app.c), an
//! allocation that fails for a sticky error answers that error, as the driver does, not out of memory.

mod common;
use common::gcc;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SWITCHES: &[(&str, &str)] = &[
    ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
    ("CUPY_COMPILE_WITH_PTX", "1"),
    ("NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT", "0"),
    ("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"),
    ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
];

fn lib_exists() -> bool {
    let ok = Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("libgasan_runtime.so").exists();
    if !ok {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "libgasan_runtime.so not built next to gasan-run");
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
    }
    ok
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gasan-fw-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// gasan-run with none of the switches (nor PYTHONPATH, GASAN_OPTIONS) inherited from the test's
/// environment, and its cache (where the hook is written) in `cache`.
fn gasan_run(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gasan-run"));
    for k in SWITCHES.iter().map(|(k, _)| *k).chain(["PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_ALLOC_CONF"]) {
        c.env_remove(k);
    }
    c.env_remove("PYTHONPATH").env_remove("GASAN_OPTIONS").arg("--cache-dir").arg(cache);
    c
}

/// The child's values of the switches and of PYTHONPATH (`-` for unset).
fn child_env(cmd: &mut Command) -> Vec<String> {
    let script = SWITCHES.iter().map(|(k, _)| format!("${{{k}-<unset>}}")).chain(["${PYTHONPATH-<unset>}".to_string()]).collect::<Vec<_>>().join("|");
    let out = cmd.args(["--", "/bin/sh", "-c", &format!("echo \"{script}\"")]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().split('|').map(|s| if s == "<unset>" { "-".into() } else { s.into() }).collect()
}

#[test]
fn switches_are_set_unless_the_user_set_them_or_the_option_is_off() {
    if !lib_exists() {
        return;
    }
    let cache = tmp("env");
    // Default: every switch set, the hook's directory first on PYTHONPATH, the user's after it.
    let got = child_env(gasan_run(&cache).env("PYTHONPATH", "/user/a:/user/b"));
    for (i, (k, v)) in SWITCHES.iter().enumerate() {
        assert_eq!(got[i], *v, "{k}");
    }
    let pp = &got[SWITCHES.len()];
    let (hook, rest) = pp.split_once(':').unwrap();
    assert!(hook.starts_with(&*cache.to_string_lossy()), "{pp}");
    assert!(Path::new(hook).join("sitecustomize.py").is_file(), "{hook}");
    assert_eq!(rest, "/user/a:/user/b");
    // No user PYTHONPATH: the hook's directory alone.
    let got = child_env(&mut gasan_run(&cache));
    assert_eq!(got[SWITCHES.len()], hook);
    // A gasan-run under another: the directory is not put on the path twice.
    let got = child_env(gasan_run(&cache).env("PYTHONPATH", pp));
    assert_eq!(&got[SWITCHES.len()], pp);

    // The user's own settings stay, empty ones included.
    let got = child_env(gasan_run(&cache).env("CUPY_COMPILE_WITH_PTX", "").env("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc"));
    assert_eq!(got[..5], ["backend:cudaMallocAsync", "", "0", "bfc", "false"]);

    // PyTorch: the user's allocator settings decide. Their own PYTORCH_NO_CUDA_MEMORY_CACHING (any
    // value, "0" included, means no caching) or their choice of the async backend: nothing set.
    // Allocator options without that backend: kept, and the caching allocator turned off.
    let torch = |var: &str, val: &str| {
        let out = gasan_run(&cache)
            .env(var, val)
            .args(["--", "/bin/sh", "-c", "echo \"${PYTORCH_CUDA_ALLOC_CONF-<unset>}|${PYTORCH_ALLOC_CONF-<unset>}|${PYTORCH_NO_CUDA_MEMORY_CACHING-<unset>}\""])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(torch("PYTORCH_NO_CUDA_MEMORY_CACHING", "0"), "<unset>|<unset>|0");
    assert_eq!(torch("PYTORCH_ALLOC_CONF", "expandable_segments:True, backend: cudaMallocAsync"), "<unset>|expandable_segments:True, backend: cudaMallocAsync|<unset>");
    assert_eq!(torch("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), "expandable_segments:True|<unset>|1");
    assert_eq!(torch("PYTORCH_ALLOC_CONF", "backend:native"), "<unset>|backend:native|1");

    // framework_pools=0, as a flag or in GASAN_OPTIONS: nothing set, PYTHONPATH untouched.
    for how in ["flag", "env"] {
        let mut c = gasan_run(&cache);
        c.env("PYTHONPATH", "/user/a");
        if how == "flag" {
            c.args(["--framework-pools", "0"]);
        } else {
            c.env("GASAN_OPTIONS", "framework_pools=0");
        }
        let got = child_env(&mut c);
        assert_eq!(got, ["-", "-", "-", "-", "-", "/user/a"], "{how}");
    }

    // verbosity=1 says what was set and what was kept.
    let out = gasan_run(&cache).env("CUPY_COMPILE_WITH_PTX", "0").args(["--verbosity", "1", "--", "/bin/true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"), "{err}");
    assert!(err.contains("kept CUPY_COMPILE_WITH_PTX=0"), "{err}");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn an_unwritable_cache_puts_the_hook_in_a_private_temporary_directory() {
    if !lib_exists() {
        return;
    }
    let t = tmp("tmpdir");
    let got = child_env(
        Command::new(env!("CARGO_BIN_EXE_gasan-run"))
            .env_remove("PYTHONPATH")
            .env_remove("GASAN_OPTIONS")
            .env("TMPDIR", &t)
            // Not creatable, even by root.
            .args(["--cache-dir", "/proc/gasan-no-such-dir"]),
    );
    let hook = Path::new(&got[SWITCHES.len()]);
    assert!(hook.starts_with(&t), "{}", hook.display());
    assert!(hook.join("sitecustomize.py").is_file());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(hook).unwrap().permissions().mode() & 0o777, 0o700);
    let _ = std::fs::remove_dir_all(&t);
}

fn python3() -> bool {
    let ok = Command::new("python3").arg("-c").arg("pass").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: no python3");
    }
    ok
}

/// A fake `cupy` whose `cuda.set_allocator` / `set_pinned_memory_allocator` record their calls,
/// and a user `sitecustomize` (`user_site`: its body).
fn python_tree(dir: &Path, user_site: &str) {
    std::fs::create_dir_all(dir.join("fake/cupy/cuda")).unwrap();
    std::fs::create_dir_all(dir.join("user")).unwrap();
    std::fs::write(dir.join("fake/cupy/__init__.py"), "from . import cuda\nimported = True\n").unwrap();
    std::fs::write(
        dir.join("fake/cupy/cuda/__init__.py"),
        "calls = []\n\
         def set_allocator(a=None): calls.append(('set_allocator', a))\n\
         def set_pinned_memory_allocator(a=None): calls.append(('set_pinned_memory_allocator', a))\n",
    )
    .unwrap();
    std::fs::write(dir.join("user/sitecustomize.py"), user_site).unwrap();
}

const PROG: &str = r#"
import sys
print("user_site", getattr(sys, "gasan_test_user_site", False))
print("cupy_before", "cupy" in sys.modules)
print("hook_on_path", any("python-hook-" in p for p in sys.path))
import cupy
print("calls", cupy.cuda.calls)
print("loader", type(cupy.__loader__).__name__)
import cupy.cuda
print("calls_again", len(cupy.cuda.calls))
"#;

fn run_python(dir: &Path, extra: &[&str]) -> Output {
    let cache = dir.join("cache");
    let mut c = gasan_run(&cache);
    c.current_dir(dir).env("PYTHONPATH", format!("{}:{}", dir.join("fake").display(), dir.join("user").display())).args(extra).args(["--", "python3", "-c", PROG]);
    c.output().unwrap()
}

#[test]
fn the_python_hook_turns_cupy_pools_off_at_import_and_chains_to_the_users_sitecustomize() {
    if !lib_exists() || !python3() {
        return;
    }
    let dir = tmp("hook");
    python_tree(&dir, "import sys\nsys.gasan_test_user_site = True\n");
    let out = run_python(&dir, &["--verbosity", "1"]);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{so}\n{se}");
    for want in ["user_site True", "cupy_before False", "hook_on_path False", "calls [('set_allocator', None), ('set_pinned_memory_allocator', None)]", "loader SourceFileLoader", "calls_again 2"] {
        assert!(so.lines().any(|l| l == want), "missing {want:?} in:\n{so}\n{se}");
    }
    assert!(se.contains("CuPy memory pools off"), "{se}");

    // framework_pools=0: no hook, the user's sitecustomize alone, CuPy left alone.
    let out = run_python(&dir, &["--framework-pools", "0"]);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.lines().any(|l| l == "user_site True"), "{so}");
    assert!(so.lines().any(|l| l == "calls []"), "{so}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cupy_imported_by_the_users_sitecustomize_is_seen_too() {
    if !lib_exists() || !python3() {
        return;
    }
    let dir = tmp("early");
    python_tree(&dir, "import sys, cupy\nsys.gasan_test_user_site = True\n");
    let out = run_python(&dir, &[]);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{so}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(so.lines().any(|l| l == "cupy_before True"), "{so}");
    assert!(so.lines().any(|l| l == "calls [('set_allocator', None), ('set_pinned_memory_allocator', None)]"), "{so}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_cupy_setter_costs_one_line_not_the_program() {
    if !lib_exists() || !python3() {
        return;
    }
    let dir = tmp("broken");
    python_tree(&dir, "");
    std::fs::write(dir.join("fake/cupy/cuda/__init__.py"), "calls = []\n").unwrap();
    let out = run_python(&dir, &[]);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{so}\n{se}");
    assert!(so.lines().any(|l| l == "calls []"), "{so}");
    assert!(se.contains("could not turn CuPy's memory pools off"), "{se}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// XLA (jax-cuda13-pjrt 0.11.2) maps each buffer of its `platform` allocator itself with the CUDA
/// VMM, which gasan does not serve; under `cuda_async`, the allocator gasan-run sets, each buffer is
/// a `cuMemAllocFromPoolAsync` of its own size that gasan's pool serves. The stand-in program
/// resolves the driver as XLA's stub table does (dlsym on its own dlopen("libcuda.so.1") handle),
/// allocates a 4096-byte buffer with the allocator the environment names, and copies 4097 bytes
/// into it.
#[test]
fn a_jax_buffer_is_a_pool_block_under_the_allocator_gasan_run_sets() {
    if !lib_exists() {
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tmp("xla");
    let s = |f: &str| src.join(f).to_str().unwrap().to_string();
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-I", &src.to_string_lossy(), "-Wl,-soname,libcuda.so.1", "-o", &d("libcuda.so.1"), &s("xla_fake_libcuda.c"), "-ldl"]);
    gcc(&["-o", &d("xla_alloc_app"), &s("xla_alloc_app.c"), "-ldl"]);
    let run = |user_allocator: Option<&str>| {
        let mut c = gasan_run(&dir.join("cache"));
        if let Some(a) = user_allocator {
            c.env("XLA_PYTHON_CLIENT_ALLOCATOR", a);
        }
        let out = c.env("LD_LIBRARY_PATH", &dir).args(["--halt-on-error", "0", "--report-format", "json", "--verbosity", "1", "--"]).arg(dir.join("xla_alloc_app")).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let reports = |e: &str| e.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>();

    // gasan-run's choice: the buffer is a pool block, the copy past it is reported and not done.
    let (o, e) = run(None);
    assert!(o.contains("allocator=cuda_async ") && o.contains(" alloc_rc=0 copy_rc=1 free_rc=0"), "{o}\n{e}");
    let r = reports(&e);
    assert_eq!(r.len(), 1, "{e}");
    assert_eq!(r[0]["kind"].as_str(), Some("heap-buffer-overflow"), "{}", r[0]);
    // Just past the buffer's 4096 bytes: the pool block is the buffer, not a 2 MiB mapping.
    let region = &r[0]["location"]["region"];
    assert_eq!((r[0]["call"].as_str(), region["size"].as_u64(), r[0]["location"]["distance"].as_u64()), (Some("cuMemcpyHtoD"), Some(4096), Some(0)), "{}", r[0]);
    assert!(o.contains(&format!("ptr={} ", region["start"].as_str().unwrap())), "{o}");
    // XLA's platform allocator, kept because the user set it: its VMM mapping is not gasan's, the
    // copy goes through unchecked, and verbosity=1 says what keeping it costs.
    let (o, e) = run(Some("platform"));
    assert!(o.contains("allocator=platform ") && o.contains(" alloc_rc=0 copy_rc=0 free_rc=0"), "{o}\n{e}");
    assert!(reports(&e).is_empty(), "{e}");
    assert!(e.contains("kept XLA_PYTHON_CLIENT_ALLOCATOR=platform") && e.contains("XLA's own VMM mappings: not checked"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// PyTorch's cudaMallocAsync backend (`--framework-pools 0` with
/// `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`) raises every out-of-memory answer of
/// cuMemAllocAsync as "Allocation on device 0 would exceed allowed memory", and any other error as
/// that CUDA error. After a kernel faulted, the driver answers the sticky error; gasan's pool block
/// could not be poisoned on the stream for the same reason, and must answer the same, not out of
/// memory (and gasan reports the fault, which the out-of-memory answer hid). The stand-in program
/// makes the backend's calls (tests/fixtures/torch_async_alloc_app.c);
/// run without gasan, the stand-in driver gives the answers gasan must match.
#[test]
fn a_stream_error_under_pytorchs_async_backend_is_not_out_of_memory() {
    if !lib_exists() {
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tmp("torch-async");
    let s = |f: &str| src.join(f).to_str().unwrap().to_string();
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-I", &src.to_string_lossy(), "-Wl,-soname,libcuda.so.1", "-o", &d("libcuda.so.1"), &s("torch_async_fake_libcuda.c"), "-ldl"]);
    gcc(&["-o", &d("torch_async_alloc_app"), &s("torch_async_alloc_app.c"), "-ldl"]);
    let app = dir.join("torch_async_alloc_app");
    let native = Command::new(&app).env("LD_LIBRARY_PATH", &dir).output().unwrap();
    let native = String::from_utf8_lossy(&native.stdout).into_owned();
    let total = 4096 + (8 << 20);
    let want = format!(
        "allocated rc=0 used={total} used_high={total} reserved={total} reserved_high={total}\n\
         freed rc=0 used=0 used_high={total} reserved=0 reserved_high={total}\n\
         peak_reset rc=0 used=0 used_high=0 reserved=0 reserved_high=0\n\
         alloc_rc=0 free_rc=0 after_fault_rc=700"
    );
    assert_eq!(native.trim(), want, "the stand-in driver's answers");
    let out = gasan_run(&dir.join("cache")).env("LD_LIBRARY_PATH", &dir).args(["--halt-on-error", "0", "--framework-pools", "0", "--"]).arg(&app).output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The same answers, the pool's usage included: gasan served the allocations, and the
    // backend's memory statistics read what the driver's pool would have said.
    assert_eq!(o.trim(), native.trim(), "{e}");
    // Said at the default verbosity: the failure was gasan's pool's, and why; and the sticky error
    // is reported as the fault it is (it was hidden behind the out-of-memory answer).
    assert!(e.contains("allocation of 4096 bytes failed: pool: CUDA call cuMemsetD8Async failed with error 700; returned as CUDA error 700"), "{e}");
    assert!(e.contains("CUDA error 700 reported by cuMemAllocAsync"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
