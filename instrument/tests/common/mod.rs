//! Test support: the pinned CUDA 13.0 toolchain (installed by scripts/cuda-toolchain.sh).
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Root of the pinned CUDA toolchain (`$GASAN_CUDA_ROOT`, else installed on first use).
pub fn cuda_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(r) = std::env::var_os("GASAN_CUDA_ROOT") {
            return PathBuf::from(r);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cuda-toolchain.sh");
        let out = Command::new("bash").arg(&script).output().expect("run cuda-toolchain.sh");
        assert!(out.status.success(), "cuda-toolchain.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

pub fn tool(name: &str) -> PathBuf {
    cuda_root().join("bin").join(name)
}

/// Runs a toolchain binary (`nvcc`, `ptxas`, ...) and panics with its stderr on failure.
pub fn run_tool(name: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let out = Command::new(tool(name)).args(args).output().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(out.status.success(), "{name} {:?} failed:\n{}", args, String::from_utf8_lossy(&out.stderr));
    out
}

/// A fresh scratch directory under the target dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// nvcc's PTX (sm_90) for the CUDA source `src`, compiled in `dir` as `<name>.cu`.
pub fn nvcc_ptx_of(dir: &Path, name: &str, src: &str) -> String {
    let cu = dir.join(format!("{name}.cu"));
    std::fs::write(&cu, src).unwrap();
    let ptx = dir.join(format!("{name}.ptx"));
    run_tool("nvcc", &["-ptx".as_ref(), "-arch=sm_90".as_ref(), "-o".as_ref(), ptx.as_os_str(), cu.as_os_str()]);
    std::fs::read_to_string(ptx).unwrap()
}

/// Assembles `ptx` with ptxas for sm_90 (in `dir`, as `<name>.ptx`); panics with ptxas's errors.
pub fn assemble(dir: &Path, name: &str, ptx: &str) {
    let f = dir.join(format!("{name}.ptx"));
    std::fs::write(&f, ptx).unwrap();
    run_tool("ptxas", &["-arch=sm_90".as_ref(), f.as_os_str(), "-o".as_ref(), dir.join(format!("{name}.cubin")).as_os_str()]);
}
