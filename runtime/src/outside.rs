//! The table of outside ranges kernels' checks read with `outside_checks=1`
//! ([`gasan_instrument::abi::outside`]): host memory the program registered, and managed or
//! pinned host memory the driver allocated (the pool could not take it). Kernels reach such
//! memory at its own address, outside the pool, so it has no shadow; the table gives its bounds.
//!
//! The table is device memory, written only here: the inactive list whole, then the offset that
//! makes it active ([`OutsideTable`]).

use crate::allocator::HostStack;
use gasan_instrument::abi::outside::{self, publish, Entry};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Ranges unregistered (or freed) that stay in the table, newest last, so that a kernel still
/// using one is reported.
const GONE_KEPT: usize = 16;

/// The ranges, as the runtime knows them, with the host stacks reports print.
///
/// Each range has a place in the device's list (a slot) that it keeps while it is live and then
/// gone: publishing rewrites the list a kernel may be reading (the two lists take turns, so a
/// kernel that runs across two publications reads one while it is written), and a live range's
/// entry must read the same, old bytes or new, or the kernel's access to it is reported. Only
/// past [`outside::CAPACITY`] live ranges, which are then merged, do entries move.
#[derive(Default, Debug, Clone)]
pub struct Ranges {
    /// start -> (end (exclusive), where it was registered or allocated).
    live: BTreeMap<u64, (u64, HostStack)>,
    gone: VecDeque<Gone>,
    /// The list's slots: the start of the live or gone range that holds each (a live range and a
    /// gone one never share a start: registering drops the gone ranges it overlaps).
    slots: Vec<Option<u64>>,
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
            self.free_slot(s);
        }
        let (dropped, kept): (VecDeque<Gone>, VecDeque<Gone>) = std::mem::take(&mut self.gone).into_iter().partition(|g| g.start < end && g.end > start);
        self.gone = kept;
        for g in dropped {
            self.free_slot(g.start);
        }
        self.live.insert(start, (end, stack));
        self.settle();
    }

    /// Gives every live range a slot, while they fit ([`Ranges::entries`] merges them when not).
    fn settle(&mut self) {
        if self.live.len() > outside::CAPACITY {
            return;
        }
        let held: std::collections::HashSet<u64> = self.slots.iter().flatten().copied().collect();
        let missing: Vec<u64> = self.live.keys().filter(|s| !held.contains(s)).copied().collect();
        for start in missing {
            self.take_slot(start);
        }
    }

    /// A slot for the range at `start`: the first free one, else a new one while the list has
    /// room, else the oldest gone range's.
    fn take_slot(&mut self, start: u64) {
        let free = match self.slots.iter().position(Option::is_none) {
            Some(i) => Some(i),
            None if self.slots.len() < outside::CAPACITY => {
                self.slots.push(None);
                Some(self.slots.len() - 1)
            }
            None => loop {
                let Some(g) = self.gone.pop_front() else { break None };
                if let Some(i) = self.slots.iter().position(|&o| o == Some(g.start)) {
                    break Some(i);
                }
            },
        };
        if let Some(i) = free {
            self.slots[i] = Some(start);
        }
    }

    /// Frees the slot of the range at `start`. Free slots at the end are dropped: kernels scan
    /// the list on every access outside the pool, and a shorter count moves no other entry.
    fn free_slot(&mut self, start: u64) {
        if let Some(slot) = self.slots.iter_mut().find(|o| **o == Some(start)) {
            *slot = None;
        }
        while self.slots.last() == Some(&None) {
            self.slots.pop();
        }
    }

    /// The range starting at `start` is gone (unregistered, freed at `stack`). Returns whether
    /// there was one.
    pub fn remove(&mut self, start: u64, stack: HostStack) -> bool {
        let Some((end, added)) = self.live.remove(&start) else { return false };
        // (The gone range keeps the live one's slot.)
        self.gone.push_back(Gone { start, end, added, removed: stack });
        while self.gone.len() > GONE_KEPT {
            if let Some(g) = self.gone.pop_front() {
                self.free_slot(g.start);
            }
        }
        self.settle();
        true
    }

    /// The device's list: each live or gone range at its slot, a free slot an entry that holds
    /// and is near nothing. When there are more live ranges than [`outside::CAPACITY`], every
    /// live range, neighbours merged (closest first: the bytes between them then pass, so merging
    /// can only miss an error, never invent one), then the newest gone ones.
    pub fn entries(&self) -> Vec<Entry> {
        if self.live.len() <= outside::CAPACITY {
            let gone: BTreeMap<u64, u64> = self.gone.iter().map(|g| (g.start, g.end)).collect();
            return self
                .slots
                .iter()
                .map(|o| match o {
                    Some(s) => match (self.live.get(s), gone.get(s)) {
                        (Some((e, _)), _) => Entry::live(*s, *e),
                        (None, Some(&e)) => Entry::gone(*s, e),
                        (None, None) => Entry::default(),
                    },
                    None => Entry::default(),
                })
                .collect();
        }
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

/// The table in device memory (kernels read it through their caches: a table in host memory
/// cost a read across the bus per entry per check, 28× native on runtime/gpu/mt_register.cu),
/// a host copy of it, and the ranges it holds. It is written on a stream of its own, the list
/// first and the active offset after, and waited for, so a kernel launched after a registration
/// returns sees it. One running meanwhile may read a list as it is rewritten; its own ranges'
/// entries read the same in every list ([`Ranges`]: slots).
pub struct OutsideTable {
    device: u64,
    stream: crate::driver::result::Stream,
    state: Mutex<(Ranges, Vec<u8>)>,
}

impl OutsideTable {
    /// Allocates the table (never freed: kernels may read it until the process ends), with an
    /// empty active list. Needs a current context.
    pub fn new() -> Result<Self, crate::driver::DriverError> {
        use crate::driver::result;
        let device = result::mem_alloc(outside::TABLE_SIZE)?;
        let stream = result::Stream::new(cudarc::driver::sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
        let mut host = vec![0u8; outside::TABLE_SIZE];
        publish(&mut host, &[]);
        let t = OutsideTable { device, stream, state: Mutex::new((Ranges::default(), Vec::new())) };
        t.copy(&host, 0..outside::TABLE_SIZE)?;
        t.state.lock().unwrap_or_else(|e| e.into_inner()).1 = host;
        Ok(t)
    }

    /// The table's device address (the control block's `outside_ranges`).
    pub fn device_address(&self) -> u64 {
        self.device
    }

    pub fn add(&self, start: u64, len: u64, stack: HostStack) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0.add(start, len, stack);
        self.write(&mut st);
    }

    pub fn remove(&self, start: u64, stack: HostStack) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.0.remove(start, stack) {
            self.write(&mut st);
        }
    }

    pub fn near(&self, addr: u64) -> Option<Near> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0.near(addr)
    }

    /// Publishes the ranges: the new list, then the offset that makes it active.
    fn write(&self, st: &mut (Ranges, Vec<u8>)) {
        let entries = st.0.entries();
        let list = publish(&mut st.1, &entries);
        let r = self.copy(&st.1, list..list + outside::LIST_SIZE).and_then(|()| self.copy(&st.1, 0..8));
        // (Once; and not after a kernel's fault, 700-719, which made the context fail: that
        // error is reported on its own.)
        static WARNED: std::sync::Once = std::sync::Once::new();
        match r {
            Err(crate::driver::DriverError(r)) if !(700..=719).contains(&r) => {
                WARNED.call_once(|| eprintln!("==gasan== WARNING: writing the table of outside ranges failed (CUDA error {r}); kernels may check against an older one"))
            }
            _ => {}
        }
    }

    /// Copies `range` of the host copy `host` to the device table and waits for it.
    fn copy(&self, host: &[u8], range: std::ops::Range<usize>) -> Result<(), crate::driver::DriverError> {
        crate::driver::result::memcpy_htod_and_wait(self.device + range.start as u64, &host[range], &self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gasan_instrument::abi::outside::must_report;
    use proptest::prelude::*;

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
            let entries = outside::active_entries(&table);
            prop_assert_eq!(&entries, &r.entries());
            prop_assert!(entries.len() <= outside::CAPACITY);
            let addr = 0x10_0000 + probe * 0x400;
            let inside_live = r.live.iter().any(|(&s, &(e, _))| addr >= s && addr + width <= e);
            prop_assert!(!(inside_live && must_report(&entries, addr, width)));
            for (&s, &(e, _)) in &r.live {
                let holds = r.live.iter().any(|(&s2, &(e2, _))| e >= s2 && e < e2);
                prop_assert_eq!(must_report(&entries, e, 1), !holds, "one past [{:#x},{:#x})", s, e);
            }
        }
    }

    proptest! {
        /// The invariant a kernel reading a list while it is rewritten relies on: while the
        /// live ranges fit, a range live before and after a registration or unregistration of
        /// another has the same entry at the same place in both lists, so the bytes a kernel
        /// reads there are the same whichever list, old or new, it reads them from.
        #[test]
        fn a_live_range_keeps_its_entry_while_others_come_and_go(ops in prop::collection::vec((0u64..200, 1u64..8, any::<bool>()), 1..300)) {
            let mut r = Ranges::default();
            for (slot, len, unregister) in ops {
                let start = 0x10_0000 + slot * 0x1000;
                let before = r.entries();
                let live_before: Vec<u64> = r.live.keys().copied().collect();
                if unregister { r.remove(start, HostStack::default()); } else { r.add(start, len * 100, HostStack::default()); }
                let after = r.entries();
                prop_assert!(after.len() <= outside::CAPACITY);
                if r.live.len() > outside::CAPACITY || live_before.len() > outside::CAPACITY {
                    continue;
                }
                for s in live_before.iter().filter(|&&s| s != start && r.live.contains_key(&s)) {
                    let at = |l: &[Entry]| l.iter().position(|e| e.start == *s && e.len > 0);
                    let (i, j) = (at(&before), at(&after));
                    prop_assert!(i.is_some() && i == j, "range at {:#x}: entry {:?} before, {:?} after", s, i, j);
                }
                for (&s, &(e, _)) in &r.live {
                    prop_assert!(after.contains(&Entry::live(s, e)), "live range [{:#x},{:#x}) not in the list", s, e);
                }
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
