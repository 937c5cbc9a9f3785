//! Where a run's host time goes under gasan (`call_times=1`), printed at exit: for each call the
//! program made through gasan, how often, how long it took, and how much of that was the driver's
//! own function (the rest is gasan's); then the driver functions gasan called on its own behalf
//! (the pool's mappings, shadow writes, waits) and gasan's own work that is neither (host stack
//! captures), from any thread.
//!
//! A program that is slower under gasan than natively is slower in its kernels (checked code) or
//! on the host; this tells the host part apart, call by call, without a profiler on the machine.
//! Off, each counted call costs one load of the options.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A call the program made (a hook): its whole time, and the driver's part of it.
    Program,
    /// A driver function gasan called itself.
    OwnDriver,
    /// gasan's own work that is not a driver call.
    Own,
}

/// One call's counters, a static per call site kind; registered at its first count.
pub struct CallTimes {
    name: &'static str,
    kind: Kind,
    calls: AtomicU64,
    total_ns: AtomicU64,
    driver_ns: AtomicU64,
    registered: AtomicBool,
}

static REGISTERED: Mutex<Vec<&'static CallTimes>> = Mutex::new(Vec::new());

impl CallTimes {
    pub const fn new(name: &'static str, kind: Kind) -> Self {
        CallTimes { name, kind, calls: AtomicU64::new(0), total_ns: AtomicU64::new(0), driver_ns: AtomicU64::new(0), registered: AtomicBool::new(false) }
    }

    /// Counts one call of `total` wall time, `driver` of it in the driver's own function.
    pub fn add(&'static self, total: Duration, driver: Duration) {
        if !self.registered.swap(true, Ordering::Relaxed) {
            let mut reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
            if reg.is_empty() {
                // The state's exit handler prints the table too (it may end the process before
                // this one runs); whichever runs first prints it.
                extern "C" fn at_exit() {
                    print_at_exit();
                }
                // SAFETY: registers a plain function with no arguments, which only reads atomics
                // and writes to stderr.
                unsafe { libc::atexit(at_exit) };
            }
            reg.push(self);
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(total.as_nanos() as u64, Ordering::Relaxed);
        self.driver_ns.fetch_add(driver.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Adds `driver` to the driver's part of a call being counted (the hook's `real`).
    pub fn add_driver(&'static self, driver: Duration) {
        self.driver_ns.fetch_add(driver.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Whether `call_times` is on (options parsed once per process).
pub fn enabled() -> bool {
    crate::options::process().call_times
}

/// Runs `f`, counted as one call of `counter` when counting is on.
pub fn timed<R>(counter: &'static CallTimes, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    // A hook's driver share is added by its `real` (`add_driver`); other rows show totals only.
    counter.add(t.elapsed(), Duration::ZERO);
    r
}

/// One row of the table: a counter's values at the time of the call.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: &'static str,
    pub kind: Kind,
    pub calls: u64,
    pub total: Duration,
    pub driver: Duration,
}

/// Every counter that counted, by kind, then the most time first.
pub fn rows() -> Vec<Row> {
    let reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    let mut rows: Vec<Row> = reg
        .iter()
        .map(|c| Row {
            name: c.name,
            kind: c.kind,
            calls: c.calls.load(Ordering::Relaxed),
            total: Duration::from_nanos(c.total_ns.load(Ordering::Relaxed)),
            driver: Duration::from_nanos(c.driver_ns.load(Ordering::Relaxed)),
        })
        .collect();
    rows.sort_by(|a, b| a.kind.cmp(&b.kind).then(b.total.cmp(&a.total)).then(a.name.cmp(b.name)));
    rows
}

/// The table as text, one line per row (without gasan's message prefix); empty when nothing was
/// counted.
pub fn table(rows: &[Row]) -> Vec<String> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut out = Vec::new();
    let mut kind = None;
    for r in rows {
        if kind != Some(r.kind) {
            kind = Some(r.kind);
            out.push(match r.kind {
                Kind::Program => format!("{:<34} {:>9} {:>11} {:>11} {:>11} {:>10}", "program's call", "calls", "total ms", "driver ms", "gasan ms", "gasan µs/call"),
                Kind::OwnDriver => format!("{:<34} {:>9} {:>11}", "gasan's own driver call", "calls", "total ms"),
                Kind::Own => format!("{:<34} {:>9} {:>11}", "gasan's own work", "calls", "total ms"),
            });
        }
        match r.kind {
            Kind::Program => {
                let own = r.total.saturating_sub(r.driver);
                let per = if r.calls == 0 { 0.0 } else { own.as_secs_f64() * 1e6 / r.calls as f64 };
                out.push(format!("  {:<32} {:>9} {:>11.3} {:>11.3} {:>11.3} {:>10.2}", r.name, r.calls, ms(r.total), ms(r.driver), ms(own), per));
            }
            Kind::OwnDriver | Kind::Own => out.push(format!("  {:<32} {:>9} {:>11.3}", r.name, r.calls, ms(r.total))),
        }
    }
    out
}

/// Prints the table (at exit, when counting is on and anything was counted).
pub fn print_at_exit() {
    static PRINTED: AtomicBool = AtomicBool::new(false);
    if !enabled() || PRINTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let lines = table(&rows());
    if lines.is_empty() {
        return;
    }
    eprintln!("==gasan== host time by call (call_times=1; wall time on the calling threads; gasan ms = total - driver):");
    for l in lines {
        eprintln!("==gasan==   {l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_by_kind_and_sort_by_time_and_gasan_share_is_the_rest() {
        static A: CallTimes = CallTimes::new("cuTestProgramA", Kind::Program);
        static B: CallTimes = CallTimes::new("cuTestProgramB", Kind::Program);
        static M: CallTimes = CallTimes::new("cuTestOwnMap", Kind::OwnDriver);
        A.add(Duration::from_micros(100), Duration::from_micros(40));
        A.add(Duration::from_micros(100), Duration::from_micros(40));
        B.add(Duration::from_micros(500), Duration::from_micros(500));
        M.add(Duration::from_micros(30), Duration::from_micros(30));
        let rows: Vec<Row> = rows().into_iter().filter(|r| r.name.starts_with("cuTest")).collect();
        let names: Vec<_> = rows.iter().map(|r| r.name).collect();
        assert_eq!(names, ["cuTestProgramB", "cuTestProgramA", "cuTestOwnMap"]);
        assert_eq!(rows[1].calls, 2);
        assert_eq!(rows[1].total, Duration::from_micros(200));
        let text = table(&rows);
        // Program A: 200 µs in all, 80 in the driver: 120 µs gasan's, 60 per call.
        let a = text.iter().find(|l| l.contains("cuTestProgramA")).unwrap();
        assert!(a.ends_with("60.00"), "{a}");
        assert!(a.contains("0.120"), "{a}");
        assert!(text[0].starts_with("program's call"));
        assert!(text.iter().any(|l| l.starts_with("gasan's own driver call")));
    }
}
