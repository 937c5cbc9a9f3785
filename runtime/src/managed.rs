//! Where managed blocks live. A managed allocation is pinned host memory in the pool, which the
//! CPU and kernels share at one address (and kernels' accesses are checked), but which kernels
//! read across the bus. A prefetch to the GPU is the program saying the GPU works on the block
//! next: it moves to device memory (same address, same shadow). The CPU cannot reach device memory,
//! so its next access faults; gasan's fault handler (signals.rs) asks [`move_back`], which moves
//! the block back to host memory, and the access runs again, which is what the driver's own managed memory does with its page
//! faults, at block rather than page granularity. A prefetch to the CPU moves it back at once.

use crate::driver::{CuResult, CUDA_SUCCESS};
use crate::state::state;
use gasan_uvm::Memory;

/// A prefetch of `[ptr, ptr+len)` to the GPU (`to_device`) or the CPU: the managed pool block
/// holding the range moves there. `None`: not a managed pool block (the driver answers).
///
/// In a process with several GPUs a managed block stays in host memory: moved to device memory
/// it would be its owner GPU's alone (the other GPUs reach a pool's host blocks, not its device
/// chunks, unless the program enabled peer access), while a kernel on any GPU may use it next.
pub fn prefetch(ptr: u64, len: u64, to_device: bool) -> Option<CuResult> {
    let d = state().runtime_owning(ptr)?;
    let block = d.alloc.live_block(ptr)?;
    block.managed_range(ptr, len.max(1))?;
    let to = if to_device && !d.multi_gpu { Memory::Device } else { Memory::Host };
    if block.memory == to {
        return Some(CUDA_SUCCESS);
    }
    // The block's bytes move under the program's feet: work queued on any stream that uses it
    // must be done first (prefetches are stream-ordered; this one waits for all streams).
    if let Err(crate::driver::DriverError(r)) = crate::driver::result::ctx_synchronize() {
        return Some(r);
    }
    if to_device {
        crate::signals::install_fault_handler(move_back);
    }
    // A block that cannot move stays where it was: still correct, only slower.
    let _ = d.alloc.migrate_managed(ptr, to);
    Some(CUDA_SUCCESS)
}

/// Whether `addr` is in a managed block that is in host memory now, moved back here if it was on
/// the device, so that the access can run again. Several host threads may fault on one block at
/// once: the first moves it (the allocator's lock orders them), the others find it back already.
/// The faulting thread was running the program's own code (gasan never touches managed memory on
/// the CPU), so it holds none of gasan's locks or the driver's.
fn move_back(addr: u64) -> bool {
    let Some(d) = state().runtime_owning(addr) else { return false };
    match d.alloc.managed_memory_at(addr) {
        None => false,
        Some(Memory::Host) => true,
        Some(Memory::Device) => {
            // Kernels may still be writing the block.
            let _ = crate::driver::result::ctx_synchronize();
            let _ = d.alloc.migrate_managed(addr, Memory::Host);
            d.alloc.managed_memory_at(addr) == Some(Memory::Host)
        }
    }
}
