//! gasan's SIGSEGV handler and the program's own. Once a managed block has moved to device memory
//! (managed.rs), the CPU's next access to it faults and gasan's handler moves it back; every other
//! fault goes to the action the program asked for. A program that sets its own SIGSEGV action after
//! that point (Python's `faulthandler.enable()`, a JVM, a crash reporter) would replace gasan's
//! handler and die on its next touch of a managed block, so while gasan's handler is installed
//! `sigaction` and `signal` (exported here, found before libc's by the preload) keep it installed
//! and record the program's action instead: the program reads back what it set, and its handler
//! runs for every fault that is not gasan's. This is ASan's answer too (its `sigaction`/`signal`
//! interceptors keep its own SIGSEGV handler unless told otherwise). Other signals, and SIGSEGV
//! before gasan's handler is installed, go straight to libc.

use crate::library::Library;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A fault at `addr` that gasan resolved (the faulting access may run again), or not (it goes
/// to the program's action).
pub type FaultFilter = fn(addr: u64) -> bool;

/// gasan's handler is installed in the kernel.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The action the program has for SIGSEGV while gasan's is installed. Read in the handler, so
/// never freed: a replaced action is leaked (programs set it a handful of times).
static PROGRAM_ACTION: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes the program's updates (the handler only reads).
static UPDATE: Mutex<()> = Mutex::new(());
static FILTER: AtomicUsize = AtomicUsize::new(0);

fn table() -> &'static [(&'static str, usize)] {
    static T: OnceLock<[(&str, usize); 2]> = OnceLock::new();
    T.get_or_init(|| [("sigaction", sigaction as *const () as usize), ("signal", signal as *const () as usize)])
}

/// libc, as the wrappers reach it: each function found after this library (`RTLD_NEXT` through
/// glibc's own dlsym), never these exports.
static LIBC: Library = Library::next_in_order(table);

/// libc's functions of the names exported here, each declared once with its prototype.
mod sys {
    use super::LIBC;
    use std::ffi::c_int;
    crate::library::exports! { LIBC -> c_int;
        sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction);
    }
    crate::library::exports! { LIBC -> libc::sighandler_t;
        signal(sig: c_int, handler: libc::sighandler_t);
    }
}

/// libc's `sigaction` (found once, and kept: the handler calls it too).
fn real_sigaction() -> unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int {
    sys::sigaction.get().expect("gasan: cannot find libc's sigaction")
}

/// libc's `signal`.
fn real_signal() -> unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t {
    sys::signal.get().expect("gasan: cannot find libc's signal")
}

/// Installs gasan's SIGSEGV handler (once), which asks `filter` about each fault first. The
/// action in place before becomes the program's.
pub fn install_fault_handler(filter: FaultFilter) {
    let _g = UPDATE.lock().unwrap_or_else(|e| e.into_inner());
    FILTER.store(filter as usize, Ordering::Release);
    if INSTALLED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: an all-zero sigaction is a valid value to fill in; libc's sigaction is given valid
    // pointers and a handler with the SA_SIGINFO signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_segv as *const () as usize;
        // On the thread's alternate stack where it has one: a stack overflow is a SIGSEGV too,
        // and the program's handler for it (Rust, Go, CPython's faulthandler) expects that stack.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if real_sigaction()(libc::SIGSEGV, &act, &mut old) != 0 {
            return;
        }
        PROGRAM_ACTION.store(Box::into_raw(Box::new(old)), Ordering::Release);
    }
    INSTALLED.store(true, Ordering::Release);
}

/// The program's SIGSEGV action (what it would have in the kernel without gasan).
fn program_action() -> Option<libc::sigaction> {
    let p = PROGRAM_ACTION.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here came from Box::into_raw and is never freed.
    (!p.is_null()).then(|| unsafe { *p })
}

fn set_program_action(act: libc::sigaction) {
    PROGRAM_ACTION.store(Box::into_raw(Box::new(act)), Ordering::Release);
}

extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    let filter = FILTER.load(Ordering::Acquire);
    if filter != 0 {
        // SAFETY: FILTER only ever holds a FaultFilter.
        let filter = unsafe { std::mem::transmute::<usize, FaultFilter>(filter) };
        if filter(addr) {
            return;
        }
    }
    let Some(prev) = program_action() else { return };
    match prev.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => {
            // Hand the signal back to the kernel's default: restore the program's action and
            // return, so the access faults again and the process gets what it would have got
            // without gasan. From then on the program's calls go to libc directly.
            INSTALLED.store(false, Ordering::Release);
            // SAFETY: `prev` is a sigaction libc returned or the program passed.
            unsafe { real_sigaction()(sig, &prev, std::ptr::null_mut()) };
        }
        h => {
            if prev.sa_flags & libc::SA_RESETHAND != 0 {
                // One delivery, then the default (the flag's meaning).
                // SAFETY: all-zero is SIG_DFL with no flags.
                set_program_action(unsafe { std::mem::zeroed() });
            }
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program's own handler, installed with the SA_SIGINFO signature.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { std::mem::transmute(h) };
                f(sig, info, ctx)
            } else {
                // SAFETY: the program's own plain handler.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
                f(sig)
            }
        }
    }
}

/// The program's `sigaction`.
///
/// # Safety
/// The C contract of `sigaction(2)`: `act` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    if sig == libc::SIGSEGV && INSTALLED.load(Ordering::Acquire) {
        let _g = UPDATE.lock().unwrap_or_else(|e| e.into_inner());
        if INSTALLED.load(Ordering::Acquire) {
            if !old.is_null() {
                // SAFETY: `old` is valid for writes by the contract; all-zero is SIG_DFL.
                unsafe { *old = program_action().unwrap_or_else(|| std::mem::zeroed()) };
            }
            if !act.is_null() {
                // SAFETY: `act` is valid for reads by the contract.
                set_program_action(unsafe { *act });
            }
            return 0;
        }
    }
    // SAFETY: forwarded with the caller's arguments.
    unsafe { real_sigaction()(sig, act, old) }
}

/// The program's `signal` (glibc's BSD semantics: the handler stays, interrupted calls restart).
///
/// # Safety
/// The C contract of `signal(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if sig == libc::SIGSEGV && INSTALLED.load(Ordering::Acquire) {
        // SAFETY: all-zero is a valid sigaction to fill in.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: all-zero is a valid sigaction to fill in.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals.
        if unsafe { sigaction(sig, &act, &mut old) } == 0 {
            return old.sa_sigaction;
        }
    }
    // SAFETY: forwarded with the caller's arguments.
    unsafe { real_signal()(sig, handler) }
}

/// The action the kernel has for SIGSEGV (gasan's handler while installed), for tests.
pub fn kernel_action() -> libc::sigaction {
    // SAFETY: a query (null new action) into a zeroed local.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        real_sigaction()(libc::SIGSEGV, std::ptr::null(), &mut old);
        old
    }
}

/// Whether `action` is gasan's handler.
pub fn is_gasan_handler(action: &libc::sigaction) -> bool {
    action.sa_sigaction == on_segv as *const () as usize
}
