//! Allocation and frees: device memory from the pool; managed and pinned host memory from the pool or
//! tracked; pointer queries answered for pool blocks.

use super::*;

fn stream_of(s: CUstream) -> Option<Stream> {
    Some(Stream(s as usize))
}

fn do_alloc(dptr: Out<Dptr>, size: usize, stream: Option<Stream>, real: impl FnOnce() -> CuResult) -> CuResult {
    // Only a stream-ordered call may come from a thread without a current context: the stream's
    // then is, before the device is looked up (the pool of a GPU is set up at its first use,
    // which may be this call; with several GPUs the stream's is the one asked).
    let stream_context = stream.map(|st| crate::driver::result::current_context_for(st.0 as CUstream, None));
    let s = state();
    if s.device().is_none() {
        return real();
    }
    if dptr.is_null() || size == 0 {
        return real();
    }
    // The current GPU's pool (set up at its first use); a GPU whose pool could not be set up
    // keeps its memory from the driver (unchecked, tracked).
    let Some(d) = s.current_runtime() else {
        let r = real();
        if let Some(p) = dptr.written(r) {
            s.foreign.record(p, size as u64, ForeignKind::OtherDevice, || s.outside_table(), s.opts.malloc_context_size);
            crate::state::log(2, || format!("{size} bytes on device {:?} passed through (no pool there)", crate::device::current_device()));
        }
        return r;
    };
    // (A stream the driver gave no context: the device's primary one.)
    let _context = stream_context.as_ref().filter(|g| !g.settled()).and(stream).map(|st| crate::driver::result::current_context_for(st.0 as CUstream, Some(d.device)));
    match d.alloc.alloc(size as u64, stream) {
        Ok(p) => {
            dptr.set(p);
            if stream.is_some() {
                s.stream_ordered.allocated(d.device, p, size as u64);
            }
            CUDA_SUCCESS
        }
        Err(e) => {
            let r = alloc_error_result(&e);
            if r == CUDA_ERROR_OUT_OF_MEMORY {
                crate::state::log(1, || format!("allocation of {size} bytes failed: {e} (mapped: {} bytes)", d.alloc.mapped_bytes()));
            } else {
                // Not a lack of memory: a caller told "out of memory" would look in the wrong place
                // (PyTorch's cudaMallocAsync backend then reports "would exceed allowed memory").
                crate::state::log(0, || format!("WARNING: allocation of {size} bytes failed: {e}; returned as CUDA error {r}, as the driver returns it"));
            }
            r
        }
    }
}

/// The driver's answer for an allocation the pool could not make: the error of a CUDA call that
/// failed for another reason than memory (a sticky error from earlier work on the stream, a
/// stream handle the driver refuses) is that call's, as the driver's own cuMemAllocAsync would
/// return it; every other failure is out of memory.
fn alloc_error_result(e: &crate::allocator::AllocError) -> CuResult {
    match e {
        crate::allocator::AllocError::Pool(gasan_uvm::UvmError::Cuda { code, .. }) if *code != CUDA_SUCCESS => *code,
        _ => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

/// A managed or pinned host allocation from the pool (host memory that the CPU and kernels share
/// at one address, checked like device memory; with several GPUs the current GPU's pool, whose
/// host blocks every GPU reaches: `State::host_memory_runtime`), or the driver's (tracked, checked
/// by host calls only) when `enabled` is off, the request is not one the pool serves (`valid`:
/// pointer, size and flags; the driver then answers, errors included), no pool serves host memory
/// now, or the pool cannot hold it.
fn alloc_host_memory(
    out: Out<u64>,
    size: usize,
    kind: ForeignKind,
    enabled: bool,
    valid: bool,
    alloc: impl FnOnce(&crate::allocator::Allocator) -> Result<u64, crate::allocator::AllocError>,
    real: impl FnOnce() -> CuResult,
) -> CuResult {
    let s = state();
    let Some(d) = s.host_memory_runtime().filter(|_| enabled && valid && !out.is_null() && size > 0) else {
        return track(real(), out, size, kind);
    };
    match alloc(&d.alloc) {
        Ok(p) => {
            out.set(p);
            CUDA_SUCCESS
        }
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("==gasan== a {kind:?} allocation of {size} bytes could not come from the pool ({e}); memory from the driver is not checked in kernels"));
            track(real(), out, size, kind)
        }
    }
}

/// `cuMemAllocManaged` (`cudaMallocManaged`): see [`alloc_host_memory`]; `managed_memory=0` leaves it
/// to the driver.
fn alloc_managed(dptr: Out<Dptr>, size: usize, flags: u32, real: impl FnOnce() -> CuResult) -> CuResult {
    use cudarc::driver::sys::CUmemAttach_flags::{CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST};
    let valid = flags == CU_MEM_ATTACH_GLOBAL as u32 || flags == CU_MEM_ATTACH_HOST as u32;
    alloc_host_memory(dptr, size, ForeignKind::Managed, state().opts.managed_memory, valid, |a| a.alloc_managed(size as u64), real)
}

/// Flags each pinned host block of the pool was allocated with (`cuMemHostGetFlags`).
fn host_flags() -> &'static std::sync::Mutex<std::collections::HashMap<u64, u32>> {
    static FLAGS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u64, u32>>> = std::sync::OnceLock::new();
    FLAGS.get_or_init(Default::default)
}

/// `cuMemHostAlloc` / `cuMemAllocHost` (`cudaHostAlloc`, `cudaMallocHost`): see
/// [`alloc_host_memory`]; `host_memory=0` leaves them to the driver.
fn alloc_host(pp: Out<*mut c_void>, size: usize, flags: u32, real: impl FnOnce() -> CuResult) -> CuResult {
    use cudarc::driver::sys::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED};
    let valid = flags & !(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED) == 0;
    let alloc = |a: &crate::allocator::Allocator| {
        let p = a.alloc_in(size as u64, None, Memory::Host)?;
        host_flags().lock().unwrap_or_else(|e| e.into_inner()).insert(p, flags);
        Ok(p)
    };
    alloc_host_memory(pp.cast(), size, ForeignKind::HostAlloc, state().opts.host_memory, valid, alloc, real)
}

/// The pool's pinned host block starting at `p`, if it is one.
fn pool_host_block(p: u64) -> Option<(u64, u64)> {
    state().runtime_owning(p)?.alloc.host_block_containing(p)
}

/// A prefetch, advice or stream attachment of `[ptr, ptr+len)`: answered with success when the
/// range lies in one managed block of the pool (its memory is where both processors reach it,
/// so there is nothing to move), else by the driver.
fn managed_hint(ptr: Dptr, len: usize, real: impl FnOnce() -> CuResult) -> CuResult {
    match state().runtime_owning(ptr) {
        Some(d) if d.alloc.managed_block(ptr, len.max(1) as u64).is_some() => CUDA_SUCCESS,
        _ => real(),
    }
}

/// A prefetch: a managed pool block moves to where it is sent ([`crate::managed`]); any other
/// range is the driver's.
fn prefetch(ptr: Dptr, len: usize, to_device: bool, real: impl FnOnce() -> CuResult) -> CuResult {
    crate::managed::prefetch(ptr, len as u64, to_device).unwrap_or_else(real)
}

/// Whether a `CUmemLocation` passed by value (`type` in the low 32 bits) names a device.
fn to_device(location: u64) -> bool {
    const CU_MEM_LOCATION_TYPE_DEVICE: u64 = cudarc::driver::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u64;
    location & 0xffff_ffff == CU_MEM_LOCATION_TYPE_DEVICE
}

/// The driver's answer for pointer attributes, corrected for pool blocks: a managed block reads
/// as managed device memory at its own address, and any block's range is the allocation, not
/// the chunk mapping behind it. `block` is the live pool block holding `ptr` (looked up once per
/// call, however many attributes it asks for).
///
/// # Safety
/// `data` is valid for writes of attribute `attr`'s type (the caller's contract).
unsafe fn fix_pointer_attribute(attr: u32, data: *mut c_void, ptr: Dptr, block: Option<crate::allocator::LiveBlock>) {
    use cudarc::driver::sys::{CUmemorytype, CUpointer_attribute as A};
    const MEMORY_TYPE: u32 = A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE as u32;
    const DEVICE_POINTER: u32 = A::CU_POINTER_ATTRIBUTE_DEVICE_POINTER as u32;
    const HOST_POINTER: u32 = A::CU_POINTER_ATTRIBUTE_HOST_POINTER as u32;
    const IS_MANAGED: u32 = A::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32;
    const RANGE_START_ADDR: u32 = A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR as u32;
    const RANGE_SIZE: u32 = A::CU_POINTER_ATTRIBUTE_RANGE_SIZE as u32;
    const IS_LEGACY_CUDA_IPC_CAPABLE: u32 = A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE as u32;
    const CU_MEMORYTYPE_DEVICE: u32 = CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
    let Some(b) = block.filter(|_| !data.is_null()) else { return };
    // SAFETY: `data` holds the attribute's type: an unsigned int (memory type, is-managed), a
    // pointer-sized address (pointers, range start) or a size_t (range size).
    unsafe {
        match attr {
            RANGE_START_ADDR => *data.cast::<u64>() = b.start,
            RANGE_SIZE => *data.cast::<usize>() = b.size as usize,
            MEMORY_TYPE if b.managed => *data.cast::<u32>() = CU_MEMORYTYPE_DEVICE,
            IS_MANAGED if b.managed => *data.cast::<u32>() = 1,
            DEVICE_POINTER | HOST_POINTER if b.managed => *data.cast::<u64>() = ptr,
            // cudaIpcGetMemHandle serves device blocks (gasan's IPC), as it does cudaMalloc memory.
            IS_LEGACY_CUDA_IPC_CAPABLE if !b.managed && b.memory == Memory::Device => *data.cast::<u32>() = 1,
            _ => {}
        }
    }
}

/// The current context's GPU may now (`enabled`) or no longer access the memory of `peer`'s GPU:
/// that GPU's pool grants or revokes it (its chunks, and their shadow and extent table read-only,
/// which the current GPU's checks read), now or when that pool is set up.
fn peer_access(peer: CUcontext, enabled: bool) {
    let s = state();
    let (Ok(owner), Some(me)) = (crate::driver::result::ctx_device(peer), crate::device::current_device()) else { return };
    if enabled {
        s.peer_access_enabled(owner, me);
    } else {
        s.peer_access_disabled(owner, me);
    }
}

/// For a memory pool's usage attribute: whether it is a peak (`*_HIGH`); `None` for the others.
/// "Reserved" reads as "used": gasan's blocks are not carved from a reservation.
fn pool_usage_attribute(attr: u32) -> Option<bool> {
    use cudarc::driver::sys::CUmemPool_attribute as A;
    match attr {
        a if a == A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT as u32 || a == A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT as u32 => Some(false),
        a if a == A::CU_MEMPOOL_ATTR_USED_MEM_HIGH as u32 || a == A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH as u32 => Some(true),
        _ => None,
    }
}

/// The live pool block holding `ptr`, for [`fix_pointer_attribute`] (none outside the pool).
fn pool_block(ptr: Dptr) -> Option<crate::allocator::LiveBlock> {
    state().runtime_owning(ptr)?.alloc.live_block(ptr)
}

/// Records a successful managed / host allocation whose address the driver wrote to `out`.
fn track(r: CuResult, out: Out<u64>, size: usize, kind: ForeignKind) -> CuResult {
    if let Some(p) = out.written(r) {
        let s = state();
        s.foreign.record(p, size as u64, kind, || s.outside_table(), s.opts.malloc_context_size);
    }
    r
}

fn do_free(call: &str, ptr: Dptr, stream: Option<Stream>, real: impl FnOnce() -> CuResult) -> CuResult {
    let by = if call == "cuMemFreeHost" { FreeCall::PinnedHost } else { FreeCall::Device };
    // As for an allocation (do_alloc): the stream's context first.
    let stream_context = stream.map(|st| crate::driver::result::current_context_for(st.0 as CUstream, None));
    let s = state();
    let Some(first) = s.device() else { return real() };
    if ptr == 0 {
        return CUDA_SUCCESS;
    }
    // The pool holding the block, whichever GPU's (the first's answers for addresses in none).
    let d = s.runtime_owning(ptr).unwrap_or(first);
    if stream.is_none() && d.alloc.owns(ptr) {
        // cuMemFree waits for the device's outstanding work (work on non-blocking streams
        // included) before the memory goes: poisoning or unmapping it earlier would fault or
        // report kernels that still use it legally. A sticky error from that work is returned
        // the way the driver returns it; others (a stream being captured cannot be waited for)
        // leave the free to go ahead, ordered by the legacy stream as before.
        if let Err(crate::driver::DriverError(r)) = crate::driver::result::ctx_synchronize() {
            if is_sticky(r) {
                return r;
            }
        }
    }
    let _context = stream_context.as_ref().filter(|g| !g.settled()).and(stream).map(|st| crate::driver::result::current_context_for(st.0 as CUstream, Some(d.device)));
    match d.alloc.free_by(ptr, stream, by) {
        Ok(()) => {
            s.ipc_withdraw(ptr);
            s.stream_ordered.freed(d.device, ptr);
            CUDA_SUCCESS
        }
        // The driver refuses the other kind's call too (cudaFree of pinned host memory,
        // cudaFreeHost of device or managed memory), silently: so does gasan.
        Err(FreeError::WrongCall { .. }) => INVALID,
        // Not ours and outside the pool: memory from before gasan (or another allocator) — let the driver decide.
        Err(FreeError::Unknown { in_pool: false, .. }) if real() == CUDA_SUCCESS => {
            s.foreign.forget(ptr, || s.outside_table(), s.opts.malloc_context_size);
            CUDA_SUCCESS
        }
        Err(err) => {
            s.errors.host_error(Report::Free { call: call.to_string(), err, stack: HostStack::capture(s.opts.malloc_context_size) });
            crate::driver::CUDA_ERROR_INVALID_VALUE
        }
    }
}

hooks! {
    real;
    // ---- allocation ----
    cuMemAlloc_v2(dptr: Out<Dptr>, size: usize) { do_alloc(dptr, size, None, || real(dptr, size)) }
    cuMemAllocAsync | cuMemAllocAsync_ptsz (dptr: Out<Dptr>, size: usize, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, stream)) }
    cuMemAllocFromPoolAsync | cuMemAllocFromPoolAsync_ptsz (dptr: Out<Dptr>, size: usize, pool: CUmemoryPool, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, pool, stream)) }
    cuMemAllocPitch_v2(dptr: Out<Dptr>, pitch: Out<usize>, width: usize, height: usize, elem: u32) {
        if pitch.is_null() || width == 0 || height == 0 {
            return real(dptr, pitch, width, height, elem);
        }
        // cudaMallocPitch rows are 512-byte aligned on current GPUs.
        let p = width.div_ceil(512) * 512;
        let r = do_alloc(dptr, p * height, None, || real(dptr, pitch, width, height, elem));
        if let (Some(d), Some(ptr)) = (state().device(), dptr.written(r)) {
            pitch.set(p);
            // The padding of every row is poisoned (a pool block: not one passed through).
            if p > width && d.alloc.owns(ptr) && !d.alloc.set_rows(ptr, width as u64, p as u64) {
                crate::state::log(1, || format!("row padding of pitched block {ptr:#x} left accessible"));
            }
        }
        r
    }
    // Memory pools' usage: the stream-ordered allocations the pool served (pool_stats.rs).
    cuMemPoolGetAttribute(pool: CUmemoryPool, attr: u32, value: *mut c_void) {
        match (pool_usage_attribute(attr), state().current_runtime()) {
            (Some(high), Some(d)) if !value.is_null() => {
                let u = state().stream_ordered.usage(d.device);
                // SAFETY: the four usage attributes are cuuint64_t values (cuda.h), and the caller
                // passes a pointer to one.
                unsafe { *value.cast::<u64>() = if high { u.high } else { u.current } };
                CUDA_SUCCESS
            }
            _ => real(pool, attr, value),
        }
    }
    cuMemPoolSetAttribute(pool: CUmemoryPool, attr: u32, value: *mut c_void) {
        // Resetting a peak (the driver accepts only 0 for it) starts gasan's from the current usage.
        if let (Some(true), Some(d)) = (pool_usage_attribute(attr), state().current_runtime()) {
            state().stream_ordered.reset_high(d.device);
        }
        real(pool, attr, value)
    }
    // VMM mappings the program (or a library) makes outside the pool: known, not checked
    // (ForeignKind::VmmMapping). A more exact record over one (ncclMemAlloc's size asked)
    // replaces it; an unmap forgets only a mapping record.
    cuMemMap(ptr: Dptr, size: usize, offset: usize, handle: u64, flags: u64) {
        let r = real(ptr, size, offset, handle, flags);
        if r == CUDA_SUCCESS && size > 0 {
            let s = state();
            if s.device().is_some() && s.runtime_owning(ptr).is_none() {
                s.foreign.record(ptr, size as u64, ForeignKind::VmmMapping, || s.outside_table(), s.opts.malloc_context_size);
            }
        }
        r
    }
    cuMemUnmap(ptr: Dptr, size: usize) {
        let r = real(ptr, size);
        if r == CUDA_SUCCESS {
            let s = state();
            if s.foreign.find(ptr).is_some_and(|f| f.kind == ForeignKind::VmmMapping && f.start == ptr) {
                s.foreign.forget(ptr, || s.outside_table(), s.opts.malloc_context_size);
            }
        }
        r
    }
    // Managed and host memory: the driver's, tracked in the side table.
    cuMemAllocManaged(dptr: Out<Dptr>, size: usize, flags: u32) { alloc_managed(dptr, size, flags, || real(dptr, size, flags)) }
    // Hints about managed memory: the pool's managed blocks need none (`location`: a
    // CUmemLocation, two ints, passed by value in one register).
    // CUDA 12's prototypes, which cuda.h 13.0 replaced by the _v2 ones (still exported).
    #[legacy] cuMemPrefetchAsync | cuMemPrefetchAsync_ptsz (ptr: Dptr, len: usize, device: i32, stream: CUstream) { prefetch(ptr, len, device >= 0, || real(ptr, len, device, stream)) }
    cuMemPrefetchAsync_v2 | cuMemPrefetchAsync_v2_ptsz (ptr: Dptr, len: usize, location: u64, flags: u32, stream: CUstream) { prefetch(ptr, len, to_device(location), || real(ptr, len, location, flags, stream)) }
    #[legacy] cuMemAdvise(ptr: Dptr, len: usize, advice: u32, device: i32) { managed_hint(ptr, len, || real(ptr, len, advice, device)) }
    cuMemAdvise_v2(ptr: Dptr, len: usize, advice: u32, location: u64) { managed_hint(ptr, len, || real(ptr, len, advice, location)) }
    cuStreamAttachMemAsync | cuStreamAttachMemAsync_ptsz (stream: CUstream, ptr: Dptr, len: usize, flags: u32) { managed_hint(ptr, len, || real(stream, ptr, len, flags)) }
    cuPointerGetAttribute(data: *mut c_void, attr: u32, ptr: Dptr) {
        let r = real(data, attr, ptr);
        // SAFETY: the caller's out-pointer for `attr`.
        if r == CUDA_SUCCESS { unsafe { fix_pointer_attribute(attr, data, ptr, pool_block(ptr)) } }
        r
    }
    cuPointerGetAttributes(count: u32, attrs: *mut u32, data: *mut *mut c_void, ptr: Dptr) {
        let r = real(count, attrs, data, ptr);
        if r == CUDA_SUCCESS && !attrs.is_null() && !data.is_null() {
            let block = pool_block(ptr);
            for i in 0..count as usize {
                // SAFETY: `attrs` and `data` hold `count` entries, each `data[i]` the caller's
                // out-pointer for `attrs[i]` (the driver just filled them).
                unsafe { fix_pointer_attribute(*attrs.add(i), *data.add(i), ptr, block) }
            }
        }
        r
    }
    cuMemHostAlloc(pp: Out<*mut c_void>, size: usize, flags: u32) { alloc_host(pp, size, flags, || real(pp, size, flags)) }
    cuMemAllocHost_v2(pp: Out<*mut c_void>, size: usize) { alloc_host(pp, size, 0, || real(pp, size)) }
    cuMemHostGetDevicePointer_v2(pdptr: Out<Dptr>, p: *mut c_void, flags: u32) {
        match pool_host_block(p as u64) {
            // Mapped for the device at its own address.
            Some(_) if !pdptr.is_null() && flags == 0 => {
                pdptr.set(p as Dptr);
                CUDA_SUCCESS
            }
            Some(_) => INVALID,
            None => real(pdptr, p, flags),
        }
    }
    cuMemHostGetFlags(pflags: Out<u32>, p: *mut c_void) {
        match pool_host_block(p as u64) {
            Some((start, _)) if !pflags.is_null() => {
                // Every pool host block is mapped for the device.
                let f = host_flags().lock().unwrap_or_else(|e| e.into_inner()).get(&start).copied().unwrap_or(0) | cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP;
                pflags.set(f);
                CUDA_SUCCESS
            }
            Some(_) => INVALID,
            None => real(pflags, p),
        }
    }
    cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: u32) {
        let r = real(p, size, flags);
        if r == CUDA_SUCCESS {
            let s = state();
            s.foreign.record(p as u64, size as u64, ForeignKind::HostRegistered, || s.outside_table(), s.opts.malloc_context_size);
            if !s.opts.outside_checks {
                // A coverage note, not a finding: a clean program stays silent at verbosity 0
                // (the exit summary at verbosity 1 counts registered host memory too).
                static NOTED: std::sync::Once = std::sync::Once::new();
                NOTED.call_once(|| crate::state::log(1, || "the program registers host memory (cudaHostRegister): host API calls check it; kernels' accesses to it are checked with outside_checks=1 (--outside-checks 1)".to_string()));
            }
        }
        r
    }
    cuMemFreeHost(p: *mut c_void) {
        if state().runtime_owning(p as u64).is_some() {
            let r = do_free("cuMemFreeHost", p as u64, None, || real(p));
            if r == CUDA_SUCCESS {
                host_flags().lock().unwrap_or_else(|e| e.into_inner()).remove(&(p as u64));
            }
            return r;
        }
        let s = state();
        s.foreign.forget(p as u64, || s.outside_table(), s.opts.malloc_context_size);
        real(p)
    }
    cuMemHostUnregister(p: *mut c_void) {
        let r = real(p);
        if r == CUDA_SUCCESS { let s = state(); s.foreign.forget(p as u64, || s.outside_table(), s.opts.malloc_context_size); }
        r
    }
    cuMemFree_v2(ptr: Dptr) { do_free("cuMemFree", ptr, None, || real(ptr)) }
    cuMemFreeAsync | cuMemFreeAsync_ptsz (ptr: Dptr, stream: CUstream) { do_free("cuMemFreeAsync", ptr, stream_of(stream), || real(ptr, stream)) }
    // ---- peer access: peer access does not cover the pool's (VMM) mappings; its pool grants it ----
    cuCtxEnablePeerAccess(peer: CUcontext, flags: u32) {
        let r = real(peer, flags);
        if r == CUDA_SUCCESS {
            peer_access(peer, true);
        }
        r
    }
    cuCtxDisablePeerAccess(peer: CUcontext) {
        let r = real(peer);
        if r == CUDA_SUCCESS {
            peer_access(peer, false);
        }
        r
    }
    // ---- IPC: pool blocks shared through gasan's IPC (the driver's does not export VMM memory) ----
    cuIpcGetMemHandle(handle: Out<cudarc::driver::sys::CUipcMemHandle>, ptr: Dptr) {
        if handle.is_null() {
            return real(handle, ptr);
        }
        match state().ipc_export(ptr) {
            None => real(handle, ptr),
            Some(Ok(bytes)) => {
                handle.set(cudarc::driver::sys::CUipcMemHandle { reserved: bytes.map(|b| b as c_char) });
                CUDA_SUCCESS
            }
            Some(Err(e)) => {
                crate::state::log(0, || format!("WARNING: cudaIpcGetMemHandle of pool memory at {ptr:#x} failed: {e}"));
                INVALID
            }
        }
    }
    cuIpcOpenMemHandle_v2(out: Out<Dptr>, handle: cudarc::driver::sys::CUipcMemHandle, flags: u32) {
        // A handle gasan gave out (its magic); any other is the driver's.
        let Ok(h) = gasan_uvm::ipc::IpcHandle::from_bytes(&handle.reserved.map(|c| c as u8)) else { return real(out, handle, flags) };
        if out.is_null() {
            return INVALID;
        }
        match state().ipc_open(&h) {
            Ok(p) => {
                out.set(p);
                CUDA_SUCCESS
            }
            Err(e) => {
                crate::state::log(0, || format!("WARNING: cudaIpcOpenMemHandle of process {}'s pool memory failed: {e}", h.pid));
                INVALID
            }
        }
    }
    cuIpcCloseMemHandle(ptr: Dptr) {
        if state().runtime_owning(ptr).is_some_and(|d| d.alloc.close_ipc(ptr)) { CUDA_SUCCESS } else { real(ptr) }
    }
    // Pool memory is not a VMM allocation of the program's: refused as for cudaMalloc memory
    // (docs/design.md, "What cuMemGetAddressRange answers for pool memory").
    cuMemRetainAllocationHandle(handle: Out<u64>, addr: *mut c_void) {
        if state().runtime_owning(addr as u64).is_some() { INVALID } else { real(handle, addr) }
    }
    cuMemGetAddressRange_v2(base: Out<Dptr>, size: Out<usize>, ptr: Dptr) {
        if let Some((b, n)) = state().runtime_owning(ptr).and_then(|d| d.alloc.allocation_containing(ptr)) {
            // Either out-pointer may be null.
            base.set(b);
            size.set(n as usize);
            return CUDA_SUCCESS;
        }
        real(base, size, ptr)
    }
}
