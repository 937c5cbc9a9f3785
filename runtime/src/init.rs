//! Start-up: what runs when the runtime is loaded, before the program's `main` (lib.rs puts
//! [`at_load`] in `.init_array`). `options` only parses; this orchestrates.

use crate::options;

/// Whether this code runs from a shared object (the preloaded `libgasan_runtime.so`), not from a
/// program that links the crate (gasan-run, tests).
fn in_shared_object() -> bool {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only writes `info`; the address is a function of this object.
    let found = unsafe { libc::dladdr(at_load as *const libc::c_void, info.as_mut_ptr()) } != 0;
    if !found {
        return false;
    }
    // SAFETY: dladdr succeeded, so `info` is initialized; dli_fname is NULL or a C string owned by
    // the dynamic linker.
    let fname = unsafe { info.assume_init().dli_fname };
    if fname.is_null() {
        return false;
    }
    // SAFETY: non-NULL dli_fname is a NUL-terminated string owned by the dynamic linker.
    let path = unsafe { std::ffi::CStr::from_ptr(fname) }.to_bytes();
    // The file name only: a program may live under a directory that looks like a `.so`.
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    name.windows(3).any(|w| w == b".so")
}

/// Runs when the runtime is loaded (lib.rs puts it in `.init_array`), before the program's `main`:
/// refuses bad `GASAN_OPTIONS` with status 2, so a bad option never lets the program start, with or
/// without gasan-run. It starts the early preparation of the program's modules
/// ([`crate::prefetch::start_early`]: no CUDA call, nothing when no GPU is remembered). With
/// `verbosity>=1` it also arranges to say so at exit when the program never loaded libcuda (it
/// made no CUDA call, so nothing was checked).
pub extern "C" fn at_load() {
    // The prefetch, above the state and the loaders, handed to them (they do not name it).
    crate::state::on_device_ready(crate::prefetch::start);
    crate::modules::take_prepared_from(crate::prefetch::take);
    if !in_shared_object() {
        return;
    }
    let o = options::process();
    if o.verbosity >= 2 {
        eprintln!("==gasan== options: {}", o.to_env_string());
    }
    // The program's modules looked up in the cache from now on, for the GPU the last run set up
    // (no CUDA call: that waits for the program's own).
    crate::prefetch::start_early(crate::modules::options());
    // Under gasan-run, only the program it started says it made no CUDA call, not each helper
    // process the program spawns (a pyenv shim runs dozens).
    let launched = std::env::var(options::RUN_PID_ENV).ok().and_then(|p| p.parse::<u32>().ok());
    if o.verbosity >= 1 && launched.is_none_or(|p| p == std::process::id()) {
        // Programs may close stderr before their exit handlers run (coreutils' close_stdout, run
        // from atexit before ours): the message goes to a copy of fd 2 taken now (close-on-exec:
        // an exec'd image takes its own copy when it loads the runtime again).
        static STDERR_COPY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);
        // SAFETY: F_DUPFD_CLOEXEC on fd 2 only creates a new descriptor (or fails with -1).
        let copy = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
        if copy >= 0 {
            STDERR_COPY.store(copy, std::sync::atomic::Ordering::Relaxed);
        }
        // A forked child (a shell's subshell) inherits the handler but is not the program.
        static REGISTERED_BY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        REGISTERED_BY.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
        extern "C" fn say_if_no_cuda() {
            if std::process::id() != REGISTERED_BY.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            // SAFETY: RTLD_NOLOAD only looks the library up; it loads nothing and runs no code.
            let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
            if h.is_null() {
                let msg = format!("==gasan== the program (pid {}) made no CUDA call (libcuda was never loaded): nothing was checked\n", std::process::id());
                let fd = STDERR_COPY.load(std::sync::atomic::Ordering::Relaxed);
                // SAFETY: writes the message's bytes from a live buffer to a descriptor this
                // process owns (a failed write on a closed one is ignored).
                let _ = unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
            } else {
                // SAFETY: balances the reference the successful NOLOAD dlopen took.
                unsafe { libc::dlclose(h) };
            }
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(say_if_no_cuda) };
    }
}
