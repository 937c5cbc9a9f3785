//! Process-wide runtime state, created lazily at the first intercepted call. The device part (pool,
//! allocator, ring) is created at the first call that has a current context.

use crate::allocator::Allocator;
use crate::control::ControlBlocks;
use crate::device::{compute_capability, current_device, DeviceRuntime, DeviceSource};
use crate::errors::{ErrorOptions, Errors, RingSources};
use crate::options::Options;
use crate::report::Reporter;
use crate::ring::Ring;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

#[derive(Default)]
pub struct Counters {
    pub modules_instrumented: AtomicU64,
    pub modules_sass_only: AtomicU64,
    pub modules_fallback: AtomicU64,
    pub cache_hits: AtomicU64,
    pub link_inputs_checked: AtomicU64,
    /// Time spent getting checked modules loaded, from the image to the written control block, µs;
    /// and its phases: the image's PTX, cache key and site table (or instrumentation); the cubin's
    /// key and cache read; the driver's loader calls; the site table's registration and the control
    /// block. (ptxas, on a miss, is `cubin_compile_us`.)
    pub module_load_us: AtomicU64,
    pub prepare_us: AtomicU64,
    pub cubin_lookup_us: AtomicU64,
    pub driver_load_us: AtomicU64,
    pub control_block_us: AtomicU64,
    /// Checked modules loaded as cubins from the cache.
    pub cubins_cached: AtomicU64,
    /// Of those, the ones found before their load ([`crate::prefetch`]).
    pub cubins_prefetched: AtomicU64,
    /// Cubins loaded into the driver ahead of their loaders (`preload`), the time that took on
    /// the prefetch thread (µs), and how many of them were handed to their loaders.
    pub modules_preloaded: AtomicU64,
    pub preload_us: AtomicU64,
    pub modules_adopted: AtomicU64,
    /// Time loaders waited for the prefetch thread's work on their module, µs.
    pub prefetch_wait_us: AtomicU64,
    /// Launches through the hooks, and those whose arguments carried block bounds (crate::arg_bounds).
    pub launches: AtomicU64,
    pub launches_tagged: AtomicU64,
    /// Checked modules compiled to cubins with ptxas (and cached).
    pub cubins_compiled: AtomicU64,
    /// Time spent in ptxas, µs.
    pub cubin_compile_us: AtomicU64,
    /// Cubins the driver refused (the checked PTX was loaded instead).
    pub cubins_refused: AtomicU64,
    /// Checked modules handed to the driver's JIT as PTX (sass=0 aside): no ptxas, failed compile...
    pub sass_ptx_path: AtomicU64,
}

impl Counters {
    /// The run's summary at `verbosity>=1` (at exit): foreign memory still tracked, modules,
    /// cubins, loading times and launches.
    fn print(&self, f: &crate::side_table::SideTable, opts: &Options) {
        use crate::side_table::ForeignKind as K;
        eprintln!(
            "==gasan== untracked by the pool (passed through): {} managed, {} pinned host, {} registered host, {} other-GPU, {} NCCL (ncclMemAlloc) allocations live; {} cuMemMap mappings outside the pool (known, not checked)",
            f.count(K::Managed),
            f.count(K::HostAlloc),
            f.count(K::HostRegistered),
            f.count(K::OtherDevice),
            f.count(K::NcclMem),
            f.count(K::VmmMapping)
        );
        eprintln!(
            "==gasan== modules: {} instrumented ({} from cache, {:.1} ms loading), {} SASS-only, {} fell back to the original",
            self.modules_instrumented.load(Ordering::Relaxed),
            self.cache_hits.load(Ordering::Relaxed),
            self.module_load_us.load(Ordering::Relaxed) as f64 / 1e3,
            self.modules_sass_only.load(Ordering::Relaxed),
            self.modules_fallback.load(Ordering::Relaxed)
        );
        crate::jit_origin::summary().iter().for_each(|l| eprintln!("==gasan== {l}"));
        let ms = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / 1e3;
        eprintln!(
            "==gasan== module loading: {:.2} ms preparing (PTX, key, site table or instrumentation), {:.2} ms finding cubins, {:.2} ms in the driver's loaders, {:.2} ms writing control blocks",
            ms(&self.prepare_us),
            ms(&self.cubin_lookup_us),
            ms(&self.driver_load_us),
            ms(&self.control_block_us)
        );
        eprintln!(
            "==gasan== cubins: {} from cache ({} found before their load), {} compiled ({:.1} ms in ptxas), {} refused by the driver; {} modules on the driver's PTX JIT{}",
            self.cubins_cached.load(Ordering::Relaxed),
            self.cubins_prefetched.load(Ordering::Relaxed),
            self.cubins_compiled.load(Ordering::Relaxed),
            self.cubin_compile_us.load(Ordering::Relaxed) as f64 / 1e3,
            self.cubins_refused.load(Ordering::Relaxed),
            self.sass_ptx_path.load(Ordering::Relaxed),
            if opts.sass { "" } else { " (sass=0)" }
        );
        eprintln!(
            "==gasan== modules loaded ahead of their first launch: {} ({:.2} ms on the prefetch thread), {} of them handed to their loaders; loaders waited {:.2} ms for the prefetch thread",
            self.modules_preloaded.load(Ordering::Relaxed),
            ms(&self.preload_us),
            self.modules_adopted.load(Ordering::Relaxed),
            ms(&self.prefetch_wait_us)
        );
        eprintln!(
            "==gasan== launches: {}, {} with block bounds in their pointer arguments{}",
            self.launches.load(Ordering::Relaxed),
            self.launches_tagged.load(Ordering::Relaxed),
            if opts.arg_bounds { "" } else { " (arg_bounds=0)" }
        );
    }
}

/// The process's runtime state: it only holds the owners, per process (options, the report sink,
/// control-block bookkeeping, module registry, side table, counters) and per device
/// ([`DeviceRuntime`]s), and sets each device up at its first use.
pub struct State {
    pub opts: Options,
    /// Each device's pool, ring and the rest, set up at its first use.
    pub(crate) devices: crate::devices::Devices<DeviceRuntime>,
    /// The VA of every device's pool in a multi-GPU process, reserved when the first device is
    /// set up (`None`: one GPU, or the reservation failed and each device has a lone pool).
    span: OnceLock<Option<std::sync::Arc<gasan_uvm::DeviceSpan>>>,
    /// Peer access the program enabled: (owner, peer) = `peer`'s contexts may access `owner`'s
    /// memory, applied to `owner`'s pool now or when it is set up.
    peer_access: Mutex<Vec<(i32, i32)>>,
    /// Whether every GPU set up may reach every other's pinned and managed blocks and read its
    /// shadow (multi-GPU; [`State::share_host_memory`]): until a grant fails, host memory comes
    /// from the current GPU's pool; after, from the driver (tracked, checked by host calls only).
    host_memory_shared: std::sync::atomic::AtomicBool,
    /// What answers other processes' imports of pool blocks (started at the first export; `None`:
    /// it could not listen), and the handles given out for each block, by block start, withdrawn
    /// when the block is freed.
    ipc_exporter: OnceLock<Option<gasan_uvm::ipc::Exporter>>,
    ipc_exports: Mutex<std::collections::HashMap<u64, Vec<gasan_uvm::ipc::IpcHandle>>>,
    /// The checked modules' site tables, by module id.
    pub sites: crate::report::ModuleRegistry,
    /// The control blocks waiting to be written, and where libraries' are.
    pub control: ControlBlocks,
    /// Reports, the ring's tally and the exit status after errors.
    pub errors: Errors,
    pub counters: Counters,
    /// Managed and host memory (not in the pool), tracked for frees and descriptions.
    pub foreign: crate::side_table::SideTable,
    /// The stream-ordered allocations the pool served, as the driver's pools would count them.
    pub stream_ordered: crate::pool_stats::StreamOrderedStats,
}

static STATE: OnceLock<State> = OnceLock::new();

/// What starts once the device runtime is set up, given the GPU's compute capability: the
/// prefetch (`prefetch::start`), a layer above the state, handed in by `init::at_load` rather than
/// named here (the prefetch reads the state).
static ON_DEVICE_READY: OnceLock<fn(u32)> = OnceLock::new();

/// Sets what starts once the device runtime is set up (once; later calls are ignored).
pub fn on_device_ready(start: fn(u32)) {
    let _ = ON_DEVICE_READY.set(start);
}

pub fn state() -> &'static State {
    STATE.get_or_init(|| {
        let opts = crate::options::process().clone();
        extern "C" fn at_exit() {
            if let Some(s) = STATE.get() {
                s.at_exit();
            }
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(at_exit) };
        State {
            errors: Errors::new(Reporter::new(&opts), ErrorOptions::from(&opts)),
            control: ControlBlocks::new(opts.halt_on_error),
            opts,
            devices: Default::default(),
            span: OnceLock::new(),
            peer_access: Mutex::new(Vec::new()),
            host_memory_shared: std::sync::atomic::AtomicBool::new(true),
            ipc_exporter: OnceLock::new(),
            ipc_exports: Mutex::new(Default::default()),
            sites: Default::default(),
            counters: Counters::default(),
            foreign: Default::default(),
            stream_ordered: Default::default(),
        }
    })
}

/// [`crate::log::log`], the state created first (its exit handler prints the run's summary at
/// `verbosity>=1`), as gasan's messages always have.
pub fn log(level: u32, msg: impl FnOnce() -> String) {
    state();
    crate::log::log(level, msg);
}

impl State {
    /// The device runtime, created on first use (needs a current context).
    pub fn device(&self) -> Option<&DeviceRuntime> {
        let set_up = |dev| match self.create_device_runtime(dev) {
            Ok(rt) => Some(rt),
            Err(e) => {
                eprintln!("==gasan== WARNING: cannot set up the device pool ({e}); running without checks");
                None
            }
        };
        let (d, just_set_up) = self.devices.first_or_set_up(current_device, set_up);
        if just_set_up {
            self.control.flush(&self.devices);
            if let Some(d) = d {
                if let (Some(cc), Some(start)) = (compute_capability(d.device), ON_DEVICE_READY.get()) {
                    start(cc);
                }
            }
        }
        d
    }

    fn create_device_runtime(&self, dev: i32) -> Result<DeviceRuntime, String> {
        let t = std::time::Instant::now();
        let vmm = gasan_uvm::VmmBackend::new(dev, crate::driver::vmm_fns().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
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
        let visible = crate::driver::result::device_get_count().ok().and_then(|n| u32::try_from(n).ok()).filter(|&n| n >= 1).unwrap_or(1);
        let multi_gpu = !crate::driver::result::device_get_count().is_ok_and(|n| n <= 1);
        let pool = match self.device_span(dev, visible, &cfg) {
            Some(span) => gasan_uvm::Pool::in_span(backend, &cfg, span, dev as u32),
            None => gasan_uvm::Pool::new(backend, &cfg),
        }
        .map_err(|e| e.to_string())?;
        log(1, || {
            format!("pool on device {dev}: {:#x}+{} GiB, shadow {:#x}, scale {}, set up in {:.1} ms", pool.base(), pool.size() >> 30, pool.shadow_base(), pool.shift(), t.elapsed().as_secs_f64() * 1e3)
        });
        let ring = Ring::new().map_err(|e| format!("error ring: CUDA error {e}"))?;
        // The process's fault queue and outside table: the first device's (the side table that
        // feeds the outside table is the process's).
        let first = self.devices.first_device().is_none();
        let faults = match first.then(crate::faults::FaultQueue::attach) {
            Some(Ok(q)) => Some(q),
            Some(Err(e)) => {
                log(1, || format!("GPU fault addresses unavailable: {e}"));
                None
            }
            None => None,
        };
        log(1, || format!("device runtime ready in {:.1} ms (pool, error ring, fault queue)", t.elapsed().as_secs_f64() * 1e3));
        Ok(DeviceRuntime {
            alloc: {
                // The unmap thread works in the context this device was set up in.
                let ctx = crate::driver::result::ctx_get_current().map_or(0, |c| c as usize);
                Allocator::new(pool, &self.opts).with_unmap_thread_setup(move || {
                    if ctx != 0 {
                        let _ = crate::driver::result::ctx_set_current(ctx as cudarc::driver::sys::CUcontext);
                    }
                })
            },
            ring: Mutex::new(ring),
            device: dev,
            multi_gpu,
            faults: Mutex::new(faults),
            device_heap: Mutex::new(None),
            heap_modules: Mutex::new(Vec::new()),
            outside: (first && self.opts.outside_checks)
                .then(crate::outside::OutsideTable::new)
                .and_then(|t| t.map_err(|r| log(0, || format!("WARNING: cannot allocate the table of outside ranges (CUDA error {r}); outside_checks stay off"))).ok()),
        })
    }

    /// The span every device's pool takes its slot in, reserved at the first device's set-up
    /// when the process sees several GPUs (`None`: one GPU, or the reservation failed, logged,
    /// and each device gets a lone pool).
    fn device_span(&self, dev: i32, visible: u32, cfg: &gasan_uvm::PoolConfig) -> Option<&std::sync::Arc<gasan_uvm::DeviceSpan>> {
        self.span
            .get_or_init(|| {
                if visible < 2 {
                    return None;
                }
                let devices = visible.min(gasan_uvm::plan::MAX_DEVICES);
                let reserve = || -> Result<_, String> {
                    let vmm = gasan_uvm::VmmBackend::new(dev, crate::driver::vmm_fns().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
                    gasan_uvm::DeviceSpan::reserve(Box::new(vmm), devices, cfg).map_err(|e| e.to_string())
                };
                match reserve() {
                    Ok(span) => {
                        let l = span.layout();
                        log(1, || format!("pools of {devices} GPUs: {:#x}+{} x {} GiB, shadows {:#x}", l.pool_base, l.devices, l.pool_size >> 30, l.shadow_base));
                        Some(span)
                    }
                    Err(e) => {
                        log(0, || format!("WARNING: cannot reserve the pools of {devices} GPUs in one span ({e}); each GPU gets a pool of its own, and kernels check only their own GPU's memory"));
                        None
                    }
                }
            })
            .as_ref()
            .filter(|s| (dev as u32) < s.layout().devices)
    }

    /// Device `dev`'s runtime, set up at its first use (the first device used through
    /// [`State::device`], any other only in a multi-GPU process); `None` when it cannot be.
    pub fn device_for(&self, dev: i32) -> Option<&DeviceRuntime> {
        let first = self.device()?;
        if first.device == dev {
            return Some(first);
        }
        if !first.multi_gpu {
            return None;
        }
        let mut just_set_up = false;
        let d = self.devices.get_or_set_up(dev, || {
            just_set_up = true;
            match self.create_device_runtime(dev) {
                Ok(rt) => Some(rt),
                Err(e) => {
                    eprintln!("==gasan== WARNING: cannot set up the pool of device {dev} ({e}); its memory is not checked");
                    None
                }
            }
        })?;
        if just_set_up {
            for &(owner, peer) in self.peer_access.lock().unwrap().iter() {
                if owner == dev {
                    grant_peer(d, peer);
                }
            }
            self.share_host_memory(d);
            // Libraries get this GPU's control block too.
            self.control.device_set_up();
            self.control.flush(&self.devices);
        }
        Some(d)
    }

    /// The runtime of the current context's device (the first device's in a single-GPU process,
    /// without asking the driver).
    pub fn current_runtime(&self) -> Option<&DeviceRuntime> {
        let first = self.device()?;
        if !first.multi_gpu {
            return Some(first);
        }
        match current_device() {
            Some(c) if c != first.device => self.device_for(c),
            _ => Some(first),
        }
    }

    /// A multi-GPU process's pinned and managed memory is every GPU's (as UVA makes the
    /// driver's): the new GPU `d` and every GPU set up before it reach each other's host blocks
    /// and read each other's shadow and extent table, so that a kernel on any GPU checks host
    /// memory against its owner's shadow. A refusal (the driver may not map one GPU's memory for
    /// another without peer-to-peer support) leaves host memory to the driver from then on.
    fn share_host_memory(&self, d: &DeviceRuntime) {
        for (_, o) in self.devices.each().filter(|(dev, _)| *dev != d.device) {
            for (owner, reader) in [(o, d), (d, o)] {
                if let Err(e) = owner.alloc.grant_host_access(reader.device) {
                    self.host_memory_shared.store(false, Ordering::Relaxed);
                    log(0, || {
                        format!(
                            "WARNING: device {} cannot read device {}'s pool's shadow ({e}); pinned and managed memory allocated from now on comes from the driver, unchecked in kernels",
                            reader.device, owner.device
                        )
                    });
                }
            }
        }
    }

    /// The pool pinned and managed (host) memory is allocated from now: in a process with one
    /// GPU, its pool; with several, the current GPU's, while every GPU reaches every pool's host
    /// memory ([`State::share_host_memory`]); `None`: the driver's.
    pub fn host_memory_runtime(&self) -> Option<&DeviceRuntime> {
        let first = self.device()?;
        if !first.multi_gpu {
            return Some(first);
        }
        let d = self.current_runtime()?;
        self.host_memory_shared.load(Ordering::Relaxed).then_some(d)
    }

    /// The runtime whose pool holds `addr`, if one does (the first device is set up first, as
    /// every pool query did before there were several).
    pub fn runtime_owning(&self, addr: u64) -> Option<&DeviceRuntime> {
        let first = self.device()?;
        if first.alloc.owns(addr) {
            return Some(first);
        }
        self.devices.each().map(|(_, d)| d).find(|d| d.alloc.owns(addr))
    }

    /// `peer`'s contexts may now access `owner`'s memory (cuCtxEnablePeerAccess succeeded):
    /// `owner`'s pool grants `peer` its chunks and their shadow, now if it is set up, else when
    /// it is.
    pub fn peer_access_enabled(&self, owner: i32, peer: i32) {
        let mut granted = self.peer_access.lock().unwrap();
        if !granted.contains(&(owner, peer)) {
            granted.push((owner, peer));
        }
        drop(granted);
        if let Some(d) = self.devices.get(owner) {
            grant_peer(d, peer);
        }
    }

    /// `peer`'s contexts may no longer access `owner`'s memory.
    pub fn peer_access_disabled(&self, owner: i32, peer: i32) {
        self.peer_access.lock().unwrap().retain(|&g| g != (owner, peer));
        if let Some(d) = self.devices.get(owner) {
            if let Err(e) = d.alloc.revoke_peer_access(peer) {
                log(1, || format!("device {peer}'s access to device {owner}'s pool not revoked: {e}"));
            }
        }
    }

    /// `cuIpcGetMemHandle` of pool memory: the block holding `ptr` offered to other processes
    /// through gasan's IPC (pool memory is VMM memory, which the driver's IPC does not export),
    /// as the 64 bytes of a `cudaIpcMemHandle_t`. `None`: not a live pool block (the driver's
    /// business); `Err`: it could not be offered.
    pub fn ipc_export(&self, ptr: u64) -> Option<Result<[u8; gasan_uvm::ipc::IPC_HANDLE_SIZE], String>> {
        let d = self.runtime_owning(ptr)?;
        if d.alloc.export_copies(ptr) {
            // The export copies the block into chunks: work still writing it must be done first
            // (as a managed block's move waits, managed.rs).
            let _ = crate::driver::result::ctx_synchronize();
        }
        let e = match d.alloc.export_ipc(ptr)? {
            Ok(e) => e,
            Err(err) => return Some(Err(err.to_string())),
        };
        let exporter = self.ipc_exporter.get_or_init(|| match gasan_uvm::ipc::Exporter::start() {
            Ok(x) => Some(x),
            Err(err) => {
                log(0, || format!("WARNING: cannot offer pool memory to other processes ({err}); cudaIpcGetMemHandle fails"));
                None
            }
        });
        let Some(exporter) = exporter else { return Some(Err("gasan IPC is not listening".into())) };
        let start = e.start;
        Some(exporter.export(e.fds, d.device as u32, e.gran, e.offset, e.size).map_err(|err| err.to_string()).map(|h| {
            self.ipc_exports.lock().unwrap().entry(start).or_default().push(h);
            h.to_bytes()
        }))
    }

    /// `cuIpcOpenMemHandle` of a handle gasan gave out (in this process or another): the
    /// exporter's chunks mapped in the current GPU's pool as a block with the exporter's bounds.
    pub fn ipc_open(&self, h: &gasan_uvm::ipc::IpcHandle) -> Result<u64, String> {
        let d = self.current_runtime().ok_or("no pool on this GPU")?;
        let fds = gasan_uvm::ipc::import(h).map_err(|e| e.to_string())?;
        d.alloc.import_ipc(fds, h.offset, h.size).map_err(|e| e.to_string())
    }

    /// The block at `start` was freed: its handles are no longer offered (processes that opened
    /// them keep their mapping, as with the driver's IPC).
    pub fn ipc_withdraw(&self, start: u64) {
        let Some(handles) = self.ipc_exports.lock().unwrap().remove(&start) else { return };
        if let Some(Some(exporter)) = self.ipc_exporter.get() {
            for h in &handles {
                exporter.withdraw(h);
            }
        }
    }
}

impl State {
    /// What drained ring records are described from.
    pub fn ring_sources(&self) -> RingSources<'_> {
        RingSources { devices: &self.devices, sites: &self.sites, foreign: &self.foreign }
    }

    /// The first device's table of outside ranges (`outside_checks=1`), setting the device up
    /// if none was.
    pub fn outside_table(&self) -> Option<&crate::outside::OutsideTable> {
        self.device().and_then(|d| d.outside.as_ref())
    }

    /// The process's end (the `atexit` handler `state()` registers): what the rings still hold
    /// reported, the summary, leaks, the counters at `verbosity>=1`, and the exit status after
    /// reported errors.
    fn at_exit(&self) {
        for (_, d) in self.devices.each() {
            d.alloc.stop_unmap_thread();
        }
        self.errors.drain_ring(&self.ring_sources(), crate::errors::Settle::Yes);
        self.errors.print_error_summary();
        if self.opts.detect_leaks {
            self.errors.report_leaks(&self.devices);
        }
        if self.opts.verbosity >= 1 {
            self.counters.print(&self.foreign, &self.opts);
        }
        crate::call_times::print_at_exit();
        self.errors.exit_if_reported();
    }
}

impl DeviceSource for State {
    fn device(&self) -> Option<&DeviceRuntime> {
        State::device(self)
    }

    fn device_for(&self, dev: i32) -> Option<&DeviceRuntime> {
        State::device_for(self, dev)
    }

    fn devices(&self) -> &crate::devices::Devices<DeviceRuntime> {
        &self.devices
    }
}

/// Grants `peer` access to `d`'s pool, logging a failure (the peer's reads of that pool then fault
/// as they would without peer access).
fn grant_peer(d: &DeviceRuntime, peer: i32) {
    match d.alloc.grant_peer_access(peer) {
        Ok(()) => log(1, || format!("device {peer} may access device {}'s pool and its shadow", d.device)),
        Err(e) => log(0, || format!("WARNING: device {peer}'s access to device {}'s pool not granted: {e}", d.device)),
    }
}
