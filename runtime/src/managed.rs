//! Where managed blocks live. A managed allocation is pinned host memory in the pool, which the
//! CPU and kernels share at one address (and kernels' accesses are checked), but which kernels
//! read across the bus. A prefetch to the GPU is the program saying the GPU works on the block
//! next: it moves to device memory (same address, same shadow). The CPU cannot reach device memory,
//! so its next access faults; the fault handler below moves the block back to host memory and
//! the access runs again, which is what the driver's own managed memory does with its page
//! faults, at block rather than page granularity. A prefetch to the CPU moves it back at once.

use crate::driver::{CuResult, CUDA_SUCCESS};
use crate::state::state;
use gasan_uvm::Memory;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// A prefetch of `[ptr, ptr+len)` to the GPU (`to_device`) or the CPU: the managed pool block
/// holding the range moves there. `None`: not a managed pool block (the driver answers).
pub fn prefetch(ptr: u64, len: u64, to_device: bool) -> Option<CuResult> {
    let d = state().device()?;
    let block = d.alloc.live_block(ptr)?;
    block.managed_range(ptr, len.max(1))?;
    let to = if to_device { Memory::Device } else { Memory::Host };
    if block.memory == to {
        return Some(CUDA_SUCCESS);
    }
    // The block's bytes move under the program's feet: work queued on any stream that uses it
    // must be done first (prefetches are stream-ordered; this one waits for all streams).
    let r = crate::real_call!("cuCtxSynchronize"()());
    if r != CUDA_SUCCESS {
        return Some(r);
    }
    if to_device {
        install_fault_handler();
    }
    // A block that cannot move stays where it was: still correct, only slower.
    let _ = d.alloc.migrate_managed(ptr, to);
    Some(CUDA_SUCCESS)
}

/// The action that was installed for SIGSEGV before ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

fn install_fault_handler() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: an all-zero sigaction is a valid value to fill in; sigaction() is given valid
        // pointers and a handler with the SA_SIGINFO signature.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_segv as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &act, &mut old);
            old
        }
    });
}

/// A CPU access to a managed block on the device: move it back and let the access run again.
/// Anything else goes to the handler installed before (or the default action).
extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    if move_back(addr) {
        return;
    }
    let Some(prev) = PREVIOUS.get() else { return };
    match prev.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => {
            // Restore the old action and return: the access faults again and the process gets
            // what it would have got without gasan.
            // SAFETY: `prev` is the action sigaction() returned.
            unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
        }
        h if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the program's own handler, installed with the SA_SIGINFO signature.
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { std::mem::transmute(h) };
            f(sig, info, ctx)
        }
        h => {
            // SAFETY: the program's own plain handler.
            let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
            f(sig)
        }
    }
}

/// Whether `addr` is in a managed block that is in host memory now, moved back here if it was on
/// the device, so that the access can run again. Several host threads may fault on one block at
/// once: the first moves it (the allocator's lock orders them), the others find it back already.
/// The faulting thread was running the program's own code (gasan never touches managed memory on
/// the CPU), so it holds none of gasan's locks or the driver's.
fn move_back(addr: u64) -> bool {
    let Some(d) = state().device() else { return false };
    match d.alloc.managed_memory_at(addr) {
        None => false,
        Some(Memory::Host) => true,
        Some(Memory::Device) => {
            // Kernels may still be writing the block.
            let _ = crate::real_call!("cuCtxSynchronize"()());
            let _ = d.alloc.migrate_managed(addr, Memory::Host);
            d.alloc.managed_memory_at(addr) == Some(Memory::Host)
        }
    }
}
