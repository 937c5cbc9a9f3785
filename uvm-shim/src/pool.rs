//! The pool: one reserved VA range for all device allocations plus its shadow, grown in place by
//! committing chunks. Shadow is backed by real chunks where the pool is committed and by one shared
//! read-only zero chunk everywhere else (reads 0 = inaccessible). The extent table (one entry per
//! pool block: the live allocation covering it, for range checks of hoisted loops) is backed the
//! same way, by real chunks only where an entry was ever set.

use crate::backend::{Backend, ChunkHandle, Memory, Prot, Stream};
use crate::devices::DeviceSpan;
use crate::plan;
use crate::UvmError;
use gasan_instrument::abi::{ExtentEntry, EXTENT_ENTRY_SIZE};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Where to put the pool and how big.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Pool size in bytes (0: the largest of [`DEFAULT_SIZES`] the backend grants).
    pub size: u64,
    /// Shadow scale: 7 or 8.
    pub shift: u32,
    /// Addresses to try first; then anywhere.
    pub hints: Vec<u64>,
    /// With `size` 0: the largest default size to try (0: no limit).
    pub max_size: u64,
    /// Tag windows (a power of two; 1: no tagging). The pool is split into this many equal
    /// windows; a committed chunk is mapped at the same offset in each window it is committed
    /// for, so an allocation's pointer can name its window (its tag) while the memory is one.
    /// Each window has its own shadow, so a checked access reaching memory through another
    /// window than its allocation's finds it poisoned, and an unchecked one finds it unmapped.
    pub tags: u64,
}

/// Pool sizes tried in order when none is configured (those above `PoolConfig::max_size` skipped).
pub const DEFAULT_SIZES: [u64; 5] = [1 << 40, 1 << 39, 1 << 38, 1 << 36, 1 << 34];
pub const DEFAULT_HINTS: [u64; 2] = [0x1000_0000_0000, 0x2000_0000_0000];

impl Default for PoolConfig {
    fn default() -> Self {
        Self { size: 0, shift: 8, hints: DEFAULT_HINTS.to_vec(), max_size: 0, tags: 1 }
    }
}

/// Counters for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    pub chunks_created: u64,
    pub chunks_from_cache: u64,
    pub committed_bytes: u64,
    pub retired_bytes: u64,
    /// Extent-table memory backed by real chunks (held until the pool is dropped).
    pub extent_bytes: u64,
    /// Wide-run handles ([`WideRun`]) created, and taken from the cache of their size.
    pub runs_created: u64,
    pub runs_from_cache: u64,
    /// Wide runs split into chunk handles, for an operation on part of one.
    pub runs_split: u64,
    /// Freed wide-run handles released instead of cached: over the cache's limit, or to make
    /// room when creating memory failed.
    pub runs_released: u64,
}

/// A wide run: `slots` consecutive canonical chunks of one device commit backed by one physical
/// handle that long ([`plan::run_pieces`] says how a commit is cut into runs). The driver's cost is
/// per handle, not per byte: on an H100 mapping and giving access to one 16 MiB handle takes
/// 37 µs, eight 2 MiB chunks 179 µs (unmapping 21 µs against 115 µs).
///
/// Invariant: **a wide run is mapped, unmapped, protected, granted to peers, retired and cached
/// only whole**, in every window it is committed for (CUDA maps a handle only whole, at offset 0,
/// and unmaps and sets access only on whole mappings); each of its chunks' `committed` entries
/// names its handle and the same windows. An operation on part of a run first splits it into one
/// chunk handle per slot, bytes copied ([`Pool::split_run`]); the planner refuses a release of
/// part of one ([`UvmError::PartOfRun`]), which the pool never asks for. Host memory, imported
/// chunks, slabs and single-chunk blocks keep chunk handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WideRun {
    handle: ChunkHandle,
    slots: u64,
}

/// Default bound on the shadow chunks kept backed while they describe nothing ([`Pool::set_idle_shadow_limit`]):
/// 16 MiB of memory, one per tag window for up to 8 windows (blocks in turn take every tag).
pub const IDLE_SHADOW_CHUNKS: usize = 8;

/// Default bound on the bytes of freed wide-run handles kept for reuse ([`Pool::set_run_cache_limit`]).
/// A cached run serves only blocks with a piece of its size, so unlike cached chunks it can strand
/// memory: it is bounded, and released whenever creating memory fails.
pub const RUN_CACHE_BYTES: u64 = 2 << 30;

pub struct Pool {
    /// Shared with [`Detached`] retirements, which unmap outside the pool's owner's lock.
    backend: Arc<dyn Backend>,
    base: u64,
    size: u64,
    shadow_base: u64,
    shadow_size: u64,
    shift: u32,
    gran: u64,
    /// The tag windows (`size / count` bytes each).
    win: plan::Windows,
    zero_chunk: ChunkHandle,
    /// Canonical chunk address → (physical chunk, windows whose shadow describes it).
    committed: BTreeMap<u64, (ChunkHandle, u64)>,
    /// Canonical chunk address → the windows it is retired for (never mapped through them again).
    retired: BTreeMap<u64, u64>,
    /// Canonical chunks retired by [`Pool::retire_detached`] and not yet taken back: still mapped
    /// through their old window, so never released for reuse ([`Pool::unretire`]).
    detached: HashSet<u64>,
    /// Shadow chunk index → (chunk, number of (committed chunk, window) pairs it describes). An
    /// entry describing nothing is idle (in `idle_shadow`).
    shadow: HashMap<u64, (ChunkHandle, u64)>,
    /// Shadow chunks still backed by real memory though they describe no committed chunk, oldest
    /// first, at most `idle_shadow_limit` ([`Pool::set_idle_shadow_limit`]). Their bytes are all
    /// zero, as the zero chunk's (a release zeroes the shadow of what it unmaps, and no shadow is
    /// written where nothing is committed), so they read as it would: the next commit they
    /// describe takes them as they are, instead of a map, access and memset now and an unmap
    /// and map at the release (a churn of large blocks remapped the shadow chunk under each).
    idle_shadow: VecDeque<u64>,
    idle_shadow_limit: usize,
    cache: Vec<ChunkHandle>,
    /// Freed [`Memory::Host`] chunks, kept for the next host commit (creating one pins its pages,
    /// about 0.9 ms on an H100).
    host_cache: Vec<ChunkHandle>,
    /// The [`Memory::Host`] chunks among those committed or cached.
    host_chunks: HashSet<ChunkHandle>,
    /// One chunk of VA outside the pool, reserved at the first [`Self::migrate`]: a new chunk is
    /// mapped there while the old one's bytes are copied in.
    scratch: Option<u64>,
    /// Alias base → (source va, len).
    aliases: BTreeMap<u64, (u64, u64)>,
    /// Devices granted access to the pool (multi-GPU; one pool per device): read-write to its
    /// chunks, read-only to its shadow and extent table.
    peers: Vec<i32>,
    /// Devices granted this pool's host memory (multi-GPU: pinned and managed host memory is every
    /// GPU's, as UVA makes the driver's): read-write to its [`Memory::Host`] chunks, read-only to
    /// its shadow and extent table, so that their kernels' checks of that memory read the owner's
    /// shadow. Device chunks stay the owner's and its peers'.
    host_readers: Vec<i32>,
    /// The span this pool is a slot of, and the slot: the span owns the pool's, shadow's and
    /// extent table's VA. `None`: the pool reserved its own.
    span: Option<(Arc<DeviceSpan>, u32)>,
    /// Chunks exported to other processes: released, never cached, once unmapped here (an
    /// importer may still map them).
    exported: HashSet<ChunkHandle>,
    /// Chunks imported from other processes: released, never cached, once unmapped.
    imported: HashSet<ChunkHandle>,
    /// Imported chunks the commit being applied maps, in address order, instead of its own.
    supply: VecDeque<ChunkHandle>,
    /// Whether [`Self::protect`] ever took rights away: until then every committed chunk is
    /// read-write and a grant needs no query of each chunk's rights.
    any_protected: bool,
    counters: PoolCounters,
    extent_base: u64,
    extent_size: u64,
    /// Extent-table chunk index → the real chunk behind it (the others are the zero chunk).
    extent_chunks: BTreeMap<u64, ChunkHandle>,
    /// A zeroed chunk [`WIDE_ZERO_SLOTS`] chunks long, mapped read-only over most of the shadow at
    /// start (one mapping per run instead of one per chunk), when the backend has wide chunks.
    wide_zero: Option<ChunkHandle>,
    /// Start of each shadow run still mapped to `wide_zero`. A run is split into single zero-chunk
    /// mappings before any of its slots is backed by real memory (mappings unmap only whole).
    wide_runs: BTreeSet<u64>,
    /// Canonical first chunk → the wide run of pool chunks starting there.
    runs: BTreeMap<u64, WideRun>,
    /// Freed wide-run handles by length in chunks, for the next run of that length.
    run_cache: BTreeMap<u64, Vec<ChunkHandle>>,
    /// Bytes of the handles in `run_cache`, at most `run_cache_limit`.
    run_cache_bytes: u64,
    run_cache_limit: u64,
    /// Device commits of two chunks or more are backed by wide runs ([`Pool::set_wide_commits`]).
    wide_commits: bool,
}

/// Chunks per wide zero mapping: 8 × 2 MiB maps a 1 TiB pool's 4 GiB shadow in 256 driver calls
/// instead of 2048 (about 60 ms of process start on an H100), for 14 MiB more device memory.
pub const WIDE_ZERO_SLOTS: u64 = 8;

impl Pool {
    /// Reserves the pool and its shadow and fans the zero chunk out over the whole shadow.
    pub fn new(backend: Box<dyn Backend>, cfg: &PoolConfig) -> Result<Self, UvmError> {
        if !(7..=8).contains(&cfg.shift) {
            return Err(UvmError::BadConfig(format!("shadow scale {} (must be 7 or 8)", cfg.shift)));
        }
        let gran = backend.granularity();
        let windows = cfg.tags;
        if !windows.is_power_of_two() || windows > 64 {
            return Err(UvmError::BadConfig(format!("{windows} tag windows (must be a power of two, at most 64)")));
        }
        let sizes: Vec<u64> = if cfg.size != 0 { vec![cfg.size] } else { DEFAULT_SIZES.iter().copied().filter(|&s| cfg.max_size == 0 || s <= cfg.max_size).collect() };
        let mut reserved = None;
        'outer: for &size in &sizes {
            let size = plan::align_out(0, size, gran << cfg.shift).map(|r| r.1).ok_or(UvmError::BadConfig("pool size".into()))?;
            for &hint in cfg.hints.iter().chain(std::iter::once(&0)) {
                if let Ok(va) = backend.reserve(size, hint) {
                    reserved = Some((va, size));
                    break 'outer;
                }
            }
        }
        let (base, size) = reserved.ok_or(UvmError::NoVa)?;
        if let Err(e) = plan::Windows::check(size, windows, gran, cfg.shift) {
            let _ = backend.free_va(base, size);
            return Err(e);
        }
        let shadow_size = plan::shadow_size(size, cfg.shift, gran);
        let shadow_base = match backend.reserve(shadow_size, 0) {
            Ok(v) => v,
            Err(e) => {
                let _ = backend.free_va(base, size);
                return Err(e);
            }
        };
        let extent_size = plan::extent_table_size(size, gran);
        let extent_base = match backend.reserve(extent_size, 0) {
            Ok(v) => v,
            Err(e) => {
                let _ = backend.free_va(shadow_base, shadow_size);
                let _ = backend.free_va(base, size);
                return Err(e);
            }
        };
        Self::assemble(backend, cfg, base, size, shadow_base, extent_base, None)
    }

    /// The pool of device slot `device` of `span` (whose VA it uses; the span is freed when its
    /// last pool is dropped): one pool per GPU, each created when its device is first used.
    /// `cfg.size` and `cfg.hints` are the span's; `cfg.shift` must be its scale. Each slot has one
    /// pool at a time.
    pub fn in_span(backend: Box<dyn Backend>, cfg: &PoolConfig, span: &Arc<DeviceSpan>, device: u32) -> Result<Self, UvmError> {
        let l = span.layout();
        if cfg.shift != l.shift || backend.granularity() != l.gran {
            return Err(UvmError::BadConfig(format!("a pool of scale {} and chunks of {:#x} in a span of scale {} and chunks of {:#x}", cfg.shift, backend.granularity(), l.shift, l.gran)));
        }
        if !cfg.tags.is_power_of_two() || cfg.tags > 64 {
            return Err(UvmError::BadConfig(format!("{} tag windows (must be a power of two, at most 64)", cfg.tags)));
        }
        plan::Windows::check(l.pool_size, cfg.tags, l.gran, l.shift)?;
        span.claim(device)?;
        let slot = l.slot(device);
        Self::assemble(backend, cfg, slot.pool, l.pool_size, slot.shadow, slot.extent, Some((span.clone(), device)))
    }

    /// The pool over VA already reserved (by itself, or by `span`), zero chunk fanned out.
    fn assemble(backend: Box<dyn Backend>, cfg: &PoolConfig, base: u64, size: u64, shadow_base: u64, extent_base: u64, span: Option<(Arc<DeviceSpan>, u32)>) -> Result<Self, UvmError> {
        let gran = backend.granularity();
        let mut pool = Pool {
            backend: Arc::from(backend),
            base,
            size,
            shadow_base,
            shadow_size: plan::shadow_size(size, cfg.shift, gran),
            shift: cfg.shift,
            gran,
            win: plan::Windows { base, size: size / cfg.tags, count: cfg.tags },
            zero_chunk: 0,
            committed: BTreeMap::new(),
            retired: BTreeMap::new(),
            detached: HashSet::new(),
            shadow: HashMap::new(),
            idle_shadow: VecDeque::new(),
            idle_shadow_limit: IDLE_SHADOW_CHUNKS,
            cache: Vec::new(),
            host_cache: Vec::new(),
            host_chunks: HashSet::new(),
            scratch: None,
            aliases: BTreeMap::new(),
            peers: Vec::new(),
            host_readers: Vec::new(),
            span,
            exported: HashSet::new(),
            imported: HashSet::new(),
            supply: VecDeque::new(),
            any_protected: false,
            counters: PoolCounters::default(),
            extent_base,
            extent_size: plan::extent_table_size(size, gran),
            extent_chunks: BTreeMap::new(),
            wide_zero: None,
            wide_runs: BTreeSet::new(),
            runs: BTreeMap::new(),
            run_cache: BTreeMap::new(),
            run_cache_bytes: 0,
            run_cache_limit: RUN_CACHE_BYTES,
            wide_commits: true,
        };
        pool.setup_zero_chunk()?;
        Ok(pool)
    }

    fn setup_zero_chunk(&mut self) -> Result<(), UvmError> {
        let b = &self.backend;
        let z = b.create_chunk()?;
        self.zero_chunk = z;
        // Zero it through a read-write mapping at the first shadow slot, then make it read-only.
        b.map(self.shadow_base, z, Prot::ReadWrite)?;
        b.fill(self.shadow_base, self.gran, 0, Stream::SYNC)?;
        b.wait_writes(self.shadow_base, self.gran)?;
        b.protect(self.shadow_base, self.gran, Prot::ReadOnly)?;
        let mut va = self.shadow_base + self.gran;
        let mut left = self.shadow_size / self.gran - 1;
        let run = WIDE_ZERO_SLOTS * self.gran;
        if left >= WIDE_ZERO_SLOTS {
            if let Ok(w) = b.create_wide_chunk(WIDE_ZERO_SLOTS) {
                self.wide_zero = Some(w);
                // Zeroed like the small one: through a read-write mapping at its first run.
                b.map_wide(va, w, WIDE_ZERO_SLOTS, Prot::ReadWrite)?;
                self.wide_runs.insert(va);
                b.fill(va, run, 0, Stream::SYNC)?;
                b.wait_writes(va, run)?;
                b.protect(va, run, Prot::ReadOnly)?;
                va += run;
                left -= WIDE_ZERO_SLOTS;
                while left >= WIDE_ZERO_SLOTS {
                    b.map_wide(va, w, WIDE_ZERO_SLOTS, Prot::ReadOnly)?;
                    self.wide_runs.insert(va);
                    va += run;
                    left -= WIDE_ZERO_SLOTS;
                }
            }
        }
        b.map_run(va, left, z, Prot::ReadOnly)?;
        b.map_run(self.extent_base, self.extent_size / self.gran, z, Prot::ReadOnly)?;
        Ok(())
    }

    /// Replaces the wide zero mapping covering shadow address `va`, if any, with single
    /// zero-chunk mappings, so that one slot of it can be remapped.
    fn split_wide_run(&mut self, va: u64) -> Result<(), UvmError> {
        let run = WIDE_ZERO_SLOTS * self.gran;
        let Some(&start) = self.wide_runs.range(..=va).next_back().filter(|&&s| va < s + run) else { return Ok(()) };
        self.backend.unmap(start, run)?;
        if let Err(e) = self.backend.map_run(start, WIDE_ZERO_SLOTS, self.zero_chunk, Prot::ReadOnly) {
            // Put the wide mapping back so the shadow stays readable.
            let _ = self.backend.unmap(start, run);
            if let Some(w) = self.wide_zero {
                let _ = self.backend.map_wide(start, w, WIDE_ZERO_SLOTS, Prot::ReadOnly);
            }
            return Err(e);
        }
        self.wide_runs.remove(&start);
        self.grant_peers(start, run, Prot::ReadOnly, true)
    }

    /// Gives every peer `prot` over `[va, va+len)`, just mapped (a new mapping grants none), and
    /// every host reader too when `host_readers` (shadow, extent table, host chunks).
    fn grant_peers(&self, va: u64, len: u64, prot: Prot, host_readers: bool) -> Result<(), UvmError> {
        let readers = self.host_readers.iter().filter(|&&r| host_readers && !self.peers.contains(&r));
        for &p in self.peers.iter().chain(readers) {
            self.backend.set_peer_access(va, len, p, prot)?;
        }
        Ok(())
    }

    pub fn base(&self) -> u64 {
        self.base
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Shadow byte of `base()`.
    pub fn shadow_base(&self) -> u64 {
        self.shadow_base
    }
    pub fn shift(&self) -> u32 {
        self.shift
    }
    pub fn granularity(&self) -> u64 {
        self.gran
    }
    /// Extent table for module control blocks: (device address, log2 of the block one entry describes).
    pub fn extent_table(&self) -> (u64, u32) {
        (self.extent_base, self.gran.trailing_zeros())
    }
    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }
    /// The device whose memory this pool maps.
    pub fn device(&self) -> i32 {
        self.backend.device()
    }
    /// The span this pool is a slot of, and its slot (`None`: a pool with VA of its own).
    pub fn span(&self) -> Option<(&Arc<DeviceSpan>, u32)> {
        self.span.as_ref().map(|(s, d)| (s, *d))
    }
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }
    pub fn contains(&self, va: u64, len: u64) -> bool {
        plan::contains(self.base, self.size, va, len)
    }
    pub fn shadow_addr(&self, va: u64) -> u64 {
        self.shadow_base + ((va - self.base) >> self.shift)
    }
    /// Is the chunk behind `va` (any window) committed?
    pub fn is_committed(&self, va: u64) -> bool {
        self.committed.contains_key(&(self.canonical(va) & !(self.gran - 1)))
    }
    /// Is the chunk behind `va` retired for `va`'s window?
    pub fn is_retired(&self, va: u64) -> bool {
        self.retired_windows(va) >> self.tag_of(va) & 1 == 1
    }
    /// The windows the chunk behind `va` is retired for (a bit mask).
    pub fn retired_windows(&self, va: u64) -> u64 {
        self.retired.get(&(self.canonical(va) & !(self.gran - 1))).copied().unwrap_or(0)
    }
    /// The windows the chunk behind `va` is committed for, if it is committed.
    pub fn committed_windows(&self, va: u64) -> Option<u64> {
        self.committed.get(&(self.canonical(va) & !(self.gran - 1))).map(|e| e.1)
    }
    /// Number of tag windows (1: tagging off).
    pub fn windows(&self) -> u64 {
        self.win.count
    }
    /// Bytes of one tag window; window 0 holds the canonical addresses.
    pub fn window_size(&self) -> u64 {
        self.win.size
    }
    /// The tag windows' layout (its arithmetic: [`plan::Windows`]).
    pub fn tag_windows(&self) -> plan::Windows {
        self.win
    }
    /// The tag (window) of pool address `va`; 0 outside the pool.
    pub fn tag_of(&self, va: u64) -> u64 {
        self.win.tag(va)
    }
    /// Canonical pool address `va` as seen through window `tag`.
    pub fn tagged(&self, va: u64, tag: u64) -> u64 {
        self.win.tagged(va, tag)
    }

    fn check_range(&self, va: u64, len: u64) -> Result<(), UvmError> {
        plan::check_aligned(va, len, self.gran)?;
        if !self.contains(va, len) {
            return Err(UvmError::OutsidePool { va, len });
        }
        Ok(())
    }

    fn take_chunk(&mut self) -> Result<ChunkHandle, UvmError> {
        self.take_chunk_of(Memory::Device)
    }

    fn take_chunk_of(&mut self, mem: Memory) -> Result<ChunkHandle, UvmError> {
        let cache = match mem {
            Memory::Device => &mut self.cache,
            Memory::Host => &mut self.host_cache,
        };
        if let Some(h) = cache.pop() {
            self.counters.chunks_from_cache += 1;
            return Ok(h);
        }
        self.counters.chunks_created += 1;
        match mem {
            // Cached runs may hold the memory a chunk needs.
            Memory::Device => self.backend.create_chunk().or_else(|e| if self.release_cached_runs() > 0 { self.backend.create_chunk() } else { Err(e) }),
            Memory::Host => {
                let h = self.backend.create_host_chunk()?;
                self.host_chunks.insert(h);
                Ok(h)
            }
        }
    }

    /// Puts a pool chunk no longer mapped back in the cache of its kind; one another process
    /// shares (exported or imported) is released instead.
    fn cache_chunk(&mut self, h: ChunkHandle) {
        if self.exported.remove(&h) | self.imported.remove(&h) {
            self.host_chunks.remove(&h);
            let _ = self.backend.release_chunk(h);
            return;
        }
        match self.memory_of_chunk(h) {
            Memory::Host => self.host_cache.push(h),
            Memory::Device => self.cache.push(h),
        }
    }

    /// Moves the committed chunks of canonical `[va, va+len)` to memory `to`, contents and
    /// mappings included (every window each is committed for; shadow untouched): managed blocks
    /// move to device memory while the GPU works on them and back when the CPU needs them. The
    /// caller makes sure nothing accesses the range meanwhile. Returns the chunks moved. A chunk
    /// whose move fails stays as it was (earlier ones stay moved).
    pub fn migrate(&mut self, va: u64, len: u64, to: Memory) -> Result<u64, UvmError> {
        let va = self.canonical(va);
        self.check_range(va, len)?;
        self.require_committed(va, len)?;
        // Runs are device memory: moved chunk by chunk to host memory, already where device
        // memory is asked for.
        if to == Memory::Host {
            self.split_runs(va, len, true)?;
        }
        let scratch = self.scratch()?;
        let mut moved = 0;
        for c in (va..va + len).step_by(self.gran as usize) {
            let (old, tags) = self.committed[&c];
            if self.memory_of_chunk(old) == to {
                continue;
            }
            let new = self.take_chunk_of(to)?;
            let first = c + plan::tag_windows(tags).next().unwrap_or(0) * self.win.size;
            let copied = self.backend.map(scratch, new, Prot::ReadWrite).and_then(|_| {
                let r = self.backend.copy(scratch, first, self.gran);
                self.backend.unmap(scratch, self.gran).and(r)
            });
            if let Err(e) = copied {
                self.cache_chunk(new);
                return Err(e);
            }
            for (i, t) in plan::tag_windows(tags).enumerate() {
                let w = c + t * self.win.size;
                let swapped = self.backend.unmap(w, self.gran).and_then(|_| self.map_in_window(w, new));
                if let Err(e) = swapped {
                    // Back to the old chunk in every window already swapped and this one.
                    for u in plan::tag_windows(tags).take(i + 1) {
                        let w = c + u * self.win.size;
                        let _ = self.backend.unmap(w, self.gran);
                        let _ = self.map_in_window(w, old);
                    }
                    self.cache_chunk(new);
                    return Err(e);
                }
            }
            self.committed.insert(c, (new, tags));
            self.cache_chunk(old);
            moved += 1;
        }
        Ok(moved)
    }

    /// The chunk of VA outside the pool that copies go through, reserved when first needed.
    fn scratch(&mut self) -> Result<u64, UvmError> {
        match self.scratch {
            Some(v) => Ok(v),
            None => Ok(*self.scratch.insert(self.backend.reserve(self.gran, 0)?)),
        }
    }

    /// Whether device commits of two chunks or more are backed by wide runs (default: yes). Off,
    /// every chunk has its own handle (the cost the runs save, for benchmarks); runs committed
    /// meanwhile stay runs.
    pub fn set_wide_commits(&mut self, on: bool) {
        self.wide_commits = on;
    }

    /// Bounds the bytes of freed wide-run handles kept for reuse (default [`RUN_CACHE_BYTES`]);
    /// handles over it are released now.
    pub fn set_run_cache_limit(&mut self, bytes: u64) {
        self.run_cache_limit = bytes;
        while self.run_cache_bytes > bytes {
            let Some(mut e) = self.run_cache.last_entry() else { break };
            let slots = *e.key();
            if let Some(h) = e.get_mut().pop() {
                let _ = self.backend.release_chunk(h);
                self.run_cache_bytes -= slots * self.gran;
                self.counters.runs_released += 1;
            }
            if e.get().is_empty() {
                e.remove();
            }
        }
    }

    /// Bytes of freed wide-run handles kept for reuse.
    pub fn cached_run_bytes(&self) -> u64 {
        self.run_cache_bytes
    }

    /// Releases every cached wide-run handle (memory pressure: creating memory failed). Returns
    /// how many.
    pub fn release_cached_runs(&mut self) -> u64 {
        let (n, limit) = (self.counters.runs_released, self.run_cache_limit);
        self.set_run_cache_limit(0);
        self.run_cache_limit = limit;
        self.counters.runs_released - n
    }

    /// The wide run the chunk behind `va` (any window) is part of: (its canonical first chunk, its
    /// bytes).
    pub fn wide_run(&self, va: u64) -> Option<(u64, u64)> {
        self.run_at(self.canonical(va) & !(self.gran - 1)).map(|(s, r)| (s, r.slots * self.gran))
    }

    /// The wide run holding canonical chunk `c`, with its first chunk.
    fn run_at(&self, c: u64) -> Option<(u64, WideRun)> {
        self.runs.range(..=c).next_back().filter(|(&s, r)| c < s + r.slots * self.gran).map(|(&s, &r)| (s, r))
    }

    /// A handle for a wide run of `slots` chunks: cached, else new (after releasing the cached
    /// ones, should creating it fail).
    fn take_run(&mut self, slots: u64) -> Result<ChunkHandle, UvmError> {
        if let Some(h) = self.run_cache.get_mut(&slots).and_then(Vec::pop) {
            self.run_cache_bytes -= slots * self.gran;
            self.counters.runs_from_cache += 1;
            return Ok(h);
        }
        let h = match self.backend.create_wide_chunk(slots) {
            Ok(h) => h,
            Err(e) if self.release_cached_runs() > 0 => self.backend.create_wide_chunk(slots).map_err(|_| e)?,
            Err(e) => return Err(e),
        };
        self.counters.runs_created += 1;
        Ok(h)
    }

    /// Puts the handle of a wide run no longer mapped in the cache of its length, or releases it
    /// when the cache would grow past its limit.
    fn cache_run(&mut self, h: ChunkHandle, slots: u64) {
        let bytes = slots * self.gran;
        if self.run_cache_bytes + bytes > self.run_cache_limit {
            let _ = self.backend.release_chunk(h);
            self.counters.runs_released += 1;
            return;
        }
        self.run_cache_bytes += bytes;
        self.run_cache.entry(slots).or_default().push(h);
    }

    /// Splits the wide runs meeting canonical `[va, va+len)` into chunk handles: every one with
    /// `all`, else those the range cuts (an operation on part of a run). A bad range splits
    /// nothing (the operation then refuses it).
    fn split_runs(&mut self, va: u64, len: u64, all: bool) -> Result<(), UvmError> {
        if self.check_range(va, len).is_err() {
            return Ok(());
        }
        let g = self.gran;
        let end = va + len;
        let met: Vec<u64> = self.runs.range(..end).rev().take_while(|(&s, r)| s + r.slots * g > va).filter(|(&s, r)| all || s < va || s + r.slots * g > end).map(|(&s, _)| s).collect();
        met.into_iter().try_for_each(|s| self.split_run(s))
    }

    /// Replaces wide run `start` by one new chunk handle per slot, mapped in each window the run
    /// is, with its bytes (copied through the scratch chunk), rights and peers' rights. The caller
    /// makes sure nothing writes the run meanwhile (the copy would miss the write), as
    /// [`Self::migrate`]'s does; an alias of the run keeps the old bytes. A failed split changes
    /// nothing.
    fn split_run(&mut self, start: u64) -> Result<(), UvmError> {
        let (g, ws) = (self.gran, self.win.size);
        let WideRun { handle: wide, slots } = self.runs[&start];
        let len = slots * g;
        let tags = self.committed[&start].1;
        let first = start + plan::tag_windows(tags).next().unwrap_or(0) * ws;
        let scratch = self.scratch()?;
        let mut chunks: Vec<ChunkHandle> = Vec::with_capacity(slots as usize);
        let mut copied = Ok(());
        for i in 0..slots {
            let h = match self.take_chunk() {
                Ok(h) => h,
                Err(e) => {
                    copied = Err(e);
                    break;
                }
            };
            chunks.push(h);
            copied = self.backend.map(scratch, h, Prot::ReadWrite).and_then(|_| {
                let r = self.backend.copy(scratch, first + i * g, g);
                self.backend.unmap(scratch, g).and(r)
            });
            if copied.is_err() {
                break;
            }
        }
        if let Err(e) = copied {
            chunks.into_iter().for_each(|h| self.cache_chunk(h));
            return Err(e);
        }
        // Rights are the run's as a whole (it is protected only whole).
        let prot = if self.any_protected { self.backend.access(first, self.device()).unwrap_or(Prot::ReadWrite) } else { Prot::ReadWrite };
        for (k, t) in plan::tag_windows(tags).enumerate() {
            let w = start + t * ws;
            let swapped = self.backend.unmap(w, len).and_then(|_| {
                for (i, &h) in chunks.iter().enumerate() {
                    self.map_in_window(w + i as u64 * g, h)?;
                }
                if prot != Prot::ReadWrite {
                    self.backend.protect(w, len, prot)?;
                    self.grant_peers(w, len, prot, false)?;
                }
                Ok(())
            });
            if let Err(e) = swapped {
                // The run back in every window already swapped and this one.
                for u in plan::tag_windows(tags).take(k + 1) {
                    let w = start + u * ws;
                    let _ = self.backend.unmap(w, len);
                    let _ = self.backend.map_wide(w, wide, slots, prot);
                    let _ = self.grant_peers(w, len, prot, false);
                }
                chunks.into_iter().for_each(|h| self.cache_chunk(h));
                return Err(e);
            }
        }
        for (i, h) in chunks.into_iter().enumerate() {
            self.committed.insert(start + i as u64 * g, (h, tags));
        }
        self.runs.remove(&start);
        self.cache_run(wide, slots);
        self.counters.runs_split += 1;
        Ok(())
    }

    /// The memory behind committed canonical chunk `va`.
    pub fn memory_of(&self, va: u64) -> Option<Memory> {
        let &(h, _) = self.committed.get(&self.canonical(va & !(self.gran - 1)))?;
        Some(self.memory_of_chunk(h))
    }

    /// Maps physical memory under canonical `[va, va+len)` and real, zeroed (= inaccessible)
    /// shadow under it, in window 0.
    pub fn commit(&mut self, va: u64, len: u64) -> Result<(), UvmError> {
        self.commit_tagged(va, len, 1)
    }

    /// [`Self::commit`] for allocations of the windows in `tags` (a bit mask): the memory mapped
    /// and real shadow under the range in each of them. Through the other windows the range
    /// stays unmapped and its shadow zero: a checked access is reported, an unchecked one faults.
    pub fn commit_tagged(&mut self, va: u64, len: u64, tags: u64) -> Result<(), UvmError> {
        self.commit_tagged_in(va, len, tags, Memory::Device)
    }

    /// [`Self::commit_tagged`] with chunks of memory `mem`.
    pub fn commit_tagged_in(&mut self, va: u64, len: u64, tags: u64, mem: Memory) -> Result<(), UvmError> {
        let mut ops = plan::plan_commit(self, va, len, tags)?;
        if mem == Memory::Device && self.wide_commits {
            ops = plan::widen(ops, self.gran);
        }
        self.apply(&ops, mem)?;
        self.counters.committed_bytes += len;
        Ok(())
    }

    /// Unmaps `[va, va+len)`; the chunks go back to the cache and the VA may be committed again.
    /// Wide runs it covers in part are split first (which a refusal leaves split).
    pub fn decommit(&mut self, va: u64, len: u64) -> Result<(), UvmError> {
        self.split_runs(va, len, false)?;
        let ops = plan::plan_release(self, va, len, false)?;
        self.apply(&ops, Memory::Device)?;
        self.counters.committed_bytes -= len;
        Ok(())
    }

    /// Unmaps `[va, va+len)` forever: the VA is never committed again, through any window, and
    /// its shadow reads 0.
    pub fn retire(&mut self, va: u64, len: u64) -> Result<(), UvmError> {
        self.retire_tagged(va, len, u64::MAX)
    }

    /// Unmaps canonical `[va, va+len)` and retires it for the windows in `tags` and those it was
    /// committed for: never mapped through them again, so a pointer through them stays a pointer
    /// into freed memory. Other windows may commit the VA again (for blocks of other tags).
    pub fn retire_tagged(&mut self, va: u64, len: u64, tags: u64) -> Result<(), UvmError> {
        self.split_runs(va, len, false)?;
        let ops = plan::plan_release_tagged(self, va, len, true, tags)?;
        self.apply_retirement(&ops, len)
    }

    /// [`Self::retire_tagged_zeroed`] in two halves, so that the driver's unmapping can run
    /// without whatever lock guards the pool: this half settles the pool's books at once (the
    /// range retired, its chunks no longer committed, shadow chunks left describing nothing
    /// released) and returns the unmaps as a [`Detached`] to [`Detached::unmap`] anywhere, whose
    /// chunks then come back with [`Self::take_back`]. Until then the range stays mapped to
    /// chunks nothing else is given: a stale access through it touches only its own freed memory
    /// (a checked one reads poisoned shadow, as after the unmap).
    pub fn retire_detached(&mut self, va: u64, len: u64, tags: u64) -> Result<Detached, UvmError> {
        self.split_runs(va, len, false)?;
        let ops = plan::plan_retire_zeroed(self, va, len, tags)?;
        let mut d = Detached { backend: self.backend.clone(), gran: self.gran, unmaps: Vec::new() };
        for op in ops {
            match op {
                plan::Op::UnmapChunk { va, tags } | plan::Op::UnmapRun { va, tags, .. } => {
                    let slots = match op {
                        plan::Op::UnmapRun { slots, .. } => slots,
                        _ => 1,
                    };
                    let bytes = slots * self.gran;
                    let h = self.committed.get(&va).ok_or(UvmError::NotCommitted(va))?.0;
                    for c in plan::chunk_spans(va, bytes, self.gran) {
                        self.forget_commitment(c, tags)?;
                        self.detached.insert(c);
                    }
                    self.runs.remove(&va);
                    let windows: Vec<(u64, u64, u64)> = plan::tag_windows(tags).map(|t| va + t * self.win.size).map(|w| (w, self.shadow_addr(w), bytes >> self.shift)).collect();
                    self.count_retirement(slots, 0);
                    d.unmaps.push(DetachedUnmap { canonical: va, len: bytes, windows, chunk: h });
                }
                // Shadow chunks are released now, not with the unmaps: a commit meanwhile must
                // find them gone from the books and from the shadow alike.
                other => {
                    self.apply_one(other, Memory::Device)?;
                }
            }
        }
        self.count_retirement(0, len);
        Ok(d)
    }

    /// The chunks of a [`Detached`] retirement, unmapped now, back in the cache (and their VA
    /// free to be released for reuse).
    pub fn take_back(&mut self, unmapped: Unmapped) {
        for (c, len, h) in unmapped.0 {
            for chunk in plan::chunk_spans(c, len, self.gran) {
                self.detached.remove(&chunk);
            }
            match len / self.gran {
                1 => self.cache_chunk(h),
                slots => self.cache_run(h, slots),
            }
        }
    }

    /// Applies a retirement's plan of `len` bytes and counts it.
    fn apply_retirement(&mut self, ops: &[plan::Op], len: u64) -> Result<(), UvmError> {
        let unmapped = ops
            .iter()
            .map(|o| match o {
                plan::Op::UnmapChunk { .. } => 1,
                plan::Op::UnmapRun { slots, .. } => *slots,
                _ => 0,
            })
            .sum();
        self.apply(ops, Memory::Device)?;
        self.count_retirement(unmapped, len);
        Ok(())
    }

    /// Counts `unmapped` chunks no longer committed and `len` bytes retired.
    fn count_retirement(&mut self, unmapped: u64, len: u64) {
        self.counters.committed_bytes -= unmapped * self.gran;
        self.counters.retired_bytes += len;
    }

    /// Drops canonical chunk `va` from the books: no longer committed, no longer counted by the
    /// shadow chunks describing it in the windows of `tags`. Returns its physical chunk.
    fn forget_commitment(&mut self, va: u64, tags: u64) -> Result<ChunkHandle, UvmError> {
        let (h, _) = self.committed.remove(&va).ok_or(UvmError::NotCommitted(va))?;
        for t in plan::tag_windows(tags) {
            for idx in plan::shadow_chunks(self.base, self.shift, self.gran, va + t * self.win.size, self.gran) {
                if let Some(e) = self.shadow.get_mut(&idx) {
                    e.1 -= 1;
                }
            }
        }
        Ok(h)
    }

    /// [`Self::retire_tagged`] of a range whose shadow the caller has already zeroed in every
    /// window committed for it (an allocator's free poisons its block's bytes; its redzones and
    /// gaps stayed zero from commit), with writes made through this pool: the unmaps wait for
    /// those writes, and no shadow is written again (a synchronous memset per chunk saved).
    pub fn retire_tagged_zeroed(&mut self, va: u64, len: u64, tags: u64) -> Result<(), UvmError> {
        self.split_runs(va, len, false)?;
        let ops = plan::plan_retire_zeroed(self, va, len, tags)?;
        self.apply_retirement(&ops, len)
    }

    /// Forgets the retirement of every chunk of canonical `[va, va+len)` that is not committed,
    /// so its VA can be committed again through any window. For an allocator that has run out of
    /// VA and would rather reuse freed ranges than fail (pointers into them may then be reissued).
    /// Returns the number of chunks released.
    pub fn unretire(&mut self, va: u64, len: u64) -> Result<u64, UvmError> {
        self.check_range(va, len)?;
        let chunks: Vec<u64> = self.retired.range(va..va + len).map(|(&c, _)| c).filter(|c| !self.committed.contains_key(c) && !self.detached.contains(c)).collect();
        for c in &chunks {
            self.retired.remove(c);
        }
        self.counters.retired_bytes -= (chunks.len() as u64 * self.gran).min(self.counters.retired_bytes);
        Ok(chunks.len() as u64)
    }

    /// Applies a plan, mapping chunks of memory `mem`; on failure undoes the operations already
    /// applied, in reverse (a chunk unmapped is mapped again with memory of its own kind).
    fn apply(&mut self, ops: &[plan::Op], mem: Memory) -> Result<(), UvmError> {
        let mut released = Vec::with_capacity(ops.len());
        for op in ops {
            match self.apply_one(*op, mem) {
                Ok(r) => released.push(r),
                Err(e) => {
                    for (done, r) in ops.iter().zip(released).rev() {
                        let _ = self.undo_one(*done, r.unwrap_or(mem));
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The memory of chunk `h`.
    fn memory_of_chunk(&self, h: ChunkHandle) -> Memory {
        if self.host_chunks.contains(&h) {
            Memory::Host
        } else {
            Memory::Device
        }
    }

    fn shadow_va(&self, idx: u64) -> u64 {
        self.shadow_base + idx * self.gran
    }

    /// Applies one operation; a `MapChunk` maps memory `mem`. Returns the memory of the chunk an
    /// `UnmapChunk` released (for its rollback).
    fn apply_one(&mut self, op: plan::Op, mem: Memory) -> Result<Option<Memory>, UvmError> {
        use plan::Op;
        match op {
            Op::BackShadow { idx } if self.shadow.contains_key(&idx) => {
                // Idle: still backed, and all zero.
                self.idle_shadow.retain(|&i| i != idx);
            }
            Op::BackShadow { idx } => {
                self.split_wide_run(self.shadow_va(idx))?;
                let h = self.back_real(self.shadow_va(idx), Stream::SYNC)?;
                self.shadow.insert(idx, (h, 0));
            }
            Op::MapChunk { va, tags } => {
                let h = match self.supply.pop_front() {
                    Some(h) => h,
                    None => self.take_chunk_of(mem)?,
                };
                // Only in the windows committed for: each mapping is a driver call per chunk.
                for t in plan::tag_windows(tags) {
                    if let Err(e) = self.map_in_window(va + t * self.win.size, h) {
                        for done in plan::tag_windows(tags).take_while(|&d| d < t) {
                            let _ = self.backend.unmap(va + done * self.win.size, self.gran);
                        }
                        self.cache_chunk(h);
                        return Err(e);
                    }
                }
                self.committed.insert(va, (h, tags));
                for t in plan::tag_windows(tags) {
                    for idx in plan::shadow_chunks(self.base, self.shift, self.gran, va + t * self.win.size, self.gran) {
                        if let Some(e) = self.shadow.get_mut(&idx) {
                            e.1 += 1;
                        }
                    }
                }
            }
            Op::ZeroShadow { va, len } => self.backend.fill(self.shadow_addr(va), len >> self.shift, 0, Stream::SYNC)?,
            Op::UnmapChunk { va, tags } => {
                let (h, _) = *self.committed.get(&va).ok_or(UvmError::NotCommitted(va))?;
                // The chunk's last shadow writes (a free's poisoning, queued on the freeing stream
                // after the work that still used the memory) must have run: then that work is
                // done with the memory too, and no write lands on shadow released below.
                for t in plan::tag_windows(tags) {
                    self.backend.wait_writes(self.shadow_addr(va + t * self.win.size), self.gran >> self.shift)?;
                }
                for t in plan::tag_windows(tags) {
                    self.backend.unmap(va + t * self.win.size, self.gran)?;
                }
                self.forget_commitment(va, tags)?;
                self.cache_chunk(h);
                return Ok(Some(self.memory_of_chunk(h)));
            }
            Op::ReleaseShadow { idx } => {
                if self.shadow.contains_key(&idx) && !self.idle_shadow.contains(&idx) {
                    self.idle_shadow.push_back(idx);
                }
                self.trim_idle_shadow(self.idle_shadow_limit)?;
            }
            Op::Retire { va, tags } => {
                *self.retired.entry(va).or_insert(0) |= tags;
            }
            Op::MapRun { va, slots, tags } => {
                let len = slots * self.gran;
                let h = match self.take_run(slots) {
                    Ok(h) => h,
                    // No memory for a run this long (or no wide handles): chunk by chunk.
                    Err(_) => return self.map_chunks(va, slots, tags, mem),
                };
                for t in plan::tag_windows(tags) {
                    let w = va + t * self.win.size;
                    let mapped = self.backend.map_wide(w, h, slots, Prot::ReadWrite).and_then(|_| {
                        self.grant_peers(w, len, Prot::ReadWrite, false).inspect_err(|_| {
                            let _ = self.backend.unmap(w, len);
                        })
                    });
                    if let Err(e) = mapped {
                        for done in plan::tag_windows(tags).take_while(|&d| d < t) {
                            let _ = self.backend.unmap(va + done * self.win.size, len);
                        }
                        self.cache_run(h, slots);
                        return Err(e);
                    }
                }
                for c in plan::chunk_spans(va, len, self.gran) {
                    self.committed.insert(c, (h, tags));
                }
                self.runs.insert(va, WideRun { handle: h, slots });
                for t in plan::tag_windows(tags) {
                    for idx in plan::shadow_chunks(self.base, self.shift, self.gran, va + t * self.win.size, len) {
                        if let Some(e) = self.shadow.get_mut(&idx) {
                            e.1 += plan::chunk_spans(va + t * self.win.size, len, self.gran).filter(|&c| plan::shadow_chunks(self.base, self.shift, self.gran, c, self.gran).contains(&idx)).count()
                                as u64;
                        }
                    }
                }
            }
            Op::UnmapRun { va, slots, tags } => {
                let len = slots * self.gran;
                let Some(WideRun { handle: h, .. }) = self.runs.get(&va).copied().filter(|r| r.slots == slots) else {
                    // Undoing a MapRun that fell back to chunks.
                    for c in plan::chunk_spans(va, len, self.gran) {
                        self.apply_one(Op::UnmapChunk { va: c, tags }, mem)?;
                    }
                    return Ok(Some(Memory::Device));
                };
                for t in plan::tag_windows(tags) {
                    self.backend.wait_writes(self.shadow_addr(va + t * self.win.size), len >> self.shift)?;
                }
                for t in plan::tag_windows(tags) {
                    self.backend.unmap(va + t * self.win.size, len)?;
                }
                for c in plan::chunk_spans(va, len, self.gran) {
                    self.forget_commitment(c, tags)?;
                }
                self.runs.remove(&va);
                self.cache_run(h, slots);
                return Ok(Some(Memory::Device));
            }
        }
        Ok(None)
    }

    /// Puts the zero chunk back under the oldest idle shadow chunks until at most `keep` are left.
    /// One whose unmap fails stays idle (and backed).
    fn trim_idle_shadow(&mut self, keep: usize) -> Result<(), UvmError> {
        while self.idle_shadow.len() > keep {
            let idx = self.idle_shadow.pop_front().expect("longer than keep");
            let sva = self.shadow_va(idx);
            let Some(&(h, _)) = self.shadow.get(&idx) else { continue };
            // Writes still queued on it (a free's poisoning) must land before the unmap.
            if let Err(e) = self.backend.wait_writes(sva, self.gran).and_then(|_| self.backend.unmap(sva, self.gran)) {
                self.idle_shadow.push_front(idx);
                return Err(e);
            }
            self.shadow.remove(&idx);
            self.cache.push(h);
            self.backend.map(sva, self.zero_chunk, Prot::ReadOnly)?;
            self.grant_peers(sva, self.gran, Prot::ReadOnly, true)?;
        }
        Ok(())
    }

    /// Bounds the shadow chunks kept backed while they describe no committed chunk (default
    /// [`IDLE_SHADOW_CHUNKS`]; 0: the zero chunk goes back under a shadow chunk as soon as its last
    /// chunk is released); those over it are released now.
    pub fn set_idle_shadow_limit(&mut self, chunks: usize) -> Result<(), UvmError> {
        self.idle_shadow_limit = chunks;
        self.trim_idle_shadow(chunks)
    }

    /// Shadow chunks kept backed while they describe nothing.
    pub fn idle_shadow_chunks(&self) -> usize {
        self.idle_shadow.len()
    }

    /// Maps the `slots` chunks from `va` one chunk handle each (a run for which no wide handle
    /// could be had); on failure unmaps those mapped.
    fn map_chunks(&mut self, va: u64, slots: u64, tags: u64, mem: Memory) -> Result<Option<Memory>, UvmError> {
        for (i, c) in plan::chunk_spans(va, slots * self.gran, self.gran).enumerate() {
            if let Err(e) = self.apply_one(plan::Op::MapChunk { va: c, tags }, mem) {
                for done in plan::chunk_spans(va, i as u64 * self.gran, self.gran) {
                    let _ = self.apply_one(plan::Op::UnmapChunk { va: done, tags }, mem);
                }
                return Err(e);
            }
        }
        Ok(None)
    }

    /// Maps chunk `h` read-write at `va` (one window's view of it), with the peers' access.
    fn map_in_window(&self, va: u64, h: ChunkHandle) -> Result<(), UvmError> {
        match self.memory_of_chunk(h) {
            Memory::Device => self.backend.map(va, h, Prot::ReadWrite)?,
            Memory::Host => self.backend.map_host(va, h, Prot::ReadWrite)?,
        }
        if let Err(e) = self.grant_peers(va, self.gran, Prot::ReadWrite, self.memory_of_chunk(h) == Memory::Host) {
            let _ = self.backend.unmap(va, self.gran);
            return Err(e);
        }
        Ok(())
    }

    /// Replaces the zero chunk at `va` (shadow or extent table) with a real chunk, zero-filled on
    /// `stream` (so that writes ordered after it on that stream land after the fill).
    fn back_real(&mut self, va: u64, stream: Stream) -> Result<ChunkHandle, UvmError> {
        let h = self.take_chunk()?;
        let r = self
            .backend
            .unmap(va, self.gran)
            .and_then(|_| self.backend.map(va, h, Prot::ReadWrite))
            .and_then(|_| self.grant_peers(va, self.gran, Prot::ReadOnly, true))
            .and_then(|_| self.backend.fill(va, self.gran, 0, stream));
        if let Err(e) = r {
            let _ = self.backend.unmap(va, self.gran);
            let _ = self.backend.map(va, self.zero_chunk, Prot::ReadOnly);
            let _ = self.grant_peers(va, self.gran, Prot::ReadOnly, true);
            self.cache.push(h);
            return Err(e);
        }
        Ok(h)
    }

    /// Best-effort inverse of an applied operation (rollback); an `UnmapChunk` is undone with a
    /// chunk of memory `mem`, the kind it released.
    fn undo_one(&mut self, op: plan::Op, mem: Memory) -> Result<(), UvmError> {
        use plan::Op;
        match op {
            Op::BackShadow { idx } => self.apply_one(Op::ReleaseShadow { idx }, mem).map(drop),
            Op::MapChunk { va, tags } => self.apply_one(Op::UnmapChunk { va, tags }, mem).map(drop),
            Op::UnmapChunk { va, tags } => self.apply_one(Op::MapChunk { va, tags }, mem).map(drop),
            Op::ReleaseShadow { idx } => self.apply_one(Op::BackShadow { idx }, mem).map(drop),
            Op::MapRun { va, slots, tags } => self.apply_one(Op::UnmapRun { va, slots, tags }, mem).map(drop),
            Op::UnmapRun { va, slots, tags } => self.apply_one(Op::MapRun { va, slots, tags }, mem).map(drop),
            Op::ZeroShadow { .. } => Ok(()),
            Op::Retire { va, tags } => {
                if let Some(m) = self.retired.get_mut(&va) {
                    *m &= !tags;
                    if *m == 0 {
                        self.retired.remove(&va);
                    }
                }
                Ok(())
            }
        }
    }

    /// Every chunk of `[va, va+len)` (one window's addresses) is committed.
    fn require_committed(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.check_range(va, len)?;
        for c in plan::chunk_spans(va, len, self.gran) {
            if !self.committed.contains_key(&self.canonical(c)) {
                return Err(UvmError::NotCommitted(c));
            }
        }
        Ok(())
    }

    /// Changes the protection of committed `[va, va+len)`. Ranges finer than a chunk are allowed
    /// when the backend protects at a finer granularity (the patched nvidia-uvm: 64 KiB / 4 KiB).
    pub fn protect(&mut self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        let fine = self.backend.guard_granularity();
        plan::check_aligned(va, len, fine)?;
        if !self.contains(va, len) {
            return Err(UvmError::OutsidePool { va, len });
        }
        let (first, last) = (va - va % self.gran, (va + len - 1) - (va + len - 1) % self.gran);
        self.require_committed(first, last + self.gran - first)?;
        // Access is set on whole mappings: a run protected in part becomes chunks.
        self.split_runs(self.canonical(first), last + self.gran - first, false)?;
        self.backend.protect(va, len, prot)?;
        self.any_protected |= prot != Prot::ReadWrite;
        // Peers get the same rights. Finer ranges are the patched module's, which protects in
        // the page tables every device uses.
        if va.is_multiple_of(self.gran) && len.is_multiple_of(self.gran) {
            let host = self.memory_of(va) == Some(Memory::Host);
            self.grant_peers(va, len, prot, host)?;
        }
        Ok(())
    }

    /// The pool address behind `va`: for an address inside an alias range (GPU-only addresses of
    /// the patched module included) the address it mirrors; any other address unchanged. Pointers
    /// go through this before they reach driver API calls or the allocator's tables.
    /// A tagged pool address (any window) maps to window 0's.
    pub fn canonical(&self, va: u64) -> u64 {
        self.win.canonical(self.alias_source(va))
    }

    /// The pool address an alias address mirrors (its window kept); any other address unchanged.
    pub fn alias_source(&self, va: u64) -> u64 {
        match self.aliases.range(..=va).next_back() {
            Some((&a, &(src, len))) if va < a + len => plan::alias_addr(a, src, va),
            _ => va,
        }
    }

    /// Lets device `peer` read and write every chunk of this pool, committed now or later, and
    /// read its shadow and extent table, so that checked kernels running there check their
    /// accesses to this pool against its shadow. Chunks keep the rights [`Self::protect`] gave
    /// them (a chunk's own rights at its start). Granting twice, or to the pool's own device,
    /// changes nothing; a failed grant is undone.
    pub fn grant_peer_access(&mut self, peer: i32) -> Result<(), UvmError> {
        if peer == self.device() || self.peers.contains(&peer) {
            return Ok(());
        }
        if let Err(e) = self.set_peer_everywhere(peer, true) {
            let _ = self.set_peer_everywhere(peer, false);
            return Err(e);
        }
        self.peers.push(peer);
        Ok(())
    }

    /// Takes back what [`Self::grant_peer_access`] gave `peer`: its kernels fault on this pool's
    /// memory and shadow again. Revoking a device never granted changes nothing.
    pub fn revoke_peer_access(&mut self, peer: i32) -> Result<(), UvmError> {
        let Some(i) = self.peers.iter().position(|&p| p == peer) else { return Ok(()) };
        self.peers.remove(i);
        self.set_peer_everywhere(peer, false)?;
        // A host reader keeps the host memory and the shadow.
        if self.host_readers.contains(&peer) {
            self.set_host_reader_everywhere(peer, true)?;
        }
        Ok(())
    }

    /// Lets device `reader` read and write this pool's host memory ([`Memory::Host`] chunks:
    /// pinned and managed blocks), committed now or later, and read its shadow and extent table
    /// (all of it: the checks index it by address), so that checked kernels running there check
    /// their accesses to that memory against this pool's shadow. Device chunks are not granted
    /// ([`Self::grant_peer_access`] is what a context's peer access gives). Granting twice, or to
    /// the pool's own device, changes nothing; a failed grant is undone.
    pub fn grant_host_access(&mut self, reader: i32) -> Result<(), UvmError> {
        if reader == self.device() || self.host_readers.contains(&reader) {
            return Ok(());
        }
        if let Err(e) = self.set_host_reader_everywhere(reader, true) {
            let _ = self.set_host_reader_everywhere(reader, false);
            return Err(e);
        }
        self.host_readers.push(reader);
        Ok(())
    }

    /// The devices granted this pool's host memory and shadow.
    pub fn host_readers(&self) -> &[i32] {
        &self.host_readers
    }

    /// Sets `reader`'s rights over the pool's host chunks (their own rights, or none) and its
    /// shadow and extent table (read-only, or none). A peer has all of it already, and keeps it.
    fn set_host_reader_everywhere(&self, reader: i32, on: bool) -> Result<(), UvmError> {
        if self.peers.contains(&reader) {
            return Ok(());
        }
        let b = &self.backend;
        for (&c, &(h, tags)) in &self.committed {
            if self.memory_of_chunk(h) != Memory::Host {
                continue;
            }
            for t in plan::tag_windows(tags) {
                let va = c + t * self.win.size;
                let p = match (on, self.any_protected) {
                    (false, _) => Prot::None,
                    (true, false) => Prot::ReadWrite,
                    (true, true) => b.access(va, b.device()).unwrap_or(Prot::ReadWrite),
                };
                b.set_peer_access(va, self.gran, reader, p)?;
            }
        }
        let ro = if on { Prot::ReadOnly } else { Prot::None };
        b.set_peer_access(self.shadow_base, self.shadow_size, reader, ro)?;
        b.set_peer_access(self.extent_base, self.extent_size, reader, ro)
    }

    /// The devices granted access to this pool.
    pub fn peers(&self) -> &[i32] {
        &self.peers
    }

    /// Sets `peer`'s rights over every mapping of the pool: granted (`on`), the chunks' own
    /// rights and read-only shadow and extent table; else none. Stops at the first refusal.
    /// Adjacent chunks of a window are set in one call (a driver call each otherwise: 40 000 for
    /// 80 GiB of 2 MiB chunks), each chunk alone once some were protected.
    fn set_peer_everywhere(&self, peer: i32, on: bool) -> Result<(), UvmError> {
        let b = &self.backend;
        let per_chunk = on && self.any_protected;
        for t in 0..self.win.count {
            let mut run: Option<(u64, u64)> = None;
            // One piece per chunk handle; a wide run is one piece (access is set on whole mappings).
            let pieces = self.committed.iter().filter(|(_, &(_, tags))| tags >> t & 1 == 1).filter_map(|(&c, _)| match self.run_at(c) {
                Some((s, r)) if s == c => Some((c + t * self.win.size, r.slots * self.gran)),
                Some(_) => None,
                None => Some((c + t * self.win.size, self.gran)),
            });
            for (va, piece) in pieces.chain(std::iter::once((u64::MAX, 0))) {
                match run {
                    Some((s, l)) if s + l == va && !per_chunk => run = Some((s, l + piece)),
                    _ => {
                        if let Some((s, l)) = run {
                            let p = match (on, per_chunk) {
                                (false, _) => Prot::None,
                                (true, false) => Prot::ReadWrite,
                                (true, true) => b.access(s, b.device()).unwrap_or(Prot::ReadWrite),
                            };
                            b.set_peer_access(s, l, peer, p)?;
                        }
                        run = (va != u64::MAX).then_some((va, piece));
                    }
                }
            }
        }
        for (&a, &(_, len)) in &self.aliases {
            b.set_peer_access(a, len, peer, if on { Prot::ReadWrite } else { Prot::None })?;
        }
        let ro = if on { Prot::ReadOnly } else { Prot::None };
        b.set_peer_access(self.shadow_base, self.shadow_size, peer, ro)?;
        b.set_peer_access(self.extent_base, self.extent_size, peer, ro)
    }

    /// What a checked kernel on device `device` needs to read `out.len()` bytes at `va`: read
    /// rights over the bytes and over their shadow. Reads the bytes, or names the first address
    /// the device may not read ([`UvmError::NoAccess`]). The rights are the backend's: on the
    /// CUDA VMM the driver's (`cuMemGetAccess`), on the host backend its model of them.
    pub fn read_as(&self, device: i32, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        let len = out.len() as u64;
        if len == 0 || !self.contains(va, len) {
            return Err(UvmError::OutsidePool { va, len });
        }
        let (s, l) = plan::align_out(va, len, self.gran).ok_or(UvmError::OutsidePool { va, len })?;
        let (ss, sl) = plan::shadow_range(self.base, self.shadow_base, self.shift, va, len);
        let (ss, sl) = plan::align_out(ss, sl, self.gran).ok_or(UvmError::OutsidePool { va, len })?;
        for at in plan::chunk_spans(s, l, self.gran).chain(plan::chunk_spans(ss, sl, self.gran)) {
            match self.backend.access(at, device)? {
                Prot::ReadWrite | Prot::ReadOnly => {}
                Prot::None => return Err(UvmError::NoAccess { device, va: at }),
            }
        }
        self.backend.read(va, out)
    }

    /// File descriptors of the chunks under committed `[va, va+len)` (chunk-aligned, any window),
    /// in address order, from which another process maps them ([`Self::commit_imported`]). An
    /// exported chunk is never reused here once unmapped: importers may still map it.
    pub fn export(&mut self, va: u64, len: u64) -> Result<Vec<OwnedFd>, UvmError> {
        self.require_committed(va, len)?;
        // Shared as chunks, whatever backs them here (an importer maps chunk handles).
        self.split_runs(self.canonical(va), len, true)?;
        let mut fds = Vec::with_capacity((len / self.gran) as usize);
        for c in plan::chunk_spans(va, len, self.gran) {
            let (h, _) = self.committed[&self.canonical(c)];
            fds.push(self.backend.export_chunk(h)?);
            self.exported.insert(h);
        }
        Ok(fds)
    }

    /// Maps the chunks another process exported (`fds`, in address order) at canonical
    /// `[va, va + fds.len() chunks)` through the windows in `tags`, with zeroed (inaccessible)
    /// shadow under them, as [`Self::commit_tagged`] does with chunks of its own: the caller then
    /// writes the shadow of the imported allocation's bytes, so that its accesses are checked. The
    /// chunks are released, never cached, when unmapped. A failed call maps nothing.
    pub fn commit_imported(&mut self, va: u64, tags: u64, fds: Vec<OwnedFd>) -> Result<(), UvmError> {
        let len = fds.len() as u64 * self.gran;
        let ops = plan::plan_commit(self, va, len, tags)?;
        for fd in fds {
            match self.backend.import_chunk(fd) {
                Ok(h) => {
                    self.imported.insert(h);
                    self.supply.push_back(h);
                }
                Err(e) => {
                    self.drop_supply();
                    return Err(e);
                }
            }
        }
        let r = self.apply(&ops, Memory::Device);
        self.drop_supply();
        r?;
        self.counters.committed_bytes += len;
        Ok(())
    }

    /// Releases imported chunks a commit did not map.
    fn drop_supply(&mut self) {
        while let Some(h) = self.supply.pop_front() {
            self.imported.remove(&h);
            let _ = self.backend.release_chunk(h);
        }
    }

    /// Maps the chunks under committed `[src, src+len)` at a new VA range; returns its address.
    pub fn alias(&mut self, src: u64, len: u64) -> Result<u64, UvmError> {
        self.require_committed(src, len)?;
        // A run mirrored in part becomes chunks; one mirrored whole is mapped whole.
        self.split_runs(self.canonical(src), len, false)?;
        let a = self.backend.reserve(len, 0)?;
        let mut off = 0;
        while off < len {
            let c = self.canonical(src + off);
            let (h, _) = self.committed[&c];
            let (mapped, step) = match self.run_at(c) {
                Some((_, r)) => (self.backend.map_wide(a + off, h, r.slots, Prot::ReadWrite), r.slots * self.gran),
                None => (self.backend.map(a + off, h, Prot::ReadWrite), self.gran),
            };
            if let Err(e) = mapped {
                let _ = self.backend.unmap(a, off);
                let _ = self.backend.free_va(a, len);
                return Err(e);
            }
            off += step;
        }
        if let Err(e) = self.grant_peers(a, len, Prot::ReadWrite, false) {
            let _ = self.backend.unmap(a, len);
            let _ = self.backend.free_va(a, len);
            return Err(e);
        }
        self.aliases.insert(a, (src, len));
        Ok(a)
    }

    pub fn unalias(&mut self, alias: u64) -> Result<(), UvmError> {
        let (_, len) = self.aliases.remove(&alias).ok_or(UvmError::NotAlias(alias))?;
        self.backend.unmap(alias, len)?;
        self.backend.free_va(alias, len)
    }

    /// Writes shadow bytes for the granules starting at pool address `va` (granule-aligned).
    pub fn write_shadow(&self, va: u64, bytes: &[u8], stream: Stream) -> Result<(), UvmError> {
        self.check_shadow_target(va, bytes.len() as u64)?;
        self.backend.write(self.shadow_addr(va), bytes, stream)
    }

    /// Sets `n` shadow bytes, for the granules starting at pool address `va`, to `byte`.
    pub fn fill_shadow(&self, va: u64, n: u64, byte: u8, stream: Stream) -> Result<(), UvmError> {
        self.check_shadow_target(va, n)?;
        self.backend.fill(self.shadow_addr(va), n, byte, stream)
    }

    pub fn read_shadow(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        if !self.contains(va, (out.len() as u64) << self.shift) {
            return Err(UvmError::OutsidePool { va, len: (out.len() as u64) << self.shift });
        }
        self.backend.read(self.shadow_addr(va), out)
    }

    /// Shadow may only be written where the pool is committed for the window written (elsewhere it
    /// is the read-only zero chunk).
    fn check_shadow_target(&self, va: u64, n: u64) -> Result<(), UvmError> {
        let len = n << self.shift;
        if !va.is_multiple_of(1 << self.shift) || !self.contains(va, len) {
            return Err(UvmError::OutsidePool { va, len });
        }
        let (s, l) = plan::align_out(va, len, self.gran).ok_or(UvmError::OutsidePool { va, len })?;
        for c in plan::chunk_spans(s, l, self.gran) {
            // Committed, and described by the shadow of the window `va` is in.
            match self.committed.get(&self.canonical(c)) {
                Some(&(_, tags)) if tags >> self.tag_of(c) & 1 == 1 => {}
                _ => return Err(UvmError::NotCommitted(c)),
            }
        }
        Ok(())
    }

    /// Writes the extent entry `{start, end}` for every pool block intersecting `[start, end)`,
    /// ordered on `stream`. Call it only once `[start, end)` is one live allocation whose shadow
    /// already says so (earlier on the same stream): checked code then trusts the entry instead of
    /// the shadow. A block shared with another range keeps the entry set last. The range must be
    /// committed. Table chunks it needs are backed by real, zeroed memory first and stay until
    /// drop (at most `extent_table_size`; giving one back would have to wait for every stream),
    /// so a failed call leaves no entry but may leave table chunks backed.
    pub fn set_extent(&mut self, start: u64, end: u64, stream: Stream) -> Result<(), UvmError> {
        let entries = self.extent_entries(start, end)?;
        let (blocks, len) = plan::align_out(start, end - start, self.gran).ok_or(UvmError::OutsidePool { va: start, len: end - start })?;
        self.require_committed(blocks, len)?;
        for idx in plan::extent_chunks(&entries, self.gran) {
            if !self.extent_chunks.contains_key(&idx) {
                let h = self.back_real(self.extent_base + idx * self.gran, stream)?;
                self.extent_chunks.insert(idx, h);
                self.counters.extent_bytes += self.gran;
            }
        }
        let entry = ExtentEntry { start, end }.to_bytes();
        let bytes = entry.repeat((entries.end - entries.start) as usize);
        if let Err(e) = self.backend.write(self.extent_addr(entries.start), &bytes, stream) {
            // A partial write must not leave a claim behind.
            let _ = self.clear_extent(start, end, stream);
            return Err(e);
        }
        Ok(())
    }

    /// Zeroes the extent entries of the pool blocks intersecting `[start, end)`, ordered on
    /// `stream`. Call it before (in stream order) the range stops being a live allocation: an
    /// entry must never outlive it. Zero proves nothing, so clearing a shared block is safe.
    pub fn clear_extent(&self, start: u64, end: u64, stream: Stream) -> Result<(), UvmError> {
        let entries = self.extent_entries(start, end)?;
        // Entries in table chunks still on the zero chunk read 0 already (and are read-only).
        let per_chunk = self.gran / plan::EXTENT_ENTRY_SIZE;
        for idx in plan::extent_chunks(&entries, self.gran) {
            if self.extent_chunks.contains_key(&idx) {
                let first = entries.start.max(idx * per_chunk);
                let last = entries.end.min((idx + 1) * per_chunk);
                self.backend.fill(self.extent_addr(first), (last - first) * plan::EXTENT_ENTRY_SIZE, 0, stream)?;
            }
        }
        Ok(())
    }

    /// Reads `out.len()` extent entries from entry `first` on, as (start, end) (all zero: no claim).
    pub fn read_extents(&self, first: u64, out: &mut [(u64, u64)]) -> Result<(), UvmError> {
        let entries = self.size / self.gran;
        if first.checked_add(out.len() as u64).is_none_or(|last| last > entries) {
            return Err(UvmError::OutsidePool { va: self.base + first * self.gran, len: out.len() as u64 * self.gran });
        }
        let mut bytes = vec![0u8; out.len() * EXTENT_ENTRY_SIZE];
        self.backend.read(self.extent_addr(first), &mut bytes)?;
        for (e, b) in out.iter_mut().zip(bytes.chunks_exact(EXTENT_ENTRY_SIZE)) {
            let entry = ExtentEntry::from_bytes(b.try_into().expect("one entry"));
            *e = (entry.start, entry.end);
        }
        Ok(())
    }

    /// Entries of `[start, end)`, which must be non-empty and inside the pool.
    fn extent_entries(&self, start: u64, end: u64) -> Result<std::ops::Range<u64>, UvmError> {
        if start >= end {
            return Err(UvmError::BadExtent { start, end });
        }
        if !self.contains(start, end - start) {
            return Err(UvmError::OutsidePool { va: start, len: end - start });
        }
        Ok(plan::extent_entries(self.base, self.gran, start, end))
    }

    fn extent_addr(&self, entry: u64) -> u64 {
        self.extent_base + entry * plan::EXTENT_ENTRY_SIZE
    }
}

impl plan::PoolState for Pool {
    fn base(&self) -> u64 {
        self.base
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn shift(&self) -> u32 {
        self.shift
    }
    fn gran(&self) -> u64 {
        self.gran
    }
    fn window_size(&self) -> u64 {
        self.win.size
    }
    fn committed_tags(&self, chunk_va: u64) -> Option<u64> {
        self.committed.get(&chunk_va).map(|e| e.1)
    }
    fn retired_tags(&self, chunk_va: u64) -> u64 {
        self.retired.get(&chunk_va).copied().unwrap_or(0)
    }
    fn shadow_refs(&self, idx: u64) -> u64 {
        self.shadow.get(&idx).map_or(0, |e| e.1)
    }
    fn wide_run(&self, chunk_va: u64) -> Option<(u64, u64)> {
        self.run_at(chunk_va).map(|(s, r)| (s, r.slots))
    }
}

/// The unmaps of a retirement whose books [`Pool::retire_detached`] settled.
#[must_use = "its chunks stay mapped and out of the cache until unmapped and taken back"]
pub struct Detached {
    backend: Arc<dyn Backend>,
    gran: u64,
    unmaps: Vec<DetachedUnmap>,
}

/// The chunks a [`Detached`] retirement unmapped, for [`Pool::take_back`].
#[must_use = "the chunks stay out of the cache until taken back"]
pub struct Unmapped(Vec<(u64, u64, ChunkHandle)>);

/// One handle's unmaps: a chunk, or a wide run whole.
struct DetachedUnmap {
    canonical: u64,
    /// Bytes: the chunk's, or the run's.
    len: u64,
    /// Each window's view of the chunk, with the shadow describing it there (address, bytes).
    windows: Vec<(u64, u64, u64)>,
    chunk: ChunkHandle,
}

impl Detached {
    /// Chunks to unmap (each of a wide run's counted).
    pub fn len(&self) -> usize {
        self.unmaps.iter().map(|u| (u.len / self.gran) as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.unmaps.is_empty()
    }

    /// Unmaps every chunk, each after the last shadow writes the pool logged for it (a free's
    /// poisoning, queued after the work that still used the memory), and returns the chunks for
    /// [`Pool::take_back`]. A chunk whose unmap fails is left out (never reused while mapped);
    /// the first error is returned beside the chunks.
    pub fn unmap(self) -> (Unmapped, Result<(), UvmError>) {
        let mut back = Vec::with_capacity(self.unmaps.len());
        let mut result = Ok(());
        for u in self.unmaps {
            let r = u.windows.iter().try_for_each(|&(_, shadow, n)| self.backend.wait_writes(shadow, n)).and_then(|_| u.windows.iter().try_for_each(|&(w, _, _)| self.backend.unmap(w, u.len)));
            match r {
                Ok(()) => back.push((u.canonical, u.len, u.chunk)),
                Err(e) if result.is_ok() => result = Err(e),
                Err(_) => {}
            }
        }
        (Unmapped(back), result)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let b = &self.backend;
        for (&a, &(_, len)) in &self.aliases {
            let _ = b.unmap(a, len);
            let _ = b.free_va(a, len);
        }
        for (&c, &(h, tags)) in &self.committed {
            // A wide run once, whole, with its first chunk.
            let len = match self.run_at(c) {
                Some((s, r)) if s == c => r.slots * self.gran,
                Some(_) => continue,
                None => self.gran,
            };
            for t in plan::tag_windows(tags) {
                let _ = b.unmap(c + t * self.win.size, len);
            }
            let _ = b.release_chunk(h);
        }
        for &h in self.run_cache.values().flatten() {
            let _ = b.release_chunk(h);
        }
        let _ = b.unmap(self.shadow_base, self.shadow_size);
        for &(h, _) in self.shadow.values() {
            let _ = b.release_chunk(h);
        }
        if let Some(w) = self.wide_zero {
            let _ = b.release_chunk(w);
        }
        let _ = b.unmap(self.extent_base, self.extent_size);
        for &h in self.extent_chunks.values() {
            let _ = b.release_chunk(h);
        }
        for &h in self.cache.iter().chain(&self.host_cache) {
            let _ = b.release_chunk(h);
        }
        let _ = b.release_chunk(self.zero_chunk);
        match &self.span {
            // The span frees the VA once its last pool is gone.
            Some((span, slot)) => span.release(*slot),
            None => {
                let _ = b.free_va(self.shadow_base, self.shadow_size);
                let _ = b.free_va(self.extent_base, self.extent_size);
                let _ = b.free_va(self.base, self.size);
            }
        }
        if let Some(v) = self.scratch {
            let _ = b.free_va(v, self.gran);
        }
    }
}
