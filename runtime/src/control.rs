//! Control blocks and the checked device heap: what each loaded checked module is told (pool,
//! shadow, extent table, ring, its module id, the device heap), written when the module and the
//! pool both exist; the heap reserved, sized by the program's limit and replaced when it grows.
//!
//! Per device, a module's block is written from that GPU's [`DeviceRuntime`] (its pool, ring,
//! outside table and device heap). Per process, [`ControlBlocks`] keeps which blocks wait to be
//! written and in which contexts a library's block is: a library spans contexts and GPUs.

use crate::device::{current_device, DeviceRuntime, DeviceSource, LoadedHandle};
use crate::driver::{DriverError, CUDA_ERROR_INVALID_VALUE};
use crate::log::log;
use gasan_instrument::abi::ControlBlock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A control block waiting to be written.
pub(crate) struct Pending {
    pub(crate) handle: LoadedHandle,
    pub(crate) module_id: u64,
    pub(crate) symbol: String,
    /// The GPU of the context a module was loaded in; `None` for libraries (any GPU).
    pub(crate) device: Option<i32>,
    /// The contexts a library's control block was written in: a library has a copy of its
    /// globals in each context that uses it.
    pub(crate) written_in: Vec<usize>,
}

/// Control blocks waiting to be written, and whether there are any (read at every launch, so a
/// flag rather than the lock).
#[derive(Default)]
pub(crate) struct PendingBlocks {
    list: Mutex<PendingList>,
    any: AtomicBool,
    /// The context (its handle) a flush last found nothing to do in, until an entry is pushed (0:
    /// none): launches there skip the flush (a library waiting for another context is otherwise
    /// taken, looked at and put back at each of them).
    idle_in: AtomicUsize,
}

#[derive(Default)]
struct PendingList {
    entries: Vec<Pending>,
    /// Entries pushed so far: a flush that saw none pushed while it worked may call its context idle.
    pushed: u64,
}

impl PendingBlocks {
    pub(crate) fn push(&self, p: Pending) {
        let mut l = self.list.lock().unwrap();
        l.entries.push(p);
        l.pushed += 1;
        self.idle_in.store(0, Ordering::Release);
        self.any.store(true, Ordering::Release);
    }

    /// Every entry, leaving none, and the push count to hand back to [`Self::put_back`].
    pub(crate) fn take(&self) -> (Vec<Pending>, u64) {
        let mut l = self.list.lock().unwrap();
        let list = std::mem::take(&mut l.entries);
        self.any.store(false, Ordering::Release);
        (list, l.pushed)
    }

    /// Puts back what a flush of context `ctx` kept, which it [`Self::take`]n at push count
    /// `pushed`; `idle`: it wrote and settled nothing, so the next launches in `ctx` may skip the
    /// flush, unless an entry was pushed meanwhile (the flush did not see it).
    pub(crate) fn put_back(&self, kept: Vec<Pending>, pushed: u64, ctx: usize, idle: bool) {
        let mut l = self.list.lock().unwrap();
        l.entries.extend(kept);
        if idle && l.pushed == pushed && ctx != 0 {
            self.idle_in.store(ctx, Ordering::Release);
        }
        if !l.entries.is_empty() {
            self.any.store(true, Ordering::Release);
        }
    }

    /// Whether the last flush in context `ctx` found nothing to do, and nothing was pushed since.
    pub(crate) fn idle_in(&self, ctx: usize) -> bool {
        ctx != 0 && self.idle_in.load(Ordering::Acquire) == ctx
    }

    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }
}

/// The process's control-block bookkeeping: blocks not written yet, libraries written in every
/// context seen, the contexts seen, and whether the driver takes blocks preset in cubins.
pub struct ControlBlocks {
    /// Kernels recover after a report (`halt_on_error=0`): the flag every block carries.
    recover: bool,
    /// Control blocks not written yet (loaded before the pool, or a library not yet used on the
    /// pool's GPU).
    pub(crate) pending: PendingBlocks,
    /// Libraries whose control block every context seen so far has (pending again when another
    /// context or GPU appears).
    libraries_written: Mutex<Vec<Pending>>,
    /// The contexts gasan has seen (created, made current, retained, or current at a flush), with
    /// their GPUs.
    contexts_seen: Mutex<HashMap<usize, i32>>,
    /// Whether the driver takes control blocks from cubins' data (checked on the process's first
    /// preset module).
    preset_works: OnceLock<bool>,
}

impl ControlBlocks {
    /// `halt_on_error`: the option the blocks' flags come from.
    pub fn new(halt_on_error: bool) -> Self {
        ControlBlocks {
            recover: !halt_on_error,
            pending: PendingBlocks::default(),
            libraries_written: Mutex::new(Vec::new()),
            contexts_seen: Mutex::new(HashMap::new()),
            preset_works: OnceLock::new(),
        }
    }

    /// Whether any block waits to be written (read before every launch).
    pub fn any_pending(&self) -> bool {
        self.pending.any()
    }

    /// Writes the module's control block now if the pool exists, else remembers it.
    pub fn set(&self, devices: &impl DeviceSource, h: LoadedHandle, module_id: u64) {
        self.set_named(devices, h, module_id, gasan_instrument::abi::CONTROL_BLOCK_SYMBOL);
    }

    /// As [`ControlBlocks::set`] for a control block under another name (inputs of a
    /// `cuLink*` link each keep their own, see link.rs).
    ///
    /// A module gets the control block of the GPU of the context it was loaded in (in a
    /// single-GPU process, a module loaded in another GPU's context is never written: its checks
    /// stay off, a zero pool). A library (context-independent: a copy of its globals in each
    /// context that uses it) is written in the current context now, and in each other context
    /// when it is current at a launch.
    pub fn set_named(&self, devices: &impl DeviceSource, h: LoadedHandle, module_id: u64, symbol: &str) {
        let loaded_on = current_device();
        let entry = Pending {
            handle: h,
            module_id,
            symbol: symbol.to_string(),
            device: match h {
                LoadedHandle::Module(_) => loaded_on,
                LoadedHandle::Library(_) => None,
            },
            written_in: Vec::new(),
        };
        if let (LoadedHandle::Module(_), Some(dev)) = (h, loaded_on) {
            if let Some(d) = devices.device() {
                if dev == d.device {
                    write_control_block(d, self.recover, h, module_id, symbol);
                } else if let Some(o) = devices.device_for(dev) {
                    // Another GPU's module: its GPU's runtime (set up now), or never checked.
                    write_control_block(o, self.recover, h, module_id, symbol);
                }
                return;
            }
        }
        if let LoadedHandle::Library(_) = h {
            if loaded_on.is_some() {
                devices.device();
            }
        }
        self.pending.push(entry);
        self.flush(devices.devices());
    }

    /// Writes the control blocks still pending that belong in the current context, when its GPU
    /// has a runtime (called before launches, when a library is loaded and when a device is set
    /// up). A library stays pending until every context gasan has seen on a GPU with a runtime
    /// has its block; then it waits in `libraries_written` until another context or GPU appears
    /// ([`ControlBlocks::context_seen`], [`ControlBlocks::device_set_up`] put it back).
    ///
    /// A flush that finds nothing to do in the current context (a library waits only for other
    /// contexts) says so, and flushes in that context return at once until an entry is pushed:
    /// every launch there would otherwise pay the same work (`examples/launch_cost.rs`).
    pub fn flush(&self, devices: &crate::devices::Devices<DeviceRuntime>) {
        let ctx = crate::driver::result::ctx_get_current().map_or(0, |c| c as usize);
        if self.pending.idle_in(ctx) {
            return;
        }
        let Some(first) = devices.first() else { return };
        let Some(cur) = current_device() else { return };
        let Some(d) = devices.get(cur) else { return };
        if !first.multi_gpu && cur != first.device {
            return;
        }
        let contexts = self.contexts_with_runtime(devices, ctx, cur);
        let mut keep = Vec::new();
        let mut idle = true;
        let (list, pushed) = self.pending.take();
        for mut p in list {
            match p.device {
                // Another GPU's module: written when that GPU is set up (several GPUs), never
                // (one pool).
                Some(dev) if dev != d.device => {
                    if d.multi_gpu {
                        keep.push(p);
                    } else {
                        idle = false;
                    }
                }
                Some(_) => {
                    write_control_block(d, self.recover, p.handle, p.module_id, &p.symbol);
                    idle = false;
                }
                None => {
                    if !p.written_in.contains(&ctx) {
                        write_control_block(d, self.recover, p.handle, p.module_id, &p.symbol);
                        p.written_in.push(ctx);
                        idle = false;
                    }
                    if contexts.iter().all(|c| p.written_in.contains(c)) {
                        self.libraries_written.lock().unwrap().push(p);
                        idle = false;
                    } else {
                        keep.push(p);
                    }
                }
            }
        }
        self.pending.put_back(keep, pushed, ctx, idle);
    }

    /// Another GPU was just set up: every library written so far gets its control block too.
    pub fn device_set_up(&self) {
        for p in std::mem::take(&mut *self.libraries_written.lock().unwrap()) {
            self.pending.push(p);
        }
    }

    /// Context `ctx` was created, made current or retained: when it is new, every library's
    /// control block is pending again, to be written in it when it is current at a launch.
    pub fn context_seen(&self, ctx: cudarc::driver::sys::CUcontext) {
        if ctx.is_null() || self.contexts_seen.lock().unwrap().contains_key(&(ctx as usize)) {
            return;
        }
        let Ok(dev) = crate::driver::result::ctx_device(ctx) else { return };
        self.contexts_seen.lock().unwrap().insert(ctx as usize, dev);
        let written = std::mem::take(&mut *self.libraries_written.lock().unwrap());
        for p in written {
            self.pending.push(p);
        }
    }

    /// Context `ctx` was destroyed: a later context may get its handle value, and must then get
    /// the libraries' control blocks again.
    pub fn context_gone(&self, ctx: cudarc::driver::sys::CUcontext) {
        let ctx = ctx as usize;
        self.contexts_seen.lock().unwrap().remove(&ctx);
        self.libraries_written.lock().unwrap().iter_mut().for_each(|p| p.written_in.retain(|&c| c != ctx));
        // Pending ones: taken and put back (the list is the pending owner's).
        let (list, _) = self.pending.take();
        for mut p in list {
            p.written_in.retain(|&c| c != ctx);
            self.pending.push(p);
        }
    }

    /// Device `dev`'s primary context was reset or released for good: every context seen on it
    /// is forgotten (a live one only gets the libraries' control blocks written again).
    pub fn device_contexts_gone(&self, dev: i32) {
        let on_dev: Vec<usize> = self.contexts_seen.lock().unwrap().iter().filter(|(_, &d)| d == dev).map(|(&c, _)| c).collect();
        for c in on_dev {
            self.context_gone(c as cudarc::driver::sys::CUcontext);
        }
    }

    /// The contexts seen on GPUs that have a runtime, `current` (on the current GPU) recorded
    /// first: those a library's control block must be written in.
    fn contexts_with_runtime(&self, devices: &crate::devices::Devices<DeviceRuntime>, current: usize, current_dev: i32) -> Vec<usize> {
        let mut seen = self.contexts_seen.lock().unwrap();
        if current != 0 {
            seen.entry(current).or_insert(current_dev);
        }
        seen.iter().filter(|(_, &dev)| devices.get(dev).is_some()).map(|(&c, _)| c).collect()
    }

    /// Writes module `module_id`'s control block into the data of a cubin about to be loaded (its
    /// `__gasan_ctl` in `.nv.constant3`), so that the load needs no driver call after it: no
    /// symbol lookup, which loads the module into the context at once (a lazy module would load
    /// at its first launch), and no synchronous copy, which waits for work already queued.
    /// Returns whether it did; it does only where the block written after the load would be the
    /// same in every context the image may reach: the pool exists, this is its GPU, and the
    /// process sees one GPU (a library image is loaded into every context that uses it).
    ///
    /// `Some(whether the module has a device-heap symbol)` when it did, for
    /// [`ControlBlocks::preset_module_loaded`].
    pub fn preset(&self, devices: &impl DeviceSource, cubin: &mut [u8], module_id: u64) -> Option<bool> {
        let d = devices.device()?;
        if d.multi_gpu || current_device() != Some(d.device) || self.preset_works.get() == Some(&false) {
            return None;
        }
        let symbol = gasan_instrument::abi::CONTROL_BLOCK_SYMBOL;
        let [ctl, heap] = gasan_instrument::container::symbol_data_ranges(cubin, [symbol, &gasan_instrument::device_heap::heap_symbol(symbol)]);
        let range = ctl.filter(|r| r.len() == gasan_instrument::abi::CONTROL_BLOCK_SIZE)?;
        cubin[range].copy_from_slice(&control_block(d, self.recover, module_id).to_bytes());
        log(2, || format!("module {module_id}: control block preset in its cubin"));
        Some(heap.is_some())
    }

    /// Whether this process has settled if the driver takes preset control blocks (a read-back
    /// or the cache's driver check).
    pub fn preset_settled(&self) -> bool {
        self.preset_works.get().is_some()
    }

    /// After a cubin with a preset control block loaded: the device heap's address, when the
    /// module calls in-kernel malloc/free (`has_heap`: it defines the heap symbol).
    ///
    /// The first such module of the process is read back once (one lookup and copy, about 0.7 ms
    /// on the H100, which also loads a lazy module at once), unless `known_to_work` (an earlier
    /// process with this driver read one back): if the driver did not take the block from the
    /// image, it is written as for any module, and no later module is preset. Returns whether
    /// this call read one back and found it taken.
    pub fn preset_module_loaded(&self, devices: &impl DeviceSource, h: LoadedHandle, module_id: u64, has_heap: bool, known_to_work: bool) -> bool {
        let symbol = gasan_instrument::abi::CONTROL_BLOCK_SYMBOL;
        let Some(d) = devices.device() else { return false };
        let mut verified = false;
        if known_to_work {
            let _ = self.preset_works.set(true);
        }
        if self.preset_works.get().is_none() {
            let expected = control_block(d, self.recover, module_id).to_bytes();
            let works = read_global(h, symbol).is_some_and(|b| b == expected);
            let _ = self.preset_works.set(works);
            if !works {
                log(0, || "WARNING: the driver did not take a control block from a checked cubin; writing control blocks after each load".into());
                write_control_block(d, self.recover, h, module_id, symbol);
                return false;
            }
            verified = true;
        }
        if has_heap {
            write_heap_symbol(d, h, module_id, symbol);
        }
        verified
    }
}

/// What module `module_id` is told on the pool's GPU.
fn control_block(d: &DeviceRuntime, recover: bool, module_id: u64) -> ControlBlock {
    let (pool_base, pool_size, shadow_base) = d.alloc.control_fields();
    let (extent_table, extent_shift) = d.alloc.extent_fields();
    let ring = d.ring.lock().unwrap().device_ptr;
    ControlBlock {
        pool_base,
        pool_size,
        shadow_base,
        ring,
        flags: if recover { gasan_instrument::abi::FLAG_RECOVER } else { 0 },
        module_id,
        extent_table,
        extent_shift: extent_shift.into(),
        // With the table, every out-of-pool check asks it (kernels of a module instrumented
        // without outside checks ignore both fields).
        outside_shadow: if d.outside.is_some() { gasan_instrument::abi::outside::RANGES } else { gasan_instrument::abi::outside::NO_RANGES },
        outside_ranges: d.outside.as_ref().map_or(0, crate::outside::OutsideTable::device_address),
    }
}

/// The 64 bytes of a module's control block as the device sees them.
fn read_global(h: LoadedHandle, symbol: &str) -> Option<[u8; gasan_instrument::abi::CONTROL_BLOCK_SIZE]> {
    let (dptr, bytes) = global_address(h, symbol).ok()?;
    let mut out = [0u8; gasan_instrument::abi::CONTROL_BLOCK_SIZE];
    (bytes == out.len() && crate::driver::result::memcpy_dtoh(&mut out, dptr).is_ok()).then_some(out)
}

/// The device address and size of global `symbol` of a loaded module or library (the driver's
/// error when it has none).
fn global_address(h: LoadedHandle, symbol: &str) -> Result<(u64, usize), DriverError> {
    let name = std::ffi::CString::new(symbol).map_err(|_| DriverError(CUDA_ERROR_INVALID_VALUE))?;
    match h {
        LoadedHandle::Module(m) => crate::driver::result::module_get_global(m, &name),
        LoadedHandle::Library(l) => crate::driver::result::library_get_global(l, &name),
    }
}

fn write_control_block(d: &DeviceRuntime, recover: bool, h: LoadedHandle, module_id: u64, symbol: &str) {
    let ctl = control_block(d, recover, module_id);
    let dptr = match global_address(h, symbol) {
        Ok((dptr, _)) => dptr,
        Err(r) => {
            log(0, || format!("WARNING: module {module_id}: control block not found (CUDA error {r}); its checks stay off"));
            return;
        }
    };
    if let Err(r) = crate::driver::result::memcpy_htod(dptr, &ctl.to_bytes()) {
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
            let limit = match crate::driver::result::ctx_get_limit(cudarc::driver::sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE) {
                Ok(limit) if limit > 0 => limit as u64,
                _ => gasan_instrument::device_heap::DEFAULT_HEAP_LIMIT,
            };
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
    // Never freed (the device may write it until the process ends).
    let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE | cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP;
    let host = crate::driver::result::mem_host_alloc(bytes, flags).ok().filter(|h| !h.is_null())?;
    // SAFETY: `bytes` bytes of host memory just allocated.
    unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
    let device = crate::driver::result::mem_host_get_device_pointer(host).ok()?;
    Some(crate::device_heap::HostTable { host: host as usize, device })
}

/// Device address of the heap symbol belonging to control block `ctl_symbol`, if the module has one.
fn heap_symbol_address(h: LoadedHandle, ctl_symbol: &str) -> Option<u64> {
    global_address(h, &gasan_instrument::device_heap::heap_symbol(ctl_symbol)).ok().filter(|&(_, bytes)| bytes >= 8).map(|(dptr, _)| dptr)
}

fn write_heap_address(symbol: u64, heap: u64, module_id: u64) {
    if let Err(r) = crate::driver::result::memcpy_htod(symbol, &heap.to_le_bytes()) {
        log(0, || format!("WARNING: module {module_id}: writing the device heap address failed (CUDA error {r}); its in-kernel malloc/free stay unchecked"));
    }
}

/// The program set `CU_LIMIT_MALLOC_HEAP_SIZE` (`d`: the first device's runtime). A heap not
/// reserved yet will be sized by it. One already reserved (a module with heap calls was loaded
/// first) but smaller and never allocated from is replaced by one of the new size, and every
/// module is pointed at it; one already used keeps its size (the driver too refuses to resize its
/// heap after a kernel used it), with a warning.
pub fn malloc_heap_limit_set(d: &DeviceRuntime, limit: u64) {
    let mut slot = d.device_heap.lock().unwrap();
    let Some(Ok(old)) = *slot else { return };
    if limit <= old.limit {
        return;
    }
    let mut next = [0u8; 8];
    if crate::driver::result::memcpy_dtoh(&mut next, old.base).is_err() || u64::from_le_bytes(next) != 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn library(module_id: u64) -> Pending {
        Pending { handle: LoadedHandle::Library(std::ptr::null_mut()), module_id, symbol: "__gasan_ctl".into(), device: None, written_in: vec![] }
    }

    #[test]
    fn a_context_a_flush_found_idle_stays_idle_until_an_entry_is_pushed() {
        let p = PendingBlocks::default();
        p.push(library(1));
        let (list, pushed) = p.take();
        assert!(!p.any());
        // Nothing to do in context 5: the entry goes back, and context 5 is idle (not 6).
        p.put_back(list, pushed, 5, true);
        assert!(p.any() && p.idle_in(5) && !p.idle_in(6) && !p.idle_in(0));
        // A push (a new entry, a context appearing, a context gone) ends it.
        p.push(library(2));
        assert!(!p.idle_in(5));
        // A flush that did something leaves no idle context.
        let (list, pushed) = p.take();
        p.put_back(list, pushed, 5, false);
        assert!(!p.idle_in(5));
        // An entry pushed while a flush worked: that flush did not see it, so it is not idle.
        let (list, pushed) = p.take();
        p.push(library(3));
        p.put_back(list, pushed, 5, true);
        assert!(!p.idle_in(5));
        assert_eq!(p.take().0.iter().map(|e| e.module_id).collect::<Vec<_>>(), vec![3, 1, 2]);
        // No current context (handle 0) is never idle.
        p.put_back(vec![], p.take().1, 0, true);
        assert!(!p.idle_in(0));
    }
}
