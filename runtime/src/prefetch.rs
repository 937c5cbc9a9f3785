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

use crate::modules::{self, Prepared};
use crate::state::{log, state};
use gasan_instrument::container::{self, ImageLen};
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock};

/// Files whose `.nv_fatbin` is larger than this are left to their loaders (libraries of
/// thousands of modules, most of which a program never loads: cuBLAS, PyTorch).
const MAX_FATBIN_SECTION: u64 = 64 << 20;

/// Cubin bytes the thread may hold for modules not loaded yet; past it, the rest are left to their
/// loaders (a program that loads few of many modules does not keep all their cubins in memory).
const MAX_PREPARED_BYTES: usize = 256 << 20;

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
    /// Not started; a loader that gets here first removes it and prepares the module itself.
    Queued,
    /// The thread is preparing it; a loader waits for [`Slot::Ready`] or the slot's removal.
    Running,
    Ready(Box<T>),
    /// A loader took it before the thread listed the files: the thread leaves it alone.
    Taken,
}

/// The slots, and whether the thread has listed its keys yet.
struct Slots<T> {
    listed: bool,
    map: HashMap<usize, Slot<T>>,
}

/// Preparations by fatbin address, shared by the thread that makes them and the loaders that
/// take them. Each key is prepared at most once, by the thread or by its loader, never both, and
/// no loader waits except for a preparation under way.
struct Table<T> {
    slots: Mutex<Slots<T>>,
    changed: Condvar,
}

impl<T> Table<T> {
    fn new() -> Self {
        Table { slots: Mutex::new(Slots { listed: false, map: HashMap::new() }), changed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots<T>> {
        // A panic while the lock was held leaves the slots consistent (each update is one call).
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The thread's keys, in the order it will work (a key a loader took already stays taken).
    fn list(&self, keys: impl IntoIterator<Item = usize>) {
        let mut s = self.lock();
        for k in keys {
            s.map.entry(k).or_insert(Slot::Queued);
        }
        s.listed = true;
    }

    /// The thread claims `key`: false when a loader took it first (or it is unknown).
    fn claim(&self, key: usize) -> bool {
        match self.lock().map.get_mut(&key) {
            Some(s @ Slot::Queued) => {
                *s = Slot::Running;
                true
            }
            _ => false,
        }
    }

    /// The thread's result for a key it claimed (`None`: the loader prepares it).
    fn finish(&self, key: usize, result: Option<T>) {
        let mut s = self.lock();
        match result {
            Some(r) => s.map.insert(key, Slot::Ready(Box::new(r))),
            None => s.map.remove(&key),
        };
        self.changed.notify_all();
    }

    /// A loader's take of `key`: the thread's result, waiting while it works on it; `None` when
    /// there is none, and the loader then prepares the module (the thread will not start it).
    fn take(&self, key: usize) -> Option<T> {
        let mut s = self.lock();
        loop {
            match s.map.remove(&key) {
                None if !s.listed => {
                    s.map.insert(key, Slot::Taken);
                    return None;
                }
                // A taken key stays taken: the list may still come and must not queue it.
                Some(Slot::Taken) => {
                    s.map.insert(key, Slot::Taken);
                    return None;
                }
                None | Some(Slot::Queued) => return None,
                Some(Slot::Ready(r)) => return Some(*r),
                Some(Slot::Running) => {
                    s.map.insert(key, Slot::Running);
                    s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    /// Changes every result not taken yet.
    fn each_ready(&self, mut f: impl FnMut(&mut T)) {
        for slot in self.lock().map.values_mut() {
            if let Slot::Ready(r) = slot {
                f(r);
            }
        }
    }

    /// Forgets every key and lists none (nothing will prepare them).
    fn clear(&self) {
        let mut s = self.lock();
        s.map.clear();
        s.listed = true;
        self.changed.notify_all();
    }
}

struct Prefetch {
    /// The process that started the thread (a forked child has no thread to wait for).
    pid: u32,
    /// Compute capability the modules are prepared for.
    cc: u32,
    /// The context the GPU was set up in (`CUcontext`), when prepared modules are also loaded
    /// into it ahead of their loaders ([`modules::preload`]); 0: not.
    preload_ctx: usize,
    table: Table<Prepared>,
}

static PREFETCH: OnceLock<Prefetch> = OnceLock::new();

/// Starts preparing the loaded files' modules for a GPU of compute capability `cc` (once per
/// process; nothing when the options rule it out). The files are listed on the thread too: the
/// caller (the program's first CUDA call that needs the GPU) pays only for starting it.
pub fn start(cc: u32) {
    let o = &state().opts;
    if !(o.prefetch && o.instrument && o.sass) {
        return;
    }
    let preload_ctx = if o.preload && lazy_loading() { current_context() } else { 0 };
    if PREFETCH.set(Prefetch { pid: std::process::id(), cc, preload_ctx, table: Table::new() }).is_err() {
        return;
    }
    if let Err(e) = std::thread::Builder::new().name("gasan-prefetch".into()).spawn(run) {
        log(1, || format!("module prefetch not started: {e}"));
        if let Some(p) = PREFETCH.get() {
            p.table.clear();
        }
    }
}

/// The calling thread's current context (`CUcontext`; 0 when none).
fn current_context() -> usize {
    let mut ctx: cudarc::driver::sys::CUcontext = std::ptr::null_mut();
    match crate::driver::api::cuCtxGetCurrent(&mut ctx) {
        0 => ctx as usize,
        _ => 0,
    }
}

/// Does the driver load modules lazily (`CUDA_MODULE_LOADING`, lazy by default)? Under eager
/// loading cudart loads every module when the context is set up, so there is nothing to load ahead.
fn lazy_loading() -> bool {
    let mut mode = cudarc::driver::sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
    crate::driver::api::cuModuleGetLoadingMode(&mut mode) == 0 && mode == cudarc::driver::sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING
}

fn run() {
    let Some(p) = PREFETCH.get() else { return };
    let t = std::time::Instant::now();
    // The modules load into the context the GPU was set up in, as cudart's loads will.
    let preload = p.preload_ctx != 0 && crate::driver::api::cuCtxSetCurrent(p.preload_ctx as cudarc::driver::sys::CUcontext) == 0;
    let (mut preloaded, mut preloaded_bytes) = (0usize, 0usize);
    let fatbins = std::panic::catch_unwind(loaded_fatbins).unwrap_or_default();
    p.table.list(fatbins.iter().map(|f| f.addr));
    let (mut ready, mut bytes) = (0usize, 0usize);
    for f in &fatbins {
        if bytes > MAX_PREPARED_BYTES {
            break;
        }
        if !p.table.claim(f.addr) {
            continue;
        }
        // A panic must not leave the slot running (its loader would wait for ever).
        let prepared = std::panic::catch_unwind(|| {
            // SAFETY: loaded_fatbins found `f` inside an allocated section of a loaded file:
            // `f.len` readable bytes for the life of the process.
            unsafe { modules::prepare_cached(f.addr as *const c_void, f.len, p.cc) }
        })
        .ok()
        .flatten();
        let prepared = prepared.map(|mut prep| {
            if preload && preloaded_bytes + prep.bytes() <= MAX_PRELOADED_BYTES && modules::preload(&mut prep) {
                preloaded += 1;
                preloaded_bytes += prep.bytes();
            }
            prep
        });
        ready += prepared.is_some() as usize;
        bytes += prepared.as_ref().map_or(0, Prepared::bytes);
        p.table.finish(f.addr, prepared);
    }
    log(1, || {
        format!(
            "prepared {ready} of {} modules in the program's files from the cache ahead of their loads, {preloaded} loaded into the driver, in {:.2} ms",
            fatbins.len(),
            t.elapsed().as_secs_f64() * 1e3
        )
    });
}

/// A context went away (`Some`: that one was destroyed; `None`: a primary context was reset or
/// released for good): the modules loaded ahead into it went with it, so their loaders load them
/// again (the cubins and module ids stay).
pub fn on_context_gone(ctx: Option<usize>) {
    let Some(p) = PREFETCH.get() else { return };
    if p.preload_ctx == 0 || ctx.is_some_and(|c| c != p.preload_ctx) {
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
/// # Safety
/// `image` is a module image as the driver's loaders take it.
pub unsafe fn take(image: *const c_void) -> Option<Prepared> {
    let p = PREFETCH.get()?;
    if p.pid != std::process::id() {
        return None;
    }
    // SAFETY: `image` is a module image (this function's contract).
    let key = unsafe { modules::image_fatbin_address(image) }?;
    let t = std::time::Instant::now();
    let taken = p.table.take(key);
    // What the loader waited for the thread (it waits only for a preparation under way).
    state().counters.prefetch_wait_us.fetch_add(t.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
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
    let mut sections: HashMap<PathBuf, FatbinSections> = HashMap::new();
    for (i, f) in loaded_files().into_iter().enumerate() {
        let Some(s) = fatbin_sections(&f.path) else { continue };
        if s.fatbins.1 > MAX_FATBIN_SECTION {
            log(1, || format!("{}: {} MiB of fatbins, left to their loaders", f.path.display(), s.fatbins.1 >> 20));
            continue;
        }
        if i > 0 && !pin(&f.path) {
            continue;
        }
        sections.insert(f.path, s);
    }
    let mut out = Vec::new();
    for f in loaded_files() {
        let Some(s) = sections.remove(&f.path) else { continue };
        let range = |(addr, size): (u64, u64)| {
            let start = f.bias.checked_add(addr as usize)?;
            let end = start.checked_add(size as usize)?;
            f.segments.iter().any(|&(a, b)| a <= start && end <= b).then_some((start, end))
        };
        let (Some(wrappers), Some(fatbins)) = (range(s.wrappers), range(s.fatbins)) else { continue };
        out.extend(wrapped_fatbins(wrappers, fatbins));
    }
    out
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

/// Reads `path`'s section headers (not its contents) for `.nvFatBinSegment` and `.nv_fatbin`.
fn fatbin_sections(path: &std::path::Path) -> Option<FatbinSections> {
    use object::{Object, ObjectSection};
    let file = std::fs::File::open(path).ok()?;
    let data = object::ReadCache::new(file);
    let elf = object::File::parse(&data).ok()?;
    let get = |name: &str| elf.section_by_name(name).map(|s| (s.address(), s.size()));
    Some(FatbinSections { wrappers: get(".nvFatBinSegment")?, fatbins: get(".nv_fatbin")? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use container::{FatbinWrapper, WRAPPER_MAGIC};
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum TableOp {
        List,
        /// The thread claims a key and, if it got it, finishes it (with a result or without).
        Prepare(usize, bool),
        /// A loader takes a key (never one under way: in this one-threaded model it would wait).
        Take(usize),
    }

    proptest! {
        /// Any interleaving of listing, the thread's claims and results, and loaders' takes: a
        /// key is prepared by the thread at most once and never after its loader took it, a
        /// loader gets the thread's result at most once and only one the thread made, and a key
        /// the loader was told to prepare itself is never handed out later.
        #[test]
        fn the_table_gives_each_module_one_preparer(ops in prop::collection::vec(prop_oneof![
            Just(TableOp::List),
            (0usize..4, any::<bool>()).prop_map(|(k, ok)| TableOp::Prepare(k, ok)),
            (0usize..4).prop_map(TableOp::Take),
        ], 0..40)) {
            let t = Table::<usize>::new();
            let (mut listed, mut claimed, mut made, mut handed, mut own) = (false, [false; 4], [false; 4], [false; 4], [false; 4]);
            for op in ops {
                match op {
                    TableOp::List => {
                        if !listed {
                            t.list(0..4);
                            listed = true;
                        }
                    }
                    TableOp::Prepare(k, ok) => {
                        let got = t.claim(k);
                        prop_assert!(!(got && (claimed[k] || own[k] || handed[k])), "key {k} claimed twice or after its loader");
                        prop_assert!(!got || listed, "claimed before the list");
                        if got {
                            claimed[k] = true;
                            made[k] = ok;
                            t.finish(k, ok.then_some(k));
                        }
                    }
                    TableOp::Take(k) => match t.take(k) {
                        Some(v) => {
                            prop_assert_eq!(v, k);
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
    fn each_key_is_prepared_once_and_a_loader_waits_only_for_one_under_way() {
        use std::sync::Arc;
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
        let loader = {
            let t = Arc::clone(&t);
            std::thread::spawn(move || t.take(3))
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!loader.is_finished(), "the loader waits while the key is running");
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
    fn the_test_binary_has_no_fatbins_and_its_files_are_found() {
        let files = loaded_files();
        assert_eq!(files[0].path, PathBuf::from("/proc/self/exe"));
        assert!(files.len() > 1, "libc at least");
        assert!(files.iter().all(|f| !f.segments.is_empty() || f.path.to_string_lossy().contains("vdso")));
        assert!(loaded_fatbins().is_empty());
    }
}
