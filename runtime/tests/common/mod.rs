//! Set-up shared by the integration tests that use the pinned CUDA toolchain.
// (Each test crate uses a part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CUDA library built for a test: the pinned toolchain's root, the test's fresh directory and
/// the library (`libk.so`, from `src`, sm_90, static cudart) in it.
pub struct CudaLib {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub lib: PathBuf,
}

/// Builds `src` into a fresh `gasan-{dir_name}-{pid}` directory, or prints the visible skip line
/// for `test` and returns `None` when `GASAN_CUDA_ROOT` (set by scripts/test.sh) is not set.
pub fn cuda_lib(test: &str, dir_name: &str, src: &str) -> Option<CudaLib> {
    let Some(root) = std::env::var_os("GASAN_CUDA_ROOT").map(PathBuf::from) else {
        eprintln!("SKIPPED {test}: GASAN_CUDA_ROOT is not set (scripts/test.sh sets it)");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("gasan-{dir_name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cu = dir.join("k.cu");
    std::fs::write(&cu, src).unwrap();
    let lib = dir.join("libk.so");
    let out = Command::new(root.join("bin/nvcc")).args(["-shared", "-Xcompiler", "-fPIC", "-O3", "-arch=sm_90", "-o"]).arg(&lib).arg(&cu).output().unwrap();
    assert!(out.status.success(), "nvcc: {}", String::from_utf8_lossy(&out.stderr));
    Some(CudaLib { root, dir, lib })
}

/// The pinned toolchain's root: `$GASAN_CUDA_ROOT`, else installed (or found) by
/// scripts/cuda-toolchain.sh.
pub fn cuda_root() -> PathBuf {
    if let Some(r) = std::env::var_os("GASAN_CUDA_ROOT") {
        return PathBuf::from(r);
    }
    let s = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cuda-toolchain.sh");
    let out = Command::new("bash").arg(&s).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The preloadable runtime next to the test binary (integration tests run from
/// target/<profile>/deps; the cdylib sits in target/<profile>), when built.
pub fn cdylib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let lib = exe.parent()?.parent()?.join("libgasan_runtime.so");
    lib.exists().then_some(lib)
}

/// [`cdylib`], or `None` after the visible skip line. scripts/test.d/10-cargo.sh builds it first
/// and sets `GASAN_TEST_STRICT`, so CI never skips: there, a missing runtime fails the test.
pub fn runtime_or_skip() -> Option<PathBuf> {
    let lib = cdylib();
    if lib.is_none() {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "libgasan_runtime.so is not built");
        eprintln!("skipped: libgasan_runtime.so not built next to the test binary (run cargo build --release)");
    }
    lib
}

/// Runs the host's gcc, failing the test with its errors.
pub fn gcc(args: &[&str]) {
    let out = Command::new("gcc").args(args).output().expect("gcc");
    assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}
