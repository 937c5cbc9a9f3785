//! Which real ptxas the front end runs.
//!
//! The front end is installed under three names ([`Role`]): `ptxas` (Triton's `TRITON_PTXAS_PATH`,
//! XLA's `PATH`), `ptxas-blackwell` (Triton's `TRITON_PTXAS_BLACKWELL_PATH`, for sm_100 and
//! newer) and `<tools>/xla-cuda-<hash>/bin/ptxas` (JAX's CUDA data directory as gasan's Python
//! start-up hook rewrites it: runtime/python/sitecustomize.py). For each it looks, in order, at:
//!
//! 1. `GASAN_REAL_PTXAS` / `GASAN_REAL_PTXAS_BLACKWELL`: what gasan-run found in the user's
//!    `TRITON_PTXAS_PATH` / `TRITON_PTXAS_BLACKWELL_PATH`, or what the user names;
//!    `GASAN_REAL_PTXAS_XLA`: the `bin/ptxas` of JAX's own CUDA data directory, set by the hook;
//! 2. (not for XLA) the ptxas bundled with the Triton that runs it: the parent process (Triton's Python) has
//!    `.../triton/_C/libtriton.so` mapped, and Triton's default is
//!    `.../triton/backends/nvidia/bin/<name>` (`knobs.py`, `env_nvidia_tool`);
//! 3. `ptxas` on `PATH` (XLA's order after its data directory);
//! 4. the CUDA wheels the parent has mapped (`.../nvidia/cuda_nvcc/bin/ptxas`, where XLA's
//!    `CandidateCudaRoots` looks for JAX's pip CUDA, and `nvidia/cu13/bin/ptxas`);
//! 5. `$CUDA_HOME/bin`, `$CUDA_PATH/bin`, `/usr/local/cuda/bin`.
//!
//! Candidates that are the front end itself (the same file after resolving links) are skipped, so
//! a `PATH` that holds gasan-run's tool directory never loops.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Which ptxas the front end stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Ptxas,
    Blackwell,
    /// XLA, run from the data directory gasan's Python hook gives JAX.
    Xla,
}

/// The name of the directories gasan's Python hook makes for XLA starts with this
/// (`<dir>/bin/ptxas` is the front end).
pub const XLA_DIR_PREFIX: &str = "xla-cuda-";

impl Role {
    /// The role of a front end run under `program` (its `argv[0]`; XLA runs `<data dir>/bin/ptxas`
    /// by its full path): `ptxas-blackwell` by file name, XLA's by `xla-cuda-*/bin/ptxas`, else
    /// `ptxas`.
    pub fn from_program(program: &Path) -> Role {
        let name = |p: Option<&Path>| p.and_then(|p| p.file_name()).and_then(|n| n.to_str()).map(String::from);
        match name(Some(program)).as_deref() {
            Some("ptxas-blackwell") => Role::Blackwell,
            Some("ptxas") if name(program.parent()).as_deref() == Some("bin") && name(program.parent().and_then(Path::parent)).is_some_and(|d| d.starts_with(XLA_DIR_PREFIX)) => Role::Xla,
            _ => Role::Ptxas,
        }
    }

    /// The tool's file name (also the name of the front end's link in gasan-run's tool directory).
    pub fn tool_name(self) -> &'static str {
        match self {
            Role::Ptxas | Role::Xla => "ptxas",
            Role::Blackwell => "ptxas-blackwell",
        }
    }

    /// The variable naming the real tool.
    pub fn real_env(self) -> &'static str {
        match self {
            Role::Ptxas => "GASAN_REAL_PTXAS",
            Role::Blackwell => "GASAN_REAL_PTXAS_BLACKWELL",
            Role::Xla => "GASAN_REAL_PTXAS_XLA",
        }
    }

    /// Where the real tool's variable comes from.
    pub fn real_env_source(self) -> &'static str {
        match self {
            Role::Ptxas => "gasan-run sets it from TRITON_PTXAS_PATH",
            Role::Blackwell => "gasan-run sets it from TRITON_PTXAS_BLACKWELL_PATH",
            Role::Xla => "gasan's Python hook sets it from JAX's CUDA directory",
        }
    }
}

/// The candidates for the real tool, in order, each with where it came from.
pub fn candidates(role: Role, env: impl Fn(&str) -> Option<OsString>, parent_maps: Option<&str>) -> Vec<(PathBuf, &'static str)> {
    let mut out: Vec<(PathBuf, &'static str)> = Vec::new();
    if let Some(v) = env(role.real_env()).filter(|v| !v.is_empty()) {
        out.push((PathBuf::from(v), role.real_env()));
    }
    let mapped: Vec<&str> = parent_maps.map(|m| m.lines().filter_map(|l| l.split_once('/').map(|(_, p)| p)).collect()).unwrap_or_default();
    // XLA's ptxas is its CUDA directory's, never Triton's (an older one may refuse its PTX).
    for p in mapped.iter().filter(|_| role != Role::Xla) {
        if let Some(triton) = p.strip_suffix("/_C/libtriton.so") {
            out.push((PathBuf::from(format!("/{triton}/backends/nvidia/bin/{}", role.tool_name())), "the running Triton's bundled ptxas"));
        }
    }
    if let Some(path) = env("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| (d.join("ptxas"), "PATH")));
    }
    for p in &mapped {
        if let Some(i) = p.find("/nvidia/") {
            for sub in ["cuda_nvcc", "cu13"] {
                out.push((PathBuf::from(format!("/{}/nvidia/{sub}/bin/ptxas", &p[..i])), "the CUDA wheels the program loaded"));
            }
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            out.push((PathBuf::from(v).join("bin/ptxas"), "CUDA_HOME / CUDA_PATH"));
        }
    }
    out.push((PathBuf::from("/usr/local/cuda/bin/ptxas"), "/usr/local/cuda"));
    let mut seen = std::collections::HashSet::new();
    out.retain(|(p, _)| seen.insert(p.clone()));
    out
}

/// The first candidate that is an executable file and not `me` (the front end's own binary).
pub fn find(role: Role, env: impl Fn(&str) -> Option<OsString>, parent_maps: Option<&str>, me: &Path) -> Option<(PathBuf, &'static str)> {
    let me = same_file_id(me);
    candidates(role, env, parent_maps).into_iter().find(|(p, _)| is_executable(p) && (me.is_none() || same_file_id(p) != me))
}

/// (device, inode) of a file, after links.
fn same_file_id(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// The memory map of this process's parent (`None` when it cannot be read).
pub fn parent_maps() -> Option<String> {
    let ppid = std::os::unix::process::parent_id();
    std::fs::read_to_string(format!("/proc/{ppid}/maps")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| m.get(k).cloned()
    }

    const MAPS: &str = "7f00-7f01 r-xp 00000000 08:01 123 /venv/lib/python3.11/site-packages/triton/_C/libtriton.so\n\
                        7f02-7f03 r--p 00000000 08:01 124 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12\n\
                        7f04-7f05 rw-p 00000000 00:00 0 [heap]\n";

    #[test]
    fn candidates_come_in_order() {
        let c = candidates(Role::Ptxas, env(&[("GASAN_REAL_PTXAS", "/user/ptxas"), ("PATH", "/a:/b"), ("CUDA_HOME", "/cuda")]), Some(MAPS));
        let paths: Vec<String> = c.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/user/ptxas",
                "/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas",
                "/a/ptxas",
                "/b/ptxas",
                "/venv/lib/python3.11/site-packages/nvidia/cuda_nvcc/bin/ptxas",
                "/venv/lib/python3.11/site-packages/nvidia/cu13/bin/ptxas",
                "/cuda/bin/ptxas",
                "/usr/local/cuda/bin/ptxas",
            ]
        );
        let b = candidates(Role::Blackwell, env(&[("GASAN_REAL_PTXAS", "/user/ptxas")]), Some(MAPS));
        assert_eq!(b[0].0, Path::new("/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas-blackwell"), "{b:?}");
        // XLA's: its own variable, then no Triton.
        let x = candidates(Role::Xla, env(&[("GASAN_REAL_PTXAS", "/user/ptxas"), ("GASAN_REAL_PTXAS_XLA", "/jax/nvidia/cuda_nvcc/bin/ptxas"), ("PATH", "/a")]), Some(MAPS));
        let paths: Vec<String> = x.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(paths[..2], ["/jax/nvidia/cuda_nvcc/bin/ptxas", "/a/ptxas"]);
        assert!(!paths.iter().any(|p| p.contains("triton")), "{paths:?}");
    }

    #[test]
    fn roles_come_from_the_program_name() {
        assert_eq!(Role::from_program(Path::new("/x/bin/ptxas-blackwell")), Role::Blackwell);
        assert_eq!(Role::from_program(Path::new("/x/bin/ptxas")), Role::Ptxas);
        assert_eq!(Role::from_program(Path::new("gasan-ptxas")), Role::Ptxas);
        assert_eq!(Role::from_program(Path::new("/c/jit-tools-1/xla-cuda-2a/bin/ptxas")), Role::Xla);
        assert_eq!(Role::from_program(Path::new("/c/jit-tools-1/xla-cuda-2a/ptxas")), Role::Ptxas);
        assert_eq!(Role::from_program(Path::new("/c/jit-tools-1/other/bin/ptxas")), Role::Ptxas);
        assert_eq!(Role::from_program(Path::new("/c/xla-cuda-2a/bin/ptxas-blackwell")), Role::Blackwell);
    }

    #[test]
    fn the_front_end_itself_is_skipped() {
        let d = std::env::temp_dir().join(format!("gasan-jit-real-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("tools")).unwrap();
        std::fs::create_dir_all(d.join("cuda")).unwrap();
        let me = d.join("gasan-ptxas");
        let real = d.join("cuda/ptxas");
        for f in [&me, &real] {
            std::fs::write(f, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::os::unix::fs::symlink(&me, d.join("tools/ptxas")).unwrap();
        let path = format!("{}:{}", d.join("tools").display(), d.join("cuda").display());
        let found = find(Role::Ptxas, env(&[("PATH", &path)]), None, &me);
        assert_eq!(found.map(|(p, _)| p), Some(real));
        // A GASAN_REAL_PTXAS naming the front end is skipped too.
        let found = find(Role::Ptxas, env(&[("GASAN_REAL_PTXAS", &me.display().to_string())]), None, &me);
        assert_ne!(found.map(|(p, _)| p), Some(me.clone()));
        let _ = std::fs::remove_dir_all(&d);
    }
}
