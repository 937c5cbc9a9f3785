//! Errors and exit: the device error ring drained into reports, host-side errors, the summary of
//! what was not reported, and what the process prints and returns at exit.

use crate::allocator::HostStack;
use crate::driver::CuResult;
use crate::report::Report;
use crate::state::State;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

impl State {
    /// Reports what the error ring holds. Returns the number of reports. In halt mode only the
    /// first record is reported; in recover mode each site is reported once (ASan's
    /// `suppress_equal_pcs`). Everything else is counted for [`State::print_error_summary`].
    ///
    /// Every device's ring is drained (each GPU's kernels write their own); a report names the
    /// GPU whose kernel made the access and describes the address from the pool that holds it,
    /// whichever GPU's.
    pub fn drain_ring(&self) -> usize {
        let mut n = 0;
        for (_, d) in self.devices.each() {
            let drained = d.ring.lock().unwrap().drain();
            self.ring_tally.add_lost(drained.lost);
            for rec in drained.records {
                if !self.ring_tally.admit(&rec, self.opts.halt_on_error && n > 0) {
                    continue;
                }
                let owner = if d.alloc.owns(rec.addr) { d } else { self.devices.each().map(|(_, o)| o).find(|o| o.alloc.owns(rec.addr)).unwrap_or(d) };
                let mut desc = owner.alloc.describe(rec.addr).for_access(u64::from(rec.width));
                if desc.kind == crate::allocator::AddrKind::Unknown {
                    desc = self.describe_outside(rec.addr, d.alloc.scale()).unwrap_or(desc);
                }
                let report = self.sites.device_report(rec, desc, d.device);
                if self.reporter.report(&report) {
                    n += 1;
                }
            }
        }
        n
    }

    /// One line counting the device errors that got no report of their own (once per process).
    pub fn print_error_summary(&self) {
        static PRINTED: AtomicBool = AtomicBool::new(false);
        let (more, lost) = self.ring_tally.not_reported();
        if more + lost == 0 || PRINTED.swap(true, Ordering::SeqCst) {
            return;
        }
        let why = if self.opts.halt_on_error { "halt_on_error=1 reports the first" } else { "each site is reported once" };
        eprintln!("==gasan== {} more bad device access(es) not reported ({why}; {lost} of them overwritten in the error ring before they were read)", more + lost);
    }

    /// After a synchronizing call: report ring records, and stop in halt mode.
    pub fn check_after_sync(&self) {
        if self.drain_ring() > 0 && self.opts.halt_on_error {
            self.exit_with_error();
        }
    }

    /// A call returned a sticky device error (a `trap` or an MMU fault).
    pub fn on_device_error(&self, code: CuResult, call: &str) {
        static HANDLED: AtomicBool = AtomicBool::new(false);
        if HANDLED.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.drain_ring() == 0 {
            let fault = self.devices.first().and_then(|d| {
                let f = d.faults.lock().unwrap().as_mut()?.wait_drain(200).into_iter().next()?;
                Some((f, d.alloc.describe(f.address)))
            });
            self.reporter.report(&Report::Fault { cuda_error: code, call: call.to_string(), stack: HostStack::capture(self.opts.malloc_context_size), fault });
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

    pub(crate) fn at_exit(&self) {
        self.drain_ring();
        self.print_error_summary();
        if self.opts.detect_leaks {
            let leaks: Vec<_> = self.devices.each().flat_map(|(_, d)| d.alloc.live_allocations()).collect();
            if !leaks.is_empty() {
                self.reporter.report(&Report::Leaks(leaks));
            }
        }
        if self.opts.verbosity >= 1 {
            use crate::side_table::ForeignKind as K;
            let f = &self.foreign;
            eprintln!(
                "==gasan== untracked by the pool (passed through): {} managed, {} pinned host, {} registered host, {} other-GPU allocations live",
                f.count(K::Managed),
                f.count(K::HostAlloc),
                f.count(K::HostRegistered),
                f.count(K::OtherDevice)
            );
            let c = &self.counters;
            eprintln!(
                "==gasan== modules: {} instrumented ({} from cache, {:.1} ms loading), {} SASS-only, {} fell back to the original",
                c.modules_instrumented.load(Ordering::Relaxed),
                c.cache_hits.load(Ordering::Relaxed),
                c.module_load_us.load(Ordering::Relaxed) as f64 / 1e3,
                c.modules_sass_only.load(Ordering::Relaxed),
                c.modules_fallback.load(Ordering::Relaxed)
            );
            crate::jit_origin::summary().iter().for_each(|l| eprintln!("==gasan== {l}"));
            let ms = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / 1e3;
            eprintln!(
                "==gasan== module loading: {:.2} ms preparing (PTX, key, site table or instrumentation), {:.2} ms finding cubins, {:.2} ms in the driver's loaders, {:.2} ms writing control blocks",
                ms(&c.prepare_us),
                ms(&c.cubin_lookup_us),
                ms(&c.driver_load_us),
                ms(&c.control_block_us)
            );
            eprintln!(
                "==gasan== cubins: {} from cache ({} found before their load), {} compiled ({:.1} ms in ptxas), {} refused by the driver; {} modules on the driver's PTX JIT{}",
                c.cubins_cached.load(Ordering::Relaxed),
                c.cubins_prefetched.load(Ordering::Relaxed),
                c.cubins_compiled.load(Ordering::Relaxed),
                c.cubin_compile_us.load(Ordering::Relaxed) as f64 / 1e3,
                c.cubins_refused.load(Ordering::Relaxed),
                c.sass_ptx_path.load(Ordering::Relaxed),
                if self.opts.sass { "" } else { " (sass=0)" }
            );
            eprintln!(
                "==gasan== modules loaded ahead of their first launch: {} ({:.2} ms on the prefetch thread), {} of them handed to their loaders; loaders waited {:.2} ms for the prefetch thread",
                c.modules_preloaded.load(Ordering::Relaxed),
                ms(&c.preload_us),
                c.modules_adopted.load(Ordering::Relaxed),
                ms(&c.prefetch_wait_us)
            );
            eprintln!(
                "==gasan== launches: {}, {} with block bounds in their pointer arguments{}",
                c.launches.load(Ordering::Relaxed),
                c.launches_tagged.load(Ordering::Relaxed),
                if self.opts.arg_bounds { "" } else { " (arg_bounds=0)" }
            );
        }
        if self.reporter.errors_reported() > 0 {
            // SAFETY: replacing the exit status after reported errors, like ASan; the program's
            // buffered output is flushed first (_exit would drop it).
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::_exit(self.opts.exitcode)
            };
        }
    }
}
