//! Framework pools (option `framework_pools`, default 1): Python frameworks sub-allocate tensors
//! from large cached blocks, so a kernel reading one element past a tensor stays inside a block
//! that gasan sees as one allocation. gasan-run makes each framework hand out individually checked
//! allocations through the framework's own switches, in the child's environment:
//!
//! | variable | value | effect |
//! |---|---|---|
//! | `PYTORCH_CUDA_ALLOC_CONF` | `backend:cudaMallocAsync` | PyTorch: every tensor its own stream-ordered `cudaMallocAsync` of its size, freed with `cudaFreeAsync`; set only where neither allocator variable is (see [`pytorch_switch`]) |
//! | `PYTORCH_NO_CUDA_MEMORY_CACHING` | `1` | instead, where the user configured PyTorch's allocator: the caching allocator off, every tensor its own `cudaMalloc` (PyTorch reads *any* value, even `0`, as "off") |
//! | `CUPY_COMPILE_WITH_PTX` | `1` | CuPy's `RawKernel`s and generated kernels are loaded as PTX, which gasan checks (its default cubins are SASS only: unchecked) |
//! | `NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT` | `0` | Numba frees device arrays at once instead of batching frees (use after free is caught from the first free) |
//! | `XLA_PYTHON_CLIENT_ALLOCATOR` | `cuda_async` | JAX allocates each buffer on demand with `cuMemAllocFromPoolAsync` of its exact size, which gasan serves from its pool |
//! | `XLA_PYTHON_CLIENT_PREALLOCATE` | `false` | JAX's `cuda_async` allocator does not first allocate (and free) 75% of the GPU's memory |
//! | `PYTHONPATH` | hook dir first | the start-up hook (`runtime/python/sitecustomize.py`) turns CuPy's device and pinned pools off when the program imports CuPy, points JAX's CUDA directory at gasan's ptxas front end when it imports JAX (with `GASAN_JIT_TOOLS` from launcher/jit.rs), then runs the `sitecustomize` it shadows |
//!
//! Not `platform`: XLA's platform allocator (jax-cuda13-pjrt 0.11.2, measured 2026-12-05) maps
//! each buffer itself with `cuMemCreate` + `cuMemAddressReserve` + `cuMemMap`, rounded up to the
//! 2 MiB allocation granularity, so neither its size nor its address ever reaches an allocation
//! call gasan serves: its buffers are unchecked. `cuda_async` (XLA's `GpuCudaMallocAsyncAllocator`)
//! asks `cuMemAllocFromPoolAsync` for each buffer's own size and frees it with `cuMemFreeAsync`, both
//! hooked (XLA resolves them by `dlsym` on its `libcuda.so.1` handle, which gasan's `dlsym` answers).
//!
//! A variable the user has set (to anything, empty included) is kept as it is; `verbosity>=1`
//! says so. A `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` the user set is never changed.
//! RMM's default resource is a
//! plain `cudaMalloc` per buffer; a program that builds an RMM pool, or sets its own CuPy
//! allocator after import, keeps it.
//!
//! The hook is written (once per content) into `<cache dir>/python-hook-<hash>/`, a name the
//! cache's eviction and `--cache-clear` leave alone; if the cache directory cannot be written, into
//! a private fresh directory under `$TMPDIR`.

use gasan_runtime::cache::dir_for;
use gasan_runtime::options::{os_error_text, Options};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The start-up hook's text.
pub const HOOK: &str = include_str!("../../../python/sitecustomize.py");

/// The variables set where the user has not: name, value, what it does, and what a value the user
/// set instead means (said when that value is kept).
pub const ENV: &[(&str, &str, &str, &str)] = &[
    ("CUPY_COMPILE_WITH_PTX", "1", "CuPy: kernels loaded as PTX, so gasan checks them", "CuPy's cubins stay: its kernels are not checked"),
    ("NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT", "0", "Numba: device arrays freed at once, not in batches", "frees are batched: a use after free is caught only once its batch is freed"),
    (
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "cuda_async",
        "JAX: every buffer its own cuMemAllocFromPoolAsync, served from gasan's pool",
        "JAX's buffers come from its BFC pool, or with platform are XLA's own VMM mappings: not checked per buffer",
    ),
    ("XLA_PYTHON_CLIENT_PREALLOCATE", "false", "JAX: no preallocation through the cuda_async allocator", "cuda_async first allocates and frees most of the GPU's memory"),
];

/// PyTorch's switch, from what the user set (`get` reads the environment): the variable to set
/// with its value and what it does, or `None` where the user's settings already decide.
///
/// Where no allocator variable is set: `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`, each
/// tensor a stream-ordered allocation of its own size (served and checked by gasan's pool) and
/// freed in stream order. With the caching allocator off instead, every `cudaFree` waits for the
/// whole device: torch.compile's model step (benches/jit, H100) took 6.13 ms that way against
/// 3.95 ms with the async backend (native 1.38 ms). Where the user configured the allocator without
/// that backend (expandable segments, a garbage-collection threshold), their configuration stays
/// and the caching allocator is turned off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`); where they chose
/// the async backend or set `PYTORCH_NO_CUDA_MEMORY_CACHING` themselves, nothing is set. The
/// backend's memory statistics (`torch.cuda.memory_allocated()` and the rest) read the driver's
/// pool attributes, which gasan answers from the allocations it served (pool_stats.rs).
pub fn pytorch_switch(get: impl Fn(&str) -> Option<OsString>) -> Option<(&'static str, &'static str, &'static str)> {
    const ASYNC: &str = "backend:cudaMallocAsync";
    if get("PYTORCH_NO_CUDA_MEMORY_CACHING").is_some() {
        return None;
    }
    let conf: Vec<OsString> = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"].iter().filter_map(|n| get(n)).collect();
    if conf.is_empty() {
        return Some(("PYTORCH_CUDA_ALLOC_CONF", ASYNC, "PyTorch: every tensor its own cudaMallocAsync, served and checked by gasan's pool, freed in stream order"));
    }
    let chose_async = conf.iter().any(|v| v.to_string_lossy().split(',').any(|o| o.split_whitespace().collect::<String>() == ASYNC));
    (!chose_async).then_some(("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "PyTorch: your allocator options kept, its caching turned off: every tensor its own cudaMalloc"))
}

/// Sets the framework switches on the child's command (nothing when `framework_pools=0`).
pub fn apply(cmd: &mut Command, opts: &Options) {
    if !opts.framework_pools {
        return;
    }
    let say = |m: String| {
        if opts.verbosity >= 1 {
            eprintln!("gasan-run: framework pools: {m}");
        }
    };
    for (name, value, what, kept_means) in ENV {
        match std::env::var_os(name) {
            Some(v) => say(format!("kept {name}={} from the environment{}", v.to_string_lossy(), if v.as_bytes() != value.as_bytes() { format!(" ({kept_means})") } else { String::new() })),
            None => {
                cmd.env(name, value);
                say(format!("set {name}={value} ({what})"));
            }
        }
    }
    match pytorch_switch(|n| std::env::var_os(n)) {
        Some((name, value, what)) => {
            cmd.env(name, value);
            say(format!("set {name}={value} ({what})"));
        }
        None => say("PyTorch's allocator variables kept as set (PYTORCH_NO_CUDA_MEMORY_CACHING: no caching; backend:cudaMallocAsync: each tensor checked on its own)".to_string()),
    }
    for name in ["PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"] {
        if let Some(v) = std::env::var_os(name) {
            say(format!("kept {name}={} from the environment", v.to_string_lossy()));
        }
    }
    match hook_dir(opts) {
        Ok(dir) => {
            let old = std::env::var_os("PYTHONPATH").unwrap_or_default();
            cmd.env("PYTHONPATH", python_path(&dir, &old));
            say(format!("CuPy pools off at import: start-up hook {}/sitecustomize.py first on PYTHONPATH", dir.display()));
        }
        Err(e) => eprintln!("gasan-run: warning: cannot write the Python start-up hook ({e}); CuPy's memory pools stay on"),
    }
}

/// `dir` first on the path `old` (not twice when a gasan-run runs under another).
pub fn python_path(dir: &Path, old: &std::ffi::OsStr) -> OsString {
    let mut v = dir.as_os_str().as_bytes().to_vec();
    let first = old.as_bytes().split(|&b| b == b':').next().unwrap_or(b"");
    if first == v.as_slice() {
        return old.to_os_string();
    }
    if !old.is_empty() {
        v.push(b':');
        v.extend_from_slice(old.as_bytes());
    }
    OsString::from_vec(v)
}

/// FNV-1a of the hook's text: its directory's name changes with its content.
fn content_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The directory holding the hook: in the cache directory, else a private temporary one.
fn hook_dir(opts: &Options) -> Result<PathBuf, String> {
    let name = format!("python-hook-{:016x}", content_hash(HOOK));
    let mut why = Vec::new();
    if let Some(cache) = dir_for(opts.cache_dir.as_deref()) {
        let dir = cache.join(&name);
        match write_hook(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => why.push(format!("{}: {}", dir.display(), os_error_text(&e))),
        }
    }
    match private_temp_dir() {
        Ok(dir) => match write_hook(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => why.push(format!("{}: {}", dir.display(), os_error_text(&e))),
        },
        Err(e) => why.push(format!("temporary directory: {}", os_error_text(&e))),
    }
    Err(why.join("; "))
}

/// Writes `dir/sitecustomize.py` unless it already holds the hook (atomically: a concurrent
/// gasan-run sees the old file or the new one).
fn write_hook(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let file = dir.join("sitecustomize.py");
    if std::fs::read(&file).ok().as_deref() == Some(HOOK.as_bytes()) {
        return Ok(());
    }
    let tmp = dir.join(format!(".sitecustomize.{}.tmp", std::process::id()));
    std::fs::write(&tmp, HOOK)?;
    std::fs::rename(&tmp, &file).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A new directory only this user can enter (`mkdtemp`), under `$TMPDIR` or `/tmp`.
fn private_temp_dir() -> std::io::Result<PathBuf> {
    let mut t = std::env::temp_dir().join("gasan-python-XXXXXX").into_os_string().into_vec();
    t.push(0);
    // SAFETY: `t` is a writable NUL-terminated template that outlives the call.
    if unsafe { libc::mkdtemp(t.as_mut_ptr().cast()) }.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    t.pop();
    Ok(PathBuf::from(OsString::from_vec(t)))
}
