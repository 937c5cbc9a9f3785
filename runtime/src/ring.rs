//! The error ring: host memory registered with the device (`cuMemHostRegister`, device-mapped), so it
//! stays readable after a `trap` kills the context and even after the context is destroyed.
//!
//! The ring is reused forever: a writer takes `i = head++` and writes slot `i % capacity` with
//! `seq = i + 1` last (instrument/src/abi.rs). The host reads at synchronizing calls, when the
//! writers it can still see have finished or were killed by a `trap`, so it never waits for a
//! record: a slot whose `seq` is not the one expected was lapped by a later error or never
//! completed, and counts as lost.

use gasan_instrument::abi::{self, ErrorRecord, RingHeader};
use std::ffi::c_void;
use std::sync::atomic::{fence, Ordering};

/// Record slots (a power of two: slots are taken modulo the capacity).
pub const CAPACITY: u32 = 4096;
const _: () = assert!(CAPACITY.is_power_of_two());

pub struct Ring {
    host: *mut u8,
    bytes: usize,
    pub device_ptr: u64,
    consumed: u32,
}

// SAFETY: the ring memory is process-global and only read through volatile accesses under the
// runtime's state lock.
unsafe impl Send for Ring {}

/// What one drain found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Complete records, oldest first.
    pub records: Vec<ErrorRecord>,
    /// Errors whose records are gone: overwritten by later errors before this drain, or never
    /// completed (their writer was killed by another thread's `trap`).
    pub lost: u64,
}

/// Takes the records published since `*consumed` from a ring whose header says `head`, reading
/// slot `s` with `read(s)`; advances `*consumed` to `head`. Pure, so any ring image can be tested.
///
/// A slot holds the newest record that completed in it. When the newest writer of a slot died
/// before it even invalidated the slot (threads killed by another thread's `trap`), the slot still
/// holds an older complete record: it is taken if this reader has not taken it before, so a grid
/// whose every thread fails still yields a report.
pub fn take_records(head: u32, capacity: u32, consumed: &mut u32, mut read: impl FnMut(u32) -> ErrorRecord) -> Drained {
    let first_unread = *consumed;
    let pending = head.wrapping_sub(first_unread);
    let mut out = Drained::default();
    if capacity == 0 || !capacity.is_power_of_two() {
        out.lost = u64::from(pending);
        *consumed = head;
        return out;
    }
    // Indices before `from` were overwritten in their slots by later indices (or were never
    // completed); their slots are read as the later ones'.
    let from = if pending > capacity { head.wrapping_sub(capacity) } else { first_unread };
    let mut j = from;
    while j != head {
        let slot = j & (capacity - 1);
        let rec = read(slot);
        let index = rec.seq.wrapping_sub(1);
        let unread = index.wrapping_sub(first_unread) <= j.wrapping_sub(first_unread);
        if rec.seq != 0 && index & (capacity - 1) == slot && unread {
            out.records.push(rec);
        }
        j = j.wrapping_add(1);
    }
    *consumed = head;
    out.lost = u64::from(pending) - out.records.len() as u64;
    out
}

impl Ring {
    /// Allocates and registers the ring. Needs a current context.
    pub fn new() -> Result<Ring, crate::driver::DriverError> {
        let bytes = abi::ring_bytes(CAPACITY).next_multiple_of(4096);
        // Anonymous, page-aligned, and never unmapped (leaked): the device may write until exit.
        let map = memmap2::MmapMut::map_anon(bytes).map_err(|_| crate::driver::DriverError(crate::driver::CUDA_ERROR_OUT_OF_MEMORY))?;
        let host: *mut c_void = Box::leak(Box::new(map)).as_mut_ptr().cast();
        let hdr = RingHeader { head: 0, capacity: CAPACITY, reserved: [0; 14] };
        // SAFETY: the mapping is at least a header long.
        unsafe { std::ptr::write(host as *mut RingHeader, hdr) };
        let flags = cudarc::driver::sys::CU_MEMHOSTREGISTER_PORTABLE | cudarc::driver::sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: `host` is the `bytes`-byte mapping just made, leaked: mapped for the process.
        unsafe { crate::driver::result::mem_host_register(host, bytes, flags) }?;
        let dptr = crate::driver::result::mem_host_get_device_pointer(host)?;
        Ok(Ring { host: host as *mut u8, bytes, device_ptr: dptr, consumed: 0 })
    }

    fn head(&self) -> u32 {
        // SAFETY: the header lives at the start of our mapping.
        unsafe { std::ptr::read_volatile(self.host as *const u32) }
    }

    /// Slot `slot`'s record, or a record with `seq` 0 when it changed while being read (a running
    /// kernel reusing the slot: the caller counts it lost).
    fn read_slot(&self, slot: u32) -> ErrorRecord {
        let off = abi::RING_RECORDS_OFFSET + slot as usize * abi::ERROR_RECORD_SIZE;
        assert!(slot < CAPACITY && off + abi::ERROR_RECORD_SIZE <= self.bytes);
        // SAFETY: in bounds of the mapping (checked above); the device writes it concurrently at
        // most, which volatile reads tolerate (the seq check below rejects torn records).
        unsafe {
            let p = self.host.add(off) as *const ErrorRecord;
            let seq_before = std::ptr::read_volatile(std::ptr::addr_of!((*p).seq));
            fence(Ordering::Acquire);
            let mut rec = std::ptr::read_volatile(p);
            fence(Ordering::Acquire);
            let seq_after = std::ptr::read_volatile(std::ptr::addr_of!((*p).seq));
            if seq_before != seq_after || rec.seq != seq_after {
                rec.seq = 0;
            }
            rec
        }
    }

    /// Everything published since the last drain, without waiting.
    pub fn drain(&mut self) -> Drained {
        fence(Ordering::SeqCst);
        let head = self.head();
        let mut consumed = self.consumed;
        let d = take_records(head, CAPACITY, &mut consumed, |s| self.read_slot(s));
        self.consumed = consumed;
        d
    }
}

/// What became of the records drained from every device's ring, process-wide: the sites
/// reported so far (each reported once), the records read but not reported, and the ones lost.
#[derive(Default)]
pub struct RingTally {
    /// (module id, site id) of every site a record was read for.
    sites_seen: std::sync::Mutex<std::collections::HashSet<(u32, u32)>>,
    /// Records read but not reported (halt mode after the first; recover mode at a known site).
    unreported: std::sync::atomic::AtomicU64,
    /// Errors whose records were overwritten or never completed.
    lost: std::sync::atomic::AtomicU64,
}

impl RingTally {
    /// Whether `rec` gets a report: the first record of its site, unless reporting has `halted`
    /// (halt mode, after the first report). Every other is counted as not reported.
    pub fn admit(&self, rec: &ErrorRecord, halted: bool) -> bool {
        let first_at_site = self.sites_seen.lock().unwrap_or_else(|e| e.into_inner()).insert((rec.module_id, rec.site_id));
        if halted || !first_at_site {
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn add_lost(&self, n: u64) {
        self.lost.fetch_add(n, Ordering::Relaxed);
    }

    /// (records not reported, of those the ones lost before they were read) so far.
    pub fn not_reported(&self) -> (u64, u64) {
        (self.unreported.load(Ordering::Relaxed), self.lost.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(i: u32) -> ErrorRecord {
        ErrorRecord { addr: u64::from(i) * 4, seq: i.wrapping_add(1), ..Default::default() }
    }

    /// A ring image after errors `start..start+n` were written by writers that all finished
    /// except `killed`, which invalidated their slot and died mid-record (seq 0, torn fields).
    fn image(cap: u32, start: u32, n: u32, killed: &[u32]) -> Vec<ErrorRecord> {
        let mut slots = vec![ErrorRecord::default(); cap as usize];
        for k in 0..n {
            let i = start.wrapping_add(k);
            let torn = ErrorRecord { addr: 0xdead, seq: 0, ..rec(i) };
            slots[(i & (cap - 1)) as usize] = if killed.contains(&i) { torn } else { rec(i) };
        }
        slots
    }

    #[test]
    fn killed_writers_are_lost_not_waited_for() {
        let slots = image(8, 0, 6, &[1, 4]);
        let mut c = 0;
        let d = take_records(6, 8, &mut c, |s| slots[s as usize]);
        assert_eq!(d.records.iter().map(|r| r.seq - 1).collect::<Vec<_>>(), vec![0, 2, 3, 5]);
        assert_eq!((d.lost, c), (2, 6));
    }

    #[test]
    fn a_slot_whose_newest_writer_died_early_yields_its_older_record() {
        // 20 errors into 8 slots; the writers of 12..20 all died before touching their slots, so
        // slots hold 4..12 (complete, unread): still reported.
        let slots = image(8, 0, 12, &[]);
        let mut c = 0;
        let d = take_records(20, 8, &mut c, |s| slots[s as usize]);
        assert_eq!(d.records.iter().map(|r| r.seq - 1).collect::<Vec<_>>(), vec![4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(d.lost, 12);
        // Read already: not taken twice.
        let d = take_records(21, 8, &mut c, |s| slots[s as usize]);
        assert_eq!((d.records.len(), d.lost), (0, 1));
    }

    #[test]
    fn a_full_ring_keeps_the_newest_and_counts_the_rest() {
        // 16 k failing threads into 8 slots: the last 8 survive, 16 k - 8 are counted.
        let slots = image(8, 0, 16384, &[]);
        let mut c = 0;
        let d = take_records(16384, 8, &mut c, |s| slots[s as usize]);
        assert_eq!(d.records.len(), 8);
        assert_eq!(d.records[0].seq, 16384 - 8 + 1);
        assert_eq!(d.lost, 16384 - 8);
        // Reusable: the next errors are read again after the ring filled.
        let slots = image(8, 16384, 3, &[]);
        let d = take_records(16387, 8, &mut c, |s| slots[s as usize]);
        assert_eq!((d.records.len(), d.lost, c), (3, 0, 16387));
    }

    proptest! {
        /// Every error is returned at most once and complete, or counted lost; torn records
        /// never come back; the counter wraps.
        #[test]
        fn records_plus_lost_is_every_error(start in any::<u32>(), n in 0u32..100, cap_log in 0u32..5, killed in proptest::collection::vec(0u32..100, 0..10)) {
            let cap = 1u32 << cap_log;
            let killed: Vec<u32> = killed.iter().map(|k| start.wrapping_add(*k)).collect();
            let slots = image(cap, start, n, &killed);
            let mut c = start;
            let head = start.wrapping_add(n);
            let d = take_records(head, cap, &mut c, |s| slots[s as usize]);
            prop_assert_eq!(c, head);
            prop_assert_eq!(d.records.len() as u64 + d.lost, u64::from(n));
            let mut order: Vec<u32> = d.records.iter().map(|r| r.seq.wrapping_sub(1).wrapping_sub(start)).collect();
            prop_assert!(order.iter().all(|&k| k < n));
            order.sort_unstable();
            order.dedup();
            prop_assert_eq!(order.len(), d.records.len());
            for r in &d.records {
                prop_assert!(!killed.contains(&r.seq.wrapping_sub(1)));
            }
        }
    }
}
