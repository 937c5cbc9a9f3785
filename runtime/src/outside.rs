//! The table of outside ranges kernels' checks read with `outside_checks=1`
//! ([`gasan_instrument::abi::outside`]): host memory the program registered, and managed or
//! pinned host memory the driver allocated (the pool could not take it). Kernels reach such
//! memory at its own address, outside the pool, so it has no shadow; the table gives its bounds.
//!
//! The table is pinned host memory mapped for the device, written only here: the inactive list
//! whole, then the offset that makes it active, so a kernel reading it meanwhile sees one list or
//! the other, never a mix.

use crate::allocator::HostStack;
use gasan_instrument::abi::outside::{self, Entry};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Ranges unregistered (or freed) that stay in the table, newest last, so that a kernel still
/// using one is reported.
const GONE_KEPT: usize = 16;

/// The ranges, as the runtime knows them, with the host stacks reports print.
#[derive(Default, Debug, Clone)]
pub struct Ranges {
    /// start -> (end (exclusive), where it was registered or allocated).
    live: BTreeMap<u64, (u64, HostStack)>,
    gone: VecDeque<Gone>,
}

#[derive(Debug, Clone)]
struct Gone {
    start: u64,
    end: u64,
    added: HostStack,
    removed: HostStack,
}

/// What a report says of an outside address ([`Ranges::near`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Near {
    pub start: u64,
    pub end: u64,
    /// Still registered (allocated); else gone, and `removed` says where.
    pub live: bool,
    pub added: HostStack,
    pub removed: Option<HostStack>,
}

impl Ranges {
    pub fn add(&mut self, start: u64, len: u64, stack: HostStack) {
        if len == 0 {
            return;
        }
        let end = start.saturating_add(len);
        // A range registered again over old ones replaces them (the memory was reused).
        let stale: Vec<u64> = self.live.range(..end).filter(|(_, (e, _))| *e > start).map(|(&s, _)| s).collect();
        for s in stale {
            self.live.remove(&s);
        }
        self.gone.retain(|g| g.end <= start || g.start >= end);
        self.live.insert(start, (end, stack));
    }

    /// The range starting at `start` is gone (unregistered, freed at `stack`). Returns whether
    /// there was one.
    pub fn remove(&mut self, start: u64, stack: HostStack) -> bool {
        let Some((end, added)) = self.live.remove(&start) else { return false };
        self.gone.push_back(Gone { start, end, added, removed: stack });
        while self.gone.len() > GONE_KEPT {
            self.gone.pop_front();
        }
        true
    }

    /// The device's list: every live range, then the gone ones, at most
    /// [`outside::CAPACITY`] entries. When there are more live ranges, neighbours are merged
    /// (closest first): the bytes between them then pass, so merging can only miss an error,
    /// never invent one; gone ranges are dropped first (oldest first).
    pub fn entries(&self) -> Vec<Entry> {
        let mut live: Vec<(u64, u64)> = self.live.iter().map(|(&s, (e, _))| (s, *e)).collect();
        while live.len() > outside::CAPACITY {
            let i = (0..live.len() - 1).min_by_key(|&i| live[i + 1].0 - live[i].1).expect("two or more ranges");
            live[i].1 = live[i + 1].1;
            live.remove(i + 1);
        }
        let room = outside::CAPACITY - live.len();
        let gone = self.gone.iter().rev().take(room).filter(|g| !live.iter().any(|&(ls, le)| g.start < le && ls < g.end));
        live.iter().map(|&(s, e)| Entry::live(s, e)).chain(gone.map(|g| Entry::gone(g.start, g.end))).collect()
    }

    /// What a report says of an access at `addr` the device reported: the live range it is
    /// within [`outside::REDZONE`] of, or else the gone range holding it.
    pub fn near(&self, addr: u64) -> Option<Near> {
        let within = |s: u64, e: u64| addr >= s.saturating_sub(outside::REDZONE) && addr < e.saturating_add(outside::REDZONE);
        let dist = |s: u64, e: u64| if addr < s { s - addr } else { addr.saturating_sub(e) };
        let live = self.live.iter().filter(|(&s, (e, _))| within(s, *e)).min_by_key(|(&s, (e, _))| dist(s, *e));
        match live {
            Some((&start, (end, added))) => Some(Near { start, end: *end, live: true, added: added.clone(), removed: None }),
            None => {
                self.gone.iter().rev().find(|g| addr >= g.start && addr < g.end).map(|g| Near { start: g.start, end: g.end, live: false, added: g.added.clone(), removed: Some(g.removed.clone()) })
            }
        }
    }
}

/// Writes `entries` as the list that is not active in `table` (the whole table, laid out as
/// [`outside`] says), then makes it the active one.
pub fn publish(table: &mut [u8], entries: &[Entry]) {
    assert!(table.len() >= outside::TABLE_SIZE && entries.len() <= outside::CAPACITY);
    let active = u64::from_le_bytes(table[..8].try_into().expect("8 bytes"));
    let next = if active == outside::LISTS[1] as u64 { outside::LISTS[0] } else { outside::LISTS[1] };
    table[next..next + 8].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let at = next + outside::LIST_HEADER + i * outside::ENTRY_SIZE;
        table[at..at + outside::ENTRY_SIZE].copy_from_slice(&e.to_bytes());
    }
    // The list is complete before a reader can find it.
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    table[..8].copy_from_slice(&(next as u64).to_le_bytes());
}

/// The table in pinned, device-mapped host memory, and the ranges it holds.
pub struct OutsideTable {
    host: *mut u8,
    device: u64,
    ranges: Mutex<Ranges>,
}

// SAFETY: `host` is a process-lifetime allocation only written under `ranges`' lock.
unsafe impl Send for OutsideTable {}
// SAFETY: as for Send.
unsafe impl Sync for OutsideTable {}

impl OutsideTable {
    /// Allocates the table (never freed: kernels may read it until the process ends), with an
    /// empty active list. Needs a current context.
    pub fn new() -> Result<Self, crate::driver::CuResult> {
        use cudarc::driver::sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE};
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let r = crate::driver::api::cuMemHostAlloc(&mut host, outside::TABLE_SIZE, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
        if r != crate::driver::CUDA_SUCCESS || host.is_null() {
            return Err(r);
        }
        // SAFETY: TABLE_SIZE bytes just allocated, not yet shared with the device. Zeroed, with
        // the first list (count 0) active.
        let table = unsafe { std::slice::from_raw_parts_mut(host.cast::<u8>(), outside::TABLE_SIZE) };
        table.fill(0);
        table[..8].copy_from_slice(&(outside::LISTS[0] as u64).to_le_bytes());
        let mut device = 0u64;
        let r = crate::driver::api::cuMemHostGetDevicePointer_v2(&mut device, host, 0);
        if r != crate::driver::CUDA_SUCCESS {
            return Err(r);
        }
        Ok(OutsideTable { host: host.cast(), device, ranges: Mutex::new(Ranges::default()) })
    }

    /// The table's device address (the control block's `outside_ranges`).
    pub fn device_address(&self) -> u64 {
        self.device
    }

    pub fn add(&self, start: u64, len: u64, stack: HostStack) {
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        r.add(start, len, stack);
        self.write(&r);
    }

    pub fn remove(&self, start: u64, stack: HostStack) {
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        if r.remove(start, stack) {
            self.write(&r);
        }
    }

    pub fn near(&self, addr: u64) -> Option<Near> {
        self.ranges.lock().unwrap_or_else(|e| e.into_inner()).near(addr)
    }

    fn write(&self, r: &Ranges) {
        // SAFETY: the table's TABLE_SIZE bytes, written only here, under the ranges' lock (the
        // device only reads them).
        let table = unsafe { std::slice::from_raw_parts_mut(self.host, outside::TABLE_SIZE) };
        publish(table, &r.entries());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gasan_instrument::abi::outside::must_report;
    use proptest::prelude::*;

    /// The active list of a published table, read as the device reads it.
    fn active(table: &[u8]) -> Vec<Entry> {
        let word = |at: usize| u64::from_le_bytes(table[at..at + 8].try_into().unwrap());
        let list = word(0) as usize;
        (0..word(list) as usize)
            .map(|i| {
                let at = list + outside::LIST_HEADER + i * outside::ENTRY_SIZE;
                Entry { start: word(at), len: word(at + 8), near_lo: word(at + 16), near_len: word(at + 24) }
            })
            .collect()
    }

    proptest! {
        /// Whatever was registered and unregistered, in whatever order: an access inside a live
        /// range is never reported, one just past a live range's end that no live range holds
        /// is (while the table has room), and the table read back is what was published.
        #[test]
        fn live_ranges_pass_and_their_edges_do_not(ops in prop::collection::vec((0u64..64, 1u64..8, any::<bool>()), 1..40), probe in 0u64..80, width in 1u64..9) {
            let mut r = Ranges::default();
            let mut table = vec![0u8; outside::TABLE_SIZE];
            for (slot, len, unregister) in ops {
                let start = 0x10_0000 + slot * 0x1000;
                if unregister { r.remove(start, HostStack::default()); } else { r.add(start, len * 100, HostStack::default()); }
                publish(&mut table, &r.entries());
            }
            let entries = active(&table);
            prop_assert_eq!(&entries, &r.entries());
            let addr = 0x10_0000 + probe * 0x400;
            let inside_live = r.live.iter().any(|(&s, &(e, _))| addr >= s && addr + width <= e);
            prop_assert!(!(inside_live && must_report(&entries, addr, width)));
            for (&s, &(e, _)) in &r.live {
                let holds = r.live.iter().any(|(&s2, &(e2, _))| e >= s2 && e < e2);
                prop_assert_eq!(must_report(&entries, e, 1), !holds, "one past [{:#x},{:#x})", s, e);
            }
        }
    }

    #[test]
    fn more_ranges_than_the_table_holds_merge_and_never_report_inside() {
        let mut r = Ranges::default();
        for i in 0..(outside::CAPACITY as u64 + 40) {
            r.add(0x1000_0000 + i * 0x10000 + (i % 7) * 64, 512, HostStack::default());
        }
        let e = r.entries();
        assert_eq!(e.len(), outside::CAPACITY);
        for (&s, &(end, _)) in &r.live {
            assert!(!must_report(&e, s, 4) && !must_report(&e, end - 4, 4), "[{s:#x},{end:#x})");
        }
        // The last range's right edge is still reported.
        let (_, &(last, _)) = r.live.iter().next_back().unwrap();
        assert!(must_report(&e, last, 1));
    }

    #[test]
    fn unregistered_ranges_are_reported_until_registered_again() {
        let (at_add, at_remove) = (HostStack(vec![1, 2]), HostStack(vec![3]));
        let mut r = Ranges::default();
        r.add(0x5000, 0x800, at_add.clone());
        assert!(r.remove(0x5000, at_remove.clone()));
        assert!(must_report(&r.entries(), 0x5100, 4));
        assert_eq!(r.near(0x5100), Some(Near { start: 0x5000, end: 0x5800, live: false, added: at_add.clone(), removed: Some(at_remove) }));
        r.add(0x5000, 0x800, at_add.clone());
        assert!(!must_report(&r.entries(), 0x5100, 4));
        assert_eq!(r.near(0x5800 + 12), Some(Near { start: 0x5000, end: 0x5800, live: true, added: at_add, removed: None }));
        assert_eq!(r.near(0x5800 + outside::REDZONE), None);
        assert!(!r.remove(0x9000, HostStack::default()));
    }
}
