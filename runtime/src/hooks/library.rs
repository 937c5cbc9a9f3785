//! Libraries other than libcuda whose calls the runtime wraps: NVRTC ([`super::nvrtc`]) and
//! nvJitLink ([`super::nvjitlink`]), which compile or link kernels in-process and hand the program
//! cubins, and NCCL ([`super::nccl`]), whose calls' buffers are range-checked. Their wrappers are
//! exported under the libraries' names (programs linked with them, and
//! `dlsym(RTLD_DEFAULT, ...)`), and the runtime's `dlsym` ([`crate::interpose`]) asks
//! [`dlsym_answer`] for every name, so a program that opens the library itself and looks names up
//! on its handle gets them too.
//!
//! A wrapped name the library would not answer (not loaded, or loaded `RTLD_LOCAL` and asked through
//! `RTLD_DEFAULT`, as cuda-bindings asks before it opens the library) is answered null, as without
//! gasan: the exports alone would answer it with a wrapper that has no library behind it.

use crate::library::DLSYM_NULL;
use crate::state::log;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// Warns that gasan's part failed: the first time on standard error, later ones at `verbosity=1`
/// (a program may compile many kernels, each failing the same way, e.g. without a ptxas).
pub(crate) fn warn(warned: &std::sync::atomic::AtomicBool, what: String) {
    let level = u32::from(warned.swap(true, Ordering::Relaxed));
    log(level, || format!("WARNING: {what}{}", if level == 0 { " (more such warnings at verbosity=1)" } else { "" }));
}

/// Decides `dlsym(handle, name)` for the wrapped libraries: our wrapper where the library answers
/// the lookup, [`DLSYM_NULL`] where it would answer nothing but gasan's exports would, null (glibc
/// answers as usual) for every name not wrapped here and for `RTLD_NEXT`.
pub(crate) fn dlsym_answer(handle: *mut c_void, name: &[u8]) -> *mut c_void {
    let answer = [&super::nvrtc::NVRTC, &super::nvjitlink::NVJITLINK, &super::nccl::NCCL].iter().find_map(|l| l.dlsym_answer(handle, name)).unwrap_or(std::ptr::null_mut());
    if !answer.is_null() && answer != DLSYM_NULL {
        log(2, || format!("dlsym({}) -> gasan's wrapper", String::from_utf8_lossy(name)));
    }
    answer
}
