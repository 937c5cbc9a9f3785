//! Mapping arithmetic, kept free of any backend: alignment, chunk spans, shadow ranges, alias offsets.
//! The kernel patch mirrors these functions in C (`kmod-patch/src/gasan_map_math.c`).

use crate::UvmError;

/// `[va, va+len)` must be non-empty, `gran`-aligned on both ends and not wrap.
pub fn check_aligned(va: u64, len: u64, gran: u64) -> Result<(), UvmError> {
    if len == 0 || !gran.is_power_of_two() || !va.is_multiple_of(gran) || !len.is_multiple_of(gran) || va.checked_add(len).is_none() {
        return Err(UvmError::Misaligned { va, len, gran });
    }
    Ok(())
}

/// Smallest `gran`-aligned range covering `[va, va+len)`.
pub fn align_out(va: u64, len: u64, gran: u64) -> Option<(u64, u64)> {
    if !gran.is_power_of_two() {
        return None;
    }
    let start = va & !(gran - 1);
    let end = va.checked_add(len)?.checked_add(gran - 1)? & !(gran - 1);
    Some((start, end - start))
}

/// Is `[va, va+len)` inside `[base, base+size)`?
pub fn contains(base: u64, size: u64, va: u64, len: u64) -> bool {
    va >= base && va.checked_add(len).is_some_and(|e| e <= base + size)
}

/// Shadow bytes `[start, start+len)` describing pool range `[va, va+len)` at scale `shift`.
pub fn shadow_range(pool_base: u64, shadow_base: u64, shift: u32, va: u64, len: u64) -> (u64, u64) {
    let first = (va - pool_base) >> shift;
    let last = (va - pool_base + len).div_ceil(1 << shift);
    (shadow_base + first, last - first)
}

/// Indices of the shadow chunks (each `gran` bytes of shadow) that describe pool range `[va, va+len)`.
pub fn shadow_chunks(pool_base: u64, shift: u32, gran: u64, va: u64, len: u64) -> std::ops::Range<u64> {
    let (s, l) = shadow_range(pool_base, 0, shift, va, len);
    (s / gran)..(s + l).div_ceil(gran)
}

/// The chunk-sized pieces of an aligned range.
pub fn chunk_spans(va: u64, len: u64, gran: u64) -> impl Iterator<Item = u64> {
    (0..len / gran).map(move |i| va + i * gran)
}

/// Address of `va`'s alias in an alias range that mirrors `[src, src+len)` at `alias_base`.
pub fn alias_addr(src: u64, alias_base: u64, va: u64) -> u64 {
    alias_base + (va - src)
}

/// The tag windows of a pool: `count` equal windows of `size` bytes from `base`, each mapping
/// the same memory. Window 0 holds the canonical addresses; a block of tag t is seen at
/// `canonical + t · size`. The arithmetic of tagged addresses, stated once for the pool and the
/// allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub base: u64,
    pub size: u64,
    pub count: u64,
}

impl Windows {
    /// (canonical address, tag) of `va`, or `None` outside the pool.
    pub fn split(&self, va: u64) -> Option<(u64, u64)> {
        let off = va.checked_sub(self.base)?;
        (off / self.size < self.count).then(|| (self.base + off % self.size, off / self.size))
    }
    /// `va`'s canonical address (window 0's); an address outside the pool unchanged.
    pub fn canonical(&self, va: u64) -> u64 {
        self.split(va).map_or(va, |(c, _)| c)
    }
    /// `va`'s tag (its window); 0 outside the pool.
    pub fn tag(&self, va: u64) -> u64 {
        self.split(va).map_or(0, |(_, t)| t)
    }
    /// Canonical address `va` seen through window `tag`.
    pub fn tagged(&self, va: u64, tag: u64) -> u64 {
        debug_assert!(tag < self.count && contains(self.base, self.size, va, 1));
        va + tag * self.size
    }
    /// The addresses of window `tag`.
    pub fn window(&self, tag: u64) -> std::ops::Range<u64> {
        self.base + tag * self.size..self.base + (tag + 1) * self.size
    }
    /// The bit mask naming every window.
    pub fn all(&self) -> u64 {
        all_windows(self.count)
    }
    /// Can a pool of `size` bytes be split into `count` windows whose shadows each start on a
    /// shadow chunk?
    pub fn check(size: u64, count: u64, gran: u64, shift: u32) -> Result<(), UvmError> {
        let w = size.checked_div(count).unwrap_or(0);
        if w == 0 || !w.is_multiple_of(gran << shift) {
            return Err(UvmError::BadConfig(format!("pool of {size:#x} bytes cannot be split into {count} windows of whole shadow chunks")));
        }
        Ok(())
    }
}

/// The bit mask naming every one of `count` windows.
pub fn all_windows(count: u64) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1 << count) - 1
    }
}

/// Page sizes the patched nvidia-uvm maps inside the pool, largest first.
pub const PAGE_SIZES: [u64; 3] = [2 << 20, 64 << 10, 4 << 10];

/// Splits a 4 KiB-aligned range into the largest pages each position's alignment allows.
pub fn split_pages(va: u64, len: u64) -> Result<Vec<(u64, u64)>, UvmError> {
    check_aligned(va, len, 4096)?;
    let (mut va, mut len, mut out) = (va, len, Vec::new());
    while len > 0 {
        let size = PAGE_SIZES.into_iter().find(|&p| va % p == 0 && len >= p).expect("4 KiB always fits");
        out.push((va, size));
        va += size;
        len -= size;
    }
    Ok(out)
}

/// Shadow VA size for a pool of `pool_size` bytes, rounded up to the granularity.
pub fn shadow_size(pool_size: u64, shift: u32, gran: u64) -> u64 {
    (pool_size >> shift).div_ceil(gran) * gran
}

/// Bytes of one extent-table entry: checked PTX's layout, defined by the instrumenter's ABI.
pub const EXTENT_ENTRY_SIZE: u64 = gasan_instrument::abi::EXTENT_ENTRY_SIZE as u64;

/// Extent-table VA size for a pool of `pool_size` bytes: one entry per `gran` block of the pool,
/// rounded up to the granularity.
pub fn extent_table_size(pool_size: u64, gran: u64) -> u64 {
    (pool_size / gran * EXTENT_ENTRY_SIZE).div_ceil(gran) * gran
}

/// Indices of the extent entries whose `gran` blocks intersect `[start, end)` (non-empty, in the pool).
pub fn extent_entries(pool_base: u64, gran: u64, start: u64, end: u64) -> std::ops::Range<u64> {
    (start - pool_base) / gran..(end - pool_base).div_ceil(gran)
}

/// Indices of the table chunks (each `gran` bytes of table) holding extent entries `entries`.
pub fn extent_chunks(entries: &std::ops::Range<u64>, gran: u64) -> std::ops::Range<u64> {
    entries.start * EXTENT_ENTRY_SIZE / gran..(entries.end * EXTENT_ENTRY_SIZE).div_ceil(gran)
}

/// Where each device's pool, shadow and extent table lie in a process that uses several GPUs:
/// device d's are the d-th equal slots of three spans (one reservation each). So
/// * each device's pool is aligned like a lone pool (the span's base is, and the slot size is a
///   multiple of the alignment), and its own control block keeps the aligned-pool check;
/// * the shadow and the extent table of the whole pool span are each one array indexed from the
///   span's base, so one control block naming the span (`pool_base` = [`Self::span`]'s start,
///   `pool_size` = its length, `shadow_base` = `shadow_base`, `extent_table` = `extent_base`)
///   checks an access to any device's pool against its owner's shadow: what a kernel reading a
///   peer's memory needs.
///
/// 8 GPUs at 1 TiB each (scale 8): 8 TiB of pool VA from `0x1000_0000_0000` (16 to 24 TiB), 32 GiB
/// of shadow VA and 64 MiB of extent-table VA; VA costs nothing until chunks are mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    /// Device slots.
    pub devices: u32,
    /// Start of device 0's pool.
    pub pool_base: u64,
    /// Bytes of one device's pool.
    pub pool_size: u64,
    /// Start of device 0's shadow.
    pub shadow_base: u64,
    /// Start of device 0's extent table.
    pub extent_base: u64,
    pub shift: u32,
    pub gran: u64,
}

/// One device's slot of a [`DeviceLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSlot {
    pub pool: u64,
    pub shadow: u64,
    pub extent: u64,
}

impl DeviceLayout {
    /// Checks that per-device sizes make the three spans seamless arrays: a pool of whole shadow
    /// chunks, whose extent table is whole chunks too.
    pub fn check(devices: u32, pool_size: u64, shift: u32, gran: u64) -> Result<(), UvmError> {
        let bad = |why: &str| Err(UvmError::BadConfig(format!("{devices} device slots of {pool_size:#x} bytes: {why}")));
        if devices == 0 || devices > MAX_DEVICES {
            return bad(&format!("1 to {MAX_DEVICES} devices"));
        }
        if !gran.is_power_of_two() || pool_size == 0 || !pool_size.is_multiple_of(gran << shift) {
            return bad("a device's pool must be whole shadow chunks");
        }
        if !(pool_size / gran * EXTENT_ENTRY_SIZE).is_multiple_of(gran) {
            return bad("a device's extent table must be whole chunks");
        }
        if pool_size.checked_mul(u64::from(devices)).is_none() {
            return bad("the span overflows");
        }
        Ok(())
    }
    /// Bytes of one device's shadow (exactly `pool_size >> shift`).
    pub fn shadow_size(&self) -> u64 {
        self.pool_size >> self.shift
    }
    /// Bytes of one device's extent table.
    pub fn extent_size(&self) -> u64 {
        self.pool_size / self.gran * EXTENT_ENTRY_SIZE
    }
    /// Device `d`'s slot.
    pub fn slot(&self, d: u32) -> DeviceSlot {
        debug_assert!(d < self.devices);
        let d = u64::from(d);
        DeviceSlot { pool: self.pool_base + d * self.pool_size, shadow: self.shadow_base + d * self.shadow_size(), extent: self.extent_base + d * self.extent_size() }
    }
    /// The whole pool span: (start, bytes).
    pub fn span(&self) -> (u64, u64) {
        (self.pool_base, self.pool_size * u64::from(self.devices))
    }
    /// The device slot whose pool holds `va`.
    pub fn device_of(&self, va: u64) -> Option<u32> {
        let off = va.checked_sub(self.pool_base)?;
        let d = off / self.pool_size;
        (d < u64::from(self.devices)).then_some(d as u32)
    }
}

/// Most device slots one [`DeviceLayout`] holds (CUDA's peer limit without NVSwitch is 8; NVSwitch
/// machines have up to 16 GPUs a node, the x86-64 user VA 128 TiB).
pub const MAX_DEVICES: u32 = 16;

/// One mapping operation. The pool turns a request into a list of these with [`plan_commit`] /
/// [`plan_release`] and applies them in order (rolling back on failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Replace the zero chunk under shadow chunk `idx` with a real, zero-filled chunk.
    BackShadow { idx: u64 },
    /// Map a physical chunk (from the cache, else new) read-write at canonical pool address `va`
    /// seen through each window in `tags` (a bit mask); those windows' shadow describes it from
    /// now on.
    MapChunk { va: u64, tags: u64 },
    /// Zero the shadow bytes of pool range `[va, va+len)` (inaccessible).
    ZeroShadow { va: u64, len: u64 },
    /// Unmap the pool chunk at canonical `va` from the windows in `tags`; its physical chunk goes
    /// back to the cache, and those windows' shadow stops describing it.
    UnmapChunk { va: u64, tags: u64 },
    /// Put the zero chunk back under shadow chunk `idx` (its last pool chunk went away).
    ReleaseShadow { idx: u64 },
    /// Mark the chunk at `va` retired for the windows in `tags`: never mapped through them again
    /// (a pointer into it through one of them stays a pointer into freed memory).
    Retire { va: u64, tags: u64 },
    /// [`Op::MapChunk`] of the `slots` chunks from `va` with one physical handle `slots` chunks
    /// long (a wide run: from the cache of its size, else new), mapped whole in each window.
    MapRun { va: u64, slots: u64, tags: u64 },
    /// [`Op::UnmapChunk`] of the wide run of `slots` chunks at `va`, whole: its handle goes back to
    /// the cache of its size.
    UnmapRun { va: u64, slots: u64, tags: u64 },
}

/// Longest wide run, in chunks (512 MiB of 2 MiB chunks): longer commits take several. Bounds
/// the memory one cached handle strands for other sizes.
pub const MAX_RUN_SLOTS: u64 = 256;

/// The pieces a commit of `slots` chunks is backed by, in address order, each a power of two of
/// at most [`MAX_RUN_SLOTS`] chunks, largest first (its binary digits): a piece of one chunk is a
/// chunk handle, a longer one a wide run. Powers of two make few size classes, so a cached handle
/// serves every block whose size has that digit (a 13-chunk block's 8 + 4 + 1 serve a 12- or
/// 9-chunk block), with no memory beyond the block's own: a handle maps only whole, so a
/// size class rounded up would map into the block's guard gap.
pub fn run_pieces(slots: u64) -> impl Iterator<Item = u64> {
    let whole = slots / MAX_RUN_SLOTS;
    let rest = slots % MAX_RUN_SLOTS;
    std::iter::repeat_n(MAX_RUN_SLOTS, whole as usize).chain((0..MAX_RUN_SLOTS.trailing_zeros()).rev().map(|b| 1u64 << b).filter(move |&p| rest & p != 0))
}

/// A commit plan with its chunks backed by wide runs ([`run_pieces`] of each stretch of
/// consecutive [`Op::MapChunk`]s of the same windows): the shadow backing first, in its order,
/// then the mappings in address order. Pieces of one chunk stay [`Op::MapChunk`].
pub fn widen(ops: Vec<Op>, gran: u64) -> Vec<Op> {
    let (maps, mut out): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|o| matches!(o, Op::MapChunk { .. }));
    let mut i = 0;
    while i < maps.len() {
        let Op::MapChunk { va, tags } = maps[i] else { unreachable!("partitioned") };
        let n = maps[i..].iter().enumerate().take_while(|&(k, o)| *o == Op::MapChunk { va: va + k as u64 * gran, tags }).count() as u64;
        let mut at = va;
        for p in run_pieces(n) {
            out.push(if p == 1 { Op::MapChunk { va: at, tags } } else { Op::MapRun { va: at, slots: p, tags } });
            at += p * gran;
        }
        i += n as usize;
    }
    out
}

/// What the planner needs to know about the pool's current state.
pub trait PoolState {
    fn base(&self) -> u64;
    fn size(&self) -> u64;
    fn shift(&self) -> u32;
    fn gran(&self) -> u64;
    /// Bytes of one tag window (the pool size when tagging is off).
    fn window_size(&self) -> u64;
    /// The tag windows whose shadow describes committed chunk `chunk_va` (a bit mask), or
    /// `None` when it is not committed.
    fn committed_tags(&self, chunk_va: u64) -> Option<u64>;
    fn committed(&self, chunk_va: u64) -> bool {
        self.committed_tags(chunk_va).is_some()
    }
    /// The windows chunk `chunk_va` is retired for (a bit mask; 0: none).
    fn retired_tags(&self, chunk_va: u64) -> u64;
    /// (Committed pool chunk, window) pairs currently described by shadow chunk `idx`.
    fn shadow_refs(&self, idx: u64) -> u64;
    /// The wide run committed chunk `chunk_va` is part of: (its first chunk, its chunks).
    fn wide_run(&self, _chunk_va: u64) -> Option<(u64, u64)> {
        None
    }
}

/// Requests name canonical ranges: inside tag window 0.
fn check_request<S: PoolState + ?Sized>(s: &S, va: u64, len: u64) -> Result<(), UvmError> {
    check_aligned(va, len, s.gran())?;
    if !contains(s.base(), s.window_size(), va, len) {
        return Err(UvmError::OutsidePool { va, len });
    }
    Ok(())
}

/// The windows of bit mask `tags`, as window indices.
pub fn tag_windows(tags: u64) -> impl Iterator<Item = u64> {
    (0..64).filter(move |t| tags >> t & 1 == 1)
}

/// Plan for committing canonical `[va, va+len)` for allocations of the windows in `tags` (a bit
/// mask): back the shadow chunks of those windows that described no committed chunk yet, and map
/// each pool chunk (in those windows). Refuses committed chunks, chunks retired for any of the
/// windows, and an empty mask.
pub fn plan_commit<S: PoolState + ?Sized>(s: &S, va: u64, len: u64, tags: u64) -> Result<Vec<Op>, UvmError> {
    check_request(s, va, len)?;
    let windows = s.size() / s.window_size();
    if tags == 0 || (windows < 64 && tags >> windows != 0) {
        return Err(UvmError::BadConfig(format!("tag mask {tags:#x} for {windows} windows")));
    }
    let g = s.gran();
    let mut ops = Vec::new();
    let mut backed = std::collections::BTreeSet::new();
    for c in chunk_spans(va, len, g) {
        if s.committed(c) {
            return Err(UvmError::AlreadyCommitted(c));
        }
        if s.retired_tags(c) & tags != 0 {
            return Err(UvmError::Retired(c));
        }
        for t in tag_windows(tags) {
            for idx in shadow_chunks(s.base(), s.shift(), g, c + t * s.window_size(), g) {
                if s.shadow_refs(idx) == 0 && backed.insert(idx) {
                    ops.push(Op::BackShadow { idx });
                }
            }
        }
        ops.push(Op::MapChunk { va: c, tags });
    }
    // No shadow write: the shadow of uncommitted VA is already zero (backed shadow chunks are
    // filled with zero, and a release zeroes the shadow of what it unmaps), so a commit costs no
    // device work (a synchronous memset per large allocation before).
    Ok(ops)
}

/// Plan for decommitting (`retire == false`: every chunk must be committed) or retiring
/// (`retire == true`: none may be retired already) canonical `[va, va+len)`: zero the shadow of
/// every window that described a chunk, unmap the committed chunks from those windows, release
/// shadow chunks left describing nothing, mark retired.
///
/// A retirement covers the windows in `retire_tags` and those each committed chunk was committed
/// for; it is refused for a chunk already retired for all of them.
pub fn plan_release<S: PoolState + ?Sized>(s: &S, va: u64, len: u64, retire: bool) -> Result<Vec<Op>, UvmError> {
    plan_release_tagged(s, va, len, retire, u64::MAX)
}

/// [`plan_release`] retiring for the windows in `retire_tags` (and those of the committed chunks).
pub fn plan_release_tagged<S: PoolState + ?Sized>(s: &S, va: u64, len: u64, retire: bool, retire_tags: u64) -> Result<Vec<Op>, UvmError> {
    check_request(s, va, len)?;
    let retire_tags = retire_tags & all_windows(s.size() / s.window_size());
    let g = s.gran();
    let mut ops = Vec::new();
    let mut refs: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for c in chunk_spans(va, len, g) {
        let tags = retire_tags | s.committed_tags(c).unwrap_or(0);
        if retire && s.retired_tags(c) & tags == tags {
            return Err(UvmError::Retired(c));
        }
        match s.committed_tags(c) {
            None if !retire => return Err(UvmError::NotCommitted(c)),
            None => {}
            Some(tags) => {
                // A wide run is released whole, with its first chunk; a request must cover it.
                let (first, slots) = match s.wide_run(c) {
                    Some((start, slots)) if start < va || start + slots * g > va + len => return Err(UvmError::PartOfRun(c)),
                    Some((start, _)) if start != c => (c, 0),
                    Some(run) => run,
                    None => (c, 1),
                };
                for t in tag_windows(tags).filter(|_| slots > 0) {
                    ops.push(Op::ZeroShadow { va: first + t * s.window_size(), len: slots * g });
                }
                match slots {
                    0 => {}
                    1 => ops.push(Op::UnmapChunk { va: c, tags }),
                    _ => ops.push(Op::UnmapRun { va: first, slots, tags }),
                }
                for t in tag_windows(tags).filter(|_| slots > 0) {
                    for idx in shadow_chunks(s.base(), s.shift(), g, first + t * s.window_size(), slots * g) {
                        let r = refs.entry(idx).or_insert_with(|| s.shadow_refs(idx));
                        *r -= shadow_chunk_refs(s, idx, first + t * s.window_size(), slots);
                        if *r == 0 {
                            ops.push(Op::ReleaseShadow { idx });
                        }
                    }
                }
            }
        }
        if retire {
            // Only the windows newly retired: undoing it must not un-retire the others.
            ops.push(Op::Retire { va: c, tags: tags & !s.retired_tags(c) });
        }
    }
    Ok(ops)
}

/// How many of the `slots` chunks from pool address `va` (one window's) shadow chunk `idx`
/// describes: the references a release of them takes from it.
fn shadow_chunk_refs<S: PoolState + ?Sized>(s: &S, idx: u64, va: u64, slots: u64) -> u64 {
    let g = s.gran();
    (0..slots).filter(|i| shadow_chunks(s.base(), s.shift(), g, va + i * g, g).contains(&idx)).count() as u64
}

/// [`plan_release_tagged`] retiring (`retire == true`) a range whose shadow the caller has
/// already zeroed in every window committed for it, with writes the pool logged (or made
/// synchronously): no shadow write. The unmaps still wait for those writes, as every unmap does.
pub fn plan_retire_zeroed<S: PoolState + ?Sized>(s: &S, va: u64, len: u64, retire_tags: u64) -> Result<Vec<Op>, UvmError> {
    let mut ops = plan_release_tagged(s, va, len, true, retire_tags)?;
    ops.retain(|o| !matches!(o, Op::ZeroShadow { .. }));
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn shadow_range_matches_reference(off in 0u64..1 << 30, len in 1u64..1 << 24, shift in 7u32..=8) {
            let base = 0x1000_0000_0000u64;
            let (s, l) = shadow_range(base, 0x2000_0000_0000, shift, base + off, len);
            // Reference: the set of granule indices touched by the bytes.
            let first = off / (1 << shift);
            let last = (off + len - 1) / (1 << shift);
            prop_assert_eq!(s, 0x2000_0000_0000 + first);
            prop_assert_eq!(l, last - first + 1);
        }

        #[test]
        fn extent_entries_are_the_blocks_touched(off in 0u64..1 << 40, len in 1u64..1 << 32, g in 16u32..=21) {
            let (base, gran) = (0x1000_0000_0000u64, 1u64 << g);
            let e = extent_entries(base, gran, base + off, base + off + len);
            prop_assert_eq!(e.start, off / gran);
            prop_assert_eq!(e.end - 1, (off + len - 1) / gran);
            let c = extent_chunks(&e, gran);
            prop_assert_eq!(c.start, e.start * EXTENT_ENTRY_SIZE / gran);
            prop_assert_eq!(c.end - 1, ((e.end - 1) * EXTENT_ENTRY_SIZE + EXTENT_ENTRY_SIZE - 1) / gran);
            prop_assert!(c.end * gran <= extent_table_size(1 << 41, gran));
        }

        #[test]
        fn align_out_covers(va in 0u64..1 << 46, len in 1u64..1 << 30, g in 12u32..=21) {
            let gran = 1u64 << g;
            let (s, l) = align_out(va, len, gran).unwrap();
            prop_assert!(s <= va && s + l >= va + len);
            prop_assert!(check_aligned(s, l, gran).is_ok());
            prop_assert!(l - len < 2 * gran);
        }
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    struct S {
        committed: BTreeSet<u64>,
        retired: BTreeSet<u64>,
        refs: HashMap<u64, u64>,
        windows: u64,
    }
    impl PoolState for S {
        fn base(&self) -> u64 {
            0x1000_0000_0000
        }
        fn size(&self) -> u64 {
            1 << 40
        }
        fn shift(&self) -> u32 {
            8
        }
        fn gran(&self) -> u64 {
            2 << 20
        }
        fn window_size(&self) -> u64 {
            self.size() / self.windows
        }
        fn committed_tags(&self, c: u64) -> Option<u64> {
            self.committed.contains(&c).then_some(1)
        }
        fn retired_tags(&self, c: u64) -> u64 {
            if self.retired.contains(&c) {
                u64::MAX
            } else {
                0
            }
        }
        fn shadow_refs(&self, i: u64) -> u64 {
            self.refs.get(&i).copied().unwrap_or(0)
        }
    }

    #[test]
    fn commit_backs_shadow_once_and_writes_no_shadow() {
        let s = S { committed: BTreeSet::new(), retired: BTreeSet::new(), refs: HashMap::new(), windows: 1 };
        let b = s.base();
        let ops = plan_commit(&s, b, 4 << 20, 1).unwrap();
        assert_eq!(ops, vec![Op::BackShadow { idx: 0 }, Op::MapChunk { va: b, tags: 1 }, Op::MapChunk { va: b + (2 << 20), tags: 1 }]);
        assert!(plan_commit(&s, b + 4096, 2 << 20, 1).is_err());
        assert!(plan_commit(&s, b + (1 << 40), 2 << 20, 1).is_err());
        assert!(plan_commit(&s, b, 2 << 20, 2).is_err(), "window 1 of a pool with one window");
    }

    #[test]
    fn release_drops_shadow_with_its_last_chunk() {
        let b = 0x1000_0000_0000u64;
        let s = S { committed: [b, b + (2 << 20)].into(), retired: BTreeSet::new(), refs: [(0, 2)].into(), windows: 1 };
        let ops = plan_release(&s, b, 2 << 20, true).unwrap();
        assert_eq!(ops, vec![Op::ZeroShadow { va: b, len: 2 << 20 }, Op::UnmapChunk { va: b, tags: 1 }, Op::Retire { va: b, tags: 1 }]);
        let ops = plan_release(&s, b, 4 << 20, false).unwrap();
        assert!(ops.contains(&Op::ReleaseShadow { idx: 0 }));
        assert!(plan_release(&s, b + (4 << 20), 2 << 20, false).is_err(), "decommit of uncommitted");
    }

    proptest::proptest! {
        /// A retirement of zeroed shadow is the retirement without its shadow writes: the same
        /// unmaps, shadow releases and retired marks, in the same order, and the same refusals.
        #[test]
        fn retire_zeroed_is_retire_without_shadow_writes(committed in proptest::collection::btree_set(0u64..12, 0..12), retired in proptest::collection::btree_set(0u64..12, 0..4), first in 0u64..12, n in 1u64..6) {
            let b = 0x1000_0000_0000u64;
            let g = 2u64 << 20;
            let retired: BTreeSet<u64> = retired.difference(&committed).map(|c| b + c * g).collect();
            let committed: BTreeSet<u64> = committed.iter().map(|c| b + c * g).collect();
            let s = S { refs: [(0, committed.len() as u64)].into(), committed, retired, windows: 1 };
            let full = plan_release_tagged(&s, b + first * g, n * g, true, u64::MAX);
            let zeroed = plan_retire_zeroed(&s, b + first * g, n * g, u64::MAX);
            match (full, zeroed) {
                (Ok(full), Ok(zeroed)) => {
                    let writes_shadow = zeroed.iter().any(|o| matches!(o, Op::ZeroShadow { .. }));
                    proptest::prop_assert!(!writes_shadow);
                    let without: Vec<Op> = full.into_iter().filter(|o| !matches!(o, Op::ZeroShadow { .. })).collect();
                    proptest::prop_assert_eq!(without, zeroed);
                }
                (Err(a), Err(b)) => proptest::prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => return Err(proptest::test_runner::TestCaseError::fail(format!("one refused, the other not: {a:?} / {b:?}"))),
            }
        }
    }

    #[test]
    fn run_pieces_are_the_binary_digits() {
        let pieces = |n| run_pieces(n).collect::<Vec<u64>>();
        assert_eq!(pieces(13), vec![8, 4, 1]);
        assert_eq!(pieces(1), vec![1]);
        assert_eq!(pieces(8), vec![8]);
        assert_eq!(pieces(2 * MAX_RUN_SLOTS + 3), vec![MAX_RUN_SLOTS, MAX_RUN_SLOTS, 2, 1]);
    }

    proptest::proptest! {
        /// A widened commit backs the same shadow in the same order and maps every chunk once, in
        /// address order, with runs of powers of two from 2 to MAX_RUN_SLOTS.
        #[test]
        fn widen_maps_each_chunk_once(n in 1u64..700, windows in 0u32..3) {
            let s = S { committed: BTreeSet::new(), retired: BTreeSet::new(), refs: HashMap::new(), windows: 1 << windows };
            let (b, g) = (s.base(), s.gran());
            let ops = plan_commit(&s, b, n * g, 1 << windows).unwrap();
            let wide = widen(ops.clone(), g);
            let shadow = |o: &Vec<Op>| o.iter().filter(|o| matches!(o, Op::BackShadow { .. })).copied().collect::<Vec<_>>();
            proptest::prop_assert_eq!(shadow(&ops), shadow(&wide));
            let mut at = b;
            for o in wide.iter().filter(|o| !matches!(o, Op::BackShadow { .. })) {
                match *o {
                    Op::MapChunk { va, tags } => {
                        proptest::prop_assert_eq!((va, tags), (at, 1 << windows));
                        at += g;
                    }
                    Op::MapRun { va, slots, tags } => {
                        proptest::prop_assert_eq!((va, tags), (at, 1 << windows));
                        proptest::prop_assert!(slots.is_power_of_two() && (2..=MAX_RUN_SLOTS).contains(&slots));
                        at += slots * g;
                    }
                    other => return Err(proptest::test_runner::TestCaseError::fail(format!("{other:?} in a commit"))),
                }
            }
            proptest::prop_assert_eq!(at, b + n * g);
        }
    }

    /// [`S`] with one wide run.
    struct WithRun(S, u64, u64);
    impl PoolState for WithRun {
        fn base(&self) -> u64 {
            self.0.base()
        }
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn shift(&self) -> u32 {
            self.0.shift()
        }
        fn gran(&self) -> u64 {
            self.0.gran()
        }
        fn window_size(&self) -> u64 {
            self.0.window_size()
        }
        fn committed_tags(&self, c: u64) -> Option<u64> {
            self.0.committed_tags(c)
        }
        fn retired_tags(&self, c: u64) -> u64 {
            self.0.retired_tags(c)
        }
        fn shadow_refs(&self, i: u64) -> u64 {
            self.0.shadow_refs(i)
        }
        fn wide_run(&self, c: u64) -> Option<(u64, u64)> {
            (self.1..self.1 + self.2 * self.gran()).contains(&c).then_some((self.1, self.2))
        }
    }

    #[test]
    fn a_run_is_released_whole_or_not_at_all() {
        let (b, g) = (0x1000_0000_0000u64, 2u64 << 20);
        let s = WithRun(S { committed: (0..5).map(|i| b + i * g).collect(), retired: BTreeSet::new(), refs: [(0, 5)].into(), windows: 1 }, b + g, 4);
        let ops = plan_release(&s, b, 5 * g, true).unwrap();
        let unmaps: Vec<Op> = ops.iter().filter(|o| matches!(o, Op::UnmapChunk { .. } | Op::UnmapRun { .. })).copied().collect();
        assert_eq!(unmaps, vec![Op::UnmapChunk { va: b, tags: 1 }, Op::UnmapRun { va: b + g, slots: 4, tags: 1 }]);
        assert!(ops.contains(&Op::ZeroShadow { va: b + g, len: 4 * g }));
        assert_eq!(ops.iter().filter(|o| matches!(o, Op::Retire { .. })).count(), 5);
        assert_eq!(ops.iter().filter(|o| matches!(o, Op::ReleaseShadow { idx: 0 })).count(), 1, "the shadow chunk's five references dropped");
        assert_eq!(plan_release(&s, b, 2 * g, false), Err(UvmError::PartOfRun(b + g)));
        assert_eq!(plan_release(&s, b + 2 * g, g, true), Err(UvmError::PartOfRun(b + 2 * g)));
    }

    #[test]
    fn commit_backs_the_shadow_of_each_window_asked_for() {
        let s = S { committed: BTreeSet::new(), retired: BTreeSet::new(), refs: HashMap::new(), windows: 4 };
        let b = s.base();
        let ws = s.window_size();
        // Windows 0 and 2: their shadow chunks are a window's shadow (ws >> 8 bytes) apart.
        let ops = plan_commit(&s, b, 2 << 20, 0b101).unwrap();
        let per_window = (ws >> 8) / (2 << 20);
        assert_eq!(ops, vec![Op::BackShadow { idx: 0 }, Op::BackShadow { idx: 2 * per_window }, Op::MapChunk { va: b, tags: 0b101 }]);
        assert!(plan_commit(&s, b + ws, 2 << 20, 1).is_err(), "requests name canonical (window 0) addresses");
        assert!(plan_commit(&s, b, 2 << 20, 0).is_err(), "no window");
        assert!(plan_commit(&s, b, 2 << 20, 0b10000).is_err(), "window 4 of 4");
    }
}
