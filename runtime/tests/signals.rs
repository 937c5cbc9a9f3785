//! gasan's SIGSEGV handler beside the program's (runtime/src/signals.rs), with real faults on
//! real pages: once gasan's handler is installed, a program that sets its own SIGSEGV action
//! through `sigaction` or `signal` keeps gasan's in the kernel, reads back its own, and gets every
//! fault gasan does not resolve. The faults here are reads of PROT_NONE pages; the handlers make
//! the page readable, so the read runs again and completes. One test: the process's SIGSEGV
//! action is shared by everything in it.

use gasan_runtime::signals::{install_fault_handler, is_gasan_handler, kernel_action, sigaction, signal};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const PAGE: usize = 4096;
/// The page gasan resolves (standing for a managed block moved to the device).
static GASAN_PAGE: AtomicU64 = AtomicU64::new(0);
static PROGRAM_CALLS: AtomicUsize = AtomicUsize::new(0);
static PLAIN_CALLS: AtomicUsize = AtomicUsize::new(0);
static LAST_FAULT: AtomicU64 = AtomicU64::new(0);

fn make_readable(addr: u64) {
    let page = (addr as usize & !(PAGE - 1)) as *mut c_void;
    // SAFETY: `page` is one of the test's own mappings.
    assert_eq!(unsafe { libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_WRITE) }, 0);
}

fn gasan_filter(addr: u64) -> bool {
    let mine = addr & !(PAGE as u64 - 1) == GASAN_PAGE.load(Ordering::Relaxed);
    if mine {
        make_readable(addr);
    }
    mine
}

extern "C" fn program_handler(_sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    LAST_FAULT.store(addr, Ordering::Relaxed);
    PROGRAM_CALLS.fetch_add(1, Ordering::Relaxed);
    make_readable(addr);
}

static PLAIN_PAGE: AtomicU64 = AtomicU64::new(0);
extern "C" fn plain_handler(_sig: c_int) {
    PLAIN_CALLS.fetch_add(1, Ordering::Relaxed);
    make_readable(PLAIN_PAGE.load(Ordering::Relaxed));
}

fn no_access_pages(n: usize) -> Vec<*const u8> {
    // SAFETY: a fresh anonymous mapping, not touched until the test reads it.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), n * PAGE, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    assert_ne!(base, libc::MAP_FAILED);
    (0..n).map(|i| (base as usize + i * PAGE) as *const u8).collect()
}

fn read(p: *const u8) -> u8 {
    // SAFETY: `p` is in the test's mapping; when it is not readable the read faults and a handler
    // makes it readable before it runs again.
    unsafe { std::ptr::read_volatile(p) }
}

#[test]
fn the_programs_sigsegv_action_is_kept_beside_gasans() {
    let pages = no_access_pages(3);
    GASAN_PAGE.store(pages[0] as u64, Ordering::Relaxed);
    let before = kernel_action();
    install_fault_handler(gasan_filter);
    assert!(is_gasan_handler(&kernel_action()), "gasan's handler is installed");

    // The program sets its own action: it reads back what was there before gasan's (the test
    // harness's), then its own; the kernel keeps gasan's.
    // SAFETY: zeroed sigactions filled in; valid pointers to locals throughout.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = program_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(sigaction(libc::SIGSEGV, &act, &mut old), 0);
        assert_eq!(old.sa_sigaction, before.sa_sigaction, "the old action is the one before gasan's");
        let mut now: libc::sigaction = std::mem::zeroed();
        assert_eq!(sigaction(libc::SIGSEGV, std::ptr::null(), &mut now), 0);
        assert_eq!(now.sa_sigaction, program_handler as *const () as usize, "the program reads back its own action");
    }
    assert!(is_gasan_handler(&kernel_action()), "gasan's handler stays installed");

    // A fault gasan resolves never reaches the program; any other one does.
    assert_eq!(read(pages[0]), 0);
    assert_eq!(PROGRAM_CALLS.load(Ordering::Relaxed), 0, "gasan's fault went to the program");
    assert_eq!(read(pages[1]), 0);
    assert_eq!(PROGRAM_CALLS.load(Ordering::Relaxed), 1, "the program's fault did not reach its handler");
    assert_eq!(LAST_FAULT.load(Ordering::Relaxed), pages[1] as u64);

    // `signal` too: it returns the previous handler, and a plain handler gets the next fault.
    PLAIN_PAGE.store(pages[2] as u64, Ordering::Relaxed);
    // SAFETY: a plain handler with the signal(2) signature.
    let previous = unsafe { signal(libc::SIGSEGV, plain_handler as *const () as usize) };
    assert_eq!(previous, program_handler as *const () as usize);
    assert!(is_gasan_handler(&kernel_action()));
    assert_eq!(read(pages[2]), 0);
    assert_eq!((PROGRAM_CALLS.load(Ordering::Relaxed), PLAIN_CALLS.load(Ordering::Relaxed)), (1, 1));

    // Other signals are the kernel's business as before: a SIGUSR1 handler set through the same
    // entry point is installed for real.
    // SAFETY: a zeroed sigaction is a valid C value; the calls read and write only these live
    // locals (null for the unwanted old action), and ignoring SIGUSR1 disturbs nothing here.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_IGN;
        assert_eq!(sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()), 0);
        let mut got: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::syscall(libc::SYS_rt_sigaction, libc::SIGUSR1, std::ptr::null::<libc::sigaction>(), &mut got, 8), 0);
        assert_eq!(got.sa_sigaction, libc::SIG_IGN);
    }

    // The harness's own action back for the rest of the process (gasan's stays in front).
    // SAFETY: restoring the action read at the start.
    unsafe { sigaction(libc::SIGSEGV, &before, std::ptr::null_mut()) };
    assert!(is_gasan_handler(&kernel_action()));
}
