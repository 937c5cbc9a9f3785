//! Device allocator over the gasan-uvm pool.
//!
//! * Small allocations (≤ [`SMALL_MAX`]) are bump-allocated from 2 MiB slabs: each user block starts
//!   256-byte aligned and is followed by a poisoned redzone of max(L·size/16, B) bytes; the first block
//!   of a slab has a B-byte left redzone, later blocks are guarded on the left by their neighbour's
//!   right redzone.
//! * Large allocations get their own chunks with an unmapped gap at least as large on both sides
//!   (between two large blocks: the larger of their sizes), so each pool block holds at most one of
//!   them: while live, its blocks' extent-table entries
//!   name its exact user bytes (checked PTX range-tests hoisted loops against them). Small
//!   allocations share blocks and never get entries (zero: the loop stays checked).
//! * Pointer tags (`tags` > 1): the pool's windows map the same memory; a block's pointer is its
//!   canonical address seen through its tag's window, and only that window's shadow (and
//!   mapping, for large blocks) has it. Tags rotate so that neighbours differ. Large-block VA is
//!   swept again once used up: a canonical range serves each tag at most once, so no *pointer*
//!   is ever handed out twice and a stale one still finds its freed block.
//! * Pointers are never reused, so the quarantine of freed address ranges is unbounded:
//!   freed blocks stay poisoned (shadow 0) and described as freed forever. When a full slab has no
//!   live block left it is retired (physical memory unmapped, VA never handed out again, shadow
//!   reads 0: checked accesses report use-after-free, unchecked ones fault and are attributed).
//!   Large blocks are retired when freed (or when they leave the quarantine): the books at once,
//!   by the freeing thread, the unmapping by a thread of gasan's own (`unmap_thread`, fed through
//!   a [`Handoff`] it never needs the allocator's lock for; [`Allocator::settle_unmaps`] waits for
//!   it), so the program's thread does not wait for the driver's unmaps.
//! * Physical memory is held after a free only for stream-ordered frees (`cuMemFreeAsync`), whose
//!   unmapping must wait for the stream: those wait in a FIFO bounded by `quarantine_size_mb`.
//!   Holding memory of synchronous frees would detect nothing more, only use memory.
//! * Many host threads allocate at once: every decision about where a block goes is made under the
//!   lock, by the same lock hold that commits its memory and moves the cursor, so cursors only move
//!   forward and no two threads get overlapping or unguarded VA. A retry after draining the
//!   quarantine (which drops the lock) starts over from the cursor as it is then.
//!
//! [`Allocator::check_invariants`] states all of this in one place, against the tables, the pool's
//! mappings, the shadow and the extent table.

use crate::options::Options;
use gasan_instrument::shadow::Scale;
use gasan_uvm::{Memory, Pool, Stream, UvmError};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

/// Largest small allocation (bigger ones get their own chunks and guard gaps).
pub const SMALL_MAX: u64 = 256 << 10;
/// cudaMalloc's alignment guarantee, and the granule allocations start on.
pub const ALIGN: u64 = 256;

use crate::call_times::{self, CallTimes};
pub use crate::described::{AddrDescription, AddrKind, AllocInfo, HostStack};

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
    DoubleFree {
        ptr: u64,
        info: AllocInfo,
    },
    /// Inside a block but not its start.
    NotBase {
        ptr: u64,
        info: AllocInfo,
    },
    /// Not an allocation gasan knows.
    Unknown {
        ptr: u64,
        in_pool: bool,
    },
    /// A live block freed by the other call ([`FreeCall`]): refused, nothing freed.
    WrongCall {
        ptr: u64,
        info: AllocInfo,
    },
}

/// What a new block is: its memory, and whether it is managed (may move).
#[derive(Clone, Copy)]
struct Kind {
    memory: Memory,
    managed: bool,
}

impl Kind {
    const DEVICE: Kind = Kind { memory: Memory::Device, managed: false };
}

/// A live block as [`Allocator::live_block`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    pub start: u64,
    pub size: u64,
    /// End of its region (redzone included).
    pub region_end: u64,
    pub managed: bool,
    pub memory: Memory,
}

impl LiveBlock {
    /// Pinned host memory (see [`AllocInfo::is_pinned_host`]).
    pub fn is_pinned_host(&self) -> bool {
        !self.managed && self.memory == Memory::Host
    }

    /// (start, size) when it is managed and its region holds all of `[addr, addr+len)`.
    pub fn managed_range(&self, addr: u64, len: u64) -> Option<(u64, u64)> {
        (self.managed && addr.checked_add(len)? <= self.region_end).then_some((self.start, self.size))
    }
}

/// The driver call a free came through: pinned host memory goes with `cuMemFreeHost`, every other
/// block with `cuMemFree*` (the driver refuses the other call, and so does [`Allocator::free_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeCall {
    Device,
    PinnedHost,
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
    /// Next free byte of the current slab (blocks below it were handed out).
    small_cursor: u64,
    /// End of the current slab (the highest slab VA handed out so far).
    small_end: u64,
    slab: Option<u64>,
    /// End of the highest large block handed out (the middle of the pool before the first).
    large_end: u64,
    /// Unmapped gap the block ending at `large_end` needs after it: its own length.
    large_tail_gap: u64,
    allocs: BTreeMap<u64, AllocInfo>,
    slabs: HashMap<u64, Slab>,
    quarantine: VecDeque<u64>,
    quarantine_bytes: u64,
    next_id: u64,
    /// Tag counters: small and large blocks rotate through the windows separately, so that each
    /// block's address neighbours (the previous and next block of its kind) have other tags.
    small_tags: u64,
    large_tags: u64,
    /// Regions reserved for the checked device heap (not allocations of the program).
    device_heaps: Vec<crate::device_heap::HeapRegion>,
    /// Blocks mapped from another process's export ([`Allocator::import_ipc`]), by block start:
    /// where their chunks are mapped (canonical address, bytes) and through which window.
    imports: HashMap<u64, Imported>,
    /// Freed large blocks whose free could not poison their shadow (a failed driver call): their
    /// retirement zeroes it.
    unpoisoned: std::collections::HashSet<u64>,
    /// The process whose unmap thread serves [`Handoff`] (0: none started; a forked child starts
    /// its own).
    unmap_thread_pid: u32,
}

/// Freed large blocks between the freeing thread and the unmap thread. The freeing thread settles
/// a block's books itself ([`Pool::retire_detached`], under the allocator's lock it holds anyway)
/// and queues the unmaps here; the unmap thread takes only this lock, never the allocator's, so a
/// program that allocates and frees in a loop (holding the allocator's lock most of the time)
/// cannot starve it. Lock order: the allocator's, then this one.
#[derive(Default)]
struct Handoff {
    /// Unmaps of freed large blocks whose books are settled, oldest first.
    queue: VecDeque<gasan_uvm::Detached>,
    /// Unmaps the thread took and has not finished.
    busy: usize,
    /// Chunks the thread unmapped, for the pool's cache at the allocator's next lock
    /// ([`Allocator::take_back_unmapped`]).
    returned: Vec<gasan_uvm::Unmapped>,
}

/// The [`Handoff`] with what the two sides wait on and test without its lock.
#[derive(Default)]
struct HandoffShared {
    state: Mutex<Handoff>,
    /// Wakes the thread for new unmaps, and whoever waits for them to finish.
    wake: Condvar,
    /// Set when [`Handoff::returned`] gained chunks: lets an allocation skip the lock otherwise.
    returned_any: std::sync::atomic::AtomicBool,
}

/// Most freed large blocks waiting in [`Handoff::queue`]: past it the freeing thread unmaps the
/// oldest itself. Each waiting block holds its physical memory, and a handle not back in the cache
/// makes the next block of its size create one (on an H100 a churn of 4 and 16 MiB blocks created
/// a handle per block when the queue had no bound and the thread fell behind).
const HANDOFF_MAX: usize = 4;

/// Where an imported block's chunks are mapped.
#[derive(Clone, Copy)]
struct Imported {
    home: u64,
    len: u64,
    tag: u64,
}

/// A live block's chunks offered to another process ([`Allocator::export_ipc`]): one file
/// descriptor per chunk, in address order, the block at `offset` in them.
#[derive(Debug)]
pub struct IpcExport {
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// The block's start (what the importer's pointer stands for).
    pub start: u64,
    pub offset: u64,
    pub size: u64,
    /// Bytes of one chunk.
    pub gran: u64,
}

pub struct Allocator {
    inner: Arc<Mutex<Inner>>,
    /// Freed large blocks for the unmap thread ([`Handoff`]).
    handoff: Arc<HandoffShared>,
    /// Freed large blocks are unmapped by a thread of gasan's own (`unmap_thread`), until
    /// [`Self::stop_unmap_thread`].
    unmap_thread: Arc<std::sync::atomic::AtomicBool>,
    /// Run first on the unmap thread (the runtime makes the device's context current there).
    unmap_thread_setup: Option<Arc<dyn Fn() + Send + Sync>>,
    scale: Scale,
    redzone_l: u64,
    redzone_b: u64,
    quarantine_max: u64,
    context_depth: u32,
    gran: u64,
    pool_base: u64,
    pool_size: u64,
    /// The pool's tag windows; window 0's canonical addresses are where blocks are placed.
    win: gasan_uvm::plan::Windows,
    /// What checked kernels are told (control blocks): this pool's own (base, size, shadow base)
    /// and extent table, or, for a pool in a multi-GPU span, the whole span's, so that a kernel on
    /// any GPU checks an access to any GPU's pool against that pool's shadow (the span's slots are
    /// contiguous, so one base indexes every device's shadow and extent table).
    control: (u64, u64, u64),
    control_extent: (u64, u32),
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// The unmap thread: unmaps the freed large blocks queued in [`Handoff`] (books already settled by
/// the freeing thread), all those queued at once, taking only the handoff's lock, and hands the
/// chunks back for the pool's cache. Ends once its allocator is gone. A failed unmap (its chunks
/// are never reused) turns it off: the freeing threads unmap from then on.
fn unmap_thread(handoff: std::sync::Weak<HandoffShared>, setup: Option<Arc<dyn Fn() + Send + Sync>>, on: Arc<std::sync::atomic::AtomicBool>) {
    static UNMAP: CallTimes = CallTimes::new("large block: unmap (gasan's thread)", call_times::Kind::Own);
    if let Some(s) = setup {
        s();
    }
    loop {
        let Some(handoff) = handoff.upgrade() else { return };
        let (lock, wake) = (&handoff.state, &handoff.wake);
        let mut h = lock.lock().unwrap();
        if h.queue.is_empty() {
            // Woken by a new retirement; the timeout lets the thread see its allocator dropped.
            drop(wake.wait_timeout(h, std::time::Duration::from_millis(200)).unwrap());
            continue;
        }
        let batch: Vec<gasan_uvm::Detached> = h.queue.drain(..).collect();
        h.busy += batch.len();
        drop(h);
        let mut failed = None;
        let mut back = Vec::with_capacity(batch.len());
        let n = batch.len();
        for d in batch {
            let (unmapped, r) = call_times::timed(&UNMAP, || d.unmap());
            back.push(unmapped);
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            // A driver shut down under the thread (the program's exit ran the driver's teardown
            // first) leaves nothing to retire: the process's memory goes with it, so no warning.
            if on.swap(false, std::sync::atomic::Ordering::Relaxed) && !e.driver_shut_down() {
                crate::log::log(0, || format!("WARNING: gasan's unmap thread could not retire a freed block ({e}); freed large blocks are unmapped by the freeing thread from now on"));
            }
        }
        let mut h = lock.lock().unwrap();
        h.returned.extend(back);
        handoff.returned_any.store(true, std::sync::atomic::Ordering::Release);
        h.busy = h.busy.saturating_sub(n);
        drop(h);
        wake.notify_all();
    }
}

/// What the allocator takes from the options (compiler-rt's `AllocatorOptions::SetFrom`), built in
/// one place from the process's [`Options`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorOptions {
    pub scale: Scale,
    /// Redzone scale L: a block's redzone is max(L·size/16, `min_redzone`).
    pub redzone_scale: u64,
    /// Minimum redzone B in bytes.
    pub min_redzone: u64,
    /// Bytes of stream-ordered frees kept mapped until released.
    pub quarantine_bytes: u64,
    /// Host stack frames recorded per allocation.
    pub stack_depth: u32,
    /// Freed large blocks are unmapped by a thread of gasan's own.
    pub unmap_thread: bool,
}

impl From<&Options> for AllocatorOptions {
    fn from(o: &Options) -> Self {
        AllocatorOptions {
            scale: o.shadow_scale,
            redzone_scale: o.redzone,
            min_redzone: o.min_redzone,
            quarantine_bytes: o.quarantine_size_mb << 20,
            stack_depth: o.malloc_context_size,
            unmap_thread: o.unmap_thread,
        }
    }
}

impl Allocator {
    pub fn new(pool: Pool, opts: impl Into<AllocatorOptions>) -> Self {
        let opts: AllocatorOptions = opts.into();
        let gran = pool.granularity();
        let (base, size, shadow_base) = (pool.base(), pool.size(), pool.shadow_base());
        let extent_table = pool.extent_table();
        let (control, control_extent) = match pool.span() {
            Some((span, _)) => {
                let l = span.layout();
                ((l.pool_base, l.pool_size * u64::from(l.devices), l.shadow_base), (l.extent_base, extent_table.1))
            }
            None => ((base, size, shadow_base), extent_table),
        };
        let win = pool.tag_windows();
        let half = base + win.size / 2;
        Allocator {
            handoff: Arc::default(),
            unmap_thread: Arc::new(opts.unmap_thread.into()),
            unmap_thread_setup: None,
            inner: Arc::new(Mutex::new(Inner {
                pool,
                small_cursor: base,
                small_end: base,
                slab: None,
                large_end: half,
                large_tail_gap: 0,
                allocs: BTreeMap::new(),
                slabs: HashMap::new(),
                quarantine: VecDeque::new(),
                quarantine_bytes: 0,
                next_id: 1,
                small_tags: 0,
                large_tags: 0,
                device_heaps: Vec::new(),
                imports: HashMap::new(),
                unpoisoned: Default::default(),
                unmap_thread_pid: 0,
            })),
            scale: opts.scale,
            redzone_l: opts.redzone_scale,
            redzone_b: opts.min_redzone.max(ALIGN),
            quarantine_max: opts.quarantine_bytes,
            context_depth: opts.stack_depth,
            gran,
            pool_base: base,
            pool_size: size,
            win,
            control,
            control_extent,
        }
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// (pool base, pool size, shadow base) for module control blocks: this pool's, or its
    /// multi-GPU span's (see `control`).
    pub fn control_fields(&self) -> (u64, u64, u64) {
        self.control
    }

    /// (extent table address, log2 of the block one entry describes) for module control blocks,
    /// as [`Self::control_fields`].
    pub fn extent_fields(&self) -> (u64, u32) {
        self.control_extent
    }

    /// The device this allocator's pool is on.
    pub fn device(&self) -> i32 {
        self.inner.lock().unwrap().pool.device()
    }

    /// Lets device `peer` read and write this pool's blocks (and read their shadow and extent
    /// table), now and in every mapping made later: what a context's peer access to this
    /// device's memory needs, since peer access does not cover VMM mappings.
    pub fn grant_peer_access(&self, peer: i32) -> Result<(), AllocError> {
        Ok(self.inner.lock().unwrap().pool.grant_peer_access(peer)?)
    }

    /// Takes back what [`Self::grant_peer_access`] gave `peer`.
    pub fn revoke_peer_access(&self, peer: i32) -> Result<(), AllocError> {
        Ok(self.inner.lock().unwrap().pool.revoke_peer_access(peer)?)
    }

    /// The devices granted access to this pool.
    pub fn peers(&self) -> Vec<i32> {
        self.inner.lock().unwrap().pool.peers().to_vec()
    }

    /// Lets device `reader` reach this pool's pinned and managed (host) blocks and read its shadow
    /// and extent table, now and in every mapping made later (`Pool::grant_host_access`): what its
    /// kernels need to use and check host memory this pool holds.
    pub fn grant_host_access(&self, reader: i32) -> Result<(), AllocError> {
        Ok(self.inner.lock().unwrap().pool.grant_host_access(reader)?)
    }

    /// The devices granted this pool's host memory.
    pub fn host_readers(&self) -> Vec<i32> {
        self.inner.lock().unwrap().pool.host_readers().to_vec()
    }

    /// Reads `out.len()` bytes at `va` as a checked kernel on `device` would: it needs read rights
    /// over the bytes and their shadow (`Pool::read_as`; `UvmError::NoAccess` names the first
    /// address it may not read).
    pub fn read_as(&self, device: i32, va: u64, out: &mut [u8]) -> Result<(), AllocError> {
        Ok(self.inner.lock().unwrap().pool.read_as(device, va, out)?)
    }

    pub fn owns(&self, addr: u64) -> bool {
        addr >= self.pool_base && addr - self.pool_base < self.pool_size
    }

    /// Redzone after a block of `size` bytes: max(L·size/16, B), granule-rounded.
    pub fn redzone(&self, size: u64) -> u64 {
        round_up((size * self.redzone_l / 16).max(self.redzone_b), ALIGN)
    }

    pub fn alloc(&self, size: u64, stream: Option<Stream>) -> Result<u64, AllocError> {
        self.alloc_in(size, stream, Memory::Device)
    }

    /// [`Self::alloc`] of memory `mem`. Host memory (pinned host allocations) is placed like a
    /// large block, on chunks of its own: a chunk holds memory of one kind.
    pub fn alloc_in(&self, size: u64, stream: Option<Stream>, mem: Memory) -> Result<u64, AllocError> {
        self.alloc_block(size, stream, Kind { memory: mem, managed: false })
    }

    /// A managed block ([`Self::alloc_in`] host memory that may move to the device and back:
    /// [`Self::migrate_managed`]).
    pub fn alloc_managed(&self, size: u64) -> Result<u64, AllocError> {
        self.alloc_block(size, None, Kind { memory: Memory::Host, managed: true })
    }

    fn alloc_block(&self, size: u64, stream: Option<Stream>, kind: Kind) -> Result<u64, AllocError> {
        let stack = HostStack::capture(self.context_depth);
        let size_enc = self.scale.encodable_size(size.max(1));
        let attempt = |g: &mut Inner| match kind.memory {
            Memory::Device => self.try_alloc(g, size, size_enc, &stack, stream),
            Memory::Host => self.alloc_large(g, size, size_enc, &stack, stream, kind),
        };
        let first = {
            let mut g = self.inner.lock().unwrap();
            self.take_back_unmapped(&mut g);
            attempt(&mut g)
        };
        match first {
            Err(AllocError::OutOfMemory | AllocError::Pool(_)) if self.quarantine_held() => {
                // Out of physical memory: release quarantined memory and try once more. Draining
                // takes the lock itself, and other threads may allocate meanwhile: the second try
                // places the block from the cursors as they are then.
                self.drain_quarantine();
                attempt(&mut self.inner.lock().unwrap())
            }
            r => r,
        }
    }

    fn quarantine_held(&self) -> bool {
        let g = self.inner.lock().unwrap();
        let h = self.handoff.state.lock().unwrap();
        !g.quarantine.is_empty() || !h.queue.is_empty() || h.busy > 0 || !h.returned.is_empty()
    }

    /// Puts the chunks the unmap thread has unmapped back in the pool's cache (before an
    /// allocation: the block just freed may be the one whose handle it needs).
    fn take_back_unmapped(&self, g: &mut Inner) {
        // Every allocation asks: the handoff's lock only when the thread has handed chunks back,
        // and a write to the flag's line only then (a load first: host threads allocating at
        // once would otherwise pass the line between them on every allocation).
        let flag = &self.handoff.returned_any;
        if !flag.load(std::sync::atomic::Ordering::Relaxed) || !flag.swap(false, std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let returned = std::mem::take(&mut self.handoff.state.lock().unwrap().returned);
        for u in returned {
            g.pool.take_back(u);
        }
    }

    /// Runs `setup` first on the unmap thread, when it starts (the runtime makes the device's
    /// context current there).
    pub fn with_unmap_thread_setup(mut self, setup: impl Fn() + Send + Sync + 'static) -> Self {
        self.unmap_thread_setup = Some(Arc::new(setup));
        self
    }

    /// Starts this process's unmap thread unless it runs; false when it cannot be started.
    fn unmap_thread_running(&self, g: &mut Inner) -> bool {
        let pid = std::process::id();
        if g.unmap_thread_pid == pid {
            return true;
        }
        // A forked child inherits the books, not the thread: what that thread had taken is
        // never unmapped here (its chunks stay out of the cache).
        self.handoff.state.lock().unwrap().busy = 0;
        let (handoff, setup, on) = (Arc::downgrade(&self.handoff), self.unmap_thread_setup.clone(), self.unmap_thread.clone());
        let started = std::thread::Builder::new().name("gasan-unmap".into()).spawn(move || unmap_thread(handoff, setup, on)).is_ok();
        if started {
            g.unmap_thread_pid = pid;
        }
        started
    }

    /// From now on the freeing thread unmaps freed large blocks itself, and what the unmap thread
    /// was given is done: at the process's exit, so that no unmap of gasan's own runs while the
    /// driver tears the process's contexts down.
    pub fn stop_unmap_thread(&self) {
        self.unmap_thread.store(false, std::sync::atomic::Ordering::Relaxed);
        self.settle_unmaps();
    }

    /// Waits until every freed large block handed to the unmap thread is unmapped, doing the
    /// ones it has not taken here (before out-of-memory, and for callers that count mappings).
    pub fn settle_unmaps(&self) {
        let mut g = self.inner.lock().unwrap();
        let (lock, wake) = (&self.handoff.state, &self.handoff.wake);
        let mut h = lock.lock().unwrap();
        loop {
            if let Some(d) = h.queue.pop_front() {
                // Unmapped here, without the handoff's lock (the thread may finish meanwhile).
                drop(h);
                let (back, _) = d.unmap();
                g.pool.take_back(back);
                h = lock.lock().unwrap();
            } else if h.busy > 0 {
                h = wake.wait(h).unwrap();
            } else {
                break;
            }
        }
        let returned = std::mem::take(&mut h.returned);
        drop(h);
        for u in returned {
            g.pool.take_back(u);
        }
    }

    /// One allocation attempt, placed, committed and recorded under one hold of the lock. A failure
    /// leaves nothing committed, accessible or recorded, and no cursor behind a block it handed out.
    fn try_alloc(&self, g: &mut Inner, size: u64, size_enc: u64, stack: &HostStack, stream: Option<Stream>) -> Result<u64, AllocError> {
        let need = round_up(size_enc, ALIGN) + self.redzone(size_enc);
        // A small block must fit a slab after its left redzone; one that does not (huge redzone
        // options, small chunks) is placed like a large one.
        if size_enc > SMALL_MAX || need > self.gran.saturating_sub(self.redzone_b) {
            return self.alloc_large(g, size, size_enc, stack, stream, Kind::DEVICE);
        }
        if g.slab.is_none() || g.small_cursor + need > g.small_end {
            self.new_slab(g)?;
        }
        let slab = g.slab.expect("a current slab");
        let tag = g.small_tags % self.win.count;
        let start = g.pool.tagged(g.small_cursor, tag);
        // The VA is used up even if poisoning fails below: it is never handed out again.
        g.small_cursor += need;
        if let Err(e) = self.poison_alloc(&g.pool, start, size_enc, stream) {
            // No byte of a block that was never handed out may stay accessible.
            let _ = g.pool.fill_shadow(start, self.scale.shadow_len(need), 0, stream.unwrap_or(Stream::SYNC));
            return Err(e);
        }
        g.slabs.get_mut(&slab).expect("current slab is in the table").refs += 1;
        // Counted only for a block handed out: the next one is then this one's neighbour.
        g.small_tags += 1;
        self.record(g, start, size, start + need, tag, false, Kind::DEVICE, stack);
        Ok(start)
    }

    fn alloc_large(&self, g: &mut Inner, size: u64, size_enc: u64, stack: &HostStack, stream: Option<Stream>, kind: Kind) -> Result<u64, AllocError> {
        let len = round_up(size_enc, self.gran);
        let (home, tag) = match self.place_large(g, len) {
            Some(p) => p,
            None if self.recycle_large(g) => self.place_large(g, len).ok_or(AllocError::OutOfMemory)?,
            None => return Err(AllocError::OutOfMemory),
        };
        // Mapped, with real shadow, through the block's own window only: through the others it
        // is unmapped and reads poisoned.
        static COMMIT: CallTimes = CallTimes::new("large block: map", call_times::Kind::Own);
        if let Err(e) = call_times::timed(&COMMIT, || g.pool.commit_tagged_in(home, len, 1 << tag, kind.memory)) {
            self.discard_failed_commit(g, home, len);
            return Err(map_oom(e));
        }
        g.large_tags = tag + 1;
        g.large_end = home + len;
        g.large_tail_gap = len;
        let start = g.pool.tagged(home, tag);
        if let Err(e) = self.poison_alloc(&g.pool, start, size_enc, stream) {
            // Retired for this window: shadow zeroed, memory released, this pointer never handed out.
            let _ = g.pool.retire_tagged(home, len, 1 << tag);
            return Err(e);
        }
        // After the shadow, on the same stream: an entry may only claim bytes the shadow allows. A
        // failure leaves the entries zero, which only keeps the block's loops checked.
        let _ = g.pool.set_extent(start, start + size, stream.unwrap_or(Stream::SYNC));
        self.record(g, start, size, start + len, tag, true, kind, stack);
        Ok(start)
    }

    /// Where a large block of `len` bytes goes (canonical address) and its tag, or `None` when the
    /// VA is used up. Tags rotate (the next after the previous block's), so that neighbours differ.
    ///
    /// Without tags, VA is never reused and a block has an unmapped gap at least its length on
    /// both sides. With tags, blocks of other tags are unmapped through this block's window, so
    /// they need no gap; and once the cursor reaches the end, the VA is swept again: a chunk is
    /// taken only if nothing is mapped there and it never held a block of this tag (a stale
    /// pointer into it, of that tag, still finds freed memory: no pointer is handed out twice),
    /// and neither neighbouring chunk holds a live block of this tag.
    /// On a swept range the next tag in turn may have been used already: the others are tried
    /// there before moving on.
    fn place_large(&self, g: &Inner, len: u64) -> Option<(u64, u64)> {
        let (half, end) = (self.pool_base + self.win.size / 2, self.pool_base + self.win.size);
        if self.win.count == 1 {
            let home = g.large_end + len.max(g.large_tail_gap);
            return home.checked_add(2 * len).filter(|&e| e <= end).map(|_| (home, 0));
        }
        let mut home = g.large_end;
        let mut wrapped = false;
        loop {
            if home.checked_add(len).is_none_or(|e| e > end) {
                if wrapped || half + len > end {
                    return None;
                }
                wrapped = true;
                home = half;
            }
            // Each tag's conflict, if any; then past the nearest one (each scan runs downwards, so
            // it finds a tag's last conflict).
            let mut skip = u64::MAX;
            for t in (0..self.win.count).map(|k| (g.large_tags + k) % self.win.count) {
                match self.large_conflict(g, home, len, t) {
                    None => return Some((home, t)),
                    Some(c) => skip = skip.min(c),
                }
            }
            home = skip + self.gran;
        }
    }

    /// The highest chunk that keeps a block of tag `tag` from `[home, home+len)`, if any (see
    /// [`Self::place_large`]); for a left neighbour, `home` itself.
    fn large_conflict(&self, g: &Inner, home: u64, len: u64, tag: u64) -> Option<u64> {
        let (half, end) = (self.pool_base + self.win.size / 2, self.pool_base + self.win.size);
        let bit = 1 << tag;
        let live_of_tag = |c: u64| g.pool.committed_windows(c).is_some_and(|m| m & bit != 0);
        if home + len < end && live_of_tag(home + len) {
            return Some(home + len);
        }
        if let Some(c) = (0..len / self.gran).rev().map(|i| home + i * self.gran).find(|&c| g.pool.committed_windows(c).is_some() || g.pool.retired_windows(c) & bit != 0) {
            return Some(c);
        }
        (home > half && live_of_tag(home - self.gran)).then_some(home)
    }

    /// With tags, when no large block fits any more: forgets the freed large blocks (their VA may
    /// now be handed out again, pointers included: ASan's bounded quarantine, here only once the
    /// pool is used up) rather than fail the program. Returns whether anything was released.
    fn recycle_large(&self, g: &mut Inner) -> bool {
        if self.win.count == 1 {
            return false;
        }
        let held: std::collections::HashSet<u64> = g.quarantine.iter().copied().collect();
        let forgotten: Vec<u64> = g.allocs.values().filter(|a| a.large && !a.live && !held.contains(&a.start)).map(|a| a.start).collect();
        let half = self.pool_base + self.win.size / 2;
        let released = g.pool.unretire(half, self.win.size / 2).unwrap_or(0);
        if released == 0 {
            return false;
        }
        for p in &forgotten {
            g.allocs.remove(p);
        }
        g.large_end = half;
        // Said always: it weakens what a later report can say.
        eprintln!("==gasan== the pool's large-block VA is used up; {} freed large blocks forgotten and their VA reused (a use after free of them may now go unreported)", forgotten.len());
        true
    }

    /// Retires a freed large block's chunks for its own window (the other windows may reuse them).
    fn retire_large(&self, g: &mut Inner, a: &AllocInfo) {
        static RETIRE: CallTimes = CallTimes::new("large block: unmap", call_times::Kind::Own);
        let (home, len, tags) = (self.home(a.start), a.region_end - a.start, 1 << a.tag);
        if g.unpoisoned.remove(&a.start) {
            let _ = call_times::timed(&RETIRE, || g.pool.retire_tagged(home, len, tags));
            return;
        }
        // Its free poisoned the block's bytes (fill_shadow in free_inner, logged on the freeing
        // stream); its redzone was never made accessible: the shadow is zero.
        if self.unmap_thread.load(std::sync::atomic::Ordering::Relaxed) && self.unmap_thread_running(g) {
            // The books now (a few map lookups, under the lock held anyway), the driver's unmaps
            // on the thread.
            let detached = match g.pool.retire_detached(home, len, tags) {
                Ok(d) => d,
                Err(_) => {
                    let _ = call_times::timed(&RETIRE, || g.pool.retire_tagged_zeroed(home, len, tags));
                    return;
                }
            };
            let (lock, wake) = (&self.handoff.state, &self.handoff.wake);
            let mut h = lock.lock().unwrap();
            h.queue.push_back(detached);
            let oldest = (h.queue.len() > HANDOFF_MAX).then(|| h.queue.pop_front()).flatten();
            drop(h);
            wake.notify_all();
            // The thread is behind: this thread unmaps the oldest block itself, so that the
            // blocks waiting (and their memory) stay bounded.
            if let Some(d) = oldest {
                let (back, _) = call_times::timed(&RETIRE, || d.unmap());
                g.pool.take_back(back);
            }
            return;
        }
        let _ = call_times::timed(&RETIRE, || g.pool.retire_tagged_zeroed(home, len, tags));
    }

    #[allow(clippy::too_many_arguments)]
    fn record(&self, g: &mut Inner, start: u64, size: u64, region_end: u64, tag: u64, large: bool, kind: Kind, stack: &HostStack) {
        let id = g.next_id;
        g.next_id += 1;
        g.allocs.insert(
            start,
            AllocInfo {
                id,
                start,
                size,
                region_end,
                tag,
                large,
                managed: kind.managed,
                memory: kind.memory,
                live: true,
                alloc_stack: stack.clone(),
                free_stack: None,
                heap_block: None,
                registered: false,
                rows: None,
            },
        );
    }

    /// The canonical (window 0) address of pool address `va`: where the allocator's tables and
    /// the pool's commitments name it.
    fn home(&self, va: u64) -> u64 {
        self.win.canonical(va)
    }

    /// The tag (window) of pool address `va`.
    fn tag_of(&self, va: u64) -> u64 {
        self.win.tag(va)
    }

    /// The block that `ptr` (tagged) names: the block at its canonical address, when its tag matches.
    fn block_named<'a>(&self, g: &'a Inner, ptr: u64) -> Option<&'a AllocInfo> {
        g.allocs.get(&ptr)
    }

    /// The pool rolls a failed commit back; should that rollback itself have failed, whatever is
    /// still mapped in `[va, va+len)` is retired and the cursor moved past it, so that the range is
    /// neither handed out nor committed again. Slab VA lies below the middle of the pool.
    fn discard_failed_commit(&self, g: &mut Inner, va: u64, len: u64) {
        let half_committed = (va..va + len).step_by(self.gran as usize).any(|c| g.pool.is_committed(c));
        if !half_committed {
            return;
        }
        let _ = g.pool.retire(va, len);
        if va < self.pool_base + self.win.size / 2 {
            g.small_end = g.small_end.max(va + len);
            g.small_cursor = g.small_cursor.max(va + len);
        } else {
            g.large_end = va + len;
            g.large_tail_gap = len;
        }
    }

    /// Makes a new slab current. The previous one is retired if it holds no block, and stays
    /// current if the new one cannot be committed.
    fn new_slab(&self, g: &mut Inner) -> Result<(), AllocError> {
        let va = round_up(g.small_end.max(g.small_cursor), self.gran);
        if va + self.gran > self.pool_base + self.win.size / 2 {
            return Err(AllocError::OutOfMemory);
        }
        // A slab's blocks take every tag in turn: real shadow in every window.
        if let Err(e) = g.pool.commit_tagged(va, self.gran, self.win.all()) {
            self.discard_failed_commit(g, va, self.gran);
            return Err(map_oom(e));
        }
        if let Some(old) = g.slab.take() {
            let s = g.slabs.get_mut(&old).expect("current slab is in the table");
            s.full = true;
            if s.refs == 0 {
                self.retire_slab(g, old);
            }
        }
        g.slabs.insert(va, Slab { refs: 0, full: false });
        g.slab = Some(va);
        // Left redzone of the slab's first block.
        g.small_cursor = va + self.redzone_b;
        g.small_end = va + self.gran;
        Ok(())
    }

    /// Retires a full slab with no block left. Should the pool refuse, the slab stays in the table
    /// (its memory is still mapped, and the table says so).
    fn retire_slab(&self, g: &mut Inner, slab: u64) {
        if g.pool.retire(slab, self.gran).is_ok() {
            g.slabs.remove(&slab);
        }
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

    #[allow(clippy::result_large_err)] // the error is the report's payload, built only on a bad free
    pub fn free(&self, ptr: u64, stream: Option<Stream>) -> Result<(), FreeError> {
        self.free_inner(ptr, stream, None)
    }

    /// [`Self::free`] through driver call `call`: a live block of the other kind is refused
    /// ([`FreeError::WrongCall`]), checked under the same lock as the free.
    #[allow(clippy::result_large_err)] // as for free
    pub fn free_by(&self, ptr: u64, stream: Option<Stream>, call: FreeCall) -> Result<(), FreeError> {
        self.free_inner(ptr, stream, Some(call))
    }

    #[allow(clippy::result_large_err)] // as for free
    fn free_inner(&self, ptr: u64, stream: Option<Stream>, call: Option<FreeCall>) -> Result<(), FreeError> {
        let stack = HostStack::capture(self.context_depth);
        let mut g = self.inner.lock().unwrap();
        let wrong_call = |a: &AllocInfo| call.is_some_and(|c| a.live && a.is_pinned_host() != (c == FreeCall::PinnedHost));
        if let Some(info) = self.block_containing(&g, ptr).filter(|a| wrong_call(a)) {
            return Err(FreeError::WrongCall { ptr, info: info.clone() });
        }
        if let Some(info) = g.imports.contains_key(&ptr).then(|| g.allocs.get(&ptr).cloned()).flatten() {
            // Another process's memory, unmapped with cuIpcCloseMemHandle, not freed.
            return Err(FreeError::WrongCall { ptr, info });
        }
        let Some(info) = self.block_named(&g, ptr).cloned() else {
            // Inside a block of the pointer's own tag, or no block it names.
            let containing = self.block_containing(&g, ptr).cloned();
            return Err(match containing {
                Some(info) => FreeError::NotBase { ptr, info },
                None => FreeError::Unknown { ptr, in_pool: self.owns(ptr) },
            });
        };
        let home = self.home(ptr);
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
        if g.pool.fill_shadow(ptr, granules, 0, s).is_err() && info.large {
            g.unpoisoned.insert(ptr);
        }
        let a = g.allocs.get_mut(&ptr).expect("present");
        a.live = false;
        a.free_stack = Some(stack);
        match (info.large, stream.is_some()) {
            (true, false) => self.retire_large(&mut g, &info),
            (false, false) => self.release_small(&mut g, home),
            (_, true) => {
                // Stream-ordered free: the unmap must wait for the stream; defer to the quarantine.
                g.quarantine.push_back(ptr);
                g.quarantine_bytes += info.region_end - ptr;
                self.trim_quarantine(&mut g, self.quarantine_max);
            }
        }
        Ok(())
    }

    /// Marks live block `ptr` as pitched: rows of `pitch` bytes of which the first `width` are the
    /// program's, the rest padding that checked accesses report. Returns false (nothing changed)
    /// when `ptr` is not a live block of `pitch`-multiple size or `pitch` is not a granule multiple.
    pub fn set_rows(&self, ptr: u64, width: u64, pitch: u64) -> bool {
        let mut g = self.inner.lock().unwrap();
        let Some(a) = self.block_named(&g, ptr).cloned() else { return false };
        if !a.live || width == 0 || width >= pitch || !pitch.is_multiple_of(self.scale.granule()) || !a.size.is_multiple_of(pitch) {
            return false;
        }
        let pitched = AllocInfo { rows: Some((width, pitch)), ..a };
        // An extent entry claims every byte of its block (checked loops and kernel-parameter
        // bounds skip the shadow inside it): a block with poisoned padding must have none.
        if a.large && g.pool.clear_extent(ptr, ptr + a.size, Stream::SYNC).is_err() {
            return false;
        }
        if g.pool.write_shadow(ptr, &pitched.shadow_image(self.scale), Stream::SYNC).is_err() {
            return false;
        }
        g.allocs.insert(ptr, pitched);
        true
    }

    /// Drops a freed small block's hold on its slab (`ptr` canonical), retiring the slab when it was the last.
    fn release_small(&self, g: &mut Inner, ptr: u64) {
        let slab = ptr & !(self.gran - 1);
        if let Some(s) = g.slabs.get_mut(&slab) {
            s.refs -= 1;
            if s.refs == 0 && s.full {
                self.retire_slab(g, slab);
            }
        }
    }

    /// Bytes of pool memory currently mapped (slabs, large blocks, held stream-ordered frees).
    pub fn mapped_bytes(&self) -> u64 {
        self.inner.lock().unwrap().pool.counters().committed_bytes
    }

    /// The pool's counters (chunks and wide runs created and reused), for tests and benchmarks.
    pub fn pool_counters(&self) -> gasan_uvm::PoolCounters {
        self.inner.lock().unwrap().pool.counters()
    }

    fn trim_quarantine(&self, g: &mut Inner, max: u64) {
        while g.quarantine_bytes > max || (max == 0 && !g.quarantine.is_empty()) {
            let Some(p) = g.quarantine.pop_front() else { break };
            let a = g.allocs[&p].clone();
            g.quarantine_bytes -= a.region_end - a.start;
            if a.large {
                self.retire_large(g, &a);
            } else {
                self.release_small(g, self.home(p));
            }
        }
    }

    /// Releases everything in quarantine (before reporting out-of-memory), and waits for the
    /// unmaps of freed large blocks.
    pub fn drain_quarantine(&self) {
        self.trim_quarantine(&mut self.inner.lock().unwrap(), 0);
        self.settle_unmaps();
    }

    /// The live block containing `addr` (through its own tag), as the runtime's calls need it:
    /// one lookup that the queries below, and callers needing several answers, share.
    pub fn live_block(&self, addr: u64) -> Option<LiveBlock> {
        let g = self.inner.lock().unwrap();
        self.block_containing(&g, addr).filter(|a| a.live).map(|a| LiveBlock { start: a.start, size: a.size, region_end: a.region_end, managed: a.managed, memory: a.memory })
    }

    /// The whole granules of the live block containing `addr`, when its shadow grants every byte
    /// in them (not a pitched block, whose row padding is poisoned): what a launch may tell a
    /// checked kernel about an argument pointing there (crate::arg_bounds). `None` when empty.
    pub fn accessible_granules(&self, addr: u64) -> Option<(u64, u64)> {
        let g = self.inner.lock().unwrap();
        let a = self.block_containing(&g, addr).filter(|a| a.live && a.rows.is_none() && a.heap_block.is_none())?;
        let gran = self.scale.granule();
        let (lo, hi) = (a.start.div_ceil(gran) * gran, (a.start + a.size) / gran * gran);
        (lo < hi).then_some((lo, hi))
    }

    /// The live managed block (host memory in the pool) whose region `[start, region_end)`
    /// holds all of `[addr, addr+len)`: (start, size). Prefetch and advice calls on such a range
    /// are answered here (the driver refuses them: to it the memory is pinned host memory).
    pub fn managed_block(&self, addr: u64, len: u64) -> Option<(u64, u64)> {
        self.live_block(addr)?.managed_range(addr, len)
    }

    /// The live pinned host block (not managed) containing `ptr`: (start, size). For the pinned
    /// host memory calls (`cuMemHostGetDevicePointer`, `cuMemHostGetFlags`).
    pub fn host_block_containing(&self, ptr: u64) -> Option<(u64, u64)> {
        self.live_block(ptr).filter(LiveBlock::is_pinned_host).map(|b| (b.start, b.size))
    }

    /// Where the live managed block containing `addr` (through its own tag) lives now.
    pub fn managed_memory_at(&self, addr: u64) -> Option<Memory> {
        self.live_block(addr).filter(|b| b.managed).map(|b| b.memory)
    }

    /// Moves the live managed block containing `addr` to memory `to` (contents and mappings; see
    /// `Pool::migrate`). The caller makes sure no kernel or copy uses it meanwhile. Returns
    /// whether it moved.
    pub fn migrate_managed(&self, addr: u64, to: Memory) -> Result<bool, AllocError> {
        let mut g = self.inner.lock().unwrap();
        let Some(a) = self.block_containing(&g, addr).filter(|a| a.live && a.managed && a.memory != to) else { return Ok(false) };
        let (start, home, len) = (a.start, self.home(a.start), a.region_end - a.start);
        g.pool.migrate(home, len, to).map_err(AllocError::Pool)?;
        g.allocs.get_mut(&start).expect("a live block").memory = to;
        Ok(true)
    }

    /// The live block containing `addr` (through its own tag): (start, size), for `cuMemGetAddressRange`.
    pub fn allocation_containing(&self, addr: u64) -> Option<(u64, u64)> {
        self.live_block(addr).map(|b| (b.start, b.size))
    }

    /// The block (live or freed) whose bytes `addr` is in, through the block's own tag.
    fn block_containing<'a>(&self, g: &'a Inner, addr: u64) -> Option<&'a AllocInfo> {
        // Keys are tagged addresses: the nearest block at or below is in `addr`'s window only if
        // it is a block of `addr`'s tag.
        g.allocs.range(..=addr).next_back().map(|(_, a)| a).filter(|a| addr < a.start + a.size.max(1))
    }

    /// The program's live blocks (blocks imported from another process are that process's).
    pub fn live_allocations(&self) -> Vec<AllocInfo> {
        let g = self.inner.lock().unwrap();
        g.allocs.values().filter(|a| a.live && !g.imports.contains_key(&a.start)).cloned().collect()
    }

    /// Whether exporting the live block holding `ptr` ([`Self::export_ipc`]) copies its bytes: a
    /// block backed by wide runs is shared as chunks, which `Pool::export` makes by copying, so
    /// the caller first waits for the device's work (a kernel writing the block meanwhile would
    /// lose its writes).
    pub fn export_copies(&self, ptr: u64) -> bool {
        let g = self.inner.lock().unwrap();
        let Some(a) = self.block_containing(&g, ptr).filter(|a| a.live) else { return false };
        let home = self.home(a.start);
        let end = round_up(home + self.scale.encodable_size(a.size.max(1)), self.gran);
        ((home & !(self.gran - 1))..end).step_by(self.gran as usize).any(|c| g.pool.wide_run(c).is_some())
    }

    /// The chunks of the live block holding `ptr`, for another process to map
    /// (`cuIpcGetMemHandle`): the pool exports every chunk under the block (a small block's slab
    /// chunk holds other blocks too: the importer's shadow makes only this block accessible).
    /// `None` when `ptr` is in no live block of the program's.
    pub fn export_ipc(&self, ptr: u64) -> Option<Result<IpcExport, AllocError>> {
        let mut g = self.inner.lock().unwrap();
        let a = self.block_containing(&g, ptr).filter(|a| a.live && !g.imports.contains_key(&a.start))?.clone();
        let home = self.home(a.start);
        let first = home & !(self.gran - 1);
        let end = round_up(home + self.scale.encodable_size(a.size.max(1)), self.gran);
        Some(g.pool.export(first, end - first).map_err(AllocError::from).map(|fds| IpcExport { fds, start: a.start, offset: home - first, size: a.size, gran: self.gran }))
    }

    /// Maps chunks another process exported (`fds`, in address order) as a block of `size`
    /// bytes at `offset` in them (`cuIpcOpenMemHandle`): placed like a large block, its shadow
    /// accessible over exactly those bytes (the rest of the chunks poisoned), so this process's
    /// accesses to it are checked against the exporter's bounds. Returns the block's address.
    pub fn import_ipc(&self, fds: Vec<std::os::fd::OwnedFd>, offset: u64, size: u64) -> Result<u64, AllocError> {
        let len = fds.len() as u64 * self.gran;
        let size_enc = self.scale.encodable_size(size.max(1));
        if fds.is_empty() || offset.checked_add(size_enc).is_none_or(|e| e > len) || !offset.is_multiple_of(ALIGN) {
            return Err(AllocError::Pool(UvmError::BadIpcHandle(format!("a block of {size} bytes at {offset:#x} in {} chunks", fds.len()))));
        }
        let stack = HostStack::capture(self.context_depth);
        let mut g = self.inner.lock().unwrap();
        let (home, tag) = match self.place_large(&g, len) {
            Some(p) => p,
            None if self.recycle_large(&mut g) => self.place_large(&g, len).ok_or(AllocError::OutOfMemory)?,
            None => return Err(AllocError::OutOfMemory),
        };
        if let Err(e) = g.pool.commit_imported(home, 1 << tag, fds) {
            self.discard_failed_commit(&mut g, home, len);
            return Err(map_oom(e));
        }
        g.large_tags = tag + 1;
        g.large_end = home + len;
        g.large_tail_gap = len;
        let start = g.pool.tagged(home, tag) + offset;
        if let Err(e) = self.poison_alloc(&g.pool, start, size_enc, None) {
            let _ = g.pool.retire_tagged(home, len, 1 << tag);
            return Err(e);
        }
        let _ = g.pool.set_extent(start, start + size, Stream::SYNC);
        let region_end = g.pool.tagged(home, tag) + len;
        self.record(&mut g, start, size, region_end, tag, true, Kind::DEVICE, &stack);
        g.imports.insert(start, Imported { home, len, tag });
        Ok(start)
    }

    /// Unmaps a block [`Self::import_ipc`] mapped (`cuIpcCloseMemHandle`): its chunks go back to
    /// the exporter (released, never reused here), and the block reads as freed. `false` when
    /// `ptr` is not such a block.
    pub fn close_ipc(&self, ptr: u64) -> bool {
        let stack = HostStack::capture(self.context_depth);
        let mut g = self.inner.lock().unwrap();
        let Some(im) = g.imports.remove(&ptr) else { return false };
        let size = g.allocs.get(&ptr).map_or(0, |a| a.size);
        let _ = g.pool.clear_extent(ptr, ptr + size, Stream::SYNC);
        let _ = g.pool.retire_tagged(im.home, im.len, 1 << im.tag);
        if let Some(a) = g.allocs.get_mut(&ptr) {
            a.live = false;
            a.free_stack = Some(stack);
        }
        true
    }

    /// Whether `ptr` is a block [`Self::import_ipc`] mapped and [`Self::close_ipc`] has not unmapped.
    pub fn is_imported(&self, ptr: u64) -> bool {
        self.inner.lock().unwrap().imports.contains_key(&ptr)
    }

    /// Reserves a region for the checked device heap of a program whose heap limit is `limit`
    /// bytes (gasan_instrument::device_heap): committed pool memory, all poisoned, with its header
    /// written. It is not an allocation of the program (never freed, leaked or described as one),
    /// and it has no extent entries (loop checks must read its shadow, which the device changes).
    ///
    /// With `host_table` the block table lives in that host-mapped memory instead of the region,
    /// so reports can still read it after a `trap` has killed the context.
    pub fn reserve_device_heap(&self, limit: u64, host_table: Option<crate::device_heap::HostTable>) -> Result<crate::device_heap::HeapRegion, AllocError> {
        let layout = gasan_instrument::device_heap::HeapLayout::for_limit(limit, self.scale.granule());
        let base = self.alloc(layout.region_size, None)?;
        let mut g = self.inner.lock().unwrap();
        g.allocs.remove(&base);
        let sync = Stream::SYNC;
        g.pool.clear_extent(base, base + layout.region_size, sync)?;
        g.pool.fill_shadow(base, self.scale.shadow_len(layout.region_size), 0, sync)?;
        let mut header = layout.header(base);
        if let Some(t) = host_table {
            header.table = t.device;
        }
        g.pool.backend().write(base, &header.to_bytes(), sync)?;
        let region = crate::device_heap::HeapRegion { base, layout, limit, host_table };
        g.device_heaps.push(region);
        Ok(region)
    }

    /// Classifies `addr` against the allocations.
    pub fn describe(&self, addr: u64) -> AddrDescription {
        let g = self.inner.lock().unwrap();
        // An alias address (GPU-only VA with the patched module) describes the pool address it
        // mirrors; a tag window's address stays as it is (the tag is part of the description).
        let addr = g.pool.alias_source(addr);
        let shadow = self.shadow_around(&g.pool, addr);
        let mut d = AddrDescription { addr, kind: AddrKind::Unknown, alloc: None, ptr_alloc: None, shadow, scale: self.scale };
        if !self.owns(addr) {
            return d;
        }
        if let Some(h) = g.device_heaps.iter().find(|h| h.contains(addr)) {
            // A heap block lies in its region's window.
            crate::device_heap::describe(g.pool.backend(), h, self.tag_of(h.base), addr, &mut d);
            return d;
        }
        let (home, tag) = (self.home(addr), self.tag_of(addr));
        // Neighbours of the pointer's own tag: the nearest block at or before, and after, the address.
        let window = self.win.window(tag);
        let prev = g.allocs.range(window.start..=addr).next_back().map(|(_, a)| a);
        let next = g.allocs.range(addr + 1..window.end).next().map(|(_, a)| a);
        if let Some(p) = prev {
            if addr < p.start + p.size.max(1) {
                let offset = addr - p.start;
                d.kind = match p.row_padding(offset) {
                    _ if !p.live => AddrKind::UseAfterFree { offset },
                    Some((row, past)) => AddrKind::RowPadding { row, past },
                    None => AddrKind::InBounds { offset },
                };
                d.alloc = Some(p.clone());
                return d;
            }
        }
        let right = prev.map(|p| (addr - (p.start + p.size), p));
        let left = next.map(|n| (n.start - addr, n));
        // The bytes belong to a block of another tag: the pointer walked out of its own block.
        // The block whose bytes these are, through another window (a live one before a freed one).
        let other = (0..self.win.count).filter(|&t| t != tag).filter_map(|t| self.block_containing(&g, g.pool.tagged(home, t))).max_by_key(|a| a.live);
        if let Some(m) = other {
            d.kind = AddrKind::TagMismatch { ptr_tag: tag, mem_tag: m.tag, offset: home - self.home(m.start) };
            d.alloc = Some(m.clone());
            d.ptr_alloc = match (right, left) {
                (Some((dr, p)), Some((dl, n))) => Some(if dr <= dl { p } else { n }.clone()),
                (Some((_, p)), None) => Some(p.clone()),
                (None, Some((_, n))) => Some(n.clone()),
                (None, None) => None,
            };
            return d;
        }
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
    #[allow(clippy::result_large_err)] // the error is the report's payload, built only on failure
    pub fn check_range(&self, addr: u64, len: u64) -> Result<(), RangeError> {
        if len == 0 || !self.owns(addr) {
            return Ok(());
        }
        let bad = {
            let g = self.inner.lock().unwrap();
            match self.block_containing(&g, addr) {
                Some(a) if a.live => {
                    let end = a.start + a.size;
                    if addr + len <= end {
                        None
                    } else {
                        Some(end)
                    }
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

impl Drop for Allocator {
    /// Freed blocks still queued for the unmap thread are retired in the pool's books only: unmapped
    /// here, the pool (dropped next) releases their chunks with its cache.
    fn drop(&mut self) {
        self.settle_unmaps();
    }
}

fn map_oom(e: UvmError) -> AllocError {
    match e {
        UvmError::Cuda { code: 2, .. } => AllocError::OutOfMemory,
        UvmError::NoVa => AllocError::OutOfMemory,
        e => AllocError::Pool(e),
    }
}

/// Violations found by [`Allocator::check_invariants`], one line each (the first
/// [`InvariantViolations::SHOWN`] described, the rest counted).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InvariantViolations {
    pub described: Vec<String>,
    pub total: usize,
}

impl InvariantViolations {
    pub const SHOWN: usize = 16;

    fn push(&mut self, what: String) {
        if self.described.len() < Self::SHOWN {
            self.described.push(what);
        }
        self.total += 1;
    }
}

impl std::fmt::Display for InvariantViolations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} allocator invariant violation(s):", self.total)?;
        for v in &self.described {
            writeln!(f, "  {v}")?;
        }
        if self.total > self.described.len() {
            writeln!(f, "  … and {} more", self.total - self.described.len())?;
        }
        Ok(())
    }
}

impl Allocator {
    /// Checks the allocator's invariants against its tables, the pool's mappings, the shadow and the
    /// extent table (read back as the device reads them). Takes the lock for the whole check, so
    /// it sees a state between two operations; it reads every block's shadow, so it is for tests.
    ///
    /// 1. Layout: small blocks lie in the lower half of the pool, 256-byte aligned, inside one slab,
    ///    their region being the block rounded to 256 bytes plus its redzone; large blocks lie in the
    ///    upper half, chunk-aligned, their region being the block rounded to whole chunks.
    /// 2. VA is never handed out twice: the regions of all blocks, live or freed, are disjoint.
    /// 3. Guard gaps: left of the first large block, and between two large blocks, lie at least the
    ///    larger of their lengths of VA with no committed chunk.
    /// 4. Cursors are past every block handed out (so they only move forward): small blocks end at or
    ///    below the small cursor, which lies in the current slab; large blocks end at or below
    ///    `large_end`, and the gap after it is the length of the block that ends there.
    /// 5. Slabs: each slab in the table is committed and holds exactly `refs` blocks that are live
    ///    or held in the quarantine; all but the current one are full, and a full one holds at
    ///    least one. A slab not in the table is retired.
    /// 6. Large blocks: live or held ones (in the quarantine, or waiting for the unmap thread) are
    ///    committed; other freed ones are retired.
    /// 7. Physical memory: the pool's committed bytes are exactly the slabs' plus the live and held
    ///    large blocks' (a failed operation left nothing mapped behind). Device-heap regions count as
    ///    live large blocks here and in 3, 4, 6 and 9; their shadow is the device's.
    /// 8. Shadow: each slab's shadow, and each large block's, encodes exactly its live blocks' sizes
    ///    and reads 0 everywhere else (redzones, freed blocks); retired VA reads 0.
    /// 9. Extent table: a live large block's entries name exactly its bytes (or are zero, when
    ///    setting them failed); every other entry of a block, slab or gap reads zero.
    /// 10. Quarantine: it holds distinct freed blocks whose bytes sum to `quarantine_bytes`, at most
    ///     the bound.
    /// 11. Ids are distinct and below `next_id`.
    /// 12. Tags: every block is handed out in its tag's window, at its canonical address; a block's
    ///     address neighbours of its kind (the blocks before and after it) have other tags when
    ///     there is more than one window. Its shadow is real in its own window (8 holds there) and
    ///     zero in every other (a pointer of another tag is reported).
    /// 13. Memory kinds: a block's chunks are all of the memory it is said to live in now; a
    ///     managed or host-memory block has chunks of its own, and only a managed block moves.
    ///
    /// Layout checks (1–7, 10) read canonical addresses: the windows share the memory. Freed
    /// large blocks handed to the unmap thread are waited for first: the books are then final.
    pub fn check_invariants(&self) -> Result<(), InvariantViolations> {
        self.settle_unmaps();
        let g = self.inner.lock().unwrap();
        let mut v = InvariantViolations::default();
        let gran = self.gran;
        let half = self.pool_base + self.win.size / 2;
        let pool_end = self.pool_base + self.win.size;
        // Canonical views of the blocks, in address order (the table's keys are canonical).
        let held: std::collections::HashSet<u64> = g.quarantine.iter().copied().collect();
        // Canonical views of the blocks (the table's keys are the tagged addresses), in canonical
        // address order.
        let mut canon: Vec<AllocInfo> = g
            .allocs
            .iter()
            .map(|(&key, a)| {
                let home = self.home(a.start);
                if key != a.start || a.start != g.pool.tagged(home, a.tag) || a.tag != self.tag_of(a.start) || a.region_end < a.start {
                    v.push(format!("block {:#x} (key {key:#x}, tag {}) is not its canonical address seen through its tag's window", a.start, a.tag));
                }
                AllocInfo { start: home, region_end: home + (a.region_end - a.start), ..a.clone() }
            })
            .collect();
        canon.sort_by_key(|a| (a.start, a.tag));
        // Freed large blocks handed to the unmap thread are retired in the pool's books (the
        // freeing thread settled them) and were waited for above.
        let holds_memory = |a: &AllocInfo| a.live || held.contains(&g.pool.tagged(a.start, a.tag));
        if self.win.count > 1 {
            for kind_large in [false, true] {
                // Large blocks: those holding memory (freed ones may lie under later blocks).
                let of_kind: Vec<&AllocInfo> = canon.iter().filter(|a| a.large == kind_large && (!kind_large || holds_memory(a))).collect();
                for w in of_kind.windows(2) {
                    // Small blocks neighbour each other only inside a slab, large ones when adjacent.
                    let neighbours = if kind_large { w[0].region_end == w[1].start } else { w[0].start & !(gran - 1) == w[1].start & !(gran - 1) };
                    if neighbours && w[0].tag == w[1].tag {
                        v.push(format!("neighbour blocks {:#x} and {:#x} share tag {}", w[0].start, w[1].start, w[0].tag));
                    }
                }
            }
        }
        let chunks = |start: u64, end: u64| (start..end).step_by(gran as usize);

        // 1, 2, 11.
        let mut prev: Option<&AllocInfo> = None;
        let mut prev_of_tag: HashMap<u64, &AllocInfo> = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for a in &canon {
            let enc = self.scale.encodable_size(a.size.max(1));
            if a.large {
                let want_end = a.start + round_up(enc, gran);
                if a.start < half || a.region_end > pool_end || a.start % gran != 0 || a.region_end != want_end {
                    v.push(format!("large block {:#x}+{:#x} has region {:#x}..{:#x} (want chunk-aligned {:#x}..{want_end:#x} in the upper half)", a.start, a.size, a.start, a.region_end, a.start));
                }
            } else {
                let want_end = a.start + round_up(enc, ALIGN) + self.redzone(enc);
                let slab = a.start & !(gran - 1);
                if a.start < self.pool_base + self.redzone_b || a.region_end > half || a.start % ALIGN != 0 || a.region_end != want_end || a.region_end > slab + gran || a.start < slab + self.redzone_b
                {
                    v.push(format!(
                        "small block {:#x}+{:#x} has region {:#x}..{:#x} (want {:#x}..{want_end:#x} inside one slab after its left redzone)",
                        a.start, a.size, a.start, a.region_end, a.start
                    ));
                }
            }
            // Blocks of one tag never share VA, nor do blocks holding memory; with tags a block may
            // lie under a freed block of another tag (large VA is swept again).
            let same_tag = prev_of_tag.get(&a.tag).copied().filter(|p| p.region_end > a.start);
            let holding = prev.filter(|p| p.region_end > a.start && holds_memory(a));
            if let Some(p) = same_tag.or(holding) {
                v.push(format!(
                    "blocks {:#x}..{:#x} (id {}, tag {}, live {}) and {:#x}..{:#x} (id {}, tag {}, live {}) overlap",
                    p.start, p.region_end, p.id, p.tag, p.live, a.start, a.region_end, a.id, a.tag, a.live
                ));
            }
            prev_of_tag.insert(a.tag, a);
            if holds_memory(a) {
                prev = Some(a);
            }
            if a.id == 0 || a.id >= g.next_id || !ids.insert(a.id) {
                v.push(format!("block {:#x} has id {} (next {}, or a duplicate)", a.start, a.id, g.next_id));
            }
        }

        // 3, 4 (large), 6, 9 (large).
        let mut prev_large: Option<&AllocInfo> = None;
        let mut top_large: Option<&AllocInfo> = None;
        let mut large_held_bytes = 0;
        // Device-heap regions were handed out as large blocks and stay committed: they keep the
        // large blocks' layout, gaps and memory (not their shadow, which the device owns).
        let heaps: Vec<AllocInfo> = g
            .device_heaps
            .iter()
            .filter(|h| h.layout.region_size > SMALL_MAX)
            .map(|h| AllocInfo {
                id: 0,
                start: self.home(h.base),
                size: h.layout.region_size,
                region_end: self.home(h.base) + round_up(h.layout.region_size, gran),
                tag: self.tag_of(h.base),
                large: true,
                managed: false,
                memory: Memory::Device,
                live: true,
                alloc_stack: HostStack::default(),
                free_stack: None,
                heap_block: None,
                registered: false,
                rows: None,
            })
            .collect();
        let mut large: Vec<&AllocInfo> = canon.iter().filter(|a| a.large).chain(&heaps).collect();
        large.sort_by_key(|a| a.start);
        for a in large {
            let len = a.region_end - a.start;
            let bit = 1u64 << a.tag;
            let of_tag = |c: u64| g.pool.committed_windows(c).is_some_and(|m| m & bit != 0);
            let (left, need) = match prev_large {
                Some(p) => (p.region_end, len.max(p.region_end - p.start)),
                None => (half, len),
            };
            if self.win.count > 1 {
                // 3 with tags: no live block of the same tag in the chunk on either side.
                if holds_memory(a) && ((a.start > half && of_tag(a.start - gran)) || (a.region_end < pool_end && of_tag(a.region_end))) {
                    v.push(format!("large block {:#x}..{:#x} (tag {}) has a live block of its tag in the next chunk", a.start, a.region_end, a.tag));
                }
            } else if a.start < left || a.start - left < need {
                v.push(format!("large block {:#x}..{:#x} has {:#x} bytes of guard gap on its left (needs {need:#x})", a.start, a.region_end, a.start.saturating_sub(left)));
            } else if let Some(c) = chunks(left, a.start).find(|&c| g.pool.is_committed(c)) {
                v.push(format!("chunk {c:#x} in the guard gap left of large block {:#x} is committed", a.start));
            } else {
                for t in 0..self.win.count {
                    let mut entries = vec![(0, 0); ((a.start - left) / gran) as usize];
                    let read = g.pool.read_extents((g.pool.tagged(left, t) - self.pool_base) / gran, &mut entries);
                    if read.is_err() || entries.iter().any(|&e| e != (0, 0)) {
                        v.push(format!("extent entries in the guard gap left of large block {:#x} (window {t}) are not zero", a.start));
                    }
                }
            }
            // With tags the cursor sweeps the VA again once at its end.
            if self.win.count == 1 && a.region_end > g.large_end {
                v.push(format!("large block {:#x}..{:#x} ends past the large cursor {:#x}", a.start, a.region_end, g.large_end));
            }
            if holds_memory(a) {
                large_held_bytes += len;
                if let Some(c) = chunks(a.start, a.region_end).find(|&c| !of_tag(c)) {
                    v.push(format!("chunk {c:#x} of large block {:#x} (live {}, tag {}) is not committed for its window", a.start, a.live, a.tag));
                }
            } else if let Some(c) = chunks(a.start, a.region_end).find(|&c| of_tag(c) || !g.pool.is_retired(g.pool.tagged(c, a.tag))) {
                v.push(format!("chunk {c:#x} of freed large block {:#x} is not retired for its window", a.start));
            }
            // Only the block's own window may claim it (other windows may hold later blocks).
            for t in (0..self.win.count).filter(|&t| t == a.tag || self.win.count == 1) {
                let first = (g.pool.tagged(a.start, t) - self.pool_base) / gran;
                let mut entries = vec![(0, 0); (len / gran) as usize];
                match g.pool.read_extents(first, &mut entries) {
                    Err(e) => v.push(format!("extent entries of {:#x} unreadable: {e}", a.start)),
                    Ok(()) => {
                        let tagged = g.pool.tagged(a.start, a.tag);
                        let claim = (tagged, tagged + a.size);
                        let all_zero = entries.iter().all(|&e| e == (0, 0));
                        let all_claim = entries.iter().all(|&e| e == claim);
                        // Pitched blocks (poisoned row padding) claim nothing.
                        if !(all_zero || (a.live && t == a.tag && all_claim && a.rows.is_none())) {
                            v.push(format!("extent entries of large block {:#x}+{:#x} (live {}, tag {}) in window {t} read {:x?}", a.start, a.size, a.live, a.tag, &entries[..entries.len().min(4)]));
                        }
                    }
                }
            }
            // Id 0: a device-heap region (the program's blocks have ids from 1). Other windows'
            // shadow may describe later blocks of other tags.
            if a.id != 0 {
                self.check_window_shadow(&g, a.start, a.region_end, a.tag, &[a], &mut v);
            }
            if self.win.count == 1 || holds_memory(a) {
                prev_large = Some(a);
                top_large = Some(a);
            }
        }
        match top_large {
            Some(t) if self.win.count == 1 && g.large_tail_gap < t.region_end - t.start && g.large_end == t.region_end => {
                v.push(format!("gap after the last large block {:#x}..{:#x} is {:#x}, less than its length", t.start, t.region_end, g.large_tail_gap));
            }
            None if g.large_end < half => v.push(format!("large cursor {:#x} below the middle of the pool", g.large_end)),
            _ => {}
        }

        // 4 (small), 5, 8 (slabs), 9 (slabs).
        if let Some(cur) = g.slab {
            if !(cur < g.small_cursor && g.small_cursor <= g.small_end && g.small_end == cur + gran) {
                v.push(format!("small cursor {:#x}, end {:#x} outside the current slab {cur:#x}", g.small_cursor, g.small_end));
            }
            match g.slabs.get(&cur) {
                None => v.push(format!("current slab {cur:#x} is not in the table")),
                Some(s) if s.full => v.push(format!("current slab {cur:#x} is marked full")),
                Some(_) => {}
            }
        }
        let mut by_slab: BTreeMap<u64, Vec<&AllocInfo>> = BTreeMap::new();
        for a in canon.iter().filter(|a| !a.large) {
            if a.region_end > g.small_cursor {
                v.push(format!("small block {:#x}..{:#x} ends past the small cursor {:#x}", a.start, a.region_end, g.small_cursor));
            }
            by_slab.entry(a.start & !(gran - 1)).or_default().push(a);
        }
        for (&slab, s) in &g.slabs {
            let blocks = by_slab.get(&slab).map_or(&[][..], Vec::as_slice);
            let holding = blocks.iter().filter(|a| holds_memory(a)).count() as u64;
            if s.refs != holding {
                v.push(format!("slab {slab:#x} counts {} blocks, holds {holding}", s.refs));
            }
            if s.full != (g.slab != Some(slab)) || (s.full && s.refs == 0) {
                v.push(format!("slab {slab:#x}: full {}, refs {}, current {:?}", s.full, s.refs, g.slab));
            }
            if slab % gran != 0 || slab + gran > half || !g.pool.is_committed(slab) {
                v.push(format!("slab {slab:#x} is misplaced or not committed"));
            }
            let mut entry = [(0, 0)];
            if g.pool.read_extents((slab - self.pool_base) / gran, &mut entry).is_err() || entry[0] != (0, 0) {
                v.push(format!("slab {slab:#x} has extent entry {:x?}", entry[0]));
            }
            self.check_region_shadow(&g, slab, slab + gran, blocks, &mut v);
        }
        for (&slab, blocks) in &by_slab {
            if !g.slabs.contains_key(&slab) {
                if g.pool.is_committed(slab) || !g.pool.is_retired(slab) {
                    v.push(format!("slab {slab:#x} left the table without being retired"));
                }
                if let Some(a) = blocks.iter().find(|a| holds_memory(a)) {
                    v.push(format!("block {:#x} (live {}) is in retired slab {slab:#x}", a.start, a.live));
                }
                self.check_region_shadow(&g, blocks[0].start, blocks[blocks.len() - 1].region_end, &[], &mut v);
            }
        }

        // 7.
        let want = g.slabs.len() as u64 * gran + large_held_bytes;
        let committed = g.pool.counters().committed_bytes;
        if committed != want {
            v.push(format!("pool has {committed:#x} bytes committed; the slabs and live or held large blocks need {want:#x}"));
        }

        // 13.
        for b in g.allocs.values().filter(|b| b.live || held.contains(&b.start)) {
            let home = self.home(b.start);
            let wrong = (home..self.home(b.region_end)).step_by(gran as usize).find(|&c| g.pool.memory_of(c).is_some_and(|m| m != b.memory));
            if let Some(c) = wrong {
                v.push(format!("block {:#x} of {:?} memory lies on a chunk {c:#x} of other memory", b.start, b.memory));
            }
            if (b.managed || b.memory == Memory::Host) && !b.large {
                v.push(format!("block {:#x}: managed {}, {:?} memory, large {}", b.start, b.managed, b.memory, b.large));
            }
        }

        // 10.
        let mut held_bytes = 0;
        for p in &g.quarantine {
            match g.allocs.get(p) {
                Some(a) if !a.live => held_bytes += a.region_end - a.start,
                _ => v.push(format!("quarantine holds {p:#x}, which is not a freed block")),
            }
        }
        if held.len() != g.quarantine.len() || held_bytes != g.quarantine_bytes || g.quarantine_bytes > self.quarantine_max {
            v.push(format!("quarantine: {} entries ({} distinct), {held_bytes:#x} bytes, counted {:#x}, bound {:#x}", g.quarantine.len(), held.len(), g.quarantine_bytes, self.quarantine_max));
        }

        if v.total == 0 {
            Ok(())
        } else {
            Err(v)
        }
    }

    /// Invariants 8 and 12 over canonical `[from, to)` (granule-aligned), in every window: the live
    /// ones of `blocks` (canonical, sorted, inside the range) encode their sizes in their own
    /// tag's window, every other granule reads 0.
    fn check_region_shadow(&self, g: &Inner, from: u64, to: u64, blocks: &[&AllocInfo], v: &mut InvariantViolations) {
        for t in 0..self.win.count {
            let own: Vec<&AllocInfo> = blocks.iter().copied().filter(|a| a.tag == t).collect();
            self.check_window_shadow(g, from, to, t, &own, v);
        }
    }

    fn check_window_shadow(&self, g: &Inner, from: u64, to: u64, tag: u64, blocks: &[&AllocInfo], v: &mut InvariantViolations) {
        let shift = self.scale.shift();
        let mut want = vec![0u8; ((to - from) >> shift) as usize];
        for a in blocks.iter().filter(|a| a.live) {
            let img = a.shadow_image(self.scale);
            let at = ((a.start - from) >> shift) as usize;
            want[at..at + img.len()].copy_from_slice(&img);
        }
        let mut got = vec![0u8; want.len()];
        if let Err(e) = g.pool.read_shadow(g.pool.tagged(from, tag), &mut got) {
            v.push(format!("shadow of {from:#x}..{to:#x} unreadable: {e}"));
            return;
        }
        if got == want {
            return;
        }
        let i = (0..want.len()).find(|&i| got[i] != want[i]).expect("a differing byte");
        let addr = from + ((i as u64) << shift);
        let owner = blocks.iter().find(|a| a.start <= addr && addr < a.region_end);
        let owner = owner.map_or("no block".to_string(), |a| format!("block {:#x}+{:#x} (live {})", a.start, a.size, a.live));
        v.push(format!("shadow of granule {addr:#x} in window {tag} reads {:#x}, want {:#x} ({owner})", got[i], want[i]));
    }
}
