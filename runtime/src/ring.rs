//! The error ring: host memory registered with the device (`cuMemHostRegister`, device-mapped), so it
//! stays readable after a `trap` kills the context and even after the context is destroyed.
//!
//! The ring is reused forever: a writer takes `i = head++` and writes slot `i % capacity` with
//! `seq = i + 1` last (instrument/src/abi.rs). The host reads at synchronizing calls. A
//! synchronizing call that succeeded says nothing about kernels on other streams or in other
//! threads: one of them may have claimed a slot (`head` already counts it) and not yet published
//! its record. Such an index is left *open* ([`Cursor`]) and read again at the next drain, where
//! the record is taken once it is complete; only a drain that settles the ring
//! ([`Incomplete::Lose`]: after a sticky device error, at exit) counts what is still open as lost,
//! after waiting a bounded time for it ([`Ring::drain_settled`]). An index whose slot a later
//! index claimed before its record was read is lost too (lapped).
//!
//! Counting an open index lost at once, as every drain did before, misattributed
//! `mt_load_overflow` about once in 42 runs: another host thread's successful
//! `cuStreamSynchronize` drained the ring between the failing thread's claim and its
//! publication, counted the index lost and moved past it; the `trap` that followed found the
//! ring read up to its head, and the fault was reported as `gpu-fault-in-uninstrumented-code`.

use gasan_instrument::abi::{self, ErrorRecord, RingHeader};
use std::ffi::c_void;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Record slots (a power of two: slots are taken modulo the capacity).
pub const CAPACITY: u32 = 4096;
const _: () = assert!(CAPACITY.is_power_of_two());

/// How long a settling drain waits for open records to be published: a live writer publishes
/// within a few PCIe round trips of its claim; a writer killed by a `trap` never does, and costs
/// this once, on the way to the process's error exit.
pub const SETTLE_WAIT: Duration = Duration::from_millis(20);

pub struct Ring {
    host: *mut u8,
    bytes: usize,
    pub device_ptr: u64,
    /// Slots after the header (a power of two).
    capacity: u32,
    cursor: Cursor,
}

// SAFETY: the ring memory is process-global (never unmapped) and only read through atomic loads,
// under the device's ring lock.
unsafe impl Send for Ring {}

/// What one drain found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Complete records, oldest first.
    pub records: Vec<ErrorRecord>,
    /// Errors whose records are gone: overwritten by later errors before this drain, or never
    /// completed (their writer was killed by a `trap`) by a settling drain.
    pub lost: u64,
    /// Of `lost`, the claimed slots a settling drain gave up on: each a check that failed and
    /// whose record never finished.
    pub unfinished: u64,
}

impl Drained {
    fn merge(&mut self, later: Drained) {
        self.records.extend(later.records);
        self.lost += later.lost;
        self.unfinished += later.unfinished;
    }
}

/// What a drain does with an index whose slot is claimed and whose record is not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incomplete {
    /// Leave it open: its writer may still be running (a drain after a successful sync).
    Keep,
    /// Count it lost (a settling drain: the writers are finished or dead).
    Lose,
}

/// Where a reader stands in a ring: every index before `next` was looked at once; `open` lists
/// those of them whose records were not complete then (oldest first), looked at again by each
/// drain until taken, lapped, or lost to a settling drain. At most `capacity` are open: an index
/// `capacity` or more below the head has had its slot claimed again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub next: u32,
    open: Vec<u32>,
}

impl Cursor {
    /// A reader that has looked at every index before `next`, with none open.
    pub fn at(next: u32) -> Self {
        Cursor { next, open: Vec::new() }
    }

    /// The indices left open by the drains so far.
    pub fn open(&self) -> &[u32] {
        &self.open
    }

    /// Takes the records published since the last drain from a ring whose header says `head`,
    /// reading slot `s` with `read(s)`, and the records of the indices left open that are now
    /// complete; advances `next` to `head`. Pure, so any ring image can be tested.
    ///
    /// A slot holds the newest record that completed in it. When the newest writer of a slot died
    /// before it even invalidated the slot (threads killed by another thread's `trap`), the slot
    /// still holds an older complete record: it is taken if this reader has not taken it before,
    /// so a grid whose every thread fails still yields a report.
    pub fn take(&mut self, head: u32, capacity: u32, incomplete: Incomplete, mut read: impl FnMut(u32) -> ErrorRecord) -> Drained {
        let first_unread = self.next;
        let pending = head.wrapping_sub(first_unread);
        let mut out = Drained::default();
        self.next = head;
        if capacity == 0 || !capacity.is_power_of_two() {
            out.lost = u64::from(pending) + self.open.len() as u64;
            self.open.clear();
            return out;
        }
        let mask = capacity - 1;
        let mut open = Vec::new();
        let mut left_open = |i: u32, out: &mut Drained| match incomplete {
            Incomplete::Keep => open.push(i),
            Incomplete::Lose => {
                out.lost += 1;
                out.unfinished += 1;
            }
        };
        // The indices left open before: each taken once complete in its own slot; lost once a
        // later index claimed the slot (that index is read below or was, as a new one).
        for &i in &self.open {
            if head.wrapping_sub(i) > capacity {
                out.lost += 1;
                continue;
            }
            let rec = read(i & mask);
            if rec.seq == i.wrapping_add(1) {
                out.records.push(rec);
            } else {
                left_open(i, &mut out);
            }
        }
        // Indices before `from` were lapped in their slots by later indices; their slots are read
        // as the later ones'.
        let from = if pending > capacity { head.wrapping_sub(capacity) } else { first_unread };
        let mut lapped = u64::from(from.wrapping_sub(first_unread));
        let mut j = from;
        while j != head {
            let rec = read(j & mask);
            let index = rec.seq.wrapping_sub(1);
            if rec.seq != 0 && index == j {
                out.records.push(rec);
            } else {
                // The slot may still hold an older unread record (a lapped index's, whose
                // successor's writer has not invalidated the slot yet or died before it did).
                let unread = index.wrapping_sub(first_unread) < j.wrapping_sub(first_unread);
                if rec.seq != 0 && index & mask == j & mask && unread {
                    out.records.push(rec);
                    lapped -= 1;
                }
                left_open(j, &mut out);
            }
            j = j.wrapping_add(1);
        }
        out.lost += lapped;
        self.open = open;
        out
    }
}

impl Ring {
    /// Allocates and registers the ring. Needs a current context.
    pub fn new() -> Result<Ring, crate::driver::DriverError> {
        let bytes = abi::ring_bytes(CAPACITY).next_multiple_of(4096);
        // Anonymous, page-aligned, and never unmapped (leaked): the device may write until exit.
        let map = memmap2::MmapMut::map_anon(bytes).map_err(|_| crate::driver::DriverError(crate::driver::CUDA_ERROR_OUT_OF_MEMORY))?;
        let host: *mut c_void = Box::leak(Box::new(map)).as_mut_ptr().cast();
        // SAFETY: `host` is a leaked, page-aligned mapping of `bytes` bytes, nothing else uses it
        // yet, and the device gets its address only below.
        let ring = unsafe { Ring::over(host.cast(), bytes, CAPACITY) };
        let flags = cudarc::driver::sys::CU_MEMHOSTREGISTER_PORTABLE | cudarc::driver::sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: `host` is the `bytes`-byte mapping just made, leaked: mapped for the process.
        unsafe { crate::driver::result::mem_host_register(host, bytes, flags) }?;
        let device_ptr = crate::driver::result::mem_host_get_device_pointer(host)?;
        Ok(Ring { device_ptr, ..ring })
    }

    /// A ring of `capacity` slots over `bytes` bytes at `host`: writes its header (head 0).
    ///
    /// # Safety
    /// `host` is 8-byte aligned, valid for reads and writes of `bytes` bytes (at least
    /// `ring_bytes(capacity)`) for as long as the ring is used, and not written by anything before
    /// this returns. After, it is written only by ring writers (the device, or threads that access
    /// the header and records through atomic operations only).
    unsafe fn over(host: *mut u8, bytes: usize, capacity: u32) -> Ring {
        assert!(capacity.is_power_of_two() && abi::ring_bytes(capacity) <= bytes && (host as usize).is_multiple_of(8));
        let hdr = RingHeader { head: 0, capacity, reserved: [0; 14] };
        // SAFETY: in bounds and aligned (asserted above), and nothing else writes it yet (the
        // function's contract).
        unsafe { std::ptr::write(host as *mut RingHeader, hdr) };
        Ring { host, bytes, device_ptr: 0, capacity, cursor: Cursor::default() }
    }

    /// The 32-bit word at byte offset `off` of the ring, read atomically.
    fn word(&self, off: usize) -> u32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.bytes);
        // SAFETY: in bounds and 4-byte aligned (asserted; the mapping is 8-byte aligned), valid for
        // the process's life (`over`'s contract); every access this process makes to the ring
        // memory after `over` is atomic, so this load races with no non-atomic access.
        unsafe { AtomicU32::from_ptr(self.host.add(off).cast::<u32>()) }.load(Ordering::Acquire)
    }

    fn head(&self) -> u32 {
        self.word(abi::ring_offset::HEAD)
    }

    /// Slot `slot`'s record, or a record with `seq` 0 when it changed while being read (a running
    /// kernel reusing the slot: the caller reads it again or counts it lost).
    fn read_slot(&self, slot: u32) -> ErrorRecord {
        let seq_at = Self::slot_offset(slot) + abi::record_offset::SEQ;
        let seq_before = self.word(seq_at);
        let mut rec = self.slot_bytes(slot);
        fence(Ordering::Acquire);
        let seq_after = self.word(seq_at);
        if seq_before != seq_after || rec.seq != seq_after {
            rec.seq = 0;
        }
        rec
    }

    fn slot_offset(slot: u32) -> usize {
        abi::RING_RECORDS_OFFSET + slot as usize * abi::ERROR_RECORD_SIZE
    }

    /// Slot `slot`'s bytes as they are now, complete or not.
    fn slot_bytes(&self, slot: u32) -> ErrorRecord {
        let off = Self::slot_offset(slot);
        assert!(slot < self.capacity && off + abi::ERROR_RECORD_SIZE <= self.bytes);
        let mut b = [0u8; abi::ERROR_RECORD_SIZE];
        for (k, w) in b.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&self.word(off + 4 * k).to_le_bytes());
        }
        ErrorRecord::from_bytes(&b)
    }

    fn take(&mut self, incomplete: Incomplete) -> Drained {
        fence(Ordering::SeqCst);
        let head = self.head();
        let mut cursor = std::mem::take(&mut self.cursor);
        let d = cursor.take(head, self.capacity, incomplete, |s| self.read_slot(s));
        self.cursor = cursor;
        d
    }

    /// Everything published since the last drain, and what was open then and is complete now,
    /// without waiting; what is not complete yet stays open.
    pub fn drain(&mut self) -> Drained {
        let before = self.cursor.open.len();
        let d = self.take(Incomplete::Keep);
        let open = self.cursor.open.len();
        if open != before {
            crate::log::log(2, || format!("error ring: {open} claimed slot(s) not yet published (were {before}), read again at the next drain; {} record(s) taken", d.records.len()));
        }
        d
    }

    /// A drain that settles the ring (after a sticky device error, at exit): waits up to `wait`
    /// for the records left open to be published, then counts what is still open as lost.
    pub fn drain_settled(&mut self, wait: Duration) -> Drained {
        let open_before = self.cursor.open.len();
        let mut all = self.take(Incomplete::Keep);
        let open_then = self.cursor.open.len();
        let until = Instant::now() + wait;
        while !self.cursor.open.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_micros(100));
            all.merge(self.take(Incomplete::Keep));
        }
        let unpublished = self.cursor.open.len();
        // What a writer that never published left in its slot tells how far it got: its fields
        // (it was stopped while writing them) or, in the release-store form, the old seq it
        // stores after its seq's exchange (the exchange was performed and its seq lost).
        for &i in self.cursor.open() {
            crate::log::log(2, || format!("error ring: index {i} never published; its slot holds {:?}", self.slot_bytes(i & (self.capacity - 1))));
        }
        all.merge(self.take(Incomplete::Lose));
        if open_before + open_then > 0 {
            crate::log::log(2, || {
                format!(
                    "error ring: settling: {open_before} claimed slot(s) left unpublished by earlier drains, {open_then} at the first read; {unpublished} never published within {} ms; {} record(s) taken, {} lost",
                    wait.as_millis(),
                    all.records.len(),
                    all.lost
                )
            });
        }
        all
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
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::{mpsc, Arc, Mutex};

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

    /// A settling read of a ring image from `*c`, as the reader before open indices read every
    /// image.
    fn settle(head: u32, cap: u32, c: &mut u32, slots: &[ErrorRecord]) -> Drained {
        let mut cursor = Cursor::at(*c);
        let d = cursor.take(head, cap, Incomplete::Lose, |s| slots[s as usize]);
        assert!(cursor.open().is_empty());
        *c = cursor.next;
        d
    }

    #[test]
    fn killed_writers_are_lost_to_a_settling_drain() {
        let slots = image(8, 0, 6, &[1, 4]);
        let mut c = 0;
        let d = settle(6, 8, &mut c, &slots);
        assert_eq!(d.records.iter().map(|r| r.seq - 1).collect::<Vec<_>>(), vec![0, 2, 3, 5]);
        assert_eq!((d.lost, c), (2, 6));
        assert_eq!(d.unfinished, 2, "both killed writers claimed their slots: failed checks whose records never finished");
    }

    #[test]
    fn a_slot_whose_newest_writer_died_early_yields_its_older_record() {
        // 20 errors into 8 slots; the writers of 12..20 all died before touching their slots, so
        // slots hold 4..12 (complete, unread): still reported.
        let slots = image(8, 0, 12, &[]);
        let mut c = 0;
        let d = settle(20, 8, &mut c, &slots);
        assert_eq!(d.records.iter().map(|r| r.seq - 1).collect::<Vec<_>>(), vec![4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(d.lost, 12);
        assert_eq!(d.unfinished, 8, "0..4 were overwritten (lost, finished); 12..20 never finished");
        // Read already: not taken twice.
        let d = settle(21, 8, &mut c, &slots);
        assert_eq!((d.records.len(), d.lost), (0, 1));
    }

    #[test]
    fn a_full_ring_keeps_the_newest_and_counts_the_rest() {
        // 16 k failing threads into 8 slots: the last 8 survive, 16 k - 8 are counted.
        let slots = image(8, 0, 16384, &[]);
        let mut c = 0;
        let d = settle(16384, 8, &mut c, &slots);
        assert_eq!(d.records.len(), 8);
        assert_eq!(d.records[0].seq, 16384 - 8 + 1);
        assert_eq!(d.lost, 16384 - 8);
        assert_eq!(d.unfinished, 0, "every record finished; the lost ones were overwritten");
        // Reusable: the next errors are read again after the ring filled.
        let slots = image(8, 16384, 3, &[]);
        let d = settle(16387, 8, &mut c, &slots);
        assert_eq!((d.records.len(), d.lost, c), (3, 0, 16387));
    }

    #[test]
    fn an_unpublished_index_stays_open_until_published_lapped_or_settled() {
        let mut slots = image(8, 0, 3, &[1]);
        let mut cur = Cursor::default();
        let d = cur.take(3, 8, Incomplete::Keep, |s| slots[s as usize]);
        assert_eq!(d.records.iter().map(|r| r.seq - 1).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!((d.lost, cur.open(), cur.next), (0, &[1][..], 3));
        // Published since: taken from its own slot, once.
        slots[1] = rec(1);
        let d = cur.take(3, 8, Incomplete::Keep, |s| slots[s as usize]);
        assert_eq!((d.records, d.lost, cur.open()), (vec![rec(1)], 0, &[][..]));
        assert_eq!(cur.take(3, 8, Incomplete::Keep, |s| slots[s as usize]), Drained::default());
        // Index 3 open; then 8 more errors: 11 claimed slot 3 again, so 3 is lapped (lost), and
        // 11, published, is taken as a new index.
        let slots = image(8, 3, 1, &[3]);
        cur.take(4, 8, Incomplete::Keep, |s| slots[s as usize]);
        assert_eq!(cur.open(), &[3]);
        let slots = image(8, 4, 8, &[]);
        let d = cur.take(12, 8, Incomplete::Keep, |s| slots[s as usize]);
        assert_eq!((d.records.len(), d.lost, cur.open()), (8, 1, &[][..]));
        // Open at a settling drain: lost.
        let slots = image(8, 12, 2, &[13]);
        cur.take(14, 8, Incomplete::Keep, |s| slots[s as usize]);
        let d = cur.take(14, 8, Incomplete::Lose, |s| slots[s as usize]);
        assert_eq!((d.records.len(), d.lost, cur.open()), (0, 1, &[][..]));
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
            let d = settle(head, cap, &mut c, &slots);
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

        /// A drain that keeps what is unpublished loses only lapped errors; once the writers it
        /// waited for publish, the next drain takes their records, and every error is then a
        /// record or lost, once.
        #[test]
        fn kept_indices_are_taken_once_published(start in any::<u32>(), n in 0u32..100, cap_log in 0u32..5, late in proptest::collection::vec(0u32..100, 0..10)) {
            let cap = 1u32 << cap_log;
            let late: Vec<u32> = late.iter().map(|k| start.wrapping_add(*k)).collect();
            let head = start.wrapping_add(n);
            let mut cur = Cursor::at(start);
            let first = cur.take(head, cap, Incomplete::Keep, |s| image(cap, start, n, &late)[s as usize]);
            prop_assert_eq!(first.lost, u64::from(n.saturating_sub(cap)) - first.records.iter().filter(|r| r.seq.wrapping_sub(1).wrapping_sub(start) < n.saturating_sub(cap)).count() as u64);
            let second = cur.take(head, cap, Incomplete::Keep, |s| image(cap, start, n, &[])[s as usize]);
            prop_assert!(cur.open().is_empty());
            let mut all: Vec<u32> = first.records.iter().chain(&second.records).map(|r| r.seq.wrapping_sub(1).wrapping_sub(start)).collect();
            prop_assert_eq!(all.len() as u64 + first.lost + second.lost, u64::from(n));
            all.sort_unstable();
            all.dedup();
            prop_assert_eq!(all.len(), first.records.len() + second.records.len());
            // No lapping: nothing lost, every error reported.
            if n <= cap {
                prop_assert_eq!((first.lost + second.lost, all.len() as u32), (0, n));
            }
        }
    }

    /// A ring of `cap` slots in host memory of the test's own (leaked: writers may outlive a
    /// failed assertion), and its address for writer threads.
    fn host_ring(cap: u32) -> (Ring, usize) {
        let words = abi::ring_bytes(cap).div_ceil(8);
        let mem: &'static mut [u64] = Box::leak(vec![0u64; words].into_boxed_slice());
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: 8-byte aligned (u64s), `words * 8 >= ring_bytes(cap)` bytes, leaked (valid for
        // the process), untouched until now; after this, only `write_record` and `claim` below
        // write it, with atomic stores.
        (unsafe { Ring::over(base, words * 8, cap) }, base as usize)
    }

    /// The 32-bit word at byte offset `off` of the ring at `base` (from [`host_ring`]).
    fn word(base: usize, off: usize) -> &'static AtomicU32 {
        assert!(off.is_multiple_of(4));
        // SAFETY: `base` is a leaked `host_ring` mapping (valid for the process, 8-byte aligned)
        // and `off` is 4-byte aligned and inside it (the callers' offsets come from the ring
        // layout); every access to it after `Ring::over` is atomic.
        unsafe { AtomicU32::from_ptr((base + off) as *mut u32) }
    }

    /// Claims an index as the checked PTX's report block does (instrument/src/ptx/emit.rs,
    /// `record_body`): `head` incremented atomically, the slot's seq zeroed before any field.
    /// Returns the index and the slot's offset.
    fn claim(base: usize, cap: u32) -> (u32, usize) {
        let i = word(base, abi::ring_offset::HEAD).fetch_add(1, Ordering::AcqRel);
        let off = abi::RING_RECORDS_OFFSET + (i & (cap - 1)) as usize * abi::ERROR_RECORD_SIZE;
        word(base, off + abi::record_offset::SEQ).store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        (i, off)
    }

    /// One whole record as the report block writes it: claimed, `between()` (the window a drain
    /// can fall into), the fields, a release fence, then seq = index + 1.
    fn write_record(base: usize, cap: u32, addr: u64, between: impl FnOnce()) -> u32 {
        let (i, off) = claim(base, cap);
        between();
        let b = ErrorRecord { addr, module_id: 7, site_id: 3, width: 4, seq: 0, ..Default::default() }.to_bytes();
        for (k, w) in b.chunks_exact(4).enumerate() {
            if 4 * k != abi::record_offset::SEQ {
                word(base, off + 4 * k).store(u32::from_le_bytes(w.try_into().unwrap()), Ordering::Relaxed);
            }
        }
        fence(Ordering::Release);
        word(base, off + abi::record_offset::SEQ).store(i.wrapping_add(1), Ordering::Release);
        i
    }

    /// mt_load_overflow's misattribution, step by step with real threads: the failing kernel
    /// claims a slot; another host thread's successful sync drains the ring before the record is
    /// published; the record is published, the kernel traps, and the thread that sees the sticky
    /// error settles the ring. The record must be reported then (it was counted lost at the first
    /// drain, and the fault reported as uninstrumented code).
    #[test]
    fn a_record_claimed_during_another_threads_drain_is_taken_at_the_trap() {
        let (ring, base) = host_ring(8);
        let ring = Arc::new(Mutex::new(ring));
        let (claimed_tx, claimed_rx) = mpsc::channel();
        let (publish_tx, publish_rx) = mpsc::channel::<()>();
        let kernel = std::thread::spawn(move || {
            write_record(base, 8, 0xbad0, || {
                claimed_tx.send(()).unwrap();
                publish_rx.recv().unwrap();
            })
        });
        claimed_rx.recv().unwrap();
        let other = Arc::clone(&ring);
        let (early, open) = std::thread::spawn(move || {
            let mut r = other.lock().unwrap();
            (r.drain(), r.cursor.open().to_vec())
        })
        .join()
        .unwrap();
        assert_eq!((early, open), (Drained::default(), vec![0]), "claimed, unpublished: neither taken nor lost");
        publish_tx.send(()).unwrap();
        assert_eq!(kernel.join().unwrap(), 0);
        let d = ring.lock().unwrap().drain_settled(SETTLE_WAIT);
        assert_eq!(d.lost, 0);
        assert_eq!(d.records.iter().map(|r| (r.addr, r.module_id, r.site_id, r.seq)).collect::<Vec<_>>(), vec![(0xbad0, 7, 3, 1)]);
    }

    /// A writer that claims and never publishes (killed by another thread's `trap`) holds a
    /// settling drain no longer than its wait, and is counted lost; the other records are taken.
    #[test]
    fn a_writer_that_never_publishes_is_lost_after_the_wait() {
        let (mut ring, base) = host_ring(8);
        write_record(base, 8, 0x10, || {});
        claim(base, 8);
        write_record(base, 8, 0x30, || {});
        let t = Instant::now();
        let d = ring.drain_settled(Duration::from_millis(5));
        assert!(t.elapsed() >= Duration::from_millis(5));
        assert_eq!(d.records.iter().map(|r| r.addr).collect::<Vec<_>>(), vec![0x10, 0x30]);
        assert_eq!((d.lost, ring.cursor.open()), (1, &[][..]));
    }

    /// Writers on several threads, each pausing between claim and publication, while a reader
    /// drains without waiting over and over (syncs on other streams): every record is taken
    /// exactly once and none is lost.
    #[test]
    fn concurrent_writers_and_drains_take_every_record_once() {
        const CAP: u32 = 4096;
        const WRITERS: usize = 6;
        const EACH: usize = 300;
        let (ring, base) = host_ring(CAP);
        let done = Arc::new(AtomicBool::new(false));
        let max_open = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (done, max_open) = (Arc::clone(&done), Arc::clone(&max_open));
            std::thread::spawn(move || {
                let mut ring = ring;
                let mut got = Drained::default();
                while !done.load(Ordering::Acquire) {
                    got.merge(ring.drain());
                    max_open.fetch_max(ring.cursor.open().len(), Ordering::Relaxed);
                    std::thread::yield_now();
                }
                got.merge(ring.drain_settled(SETTLE_WAIT));
                (got, ring.cursor.open().len())
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                std::thread::spawn(move || {
                    for k in 0..EACH {
                        write_record(base, CAP, ((w * EACH + k) as u64) << 4, || match k % 16 {
                            0 => std::thread::sleep(Duration::from_micros(300)),
                            1..=7 => std::thread::yield_now(),
                            _ => {}
                        });
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let (got, open) = reader.join().unwrap();
        assert_eq!((got.lost, open), (0, 0));
        let mut addrs: Vec<u64> = got.records.iter().map(|r| r.addr >> 4).collect();
        addrs.sort_unstable();
        assert_eq!(addrs, (0..(WRITERS * EACH) as u64).collect::<Vec<_>>());
        eprintln!("most indices open at one drain: {}", max_open.load(Ordering::Relaxed));
    }
}
