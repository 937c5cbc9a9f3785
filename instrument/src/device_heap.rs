//! The checked device heap: the binary contract between the `__gasan_malloc`/`__gasan_free`
//! functions that checked PTX carries (ptx/heap.rs) and the runtime, which reserves the heap region
//! inside the pool and describes heap addresses in reports.
//!
//! In-kernel `malloc`/`free` (and `new`/`delete`, `__nv_aligned_device_malloc`, which nvcc compiles
//! to the same calls) normally use the driver's heap, outside the pool and unchecked. Checked PTX
//! calls gasan's functions instead. They allocate from one region of the pool, laid out by
//! [`HeapLayout`]:
//!
//! ```text
//! [ HeapHeader (one granule) | block table | arena ................................ ]
//!                                            [hdr|block···|hdr|block·|hdr|block··|..]
//! ```
//!
//! * The whole region starts poisoned (shadow 0). Allocation bumps [`HeapHeader::next`] with one
//!   atomic, so memory is never reused (freed blocks stay in quarantine forever, like the pool's
//!   host allocator). Each block is preceded by one granule holding its [`BlockHeader`]: that
//!   granule stays poisoned and is the previous block's right redzone (and the first block's left).
//! * A block's shadow encodes its size (the same GASan encoding as every allocation), so the
//!   ordinary checks catch overflows; a free writes shadow 0, so later accesses (in this kernel or
//!   the next) report use-after-free.
//! * Every block costs at least two granules of arena, so block `old >> (shift + 1)` (`old` being
//!   its arena offset before the bump) has a table entry of its own: the table never overflows and
//!   is sorted by address. The host reads it when it describes a heap address; `free` uses it to
//!   refuse pointers that are not block starts.
//!
//! The region's address reaches checked code through a second `.const` symbol,
//! [`heap_symbol`]`(control block symbol)`, defined only by modules that call the heap functions:
//! modules without `malloc`/`free` are not changed at all, and the control block keeps its size.

/// Suffix of the heap symbol after the control block's name: `__gasan_ctl_heap`, and
/// `__gasan_ctl_l<n>_heap` for input `n` of a `cuLink*` link (whose control blocks are renamed by
/// plain text replacement, which renames this symbol the same way).
pub const HEAP_SYMBOL_SUFFIX: &str = "_heap";

/// The heap symbol belonging to the control block named `ctl_symbol`: 8 bytes, the device address
/// of the [`HeapHeader`] (0: no checked heap; the functions fall back to the driver's heap).
pub fn heap_symbol(ctl_symbol: &str) -> String {
    format!("{ctl_symbol}{HEAP_SYMBOL_SUFFIX}")
}

/// `cudaLimitMallocHeapSize`'s default (8 MiB), the size of the heap when the program sets none.
pub const DEFAULT_HEAP_LIMIT: u64 = 8 << 20;

/// The arena is this many times the program's heap limit: gasan's blocks cost more than the
/// driver's (a header granule and granule rounding, 512 bytes at least under GASan-256), and a
/// program that fits its allocations into its limit natively must not see `malloc` return NULL.
pub const ARENA_PER_LIMIT: u64 = 4;

/// Header of the heap region (device memory, at the region's start). Written by the host at setup;
/// afterwards only `next` changes (device atomics).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapHeader {
    /// Arena bytes handed out so far (bumped by `atom.add`; may pass `arena_size` when an
    /// allocation fails, which is harmless: every later one fails too).
    pub next: u64,
    /// Device address of the arena's first byte (granule-aligned).
    pub arena_base: u64,
    pub arena_size: u64,
    /// Device address of the block table (`table_capacity` [`BlockEntry`]s).
    pub table: u64,
    pub table_capacity: u64,
    pub reserved: [u64; 3],
}
pub const HEAP_HEADER_SIZE: usize = 64;
pub mod heap_offset {
    pub const NEXT: usize = 0;
    pub const ARENA_BASE: usize = 8;
    pub const ARENA_SIZE: usize = 16;
    pub const TABLE: usize = 24;
    pub const TABLE_CAPACITY: usize = 32;
}

/// One block-table entry: a block's user start and requested size (start 0: unused slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockEntry {
    pub start: u64,
    pub size: u64,
}
pub const BLOCK_ENTRY_SIZE: usize = 16;

/// The granule before each block's first byte.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockHeader {
    /// [`BLOCK_LIVE`] or [`BLOCK_FREED`] (changed with `atom.cas`, so of two racing frees exactly
    /// one succeeds and the other is reported).
    pub state: u32,
    /// Its index in the block table.
    pub index: u32,
    pub size: u64,
    /// Block and thread of the `malloc`.
    pub alloc_ctaid: [u32; 3],
    pub alloc_tid: [u32; 3],
    /// Block and thread of the `free` (valid when freed).
    pub free_ctaid: [u32; 3],
    pub free_tid: [u32; 3],
}
pub const BLOCK_HEADER_SIZE: usize = 64;
pub mod block_offset {
    pub const STATE: usize = 0;
    pub const INDEX: usize = 4;
    pub const SIZE: usize = 8;
    pub const ALLOC_CTAID: usize = 16;
    pub const ALLOC_TID: usize = 28;
    pub const FREE_CTAID: usize = 40;
    pub const FREE_TID: usize = 52;
}
/// `BlockHeader::state` of a live block ("GHLV").
pub const BLOCK_LIVE: u32 = 0x564c_4847;
/// `BlockHeader::state` of a freed block ("GHFR").
pub const BLOCK_FREED: u32 = 0x5246_4847;

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<HeapHeader>() == HEAP_HEADER_SIZE);
    assert!(offset_of!(HeapHeader, next) == heap_offset::NEXT);
    assert!(offset_of!(HeapHeader, arena_base) == heap_offset::ARENA_BASE);
    assert!(offset_of!(HeapHeader, arena_size) == heap_offset::ARENA_SIZE);
    assert!(offset_of!(HeapHeader, table) == heap_offset::TABLE);
    assert!(offset_of!(HeapHeader, table_capacity) == heap_offset::TABLE_CAPACITY);
    assert!(size_of::<BlockEntry>() == BLOCK_ENTRY_SIZE);
    assert!(size_of::<BlockHeader>() == BLOCK_HEADER_SIZE);
    assert!(offset_of!(BlockHeader, state) == block_offset::STATE);
    assert!(offset_of!(BlockHeader, index) == block_offset::INDEX);
    assert!(offset_of!(BlockHeader, size) == block_offset::SIZE);
    assert!(offset_of!(BlockHeader, alloc_ctaid) == block_offset::ALLOC_CTAID);
    assert!(offset_of!(BlockHeader, alloc_tid) == block_offset::ALLOC_TID);
    assert!(offset_of!(BlockHeader, free_ctaid) == block_offset::FREE_CTAID);
    assert!(offset_of!(BlockHeader, free_tid) == block_offset::FREE_TID);
};

/// Where the parts of a heap region lie, as byte offsets from the region's start (granule-aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapLayout {
    pub granule: u64,
    pub table_offset: u64,
    pub table_capacity: u64,
    pub arena_offset: u64,
    pub arena_size: u64,
    /// Bytes of the whole region.
    pub region_size: u64,
}

impl HeapLayout {
    /// The layout for a program heap limit of `limit` bytes under granules of `granule` bytes.
    pub fn for_limit(limit: u64, granule: u64) -> Self {
        let round = |x: u64| x.div_ceil(granule) * granule;
        let arena_size = round(limit.max(granule).saturating_mul(ARENA_PER_LIMIT));
        // Every block takes a header granule and at least one granule of its own.
        let table_capacity = arena_size / (2 * granule);
        let table_offset = granule;
        let arena_offset = table_offset + round(table_capacity * BLOCK_ENTRY_SIZE as u64);
        HeapLayout { granule, table_offset, table_capacity, arena_offset, arena_size, region_size: arena_offset + arena_size }
    }

    /// The header the host writes at `region_base` (the start of the reserved region).
    pub fn header(&self, region_base: u64) -> HeapHeader {
        HeapHeader { next: 0, arena_base: region_base + self.arena_offset, arena_size: self.arena_size, table: region_base + self.table_offset, table_capacity: self.table_capacity, reserved: [0; 3] }
    }

    /// Arena bytes one `malloc(size)` with alignment `align` (a power of two) takes: its header
    /// granule plus its granule-rounded bytes, plus the slack that aligning past a granule needs.
    /// The same arithmetic as the device code: `roundup(max(size, 1), g) + max(align, g)`.
    pub fn block_cost(&self, size: u64, align: u64) -> u64 {
        let g = self.granule;
        size.max(1).div_ceil(g) * g + align.max(g)
    }
}

impl HeapHeader {
    pub fn to_bytes(&self) -> [u8; HEAP_HEADER_SIZE] {
        let mut b = [0u8; HEAP_HEADER_SIZE];
        for (i, v) in [self.next, self.arena_base, self.arena_size, self.table, self.table_capacity].iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

impl BlockHeader {
    /// The header from its bytes as the device wrote them (little-endian, [`block_offset`] layout).
    pub fn from_bytes(b: &[u8; BLOCK_HEADER_SIZE]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u32x3 = |o: usize| [u32_at(o), u32_at(o + 4), u32_at(o + 8)];
        use block_offset as off;
        BlockHeader {
            state: u32_at(off::STATE),
            index: u32_at(off::INDEX),
            size: u64::from(u32_at(off::SIZE)) | u64::from(u32_at(off::SIZE + 4)) << 32,
            alloc_ctaid: u32x3(off::ALLOC_CTAID),
            alloc_tid: u32x3(off::ALLOC_TID),
            free_ctaid: u32x3(off::FREE_CTAID),
            free_tid: u32x3(off::FREE_TID),
        }
    }
}

/// The block of a heap whose table is `entries` (as read from the device) that an address `addr`
/// belongs to or is nearest to: `(entry, addr is inside its bytes)`. Between two blocks the nearer
/// one is blamed (ASan's rule), the one before on a tie.
pub fn nearest_block(entries: &[BlockEntry], addr: u64) -> Option<(BlockEntry, bool)> {
    let used = entries.iter().filter(|e| e.start != 0);
    let before = used.clone().filter(|e| e.start <= addr).max_by_key(|e| e.start);
    let after = used.filter(|e| e.start > addr).min_by_key(|e| e.start);
    if let Some(b) = before {
        if addr < b.start + b.size.max(1) {
            return Some((*b, true));
        }
    }
    match (before, after) {
        (Some(b), Some(a)) => Some((if addr - (b.start + b.size.max(1)) <= a.start - addr { *b } else { *a }, false)),
        (Some(b), None) => Some((*b, false)),
        (None, Some(a)) => Some((*a, false)),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_parts_are_granule_aligned_and_disjoint() {
        for g in [128u64, 256] {
            for limit in [0, 1, 8 << 20, (8 << 20) + 1, 1 << 30] {
                let l = HeapLayout::for_limit(limit, g);
                assert!(l.table_offset >= HEAP_HEADER_SIZE as u64);
                assert_eq!(l.table_offset % g, 0);
                assert_eq!(l.arena_offset % g, 0);
                assert!(l.arena_offset >= l.table_offset + l.table_capacity * BLOCK_ENTRY_SIZE as u64);
                assert_eq!(l.region_size, l.arena_offset + l.arena_size);
                assert!(l.arena_size >= limit * ARENA_PER_LIMIT);
            }
        }
    }

    #[test]
    fn every_block_has_its_own_table_slot() {
        // The device indexes the table with old >> (shift + 1): distinct for blocks that each cost
        // at least two granules, and below the capacity for every block that fits the arena.
        let l = HeapLayout::for_limit(1 << 20, 256);
        let mut next = 0u64;
        let mut seen = std::collections::HashSet::new();
        for (size, align) in (0..10_000u64).map(|i| (i * 37 % 700, [16u64, 64, 512, 4096][i as usize % 4])) {
            let need = l.block_cost(size, align);
            if next + need > l.arena_size {
                break;
            }
            assert!(need >= 2 * l.granule);
            let slot = next >> 9;
            assert!(slot < l.table_capacity && seen.insert(slot));
            next += need;
        }
        assert!(seen.len() > 100);
    }

    #[test]
    fn nearest_block_blames_the_containing_then_the_nearer_block() {
        let e = |start, size| BlockEntry { start, size };
        let table = [e(0x1100, 100), BlockEntry::default(), e(0x1400, 8), e(0x1800, 0)];
        assert_eq!(nearest_block(&table, 0x1100 + 99), Some((e(0x1100, 100), true)));
        assert_eq!(nearest_block(&table, 0x1100 + 100), Some((e(0x1100, 100), false)));
        assert_eq!(nearest_block(&table, 0x13ff), Some((e(0x1400, 8), false)));
        assert_eq!(nearest_block(&table, 0x1000), Some((e(0x1100, 100), false)));
        assert_eq!(nearest_block(&table, 0x1800), Some((e(0x1800, 0), true)));
        assert_eq!(nearest_block(&table, 0x9000), Some((e(0x1800, 0), false)));
        assert_eq!(nearest_block(&[], 5), None);
    }

    #[test]
    fn block_header_bytes_match_the_struct_layout() {
        let h = BlockHeader { state: BLOCK_FREED, index: 7, size: 0x1_0000_0003, alloc_ctaid: [1, 2, 3], alloc_tid: [4, 5, 6], free_ctaid: [7, 8, 9], free_tid: [10, 11, 12] };
        // SAFETY: BlockHeader is repr(C) plain integers with no padding (64 bytes, checked above).
        let raw: [u8; BLOCK_HEADER_SIZE] = unsafe { std::mem::transmute(h) };
        assert_eq!(BlockHeader::from_bytes(&raw), h);
        let hh = HeapHeader { next: 1, arena_base: 2, arena_size: 3, table: 4, table_capacity: 5, reserved: [0; 3] };
        // SAFETY: HeapHeader is repr(C) plain integers with no padding (its size is checked above).
        let raw: [u8; HEAP_HEADER_SIZE] = unsafe { std::mem::transmute(hh) };
        assert_eq!(hh.to_bytes(), raw);
    }
}
