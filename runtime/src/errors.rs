//! Errors and exit: the device error ring drained into reports, host-side errors, the summary of
//! what was not reported, and the exit status after reported errors. [`Errors`] is the process's
//! report sink: the reporter, the ring's tally and the options they follow.

use crate::allocator::HostStack;
use crate::device::DeviceRuntime;
use crate::devices::Devices;
use crate::driver::CuResult;
use crate::options::Options;
use crate::report::{ModuleRegistry, Report, Reporter};
use crate::ring::RingTally;
use crate::side_table::SideTable;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What errors follow of the options.
#[derive(Clone, Copy, Debug)]
pub struct ErrorOptions {
    /// Stop at the first error (`halt_on_error`).
    pub halt_on_error: bool,
    /// The exit status after reported errors (`exitcode`).
    pub exitcode: i32,
    /// Frames of a host stack in reports (`malloc_context_size`).
    pub stack_depth: u32,
}

impl From<&Options> for ErrorOptions {
    fn from(o: &Options) -> Self {
        ErrorOptions { halt_on_error: o.halt_on_error, exitcode: o.exitcode, stack_depth: o.malloc_context_size }
    }
}

/// What a drained ring record is described from: every device's pool, the checked modules' site
/// tables and the foreign memory (with the first device's outside table).
pub struct RingSources<'a> {
    pub devices: &'a Devices<DeviceRuntime>,
    pub sites: &'a ModuleRegistry,
    pub foreign: &'a SideTable,
}

/// The process's report sink.
pub struct Errors {
    pub reporter: Reporter,
    /// What became of the device errors drained from the rings.
    pub(crate) ring_tally: RingTally,
    opts: ErrorOptions,
    summary_printed: AtomicBool,
    device_error_handled: AtomicBool,
    /// Held over a whole drain (records taken and reported), so a drain that finds nothing knows
    /// no other thread holds a record it took and has not reported yet.
    drain_lock: Mutex<()>,
}

/// Whether a drain settles the rings: counts what is still unpublished after a bounded wait as
/// lost (after a sticky device error, at exit), or leaves it for the next drain (after a
/// successful sync: the writer may be a kernel still running on another stream or thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    No,
    Yes,
}

impl Errors {
    pub fn new(reporter: Reporter, opts: ErrorOptions) -> Self {
        Errors { reporter, ring_tally: RingTally::default(), opts, summary_printed: AtomicBool::new(false), device_error_handled: AtomicBool::new(false), drain_lock: Mutex::new(()) }
    }

    /// Reports what the error rings hold, and says how many reports it made and how many claimed
    /// records a settling drain gave up on. In halt mode only the
    /// first record is reported; in recover mode each site is reported once (ASan's
    /// `suppress_equal_pcs`). Everything else is counted for [`Errors::print_error_summary`].
    ///
    /// Every device's ring is drained (each GPU's kernels write their own); a report names the
    /// GPU whose kernel made the access and describes the address from the pool that holds it,
    /// whichever GPU's.
    pub fn drain_ring(&self, from: &RingSources, settle: Settle) -> DrainOutcome {
        let _drain = self.drain_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut n, mut unfinished) = (0, 0);
        for (_, d) in from.devices.each() {
            let drained = match settle {
                Settle::No => d.ring.lock().unwrap().drain(),
                Settle::Yes => d.ring.lock().unwrap().drain_settled(crate::ring::SETTLE_WAIT),
            };
            self.ring_tally.add_lost(drained.lost);
            unfinished += drained.unfinished;
            for rec in drained.records {
                if !self.ring_tally.admit(&rec, self.opts.halt_on_error && n > 0) {
                    continue;
                }
                let owner = if d.alloc.owns(rec.addr) { d } else { from.devices.each().map(|(_, o)| o).find(|o| o.alloc.owns(rec.addr)).unwrap_or(d) };
                let mut desc = owner.alloc.describe(rec.addr).for_access(u64::from(rec.width));
                if desc.kind == crate::allocator::AddrKind::Unknown {
                    // The outside table is the first device's (the process's side table feeds it).
                    let outside = from.devices.first().and_then(|f| f.outside.as_ref());
                    desc = outside.and_then(|t| from.foreign.describe_outside(t, rec.addr, d.alloc.scale())).unwrap_or(desc);
                }
                let report = from.sites.device_report(rec, desc, d.device);
                if self.reporter.report(&report) {
                    n += 1;
                }
            }
        }
        DrainOutcome { reported: n, unfinished }
    }

    /// One line counting the device errors that got no report of their own (once per process).
    pub fn print_error_summary(&self) {
        let (more, lost) = self.ring_tally.not_reported();
        if more + lost == 0 || self.summary_printed.swap(true, Ordering::SeqCst) {
            return;
        }
        let why = if self.opts.halt_on_error { "halt_on_error=1 reports the first" } else { "each site is reported once" };
        eprintln!("==gasan== {} more bad device access(es) not reported ({why}; {lost} of them lost from the error ring: overwritten before they were read, or never finished)", more + lost);
    }

    /// After a synchronizing call: report ring records, and stop in halt mode.
    pub fn check_after_sync(&self, from: &RingSources) {
        if self.drain_ring(from, Settle::No).reported > 0 && self.opts.halt_on_error {
            self.exit_with_error();
        }
    }

    /// A call returned a sticky device error (a `trap` or an MMU fault). The rings are settled
    /// first: a record another thread's drain saw claimed but not yet published is taken now.
    /// Nothing found, the fault is reported as one no check saw, unless in halt mode another
    /// thread's drain already reported the record of this `trap` and is ending the process, or
    /// a slot was claimed and never finished: in halt mode a check failed and its `trap` ended
    /// the kernel before its record reached the host ([`Report::Unfinished`]).
    pub fn on_device_error(&self, from: &RingSources, code: CuResult, call: &str) {
        if self.device_error_handled.swap(true, Ordering::SeqCst) {
            return;
        }
        let drained = self.drain_ring(from, Settle::Yes);
        let reported_before = self.reporter.errors_reported() > 0;
        match after_settle(drained.reported, drained.unfinished, self.opts.halt_on_error, reported_before) {
            AfterSettle::Done => {}
            AfterSettle::Unfinished => {
                self.reporter.report(&Report::Unfinished { cuda_error: code, call: call.to_string(), stack: HostStack::capture(self.opts.stack_depth), claimed: drained.unfinished });
            }
            AfterSettle::Fault => {
                let fault = from.devices.first().and_then(|d| {
                    let f = d.faults.lock().unwrap().as_mut()?.wait_drain(200).into_iter().next()?;
                    Some((f, d.alloc.describe(f.address)))
                });
                self.reporter.report(&Report::Fault { cuda_error: code, call: call.to_string(), stack: HostStack::capture(self.opts.stack_depth), fault });
            }
        }
        if self.opts.halt_on_error {
            self.exit_with_error();
        }
    }

    /// Reports a host-side error and stops in halt mode.
    pub fn host_error(&self, r: Report) {
        if self.reporter.report(&r) && self.opts.halt_on_error {
            self.exit_with_error();
        }
    }

    pub fn exit_with_error(&self) -> ! {
        self.print_error_summary();
        // SAFETY: ending the process like ASan's Die(), keeping the program's buffered output.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(self.opts.exitcode)
        }
    }

    /// At exit: the leaks still live in every pool, reported.
    pub fn report_leaks(&self, devices: &Devices<DeviceRuntime>) {
        let leaks: Vec<_> = devices.each().flat_map(|(_, d)| d.alloc.live_allocations()).collect();
        if !leaks.is_empty() {
            self.reporter.report(&Report::Leaks(leaks));
        }
    }

    /// At exit: the exit status replaced after reported errors, like ASan; the program's
    /// buffered output is flushed first (_exit would drop it).
    pub fn exit_if_reported(&self) {
        if self.reporter.errors_reported() > 0 {
            // SAFETY: ending the process at exit with the program's output flushed.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::_exit(self.opts.exitcode)
            };
        }
    }
}

/// What [`Errors::drain_ring`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainOutcome {
    /// Reports made.
    pub reported: usize,
    /// Claimed records a settling drain gave up on ([`crate::ring::Drained::unfinished`]).
    pub unfinished: u64,
}

/// What a sticky device error still needs reported once the rings are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterSettle {
    /// The settle reported its records, or (halt mode) another thread's report is ending the
    /// process.
    Done,
    /// A check failed and its record never finished ([`Report::Unfinished`]).
    Unfinished,
    /// A fault no check saw ([`Report::Fault`]).
    Fault,
}

/// The report a sticky device error needs after a settling drain that made `reported` reports
/// and gave up on `unfinished` claimed slots. Only a failed check claims a slot, and in halt mode
/// it traps after its record: the kernel stopped at a failed check, not at code no check saw. In
/// recover mode a writer goes on after its record, so one left unfinished was stopped by
/// something else, which the fault report describes.
fn after_settle(reported: usize, unfinished: u64, halt: bool, reported_before: bool) -> AfterSettle {
    // In halt mode every report ends the process: one counted already is being ended with.
    if reported > 0 || (halt && reported_before) {
        AfterSettle::Done
    } else if halt && unfinished > 0 {
        AfterSettle::Unfinished
    } else {
        AfterSettle::Fault
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sticky_error_is_reported_once_as_what_it_was() {
        // Records were read: they are the report.
        assert_eq!(after_settle(1, 1, true, false), AfterSettle::Done);
        // Halt mode, another thread reported the trap's record and is ending the process.
        assert_eq!(after_settle(0, 0, true, true), AfterSettle::Done);
        // Halt mode, a claimed slot never finished: a failed check, not uninstrumented code.
        assert_eq!(after_settle(0, 1, true, false), AfterSettle::Unfinished);
        // Nothing claimed: a fault no check saw.
        assert_eq!(after_settle(0, 0, true, false), AfterSettle::Fault);
        // Recover mode: a writer stopped mid-record was stopped by the fault itself.
        assert_eq!(after_settle(0, 1, false, false), AfterSettle::Fault);
        assert_eq!(after_settle(0, 0, false, true), AfterSettle::Fault, "recover mode goes on after reports: a later fault is its own");
    }
}
