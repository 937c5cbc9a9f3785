//! Process-wide runtime state, created lazily at the first intercepted call. The device part (pool,
//! allocator, ring) is created at the first call that has a current context.

use crate::allocator::{Allocator, HostStack};
use crate::driver::{CuResult, CUDA_SUCCESS};
use crate::options::Options;
use crate::real_call;
use crate::report::{Report, Reporter};
use crate::ring::Ring;
use gasan_instrument::abi::ControlBlock;
use gasan_instrument::ptx::SiteTable;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// A loaded checked module whose control block still has to be written.
#[derive(Clone, Copy, Debug)]
pub enum LoadedHandle {
    Module(usize),
    Library(usize),
}

/// A control block waiting to be written.
struct Pending {
    handle: LoadedHandle,
    module_id: u64,
    symbol: String,
    /// The GPU of the context a module was loaded in; `None` for libraries (any GPU).
    device: Option<i32>,
}

pub struct DeviceRuntime {
    pub alloc: Allocator,
    pub ring: Mutex<Ring>,
    pub device: i32,
    /// More than one GPU is visible: allocations must check which GPU is current (read once, at
    /// pool creation, so single-GPU programs pay nothing per allocation).
    pub multi_gpu: bool,
    /// This process's fatal GPU faults (nvidia-uvm tools queue), when it could be attached.
    pub faults: Mutex<Option<crate::faults::FaultQueue>>,
    /// The checked device heap, reserved when the first module calling in-kernel `malloc`/`free`
    /// gets its control block (`Err`: reserving failed once; such modules use the driver's heap).
    pub device_heap: Mutex<Option<Result<crate::device_heap::HeapRegion, ()>>>,
    /// Modules whose heap symbol holds the heap's address (rewritten if the heap is replaced).
    heap_modules: Mutex<Vec<(LoadedHandle, u64, String)>>,
}

#[derive(Default)]
pub struct Counters {
    pub modules_instrumented: AtomicU64,
    pub modules_sass_only: AtomicU64,
    pub modules_fallback: AtomicU64,
    pub cache_hits: AtomicU64,
    pub link_inputs_checked: AtomicU64,
    /// Time spent getting checked modules loaded (JIT or cache, then the real load), µs.
    pub module_load_us: AtomicU64,
    /// Checked modules loaded as cubins from the cache.
    pub cubins_cached: AtomicU64,
    /// Checked modules compiled to cubins with ptxas (and cached).
    pub cubins_compiled: AtomicU64,
    /// Time spent in ptxas, µs.
    pub cubin_compile_us: AtomicU64,
    /// Cubins the driver refused (the checked PTX was loaded instead).
    pub cubins_refused: AtomicU64,
    /// Checked modules handed to the driver's JIT as PTX (sass=0 aside): no ptxas, failed compile...
    pub sass_ptx_path: AtomicU64,
}

pub struct State {
    pub opts: Options,
    pub reporter: Reporter,
    device: OnceLock<Option<DeviceRuntime>>,
    device_init: Mutex<()>,
    /// Site tables by module id - 1.
    pub sites: Mutex<Vec<SiteTable>>,
    /// Control blocks not written yet (loaded before the pool, or a library not yet used on the
    /// pool's GPU).
    pending: Mutex<Vec<Pending>>,
    pub has_pending: AtomicBool,
    pub counters: Counters,
    /// Managed and host memory (not in the pool), tracked for frees and descriptions.
    pub foreign: crate::side_table::SideTable,
    ring_stats: RingStats,
}

/// Device errors seen in the ring beyond those reported.
#[derive(Default)]
struct RingStats {
    /// (module id, site id) of every site reported so far.
    sites_reported: Mutex<std::collections::HashSet<(u32, u32)>>,
    /// Records read but not reported (halt mode after the first; recover mode at a known site).
    unreported: AtomicU64,
    /// Errors whose records were overwritten or never completed.
    lost: AtomicU64,
}

static STATE: OnceLock<State> = OnceLock::new();

pub fn state() -> &'static State {
    STATE.get_or_init(|| {
        let opts = Options::from_env().unwrap_or_else(|e| crate::options::exit_refused(&e));
        extern "C" fn at_exit() {
            if let Some(s) = STATE.get() {
                s.at_exit();
            }
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(at_exit) };
        State {
            reporter: Reporter::new(&opts),
            opts,
            device: OnceLock::new(),
            device_init: Mutex::new(()),
            sites: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            counters: Counters::default(),
            foreign: Default::default(),
            ring_stats: RingStats::default(),
        }
    })
}

pub fn log(level: u32, msg: impl FnOnce() -> String) {
    if state().opts.verbosity >= level {
        eprintln!("==gasan== {}", msg());
    }
}

/// Device of the current context, if there is one.
pub fn current_device() -> Option<i32> {
    let mut d = -1i32;
    let r = real_call!("cuCtxGetDevice"(*mut i32)(&mut d));
    (r == CUDA_SUCCESS && d >= 0).then_some(d)
}

/// Compute capability (e.g. 90) of `device`.
pub fn compute_capability(device: i32) -> Option<u32> {
    let (mut maj, mut min) = (0i32, 0i32);
    let a = real_call!("cuDeviceGetAttribute"(*mut i32, i32, i32)(&mut maj, 75, device));
    let b = real_call!("cuDeviceGetAttribute"(*mut i32, i32, i32)(&mut min, 76, device));
    (a == CUDA_SUCCESS && b == CUDA_SUCCESS).then_some((maj * 10 + min) as u32)
}

impl State {
    /// The device runtime, created on first use (needs a current context).
    pub fn device(&self) -> Option<&DeviceRuntime> {
        if let Some(d) = self.device.get() {
            return d.as_ref();
        }
        let _g = self.device_init.lock().unwrap();
        if let Some(d) = self.device.get() {
            return d.as_ref();
        }
        let dev = current_device()?;
        let rt = match self.create_device_runtime(dev) {
            Ok(rt) => Some(rt),
            Err(e) => {
                eprintln!("==gasan== WARNING: cannot set up the device pool ({e}); running without checks");
                None
            }
        };
        let _ = self.device.set(rt);
        drop(_g);
        self.flush_pending();
        self.device.get().and_then(Option::as_ref)
    }

    fn create_device_runtime(&self, dev: i32) -> Result<DeviceRuntime, String> {
        let t = std::time::Instant::now();
        let vmm = gasan_uvm::VmmBackend::new(dev, &crate::driver::resolver()).map_err(|e| e.to_string())?;
        // The patched nvidia-uvm (kmod-patch/) when it answers, else the CUDA VMM alone.
        let backend: Box<dyn gasan_uvm::Backend> = match gasan_uvm::KmodBackend::probe(vmm) {
            Ok(k) => {
                log(1, || format!("backend: gasan nvidia-uvm (guard pages of {} KiB)", gasan_uvm::Backend::guard_granularity(&k) >> 10));
                Box::new(k)
            }
            Err((vmm, why)) => {
                log(1, || format!("backend: CUDA VMM ({why})"));
                Box::new(vmm)
            }
        };
        let cfg = gasan_uvm::PoolConfig {
            size: self.opts.pool_size.unwrap_or(0),
            shift: self.opts.shadow_scale.shift(),
            // No larger than the aligned-pool checks allow (1 TiB at scale 8, 512 GiB at 7); the
            // default hints are aligned for both.
            max_size: self.opts.shadow_scale.aligned_pool_alignment(),
            // Windows split the pool, so the aligned-pool check covers every tag unchanged.
            tags: self.opts.tags.max(1),
            ..Default::default()
        };
        let pool = gasan_uvm::Pool::new(backend, &cfg).map_err(|e| e.to_string())?;
        log(1, || {
            format!("pool on device {dev}: {:#x}+{} GiB, shadow {:#x}, scale {}, set up in {:.1} ms", pool.base(), pool.size() >> 30, pool.shadow_base(), pool.shift(), t.elapsed().as_secs_f64() * 1e3)
        });
        let ring = Ring::new().map_err(|e| format!("error ring: CUDA error {e}"))?;
        let faults = match crate::faults::FaultQueue::attach() {
            Ok(q) => Some(q),
            Err(e) => {
                log(1, || format!("GPU fault addresses unavailable: {e}"));
                None
            }
        };
        let mut n = 0i32;
        let multi_gpu = real_call!("cuDeviceGetCount"(*mut i32)(&mut n)) != CUDA_SUCCESS || n > 1;
        log(1, || format!("device runtime ready in {:.1} ms (pool, error ring, fault queue)", t.elapsed().as_secs_f64() * 1e3));
        Ok(DeviceRuntime {
            alloc: Allocator::new(pool, &self.opts),
            ring: Mutex::new(ring),
            device: dev,
            multi_gpu,
            faults: Mutex::new(faults),
            device_heap: Mutex::new(None),
            heap_modules: Mutex::new(Vec::new()),
        })
    }

    /// Registers a checked module's sites; returns its module id.
    pub fn register_sites(&self, sites: SiteTable) -> u64 {
        let mut v = self.sites.lock().unwrap();
        v.push(sites);
        v.len() as u64
    }

    /// Writes the module's control block now if the pool exists, else remembers it.
    pub fn set_control_block(&self, h: LoadedHandle, module_id: u64) {
        self.set_control_block_named(h, module_id, gasan_instrument::abi::CONTROL_BLOCK_SYMBOL);
    }

    /// As [`State::set_control_block`] for a control block under another name (inputs of a
    /// `cuLink*` link each keep their own, see link.rs).
    ///
    /// Only the pool's GPU gets control blocks: a module loaded in another GPU's context is never
    /// written (its checks stay off: a zero pool), and a library (context-independent, one copy
    /// per GPU) is written when it is used on the pool's GPU, possibly after launches elsewhere.
    pub fn set_control_block_named(&self, h: LoadedHandle, module_id: u64, symbol: &str) {
        let loaded_on = current_device();
        let entry = Pending {
            handle: h,
            module_id,
            symbol: symbol.to_string(),
            device: match h {
                LoadedHandle::Module(_) => loaded_on,
                LoadedHandle::Library(_) => None,
            },
        };
        if self.device.get().is_some() || loaded_on.is_some() {
            if let Some(d) = self.device() {
                if loaded_on == Some(d.device) {
                    write_control_block(d, &self.opts, h, module_id, symbol);
                    return;
                }
                if matches!(h, LoadedHandle::Module(_)) && loaded_on.is_some() {
                    return; // another GPU's module: never checked
                }
            }
        }
        self.pending.lock().unwrap().push(entry);
        self.has_pending.store(true, Ordering::Release);
    }

    /// Writes the control blocks still pending that belong on the pool's GPU, when that GPU is
    /// current (called before launches and when the pool is created).
    pub fn flush_pending(&self) {
        let Some(d) = self.device.get().and_then(Option::as_ref) else { return };
        if current_device() != Some(d.device) {
            return;
        }
        let list: Vec<_> = std::mem::take(&mut *self.pending.lock().unwrap());
        self.has_pending.store(false, Ordering::Release);
        for p in list {
            match p.device {
                Some(dev) if dev != d.device => {} // another GPU's module
                _ => write_control_block(d, &self.opts, p.handle, p.module_id, &p.symbol),
            }
        }
    }

    /// Reports what the error ring holds. Returns the number of reports. In halt mode only the
    /// first record is reported; in recover mode each site is reported once (ASan's
    /// `suppress_equal_pcs`). Everything else is counted for [`State::print_error_summary`].
    pub fn drain_ring(&self) -> usize {
        let Some(d) = self.device.get().and_then(Option::as_ref) else { return 0 };
        let drained = d.ring.lock().unwrap().drain();
        self.ring_stats.lost.fetch_add(drained.lost, Ordering::Relaxed);
        let mut n = 0;
        for rec in drained.records {
            let first_at_site = self.ring_stats.sites_reported.lock().unwrap().insert((rec.module_id, rec.site_id));
            if (self.opts.halt_on_error && n > 0) || !first_at_site {
                self.ring_stats.unreported.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let desc = d.alloc.describe(rec.addr);
            let report = crate::report::device_report(rec, &self.sites.lock().unwrap(), desc, d.device);
            if self.reporter.report(&report) {
                n += 1;
            }
        }
        n
    }

    /// One line counting the device errors that got no report of their own (once per process).
    pub fn print_error_summary(&self) {
        static PRINTED: AtomicBool = AtomicBool::new(false);
        let (more, lost) = (self.ring_stats.unreported.load(Ordering::Relaxed), self.ring_stats.lost.load(Ordering::Relaxed));
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
            let fault = self.device.get().and_then(Option::as_ref).and_then(|d| {
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

    fn at_exit(&self) {
        self.drain_ring();
        self.print_error_summary();
        if self.opts.detect_leaks {
            if let Some(d) = self.device.get().and_then(Option::as_ref) {
                let leaks = d.alloc.live_allocations();
                if !leaks.is_empty() {
                    self.reporter.report(&Report::Leaks(leaks));
                }
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
            eprintln!(
                "==gasan== cubins: {} from cache, {} compiled ({:.1} ms in ptxas), {} refused by the driver; {} modules on the driver's PTX JIT{}",
                c.cubins_cached.load(Ordering::Relaxed),
                c.cubins_compiled.load(Ordering::Relaxed),
                c.cubin_compile_us.load(Ordering::Relaxed) as f64 / 1e3,
                c.cubins_refused.load(Ordering::Relaxed),
                c.sass_ptx_path.load(Ordering::Relaxed),
                if self.opts.sass { "" } else { " (sass=0)" }
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

// The pool writes extent entries in the layout checked PTX reads.
const _: () = assert!(gasan_uvm::plan::EXTENT_ENTRY_SIZE as usize == gasan_instrument::abi::EXTENT_ENTRY_SIZE);

fn write_control_block(d: &DeviceRuntime, opts: &Options, h: LoadedHandle, module_id: u64, symbol: &str) {
    let (pool_base, pool_size, shadow_base) = d.alloc.control_fields();
    let (extent_table, extent_shift) = d.alloc.extent_fields();
    let ring = d.ring.lock().unwrap().device_ptr;
    let ctl = ControlBlock {
        pool_base,
        pool_size,
        shadow_base,
        ring,
        flags: if opts.halt_on_error { 0 } else { gasan_instrument::abi::FLAG_RECOVER },
        module_id,
        extent_table,
        extent_shift: extent_shift.into(),
    };
    let Ok(name) = std::ffi::CString::new(symbol) else { return };
    let mut dptr = 0u64;
    let mut bytes = 0usize;
    let r = match h {
        LoadedHandle::Module(m) => real_call!("cuModuleGetGlobal_v2"(*mut u64, *mut usize, usize, *const i8)(&mut dptr, &mut bytes, m, name.as_ptr())),
        LoadedHandle::Library(l) => real_call!("cuLibraryGetGlobal"(*mut u64, *mut usize, usize, *const i8)(&mut dptr, &mut bytes, l, name.as_ptr())),
    };
    if r != CUDA_SUCCESS {
        log(0, || format!("WARNING: module {module_id}: control block not found (CUDA error {r}); its checks stay off"));
        return;
    }
    let r = real_call!("cuMemcpyHtoD_v2"(u64, *const std::ffi::c_void, usize)(dptr, (&ctl as *const ControlBlock).cast(), std::mem::size_of::<ControlBlock>()));
    if r != CUDA_SUCCESS {
        log(0, || format!("WARNING: module {module_id}: writing the control block failed (CUDA error {r})"));
    }
    log(2, || format!("module {module_id}: control block at {dptr:#x} written"));
    write_heap_symbol(d, h, module_id, symbol);
}

/// The address of the device heap's header, written into a module's heap symbol when it has one
/// (it calls in-kernel `malloc`/`free`: instrument/src/ptx/heap.rs). The heap is reserved on first
/// use, with the context's malloc heap limit then.
fn write_heap_symbol(d: &DeviceRuntime, h: LoadedHandle, module_id: u64, ctl_symbol: &str) {
    let Some(dptr) = heap_symbol_address(h, ctl_symbol) else { return }; // no in-kernel heap calls
    let region = {
        let mut slot = d.device_heap.lock().unwrap();
        *slot.get_or_insert_with(|| {
            let mut limit = 0usize;
            let r = real_call!("cuCtxGetLimit"(*mut usize, i32)(&mut limit, crate::device_heap::CU_LIMIT_MALLOC_HEAP_SIZE));
            let limit = if r == CUDA_SUCCESS && limit > 0 { limit as u64 } else { gasan_instrument::device_heap::DEFAULT_HEAP_LIMIT };
            match d.alloc.reserve_device_heap(limit, host_mapped_table(limit, d.alloc.scale().granule())) {
                Ok(region) => {
                    log(1, || format!("device heap: {} MiB arena at {:#x} for a malloc heap limit of {} KiB", region.layout.arena_size >> 20, region.base, limit >> 10));
                    Ok(region)
                }
                Err(e) => {
                    log(0, || format!("WARNING: cannot reserve the checked device heap ({e}); in-kernel malloc/free stay unchecked"));
                    Err(())
                }
            }
        })
    };
    let Ok(region) = region else { return };
    d.heap_modules.lock().unwrap().push((h, module_id, ctl_symbol.to_string()));
    write_heap_address(dptr, region.base, module_id);
}

/// A zeroed, device-mapped host block table for a heap of `limit` bytes (None: the table stays in
/// the heap region, and reports after a `trap` cannot name the block).
fn host_mapped_table(limit: u64, granule: u64) -> Option<crate::device_heap::HostTable> {
    let layout = gasan_instrument::device_heap::HeapLayout::for_limit(limit, granule);
    let bytes = layout.table_capacity as usize * gasan_instrument::device_heap::BLOCK_ENTRY_SIZE;
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP; never freed (the device may write it
    // until the process ends).
    if real_call!("cuMemHostAlloc"(*mut *mut std::ffi::c_void, usize, u32)(&mut host, bytes, 0x1 | 0x2)) != CUDA_SUCCESS || host.is_null() {
        return None;
    }
    // SAFETY: `bytes` bytes of host memory just allocated.
    unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
    let mut device = 0u64;
    (real_call!("cuMemHostGetDevicePointer_v2"(*mut u64, *mut std::ffi::c_void, u32)(&mut device, host, 0)) == CUDA_SUCCESS).then_some(crate::device_heap::HostTable { host: host as usize, device })
}

/// Device address of the heap symbol belonging to control block `ctl_symbol`, if the module has one.
fn heap_symbol_address(h: LoadedHandle, ctl_symbol: &str) -> Option<u64> {
    let name = std::ffi::CString::new(gasan_instrument::device_heap::heap_symbol(ctl_symbol)).ok()?;
    let mut dptr = 0u64;
    let mut bytes = 0usize;
    let r = match h {
        LoadedHandle::Module(m) => real_call!("cuModuleGetGlobal_v2"(*mut u64, *mut usize, usize, *const i8)(&mut dptr, &mut bytes, m, name.as_ptr())),
        LoadedHandle::Library(l) => real_call!("cuLibraryGetGlobal"(*mut u64, *mut usize, usize, *const i8)(&mut dptr, &mut bytes, l, name.as_ptr())),
    };
    (r == CUDA_SUCCESS && bytes >= 8).then_some(dptr)
}

fn write_heap_address(symbol: u64, heap: u64, module_id: u64) {
    let r = real_call!("cuMemcpyHtoD_v2"(u64, *const std::ffi::c_void, usize)(symbol, (&heap as *const u64).cast(), 8));
    if r != CUDA_SUCCESS {
        log(0, || format!("WARNING: module {module_id}: writing the device heap address failed (CUDA error {r}); its in-kernel malloc/free stay unchecked"));
    }
}

impl State {
    /// The program set `CU_LIMIT_MALLOC_HEAP_SIZE`. A heap not reserved yet will be sized by it. One
    /// already reserved (a module with heap calls was loaded first) but smaller and never
    /// allocated from is replaced by one of the new size, and every module is pointed at it; one
    /// already used keeps its size (the driver too refuses to resize its heap after a kernel used
    /// it), with a warning.
    pub fn malloc_heap_limit_set(&self, limit: u64) {
        let Some(d) = self.device.get().and_then(Option::as_ref) else { return };
        let mut slot = d.device_heap.lock().unwrap();
        let Some(Ok(old)) = *slot else { return };
        if limit <= old.limit {
            return;
        }
        let mut next = [0u8; 8];
        let r = real_call!("cuMemcpyDtoH_v2"(*mut std::ffi::c_void, u64, usize)(next.as_mut_ptr().cast(), old.base, 8));
        if r != CUDA_SUCCESS || u64::from_le_bytes(next) != 0 {
            log(0, || format!("WARNING: the checked device heap was already used; it keeps its limit of {} KiB (asked: {} KiB)", old.limit >> 10, limit >> 10));
            return;
        }
        match d.alloc.reserve_device_heap(limit, host_mapped_table(limit, d.alloc.scale().granule())) {
            Ok(region) => {
                log(1, || format!("device heap: replaced by {} MiB arena at {:#x} for a malloc heap limit of {} KiB", region.layout.arena_size >> 20, region.base, limit >> 10));
                *slot = Some(Ok(region));
                for (h, module_id, ctl_symbol) in d.heap_modules.lock().unwrap().iter() {
                    if let Some(sym) = heap_symbol_address(*h, ctl_symbol) {
                        write_heap_address(sym, region.base, *module_id);
                    }
                }
            }
            Err(e) => log(0, || format!("WARNING: cannot grow the checked device heap to {} KiB ({e}); it keeps {} KiB", limit >> 10, old.limit >> 10)),
        }
    }
}
