//! A backend whose driver-level calls are counted by kind: what `gasan-uvm bench-blocks` prints
//! per block and what the runtime's churn tests assert (the driver's cost is per handle created,
//! mapped, given access and unmapped, so call counts are the measure that carries over from the
//! host backend to the GPU).

use crate::backend::{Backend, ChunkHandle, Prot, Stream};
use crate::UvmError;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The kinds of call counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendCall {
    /// A physical handle created (`cuMemCreate`), one chunk long or wide.
    Create,
    Release,
    /// A mapping made, with its access set (`cuMemMap` + `cuMemSetAccess` on the CUDA VMM): one
    /// per chunk of a run mapped chunk by chunk, one for a wide chunk.
    Map,
    Unmap,
    /// Access changed on mappings already made (`cuMemSetAccess`).
    Access,
    /// A device-to-device copy (a wide run split).
    Copy,
}

impl BackendCall {
    pub const ALL: [BackendCall; 6] = [Self::Create, Self::Release, Self::Map, Self::Unmap, Self::Access, Self::Copy];
}

/// Counts of each [`BackendCall`], shared between a [`CountedBackend`] and whoever reads them.
#[derive(Default, Debug)]
pub struct CallCounts([AtomicU64; BackendCall::ALL.len()]);

impl CallCounts {
    pub fn get(&self, call: BackendCall) -> u64 {
        self.0[call as usize].load(Ordering::Relaxed)
    }
    /// Every count, in [`BackendCall::ALL`]'s order.
    pub fn snapshot(&self) -> [u64; BackendCall::ALL.len()] {
        BackendCall::ALL.map(|c| self.get(c))
    }
    fn add(&self, call: BackendCall, n: u64) {
        self.0[call as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// `inner` with its calls counted in `counts`; every call is passed through unchanged.
pub struct CountedBackend {
    inner: Box<dyn Backend>,
    counts: Arc<CallCounts>,
}

impl CountedBackend {
    pub fn new(inner: Box<dyn Backend>) -> (Self, Arc<CallCounts>) {
        let counts = Arc::new(CallCounts::default());
        (CountedBackend { inner, counts: counts.clone() }, counts)
    }
    fn count(&self, call: BackendCall) {
        self.counts.add(call, 1);
    }
}

impl Backend for CountedBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }
    fn guard_granularity(&self) -> u64 {
        self.inner.guard_granularity()
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        self.inner.reserve(size, hint)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        self.inner.free_va(va, size)
    }
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.count(BackendCall::Create);
        self.inner.create_chunk()
    }
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.count(BackendCall::Create);
        self.inner.create_host_chunk()
    }
    fn create_wide_chunk(&self, slots: u64) -> Result<ChunkHandle, UvmError> {
        self.count(BackendCall::Create);
        self.inner.create_wide_chunk(slots)
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        self.count(BackendCall::Release);
        self.inner.release_chunk(h)
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.count(BackendCall::Map);
        self.inner.map(va, h, prot)
    }
    fn map_host(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.count(BackendCall::Map);
        self.inner.map_host(va, h, prot)
    }
    fn map_run(&self, va: u64, count: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.counts.add(BackendCall::Map, count);
        self.inner.map_run(va, count, h, prot)
    }
    fn map_wide(&self, va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError> {
        self.count(BackendCall::Map);
        self.inner.map_wide(va, h, slots, prot)
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.count(BackendCall::Unmap);
        self.inner.unmap(va, len)
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        self.count(BackendCall::Access);
        self.inner.protect(va, len, prot)
    }
    fn write(&self, va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError> {
        self.inner.write(va, data, stream)
    }
    fn fill(&self, va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError> {
        self.inner.fill(va, len, byte, stream)
    }
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        self.inner.read(va, out)
    }
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), UvmError> {
        self.count(BackendCall::Copy);
        self.inner.copy(dst, src, len)
    }
    fn wait_writes(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.inner.wait_writes(va, len)
    }
    fn device(&self) -> i32 {
        self.inner.device()
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        self.count(BackendCall::Access);
        self.inner.set_peer_access(va, len, peer, prot)
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        self.inner.access(va, device)
    }
    fn export_chunk(&self, h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        self.inner.export_chunk(h)
    }
    fn import_chunk(&self, fd: OwnedFd) -> Result<ChunkHandle, UvmError> {
        self.inner.import_chunk(fd)
    }
}
