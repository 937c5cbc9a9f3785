//! Bodies of the intercepted driver calls. Each hook is exported under the driver's exact symbol
//! name (for `-lcuda` apps) and listed in [`table`] (for `cuGetProcAddress` / `dlsym`).
//!
//! Inside a hook, `real(args…)` calls the driver's own function of the same exact name.

use crate::allocator::{FreeCall, FreeError, HostStack};
use crate::copies::{box_span, CopyDescriptor, Memcpy2D, Memcpy3D};
use crate::driver::{CuResult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use crate::modules;
use crate::report::Report;
use crate::side_table::ForeignKind;
use crate::state::state;
use cudarc::driver::sys::{
    CUcontext, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphEdgeData, CUgraphNode, CUkernel, CUlaunchConfig, CUlibrary, CUlinkState, CUmemcpyAttributes, CUmemoryPool, CUmodule, CUstream,
};
use gasan_uvm::{Memory, Stream};
use std::ffi::{c_char, c_void, CStr};

type Dptr = CUdeviceptr;

/// Sticky errors after which the context is dead: a `trap` (launch failed) or an MMU fault
/// (illegal address), etc.
fn is_sticky(r: CuResult) -> bool {
    use cudarc::driver::sys::CUresult as E;
    const STICKY: [CuResult; 7] = [
        E::CUDA_ERROR_ILLEGAL_ADDRESS as CuResult,
        E::CUDA_ERROR_HARDWARE_STACK_ERROR as CuResult,
        E::CUDA_ERROR_ILLEGAL_INSTRUCTION as CuResult,
        E::CUDA_ERROR_MISALIGNED_ADDRESS as CuResult,
        E::CUDA_ERROR_INVALID_ADDRESS_SPACE as CuResult,
        E::CUDA_ERROR_INVALID_PC as CuResult,
        E::CUDA_ERROR_LAUNCH_FAILED as CuResult,
    ];
    STICKY.contains(&r)
}

fn guard(name: &'static str, f: impl FnOnce() -> CuResult) -> CuResult {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("==gasan== internal error in {name}");
        crate::driver::CUDA_ERROR_UNKNOWN
    });
    if is_sticky(r) {
        state().on_device_error(r, name);
    }
    r
}

// Hook parameters carry the driver's own types (cudarc's `driver::sys`: handles, launch
// configurations, copy attributes); enum-valued ones (JIT options, pointer attributes, memory
// types) stay integers, because a value the Rust enum does not list, from a newer driver or a
// program, would be undefined behaviour as that enum.
macro_rules! hooks {
    ($real:ident; $( $name:ident ( $($arg:ident : $t:ty),* ) $body:block )*) => {
        $(
            /// # Safety
            /// Called by the program with the contract of the driver function of the same name.
            #[unsafe(no_mangle)]
            #[allow(non_snake_case, unused_variables)]
            pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
                static REAL: crate::driver::RealFn = crate::driver::RealFn::new(stringify!($name));
                #[allow(unused)]
                let $real = |$($arg: $t),*| -> CuResult {
                    type F = unsafe extern "C" fn($($t),*) -> CuResult;
                    // SAFETY: the hook's signature is the driver function's of the same name.
                    let Some(f) = (unsafe { REAL.typed::<F>() }) else {
                        return crate::driver::CUDA_ERROR_UNKNOWN;
                    };
                    // SAFETY: `f` is the driver's function of this hook's exact name. Each hook
                    // calls `real` with its own arguments, which the program passed under that
                    // function's contract (the hook's `# Safety`), except where a hook substitutes
                    // checked code for the program's image or link input: that is an image of a
                    // kind the function accepts (a link input's type set to match), alive for the
                    // call and after it (leaked once loaded; a link's checked PTX is kept until
                    // cuLinkDestroy).
                    unsafe { f($($arg),*) }
                };
                guard(stringify!($name), move || $body)
            }
        )*
        /// Every hook: (exact driver symbol, our wrapper).
        pub fn table() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name), $name as *const () as usize)),*]
        }

        /// Every hook's parameters as declared here: (exact driver symbol, the size of each), which
        /// a test holds to cuda.h's prototype of the same function (enum parameters are integers
        /// here on purpose: a program may pass values the enum lacks).
        pub fn parameter_sizes() -> Vec<(&'static str, Vec<usize>)> {
            vec![$((stringify!($name), vec![$(std::mem::size_of::<$t>()),*])),*]
        }
    };
}

fn stream_of(s: CUstream) -> Option<Stream> {
    Some(Stream(s as usize))
}

fn do_alloc(dptr: *mut Dptr, size: usize, stream: Option<Stream>, real: impl FnOnce() -> CuResult) -> CuResult {
    let s = state();
    let Some(d) = s.device() else { return real() };
    if dptr.is_null() || size == 0 {
        return real();
    }
    if d.multi_gpu && crate::state::current_device() != Some(d.device) {
        // The pool lives on the first GPU the program used; another GPU's memory must stay on that
        // GPU, so it passes through (unchecked, tracked) rather than coming from the pool.
        let r = real();
        if r == CUDA_SUCCESS {
            // SAFETY: the driver just wrote the allocation's address.
            s.foreign_insert(unsafe { *dptr }, size as u64, ForeignKind::OtherDevice);
            crate::state::log(2, || format!("{size} bytes on device {:?} passed through (pool on device {})", crate::state::current_device(), d.device));
        }
        return r;
    }
    match d.alloc.alloc(size as u64, stream) {
        Ok(p) => {
            // SAFETY: the caller's out-pointer.
            unsafe { *dptr = p };
            CUDA_SUCCESS
        }
        Err(e) => {
            crate::state::log(1, || format!("allocation of {size} bytes failed: {e}"));
            CUDA_ERROR_OUT_OF_MEMORY
        }
    }
}

/// A managed or pinned host allocation from the pool (host memory that the CPU and kernels share
/// at one address, checked like device memory), or the driver's (tracked, checked by host calls
/// only) when `enabled` is off, the request is not one the pool serves (`valid`: pointer, size and
/// flags; the driver then answers, errors included), on a GPU other than the pool's, or when the
/// pool cannot hold it.
fn alloc_host_memory(
    out: *mut u64,
    size: usize,
    kind: ForeignKind,
    enabled: bool,
    valid: bool,
    alloc: impl FnOnce(&crate::allocator::Allocator) -> Result<u64, crate::allocator::AllocError>,
    real: impl FnOnce() -> CuResult,
) -> CuResult {
    let s = state();
    let Some(d) = s.device().filter(|d| enabled && valid && !out.is_null() && size > 0 && !(d.multi_gpu && crate::state::current_device() != Some(d.device))) else {
        return track(real(), out, size, kind);
    };
    match alloc(&d.alloc) {
        Ok(p) => {
            // SAFETY: the caller's out-pointer (checked non-null above).
            unsafe { *out = p };
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
fn alloc_managed(dptr: *mut Dptr, size: usize, flags: u32, real: impl FnOnce() -> CuResult) -> CuResult {
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
fn alloc_host(pp: *mut *mut c_void, size: usize, flags: u32, real: impl FnOnce() -> CuResult) -> CuResult {
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
    state().device()?.alloc.host_block_containing(p)
}

/// A prefetch, advice or stream attachment of `[ptr, ptr+len)`: answered with success when the
/// range lies in one managed block of the pool (its memory is where both processors reach it,
/// so there is nothing to move), else by the driver.
fn managed_hint(ptr: Dptr, len: usize, real: impl FnOnce() -> CuResult) -> CuResult {
    match state().device() {
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
            _ => {}
        }
    }
}

/// The live pool block holding `ptr`, for [`fix_pointer_attribute`] (none outside the pool).
fn pool_block(ptr: Dptr) -> Option<crate::allocator::LiveBlock> {
    state().device().filter(|d| d.alloc.owns(ptr))?.alloc.live_block(ptr)
}

/// Records a successful managed / host allocation whose address the driver wrote to `out`.
fn track(r: CuResult, out: *const u64, size: usize, kind: ForeignKind) -> CuResult {
    if r == CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the driver just wrote the allocation's address there.
        state().foreign_insert(unsafe { *out }, size as u64, kind);
    }
    r
}

fn do_free(call: &str, ptr: Dptr, stream: Option<Stream>, real: impl FnOnce() -> CuResult) -> CuResult {
    let by = if call == "cuMemFreeHost" { FreeCall::PinnedHost } else { FreeCall::Device };
    let s = state();
    let Some(d) = s.device() else { return real() };
    if ptr == 0 {
        return CUDA_SUCCESS;
    }
    if stream.is_none() && d.alloc.owns(ptr) {
        // cuMemFree waits for the device's outstanding work (work on non-blocking streams
        // included) before the memory goes: poisoning or unmapping it earlier would fault or
        // report kernels that still use it legally. A sticky error from that work is returned
        // the way the driver returns it; others (a stream being captured cannot be waited for)
        // leave the free to go ahead, ordered by the legacy stream as before.
        let r = crate::driver::api::cuCtxSynchronize();
        if is_sticky(r) {
            return r;
        }
    }
    match d.alloc.free_by(ptr, stream, by) {
        Ok(()) => CUDA_SUCCESS,
        // The driver refuses the other kind's call too (cudaFree of pinned host memory,
        // cudaFreeHost of device or managed memory), silently: so does gasan.
        Err(FreeError::WrongCall { .. }) => INVALID,
        // Not ours and outside the pool: memory from before gasan (or another allocator) — let the driver decide.
        Err(FreeError::Unknown { in_pool: false, .. }) if real() == CUDA_SUCCESS => {
            s.foreign_remove(ptr);
            CUDA_SUCCESS
        }
        Err(err) => {
            s.host_error(Report::Free { call: call.to_string(), err, stack: HostStack::capture(s.opts.malloc_context_size) });
            crate::driver::CUDA_ERROR_INVALID_VALUE
        }
    }
}

/// Checks `[addr, addr+len)` of a host API call before it runs: pool memory against its
/// allocations, managed and pinned host memory (`cuMemHostAlloc`) against their tracked sizes
/// (registered host memory is not: ranges past it are ordinary pageable memory).
fn check_range(call: &str, addr: Dptr, len: usize, write: bool) -> bool {
    let s = state();
    let Some(d) = s.device() else { return true };
    let mut checked = d.alloc.check_range(addr, len as u64);
    if checked.is_ok() {
        let overflow =
            s.foreign.find(addr).filter(|r| matches!(r.kind, ForeignKind::Managed | ForeignKind::HostAlloc)).and_then(|r| crate::side_table::range_overflow(&r, addr, len as u64, d.alloc.scale()));
        if let Some(desc) = overflow {
            checked = Err(crate::allocator::RangeError { addr, len: len as u64, bad: desc.addr, desc });
        }
    }
    match checked {
        Ok(()) => true,
        Err(e) => {
            s.host_error(Report::Api { call: call.to_string(), addr, len: len as u64, write, desc: e.desc, stack: HostStack::capture(s.opts.malloc_context_size) });
            false
        }
    }
}

/// Checks the device sides of a 2D / 3D copy descriptor before the call.
fn check_copy<T: CopyDescriptor>(call: &str, p: *const T) -> bool {
    if p.is_null() {
        return true; // the driver answers CUDA_ERROR_INVALID_VALUE itself
    }
    // SAFETY: the caller passed a descriptor of this type (cuda.h layout, size asserted).
    let (src, dst) = unsafe { &*p }.spans();
    src.is_none_or(|s| check_range(call, s.addr, s.len as usize, false)) && dst.is_none_or(|d| check_range(call, d.addr, d.len as usize, true))
}

/// Checks every copy of a batch (each side may be host or device memory; only pool memory is checked).
fn check_batch(call: &str, dsts: *const Dptr, srcs: *const Dptr, sizes: *const usize, count: usize) -> bool {
    if dsts.is_null() || srcs.is_null() || sizes.is_null() {
        return true; // the driver answers CUDA_ERROR_INVALID_VALUE itself
    }
    // SAFETY: the caller passes `count` entries in each array, as the API requires.
    let (d, s, n) = unsafe { (std::slice::from_raw_parts(dsts, count), std::slice::from_raw_parts(srcs, count), std::slice::from_raw_parts(sizes, count)) };
    (0..count).all(|i| check_range(call, s[i], n[i], false) && check_range(call, d[i], n[i], true))
}

/// Checks a pitched 2D memset (`width_bytes` per row, `h` rows).
fn check_set2d(call: &str, dst: Dptr, pitch: usize, width_bytes: usize, h: usize) -> bool {
    box_span(dst, 0, 0, 0, pitch as u64, 0, width_bytes as u64, h as u64, 1).is_none_or(|s| check_range(call, s.addr, s.len as usize, true))
}

fn after_sync(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS {
        state().check_after_sync();
    }
    r
}

fn before_launch() {
    let s = state();
    if s.has_pending.load(std::sync::atomic::Ordering::Acquire) {
        s.device();
        s.flush_pending();
    }
}

/// A launch: pending control blocks written, then the driver called through `go` with the
/// argument array — with block bounds in the pointer arguments of a recorded checked kernel
/// (crate::arg_bounds), else the program's (an argument buffer in `extra`, the option off, a
/// kernel gasan did not see handed out).
fn launch(f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void, go: impl FnOnce(*mut *mut c_void) -> CuResult) -> CuResult {
    before_launch();
    let s = state();
    // Counted only for the summary that prints them (an atomic every thread shares, per launch).
    let count = s.opts.verbosity >= 1;
    if count {
        s.counters.launches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if !s.opts.arg_bounds || !extra.is_null() {
        return go(params);
    }
    // SAFETY: `params` is the launch's argument array for `f` (cuLaunchKernel's contract, which
    // the hook's caller follows), as with_bounds requires. (The pool is asked only for a checked
    // kernel's arguments: loading its module set the device runtime up.)
    unsafe {
        crate::arg_bounds::with_bounds(
            f as usize,
            params,
            |v| s.device()?.alloc.accessible_granules(v),
            |array, tagged| {
                if tagged && count {
                    s.counters.launches_tagged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                go(array)
            },
        )
    }
}

/// Records the handle a getter just wrote to `out` (when it succeeded) for `owner`'s `name`.
fn record_function<T>(r: CuResult, out: *mut *mut T, owner: usize, name: *const c_char) -> CuResult {
    if r == CUDA_SUCCESS && !out.is_null() && !name.is_null() {
        // SAFETY: the getter succeeded, so it wrote the handle to `out` (non-null, checked), and
        // `name` (non-null, checked) is the NUL-terminated name the program passed it.
        let (h, n) = unsafe { (*out as usize, CStr::from_ptr(name)) };
        crate::arg_bounds::on_function(owner, n, h);
    }
    r
}

/// Records, when the getter succeeded, that the handle it wrote to `out` names what `from` names
/// (`record`: crate::arg_bounds::on_kernel_function or on_library_module).
fn record_alias<T>(r: CuResult, out: *mut *mut T, from: usize, record: fn(usize, usize)) -> CuResult {
    if r == CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the getter succeeded, so it wrote the handle to `out` (non-null, checked).
        record(from, unsafe { *out } as usize);
    }
    r
}

/// Ends a stream capture's count when the driver ended the capture (also when it was invalidated).
fn capture_ended(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS || r == cudarc::driver::sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED as CuResult {
        crate::arg_bounds::on_capture(false);
    }
    r
}

fn capture_began(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS {
        crate::arg_bounds::on_capture(true);
    }
    r
}

const INVALID: CuResult = crate::driver::CUDA_ERROR_INVALID_VALUE;

hooks! {
    real;
    // ---- allocation ----
    cuMemAlloc_v2(dptr: *mut Dptr, size: usize) { do_alloc(dptr, size, None, || real(dptr, size)) }
    cuMemAllocAsync(dptr: *mut Dptr, size: usize, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, stream)) }
    cuMemAllocAsync_ptsz(dptr: *mut Dptr, size: usize, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, stream)) }
    cuMemAllocFromPoolAsync(dptr: *mut Dptr, size: usize, pool: CUmemoryPool, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, pool, stream)) }
    cuMemAllocFromPoolAsync_ptsz(dptr: *mut Dptr, size: usize, pool: CUmemoryPool, stream: CUstream) { do_alloc(dptr, size, stream_of(stream), || real(dptr, size, pool, stream)) }
    cuMemAllocPitch_v2(dptr: *mut Dptr, pitch: *mut usize, width: usize, height: usize, elem: u32) {
        if pitch.is_null() || width == 0 || height == 0 {
            return real(dptr, pitch, width, height, elem);
        }
        // cudaMallocPitch rows are 512-byte aligned on current GPUs.
        let p = width.div_ceil(512) * 512;
        let r = do_alloc(dptr, p * height, None, || real(dptr, pitch, width, height, elem));
        if r == CUDA_SUCCESS {
            if let Some(d) = state().device() {
                // SAFETY: `pitch` is the caller's out-pointer (non-null, checked above), valid for
                // writes under cuMemAllocPitch's contract.
                unsafe { *pitch = p };
                // The padding of every row is poisoned (a pool block: not one passed through).
                // SAFETY: the allocation succeeded, so `dptr` (the caller's out-pointer) is
                // non-null and do_alloc or the driver just wrote the block's address there.
                let ptr = unsafe { *dptr };
                if p > width && d.alloc.owns(ptr) && !d.alloc.set_rows(ptr, width as u64, p as u64) {
                    crate::state::log(1, || format!("row padding of pitched block {ptr:#x} left accessible"));
                }
            }
        }
        r
    }
    cuMemcpyBatchAsync_v2(dsts: *mut Dptr, srcs: *mut Dptr, sizes: *mut usize, count: usize, attrs: *mut CUmemcpyAttributes, idx: *mut usize, nattrs: usize, stream: CUstream) {
        if !check_batch("cuMemcpyBatchAsync", dsts, srcs, sizes, count) { return INVALID; }
        real(dsts, srcs, sizes, count, attrs, idx, nattrs, stream)
    }
    cuMemcpyBatchAsync_v2_ptsz(dsts: *mut Dptr, srcs: *mut Dptr, sizes: *mut usize, count: usize, attrs: *mut CUmemcpyAttributes, idx: *mut usize, nattrs: usize, stream: CUstream) {
        if !check_batch("cuMemcpyBatchAsync", dsts, srcs, sizes, count) { return INVALID; }
        real(dsts, srcs, sizes, count, attrs, idx, nattrs, stream)
    }
    // Managed and host memory: the driver's, tracked in the side table.
    cuMemAllocManaged(dptr: *mut Dptr, size: usize, flags: u32) { alloc_managed(dptr, size, flags, || real(dptr, size, flags)) }
    // Hints about managed memory: the pool's managed blocks need none (`location`: a
    // CUmemLocation, two ints, passed by value in one register).
    cuMemPrefetchAsync(ptr: Dptr, len: usize, device: i32, stream: CUstream) { prefetch(ptr, len, device >= 0, || real(ptr, len, device, stream)) }
    cuMemPrefetchAsync_ptsz(ptr: Dptr, len: usize, device: i32, stream: CUstream) { prefetch(ptr, len, device >= 0, || real(ptr, len, device, stream)) }
    cuMemPrefetchAsync_v2(ptr: Dptr, len: usize, location: u64, flags: u32, stream: CUstream) { prefetch(ptr, len, to_device(location), || real(ptr, len, location, flags, stream)) }
    cuMemPrefetchAsync_v2_ptsz(ptr: Dptr, len: usize, location: u64, flags: u32, stream: CUstream) { prefetch(ptr, len, to_device(location), || real(ptr, len, location, flags, stream)) }
    cuMemAdvise(ptr: Dptr, len: usize, advice: u32, device: i32) { managed_hint(ptr, len, || real(ptr, len, advice, device)) }
    cuMemAdvise_v2(ptr: Dptr, len: usize, advice: u32, location: u64) { managed_hint(ptr, len, || real(ptr, len, advice, location)) }
    cuStreamAttachMemAsync(stream: CUstream, ptr: Dptr, len: usize, flags: u32) { managed_hint(ptr, len, || real(stream, ptr, len, flags)) }
    cuStreamAttachMemAsync_ptsz(stream: CUstream, ptr: Dptr, len: usize, flags: u32) { managed_hint(ptr, len, || real(stream, ptr, len, flags)) }
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
    cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: u32) { alloc_host(pp, size, flags, || real(pp, size, flags)) }
    cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) { alloc_host(pp, size, 0, || real(pp, size)) }
    cuMemHostGetDevicePointer_v2(pdptr: *mut Dptr, p: *mut c_void, flags: u32) {
        match pool_host_block(p as u64) {
            // Mapped for the device at its own address.
            Some(_) if !pdptr.is_null() && flags == 0 => {
                // SAFETY: the caller's out-pointer.
                unsafe { *pdptr = p as Dptr };
                CUDA_SUCCESS
            }
            Some(_) => INVALID,
            None => real(pdptr, p, flags),
        }
    }
    cuMemHostGetFlags(pflags: *mut u32, p: *mut c_void) {
        match pool_host_block(p as u64) {
            Some((start, _)) if !pflags.is_null() => {
                // Every pool host block is mapped for the device.
                let f = host_flags().lock().unwrap_or_else(|e| e.into_inner()).get(&start).copied().unwrap_or(0) | cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP;
                // SAFETY: the caller's out-pointer.
                unsafe { *pflags = f };
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
            s.foreign_insert(p as u64, size as u64, ForeignKind::HostRegistered);
            if !s.opts.outside_checks {
                static NOTED: std::sync::Once = std::sync::Once::new();
                NOTED.call_once(|| eprintln!("==gasan== the program registers host memory (cudaHostRegister): host API calls check it; kernels' accesses to it are checked with outside_checks=1 (--outside-checks 1)"));
            }
        }
        r
    }
    cuMemFreeHost(p: *mut c_void) {
        if state().device().is_some_and(|d| d.alloc.owns(p as u64)) {
            let r = do_free("cuMemFreeHost", p as u64, None, || real(p));
            if r == CUDA_SUCCESS {
                host_flags().lock().unwrap_or_else(|e| e.into_inner()).remove(&(p as u64));
            }
            return r;
        }
        state().foreign_remove(p as u64);
        real(p)
    }
    cuMemHostUnregister(p: *mut c_void) {
        let r = real(p);
        if r == CUDA_SUCCESS { state().foreign_remove(p as u64); }
        r
    }
    cuMemFree_v2(ptr: Dptr) { do_free("cuMemFree", ptr, None, || real(ptr)) }
    cuMemFreeAsync(ptr: Dptr, stream: CUstream) { do_free("cuMemFreeAsync", ptr, stream_of(stream), || real(ptr, stream)) }
    cuMemFreeAsync_ptsz(ptr: Dptr, stream: CUstream) { do_free("cuMemFreeAsync", ptr, stream_of(stream), || real(ptr, stream)) }
    cuMemGetAddressRange_v2(base: *mut Dptr, size: *mut usize, ptr: Dptr) {
        if let Some((b, n)) = state().device().and_then(|d| d.alloc.allocation_containing(ptr)) {
            // SAFETY: caller's out-pointers (either may be null).
            unsafe {
                if !base.is_null() { *base = b; }
                if !size.is_null() { *size = n as usize; }
            }
            return CUDA_SUCCESS;
        }
        real(base, size, ptr)
    }

    // ---- host copies and sets: ranges checked before the call ----
    cuMemcpyHtoD_v2(dst: Dptr, src: *const c_void, n: usize) { if !check_range("cuMemcpyHtoD", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyHtoD_v2_ptds(dst: Dptr, src: *const c_void, n: usize) { if !check_range("cuMemcpyHtoD", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyDtoH_v2(dst: *mut c_void, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoH", src, n, false) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoH", src, n, false) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyDtoD_v2(dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoD", src, n, false) || !check_range("cuMemcpyDtoD", dst, n, true) { return INVALID; } real(dst, src, n) }
    cuMemcpyDtoD_v2_ptds(dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoD", src, n, false) || !check_range("cuMemcpyDtoD", dst, n, true) { return INVALID; } real(dst, src, n) }
    cuMemcpy(dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpy", src, n, false) || !check_range("cuMemcpy", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpy_ptds(dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpy", src, n, false) || !check_range("cuMemcpy", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyAsync(dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyAsync", src, n, false) || !check_range("cuMemcpyAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyAsync_ptsz(dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyAsync", src, n, false) || !check_range("cuMemcpyAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyHtoDAsync_v2(dst: Dptr, src: *const c_void, n: usize, stream: CUstream) { if !check_range("cuMemcpyHtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyHtoDAsync_v2_ptsz(dst: Dptr, src: *const c_void, n: usize, stream: CUstream) { if !check_range("cuMemcpyHtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoHAsync", src, n, false) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoHAsync", src, n, false) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoDAsync_v2(dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoDAsync", src, n, false) || !check_range("cuMemcpyDtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoDAsync_v2_ptsz(dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoDAsync", src, n, false) || !check_range("cuMemcpyDtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemsetD8_v2(dst: Dptr, v: u8, n: usize) { if !check_range("cuMemsetD8", dst, n, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD8_v2_ptds(dst: Dptr, v: u8, n: usize) { if !check_range("cuMemsetD8", dst, n, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD16_v2(dst: Dptr, v: u16, n: usize) { if !check_range("cuMemsetD16", dst, n * 2, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD16_v2_ptds(dst: Dptr, v: u16, n: usize) { if !check_range("cuMemsetD16", dst, n * 2, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD32_v2(dst: Dptr, v: u32, n: usize) { if !check_range("cuMemsetD32", dst, n * 4, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD32_v2_ptds(dst: Dptr, v: u32, n: usize) { if !check_range("cuMemsetD32", dst, n * 4, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD8Async(dst: Dptr, v: u8, n: usize, stream: CUstream) { if !check_range("cuMemsetD8Async", dst, n, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD8Async_ptsz(dst: Dptr, v: u8, n: usize, stream: CUstream) { if !check_range("cuMemsetD8Async", dst, n, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD16Async(dst: Dptr, v: u16, n: usize, stream: CUstream) { if !check_range("cuMemsetD16Async", dst, n * 2, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD16Async_ptsz(dst: Dptr, v: u16, n: usize, stream: CUstream) { if !check_range("cuMemsetD16Async", dst, n * 2, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD32Async(dst: Dptr, v: u32, n: usize, stream: CUstream) { if !check_range("cuMemsetD32Async", dst, n * 4, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD32Async_ptsz(dst: Dptr, v: u32, n: usize, stream: CUstream) { if !check_range("cuMemsetD32Async", dst, n * 4, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemcpy2D_v2(p: *const Memcpy2D) { if !check_copy("cuMemcpy2D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2D_v2_ptds(p: *const Memcpy2D) { if !check_copy("cuMemcpy2D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2DUnaligned_v2(p: *const Memcpy2D) { if !check_copy("cuMemcpy2DUnaligned", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2DUnaligned_v2_ptds(p: *const Memcpy2D) { if !check_copy("cuMemcpy2DUnaligned", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2DAsync_v2(p: *const Memcpy2D, stream: CUstream) { if !check_copy("cuMemcpy2DAsync", p) { return INVALID; } real(p, stream) }
    cuMemcpy2DAsync_v2_ptsz(p: *const Memcpy2D, stream: CUstream) { if !check_copy("cuMemcpy2DAsync", p) { return INVALID; } real(p, stream) }
    cuMemcpy3D_v2(p: *const Memcpy3D) { if !check_copy("cuMemcpy3D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy3D_v2_ptds(p: *const Memcpy3D) { if !check_copy("cuMemcpy3D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy3DAsync_v2(p: *const Memcpy3D, stream: CUstream) { if !check_copy("cuMemcpy3DAsync", p) { return INVALID; } real(p, stream) }
    cuMemcpy3DAsync_v2_ptsz(p: *const Memcpy3D, stream: CUstream) { if !check_copy("cuMemcpy3DAsync", p) { return INVALID; } real(p, stream) }
    cuMemsetD2D8_v2(dst: Dptr, pitch: usize, v: u8, w: usize, h: usize) { if !check_set2d("cuMemsetD2D8", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D8_v2_ptds(dst: Dptr, pitch: usize, v: u8, w: usize, h: usize) { if !check_set2d("cuMemsetD2D8", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D8Async(dst: Dptr, pitch: usize, v: u8, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D8Async", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D8Async_ptsz(dst: Dptr, pitch: usize, v: u8, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D8Async", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D16_v2(dst: Dptr, pitch: usize, v: u16, w: usize, h: usize) { if !check_set2d("cuMemsetD2D16", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D16_v2_ptds(dst: Dptr, pitch: usize, v: u16, w: usize, h: usize) { if !check_set2d("cuMemsetD2D16", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D16Async(dst: Dptr, pitch: usize, v: u16, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D16Async", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D16Async_ptsz(dst: Dptr, pitch: usize, v: u16, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D16Async", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D32_v2(dst: Dptr, pitch: usize, v: u32, w: usize, h: usize) { if !check_set2d("cuMemsetD2D32", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D32_v2_ptds(dst: Dptr, pitch: usize, v: u32, w: usize, h: usize) { if !check_set2d("cuMemsetD2D32", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D32Async(dst: Dptr, pitch: usize, v: u32, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D32Async", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D32Async_ptsz(dst: Dptr, pitch: usize, v: u32, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D32Async", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }

    // ---- synchronization: the error ring is drained here ----
    // The checked device heap is sized by this limit (device_heap.rs).
    cuCtxSetLimit(limit: i32, value: usize) {
        let r = real(limit, value);
        if r == CUDA_SUCCESS && limit == crate::device_heap::CU_LIMIT_MALLOC_HEAP_SIZE {
            state().malloc_heap_limit_set(value as u64);
        }
        r
    }
    cuCtxSynchronize() { after_sync(real()) }
    // CUDA 13's cuCtxSynchronize (what cuGetProcAddress returns for version 13000) takes the context.
    cuCtxSynchronize_v2(ctx: CUcontext) { after_sync(real(ctx)) }
    cuStreamQuery(stream: CUstream) { after_sync(real(stream)) }
    cuStreamQuery_ptsz(stream: CUstream) { after_sync(real(stream)) }
    cuEventQuery(event: CUevent) { after_sync(real(event)) }
    cuStreamSynchronize(stream: CUstream) { after_sync(real(stream)) }
    cuStreamSynchronize_ptsz(stream: CUstream) { after_sync(real(stream)) }
    cuEventSynchronize(event: CUevent) { after_sync(real(event)) }

    // ---- launches: control blocks of modules loaded before the pool existed; bounds in arguments ----
    cuLaunchKernel(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) {
        launch(f, params, extra, |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p, extra))
    }
    cuLaunchKernel_ptsz(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) {
        launch(f, params, extra, |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p, extra))
    }
    cuLaunchCooperativeKernel(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void) {
        launch(f, params, std::ptr::null_mut(), |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p))
    }
    cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void) {
        launch(f, params, std::ptr::null_mut(), |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p))
    }
    cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) { launch(f, params, extra, |p| real(config, f, p, extra)) }
    cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) { launch(f, params, extra, |p| real(config, f, p, extra)) }

    // ---- which kernels launches name (crate::arg_bounds) ----
    cuModuleGetFunction(out: *mut CUfunction, module: CUmodule, name: *const c_char) { record_function(real(out, module, name), out, module as usize, name) }
    cuLibraryGetKernel(out: *mut CUkernel, library: CUlibrary, name: *const c_char) { record_function(real(out, library, name), out, library as usize, name) }
    cuKernelGetFunction(out: *mut CUfunction, kernel: CUkernel) { record_alias(real(out, kernel), out, kernel as usize, crate::arg_bounds::on_kernel_function) }
    cuLibraryGetModule(out: *mut CUmodule, library: CUlibrary) { record_alias(real(out, library), out, library as usize, crate::arg_bounds::on_library_module) }
    cuModuleUnload(module: CUmodule) { crate::arg_bounds::on_unload(Some(module as usize)); real(module) }
    cuLibraryUnload(library: CUlibrary) { crate::arg_bounds::on_unload(Some(library as usize)); real(library) }
    cuCtxDestroy_v2(ctx: CUcontext) { crate::arg_bounds::on_unload(None); crate::prefetch::on_context_gone(Some(ctx as usize)); real(ctx) }
    cuDevicePrimaryCtxReset_v2(dev: i32) { crate::arg_bounds::on_unload(None); crate::prefetch::on_context_gone(None); real(dev) }
    cuDevicePrimaryCtxRelease_v2(dev: i32) {
        crate::arg_bounds::on_unload(None);
        let r = real(dev);
        // The context goes only with its last reference.
        let (mut flags, mut active) = (0u32, 0i32);
        if crate::driver::api::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active) != 0 || active == 0 {
            crate::prefetch::on_context_gone(None);
        }
        r
    }
    cuStreamBeginCapture_v2(stream: CUstream, mode: i32) { capture_began(real(stream, mode)) }
    cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: i32) { capture_began(real(stream, mode)) }
    cuStreamBeginCaptureToGraph(stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, data: *const CUgraphEdgeData, n: usize, mode: i32) { capture_began(real(stream, graph, deps, data, n, mode)) }
    cuStreamBeginCaptureToGraph_ptsz(stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, data: *const CUgraphEdgeData, n: usize, mode: i32) { capture_began(real(stream, graph, deps, data, n, mode)) }
    cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) { capture_ended(real(stream, graph)) }
    cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut CUgraph) { capture_ended(real(stream, graph)) }

    // ---- module loading ----
    cuLinkCreate_v2(n: u32, o: *mut i32, v: *mut *mut c_void, st: *mut CUlinkState) {
        let r = real(n, o, v, st);
        // SAFETY: cuLinkCreate succeeded, so the driver wrote the new link to `*st`, the
        // caller's (non-null) out-pointer.
        if r == CUDA_SUCCESS && !st.is_null() { crate::link::on_create(unsafe { *st } as usize); }
        r
    }
    cuLinkAddData_v2(st: CUlinkState, ty: i32, data: *mut c_void, size: usize, name: *const c_char, n: u32, o: *mut i32, v: *mut *mut c_void) {
        // SAFETY: checked_input needs `data` to point to `size` readable bytes (or be null, which
        // it checks); cuLinkAddData's contract asks the same of the program.
        match unsafe { crate::link::checked_input(st as usize, ty, data, size) } {
            Some((p, len)) => real(st, crate::link::CU_JIT_INPUT_PTX, p as *mut c_void, len, name, n, o, v),
            None => real(st, ty, data, size, name, n, o, v),
        }
    }
    cuLinkAddFile_v2(st: CUlinkState, ty: i32, path: *const c_char, n: u32, o: *mut i32, v: *mut *mut c_void) {
        // The data entry point a checked input goes through (a libcuda without it: unchecked, and
        // nothing recorded for the link).
        static LINK_ADD_DATA: crate::driver::RealFn = crate::driver::RealFn::new("cuLinkAddData_v2");
        type AddData = unsafe extern "C" fn(CUlinkState, i32, *mut c_void, usize, *const c_char, u32, *mut i32, *mut *mut c_void) -> CuResult;
        // SAFETY: `AddData` is cuLinkAddData_v2's signature.
        let add_data = unsafe { LINK_ADD_DATA.typed::<AddData>() };
        let checkable = add_data.is_some() && (ty == crate::link::CU_JIT_INPUT_PTX || ty == crate::link::CU_JIT_INPUT_FATBINARY);
        // SAFETY: `path` is null or the NUL-terminated file name cuLinkAddFile's contract asks for.
        let bytes = if checkable { unsafe { read_file(path) } } else { None };
        // SAFETY: `b` is our own buffer, `b.len()` readable bytes.
        let checked = bytes.as_ref().and_then(|b| unsafe { crate::link::checked_input(st as usize, ty, b.as_ptr().cast(), b.len()) });
        match (checked, add_data) {
            // The real cuLinkAddData_v2 (present: `checkable`), with the checked PTX in place of
            // the file.
            (Some((p, len)), Some(f)) => {
                // SAFETY: `st` and the `n` options in `o` / `v` are the program's, valid under
                // cuLinkAddFile's contract, which cuLinkAddData shares; `p` is `len` bytes of
                // NUL-terminated checked PTX kept in the link's state until cuLinkDestroy; `path`
                // (a C string) serves as the input's name.
                unsafe { f(st, crate::link::CU_JIT_INPUT_PTX, p as *mut c_void, len, path, n, o, v) }
            }
            _ => real(st, ty, path, n, o, v),
        }
    }
    cuLinkComplete(st: CUlinkState, out: *mut *mut c_void, size: *mut usize) {
        let r = real(st, out, size);
        // SAFETY: cuLinkComplete succeeded, so the driver wrote the linked image's address to
        // `*out`, the caller's (non-null) out-pointer.
        if r == CUDA_SUCCESS && !out.is_null() { crate::link::on_complete(st as usize, unsafe { *out }); }
        else if r != CUDA_SUCCESS { crate::state::log(0, || format!("WARNING: cuLinkComplete failed ({r}) on a link with gasan-checked inputs")); }
        r
    }
    cuLinkDestroy(st: CUlinkState) { crate::link::on_destroy(st as usize); real(st) }
    cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
        // SAFETY: `image` is the module image the program passed (PTX, cubin or fatbin, as
        // cuModuleLoadData requires), and `load` calls the real cuModuleLoadData: load_checked's
        // preconditions. `module` is the caller's out-pointer, which load_checked reads only after a
        // load succeeded.
        unsafe { modules::load_checked(image, Ok(Vec::new()), modules::plain, |img| real(module, img), modules::LoadOut::Module(module)) }
    }
    cuModuleLoadDataEx(module: *mut CUmodule, image: *const c_void, n: u32, opts: *mut i32, vals: *mut *mut c_void) {
        // SAFETY: as for cuModuleLoadData; `opts` and `vals` hold `n` entries each (or are null),
        // as cuModuleLoadDataEx requires and jit_options needs.
        unsafe { modules::load_checked(image, modules::jit_options(n, opts, vals), modules::plain, |img| real(module, img, n, opts, vals), modules::LoadOut::Module(module)) }
    }
    cuModuleLoadFatBinary(module: *mut CUmodule, image: *const c_void) {
        // SAFETY: as for cuModuleLoadData (`image` is the program's fatbin).
        unsafe { modules::load_checked(image, Ok(Vec::new()), modules::fatbin, |img| real(module, img), modules::LoadOut::Module(module)) }
    }
    cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        static MODULE_LOAD_DATA: crate::driver::RealFn = crate::driver::RealFn::new("cuModuleLoadData");
        // SAFETY: the type is cuModuleLoadData's signature.
        let load_data = unsafe { MODULE_LOAD_DATA.typed::<unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CuResult>() };
        // SAFETY: `fname` is null or the NUL-terminated path cuModuleLoad's contract asks for.
        match (unsafe { read_file(fname) }, load_data) {
            (Some(bytes), Some(f)) => {
                let load = |img: *const c_void| -> CuResult {
                    // SAFETY: `module` is the program's out-pointer (cuModuleLoad's contract);
                    // `img` is the file's bytes or the checked code load_checked built, either
                    // alive for the call and kept after a successful load.
                    unsafe { f(module, img) }
                };
                // SAFETY: `bytes` is the module file the program named (a cubin, PTX or fatbin,
                // as cuModuleLoad requires) with a NUL appended, and it is leaked below, so it
                // outlives the load; `load` is the real cuModuleLoadData. `*module` is read only
                // after a successful load wrote it.
                let r = unsafe { modules::load_checked(bytes.as_ptr().cast(), Ok(Vec::new()), modules::plain, load, modules::LoadOut::Module(module)) };
                std::mem::forget(bytes);
                r
            }
            _ => real(module, fname),
        }
    }
    cuLibraryLoadData(lib: *mut CUlibrary, code: *const c_void, jo: *mut i32, jv: *mut *mut c_void, njo: u32, lo: *mut i32, lv: *mut *mut c_void, nlo: u32) {
        // SAFETY: `lo` holds `nlo` library options (or is null), as cuLibraryLoadData requires.
        let adoptable = unsafe { modules::library_options_adoptable(nlo, lo) };
        crate::state::log(2, || format!("cuLibraryLoadData: {njo} JIT options, library options {:?}", (0..nlo as usize).map(|i| {
            // SAFETY: as above: `lo` / `lv` hold `nlo` entries when `nlo` is not zero.
            unsafe { (*lo.add(i), *lv.add(i)) }
        }).collect::<Vec<_>>()));
        // SAFETY: `code` is the program's module image and `jo` / `jv` hold `njo` JIT options
        // (or are null), as cuLibraryLoadData requires; `load` calls the real cuLibraryLoadData.
        // `*lib` is read only after a successful load wrote the library to the out-pointer, or
        // written with a library loaded ahead when `adoptable`.
        unsafe { modules::load_checked(code, modules::jit_options(njo, jo, jv), modules::plain, |img| real(lib, img, jo, jv, njo, lo, lv, nlo), modules::LoadOut::Library { out: lib, adoptable }) }
    }
    cuLibraryLoadFromFile(lib: *mut CUlibrary, fname: *const c_char, jo: *mut i32, jv: *mut *mut c_void, njo: u32, lo: *mut i32, lv: *mut *mut c_void, nlo: u32) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        static LIBRARY_LOAD_DATA: crate::driver::RealFn = crate::driver::RealFn::new("cuLibraryLoadData");
        type LoadData = unsafe extern "C" fn(*mut CUlibrary, *const c_void, *mut i32, *mut *mut c_void, u32, *mut i32, *mut *mut c_void, u32) -> CuResult;
        // SAFETY: `LoadData` is cuLibraryLoadData's signature.
        let load_data = unsafe { LIBRARY_LOAD_DATA.typed::<LoadData>() };
        // SAFETY: `fname` is null or the NUL-terminated path cuLibraryLoadFromFile's contract
        // asks for.
        match (unsafe { read_file(fname) }, load_data) {
            (Some(bytes), Some(f)) => {
                let load = |img: *const c_void| -> CuResult {
                    // SAFETY: `lib` and the option arrays are the program's, valid under
                    // cuLibraryLoadFromFile's contract, which cuLibraryLoadData shares; `img` is the
                    // file's bytes or the checked code load_checked built, alive for the call.
                    unsafe { f(lib, img, jo, jv, njo, lo, lv, nlo) }
                };
                // SAFETY: `bytes` is the module file the program named, NUL-terminated and leaked
                // below; `jo` / `jv` hold `njo` options (or are null); `load` is the real
                // cuLibraryLoadData. `*lib` is read only after a successful load wrote it.
                let r = unsafe { modules::load_checked(bytes.as_ptr().cast(), modules::jit_options(njo, jo, jv), modules::plain, load, modules::LoadOut::Library { out: lib, adoptable: false }) };
                std::mem::forget(bytes);
                r
            }
            _ => real(lib, fname, jo, jv, njo, lo, lv, nlo),
        }
    }
}

/// Reads a module file (NUL-terminated so PTX text can be passed as an image).
///
/// # Safety
/// `fname` is null or points to a NUL-terminated string.
unsafe fn read_file(fname: *const c_char) -> Option<Vec<u8>> {
    if fname.is_null() {
        return None;
    }
    // SAFETY: non-null (checked above), so a NUL-terminated string by this function's contract.
    let p = unsafe { std::ffi::CStr::from_ptr(fname) }.to_str().ok()?;
    let mut b = std::fs::read(p).ok()?;
    b.push(0);
    Some(b)
}

// ---- cudart's private module loaders (CUDART_INTERFACE export table slots 1, 6, 8) ----

/// cudart's own loaders from its CUDART_INTERFACE export table (slots 1, 6, 8), which
/// interpose.rs replaces with ours.
static CUDART_LOADERS: std::sync::OnceLock<[usize; 3]> = std::sync::OnceLock::new();

/// Keeps cudart's loaders `orig` (slots 1, 6, 8 of CUDART_INTERFACE) and returns ours for them.
pub(crate) fn take_cudart_loaders(orig: [usize; 3]) -> [usize; 3] {
    let _ = CUDART_LOADERS.set(orig);
    [cudart_get_module_from_cubin as *const () as usize, cudart_get_module_from_cubin_ext1 as *const () as usize, cudart_get_module_from_cubin_ext2 as *const () as usize]
}

/// cudart's original loader kept for slot `i`, as `F`; `None` when none was kept or the slot was null.
///
/// # Safety
/// `F` is the function-pointer type of that slot's loader.
unsafe fn orig_slot<F: Copy>(i: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    let addr = CUDART_LOADERS.get().map(|s| s[i]).filter(|&a| a != 0)?;
    // SAFETY: `addr` is a non-null entry of cudart's export table, the loader of slot `i`, and
    // by this function's contract `F` is that loader's function-pointer type (same size: above).
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
}

/// A fatbin wrapper (version 1) around a fatbin of the checked code: the fatbin a cubin sits in,
/// or one built (and leaked) for checked PTX; cudart keeps the pointer, and a cubin's image is kept
/// once loaded.
fn checked_wrapper<'a>(c: &modules::Checked, code: &modules::Code<'a>) -> modules::Image<'a> {
    use gasan_instrument::container::{FatbinWrapper, WRAPPER_MAGIC};
    let data = match modules::fatbin_bytes(c, code) {
        std::borrow::Cow::Borrowed(b) => b.as_ptr(),
        std::borrow::Cow::Owned(b) => Box::leak(b.into_boxed_slice()).as_ptr(),
    };
    modules::Image::Built(FatbinWrapper { magic: WRAPPER_MAGIC, version: 1, data: data as u64, filename_or_fatbins: 0 }.to_bytes().to_vec())
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin(module: *mut CUmodule, wrapper: *const c_void) -> CuResult {
    guard("get_module_from_cubin", || {
        type F = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CuResult;
        // SAFETY: `F` is the signature of cudart's loader in this slot (the one this hook replaces).
        let Some(f) = (unsafe { orig_slot::<F>(0) }) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        // SAFETY: `wrapper` is the fatbin wrapper (`__fatBinC_Wrapper_t`) cudart passes this slot,
        // a module image load_checked can read; `load` calls the slot's original with cudart's
        // `module` and that wrapper or one checked_wrapper built (alive for the call, leaked
        // once loaded). `*module` is read only after a successful load wrote it.
        unsafe { modules::load_checked(wrapper, Ok(Vec::new()), checked_wrapper, |img| f(module, img), modules::LoadOut::Module(module)) }
    })
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin_ext1(module: *mut CUmodule, wrapper: *const c_void, a: *mut c_void, b: *mut c_void, c: u32) -> CuResult {
    guard("get_module_from_cubin_ext1", || {
        type F = unsafe extern "C" fn(*mut CUmodule, *const c_void, *mut c_void, *mut c_void, u32) -> CuResult;
        // SAFETY: `F` is the signature of cudart's loader in this slot (the one this hook replaces).
        let Some(f) = (unsafe { orig_slot::<F>(1) }) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        // SAFETY: as in cudart_get_module_from_cubin; `a`, `b` and `c` go to the original as
        // cudart passed them.
        unsafe { modules::load_checked(wrapper, Ok(Vec::new()), checked_wrapper, |img| f(module, img, a, b, c), modules::LoadOut::Module(module)) }
    })
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin_ext2(header: *const c_void, module: *mut CUmodule, a: *mut c_void, b: *mut c_void, c: u32) -> CuResult {
    guard("get_module_from_cubin_ext2", || {
        type F = unsafe extern "C" fn(*const c_void, *mut CUmodule, *mut c_void, *mut c_void, u32) -> CuResult;
        // SAFETY: `F` is the signature of cudart's loader in this slot (the one this hook replaces).
        let Some(f) = (unsafe { orig_slot::<F>(2) }) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        // SAFETY: `header` is the fatbin cudart passes this slot, a module image load_checked can
        // read; `load` calls the slot's original with it or with a fatbin of the checked code
        // (kept alive after a successful load), and cudart's other arguments unchanged.
        // `*module` is read only after a successful load wrote it.
        unsafe { modules::load_checked(header, Ok(Vec::new()), modules::fatbin, |img| f(img, module, a, b, c), modules::LoadOut::Module(module)) }
    })
}
