//! The host side of the checked device heap (layout and device side:
//! gasan_instrument::device_heap, instrument/src/ptx/heap.rs): the region is reserved in the pool
//! the first time a module that calls in-kernel `malloc`/`free` gets its control block, sized by
//! the context's `CU_LIMIT_MALLOC_HEAP_SIZE` then; reports describe heap addresses from the block
//! table the device keeps.

use crate::described::{AddrDescription, AddrKind, AllocInfo, HostStack};
use gasan_instrument::device_heap::{nearest_block, BlockEntry, BlockHeader, HeapLayout, BLOCK_ENTRY_SIZE, BLOCK_FREED, BLOCK_HEADER_SIZE, BLOCK_LIVE};
use gasan_uvm::Backend;

/// `CU_LIMIT_MALLOC_HEAP_SIZE` as the integer cuCtxSetLimit's hook receives (cudarc's `CUlimit`).
pub const CU_LIMIT_MALLOC_HEAP_SIZE: i32 = cudarc::driver::sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE as i32;

/// A reserved heap region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapRegion {
    /// Device address of the region (its [`gasan_instrument::device_heap::HeapHeader`]).
    pub base: u64,
    pub layout: HeapLayout,
    /// The program's heap limit the region was sized for.
    pub limit: u64,
    /// Where the block table lives when it is not in the region (see [`HostTable`]).
    pub host_table: Option<HostTable>,
}

/// A block table in host memory mapped into the device (`cuMemHostAlloc` with `DEVICEMAP`): the
/// device writes it like the in-region one, and the host can read it after a `trap` killed the
/// context, when device memory is unreadable. At least `table_capacity` entries, zeroed, alive
/// for the rest of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostTable {
    /// Host address of the table.
    pub host: usize,
    /// Its device address.
    pub device: u64,
}

impl HeapRegion {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.layout.region_size
    }
    fn arena_base(&self) -> u64 {
        self.base + self.layout.arena_offset
    }
}

pub use crate::described::HeapBlockOrigin;

/// Describes `addr`, inside `region`, from the device's block table and block headers (read
/// through `backend`). Header and table bytes are described as "device-heap metadata" when no block
/// is near; an unreadable table leaves the address described as `Wild` in the heap. `tag` is the
/// region's pointer tag, which its blocks share.
pub fn describe(backend: &dyn Backend, region: &HeapRegion, tag: u64, addr: u64, d: &mut AddrDescription) {
    d.kind = AddrKind::Wild;
    let l = &region.layout;
    let mut raw = vec![0u8; (l.table_capacity as usize) * BLOCK_ENTRY_SIZE];
    if let Some(t) = region.host_table {
        // SAFETY: HostTable's contract: `table_capacity` entries of live host memory; the device
        // may still be writing entries, which at worst yields an entry read half-written (a
        // report describing the wrong neighbour), never an invalid read.
        unsafe { std::ptr::copy_nonoverlapping(t.host as *const u8, raw.as_mut_ptr(), raw.len()) };
    } else if backend.read(region.base + l.table_offset, &mut raw).is_err() {
        return;
    }
    let entries: Vec<BlockEntry> =
        raw.chunks_exact(BLOCK_ENTRY_SIZE).map(|c| BlockEntry { start: u64::from_le_bytes(c[..8].try_into().expect("8")), size: u64::from_le_bytes(c[8..].try_into().expect("8")) }).collect();
    let Some((block, inside)) = nearest_block(&entries, addr) else { return };
    let mut hb = [0u8; BLOCK_HEADER_SIZE];
    let header = if block.start >= region.arena_base() + l.granule && backend.read(block.start - l.granule, &mut hb).is_ok() { Some(BlockHeader::from_bytes(&hb)) } else { None };
    // Without the header (device memory unreadable after a trap), an address inside a block can
    // only have failed its check because the block was freed.
    let freed = header.map_or(inside, |h| h.state == BLOCK_FREED);
    let origin = header.filter(|h| h.state == BLOCK_LIVE || h.state == BLOCK_FREED).map(|h| HeapBlockOrigin {
        alloc_ctaid: h.alloc_ctaid,
        alloc_tid: h.alloc_tid,
        free: freed.then_some((h.free_ctaid, h.free_tid)),
    });
    let end = block.start + block.size;
    d.kind = if inside {
        if freed {
            AddrKind::UseAfterFree { offset: addr - block.start }
        } else {
            AddrKind::InBounds { offset: addr - block.start }
        }
    } else if addr >= end {
        AddrKind::OverflowRight { distance: addr - end }
    } else {
        AddrKind::OverflowLeft { distance: block.start - addr }
    };
    d.alloc = Some(AllocInfo {
        id: 0,
        start: block.start,
        tag,
        size: block.size,
        region_end: block.start + block.size.max(1).div_ceil(l.granule) * l.granule,
        large: false,
        managed: false,
        memory: gasan_uvm::Memory::Device,
        live: !freed,
        alloc_stack: HostStack::default(),
        free_stack: freed.then(HostStack::default),
        heap_block: Some(origin.unwrap_or(HeapBlockOrigin { alloc_ctaid: [0; 3], alloc_tid: [0; 3], free: None })),
        registered: false,
        rows: None,
    });
}
