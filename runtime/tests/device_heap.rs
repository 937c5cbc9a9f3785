//! The checked device heap's region on the Host pool backend (device memory is host memory): the
//! runtime's set-up (poisoned, no extent entries, header as the device code reads it, not a program
//! allocation) and its descriptions of heap addresses, with the device side played by a model that
//! follows the same layout contract as the PTX functions (instrument/src/ptx/heap.rs).

use gasan_instrument::device_heap::{block_offset, heap_offset, HeapLayout, BLOCK_FREED, BLOCK_LIVE, DEFAULT_HEAP_LIMIT};
use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, Allocator};
use gasan_runtime::device_heap::HeapRegion;
use gasan_runtime::options::Options;
use gasan_uvm::{HostBackend, Pool, PoolConfig};

fn allocator(scale: Scale) -> Allocator {
    let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 64 << 30, shift: scale.shift(), hints: vec![], max_size: 0, tags: 1 }).unwrap();
    let opts = Options { shadow_scale: scale, malloc_context_size: 4, ..Options::default() };
    Allocator::new(pool, &opts)
}

fn read_u64(addr: u64) -> u64 {
    // SAFETY: host backend: pool addresses are mapped host memory.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}
fn write_u64(addr: u64, v: u64) {
    // SAFETY: host backend: pool addresses are mapped host memory.
    unsafe { std::ptr::write_volatile(addr as *mut u64, v) }
}
fn write_u32(addr: u64, v: u32) {
    // SAFETY: host backend: pool addresses are mapped host memory.
    unsafe { std::ptr::write_volatile(addr as *mut u32, v) }
}
fn shadow_addr(a: &Allocator, addr: u64) -> u64 {
    let (base, _, sbase) = a.control_fields();
    sbase + ((addr - base) >> a.scale().shift())
}
fn shadow_of(a: &Allocator, addr: u64) -> u8 {
    // SAFETY: host backend: the shadow is mapped host memory too.
    unsafe { std::ptr::read_volatile(shadow_addr(a, addr) as *const u8) }
}

/// The device's `__gasan_heap_alloc`, step for step.
fn device_malloc(a: &Allocator, r: &HeapRegion, size: u64, align: u64, ctaid: u32) -> Option<u64> {
    let h = r.base;
    let g = r.layout.granule;
    let arena_size = read_u64(h + heap_offset::ARENA_SIZE as u64);
    let need = r.layout.block_cost(size, align);
    let old = read_u64(h + heap_offset::NEXT as u64);
    write_u64(h + heap_offset::NEXT as u64, old + need);
    if old + need > arena_size {
        return None;
    }
    let al = align.max(g);
    let start = (read_u64(h + heap_offset::ARENA_BASE as u64) + old + g).div_ceil(al) * al;
    let hdr = start - g;
    let slot = old >> (a.scale().shift() + 1);
    let entry = read_u64(h + heap_offset::TABLE as u64) + slot * 16;
    write_u64(entry, start);
    write_u64(entry + 8, size);
    write_u32(hdr + block_offset::INDEX as u64, slot as u32);
    write_u64(hdr + block_offset::SIZE as u64, size);
    write_u32(hdr + block_offset::ALLOC_CTAID as u64, ctaid);
    write_u32(hdr + block_offset::STATE as u64, BLOCK_LIVE);
    for (i, b) in a.scale().region_shadow(size, size.max(1)).into_iter().enumerate() {
        // SAFETY: host memory.
        unsafe { std::ptr::write_volatile((shadow_addr(a, start) + i as u64) as *mut u8, b) };
    }
    Some(start)
}

fn device_free(a: &Allocator, r: &HeapRegion, p: u64, ctaid: u32) {
    let hdr = p - r.layout.granule;
    write_u32(hdr + block_offset::STATE as u64, BLOCK_FREED);
    write_u32(hdr + block_offset::FREE_CTAID as u64, ctaid);
    let size = read_u64(hdr + block_offset::SIZE as u64);
    for i in 0..a.scale().shadow_len(size.max(1)) {
        // SAFETY: host memory.
        unsafe { std::ptr::write_volatile((shadow_addr(a, p) + i) as *mut u8, 0) };
    }
}

#[test]
fn the_region_is_poisoned_unclaimed_and_not_a_program_allocation() {
    for scale in [Scale::S7, Scale::S8] {
        let a = allocator(scale);
        let before = a.alloc(1000, None).unwrap();
        let r = a.reserve_device_heap(DEFAULT_HEAP_LIMIT, None).unwrap();
        let after = a.alloc(1000, None).unwrap();
        let large_after = a.alloc(3 << 20, None).unwrap();
        assert!(!r.contains(large_after) && large_after + (3 << 20) <= r.base || large_after >= r.base + r.layout.region_size);
        assert_eq!(r.layout, HeapLayout::for_limit(DEFAULT_HEAP_LIMIT, scale.granule()));
        assert!(r.layout.arena_size >= 4 * DEFAULT_HEAP_LIMIT);
        assert!(!r.contains(before) && !r.contains(after));
        // The header the device reads.
        assert_eq!(read_u64(r.base + heap_offset::NEXT as u64), 0);
        assert_eq!(read_u64(r.base + heap_offset::ARENA_BASE as u64), r.base + r.layout.arena_offset);
        assert_eq!(read_u64(r.base + heap_offset::ARENA_SIZE as u64), r.layout.arena_size);
        assert_eq!(read_u64(r.base + heap_offset::TABLE as u64), r.base + r.layout.table_offset);
        assert_eq!(read_u64(r.base + heap_offset::TABLE_CAPACITY as u64), r.layout.table_capacity);
        // Every granule poisoned; no extent entry claims it (hoisted loop checks must read shadow).
        let (pool_base, _, _) = a.control_fields();
        let (table, shift) = a.extent_fields();
        for addr in (r.base..r.base + r.layout.region_size).step_by(scale.granule() as usize) {
            assert!(scale.is_bad(shadow_of(&a, addr), addr, 1), "{addr:#x}");
        }
        for addr in (r.base..r.base + r.layout.region_size).step_by(1 << shift) {
            let e = table + ((addr - pool_base) >> shift) * 16;
            assert_eq!((read_u64(e), read_u64(e + 8)), (0, 0), "extent of {addr:#x}");
        }
        // Not leaked, not freeable by the host, not checked as a host range.
        assert!(a.live_allocations().iter().all(|x| !r.contains(x.start)));
        assert!(a.free(r.base, None).is_err());
        // The program's own allocations around it keep every allocator invariant.
        if let Err(v) = a.check_invariants() {
            panic!("{v:?}");
        }
        // Untouched heap: described as in the device heap, no block near.
        let d = a.describe(r.base + r.layout.arena_offset + 5);
        assert_eq!(d.kind, AddrKind::Wild);
    }
}

#[test]
fn heap_addresses_are_described_by_block() {
    // The block table in the region, and in host-mapped memory (what the runtime gives it on a GPU,
    // so that reports after a trap can read it; on the host backend host and device addresses
    // coincide).
    for (scale, host_table) in [(Scale::S7, false), (Scale::S8, false), (Scale::S8, true)] {
        let a = allocator(scale);
        let table = host_table.then(|| {
            let cap = HeapLayout::for_limit(1 << 20, scale.granule()).table_capacity as usize;
            let mem: &'static mut [u8] = Box::leak(vec![0u8; cap * 16].into_boxed_slice());
            gasan_runtime::device_heap::HostTable { host: mem.as_ptr() as usize, device: mem.as_ptr() as u64 }
        });
        let r = a.reserve_device_heap(1 << 20, table).unwrap();
        if let Some(t) = table {
            assert_eq!(read_u64(r.base + heap_offset::TABLE as u64), t.device, "the device is pointed at the host table");
        }
        let p = device_malloc(&a, &r, 100, 16, 3).unwrap();
        let q = device_malloc(&a, &r, 4096, 1024, 4).unwrap();
        assert_eq!(q % 1024, 0);
        assert!(p + 100 < q);
        // The encoding the checks read: the block's bytes pass, the next byte fails.
        assert!(!scale.is_bad(shadow_of(&a, p + 96), p + 96, 4));
        assert!(scale.is_bad(shadow_of(&a, p + 100), p + 100, 4));
        let d = a.describe(p + 100);
        assert_eq!(d.kind, AddrKind::OverflowRight { distance: 0 });
        let blk = d.alloc.unwrap();
        assert_eq!((blk.start, blk.size, blk.live), (p, 100, true));
        assert_eq!(blk.heap_block.unwrap().alloc_ctaid[0], 3);
        let d = a.describe(q - 8);
        assert_eq!(d.kind, AddrKind::OverflowLeft { distance: 8 });
        assert_eq!(d.alloc.unwrap().start, q);
        assert_eq!(a.describe(p + 40).kind, AddrKind::InBounds { offset: 40 });
        device_free(&a, &r, p, 9);
        assert!(scale.is_bad(shadow_of(&a, p), p, 4));
        let d = a.describe(p + 8);
        assert_eq!(d.kind, AddrKind::UseAfterFree { offset: 8 });
        let blk = d.alloc.unwrap();
        assert!(!blk.live);
        assert_eq!(blk.heap_block.unwrap().free.unwrap().0[0], 9);
        // Exhaustion: malloc returns NULL rather than running past the arena.
        let mut n = 0;
        while device_malloc(&a, &r, 10_000, 16, 0).is_some() {
            n += 1;
        }
        assert!(n >= r.layout.arena_size / (10_000 + 2 * scale.granule()) - 2, "{n}");
    }
}
