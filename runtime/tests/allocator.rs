//! The allocator on the Host pool backend (real mmap): layouts, redzones, quarantine, retired VA and
//! free errors, with the shadow read back through the pool and judged by the encoding's own check,
//! and the extent table read back the way checked PTX reads it.

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, Allocator, FreeError, ALIGN};
use gasan_runtime::options::Options;
use gasan_uvm::{HostBackend, Pool, PoolConfig};
use proptest::prelude::*;

fn allocator(scale: Scale, quarantine_mb: u64) -> Allocator {
    tagged_allocator(scale, quarantine_mb, 1)
}

fn tagged_allocator(scale: Scale, quarantine_mb: u64, tags: u64) -> Allocator {
    let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 64 << 30, shift: scale.shift(), hints: vec![], max_size: 0, tags }).unwrap();
    let opts = Options { shadow_scale: scale, quarantine_size_mb: quarantine_mb, malloc_context_size: 4, ..Options::default() };
    Allocator::new(pool, &opts)
}

/// Shadow byte of `addr`, read from the pool's shadow memory (host backend: plain memory).
fn shadow_of(a: &Allocator, addr: u64) -> u8 {
    let (base, _, sbase) = a.control_fields();
    let s = sbase + ((addr - base) >> a.scale().shift());
    // SAFETY: host backend: the whole shadow is host memory mapped readable (real chunks or the
    // shared zero chunk), and `s` is the shadow byte of a pool address.
    unsafe { std::ptr::read_volatile(s as *const u8) }
}

fn bad(a: &Allocator, addr: u64, w: u32) -> bool {
    a.scale().is_bad(shadow_of(a, addr), addr, w)
}

/// Extent entry (start, end) of the pool block holding `addr`, read as checked PTX reads it.
fn extent_of(a: &Allocator, addr: u64) -> (u64, u64) {
    let (base, _, _) = a.control_fields();
    let (table, shift) = a.extent_fields();
    let e = table + ((addr - base) >> shift) * 16;
    // SAFETY: host backend: the whole extent table is host memory mapped readable (real chunks or
    // the shared zero chunk); `e` is the 16-byte, 8-aligned entry of a pool address's block.
    unsafe { (std::ptr::read_volatile(e as *const u64), std::ptr::read_volatile((e + 8) as *const u64)) }
}

/// Every pool block (2 MiB) intersecting `[p, p+n)`, and the blocks either side inside the pool.
fn blocks_around(a: &Allocator, p: u64, n: u64) -> impl Iterator<Item = u64> {
    const B: u64 = 2 << 20;
    let (base, _, _) = a.control_fields();
    ((p & !(B - 1)).saturating_sub(B).max(base)..p + n + B).step_by(B as usize)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn live_blocks_are_aligned_disjoint_and_exactly_accessible(sizes in prop::collection::vec(1u64..600_000, 1..24), s7 in any::<bool>()) {
        let scale = if s7 { Scale::S7 } else { Scale::S8 };
        let a = allocator(scale, 256);
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for &n in &sizes {
            let p = a.alloc(n, None).unwrap();
            prop_assert_eq!(p % ALIGN, 0);
            for &(q, m) in &blocks {
                prop_assert!(p + n + 256 <= q || q + m + 256 <= p, "blocks {:#x}+{} and {:#x}+{} overlap or touch", p, n, q, m);
            }
            blocks.push((p, n));
        }
        for &(p, n) in &blocks {
            let enc = scale.encodable_size(n);
            // First, last and a middle byte are accessible; the byte after is not, nor the one before.
            prop_assert!(!bad(&a, p, 1));
            prop_assert!(!bad(&a, p + n - 1, 1));
            prop_assert!(!bad(&a, p + n / 2, 1));
            prop_assert!(bad(&a, p + enc, 1), "byte after a {}-byte block accessible", n);
            prop_assert!(bad(&a, p - 1, 1), "byte before a block accessible");
            prop_assert!(bad(&a, p + enc.div_ceil(256) * 256 + 64, 4));
            prop_assert_eq!(a.describe(p + enc).kind, AddrKind::OverflowRight { distance: enc - n });
        }
        // Freed memory is poisoned and described as use-after-free.
        for &(p, n) in &blocks {
            a.free(p, None).unwrap();
            prop_assert!(bad(&a, p, 1));
            prop_assert!(bad(&a, p + n - 1, 1));
            let uaf = matches!(a.describe(p + n / 2).kind, AddrKind::UseAfterFree { .. });
            prop_assert!(uaf, "freed block not described as use-after-free");
        }
    }

    #[test]
    fn virtual_addresses_are_never_reused(rounds in 1usize..40, big in any::<bool>()) {
        let a = allocator(Scale::S8, 0);
        let size = if big { 3 << 20 } else { 1000 };
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..rounds {
            let p = a.alloc(size, None).unwrap();
            prop_assert!(seen.insert(p), "address {:#x} handed out twice", p);
            a.free(p, None).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn extents_name_exactly_the_live_large_blocks(
        allocs in prop::collection::vec((prop_oneof![1u64..200_000, 200_000u64..7 << 20], any::<bool>(), any::<bool>()), 1..12)
    ) {
        let a = allocator(Scale::S8, 64);
        let stream = Some(gasan_uvm::Stream::SYNC);
        let mut blocks = Vec::new();
        for &(n, free, ordered) in &allocs {
            let p = a.alloc(n, None).unwrap();
            let large = a.live_allocations().iter().any(|b| b.start == p && b.large);
            blocks.push((p, n, large, free, ordered));
        }
        let check = |live: &[(u64, u64, bool)]| -> Result<(), TestCaseError> {
            for &(p, n, large) in live {
                for b in blocks_around(&a, p, n) {
                    let want = if large && b < p + n && p < b + (2 << 20) { (p, p + n) } else { (0, 0) };
                    prop_assert_eq!(extent_of(&a, b), want, "block {:#x} of {:#x}+{}", b, p, n);
                }
            }
            Ok(())
        };
        check(&blocks.iter().map(|&(p, n, l, ..)| (p, n, l)).collect::<Vec<_>>())?;
        for &(p, _, _, free, ordered) in &blocks {
            if free {
                a.free(p, if ordered { stream } else { None }).unwrap();
            }
        }
        // Freed blocks (stream-ordered ones too, though their memory is still held) read zero.
        check(&blocks.iter().map(|&(p, n, l, free, _)| (p, n, l && !free)).collect::<Vec<_>>())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A retired large block's shadow reads poisoned over its whole region (bytes and redzone),
    /// in its own window, though its retirement writes no shadow (the free's poisoning is all):
    /// with sync and stream-ordered frees, quarantine held or drained, tags on or off, and live
    /// neighbours keeping the shadow chunk backed.
    #[test]
    fn retired_large_blocks_read_poisoned_everywhere(sizes in prop::collection::vec((300_000u64..5_000_000, any::<bool>(), any::<bool>()), 1..10), tags4 in any::<bool>(), quarantine_mb in 0u64..16) {
        let a = tagged_allocator(Scale::S8, quarantine_mb, if tags4 { 4 } else { 1 });
        let g = a.scale().granule();
        let mut freed = Vec::new();
        for &(n, keep, stream_ordered) in &sizes {
            let p = a.alloc(n, None).unwrap();
            if keep {
                continue;
            }
            a.free(p, stream_ordered.then_some(gasan_uvm::Stream::SYNC)).unwrap();
            freed.push((p, n));
        }
        a.drain_quarantine();
        for (p, n) in freed {
            let end = p + n + a.redzone(n);
            for addr in (p..end).step_by(g as usize) {
                prop_assert_eq!(shadow_of(&a, addr), 0, "granule at +{} of a retired block of {}", addr - p, n);
            }
        }
    }
}

#[test]
fn large_blocks_have_guard_gaps_and_retire_on_free() {
    let a = allocator(Scale::S8, 256);
    let p = a.alloc(4 << 20, None).unwrap();
    let q = a.alloc(4 << 20, None).unwrap();
    assert!(q - (p + (4 << 20)) >= 4 << 20, "gap smaller than the allocation");
    // A far overflow lands in the gap: its shadow reads 0 (the shared zero chunk).
    assert!(bad(&a, p + (4 << 20) + 65536, 4));
    assert_eq!(a.describe(p + (4 << 20) + 65536).kind, AddrKind::OverflowRight { distance: 65536 });
    a.free(p, None).unwrap();
    assert!(bad(&a, p + 128, 4));
}

#[test]
fn free_errors_are_typed() {
    let a = allocator(Scale::S8, 256);
    let p = a.alloc(4000, None).unwrap();
    assert!(matches!(a.free(p + 16, None), Err(FreeError::NotBase { .. })));
    a.free(p, None).unwrap();
    assert!(matches!(a.free(p, None), Err(FreeError::DoubleFree { .. })));
    assert!(matches!(a.free(0x1234, None), Err(FreeError::Unknown { in_pool: false, .. })));
}

#[test]
fn host_api_ranges_are_checked() {
    let a = allocator(Scale::S7, 256);
    let p = a.alloc(4000, None).unwrap();
    assert!(a.check_range(p, 4000).is_ok());
    let e = a.check_range(p, 4256).unwrap_err();
    assert_eq!(e.bad, p + 4000);
    assert_eq!(e.desc.kind, AddrKind::OverflowRight { distance: 0 });
    assert_eq!(a.allocation_containing(p + 10), Some((p, 4000)));
    a.free(p, None).unwrap();
    assert!(a.check_range(p, 16).is_err());
    assert_eq!(a.allocation_containing(p + 10), None);
}

#[test]
fn leaks_are_the_live_blocks() {
    let a = allocator(Scale::S8, 256);
    let p = a.alloc(100, None).unwrap();
    let q = a.alloc(200, None).unwrap();
    a.free(p, None).unwrap();
    let live: Vec<u64> = a.live_allocations().iter().map(|b| b.start).collect();
    assert_eq!(live, vec![q]);
}

#[test]
fn synchronous_frees_release_slabs_at_once_and_stay_detected() {
    // 4 KiB blocks fill 2 MiB slabs; free each right away, as a storm of cudaMalloc/cudaFree does.
    let a = allocator(Scale::S8, 256);
    let first = a.alloc(4096, None).unwrap();
    a.free(first, None).unwrap();
    let mut peak = 0;
    let mut last = first;
    for _ in 0..2000 {
        last = a.alloc(4096, None).unwrap();
        peak = peak.max(a.mapped_bytes());
        a.free(last, None).unwrap();
    }
    assert!(last - first > 4 << 20, "the storm crossed several slabs");
    // Only the slab being filled is held: freed slabs went back even with a 256 MiB quarantine.
    assert!(peak <= 2 * (2 << 20), "peak mapped {peak} bytes");
    // The first block's slab is retired; the block is still a use-after-free, not a wild access.
    assert!(bad(&a, first, 4));
    assert!(matches!(a.describe(first).kind, AddrKind::UseAfterFree { .. }), "{:?}", a.describe(first).kind);
}

#[test]
fn stream_ordered_frees_are_held_up_to_the_quarantine_bound() {
    let a = allocator(Scale::S8, 4);
    let stream = Some(gasan_uvm::Stream::SYNC);
    let blocks: Vec<u64> = (0..2048).map(|_| a.alloc(4096, None).unwrap()).collect();
    let all = a.mapped_bytes();
    for &b in &blocks {
        a.free(b, stream).unwrap();
    }
    // Held until the 4 MiB bound; the slabs behind the older frees are released.
    let held = a.mapped_bytes();
    assert!(held < all && held >= 4 << 20, "mapped {all} before, {held} after");
    a.drain_quarantine();
    assert!(a.mapped_bytes() <= 2 << 20);
    assert!(bad(&a, blocks[0], 4) && bad(&a, blocks[2047], 4));
}

/// With tags, a pointer that walks from its block into a live neighbour reads poisoned shadow in
/// its own window and is described as a tag mismatch naming both blocks; the neighbour's own
/// pointer reads it as accessible. Host calls, frees and address ranges refuse the wrong tag.
#[test]
fn a_pointer_walking_into_a_live_neighbour_is_a_tag_mismatch() {
    for scale in [Scale::S7, Scale::S8] {
        for size in [4000u64, 64 << 10, 3 << 20] {
            let a = tagged_allocator(scale, 256, 4);
            let (p, q) = (a.alloc(size, None).unwrap(), a.alloc(size, None).unwrap());
            let (base, pool_size, _) = a.control_fields();
            let ws = pool_size / 4;
            let (tp, tq) = ((p - base) / ws, (q - base) / ws);
            assert_ne!(tp, tq, "neighbours get different tags");
            // q's first byte seen through p's window.
            let walked = q - tq * ws + tp * ws + 8;
            assert!(!bad(&a, q + 8, 4), "q's own pointer reads it");
            assert!(bad(&a, walked, 4), "p's pointer walking into q: size {size}, scale {scale:?}");
            let d = a.describe(walked);
            assert_eq!(d.kind, AddrKind::TagMismatch { ptr_tag: tp, mem_tag: tq, offset: 8 }, "size {size}");
            assert_eq!(d.alloc.as_ref().map(|b| b.start), Some(q));
            assert_eq!(d.ptr_alloc.as_ref().map(|b| b.start), Some(p));
            assert!(a.check_range(walked, 4).is_err());
            assert!(a.check_range(q, size).is_ok());
            assert_eq!(a.allocation_containing(walked), None);
            assert_eq!(a.allocation_containing(q + 8), Some((q, size)));
            assert!(matches!(a.free(walked - 8, None), Err(FreeError::Unknown { .. })), "a free through the wrong tag");
            // Overflows into the redzone keep their usual description.
            assert!(matches!(a.describe(p + size + 4).kind, AddrKind::OverflowRight { distance: 4 }));
            a.free(q, None).unwrap();
            assert!(matches!(a.describe(walked).kind, AddrKind::TagMismatch { .. }), "a freed neighbour still mismatches");
            assert!(matches!(a.describe(q + 8).kind, AddrKind::UseAfterFree { offset: 8 }));
            a.check_invariants().unwrap();
        }
    }
}

/// A pitched block's row padding is poisoned row by row and described as row padding; the rows'
/// own bytes stay accessible, and a free puts the whole block back to poisoned.
#[test]
fn pitched_rows_poison_their_padding() {
    for scale in [Scale::S7, Scale::S8] {
        // (The last is a large block: its extent entries must go, or checked loops and kernel-parameter
        // bounds would pass its padding; check_invariants says so.)
        for (width, pitch, rows) in [(1000u64, 1024u64, 64u64), (257, 512, 3), (100, 512, 1000), (2000, 2048, 512)] {
            let a = tagged_allocator(scale, 256, 4);
            let p = a.alloc(pitch * rows, None).unwrap();
            assert!(!a.set_rows(p, width, pitch + 1), "pitch not a granule multiple");
            assert!(!a.set_rows(p + 256, width, pitch), "not a block start");
            assert!(a.set_rows(p, width, pitch));
            for r in [0, rows / 2, rows - 1] {
                let row = p + r * pitch;
                let w = scale.encodable_size(width);
                assert!(!bad(&a, row, 1) && !bad(&a, row + width - 1, 1), "row {r} start/end");
                assert!(bad(&a, row + w, 1), "first padding byte of row {r} ({width}/{pitch}, {scale:?})");
                assert!(bad(&a, row + pitch - 4, 4), "last padding word of row {r}");
                assert_eq!(a.describe(row + w + 3).kind, AddrKind::RowPadding { row: r, past: w + 3 - width });
            }
            a.check_invariants().unwrap();
            a.free(p, None).unwrap();
            assert!(bad(&a, p, 1));
            a.check_invariants().unwrap();
        }
    }
}

/// With tags, large-block VA is swept again once used up: each canonical range serves each tag
/// once, so far more bytes can be allocated over time than the window holds, no pointer is handed
/// out twice, and every stale pointer still finds its freed block. Without tags the same churn runs
/// out of VA.
#[test]
fn large_churn_sweeps_the_va_again_under_new_tags() {
    let churn = |tags: u64| -> Result<usize, String> {
        let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 16 << 30, shift: 8, hints: vec![], max_size: 0, tags }).unwrap();
        let a = Allocator::new(pool, &Options { quarantine_size_mb: 0, malloc_context_size: 1, ..Options::default() });
        let mut seen = std::collections::HashSet::new();
        let mut stale = Vec::new();
        let mut keep = Vec::new();
        for i in 0..120usize {
            // 48 MiB blocks, one in eight kept live (so sweeps must step around them).
            let p = a.alloc((48 << 20) + 100, None).map_err(|e| format!("alloc {i}: {e}"))?;
            assert!(seen.insert(p), "pointer {p:#x} handed out twice");
            if i % 8 == 0 {
                keep.push(p);
            } else {
                a.free(p, None).unwrap();
                stale.push(p);
            }
            if i % 16 == 0 {
                a.check_invariants().map_err(|v| format!("after {i}: {v}"))?;
            }
        }
        a.check_invariants().map_err(|v| v.to_string())?;
        for &p in &stale {
            assert!(matches!(a.describe(p + 64).kind, AddrKind::UseAfterFree { offset: 64 }), "stale {p:#x}: {:?}", a.describe(p + 64).kind);
            assert!(bad(&a, p + 64, 4));
        }
        for &p in &keep {
            assert!(!bad(&a, p + 64, 4));
        }
        Ok(stale.len())
    };
    // 120 × 50 MiB through a 16 GiB pool: 4 windows of 4 GiB, 2 GiB of large VA each (about 120
    // such blocks over the sweeps, 15 kept live).
    assert_eq!(churn(4), Ok(105));
    assert!(churn(1).is_err(), "without tags the large VA (8 GiB, with guard gaps: about 80 such blocks) runs out");
}

/// With tags, once even the sweeps are used up, freed large blocks are forgotten and their VA
/// reused rather than failing the program; live blocks and the invariants are kept.
#[test]
fn exhausted_large_va_is_recycled_not_failed() {
    let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 16 << 30, shift: 8, hints: vec![], max_size: 0, tags: 4 }).unwrap();
    let a = Allocator::new(pool, &Options { quarantine_size_mb: 0, malloc_context_size: 1, ..Options::default() });
    let keep = a.alloc(100 << 20, None).unwrap();
    // 600 × 50 MiB = 29 GiB through 2 GiB of large VA per window.
    for i in 0..600 {
        let p = a.alloc(48 << 20, None).unwrap_or_else(|e| panic!("alloc {i}: {e}"));
        a.free(p, None).unwrap();
        if i % 50 == 0 {
            a.check_invariants().unwrap_or_else(|v| panic!("after {i}: {v}"));
        }
    }
    assert!(!bad(&a, keep + 4096, 4), "the live block survives the recycling");
    assert_eq!(a.allocation_containing(keep + 1), Some((keep, 100 << 20)));
    a.check_invariants().unwrap();
}

/// Managed allocations (host memory in the pool) are checked like device blocks: exact bounds in
/// the shadow, described as managed, freed into use-after-free; prefetch/advice ranges are
/// recognised only inside a live managed block.
#[test]
fn managed_blocks_are_pool_blocks_of_host_memory() {
    use gasan_uvm::Memory;
    for tags in [1, 4] {
        let a = tagged_allocator(Scale::S8, 0, tags);
        let dev = a.alloc(400, None).unwrap();
        let m = a.alloc_managed(400).unwrap();
        let big = a.alloc_managed(5 << 20).unwrap();
        let pinned = a.alloc_in(100, None, Memory::Host).unwrap();
        a.check_invariants().unwrap();
        for (p, n) in [(m, 400u64), (big, 5 << 20)] {
            assert!(!bad(&a, p, 4) && !bad(&a, p + n - 4, 4) && bad(&a, p + n, 4), "managed block {p:#x}+{n} bounds");
            let d = a.describe(p + n);
            assert_eq!(d.kind, AddrKind::OverflowRight { distance: 0 });
            let info = d.alloc.unwrap();
            assert_eq!((info.memory, info.space(), info.noun()), (Memory::Host, "managed", "managed region"));
            // The CPU shares the block at the same address (host backend: plain memory).
            // SAFETY: inside a live block, mapped read-write; nothing else aliases pool memory.
            unsafe { std::ptr::write_volatile((p + n - 1) as *mut u8, 7) };
            assert_eq!(a.managed_block(p + 8, n - 8), Some((p, n)));
        }
        // Moved to device memory (what a prefetch to the GPU does) and back, bytes kept.
        // SAFETY: inside a live block, mapped read-write; nothing else aliases pool memory.
        unsafe { std::ptr::write_volatile((big + 12345) as *mut u8, 0xab) };
        assert_eq!(a.managed_memory_at(big + 1), Some(Memory::Host));
        assert!(a.migrate_managed(big + 100, Memory::Device).unwrap());
        assert!(!a.migrate_managed(big, Memory::Device).unwrap(), "already on the device");
        assert_eq!(a.managed_memory_at(big + 1), Some(Memory::Device));
        a.check_invariants().unwrap();
        assert!(!bad(&a, big, 4) && bad(&a, big + (5 << 20), 4), "the shadow does not move");
        assert!(a.migrate_managed(big, Memory::Host).unwrap());
        // SAFETY: the same byte of the live block, mapped read-write again after the move back.
        assert_eq!(unsafe { std::ptr::read_volatile((big + 12345) as *const u8) }, 0xab);
        assert!(!a.migrate_managed(dev, Memory::Host).unwrap(), "a device block never moves");
        assert_eq!(a.managed_memory_at(dev), None);
        assert_eq!(a.describe(dev).alloc.unwrap().space(), "global");
        // Pinned host memory: a host block that is not managed and never moves.
        assert!(!bad(&a, pinned + 96, 4) && bad(&a, pinned + 100, 1));
        assert_eq!((a.describe(pinned + 100).alloc.unwrap().noun(), a.host_block_containing(pinned + 5)), ("pinned host region", Some((pinned, 100))));
        assert_eq!((a.managed_block(pinned, 4), a.managed_memory_at(pinned)), (None, None));
        assert!(!a.migrate_managed(pinned, Memory::Device).unwrap());
        assert_eq!(a.host_block_containing(m), Some((m, 400)).filter(|_| false), "a managed block is not a pinned host block");
        a.free(pinned, None).unwrap();
        assert_eq!(a.host_block_containing(pinned), None);
        assert_eq!(a.managed_block(dev, 4), None, "a device block is not managed");
        assert_eq!(a.managed_block(m, 1 << 30), None, "a range past the managed block's region");
        a.free(m, None).unwrap();
        assert!(bad(&a, m, 4));
        assert!(matches!(a.describe(m).kind, AddrKind::UseAfterFree { .. }));
        assert_eq!(a.managed_block(m, 4), None, "freed");
        a.free(big, None).unwrap();
        a.free(dev, None).unwrap();
        a.check_invariants().unwrap();
    }
}

/// Frees through the wrong driver call (cudaFree of pinned host memory, cudaFreeHost of device or
/// managed memory) are refused and free nothing; the right call then frees.
#[test]
fn frees_by_the_wrong_call_are_refused() {
    use gasan_runtime::allocator::FreeCall;
    use gasan_uvm::Memory;
    let a = tagged_allocator(Scale::S8, 0, 4);
    let (dev, managed, pinned) = (a.alloc(100, None).unwrap(), a.alloc_managed(100).unwrap(), a.alloc_in(100, None, Memory::Host).unwrap());
    for (p, wrong, right) in [(dev, FreeCall::PinnedHost, FreeCall::Device), (managed, FreeCall::PinnedHost, FreeCall::Device), (pinned, FreeCall::Device, FreeCall::PinnedHost)] {
        assert!(matches!(a.free_by(p, None, wrong), Err(FreeError::WrongCall { .. })), "{p:#x} freed by {wrong:?}");
        assert!(matches!(a.free_by(p + 8, None, wrong), Err(FreeError::WrongCall { .. })), "inside {p:#x}, by {wrong:?}");
        assert!(!bad(&a, p, 4), "{p:#x} still live");
        a.free_by(p, None, right).unwrap();
        assert!(matches!(a.free_by(p, None, right), Err(FreeError::DoubleFree { .. })));
    }
    a.check_invariants().unwrap();
}

/// Freed large blocks are unmapped by gasan's own thread (named `gasan-unmap`); once settled their
/// VA faults; after `stop_unmap_thread` (the process's exit) the freeing thread unmaps at once.
#[test]
fn the_unmap_thread_unmaps_freed_large_blocks_until_stopped() {
    use gasan_uvm::host::faults_in_child;
    let a = allocator(Scale::S8, 0);
    let read = |p: u64| {
        // SAFETY: reading pool VA (host backend) inside a forked child; a fault ends only the
        // child.
        faults_in_child(|| unsafe {
            std::ptr::read_volatile(p as *const u8);
        })
    };
    let p = a.alloc(3 << 20, None).unwrap();
    assert!(!read(p));
    a.free(p, None).unwrap();
    // Unmapped by the thread, with nobody waiting for it.
    let t = std::time::Instant::now();
    while !read(p) {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "the unmap thread never unmapped the block");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task").unwrap().filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok()).collect();
    assert!(threads.iter().any(|n| n.trim() == "gasan-unmap"), "{threads:?}");
    a.settle_unmaps();
    assert!(bad(&a, p, 4));
    a.stop_unmap_thread();
    let q = a.alloc(3 << 20, None).unwrap();
    a.free(q, None).unwrap();
    assert!(read(q), "unmapped by the freeing thread after the stop");
    a.check_invariants().unwrap();
}
