//! Checked PTX compiled to SASS once, with `ptxas` (whole-program, not relocatable), and cached as
//! a cubin, so a checked kernel's first launch costs what a native one does.
//!
//! The driver's own linker (`cuLink*`) is not used: it compiles PTX as relocatable code and the
//! kernels ran slower (runtime/results.md). `ptxas` without `-c` compiles the way the driver's JIT
//! does for `cuModuleLoadData(ptx)`: whole program, `-O3` (the JIT's default level 4), no line or
//! debug information unless the loader's JIT options ask for them ([`jit_flags`]). ptxas itself
//! emits line tables and a copy of the PTX text (`.nv_debug_ptx_txt`) whenever the PTX has `.loc`
//! lines, as nvcc's `-lineinfo` output has: `--suppress-debug-info` keeps them out ([`debug_flag`]),
//! which makes checked cubins about 2.6x smaller (the 13 startup-benchmark modules: 1,992,768 →
//! 763,968 bytes; the 100-kernel one 1,207,520 → 483,360, the same code) for the loader to read
//! and copy; ptxas's time barely changes. Reports do not need them: sites carry their source lines
//! ([`gasan_instrument::ptx::SiteTable`]).
//!
//! A cubin's key ([`cubin_key`]) covers everything that decides its bytes or whether this driver
//! may load it: the checked module's key (which decides the checked PTX), the target (`sm_90`, `sm_90a`), the code-generation flags,
//! the compiler (path, size and modification time of the `ptxas` binary), the driver (its version
//! and its library file) and gasan's version, so an upgrade of any of them never loads stale code.

use crate::cache::Cache;
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Bumped when the layout or meaning of cached cubins changes.
pub const FORMAT: &str = "gasan-cubin-3";

/// The `ptxas` to use: the `ptxas` option, else `$CUDA_HOME/bin`, `$CUDA_PATH/bin`,
/// `/usr/local/cuda/bin`, then `PATH`, skipping gasan's front end (`is_front_end`). `env` reads
/// environment variables (tests pass their own).
pub fn find_ptxas(option: Option<&Path>, env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(p) = option {
        return Some(p.to_path_buf());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            dirs.push(PathBuf::from(v).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    if let Some(path) = env("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join("ptxas")).find(|p| is_executable(p) && !is_front_end(p))
}

/// Whether `p` is gasan's ptxas front end (gasan-run puts links to it first on `PATH`): the file
/// it resolves to is named `gasan-ptxas`, or is the same file (device and inode) as a
/// `gasan-ptxas` beside it. The front end would only hand checked PTX on to a real ptxas.
fn is_front_end(p: &Path) -> bool {
    const FRONT_END: &str = "gasan-ptxas";
    let Ok(target) = std::fs::canonicalize(p) else { return false };
    let id = |f: &Path| std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino()));
    target.file_name().is_some_and(|n| n == FRONT_END) || id(&target) == id(&target.with_file_name(FRONT_END))
}

fn is_executable(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// Identity of a file for cache keys: its canonical path, size, modification time and inode. A
/// reinstall or upgrade changes at least one of them.
pub fn file_identity(p: &Path) -> Option<String> {
    let c = std::fs::canonicalize(p).ok()?;
    let m = c.metadata().ok()?;
    Some(format!("{}|{}|{}.{}|{}", c.display(), m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// The `-arch` for checked PTX on a GPU of compute capability `cc` (e.g. 90): `sm_<cc>`, with the
/// PTX's arch-specific (`a`) or family (`f`) suffix when its `.target` is this very GPU's.
pub fn target_for(ptx: &str, cc: u32) -> String {
    let target = gasan_instrument::ptx::PtxHeader::parse(ptx).target.unwrap_or("");
    let first = target.split(',').next().unwrap_or("").trim();
    if let Some(rest) = first.strip_prefix("sm_") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &rest[digits.len()..];
        if digits.parse::<u32>() == Ok(cc) && (suffix == "a" || suffix == "f") {
            return format!("sm_{cc}{suffix}");
        }
    }
    format!("sm_{cc}")
}

/// What a cubin's key covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInputs<'a> {
    /// The checked module's cache key (a hash of the original PTX, gasan's instrumenter revision
    /// and the instrumentation options: what decides the checked PTX), so a cached cubin is found
    /// without reading or hashing the checked PTX itself.
    pub checked: &'a str,
    /// `-arch` value, e.g. `sm_90`.
    pub target: &'a str,
    /// Code-generation flags from the loader's JIT options ([`jit_flags`]).
    pub flags: &'a [String],
    /// [`file_identity`] of `ptxas`.
    pub compiler: &'a str,
    /// Driver version and library identity.
    pub driver: &'a str,
    /// gasan's version.
    pub gasan: &'a str,
}

/// The cubin's cache key: SHA-256 over [`FORMAT`] and every input, each length-prefixed (so no
/// two different input lists hash the same bytes).
pub fn cubin_key(k: &KeyInputs) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(FORMAT.as_bytes());
    field(k.gasan.as_bytes());
    field(k.driver.as_bytes());
    field(k.compiler.as_bytes());
    field(k.target.as_bytes());
    field(k.flags.join("\0").as_bytes());
    field(k.checked.as_bytes());
    crate::cache::key_hex(&h.finalize())
}

/// Cache entry names of a cubin and of its failed-compile marker.
pub fn entry_names(key: &str, target: &str) -> (String, String) {
    (format!("{key}.{target}.cubin"), format!("{key}.{target}.fail"))
}

/// ptxas flags for a loader's JIT options (`CUjit_option` numbers and their values), or why the
/// module must go to the driver's JIT instead. Options that do not change code (logs, wall time,
/// fallback strategy, split compilation) are ignored.
pub fn jit_flags(opts: &[(i32, usize)]) -> Result<Vec<String>, String> {
    let mut f = Vec::new();
    for &(o, v) in opts {
        match o {
            // MAX_REGISTERS
            0 => f.push(format!("--maxrregcount={}", v as u32)),
            // WALL_TIME, INFO/ERROR log buffers and sizes, TARGET_FROM_CUCONTEXT, FALLBACK_STRATEGY,
            // LOG_VERBOSE, SPLIT_COMPILE: no effect on code.
            2..=6 | 8 | 10 | 12 | 34 => {}
            // OPTIMIZATION_LEVEL (0-4; the JIT's 4 is ptxas's highest, 3)
            7 => f.push(format!("-O{}", (v as u32).min(3))),
            // GENERATE_DEBUG_INFO
            11 if v as u32 != 0 => f.push("-g".into()),
            11 => {}
            // GENERATE_LINE_INFO
            13 if v as u32 != 0 => f.push("-lineinfo".into()),
            13 => {}
            // CACHE_MODE: none, cg, ca
            14 => match v as u32 {
                0 => {}
                1 => f.push("-dlcm=cg".into()),
                2 => f.push("-dlcm=ca".into()),
                m => return Err(format!("JIT cache mode {m}")),
            },
            _ => return Err(format!("JIT option {o}")),
        }
    }
    Ok(f)
}

/// Whether `b` is a complete 64-bit ELF file for CUDA (`EM_CUDA`): header, and program and section
/// header tables inside the file (a truncated file fails).
pub fn is_cubin(b: &[u8]) -> bool {
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as u64);
    let u64_at = |o: usize| b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || u16_at(18) != Some(190) {
        return false;
    }
    let (Some(phoff), Some(shoff), Some(phes), Some(phn), Some(shes), Some(shn)) = (u64_at(32), u64_at(40), u16_at(54), u16_at(56), u16_at(58), u16_at(60)) else {
        return false;
    };
    let len = b.len() as u64;
    phoff.saturating_add(phes * phn) <= len && shoff.saturating_add(shes * shn) <= len && shn > 0
}

/// How ptxas is run.
pub struct Compile<'a> {
    pub ptxas: &'a Path,
    pub target: &'a str,
    pub flags: &'a [String],
    /// `--split-compile` threads (0: one per CPU); code is the same, only compile time changes.
    pub split: u32,
}

/// Line and debug information only where the loader's flags ask for it (`-lineinfo`, `-g`).
pub fn debug_flag(flags: &[String]) -> Option<&'static str> {
    (!flags.iter().any(|f| f == "-lineinfo" || f == "-g")).then_some("--suppress-debug-info")
}

/// The default optimization level, unless the loader's flags set one.
fn opt_flag(flags: &[String]) -> Option<&'static str> {
    (!flags.iter().any(|f| f.starts_with("-O"))).then_some("-O3")
}

/// Why a compile gave no cubin.
#[derive(Debug)]
pub struct CompileError {
    pub message: String,
    /// ptxas ran and refused the input: the same compile would fail again (worth remembering).
    pub permanent: bool,
}

fn transient(message: String) -> CompileError {
    CompileError { message, permanent: false }
}

/// Compiles `ptx` to a cubin with ptxas and stores it in `cache` as entry `name` (renamed into
/// place once complete and checked, [`Cache::adopt`]); returns the cubin. ptxas's input and output
/// are temporary files of the cache directory. The child gets neither `LD_PRELOAD` nor
/// `GASAN_OPTIONS` (it must not load gasan itself).
pub fn compile(c: &Compile, cache: &Cache, ptx: &[u8], name: &str) -> Result<Vec<u8>, CompileError> {
    let input = cache.tmp_path("ptx").map_err(|e| transient(format!("cache directory {}: {e}", cache.dir.display())))?;
    let output = cache.tmp_path("cubin").map_err(|e| transient(e.to_string()))?;
    let r = (|| {
        std::fs::write(&input, ptx).map_err(|e| transient(format!("writing {}: {e}", input.display())))?;
        let mut cmd = Command::new(c.ptxas);
        cmd.arg(format!("-arch={}", c.target)).args(opt_flag(c.flags)).args(debug_flag(c.flags)).args(c.flags);
        if c.split != 1 {
            cmd.arg(format!("--split-compile={}", c.split));
        }
        cmd.arg("-o").arg(&output).arg(&input);
        let out = cmd.env_remove("LD_PRELOAD").env_remove("GASAN_OPTIONS").stdin(Stdio::null()).output().map_err(|e| transient(format!("cannot run {}: {e}", c.ptxas.display())))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let err: String = err.lines().take(5).collect::<Vec<_>>().join(" | ");
            // Killed by a signal (OOM, ^C) is not the input's fault.
            let permanent = out.status.code().is_some();
            return Err(CompileError { message: format!("{} -arch={} failed ({}): {err}", c.ptxas.display(), c.target, out.status), permanent });
        }
        let b = std::fs::read(&output).map_err(|e| transient(format!("reading {}: {e}", output.display())))?;
        if !is_cubin(&b) {
            return Err(CompileError { message: format!("{} wrote no valid cubin", c.ptxas.display()), permanent: true });
        }
        cache.adopt(&output, name).map_err(|e| transient(format!("storing {name}: {e}")))?;
        Ok(b)
    })();
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_keeps_arch_specific_suffixes_of_this_gpu_only() {
        assert_eq!(target_for(".version 9.0\n.target sm_90\n", 90), "sm_90");
        assert_eq!(target_for(".version 9.0\n.target sm_90a\n", 90), "sm_90a");
        assert_eq!(target_for(".target sm_100f, debug\n", 100), "sm_100f");
        assert_eq!(target_for(".target sm_80\n", 90), "sm_90");
        assert_eq!(target_for(".target sm_90a\n", 100), "sm_100");
        assert_eq!(target_for("no target", 89), "sm_89");
    }

    #[test]
    fn every_key_input_changes_the_key() {
        let flags = vec!["--maxrregcount=32".to_string()];
        let base = KeyInputs { checked: "a3f0", target: "sm_90", flags: &[], compiler: "/cuda/bin/ptxas|1|2.3|4", driver: "13000|/lib/libcuda.so.580|5|6.7|8", gasan: "0.1.0" };
        let k = cubin_key(&base);
        assert_eq!(k.len(), 64);
        assert_eq!(k, cubin_key(&base.clone()), "the key is a function of its inputs");
        let variants = [
            KeyInputs { checked: "a3f1", ..base.clone() },
            KeyInputs { target: "sm_90a", ..base.clone() },
            KeyInputs { flags: &flags, ..base.clone() },
            KeyInputs { compiler: "/cuda/bin/ptxas|1|2.4|4", ..base.clone() },
            KeyInputs { driver: "13010|/lib/libcuda.so.580|5|6.7|8", ..base.clone() },
            KeyInputs { gasan: "0.1.1", ..base.clone() },
        ];
        let mut keys: Vec<String> = variants.iter().map(cubin_key).collect();
        keys.push(k);
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "each input changes the key");
        // Fields are length-prefixed: moving bytes between fields changes the key.
        let a = KeyInputs { compiler: "ab", driver: "c", ..base.clone() };
        let b = KeyInputs { compiler: "a", driver: "bc", ..base.clone() };
        assert_ne!(cubin_key(&a), cubin_key(&b));
    }

    #[test]
    fn jit_options_become_ptxas_flags_or_a_reason() {
        assert_eq!(jit_flags(&[]).unwrap(), Vec::<String>::new());
        assert_eq!(jit_flags(&[(0, 64), (7, 4), (13, 1), (11, 0), (3, 0xdead), (4, 1024)]).unwrap(), vec!["--maxrregcount=64", "-O3", "-lineinfo"]);
        assert_eq!(jit_flags(&[(7, 1), (14, 1)]).unwrap(), vec!["-O1", "-dlcm=cg"]);
        assert!(jit_flags(&[(9, 90)]).unwrap_err().contains('9'));
        assert!(jit_flags(&[(1, 128)]).is_err(), "threads per block (an in/out option) goes to the JIT");
        assert_eq!(opt_flag(&[]), Some("-O3"));
        assert_eq!(opt_flag(&["-O1".into()]), None);
    }

    #[test]
    fn truncated_or_foreign_elf_is_not_a_cubin() {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[18..20].copy_from_slice(&190u16.to_le_bytes());
        h[40..48].copy_from_slice(&64u64.to_le_bytes()); // section headers right after
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&2u16.to_le_bytes());
        let mut full = h.clone();
        full.resize(64 + 128, 0);
        assert!(is_cubin(&full));
        assert!(!is_cubin(&full[..64 + 127]), "truncated");
        let mut x86 = full.clone();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(!is_cubin(&x86));
        assert!(!is_cubin(b"\x7fELF"));
    }

    #[test]
    fn ptxas_is_found_by_option_then_cuda_home_then_path() {
        let d = std::env::temp_dir().join(format!("gasan-find-ptxas-{}", std::process::id()));
        for sub in ["home/bin", "path1", "path2", "front"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let mk = |p: PathBuf, mode: u32| {
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
            p
        };
        let home = mk(d.join("home/bin/ptxas"), 0o755);
        mk(d.join("path1/ptxas"), 0o644); // not executable: skipped
        let p2 = mk(d.join("path2/ptxas"), 0o755);
        // gasan-run's tools directory (a link to the front end) and a hard link beside it: skipped.
        let front = mk(d.join("front/gasan-ptxas"), 0o755);
        std::fs::create_dir_all(d.join("tools")).unwrap();
        std::os::unix::fs::symlink(&front, d.join("tools/ptxas")).unwrap();
        std::fs::hard_link(&front, d.join("front/ptxas")).unwrap();
        assert!(is_front_end(&d.join("tools/ptxas")) && is_front_end(&d.join("front/ptxas")) && !is_front_end(&p2));
        let path = std::env::join_paths([d.join("tools"), d.join("front"), d.join("path1"), d.join("path2")]).unwrap();
        let env = |with_home: bool| {
            let path = path.clone();
            let h = d.join("home");
            move |k: &str| match k {
                "CUDA_HOME" if with_home => Some(h.clone().into_os_string()),
                "PATH" => Some(path.clone()),
                _ => None,
            }
        };
        assert_eq!(find_ptxas(Some(Path::new("/x/ptxas")), env(true)), Some(PathBuf::from("/x/ptxas")));
        assert_eq!(find_ptxas(None, env(true)), Some(home));
        if !Path::new("/usr/local/cuda/bin/ptxas").exists() {
            assert_eq!(find_ptxas(None, env(false)), Some(p2));
            assert_eq!(find_ptxas(None, |_| None), None);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
