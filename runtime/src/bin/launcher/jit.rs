//! Kernels compiled at run time (issue 39): Triton (and torch.compile's Inductor, which emits
//! Triton) and JAX/XLA run ptxas themselves and hand the driver cubins, which the runtime cannot
//! check. gasan-run points them at gasan's ptxas front end (`gasan-ptxas`, built next to
//! gasan-run), which checks the PTX and runs the real ptxas. In the child's environment:
//!
//! | variable | value | why |
//! |---|---|---|
//! | `TRITON_PTXAS_PATH` | `<tools>/ptxas` | Triton runs it for sm_90 and older (`knobs.nvidia.ptxas`) |
//! | `TRITON_PTXAS_BLACKWELL_PATH` | `<tools>/ptxas-blackwell` | Triton runs it for sm_100 and newer; the name tells the front end which real tool to run |
//! | `GASAN_REAL_PTXAS`, `GASAN_REAL_PTXAS_BLACKWELL` | the user's `TRITON_PTXAS_PATH` / `..._BLACKWELL_PATH` | the real tools, when the user had named them (else the front end finds Triton's bundled ones) |
//! | `PATH` | `<tools>` first | XLA runs `ptxas` from `--xla_gpu_cuda_data_dir/bin`, then `PATH` (`FindCudaExecutable`; the data directory defaults to `./cuda_sdk_lib`, which does not exist) |
//! | `GASAN_JIT_TOOLS` | `<tools>` | JAX sets the data directory itself, to its pip CUDA (`jax._src.lib.cuda_path`), over `XLA_FLAGS`: gasan's Python start-up hook (runtime/python/sitecustomize.py, installed with `framework_pools=1`) replaces it with `<tools>/xla-cuda-<hash>/`, whose `bin/ptxas` is the front end and whose `nvvm` is JAX's (where JAX's has no ptxas: the CUDA directory XLA's own search would take its ptxas from). jaxlib 0.11.2's XLA has no in-process PTX compiler (no nvJitLink, no nvPTXCompiler), so no `XLA_FLAGS` setting is needed or would help |
//! | `TORCHINDUCTOR_CACHE_DIR` | the user's + `/gasan-<tag>`, else `<cache dir>/torchinductor-<tag>` | Inductor's FX-graph and AOTAutograd caches hold compiled kernels (its `TritonBundler` saves the cubins, the static launcher loads them itself) keyed without the ptxas: a native run's must not serve a checked one, nor the reverse. Triton's cache goes under it too (`cache_dir_utils.triton_cache_dir`) unless `TRITON_CACHE_DIR` is set |
//! | `XLA_FLAGS` | the user's + `--xla_gpu_generate_line_info=true` | XLA's PTX carries `.loc` lines (for a Pallas kernel, its Python source) only with it, and reports name what the PTX names; the user's own setting of it is kept |
//! | `JAX_ENABLE_COMPILATION_CACHE` | `false` | JAX's persistent cache holds XLA executables (their cubins) keyed without the ptxas |
//! | `TORCH_CUDA_ARCH_LIST` | the user's, its last entry with `+PTX` | PyTorch's C++/CUDA extensions (`torch.utils.cpp_extension.load`/`load_inline`) are compiled for this list; without `+PTX` they hold SASS only, which gasan cannot check (unset, PyTorch adds `+PTX` for the GPU's own architecture itself) |
//! | `TORCH_EXTENSIONS_DIR` | the user's + `/gasan`, else `<cache dir>/torch-extensions` | PyTorch keys its built extensions by their sources and flags, not the architectures: a SASS-only build from a native run would be loaded again. Set with `TORCH_CUDA_ARCH_LIST` only |
//! | `NUMBA_CUDA_ENABLE_PYNVJITLINK` | `0` | Numba-CUDA <= 0.15 links in-process with pynvjitlink when installed; `0` makes it use the driver's `cuLink*`, whose PTX the runtime checks (set even when gasan-ptxas is not built) |
//!
//! `<tools>` is `<cache dir>/jit-tools-<hash of gasan-ptxas's path>/` (a private temporary
//! directory when the cache directory cannot be written), holding links to gasan-ptxas; the
//! cache's eviction and `--cache-clear` leave it alone. `<tag>` hashes gasan's version, the
//! rewriter's `REVISION` and the options that change checked code.
//!
//! Triton's own cache (`TRITON_CACHE_DIR`) is left alone: its key holds the whole `ptxas
//! --version` answer (`get_cache_key` → `backend.hash()`), and the front end's answer names
//! `REVISION` and the checks' options, so checked and native cubins never share an entry.
//!
//! A variable the user has set is kept (the caches: redirected below it); `verbosity>=1` says
//! what was set. Nothing is set with `instrument=0`, or when gasan-ptxas is not built.

use gasan_runtime::cache::dir_for;
use gasan_runtime::options::{os_error_text, Options};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The front end's names in the tool directory, with Triton's variable and the real tool's.
const ROLES: &[(&str, &str, &str)] = &[("ptxas", "TRITON_PTXAS_PATH", "GASAN_REAL_PTXAS"), ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH", "GASAN_REAL_PTXAS_BLACKWELL")];

/// Points Triton, Inductor and XLA at gasan-ptxas in the child's environment.
pub fn apply(cmd: &mut Command, opts: &Options) {
    let say = |m: String| {
        if opts.verbosity >= 1 {
            eprintln!("gasan-run: JIT kernels: {m}");
        }
    };
    if !opts.instrument {
        return;
    }
    numba(cmd, &say);
    torch_extensions(cmd, &say, dir_for(opts.cache_dir.as_deref()).as_deref());
    let Some(front) = std::env::current_exe().ok().map(|e| e.with_file_name("gasan-ptxas")).filter(|p| p.is_file()) else {
        say("gasan-ptxas is not built next to gasan-run: Triton and XLA kernels stay unchecked".into());
        return;
    };
    let cache = dir_for(opts.cache_dir.as_deref());
    let tools = match tool_dir(cache.as_deref(), &front) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("gasan-run: warning: cannot make the ptxas front end's directory ({e}); Triton and XLA kernels stay unchecked");
            return;
        }
    };
    for (name, triton_var, real_var) in ROLES {
        if let Some(user) = std::env::var_os(triton_var).filter(|v| !v.is_empty()) {
            let ours = same_file(Path::new(&user), &front);
            if !ours && std::env::var_os(real_var).is_none() {
                cmd.env(real_var, &user);
                say(format!("{triton_var}={} runs behind the front end ({real_var})", user.to_string_lossy()));
            }
        }
        cmd.env(triton_var, tools.join(name));
    }
    cmd.env("PATH", path_first(&tools, &std::env::var_os("PATH").unwrap_or_default()));
    cmd.env("GASAN_JIT_TOOLS", &tools);
    say(format!("Triton and XLA run {} (TRITON_PTXAS_PATH, PATH)", tools.join("ptxas").display()));
    if opts.framework_pools {
        say(format!(
            "JAX's own CUDA directory (jax._src.lib.cuda_path; where it has no ptxas, the one XLA's search finds on PATH, /usr/local/cuda, /opt/cuda or pip's nvidia/cu13) becomes {}/xla-cuda-<hash> when the program imports JAX (Python start-up hook)",
            tools.display()
        ));
    } else {
        say("framework_pools=0: no Python start-up hook, so XLA runs the ptxas of JAX's own CUDA directory (pip nvidia/cuda_nvcc) when it has one, unchecked".into());
    }
    xla_line_info(cmd, &say);
    if let Some(flags) = std::env::var_os("XLA_FLAGS").filter(|f| f.as_bytes().windows(21).any(|w| w == b"xla_gpu_cuda_data_dir")) {
        say(format!(
            "XLA_FLAGS={} names a CUDA directory: XLA runs its bin/ptxas first, unchecked, if it has one (JAX replaces it with its own CUDA directory, which the Python hook redirects)",
            flags.to_string_lossy()
        ));
    }

    let tag = tag(opts);
    let inductor = match std::env::var_os("TORCHINDUCTOR_CACHE_DIR").filter(|v| !v.is_empty()) {
        Some(user) => PathBuf::from(user).join(format!("gasan-{tag}")),
        None => tools.parent().unwrap_or(&tools).join(format!("torchinductor-{tag}")),
    };
    cmd.env("TORCHINDUCTOR_CACHE_DIR", &inductor);
    say(format!("TORCHINDUCTOR_CACHE_DIR={} (Inductor's caches apart from native runs')", inductor.display()));
    match std::env::var_os("JAX_ENABLE_COMPILATION_CACHE") {
        Some(v) => say(format!("kept JAX_ENABLE_COMPILATION_CACHE={} (JAX's persistent cache may hand out native kernels)", v.to_string_lossy())),
        None => {
            cmd.env("JAX_ENABLE_COMPILATION_CACHE", "false");
            say("JAX_ENABLE_COMPILATION_CACHE=false (its entries are keyed without the ptxas)".into());
        }
    }
}

/// XLA writes `.loc` lines into its PTX (a Pallas kernel's are its Python source) only with
/// `--xla_gpu_generate_line_info`, and a report names the line its check's site carries.
fn xla_line_info(cmd: &mut Command, say: &impl Fn(String)) {
    const FLAG: &str = "--xla_gpu_generate_line_info";
    let old = std::env::var_os("XLA_FLAGS").unwrap_or_default();
    if old.as_bytes().windows(FLAG.len()).any(|w| w == FLAG.as_bytes()) {
        say(format!("kept XLA_FLAGS={} (its line information setting)", old.to_string_lossy()));
        return;
    }
    let mut flags = old.into_vec();
    if !flags.is_empty() {
        flags.push(b' ');
    }
    flags.extend_from_slice(format!("{FLAG}=true").as_bytes());
    cmd.env("XLA_FLAGS", OsString::from_vec(flags));
    say(format!("XLA_FLAGS gains {FLAG}=true (XLA's kernels carry source lines, so reports name them)"));
}

/// Numba-CUDA up to 0.15 links a kernel's PTX in-process with pynvjitlink when it is installed,
/// so the driver gets a cubin; `NUMBA_CUDA_ENABLE_PYNVJITLINK=0` makes it link with the driver's
/// `cuLink*` (its `CudaPythonLinker` / `CtypesLinker`), whose PTX inputs the runtime checks
/// (runtime/src/link.rs). Later versions ignore it: they link with cuda.core's `Linker`, nvJitLink
/// when it loads, else `cuLink*` (jit/README.md, "Numba").
fn numba(cmd: &mut Command, say: &impl Fn(String)) {
    const VAR: &str = "NUMBA_CUDA_ENABLE_PYNVJITLINK";
    match std::env::var_os(VAR) {
        Some(v) => say(format!("kept {VAR}={} (Numba-CUDA <= 0.15 links with pynvjitlink when it is 1: its kernels unchecked)", v.to_string_lossy())),
        None => {
            cmd.env(VAR, "0");
            say(format!("{VAR}=0 (Numba-CUDA <= 0.15 links through the driver, where its PTX is checked)"));
        }
    }
}

/// PyTorch's extensions built at run time carry PTX, which the runtime checks when they load: where
/// the user's `TORCH_CUDA_ARCH_LIST` asks for SASS only, its last (newest) architecture gains
/// `+PTX`, and the builds go to a directory of their own, apart from native runs' SASS-only ones.
fn torch_extensions(cmd: &mut Command, say: &impl Fn(String), cache: Option<&Path>) {
    let Some(list) = std::env::var_os("TORCH_CUDA_ARCH_LIST").filter(|v| !v.is_empty()) else { return };
    let Some(with_ptx) = arch_list_with_ptx(&list.to_string_lossy()) else { return };
    let dir = match std::env::var_os("TORCH_EXTENSIONS_DIR").filter(|v| !v.is_empty()) {
        Some(user) => PathBuf::from(user).join("gasan"),
        None => match cache {
            Some(c) => c.join("torch-extensions"),
            None => {
                say(format!("kept TORCH_CUDA_ARCH_LIST={} (no cache directory for PTX-carrying extension builds): PyTorch extensions built for it stay SASS only, unchecked", list.to_string_lossy()));
                return;
            }
        },
    };
    cmd.env("TORCH_CUDA_ARCH_LIST", &with_ptx).env("TORCH_EXTENSIONS_DIR", &dir);
    say(format!("TORCH_CUDA_ARCH_LIST={with_ptx}, TORCH_EXTENSIONS_DIR={} (PyTorch extensions built with PTX, which gasan checks, apart from native runs' builds)", dir.display()));
}

/// `list` (PyTorch's `TORCH_CUDA_ARCH_LIST`: entries separated by `;` or spaces, such as `8.0;9.0a`)
/// with `+PTX` on its last entry, or None when an entry already has it.
fn arch_list_with_ptx(list: &str) -> Option<String> {
    let entries: Vec<&str> = list.split([';', ' ']).filter(|e| !e.is_empty()).collect();
    if entries.is_empty() || entries.iter().any(|e| e.to_ascii_uppercase().ends_with("+PTX")) {
        return None;
    }
    Some(format!("{}+PTX", entries.join(";")))
}

/// Whether `a` and `b` are the same file (after links).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// FNV-1a, 64 bits.
fn fnv(parts: &[&[u8]]) -> u64 {
    parts.iter().flat_map(|p| p.iter().chain(&[0u8])).fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// What decides the checked code of a kernel: gasan's version, the rewriter's revision, the
/// options that change checked code.
fn tag(opts: &Options) -> String {
    let rev = gasan_instrument::ptx::REVISION.to_le_bytes();
    format!("{:016x}", fnv(&[env!("CARGO_PKG_VERSION").as_bytes(), &rev, opts.code_key().as_bytes()]))
}

/// `dir` first on the search path `old` (not twice when a gasan-run runs under another).
fn path_first(dir: &Path, old: &std::ffi::OsStr) -> OsString {
    let mut v = dir.as_os_str().as_bytes().to_vec();
    if old.as_bytes().split(|&b| b == b':').next() == Some(v.as_slice()) {
        return old.to_os_string();
    }
    if !old.is_empty() {
        v.push(b':');
        v.extend_from_slice(old.as_bytes());
    }
    OsString::from_vec(v)
}

/// The directory of links to the front end: in the cache directory, else a private temporary one.
fn tool_dir(cache: Option<&Path>, front: &Path) -> Result<PathBuf, String> {
    let name = format!("jit-tools-{:016x}", fnv(&[front.as_os_str().as_bytes()]));
    let mut why = Vec::new();
    if let Some(c) = cache {
        let dir = c.join(&name);
        match links(&dir, front) {
            Ok(()) => return Ok(dir),
            Err(e) => why.push(format!("{}: {}", dir.display(), os_error_text(&e))),
        }
    }
    let mut t = std::env::temp_dir().join("gasan-jit-XXXXXX").into_os_string().into_vec();
    t.push(0);
    // SAFETY: `t` is a writable NUL-terminated template that outlives the call.
    if unsafe { libc::mkdtemp(t.as_mut_ptr().cast()) }.is_null() {
        why.push(format!("temporary directory: {}", os_error_text(&std::io::Error::last_os_error())));
        return Err(why.join("; "));
    }
    t.pop();
    let dir = PathBuf::from(OsString::from_vec(t));
    links(&dir, front).map_err(|e| {
        why.push(format!("{}: {}", dir.display(), os_error_text(&e)));
        why.join("; ")
    })?;
    Ok(dir)
}

/// Makes `dir/ptxas` and `dir/ptxas-blackwell` links to `front` (each replaced atomically, so a
/// concurrent gasan-run sees the old link or the new one).
fn links(dir: &Path, front: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, _, _) in ROLES {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == front) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(front, &tmp)?;
        std::fs::rename(&tmp, &link).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
    }
    Ok(())
}
