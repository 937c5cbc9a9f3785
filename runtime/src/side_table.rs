//! Memory gasan does not place in its pool but must know about: managed allocations,
//! page-locked / registered host memory, other GPUs' memory and NCCL's own (`ncclMemAlloc`). They pass through to the driver unchanged and are tracked
//! here so that frees are recognised, ranges can be described, and later checking has its table.

use crate::allocator::HostStack;
use crate::outside::OutsideTable;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForeignKind {
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemHostAlloc` / `cuMemAllocHost`.
    HostAlloc,
    /// `cuMemHostRegister`.
    HostRegistered,
    /// Device memory of a GPU other than the pool's (multi-GPU programs): passed through unchecked.
    OtherDevice,
    /// `ncclMemAlloc`: NCCL's own VMM device memory (cuMemCreate + cuMemMap at a VA NCCL
    /// reserves, outside the pool). Its bounds are the size the program asked for: host calls
    /// (NCCL's collectives, copies, sets) running past them are overflows; kernels reach it at its
    /// own address, so with `outside_checks=1` the outside table holds it too.
    NcclMem,
    /// `ncclMemAlloc` memory the program gave back with `ncclMemFree`: kept (its range, no longer
    /// mapped by NCCL) until something new is recorded over it or [`SideTable::retire_freed`]
    /// drops it, so that a host call on it is a use after free, not a wild address. Kernels' view
    /// of it is the outside table's range marked gone at the free.
    NcclMemFreed,
    /// A `cuMemMap` of the program's (or a library's: NCCL's internal buffers, XLA's platform
    /// allocator, PyTorch's expandable segments) at a VA outside the pool: known, not checked.
    /// Kernels reach it, so with `outside_checks=1` the outside table holds it as a live range,
    /// which an access inside passes: a buffer next to one gasan checks (an `ncclMemAlloc`'s) is
    /// then never taken for an overflow of that one.
    VmmMapping,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignRegion {
    pub start: u64,
    pub len: u64,
    pub kind: ForeignKind,
}

#[derive(Default)]
pub struct SideTable {
    regions: Mutex<BTreeMap<u64, ForeignRegion>>,
    /// The starts of the [`ForeignKind::NcclMemFreed`] records, oldest first.
    freed_order: Mutex<std::collections::VecDeque<u64>>,
}

impl SideTable {
    /// Records a region; one that overlaps older entries replaces them (the driver reused the VA).
    pub fn insert(&self, start: u64, len: u64, kind: ForeignKind) {
        if len == 0 {
            return;
        }
        let mut m = self.regions.lock().unwrap();
        let stale: Vec<u64> = m.range(..start + len).filter(|(_, r)| r.start + r.len > start).map(|(&k, _)| k).collect();
        for k in stale {
            m.remove(&k);
        }
        m.insert(start, ForeignRegion { start, len, kind });
    }

    /// Forgets the region that starts at `start` (a free), returning it.
    pub fn remove(&self, start: u64) -> Option<ForeignRegion> {
        self.regions.lock().unwrap().remove(&start)
    }

    /// The region holding `addr`.
    pub fn find(&self, addr: u64) -> Option<ForeignRegion> {
        let m = self.regions.lock().unwrap();
        m.range(..=addr).next_back().map(|(_, r)| *r).filter(|r| addr < r.start + r.len)
    }

    /// The `ncclMemFree`'d region at `start` becomes a [`ForeignKind::NcclMemFreed`] record; with
    /// more than `keep` such records, the oldest ones (by free order) are dropped, so a program
    /// that cycles NCCL memory keeps the table small. Returns whether `start` was NCCL's.
    pub fn retire_freed(&self, start: u64, keep: usize) -> bool {
        let mut m = self.regions.lock().unwrap();
        let Some(r) = m.get_mut(&start).filter(|r| r.kind == ForeignKind::NcclMem) else { return false };
        r.kind = ForeignKind::NcclMemFreed;
        let mut order = self.freed_order.lock().unwrap_or_else(|e| e.into_inner());
        order.push_back(start);
        while order.len() > keep {
            let old = order.pop_front().expect("longer than keep");
            if m.get(&old).is_some_and(|r| r.kind == ForeignKind::NcclMemFreed) {
                m.remove(&old);
            }
        }
        true
    }

    pub fn count(&self, kind: ForeignKind) -> usize {
        self.regions.lock().unwrap().values().filter(|r| r.kind == kind).count()
    }

    /// Records foreign memory the driver just handed out or registered and, when kernels reach
    /// it, gives them its bounds in `outside()` (the first device's table of outside ranges,
    /// asked for only then; `None` when `outside_checks=0`), with the caller's stack of
    /// `stack_depth` frames.
    pub fn record<'a>(&self, start: u64, len: u64, kind: ForeignKind, outside: impl FnOnce() -> Option<&'a OutsideTable>, stack_depth: u32) {
        self.insert(start, len, kind);
        if kind.kernels_reach() {
            if let Some(t) = outside() {
                t.add(start, len, HostStack::capture(stack_depth));
            }
        }
    }

    /// Forgets the foreign memory starting at `start` (freed, unregistered), returning it, and
    /// marks its range gone in `outside()` when kernels reached it (as [`SideTable::record`]).
    pub fn forget<'a>(&self, start: u64, outside: impl FnOnce() -> Option<&'a OutsideTable>, stack_depth: u32) -> Option<ForeignRegion> {
        let r = self.remove(start);
        if r.is_some_and(|r| r.kind.kernels_reach()) {
            if let Some(t) = outside() {
                t.remove(start, HostStack::capture(stack_depth));
            }
        }
        r
    }

    /// A device report's address outside the pool, described from the table of outside ranges
    /// `outside` (`outside_checks=1`): past a live range's end, before its start, or in a range
    /// gone since (unregistered or freed). `None`: not near one.
    pub fn describe_outside(&self, outside: &OutsideTable, addr: u64, scale: gasan_instrument::shadow::Scale) -> Option<crate::allocator::AddrDescription> {
        use crate::allocator::AddrKind;
        let near = outside.near(addr)?;
        let (start, end, live) = (near.start, near.end, near.live);
        // A gone range is no longer in the side table: it was host memory of some kind.
        let r = self.find(start).filter(|r| live && r.start == start).unwrap_or(ForeignRegion { start, len: end - start, kind: ForeignKind::HostRegistered });
        let (at, kind) = match () {
            _ if !live => (addr, AddrKind::UseAfterFree { offset: addr - start }),
            _ if addr < start => (addr, AddrKind::OverflowLeft { distance: start - addr }),
            // An access that starts inside and runs past the end: its first bad byte.
            _ => {
                let bad = addr.max(end);
                (bad, AddrKind::OverflowRight { distance: bad - end })
            }
        };
        Some(foreign_description(at, kind, &r, live, (near.added, near.removed), scale))
    }
}

impl ForeignKind {
    /// Memory of this kind that kernels of the pool's GPU reach (the outside table holds it).
    pub fn kernels_reach(self) -> bool {
        !matches!(self, ForeignKind::OtherDevice | ForeignKind::NcclMemFreed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a byte-level model: every address maps to the newest region covering it.
        #[test]
        fn find_agrees_with_a_model(ops in prop::collection::vec((0u64..64, 1u64..16, any::<bool>()), 1..30), probe in 0u64..80) {
            let t = SideTable::default();
            let mut model: Vec<Option<u64>> = vec![None; 96];
            for (start, len, free) in ops {
                if free {
                    if let Some(r) = t.remove(start) {
                        for a in r.start..r.start + r.len { model[a as usize] = None; }
                    }
                } else {
                    // Overlapped regions disappear entirely, as in `insert`.
                    let mut gone = vec![];
                    for a in start..start + len {
                        if let Some(s) = model[a as usize] { gone.push(s); }
                    }
                    for s in gone {
                        for m in model.iter_mut() { if *m == Some(s) { *m = None; } }
                    }
                    t.insert(start, len, ForeignKind::Managed);
                    for a in start..start + len { model[a as usize] = Some(start); }
                }
            }
            prop_assert_eq!(t.find(probe).map(|r| r.start), model[probe as usize]);
        }
    }

    #[test]
    fn freed_nccl_memory_is_kept_for_the_last_frees_and_replaced_by_new_records() {
        let t = SideTable::default();
        for i in 0..5u64 {
            t.insert(0x10000 * (i + 1), 4000, ForeignKind::NcclMem);
        }
        assert!(!t.retire_freed(0x10000 + 8, 3), "not a region's start");
        assert!(!t.retire_freed(0x90000, 3), "nothing there");
        for i in 0..5u64 {
            assert!(t.retire_freed(0x10000 * (i + 1), 3));
        }
        // The last three frees kept, the older two dropped.
        assert_eq!(t.count(ForeignKind::NcclMemFreed), 3);
        assert_eq!(t.find(0x10000 + 100), None);
        let kept = t.find(0x50000 + 3999).expect("the last free is kept");
        assert_eq!(kept.kind, ForeignKind::NcclMemFreed);
        let s = gasan_instrument::shadow::Scale::S8;
        let desc = freed_use(&kept, 0x50000 + 16, s).expect("a use after free");
        assert!(matches!(desc.kind, crate::allocator::AddrKind::UseAfterFree { offset: 16 }));
        assert!(freed_use(&kept, 0x50000 + 4000, s).is_none(), "past the region");
        // A new allocation over a freed range replaces it; a freed range twice is not retired again.
        t.insert(0x50000, 100, ForeignKind::NcclMem);
        assert_eq!(t.find(0x50000).map(|r| r.kind), Some(ForeignKind::NcclMem));
        assert!(!t.retire_freed(0x40000, 3), "already freed");
        assert!(!ForeignKind::NcclMemFreed.kernels_reach());
    }

    #[test]
    fn an_exact_record_over_a_mapping_replaces_it() {
        // NCCL maps 2 MiB, then ncclMemAlloc answers with the 4000 bytes asked for.
        let t = SideTable::default();
        t.insert(0x20_0000, 0x20_0000, ForeignKind::VmmMapping);
        assert_eq!(t.find(0x30_0000).map(|r| r.kind), Some(ForeignKind::VmmMapping));
        t.insert(0x20_0000, 4000, ForeignKind::NcclMem);
        assert_eq!((t.count(ForeignKind::VmmMapping), t.count(ForeignKind::NcclMem)), (0, 1));
        assert_eq!(t.find(0x20_0000 + 4000), None, "past the size asked: not NCCL's buffer any more");
        assert!(ForeignKind::VmmMapping.kernels_reach());
    }

    #[test]
    fn kinds_are_counted_and_frees_forget() {
        let t = SideTable::default();
        t.insert(0x1000, 0x100, ForeignKind::Managed);
        t.insert(0x9000, 0x100, ForeignKind::HostAlloc);
        assert_eq!((t.count(ForeignKind::Managed), t.count(ForeignKind::HostAlloc)), (1, 1));
        assert_eq!(t.find(0x10ff).map(|r| r.kind), Some(ForeignKind::Managed));
        assert_eq!(t.find(0x1100), None);
        assert_eq!(t.remove(0x1000).map(|r| r.len), Some(0x100));
        assert_eq!(t.find(0x1000), None);
    }
}

/// Checks `[addr, addr + len)` of a host API call (memcpy/memset) that starts in the managed or
/// pinned host allocation `r`: a range running past the bytes the program asked for is an overflow, even
/// though the driver's mapping (whole pages) would let it through. `Some` describes the first
/// byte past the allocation.
pub fn range_overflow(r: &ForeignRegion, addr: u64, len: u64, scale: gasan_instrument::shadow::Scale) -> Option<crate::allocator::AddrDescription> {
    let end = r.start + r.len;
    if len == 0 || addr < r.start || addr.saturating_add(len) <= end {
        return None;
    }
    let bad = addr.max(end);
    Some(foreign_description(bad, crate::allocator::AddrKind::OverflowRight { distance: bad - end }, r, true, Default::default(), scale))
}

/// A host API call's `[addr, addr + len)` that starts in `ncclMemFree`'d memory `r`: a use after
/// free, described at `addr`.
pub fn freed_use(r: &ForeignRegion, addr: u64, scale: gasan_instrument::shadow::Scale) -> Option<crate::allocator::AddrDescription> {
    (r.kind == ForeignKind::NcclMemFreed && (r.start..r.start + r.len).contains(&addr))
        .then(|| foreign_description(addr, crate::allocator::AddrKind::UseAfterFree { offset: addr - r.start }, r, false, Default::default(), scale))
}

/// What a report says of a bad access at `addr` in or near foreign region `r` (`live`: still
/// registered or allocated).
pub(crate) fn foreign_description(
    addr: u64,
    kind: crate::allocator::AddrKind,
    r: &ForeignRegion,
    live: bool,
    stacks: (crate::allocator::HostStack, Option<crate::allocator::HostStack>),
    scale: gasan_instrument::shadow::Scale,
) -> crate::allocator::AddrDescription {
    crate::allocator::AddrDescription {
        addr,
        kind,
        ptr_alloc: None,
        alloc: Some(crate::allocator::AllocInfo {
            id: 0,
            start: r.start,
            tag: 0,
            size: r.len,
            region_end: r.start + r.len,
            large: false,
            managed: r.kind == ForeignKind::Managed,
            memory: if matches!(r.kind, ForeignKind::NcclMem | ForeignKind::NcclMemFreed) { gasan_uvm::Memory::Device } else { gasan_uvm::Memory::Host },
            live,
            alloc_stack: stacks.0,
            free_stack: stacks.1,
            heap_block: None,
            registered: r.kind == ForeignKind::HostRegistered,
            rows: None,
        }),
        shadow: None,
        scale,
    }
}

#[cfg(test)]
mod managed_range_tests {
    use super::*;

    #[test]
    fn outside_records_name_the_registered_region_and_the_bug() {
        use crate::allocator::AddrKind;
        use gasan_instrument::abi::ErrorRecord;
        let r = ForeignRegion { start: 0x5555_0000_1000, len: 4000, kind: ForeignKind::HostRegistered };
        let s = gasan_instrument::shadow::Scale::S8;
        let cases = [
            (foreign_description(r.start + 4000, AddrKind::OverflowRight { distance: 0 }, &r, true, Default::default(), s), "heap-buffer-overflow", "0 bytes after 4000-byte host-registered region"),
            (foreign_description(r.start - 8, AddrKind::OverflowLeft { distance: 8 }, &r, true, Default::default(), s), "heap-buffer-overflow", "8 bytes before 4000-byte host-registered region"),
            (
                foreign_description(r.start + 16, AddrKind::UseAfterFree { offset: 16 }, &r, false, (Default::default(), Some(Default::default())), s),
                "heap-use-after-free",
                "16 bytes inside of 4000-byte host-registered region",
            ),
        ];
        for (desc, kind, place) in cases {
            let record = ErrorRecord { addr: desc.addr, module_id: 0, width: 4, ..Default::default() };
            let rep = crate::report::device_report(record, &[] as &[gasan_instrument::ptx::SiteTable], desc, 0);
            let text = crate::report::format_text(&rep);
            assert!(text.contains(kind) && text.contains(place), "{text}");
            // Registered memory was registered (and unregistered), not allocated.
            assert!(text.contains("registered by thread T0 here:") && !text.contains("allocated by"), "{text}");
            assert_eq!(text.contains("unregistered by thread T0 here:"), kind == "heap-use-after-free", "{text}");
            let json: serde_json::Value = serde_json::from_str(&crate::report::format_json(&rep)).unwrap();
            assert_eq!((json["kind"].as_str(), json["location"]["space"].as_str()), (Some(kind), Some("host-registered")), "{json}");
        }
    }

    #[test]
    fn ncclmemalloc_memory_is_device_memory_checked_against_its_size() {
        let r = ForeignRegion { start: 0x7f00_0000_0000, len: 4000, kind: ForeignKind::NcclMem };
        let s = gasan_instrument::shadow::Scale::S8;
        assert!(range_overflow(&r, r.start, 4000, s).is_none());
        let d = range_overflow(&r, r.start + 8, 4000, s).unwrap();
        assert_eq!((d.addr, d.kind), (r.start + 4000, crate::allocator::AddrKind::OverflowRight { distance: 0 }));
        let a = d.alloc.unwrap();
        assert_eq!((a.space(), a.noun(), a.size, a.registered, a.managed), ("global", "region", 4000, false, false));
        // Kernels reach it at its own address: the outside table holds it (outside_checks=1).
        assert!(ForeignKind::NcclMem.kernels_reach());
    }

    #[test]
    fn managed_ranges_past_the_requested_size_are_overflows() {
        let r = ForeignRegion { start: 0x1000, len: 4000, kind: ForeignKind::Managed };
        let s = gasan_instrument::shadow::Scale::S8;
        assert!(range_overflow(&r, 0x1000, 4000, s).is_none());
        assert!(range_overflow(&r, 0x1000 + 3996, 4, s).is_none());
        assert!(range_overflow(&r, 0x1000, 0, s).is_none());
        let d = range_overflow(&r, 0x1000, 4096, s).unwrap();
        assert_eq!((d.addr, d.kind), (0x1000 + 4000, crate::allocator::AddrKind::OverflowRight { distance: 0 }));
        assert_eq!(d.alloc.unwrap().size, 4000);
        let d = range_overflow(&r, 0x1000 + 3998, 4, s).unwrap();
        assert_eq!(d.addr, 0x1000 + 4000);
    }
}
