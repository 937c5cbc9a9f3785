//! The mapping interface every backend implements.

use crate::UvmError;
use std::os::fd::OwnedFd;

/// Access rights of a mapped range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    ReadWrite,
    ReadOnly,
    None,
}

/// A CUDA stream (`CUstream`) to order memory operations on. `Stream::SYNC`: complete when the call
/// returns, so ordered before anything the program issues next on any of its streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(pub usize);
impl Stream {
    pub const SYNC: Stream = Stream(usize::MAX);
}

/// Handle of one physical chunk (backend-specific).
pub type ChunkHandle = u64;

/// Where a chunk's physical memory lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Memory {
    /// GPU memory: what `cuMemAlloc` gives.
    #[default]
    Device,
    /// Pinned host memory that both the CPU and the GPU read and write at the same address: how
    /// the pool stands in for managed memory (`cuMemAllocManaged`), which CUDA cannot map at an
    /// address of the caller's choosing, so that kernels' accesses to it are checked like any
    /// other pool access.
    Host,
}

/// Reserve / map / protect primitives plus memory access for shadow maintenance.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// Mapping granularity (chunk size) in bytes.
    fn granularity(&self) -> u64;
    /// Finest granularity `protect` accepts (the chunk size unless the backend can do better).
    fn guard_granularity(&self) -> u64 {
        self.granularity()
    }
    /// Reserves `size` bytes of VA, at `hint` if possible (0: anywhere). Returns the address.
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError>;
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError>;
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError>;
    /// A chunk of [`Memory::Host`] memory: once mapped, the CPU as well as the GPU may access it.
    /// Backends without such memory say so.
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        Err(UvmError::Unavailable(format!("{} backend has no host-memory chunks", self.name())))
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError>;
    /// Maps one chunk at `va` (granularity-aligned, inside a reservation), then sets `prot`.
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError>;
    /// [`Backend::map`] of a [`Backend::create_host_chunk`] chunk, with the CPU given the same
    /// rights at the same address. Backends whose mappings the CPU reaches anyway need no more.
    fn map_host(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.map(va, h, prot)
    }
    /// Maps chunk `h` at each of `count` consecutive chunk-sized slots from `va` (the zero chunk
    /// fanned out over the shadow), then sets `prot` over the whole run. Backends with a per-call
    /// cost batch the protection (one call instead of `count`: process start-up pays for this).
    fn map_run(&self, va: u64, count: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        for i in 0..count {
            self.map(va + i * self.granularity(), h, prot)?;
        }
        Ok(())
    }
    /// Creates one chunk `slots` chunk-sizes long, for fanning the zero chunk out with fewer
    /// mappings (each mapping is a driver call at process start). Backends without it say so.
    fn create_wide_chunk(&self, _slots: u64) -> Result<ChunkHandle, UvmError> {
        Err(UvmError::Unavailable(format!("{} backend has no wide chunks", self.name())))
    }
    /// Maps a chunk from [`Backend::create_wide_chunk`] (`slots` long) whole at `va`, then sets
    /// `prot`. It can only be unmapped whole.
    fn map_wide(&self, _va: u64, _h: ChunkHandle, _slots: u64, _prot: Prot) -> Result<(), UvmError> {
        Err(UvmError::Unavailable(format!("{} backend has no wide chunks", self.name())))
    }
    /// Unmaps `[va, va+len)`; the VA stays reserved.
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError>;
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError>;
    fn write(&self, va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError>;
    fn fill(&self, va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError>;
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError>;
    /// Copies `len` bytes from mapped `src` to mapped `dst` (both pool or scratch VA), complete
    /// when the call returns. Backends that cannot say so.
    fn copy(&self, _dst: u64, _src: u64, _len: u64) -> Result<(), UvmError> {
        Err(UvmError::Unavailable(format!("{} backend cannot copy", self.name())))
    }
    /// Waits until every `write`/`fill` issued so far that touches `[va, va+len)` has completed.
    /// Mapping changes call it first: device writes are queued (a memset returns before it runs,
    /// later still when other processes share the GPU), and a queued write that lands on a page
    /// just unmapped or made read-only faults, killing the whole context. Backends whose writes
    /// complete before returning need nothing.
    fn wait_writes(&self, _va: u64, _len: u64) -> Result<(), UvmError> {
        Ok(())
    }
    /// The device this backend's chunks live on and its mappings are made for (backends that
    /// simulate one device: 0).
    fn device(&self) -> i32 {
        0
    }
    /// Sets device `peer`'s rights over the mapped range `[va, va+len)`: `ReadWrite` or
    /// `ReadOnly` grants, `None` revokes. All of the range must be mapped, and a mapping made
    /// later starts with no peer's access (the CUDA VMM's rule for `cuMemSetAccess`: peer access
    /// enabled on a context does not cover VMM mappings), so the pool sets it again for every
    /// mapping it makes.
    fn set_peer_access(&self, _va: u64, _len: u64, _peer: i32, _prot: Prot) -> Result<(), UvmError> {
        Err(UvmError::Unavailable(format!("{} backend has no peer devices", self.name())))
    }
    /// The rights device `device` (this backend's own or a peer) has at mapped address `va`.
    fn access(&self, _va: u64, _device: i32) -> Result<Prot, UvmError> {
        Err(UvmError::Unavailable(format!("{} backend cannot report access rights", self.name())))
    }
    /// A file descriptor from which another process can import chunk `h` ([`Backend::import_chunk`]).
    fn export_chunk(&self, _h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        Err(UvmError::Unavailable(format!("{} backend cannot export chunks", self.name())))
    }
    /// A chunk handle for memory another process exported with [`Backend::export_chunk`], mapped
    /// like this backend's own chunks. [`Backend::release_chunk`] drops this process's reference;
    /// the memory lives while any process holds one.
    fn import_chunk(&self, _fd: OwnedFd) -> Result<ChunkHandle, UvmError> {
        Err(UvmError::Unavailable(format!("{} backend cannot import chunks", self.name())))
    }
}
