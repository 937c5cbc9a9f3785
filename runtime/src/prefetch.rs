//! The program's own modules, looked up in the cache before their first launch.
//!
//! Under lazy loading (CUDA's default) cudart hands a module to the driver inside the first launch
//! of one of its kernels, so everything gasan does for a module before the driver sees it (its PTX
//! entry found and hashed, the checked code's index and site table read, the cubin's key made and
//! the cubin read) is paid by that launch. When the device runtime is set up (the program's first
//! CUDA call that needs the GPU, long before most first launches), [`start`] finds the fatbins
//! the loaded ELF files registered with cudart (their `.nvFatBinSegment` wrappers) and a background
//! thread prepares each one from the cache alone ([`modules::prepare_cached`]). A loader hook
//! [`take`]s its module's result, waiting for one under way; a module the thread has not reached is
//! prepared by its loader as before. Only cache hits are prepared ahead: in a cold run the work is
//! what it was, and no module the program never loads is instrumented or compiled.
//!
//! The program's own fatbins are prepared earlier still, from the moment the runtime is loaded
//! ([`start_early`], before `main`), for the GPU the last set-up with this cache found
//! ([`DeviceRecord`]: what the cache keys need that only a set-up GPU tells). No CUDA function is
//! called for it. At set-up, [`start`] takes those results over if this GPU's keys are the
//! remembered ones (the thread then only loads them into the driver), and drops them otherwise.

use crate::cache::Cache;
use crate::modules::{self, CacheLookup, ModuleOptions, Prepared};
use crate::state::{log, state};
use gasan_instrument::container::{self, ImageLen};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CStr, OsString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// Files whose `.nv_fatbin` is larger than this are left to their loaders (libraries of
/// thousands of modules, most of which a program never loads: cuBLAS, PyTorch).
const MAX_FATBIN_SECTION: u64 = 64 << 20;

/// Cubin bytes the threads (the early one's and the set-up one's together) may hold for modules
/// not loaded yet; past it, the rest are left to their loaders (a program that loads few of many
/// modules does not keep all their cubins in memory).
const MAX_PREPARED_BYTES: usize = 256 << 20;

/// Of those, the cubin bytes the early thread may hold: a program that never sets a GPU up (run
/// for its `--help`, say) holds them until it exits.
const MAX_EARLY_PREPARED_BYTES: usize = 64 << 20;

/// Cubin bytes the thread may load into the driver ahead of their loaders; past it, the rest load
/// in their first launch as before (the driver's time and memory for modules a run may not use).
const MAX_PRELOADED_BYTES: usize = 64 << 20;

/// A fatbin in a loaded file: its address and the bytes it may span (to its section's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadedFatbin {
    pub addr: usize,
    pub len: usize,
}

/// Where a fatbin's preparation stands.
enum Slot<T> {
    /// Not started; a loader that gets here first takes it and prepares the module itself.
    Queued,
    /// A thread is preparing it (or loading it into the driver); a loader waits for
    /// [`Slot::Ready`] or [`Slot::Missed`] (or the table's clearing).
    Running,
    Ready(Box<T>),
    /// A loader took it (its result, or the job of preparing it): nobody prepares it again, and a
    /// list that comes later leaves it taken.
    Taken,
    /// A thread found no result for it (not in the cache): its loader prepares it, and a list
    /// that comes later (the other thread's) does not queue it again.
    Missed,
}

/// Preparations by fatbin address, shared by the threads that make them and the loaders that
/// take them. Each key is prepared at most once, by a thread or by its loader, never both, and
/// no loader waits except for a preparation under way. Two threads may work on one table (the
/// early one lists and prepares the program's fatbins, the set-up one lists every file's and
/// takes the early results over to load them into the driver): a key is claimed by one of them.
struct Table<T> {
    slots: Mutex<HashMap<usize, Slot<T>>>,
    changed: Condvar,
}

impl<T> Table<T> {
    fn new() -> Self {
        Table { slots: Mutex::new(HashMap::new()), changed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Slot<T>>> {
        // A panic while the lock was held leaves the slots consistent (each update is one call).
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A thread's keys, in the order it will work (a key a loader took already stays taken, one
    /// listed already keeps its state).
    fn list(&self, keys: impl IntoIterator<Item = usize>) {
        let mut s = self.lock();
        for k in keys {
            s.entry(k).or_insert(Slot::Queued);
        }
    }

    /// A thread claims `key` to prepare it: false when a loader took it first, another thread
    /// claimed it, or it is unknown.
    fn claim(&self, key: usize) -> bool {
        match self.lock().get_mut(&key) {
            Some(s @ Slot::Queued) => {
                *s = Slot::Running;
                true
            }
            _ => false,
        }
    }

    /// The set-up thread takes over another thread's result for `key` to carry on with it (load it
    /// into the driver), waiting while that thread works on it; the slot is running again until
    /// [`Self::finish`]. `None` when there is no result (taken, never made, not listed).
    fn claim_ready(&self, key: usize) -> Option<T> {
        let mut s = self.lock();
        loop {
            match s.get_mut(&key) {
                Some(Slot::Running) => s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(slot @ Slot::Ready(_)) => {
                    let Slot::Ready(r) = std::mem::replace(slot, Slot::Running) else { unreachable!("matched Ready") };
                    return Some(*r);
                }
                _ => return None,
            }
        }
    }

    /// A thread's result for a key it claimed (`None`: the loader prepares it). A result for a
    /// slot no longer running (the table was cleared) is dropped.
    fn finish(&self, key: usize, result: Option<T>) {
        if let Some(slot @ Slot::Running) = self.lock().get_mut(&key) {
            *slot = match result {
                Some(r) => Slot::Ready(Box::new(r)),
                None => Slot::Missed,
            };
        }
        self.changed.notify_all();
    }

    /// A loader's take of `key`: the thread's result, waiting while one works on it; `None` when
    /// there is none, and the loader then prepares the module. Either way the key is the loader's
    /// from now on: no thread will start it.
    fn take(&self, key: usize) -> Option<T> {
        let mut s = self.lock();
        loop {
            match s.insert(key, Slot::Taken) {
                Some(Slot::Running) => {
                    s.insert(key, Slot::Running);
                    s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                Some(Slot::Ready(r)) => return Some(*r),
                _ => return None,
            }
        }
    }

    /// Changes every result not taken yet.
    fn each_ready(&self, mut f: impl FnMut(&mut T)) {
        for slot in self.lock().values_mut() {
            if let Slot::Ready(r) = slot {
                f(r);
            }
        }
    }

    /// Forgets every key and drops every result (a result finished later is dropped too).
    fn clear(&self) {
        self.lock().clear();
        self.changed.notify_all();
    }
}

/// What the cache keys of a GPU's modules need that only a set-up GPU tells (the device's compute
/// capability, whether its pool allows the aligned-pool checks, the loaded driver's identity), as
/// the last process that set a GPU up with this cache found it. Kept in the cache
/// (`<hash>.device`, written whole and renamed into place); a missing, cut short or otherwise
/// unreadable record is no record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRecord {
    pub cc: u32,
    pub aligned_pool: bool,
    pub driver: String,
}

/// First line of a device record (its format's version).
const RECORD_HEADER: &str = "gasan-last-device 1";

impl DeviceRecord {
    /// The device `lookup` was made for.
    pub fn of(lookup: &CacheLookup) -> Self {
        DeviceRecord { cc: lookup.cc, aligned_pool: lookup.aligned_pool(), driver: lookup.driver().to_string() }
    }

    /// The record as its cache entry holds it: one field a line, then `end` (so a file cut short
    /// is told from a whole one).
    pub fn to_text(&self) -> String {
        format!("{RECORD_HEADER}\ncc {}\naligned_pool {}\ndriver {}\nend\n", self.cc, self.aligned_pool as u8, self.driver)
    }

    /// A record from [`Self::to_text`]'s form; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.split('\n');
        if lines.next()? != RECORD_HEADER {
            return None;
        }
        let mut field = |name: &str| lines.next().and_then(|l| l.strip_prefix(name)).and_then(|l| l.strip_prefix(' ')).map(str::to_string);
        let cc = field("cc")?.parse::<u32>().ok().filter(|&cc| cc > 0)?;
        let aligned_pool = match field("aligned_pool")?.as_str() {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let driver = field("driver").filter(|d| !d.is_empty())?;
        let rest: Vec<&str> = lines.collect();
        (rest == ["end", ""]).then_some(DeviceRecord { cc, aligned_pool, driver })
    }

    /// Its cache entry's name (one per gasan version and revision).
    fn entry_name() -> String {
        let mut h = Sha256::new();
        h.update(b"last device set up");
        h.update(env!("CARGO_PKG_VERSION"));
        h.update(gasan_instrument::ptx::REVISION.to_le_bytes());
        format!("{}.device", crate::cache::key_hex(&h.finalize()))
    }

    /// The record `cache` holds, if any.
    pub fn read(cache: &Cache) -> Option<Self> {
        let text = cache.get(&Self::entry_name())?;
        Self::parse(std::str::from_utf8(&text).ok()?)
    }

    /// Writes it into `cache`, replacing the one there.
    pub fn write(&self, cache: &Cache) -> std::io::Result<()> {
        cache.put(&Self::entry_name(), self.to_text().as_bytes())
    }
}

/// The preparation of the program's fatbins started when the runtime is loaded, for the
/// remembered device ([`start_early`]).
struct Early {
    /// The process that started its thread. No other process touches the rest: a forked child
    /// lacks the thread, and its table's lock may have been held by it at the fork.
    pid: u32,
    /// What it lists ([`program_fatbins`]).
    list: fn() -> Vec<LoadedFatbin>,
    opts: ModuleOptions,
    cache: Cache,
    record: DeviceRecord,
    /// The variables ptxas is looked up with, as they were when the runtime was loaded (the thread
    /// reads no environment: the program may change it meanwhile).
    ptxas_env: Vec<(&'static str, Option<OsString>)>,
    /// What the thread prepares with, once it has made it.
    lookup: OnceLock<CacheLookup>,
    /// The fatbins it listed, once it has (in the table from then on).
    fatbins: OnceLock<Vec<LoadedFatbin>>,
    table: Table<Prepared>,
    /// Set when the set-up GPU is not the remembered one: the thread stops and its results go.
    stopped: AtomicBool,
    /// Modules it prepared, and the cubin bytes they hold.
    prepared: AtomicUsize,
    bytes: AtomicUsize,
    /// Its thread's time once done, µs; `u64::MAX` while it works.
    took_us: AtomicU64,
}

impl Early {
    /// Stops the thread and drops what it prepared (results it finishes later are dropped too).
    fn drop_results(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.table.clear();
    }
}

static EARLY: OnceLock<Early> = OnceLock::new();

/// Starts preparing the program's own fatbins from the cache for the device the last set-up
/// remembered ([`DeviceRecord`]), on a thread, when the runtime is loaded (crate::init::at_load,
/// before the program's `main`). Nothing when the options rule prefetching or cached cubins out,
/// when there is no cache directory, or when no device is remembered (then everything waits for
/// the set-up, as [`start`] does it). Calls no CUDA function and loads no library: a program that
/// never uses CUDA, or forks first, pays only for reading the record and for the thread.
///
/// Only the program itself is listed: it is never unloaded, so its memory can be read without
/// pinning it (pinning a library with `dlopen` while constructors run could run another
/// library's constructor on this thread); libraries wait for the set-up.
pub fn start_early(opts: &ModuleOptions) {
    // SAFETY: program_fatbins names fatbins of the program, which is never unloaded.
    unsafe { start_early_listing(opts, program_fatbins) }
}

/// [`start_early`] preparing the fatbins `list` names instead of the program's (tests name a
/// loaded library's).
///
/// # Safety
/// Each fatbin `list` names spans its `len` readable bytes for the life of the process.
#[doc(hidden)]
pub unsafe fn start_early_listing(opts: &ModuleOptions, list: fn() -> Vec<LoadedFatbin>) {
    if !(opts.prefetch && opts.instrument && opts.sass) {
        return;
    }
    let Some(cache) = opts.cache() else { return };
    let Some(record) = DeviceRecord::read(&cache) else { return };
    let ptxas_env = ["CUDA_HOME", "CUDA_PATH", "PATH"].into_iter().map(|k| (k, std::env::var_os(k))).collect();
    let early = Early {
        pid: std::process::id(),
        list,
        opts: opts.clone(),
        cache,
        record,
        ptxas_env,
        lookup: OnceLock::new(),
        fatbins: OnceLock::new(),
        table: Table::new(),
        stopped: AtomicBool::new(false),
        prepared: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        took_us: AtomicU64::new(u64::MAX),
    };
    if EARLY.set(early).is_err() {
        return;
    }
    if std::thread::Builder::new().name("gasan-early".into()).spawn(run_early).is_err() {
        if let Some(e) = EARLY.get() {
            e.drop_results();
            e.took_us.store(0, Ordering::SeqCst);
        }
    }
}

/// The early thread: the program's fatbins prepared for the remembered device. It touches no
/// process-wide state besides [`EARLY`] (no `state()`, whose creation registers exit handlers
/// and would make a program that never uses CUDA report; no shared `OnceLock` a forked child could
/// find half made) and writes nothing.
fn run_early() {
    let Some(e) = EARLY.get() else { return };
    let t = std::time::Instant::now();
    let env = |k: &str| e.ptxas_env.iter().find(|(n, _)| *n == k).and_then(|(_, v)| v.clone());
    let r = &e.record;
    if let Some(lookup) = CacheLookup::speculative(&e.opts, e.cache.clone(), r.cc, r.aligned_pool, r.driver.clone(), env) {
        let lookup = e.lookup.get_or_init(|| lookup);
        let fatbins = std::panic::catch_unwind(e.list).unwrap_or_default();
        e.table.list(fatbins.iter().map(|f| f.addr));
        let fatbins = e.fatbins.get_or_init(|| fatbins);
        for f in fatbins {
            if e.stopped.load(Ordering::SeqCst) || e.bytes.load(Ordering::SeqCst) > MAX_EARLY_PREPARED_BYTES {
                break;
            }
            if !e.table.claim(f.addr) {
                continue;
            }
            // A panic must not leave the slot running (its loader would wait for ever).
            let prepared = std::panic::catch_unwind(|| {
                // SAFETY: `e.list` (program_fatbins: the program is never unloaded; or what
                // start_early_listing's caller vouched for) names `f.len` readable bytes for the
                // life of the process.
                unsafe { modules::prepare_cached(f.addr as *const c_void, f.len, lookup) }
            })
            .ok()
            .flatten();
            if let Some(p) = &prepared {
                e.prepared.fetch_add(1, Ordering::SeqCst);
                e.bytes.fetch_add(p.bytes(), Ordering::SeqCst);
            }
            e.table.finish(f.addr, prepared);
        }
    }
    // Dropped while it worked: what it finished since goes too.
    if e.stopped.load(Ordering::SeqCst) {
        e.table.clear();
    }
    e.took_us.store(t.elapsed().as_micros() as u64, Ordering::SeqCst);
}

struct Prefetch {
    /// The process that started the thread (a forked child has no thread to wait for).
    pid: u32,
    /// How modules are looked up (for this GPU's compute capability).
    lookup: CacheLookup,
    /// The context the GPU was set up in (`CUcontext`), when prepared modules are also loaded
    /// into it ahead of their loaders ([`modules::preload`]); 0: not.
    preload_ctx: usize,
    /// The early preparation's table when its results were taken over, else its own.
    table: &'static Table<Prepared>,
    /// The early preparation whose results it took over.
    early: Option<&'static Early>,
    /// Why no early results were taken over (for the log; empty when they were).
    not_early: String,
}

static PREFETCH: OnceLock<Prefetch> = OnceLock::new();

/// Starts preparing the loaded files' modules for a GPU of compute capability `cc` (once per
/// process; nothing when the options rule it out). The files are listed on the thread too: the
/// caller (the program's first CUDA call that needs the GPU) pays only for making the lookup,
/// checking it against the early preparation's and starting the thread.
pub fn start(cc: u32) {
    let o = &state().opts;
    if !(o.prefetch && o.instrument && o.sass) {
        return;
    }
    let pid = std::process::id();
    // A forked child leaves its parent's early preparation alone (see Early::pid).
    let early = EARLY.get().filter(|e| e.pid == pid);
    let Some(lookup) = CacheLookup::for_this_process(cc) else {
        if let Some(e) = early {
            e.drop_results();
        }
        return;
    };
    let verdict = early.map(|e| early_verdict(e.lookup.get(), &lookup));
    let adopted = early.filter(|_| verdict == Some(Ok(())));
    let not_early = match (early, verdict) {
        (Some(_), Some(Ok(()))) => String::new(),
        (Some(e), Some(Err(why))) => {
            e.drop_results();
            format!("dropped what was prepared for the remembered device: {why}")
        }
        _ => "no device remembered".to_string(),
    };
    let table: &'static Table<Prepared> = match adopted {
        Some(e) => &e.table,
        // Once per process.
        None => Box::leak(Box::new(Table::new())),
    };
    let preload_ctx = if o.preload && lazy_loading() { current_context() } else { 0 };
    if PREFETCH.set(Prefetch { pid, lookup, preload_ctx, table, early: adopted, not_early }).is_err() {
        return;
    }
    if let Err(e) = std::thread::Builder::new().name("gasan-prefetch".into()).spawn(run) {
        log(1, || format!("module prefetch not started: {e}"));
        if let Some(p) = PREFETCH.get() {
            p.table.clear();
        }
    }
}

/// Whether the early preparation's results, made with `early` (`None`: it has made no lookup
/// yet), stand for this process's set-up GPU, whose lookup is `this`: they do when the two find
/// the same cache entries; otherwise, why not.
fn early_verdict(early: Option<&CacheLookup>, this: &CacheLookup) -> Result<(), String> {
    match early {
        Some(l) if l == this => Ok(()),
        None => Err("it had not started yet".into()),
        Some(l) if l.cc != this.cc => Err(format!("made for sm_{}, this GPU is sm_{}", l.cc, this.cc)),
        Some(l) if l.aligned_pool() != this.aligned_pool() => Err("made for another pool layout".into()),
        Some(l) if l.driver() != this.driver() => Err("made for another driver".into()),
        Some(_) => Err("made with other options or another ptxas".into()),
    }
}

/// The calling thread's current context (`CUcontext`; 0 when none).
fn current_context() -> usize {
    crate::driver::result::ctx_get_current().map_or(0, |ctx| ctx as usize)
}

/// Does the driver load modules lazily (`CUDA_MODULE_LOADING`, lazy by default)? Under eager
/// loading cudart loads every module when the context is set up, so there is nothing to load ahead.
fn lazy_loading() -> bool {
    crate::driver::result::module_get_loading_mode() == Ok(cudarc::driver::sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING)
}

fn run() {
    let Some(p) = PREFETCH.get() else { return };
    let t = std::time::Instant::now();
    // The modules load into the context the GPU was set up in, as cudart's loads will.
    let preload = p.preload_ctx != 0 && crate::driver::result::ctx_set_current(p.preload_ctx as cudarc::driver::sys::CUcontext).is_ok();
    let (mut preloaded, mut preloaded_bytes) = (0usize, 0usize);
    let early_bytes = || p.early.map_or(0, |e| e.bytes.load(Ordering::SeqCst));
    let (mut ready, mut bytes, mut taken_over) = (0usize, 0usize, 0usize);
    // Prepares (or takes over from the early thread) and loads one fatbin listed in the table;
    // false once the cap on cubins held is reached.
    let mut step = |f: &LoadedFatbin| -> bool {
        if bytes + early_bytes() > MAX_PREPARED_BYTES {
            return false;
        }
        let prepared = if p.table.claim(f.addr) {
            // A panic must not leave the slot running (its loader would wait for ever).
            let prepared = std::panic::catch_unwind(|| {
                // SAFETY: `f` was listed by loaded_fatbins (inside an allocated section of a
                // loaded file, pinned if a library) or by the early thread (see run_early):
                // `f.len` readable bytes for the life of the process.
                unsafe { modules::prepare_cached(f.addr as *const c_void, f.len, &p.lookup) }
            })
            .ok()
            .flatten();
            bytes += prepared.as_ref().map_or(0, Prepared::bytes);
            prepared
        } else {
            // The early thread's result (waiting while it works on it), already counted in its
            // bytes; none when a loader took it or it was never made.
            match p.early.and_then(|_| p.table.claim_ready(f.addr)) {
                Some(r) => {
                    taken_over += 1;
                    Some(r)
                }
                None => return true,
            }
        };
        let prepared = prepared.map(|mut prep| {
            if preload && preloaded_bytes + prep.bytes() <= MAX_PRELOADED_BYTES && modules::preload(&mut prep) {
                preloaded += 1;
                preloaded_bytes += prep.bytes();
            }
            prep
        });
        ready += prepared.is_some() as usize;
        p.table.finish(f.addr, prepared);
        true
    };
    // One fatbin named by two wrappers is one module.
    let mut seen = HashSet::new();
    // The early thread's fatbins first (the program's, already in the table): their results only
    // wait to be loaded into the driver, which is what the first launches wait for, so the other
    // files are listed after.
    let early_fatbins = p.early.and_then(|e| e.fatbins.get()).cloned().unwrap_or_default();
    let mut within_cap = true;
    for f in &early_fatbins {
        if seen.insert(f.addr) && !step(f) {
            within_cap = false;
            break;
        }
    }
    let early_done_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut fatbins = std::panic::catch_unwind(loaded_fatbins).unwrap_or_default();
    fatbins.retain(|f| seen.insert(f.addr));
    let listed = seen.len();
    p.table.list(fatbins.iter().map(|f| f.addr));
    if within_cap {
        for f in &fatbins {
            if !step(f) {
                break;
            }
        }
    }
    log(1, || {
        let early = match p.early {
            Some(e) => {
                let took = match e.took_us.load(Ordering::SeqCst) {
                    u64::MAX => "still at work".to_string(),
                    us => format!("which took {:.2} ms", us as f64 / 1e3),
                };
                format!(
                    "{} of them before set-up, for the remembered sm_{}, by a thread started with the process, {took}; {taken_over} taken over from it and the program's all handled {early_done_ms:.2} ms after set-up",
                    e.prepared.load(Ordering::SeqCst),
                    e.record.cc
                )
            }
            None => format!("none of them before set-up ({})", p.not_early),
        };
        format!(
            "prepared {ready} of {listed} modules in the program's files from the cache ahead of their loads ({early}), {preloaded} loaded into the driver, in {:.2} ms after set-up",
            t.elapsed().as_secs_f64() * 1e3
        )
    });
    remember_device(p);
}

/// Records this GPU for the next process's early preparation, when it is not the one recorded.
fn remember_device(p: &Prefetch) {
    let this = DeviceRecord::of(&p.lookup);
    let recorded = match p.early {
        Some(e) => Some(e.record.clone()),
        None => DeviceRecord::read(p.lookup.cache()),
    };
    if recorded.as_ref() != Some(&this) {
        if let Err(e) = this.write(p.lookup.cache()) {
            log(1, || format!("device not remembered for the next run: {e}"));
        }
    }
}

/// A context went away (`Some`: that one was destroyed; `None`: a primary context was reset or
/// released for good): the modules loaded ahead into it went with it, so their loaders load them
/// again (the cubins and module ids stay).
pub fn on_context_gone(ctx: Option<cudarc::driver::sys::CUcontext>) {
    let Some(p) = PREFETCH.get() else { return };
    if p.preload_ctx == 0 || ctx.is_some_and(|c| c as usize != p.preload_ctx) {
        return;
    }
    let mut dropped = 0;
    p.table.each_ready(|prep| {
        if let Some(pre) = prep.preloaded.as_mut() {
            dropped += pre.library.take().is_some() as usize;
        }
    });
    log(1, || format!("context of the modules loaded ahead gone: {dropped} of them will load in their loaders"));
}

/// The preparation of `image`'s fatbin, if the thread made one (waiting while it works on it);
/// `None` otherwise, and the module is then the caller's to prepare.
///
/// Before set-up the early preparation's results are for a remembered device that nothing has
/// checked yet: the loader takes the module for itself (waiting for the early thread if it is
/// preparing it, then dropping that result), so neither thread prepares it again.
///
/// # Safety
/// `image` is a module image as the driver's loaders take it.
pub unsafe fn take(image: *const c_void) -> Option<Prepared> {
    let pid = std::process::id();
    let (table, before_set_up) = match (PREFETCH.get(), EARLY.get()) {
        (Some(p), _) if p.pid == pid => (p.table, false),
        (None, Some(e)) if e.pid == pid => (&e.table, true),
        _ => return None,
    };
    // SAFETY: `image` is a module image (this function's contract).
    let key = unsafe { modules::image_fatbin_address(image) }?;
    let t = std::time::Instant::now();
    let taken = table.take(key);
    // What the loader waited for a thread (it waits only for a preparation under way).
    state().counters.prefetch_wait_us.fetch_add(t.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    // An early result stands only if the set-up came meanwhile and took the early results over
    // (this GPU's lookup is the remembered one).
    if before_set_up && !PREFETCH.get().is_some_and(|p| p.pid == pid && p.early.is_some()) {
        return None;
    }
    taken
}

/// A loaded ELF file: its path, load bias and loaded segments (address ranges).
struct LoadedFile {
    path: PathBuf,
    bias: usize,
    segments: Vec<(usize, usize)>,
}

/// The files of this process (`dl_iterate_phdr`): the program first, then its libraries.
fn loaded_files() -> Vec<LoadedFile> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: libc::size_t, out: *mut c_void) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call, and `out` is the Vec that
        // loaded_files passed, borrowed by nothing else during the call.
        let (info, out) = unsafe { (&*info, &mut *(out as *mut Vec<LoadedFile>)) };
        let name = if info.dlpi_name.is_null() {
            ""
        } else {
            // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the dynamic linker.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_str().unwrap_or("")
        };
        // The program has an empty name; the vDSO a name that is no file.
        let path = match name {
            "" if out.is_empty() => PathBuf::from("/proc/self/exe"),
            "" => return 0,
            n => PathBuf::from(n),
        };
        let bias = info.dlpi_addr as usize;
        let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: dlpi_phdr points to dlpi_phnum program headers of the loaded file.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        let segments = phdrs.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_R != 0).map(|h| (bias + h.p_vaddr as usize, bias + (h.p_vaddr + h.p_memsz) as usize)).collect();
        out.push(LoadedFile { path, bias, segments });
        0
    }
    let mut files: Vec<LoadedFile> = Vec::new();
    // SAFETY: `each` matches dl_iterate_phdr's callback type and only writes `files`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut files as *mut Vec<LoadedFile>).cast()) };
    files
}

/// The fatbins of every loaded file (not the ones over [`MAX_FATBIN_SECTION`]).
///
/// A shared library whose fatbins are listed is pinned for the life of the process (a
/// `RTLD_NOLOAD` reference never closed): the thread reads its memory after this returns, and a
/// library unloaded and another loaded at its address would otherwise leave a preparation keyed by
/// an address that now holds other code. Libraries are pinned first and listed again, so every
/// address used is one of a pinned library (or of the program, which is never unloaded).
pub fn loaded_fatbins() -> Vec<LoadedFatbin> {
    let (fatbins, left) = fatbins_of(false);
    for (path, size) in left {
        log(1, || format!("{}: {} MiB of fatbins, left to their loaders", path.display(), size >> 20));
    }
    fatbins
}

/// The fatbins of the program alone (not its libraries): no library is pinned, nothing is logged.
fn program_fatbins() -> Vec<LoadedFatbin> {
    fatbins_of(true).0
}

/// The fatbins of the program, and of the loaded libraries unless `program_only` (pinned, see
/// [`loaded_fatbins`]); and the files left out for their size, with their fatbins' bytes.
fn fatbins_of(program_only: bool) -> (Vec<LoadedFatbin>, Vec<(PathBuf, u64)>) {
    let files = |n: usize| loaded_files().into_iter().take(n);
    let n = if program_only { 1 } else { usize::MAX };
    let mut sections: HashMap<PathBuf, FatbinSections> = HashMap::new();
    let mut left = Vec::new();
    for (i, f) in files(n).enumerate() {
        let Some(s) = fatbin_sections(&f.path) else { continue };
        if s.fatbins.1 > MAX_FATBIN_SECTION {
            left.push((f.path, s.fatbins.1));
            continue;
        }
        if i > 0 && !pin(&f.path) {
            continue;
        }
        sections.insert(f.path, s);
    }
    let mut out = Vec::new();
    for f in files(n) {
        let Some(s) = sections.remove(&f.path) else { continue };
        let range = |(addr, size): (u64, u64)| {
            let start = f.bias.checked_add(addr as usize)?;
            let end = start.checked_add(size as usize)?;
            f.segments.iter().any(|&(a, b)| a <= start && end <= b).then_some((start, end))
        };
        let (Some(wrappers), Some(fatbins)) = (range(s.wrappers), range(s.fatbins)) else { continue };
        out.extend(wrapped_fatbins(wrappers, fatbins));
    }
    (out, left)
}

/// Keeps the loaded library `path` loaded for the life of the process: false when it is no
/// longer loaded.
fn pin(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: RTLD_NOLOAD only takes a reference to a library already loaded (no constructor
    // runs); the handle is never closed.
    !unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_null()
}

/// The fatbins the wrappers in `wrappers` (an address range of loaded memory) point to inside
/// `fatbins` (another), each with the bytes to that range's end.
fn wrapped_fatbins(wrappers: (usize, usize), fatbins: (usize, usize)) -> Vec<LoadedFatbin> {
    const W: usize = container::FatbinWrapper::SIZE;
    let mut out = Vec::new();
    let mut at = wrappers.0;
    while at + W <= wrappers.1 {
        // SAFETY: `at..at + W` lies in `wrappers`, loaded readable memory (loaded_fatbins checked
        // it lies in a readable PT_LOAD segment of a loaded file).
        let w = unsafe { std::slice::from_raw_parts(at as *const u8, W) };
        if let Ok(ImageLen::Wrapper { version: 1, data, .. }) = container::image_len(w) {
            let data = data as usize;
            if fatbins.0 <= data && data < fatbins.1 {
                out.push(LoadedFatbin { addr: data, len: fatbins.1 - data });
            }
        }
        at += W;
    }
    out
}

/// A file's fatbin sections as (address, size): cudart's wrappers and the fatbins.
struct FatbinSections {
    wrappers: (u64, u64),
    fatbins: (u64, u64),
}

/// Reads `path`'s section headers for `.nvFatBinSegment` and `.nv_fatbin` ([`section_ranges`]).
fn fatbin_sections(path: &std::path::Path) -> Option<FatbinSections> {
    let [wrappers, fatbins] = section_ranges(path, [b".nvFatBinSegment", b".nv_fatbin"])?;
    Some(FatbinSections { wrappers: wrappers?, fatbins: fatbins? })
}

/// The (address, size) of each named section of the ELF file `path` (`None` for a name it lacks;
/// `None` in all for anything but a little-endian 64-bit ELF file, the only kind CUDA loads on its
/// hosts). Three reads: the file header, the section headers, their names' string table; not the
/// symbol tables, which a general parser (`object::File::parse`) reads whole, megabytes for some
/// libraries, once per loaded file.
fn section_ranges<const N: usize>(path: &std::path::Path, names: [&[u8]; N]) -> Option<[Option<(u64, u64)>; N]> {
    use std::os::unix::fs::FileExt;
    /// Bytes of a section header (`Elf64_Shdr`) and the most of them, or of names, read.
    const SHDR: usize = 64;
    const MAX_TABLE: usize = 16 << 20;
    let file = std::fs::File::open(path).ok()?;
    let read = |offset: u64, len: usize| -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        file.read_exact_at(&mut b, offset).ok()?;
        Some(b)
    };
    let u16_at = |b: &[u8], at: usize| Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
    // Elf64_Ehdr: ELFCLASS64 (2) and ELFDATA2LSB (1) in e_ident; e_shoff at 0x28, e_shentsize,
    // e_shnum and e_shstrndx at 0x3a, 0x3c and 0x3e.
    let head = read(0, 64)?;
    if head[..6] != [0x7f, b'E', b'L', b'F', 2, 1] || u16_at(&head, 0x3a)? as usize != SHDR {
        return None;
    }
    let (shoff, shnum, shstrndx) = (u64_at(&head, 0x28)?, u16_at(&head, 0x3c)? as usize, u16_at(&head, 0x3e)? as usize);
    if shnum == 0 || shstrndx >= shnum {
        return None;
    }
    let headers = read(shoff, shnum * SHDR)?;
    // Elf64_Shdr: sh_name at 0, sh_addr at 16, sh_offset at 24, sh_size at 32.
    let header = |i: usize| headers.get(i * SHDR..(i + 1) * SHDR);
    let strings = header(shstrndx)?;
    let strings_len = usize::try_from(u64_at(strings, 32)?).ok().filter(|&n| n <= MAX_TABLE)?;
    let strings = read(u64_at(strings, 24)?, strings_len)?;
    let mut out = [None; N];
    for i in 0..shnum {
        let h = header(i)?;
        let name_at = u32_at(h, 0)? as usize;
        let Some(name) = strings.get(name_at..).and_then(|s| s.split(|&b| b == 0).next()) else { continue };
        if let Some(k) = names.iter().position(|n| *n == name) {
            out[k].get_or_insert((u64_at(h, 16)?, u64_at(h, 32)?));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use container::{FatbinWrapper, WRAPPER_MAGIC};
    use proptest::prelude::*;
    use std::sync::Arc;

    #[derive(Clone, Debug)]
    enum TableOp {
        /// The set-up thread lists every key (0..4).
        List,
        /// The early thread lists the program's keys (0..2).
        ListEarly,
        /// A thread claims a key and, if it got it, finishes it (with a result or without).
        Prepare(usize, bool),
        /// The set-up thread takes over a result another thread made (and finishes it, loaded
        /// into the driver: +100).
        TakeOver(usize),
        /// A loader takes a key (never one under way: in this one-threaded model it would wait).
        Take(usize),
    }

    proptest! {
        /// Any interleaving of the two threads' lists, claims, results and take-overs, and
        /// loaders' takes: a key is prepared at most once and never after its loader took it, a
        /// result is taken over only while no loader has it, a loader gets a result at most once
        /// and only one a thread made, and a key the loader was told to prepare itself is never
        /// handed out or prepared later.
        #[test]
        fn the_table_gives_each_module_one_preparer(ops in prop::collection::vec(prop_oneof![
            Just(TableOp::List),
            Just(TableOp::ListEarly),
            (0usize..4, any::<bool>()).prop_map(|(k, ok)| TableOp::Prepare(k, ok)),
            (0usize..4).prop_map(TableOp::TakeOver),
            (0usize..4).prop_map(TableOp::Take),
        ], 0..40)) {
            let t = Table::<usize>::new();
            let (mut listed, mut claimed, mut made, mut handed, mut own) = ([false; 4], [false; 4], [false; 4], [false; 4], [false; 4]);
            for op in ops {
                match op {
                    TableOp::List => {
                        t.list(0..4);
                        listed = [true; 4];
                    }
                    TableOp::ListEarly => {
                        t.list(0..2);
                        listed[0] = true;
                        listed[1] = true;
                    }
                    TableOp::Prepare(k, ok) => {
                        let got = t.claim(k);
                        prop_assert!(!(got && (claimed[k] || own[k] || handed[k])), "key {k} claimed twice or after its loader");
                        prop_assert!(!got || listed[k], "key {k} claimed before it was listed");
                        prop_assert!(got || claimed[k] || own[k] || handed[k] || !listed[k], "key {k} listed and free but not claimed");
                        if got {
                            claimed[k] = true;
                            made[k] = ok;
                            t.finish(k, ok.then_some(k));
                        }
                    }
                    TableOp::TakeOver(k) => match t.claim_ready(k) {
                        Some(v) => {
                            prop_assert!(v == k || v == k + 100);
                            prop_assert!(made[k] && !handed[k] && !own[k], "key {k} taken over without a result or from its loader");
                            t.finish(k, Some(k + 100));
                        }
                        None => prop_assert!(!(made[k] && !handed[k] && !own[k]), "key {k}'s result not taken over"),
                    },
                    TableOp::Take(k) => match t.take(k) {
                        Some(v) => {
                            prop_assert!(v == k || v == k + 100);
                            prop_assert!(made[k] && !handed[k] && !own[k], "key {k} handed out without a result or twice");
                            handed[k] = true;
                        }
                        None => {
                            prop_assert!(!(made[k] && !handed[k] && !own[k]), "key {k}'s result withheld from its first loader");
                            own[k] = true;
                        }
                    },
                }
            }
        }
    }

    #[test]
    fn the_set_up_thread_waits_for_the_early_thread_to_take_its_result_over() {
        let t = Arc::new(Table::<u32>::new());
        t.list([1, 2]);
        // The early thread works on key 1; the set-up thread lists everything meanwhile.
        assert!(t.claim(1));
        t.list([1, 2, 3]);
        assert!(!t.claim(1), "one thread claims a key");
        let set_up = blocked(&t, move |t| t.claim_ready(1), "the take-over waits while the early thread works");
        t.finish(1, Some(10));
        assert_eq!(set_up.join().unwrap(), Some(10));
        // Running again until the set-up thread finishes it: a loader waits for that.
        let loader = blocked(&t, move |t| t.take(1), "the loader waits while the result is loaded into the driver");
        t.finish(1, Some(11));
        assert_eq!(loader.join().unwrap(), Some(11));
        // Nothing to take over: a queued key, a taken one, an unknown one.
        assert_eq!(t.claim_ready(2), None);
        assert_eq!(t.claim_ready(1), None);
        assert_eq!(t.claim_ready(7), None);
        // A key a loader took before either thread listed it stays the loader's.
        assert_eq!(t.take(4), None);
        t.list([4]);
        assert!(!t.claim(4));
    }

    #[test]
    fn dropped_early_results_are_never_handed_out() {
        let t = Table::<u32>::new();
        t.list([1, 2, 3]);
        assert!(t.claim(1));
        t.finish(1, Some(10));
        // Under way when the set-up GPU turns out not to be the remembered one.
        assert!(t.claim(2));
        t.clear();
        t.finish(2, Some(20));
        assert_eq!(t.take(1), None);
        assert_eq!(t.take(2), None);
        assert!(!t.claim(3));
        assert_eq!(t.claim_ready(2), None);
    }

    /// Runs `f` on the table from another thread and checks that it is still waiting 50 ms later
    /// (`what` says why it should be); the caller then releases it and joins.
    fn blocked<R: Send + 'static>(t: &Arc<Table<u32>>, f: impl FnOnce(&Table<u32>) -> R + Send + 'static, what: &str) -> std::thread::JoinHandle<R> {
        let t = Arc::clone(t);
        let h = std::thread::spawn(move || f(&t));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!h.is_finished(), "{what}");
        h
    }

    fn tmp_cache(name: &str) -> Cache {
        let d = std::env::temp_dir().join(format!("gasan-prefetch-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Cache::new(d, 1 << 20)
    }

    #[test]
    fn a_device_record_round_trips_and_anything_else_is_no_record() {
        let r = DeviceRecord { cc: 90, aligned_pool: true, driver: "13000|/usr/lib/libcuda.so.580|123|1.5|42".into() };
        let text = r.to_text();
        assert_eq!(DeviceRecord::parse(&text), Some(r.clone()));
        // Cut short anywhere (a writer that died before its rename never leaves one, but a disk
        // may): no record.
        for n in 0..text.len() {
            assert_eq!(DeviceRecord::parse(&text[..n]), None, "cut at {n}: {:?}", &text[..n]);
        }
        let bad = [
            text.replace("gasan-last-device 1", "gasan-last-device 2"),
            text.replace("cc 90", "cc 0"),
            text.replace("cc 90", "cc nine"),
            text.replace("cc 90", "cc  90"),
            text.replace("aligned_pool 1", "aligned_pool 2"),
            text.replace("driver 13000|/usr/lib/libcuda.so.580|123|1.5|42", "driver "),
            text.replace("end\n", "end\nmore\n"),
            text.replace("end\n", "\n"),
            text.replace("cc 90\naligned_pool 1", "aligned_pool 1\ncc 90"),
        ];
        for b in &bad {
            assert_eq!(DeviceRecord::parse(b), None, "{b:?}");
        }
        let c = tmp_cache("record");
        assert_eq!(DeviceRecord::read(&c), None, "no cache directory: no record");
        r.write(&c).unwrap();
        assert_eq!(DeviceRecord::read(&c), Some(r.clone()));
        let other = DeviceRecord { cc: 86, aligned_pool: false, ..r.clone() };
        other.write(&c).unwrap();
        assert_eq!(DeviceRecord::read(&c), Some(other), "the last set-up's device is remembered");
        let name = DeviceRecord::entry_name();
        assert_eq!(crate::cache::entry_kind(&name), Some("last-device"), "evicted and cleared with the cache's other entries");
        std::fs::write(c.dir.join(&name), &text.as_bytes()[..text.len() - 3]).unwrap();
        assert_eq!(DeviceRecord::read(&c), None, "truncated");
        std::fs::write(c.dir.join(&name), [0xff, 0xfe, b'\n']).unwrap();
        assert_eq!(DeviceRecord::read(&c), None, "not text");
        std::fs::remove_dir_all(&c.dir).unwrap();
    }

    #[test]
    fn early_results_stand_only_for_the_lookup_they_were_made_with() {
        // Any executable stands for ptxas: only its identity goes into the lookup.
        let opts = Options { ptxas: Some(PathBuf::from("/bin/sh")), ..Options::default() };
        let c = tmp_cache("verdict");
        let lookup = |opts: &Options, cc, aligned, driver: &str| CacheLookup::speculative(&opts.into(), c.clone(), cc, aligned, driver.into(), |_| None).unwrap();
        let this = lookup(&opts, 90, true, "drv");
        assert_eq!(early_verdict(Some(&lookup(&opts, 90, true, "drv")), &this), Ok(()));
        assert_eq!(early_verdict(None, &this), Err("it had not started yet".into()));
        assert_eq!(early_verdict(Some(&lookup(&opts, 86, true, "drv")), &this), Err("made for sm_86, this GPU is sm_90".into()));
        assert_eq!(early_verdict(Some(&lookup(&opts, 90, false, "drv")), &this), Err("made for another pool layout".into()));
        assert_eq!(early_verdict(Some(&lookup(&opts, 90, true, "drv2")), &this), Err("made for another driver".into()));
        let recover = Options { halt_on_error: false, ..opts.clone() };
        assert_eq!(early_verdict(Some(&lookup(&recover, 90, true, "drv")), &this), Err("made with other options or another ptxas".into()));
        // The record the set-up writes gives the next process's early thread this very lookup.
        let r = DeviceRecord::of(&this);
        assert_eq!(early_verdict(Some(&lookup(&opts, r.cc, r.aligned_pool, &r.driver)), &this), Ok(()));
        // Options that rule cached cubins out make no lookup, so nothing early.
        assert!(CacheLookup::speculative(&(&Options { sass: false, ..opts.clone() }).into(), c.clone(), 90, true, "drv".into(), |_| None).is_none());
        assert!(CacheLookup::speculative(&(&Options { instrument: false, ..opts.clone() }).into(), c.clone(), 90, true, "drv".into(), |_| None).is_none());
    }

    #[test]
    fn an_early_thread_drops_what_it_finishes_after_being_stopped() {
        let opts = Options { ptxas: Some(PathBuf::from("/bin/sh")), ..Options::default() };
        let c = tmp_cache("stopped");
        let e = Early {
            pid: std::process::id(),
            list: Vec::new,
            opts: (&opts).into(),
            cache: c.clone(),
            record: DeviceRecord { cc: 90, aligned_pool: false, driver: "drv".into() },
            ptxas_env: Vec::new(),
            lookup: OnceLock::new(),
            fatbins: OnceLock::new(),
            table: Table::new(),
            stopped: AtomicBool::new(false),
            prepared: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            took_us: AtomicU64::new(u64::MAX),
        };
        e.table.list([1, 2]);
        assert!(e.table.claim(1));
        e.drop_results();
        assert!(e.stopped.load(Ordering::SeqCst));
        // Module 1 was under way: its result goes; module 2 is nobody's now.
        e.table.finish(1, None);
        assert!(!e.table.claim(2));
        assert!(e.table.take(1).is_none() && e.table.take(2).is_none());
    }

    #[test]
    fn each_key_is_prepared_once_and_a_loader_waits_only_for_one_under_way() {
        let t = Arc::new(Table::<u32>::new());
        // A loader before the thread listed its keys: the key is the loader's.
        assert_eq!(t.take(9), None);
        t.list([1, 2, 3, 4, 9]);
        assert!(!t.claim(9));
        // A loader first: the key is its own, and the thread will not start it.
        assert_eq!(t.take(1), None);
        assert!(!t.claim(1));
        // The thread first, finishing with nothing: the loader prepares it.
        assert!(t.claim(2));
        t.finish(2, None);
        assert_eq!(t.take(2), None);
        // Under way when the loader comes: it waits for the result.
        assert!(t.claim(3));
        let loader = blocked(&t, move |t| t.take(3), "the loader waits while the key is running");
        t.finish(3, Some(33));
        assert_eq!(loader.join().unwrap(), Some(33));
        // Taken once: a second load of the same module prepares it itself.
        assert_eq!(t.take(3), None);
        // Keys not listed are nobody's once the list is made.
        assert!(t.claim(4));
        t.finish(4, Some(44));
        assert_eq!(t.take(5), None);
        assert!(!t.claim(5));
        t.clear();
        assert_eq!(t.take(4), None);
    }

    #[test]
    fn a_teardown_reaches_only_results_not_taken_yet() {
        let t = Table::<u32>::new();
        t.list([1, 2, 3]);
        for k in [1, 2] {
            assert!(t.claim(k));
            t.finish(k, Some(10 * k as u32));
        }
        assert_eq!(t.take(1), Some(10));
        // Key 2 is ready, key 3 queued, key 1 taken: only key 2's result changes.
        t.each_ready(|r| *r += 1);
        assert_eq!(t.take(2), Some(21));
        assert_eq!(t.take(3), None);
        assert_eq!(t.take(1), None);
    }

    #[test]
    fn wrappers_name_only_fatbins_inside_the_section() {
        let fatbins = vec![0u8; 256];
        let (lo, hi) = (fatbins.as_ptr() as usize, fatbins.as_ptr() as usize + fatbins.len());
        let wrap = |version: u32, data: usize| FatbinWrapper { magic: WRAPPER_MAGIC, version, data: data as u64, filename_or_fatbins: 0 }.to_bytes().to_vec();
        let mut seg = Vec::new();
        seg.extend(wrap(1, lo));
        seg.extend(wrap(1, lo + 64));
        seg.extend(wrap(1, hi)); // one past the section: not a fatbin of it
        seg.extend(wrap(2, lo + 8)); // prelinked RDC: not loaded as one fatbin
        seg.extend(vec![0u8; FatbinWrapper::SIZE]); // no magic
        seg.extend([0u8; 8]); // a partial wrapper at the end
        let ws = (seg.as_ptr() as usize, seg.as_ptr() as usize + seg.len());
        let got = wrapped_fatbins(ws, (lo, hi));
        assert_eq!(got, vec![LoadedFatbin { addr: lo, len: 256 }, LoadedFatbin { addr: lo + 64, len: 192 }]);
    }

    #[test]
    fn section_headers_are_read_as_a_general_elf_parser_reads_them() {
        use object::{Object, ObjectSection};
        let data = std::fs::read("/proc/self/exe").unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let want = |name: &str| elf.section_by_name(name).map(|s| (s.address(), s.size()));
        let got = section_ranges(std::path::Path::new("/proc/self/exe"), [b".text", b".data", b".nv_fatbin", b".rodata"]).unwrap();
        assert_eq!(got, [want(".text"), want(".data"), None, want(".rodata")]);
        assert!(got[0].is_some_and(|(_, size)| size > 0));
        // Not an ELF file, or none at all.
        let d = std::env::temp_dir().join(format!("gasan-prefetch-unit-elf-{}", std::process::id()));
        std::fs::write(&d, b"#!/bin/sh\nexit 0\n").unwrap();
        assert_eq!(section_ranges(&d, [b".text"]), None);
        std::fs::write(&d, &data[..40]).unwrap();
        assert_eq!(section_ranges(&d, [b".text"]), None, "cut short");
        std::fs::remove_file(&d).unwrap();
        assert_eq!(section_ranges(&d, [b".text"]), None);
    }

    #[test]
    fn the_test_binary_has_no_fatbins_and_its_files_are_found() {
        let files = loaded_files();
        assert_eq!(files[0].path, PathBuf::from("/proc/self/exe"));
        assert!(files.len() > 1, "libc at least");
        assert!(files.iter().all(|f| !f.segments.is_empty() || f.path.to_string_lossy().contains("vdso")));
        assert!(loaded_fatbins().is_empty());
    }
}
