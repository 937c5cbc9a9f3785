//! Device allocator over the gasan-uvm pool.
//!
//! * Small allocations (≤ [`SMALL_MAX`]) are bump-allocated from 2 MiB slabs: each user block starts
//!   256-byte aligned and is followed by a poisoned redzone of max(L·size/16, B) bytes; the first block
//!   of a slab has a B-byte left redzone, later blocks are guarded on the left by their neighbour's
//!   right redzone.
//! * Large allocations get their own chunks with an unmapped gap at least as large on both sides,
//!   so each pool block holds at most one of them: while live, its blocks' extent-table entries
//!   name its exact user bytes (checked PTX range-tests hoisted loops against them). Small
//!   allocations share blocks and never get entries (zero: the loop stays checked).
//! * Virtual addresses are never reused, so the quarantine of freed address ranges is unbounded:
//!   freed blocks stay poisoned (shadow 0) and described as freed forever. When a full slab has no
//!   live block left it is retired (physical memory unmapped, VA never handed out again, shadow
//!   reads 0: checked accesses report use-after-free, unchecked ones fault and are attributed).
//!   Large blocks are retired when freed.
//! * Physical memory is held after a free only for stream-ordered frees (`cuMemFreeAsync`), whose
//!   unmapping must wait for the stream: those wait in a FIFO bounded by `quarantine_size_mb`.
//!   Holding memory of synchronous frees would detect nothing more, only use memory.

use crate::options::Options;
use gasan_instrument::shadow::Scale;
use gasan_uvm::{Pool, Stream, UvmError};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

/// Largest small allocation (bigger ones get their own chunks and guard gaps).
pub const SMALL_MAX: u64 = 256 << 10;
/// cudaMalloc's alignment guarantee, and the granule allocations start on.
pub const ALIGN: u64 = 256;

/// A captured host call stack (return addresses, innermost first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStack(pub Vec<usize>);

impl HostStack {
    /// Captures up to `depth` frames of the caller, skipping gasan's own frames.
    pub fn capture(depth: u32) -> Self {
        let mut v = Vec::with_capacity(depth as usize);
        let mut skip = 3;
        backtrace::trace(|f| {
            if skip > 0 {
                skip -= 1;
                return true;
            }
            v.push(f.ip() as usize);
            v.len() < depth as usize
        });
        HostStack(v)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocInfo {
    pub id: u64,
    pub start: u64,
    pub size: u64,
    /// End of the block's redzone (exclusive).
    pub region_end: u64,
    pub large: bool,
    pub live: bool,
    pub alloc_stack: HostStack,
    pub free_stack: Option<HostStack>,
}

/// Where an address is relative to the allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrKind {
    /// `distance` bytes past the end of the block.
    OverflowRight { distance: u64 },
    /// `distance` bytes before the start of the block.
    OverflowLeft { distance: u64 },
    UseAfterFree { offset: u64 },
    /// Inside a live block's accessible bytes.
    InBounds { offset: u64 },
    /// In the pool but near no allocation.
    Wild,
    /// Outside the pool: memory gasan does not manage.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrDescription {
    pub addr: u64,
    pub kind: AddrKind,
    pub alloc: Option<AllocInfo>,
    /// Shadow bytes around the address: (pool address of the first granule, bytes); empty when unreadable.
    pub shadow: Option<(u64, Vec<u8>)>,
    pub scale: Scale,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    #[error("out of device memory")]
    OutOfMemory,
    #[error("pool: {0}")]
    Pool(#[from] UvmError),
}

/// A failed free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreeError {
    DoubleFree { ptr: u64, info: AllocInfo },
    /// Inside a block but not its start.
    NotBase { ptr: u64, info: AllocInfo },
    /// Not an allocation gasan knows.
    Unknown { ptr: u64, in_pool: bool },
}

/// A range check of a host API call (memcpy/memset) that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeError {
    pub addr: u64,
    pub len: u64,
    /// First bad byte.
    pub bad: u64,
    pub desc: AddrDescription,
}

struct Slab {
    refs: u64,
    full: bool,
}

struct Inner {
    pool: Pool,
    small_cursor: u64,
    small_end: u64,
    slab: Option<u64>,
    large_cursor: u64,
    allocs: BTreeMap<u64, AllocInfo>,
    slabs: HashMap<u64, Slab>,
    quarantine: VecDeque<u64>,
    quarantine_bytes: u64,
    next_id: u64,
}

pub struct Allocator {
    inner: Mutex<Inner>,
    scale: Scale,
    redzone_l: u64,
    redzone_b: u64,
    quarantine_max: u64,
    context_depth: u32,
    gran: u64,
    pool_base: u64,
    pool_size: u64,
    shadow_base: u64,
    extent_table: (u64, u32),
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Allocator {
    pub fn new(pool: Pool, opts: &Options) -> Self {
        let gran = pool.granularity();
        let (base, size, shadow_base) = (pool.base(), pool.size(), pool.shadow_base());
        let extent_table = pool.extent_table();
        let half = base + size / 2;
        Allocator {
            inner: Mutex::new(Inner {
                pool,
                small_cursor: base,
                small_end: base,
                slab: None,
                large_cursor: half,
                allocs: BTreeMap::new(),
                slabs: HashMap::new(),
                quarantine: VecDeque::new(),
                quarantine_bytes: 0,
                next_id: 1,
            }),
            scale: opts.shadow_scale,
            redzone_l: opts.redzone,
            redzone_b: opts.min_redzone.max(ALIGN),
            quarantine_max: opts.quarantine_size_mb << 20,
            context_depth: opts.malloc_context_size,
            gran,
            pool_base: base,
            pool_size: size,
            shadow_base,
            extent_table,
        }
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// (pool base, pool size, shadow base) for module control blocks.
    pub fn control_fields(&self) -> (u64, u64, u64) {
        (self.pool_base, self.pool_size, self.shadow_base)
    }

    /// (extent table address, log2 of the block one entry describes) for module control blocks.
    pub fn extent_fields(&self) -> (u64, u32) {
        self.extent_table
    }

    pub fn owns(&self, addr: u64) -> bool {
        addr >= self.pool_base && addr - self.pool_base < self.pool_size
    }

    /// Redzone after a block of `size` bytes: max(L·size/16, B), granule-rounded.
    pub fn redzone(&self, size: u64) -> u64 {
        round_up((size * self.redzone_l / 16).max(self.redzone_b), ALIGN)
    }

    pub fn alloc(&self, size: u64, stream: Option<Stream>) -> Result<u64, AllocError> {
        let stack = HostStack::capture(self.context_depth);
        let mut g = self.inner.lock().unwrap();
        let size_enc = self.scale.encodable_size(size.max(1));
        let (start, region_end, large) = if size_enc <= SMALL_MAX {
            let rz = self.redzone(size_enc);
            let need = round_up(size_enc, ALIGN) + rz;
            if g.slab.is_none() || g.small_cursor + need > g.small_end {
                self.new_slab(&mut g)?;
            }
            let start = g.small_cursor;
            g.small_cursor += need;
            let slab = g.slab.expect("slab");
            g.slabs.get_mut(&slab).expect("slab").refs += 1;
            (start, start + need, false)
        } else {
            let len = round_up(size_enc, self.gran);
            let gap = len.max(self.gran);
            let start = g.large_cursor + gap;
            if start + len + gap > self.pool_base + self.pool_size {
                return Err(AllocError::OutOfMemory);
            }
            if let Err(e) = g.pool.commit(start, len) {
                drop(g);
                // Out of physical memory: release quarantined memory and try once more.
                self.drain_quarantine();
                let mut g = self.inner.lock().unwrap();
                g.pool.commit(start, len).map_err(|_| map_oom(e))?;
                return self.finish_large(g, start, len, size, stack, stream);
            }
            return self.finish_large(g, start, len, size, stack, stream);
        };
        self.poison_alloc(&g.pool, start, size_enc, stream)?;
        let id = g.next_id;
        g.next_id += 1;
        g.allocs.insert(start, AllocInfo { id, start, size, region_end, large, live: true, alloc_stack: stack, free_stack: None });
        Ok(start)
    }

    fn finish_large(
        &self,
        mut g: std::sync::MutexGuard<'_, Inner>,
        start: u64,
        len: u64,
        size: u64,
        stack: HostStack,
        stream: Option<Stream>,
    ) -> Result<u64, AllocError> {
        g.large_cursor = start + len;
        self.poison_alloc(&g.pool, start, self.scale.encodable_size(size.max(1)), stream)?;
        // After the shadow, on the same stream: an entry may only claim bytes the shadow allows. A
        // failure leaves the entries zero, which only keeps the block's loops checked.
        let _ = g.pool.set_extent(start, start + size, stream.unwrap_or(Stream::SYNC));
        let id = g.next_id;
        g.next_id += 1;
        g.allocs.insert(start, AllocInfo { id, start, size, region_end: start + len, large: true, live: true, alloc_stack: stack, free_stack: None });
        Ok(start)
    }

    fn new_slab(&self, g: &mut Inner) -> Result<(), AllocError> {
        if let Some(old) = g.slab.take() {
            let s = g.slabs.get_mut(&old).expect("slab");
            s.full = true;
            if s.refs == 0 {
                g.slabs.remove(&old);
                g.pool.retire(old, self.gran)?;
            }
        }
        let va = round_up(g.small_end.max(g.small_cursor), self.gran);
        if va + self.gran > self.pool_base + self.pool_size / 2 {
            return Err(AllocError::OutOfMemory);
        }
        if let Err(e) = g.pool.commit(va, self.gran) {
            return Err(map_oom(e));
        }
        g.slabs.insert(va, Slab { refs: 0, full: false });
        g.slab = Some(va);
        // Left redzone of the slab's first block.
        g.small_cursor = va + self.redzone_b;
        g.small_end = va + self.gran;
        Ok(())
    }

    /// Makes `[start, start+size)` accessible (the redzone after it stays 0 from commit/free).
    fn poison_alloc(&self, pool: &Pool, start: u64, size: u64, stream: Option<Stream>) -> Result<(), AllocError> {
        let s = stream.unwrap_or(Stream::SYNC);
        let g = self.scale.granule();
        let full = size / g;
        let rest = size % g;
        if full > 0 {
            pool.fill_shadow(start, full, self.scale.encode(g), s)?;
        }
        if rest > 0 {
            pool.write_shadow(start + full * g, &[self.scale.encode(rest)], s)?;
        }
        Ok(())
    }

    pub fn free(&self, ptr: u64, stream: Option<Stream>) -> Result<(), FreeError> {
        let stack = HostStack::capture(self.context_depth);
        let mut g = self.inner.lock().unwrap();
        let Some(info) = g.allocs.get(&ptr).cloned() else {
            let containing = g.allocs.range(..=ptr).next_back().filter(|(_, a)| ptr < a.start + a.size.max(1)).map(|(_, a)| a.clone());
            return Err(match containing {
                Some(info) => FreeError::NotBase { ptr, info },
                None => FreeError::Unknown { ptr, in_pool: self.owns(ptr) },
            });
        };
        if !info.live {
            return Err(FreeError::DoubleFree { ptr, info });
        }
        let s = stream.unwrap_or(Stream::SYNC);
        if info.large {
            // Before the shadow is zeroed and the chunks unmapped, on the same stream: no entry may
            // outlive the allocation.
            let _ = g.pool.clear_extent(ptr, ptr + info.size, s);
        }
        let granules = self.scale.shadow_len(self.scale.encodable_size(info.size.max(1)));
        let _ = g.pool.fill_shadow(ptr, granules, 0, s);
        let a = g.allocs.get_mut(&ptr).expect("present");
        a.live = false;
        a.free_stack = Some(stack);
        match (info.large, stream.is_some()) {
            (true, false) => {
                let _ = g.pool.retire(ptr, info.region_end - ptr);
            }
            (false, false) => self.release_small(&mut g, ptr),
            (_, true) => {
                // Stream-ordered free: the unmap must wait for the stream; defer to the quarantine.
                g.quarantine.push_back(ptr);
                g.quarantine_bytes += info.region_end - ptr;
                self.trim_quarantine(&mut g, self.quarantine_max);
            }
        }
        Ok(())
    }

    /// Drops a freed small block's hold on its slab, retiring the slab when it was the last.
    fn release_small(&self, g: &mut Inner, ptr: u64) {
        let slab = ptr & !(self.gran - 1);
        if let Some(s) = g.slabs.get_mut(&slab) {
            s.refs -= 1;
            if s.refs == 0 && s.full {
                g.slabs.remove(&slab);
                let _ = g.pool.retire(slab, self.gran);
            }
        }
    }

    /// Bytes of pool memory currently mapped (slabs, large blocks, held stream-ordered frees).
    pub fn mapped_bytes(&self) -> u64 {
        self.inner.lock().unwrap().pool.counters().committed_bytes
    }

    fn trim_quarantine(&self, g: &mut Inner, max: u64) {
        while g.quarantine_bytes > max || (max == 0 && !g.quarantine.is_empty()) {
            let Some(p) = g.quarantine.pop_front() else { break };
            let a = g.allocs[&p].clone();
            g.quarantine_bytes -= a.region_end - p;
            if a.large {
                let _ = g.pool.retire(p, a.region_end - p);
            } else {
                self.release_small(g, p);
            }
        }
    }

    /// Releases everything in quarantine (before reporting out-of-memory).
    pub fn drain_quarantine(&self) {
        let mut g = self.inner.lock().unwrap();
        self.trim_quarantine(&mut g, 0);
    }

    /// The live block containing `addr`: (start, size), for `cuMemGetAddressRange`.
    pub fn allocation_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let g = self.inner.lock().unwrap();
        g.allocs.range(..=addr).next_back().filter(|(_, a)| a.live && addr < a.start + a.size.max(1)).map(|(_, a)| (a.start, a.size))
    }

    pub fn live_allocations(&self) -> Vec<AllocInfo> {
        self.inner.lock().unwrap().allocs.values().filter(|a| a.live).cloned().collect()
    }

    /// Classifies `addr` against the allocations.
    pub fn describe(&self, addr: u64) -> AddrDescription {
        let g = self.inner.lock().unwrap();
        // An alias address (GPU-only tagged VA with the patched module) describes its pool address.
        let addr = g.pool.canonical(addr);
        let shadow = self.shadow_around(&g.pool, addr);
        let mut d = AddrDescription { addr, kind: AddrKind::Unknown, alloc: None, shadow, scale: self.scale };
        if !self.owns(addr) {
            return d;
        }
        let prev = g.allocs.range(..=addr).next_back().map(|(_, a)| a);
        let next = g.allocs.range(addr + 1..).next().map(|(_, a)| a);
        if let Some(p) = prev {
            if addr < p.start + p.size.max(1) {
                d.kind = if p.live { AddrKind::InBounds { offset: addr - p.start } } else { AddrKind::UseAfterFree { offset: addr - p.start } };
                d.alloc = Some(p.clone());
                return d;
            }
        }
        let right = prev.map(|p| (addr - (p.start + p.size), p));
        let left = next.map(|n| (n.start - addr, n));
        let pick_right = match (right, left) {
            // Between two blocks: blame the nearer one (ASan's rule).
            (Some((dr, _)), Some((dl, _))) => dr <= dl,
            (Some(_), None) => true,
            _ => false,
        };
        if pick_right {
            let (dist, p) = right.expect("right");
            d.kind = AddrKind::OverflowRight { distance: dist };
            d.alloc = Some(p.clone());
        } else if let Some((dist, n)) = left {
            d.kind = AddrKind::OverflowLeft { distance: dist };
            d.alloc = Some(n.clone());
        } else {
            d.kind = AddrKind::Wild;
        }
        d
    }

    fn shadow_around(&self, pool: &Pool, addr: u64) -> Option<(u64, Vec<u8>)> {
        if !self.owns(addr) {
            return None;
        }
        let gsz = self.scale.granule();
        let row = 16 * gsz;
        let first = (addr & !(row - 1)).saturating_sub(2 * row).max(self.pool_base);
        let mut out = vec![0u8; 80];
        pool.read_shadow(first, &mut out).ok()?;
        Some((first, out))
    }

    /// Is `[addr, addr+len)` inside the accessible bytes of one live allocation?
    pub fn check_range(&self, addr: u64, len: u64) -> Result<(), RangeError> {
        if len == 0 || !self.owns(addr) {
            return Ok(());
        }
        let bad = {
            let g = self.inner.lock().unwrap();
            match g.allocs.range(..=addr).next_back().map(|(_, a)| a) {
                Some(a) if a.live && addr < a.start + a.size => {
                    let end = a.start + a.size;
                    if addr + len <= end { None } else { Some(end) }
                }
                _ => Some(addr),
            }
        };
        match bad {
            None => Ok(()),
            Some(b) => Err(RangeError { addr, len, bad: b, desc: self.describe(b) }),
        }
    }
}

fn map_oom(e: UvmError) -> AllocError {
    match e {
        UvmError::Cuda { code: 2, .. } => AllocError::OutOfMemory,
        UvmError::NoVa => AllocError::OutOfMemory,
        e => AllocError::Pool(e),
    }
}
