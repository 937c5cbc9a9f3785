//! The real CUDA driver: `dlopen("libcuda.so.1")` and the real `dlsym`, never our own exports.

use cudarc::driver::sys::CUresult;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A `CUresult` as the C ABI passes it (hooks return it; the program may return any value).
pub type CuResult = i32;
pub const CUDA_SUCCESS: CuResult = CUresult::CUDA_SUCCESS as CuResult;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = CUresult::CUDA_ERROR_INVALID_VALUE as CuResult;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = CUresult::CUDA_ERROR_OUT_OF_MEMORY as CuResult;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CuResult = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS as CuResult;
pub const CUDA_ERROR_LAUNCH_FAILED: CuResult = CUresult::CUDA_ERROR_LAUNCH_FAILED as CuResult;
pub const CUDA_ERROR_UNKNOWN: CuResult = CUresult::CUDA_ERROR_UNKNOWN as CuResult;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = CUresult::CUDA_ERROR_NOT_INITIALIZED as CuResult;

/// glibc's dlsym, found with dlvsym so that our exported `dlsym` is skipped.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

pub fn real_dlsym() -> DlsymFn {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        for ver in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: dlvsym is not interposed by us.
            let f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), ver.as_ptr()) };
            if !f.is_null() {
                p = f as usize;
                break;
            }
        }
        assert!(p != 0, "gasan: cannot find glibc's dlsym");
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is glibc's dlsym.
    unsafe { std::mem::transmute::<usize, DlsymFn>(p) }
}

/// Handle of the real libcuda.so.1 (loaded on first use).
pub fn libcuda() -> Option<*mut c_void> {
    static H: OnceLock<usize> = OnceLock::new();
    let h = *H.get_or_init(|| {
        // SAFETY: plain dlopen.
        unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) as usize }
    });
    (h != 0).then_some(h as *mut c_void)
}

/// Is `handle` a dlopen handle of libcuda?
pub fn is_libcuda_handle(handle: *mut c_void) -> bool {
    libcuda() == Some(handle)
}

/// Address of an exact libcuda export (`"cuMemAlloc_v2"`), via the real dlsym, looked up once per
/// process: every [`Entry`] of that name and interpose's map of real entry points to hooks share
/// the one lookup.
pub fn real_symbol(name: &'static str) -> Option<usize> {
    static FOUND: OnceLock<Mutex<HashMap<&'static str, usize>>> = OnceLock::new();
    let found = FOUND.get_or_init(Default::default);
    if let Some(&p) = found.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
        return (p != 0).then_some(p);
    }
    // Looked up outside the lock: dlopen runs libcuda's initializers, which may call back into
    // gasan's exports.
    let p = lookup(name).unwrap_or(0);
    found.lock().unwrap_or_else(|e| e.into_inner()).insert(name, p);
    (p != 0).then_some(p)
}

fn lookup(name: &str) -> Option<usize> {
    let h = libcuda()?;
    let c = CString::new(name).ok()?;
    // SAFETY: valid handle and name.
    let p = unsafe { real_dlsym()(h, c.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// One entry point of the real driver, of type `F` (its C prototype), resolved at its first use
/// and kept. Every way gasan reaches a driver export goes through one: each hook's `real`, the
/// [`sys`] table of the functions gasan calls on its own behalf (from which the [`result`] layer
/// and the pool's [`gasan_uvm::DriverFns`] are built).
pub struct Entry<F> {
    name: &'static str,
    addr: OnceLock<usize>,
    prototype: PhantomData<F>,
}

impl<F: Copy> Entry<F> {
    /// # Safety
    /// `F` is an `unsafe extern "C" fn` type with the C prototype (CUDA 13.0) of the driver export
    /// named `name`, exactly (`"cuMemcpyDtoH_v2"`, not `"cuMemcpyDtoH"`).
    pub const unsafe fn new(name: &'static str) -> Self {
        Entry { name, addr: OnceLock::new(), prototype: PhantomData }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The entry point's address, 0 when libcuda lacks it.
    pub fn address(&self) -> usize {
        *self.addr.get_or_init(|| real_symbol(self.name).unwrap_or(0))
    }

    /// The entry point, `None` when libcuda lacks it.
    pub fn get(&self) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>(), "Entry: F must be a function pointer") };
        let p = self.address();
        // SAFETY: `p` is the non-null address of the driver export `self.name`, and `F` is a
        // function pointer type (same size, checked above) with that export's prototype
        // (`Entry::new`'s contract).
        (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}

/// Declares the driver functions gasan calls on its own behalf, once each, by exact export name
/// and CUDA 13.0 prototype in cudarc's `driver::sys` types: `name(arg: Type, ...)` becomes the
/// [`Entry`] `sys::name`. Each prototype is checked at compile time against cudarc's (bindgen over
/// cuda.h 13.0; `#[legacy]`: cuda.h's legacy section, see hook_abi::legacy) as the hooks' are; the
/// result stays an integer (a driver may answer codes the enum lacks).
macro_rules! entry_points {
    ($($(#[$legacy:ident])? $name:ident($($arg:ident: $t:ty),*);)*) => {
        $(
            crate::hook_abi::same_parameters!($($legacy)? $name ($($arg: $t),*));
            #[allow(non_upper_case_globals)]
            // SAFETY: the type is the export's prototype, checked against cudarc's just above.
            pub static $name: Entry<unsafe extern "C" fn($($t),*) -> CuResult> = unsafe { Entry::new(stringify!($name)) };
        )*

        /// Each entry point of the table, counted as one of gasan's own driver calls
        /// (`call_times=1`): what the pool backend is given, and the `result` layer calls, while
        /// counting is on.
        pub mod counted {
            use super::*;
            $(
                #[allow(non_snake_case)]
                /// # Safety
                /// The contract of the driver function of the same name.
                pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
                    static TIMES: crate::call_times::CallTimes = crate::call_times::CallTimes::new(stringify!($name), crate::call_times::Kind::OwnDriver);
                    let Some(f) = super::$name.get() else {
                        return crate::driver::CUDA_ERROR_UNKNOWN;
                    };
                    // SAFETY: `f` is the driver's function of this name and prototype (the
                    // entry's), called with the arguments our caller passed under its contract.
                    crate::call_times::timed(&TIMES, || unsafe { f($($arg),*) })
                }
            )*
        }
    };
}

/// The one table of the driver's entry points gasan calls on its own behalf (see
/// `entry_points!`): the [`result`] layer's, the pool backend's ([`vmm_fns`]), and the real
/// functions a hook calls besides its own (`cuLinkAddFile` adding the checked file's bytes with
/// `cuLinkAddData_v2`; the interposers of `cuGetProcAddress` and `cuGetExportTable`). A hook's own
/// real function is its `real` (hooks/mod.rs), an [`Entry`] of the hook's exact name.
pub mod sys {
    use super::{CuResult, Entry};
    use cudarc::driver::sys::{
        CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUlibrary, CUlimit, CUlinkState, CUmemAccessDesc, CUmemAllocationGranularity_flags, CUmemAllocationHandleType,
        CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemLocation, CUmodule, CUmoduleLoadingMode, CUstream,
    };
    use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_void};
    entry_points! {
        // Contexts and devices.
        cuCtxGetCurrent(ctx: *mut CUcontext);
        cuCtxGetDevice(device: *mut CUdevice);
        cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext);
        cuCtxPushCurrent_v2(ctx: CUcontext);
        cuCtxPopCurrent_v2(ctx: *mut CUcontext);
        cuCtxGetLimit(value: *mut usize, limit: CUlimit);
        cuCtxSetCurrent(ctx: CUcontext);
        cuCtxSynchronize();
        cuDeviceGet(device: *mut CUdevice, ordinal: c_int);
        cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, device: CUdevice);
        cuDeviceGetCount(count: *mut c_int);
        cuDevicePrimaryCtxGetState(device: CUdevice, flags: *mut c_uint, active: *mut c_int);
        cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice);
        cuDevicePrimaryCtxRelease_v2(device: CUdevice);
        cuStreamGetCtx(stream: CUstream, ctx: *mut CUcontext);
        cuDriverGetVersion(version: *mut c_int);
        // Entry points and cudart's private tables.
        cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64, status: *mut i32);
        #[legacy] cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64);
        cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]);
        // Modules, libraries, links.
        cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, library: CUlibrary, name: *const c_char);
        cuLibraryGetModule(module: *mut CUmodule, library: CUlibrary);
        cuLibraryLoadData(library: *mut CUlibrary, code: *const c_void, jit_options: *mut i32, jit_values: *mut *mut c_void, jit_count: c_uint, options: *mut i32, values: *mut *mut c_void, count: c_uint);
        cuLinkAddData_v2(link: CUlinkState, ty: i32, data: *mut c_void, size: usize, name: *const c_char, n: u32, options: *mut i32, values: *mut *mut c_void);
        cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, module: CUmodule, name: *const c_char);
        cuModuleGetLoadingMode(mode: *mut CUmoduleLoadingMode);
        cuModuleLoadData(module: *mut CUmodule, image: *const c_void);
        // Memory.
        cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize);
        cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint);
        cuMemHostGetDevicePointer_v2(dptr: *mut CUdeviceptr, host: *mut c_void, flags: c_uint);
        cuMemHostRegister_v2(host: *mut c_void, bytes: usize, flags: c_uint);
        // Copies and sets.
        cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize);
        cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize);
        cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream);
        cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream);
        cuMemsetD8Async(dst: CUdeviceptr, value: c_uchar, bytes: usize, stream: CUstream);
        // Streams and events.
        cuStreamCreate(stream: *mut CUstream, flags: c_uint);
        cuStreamDestroy_v2(stream: CUstream);
        cuStreamSynchronize(stream: CUstream);
        cuEventCreate(event: *mut CUevent, flags: c_uint);
        cuEventRecord(event: CUevent, stream: CUstream);
        cuEventQuery(event: CUevent);
        cuEventSynchronize(event: CUevent);
        // The virtual memory management the pool is built on.
        cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: c_ulonglong);
        cuMemAddressFree(ptr: CUdeviceptr, size: usize);
        cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: c_ulonglong);
        cuMemRelease(handle: CUmemGenericAllocationHandle);
        cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: c_ulonglong);
        cuMemUnmap(ptr: CUdeviceptr, size: usize);
        cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize);
        cuMemGetAccess(flags: *mut c_ulonglong, location: *const CUmemLocation, ptr: CUdeviceptr);
        cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CUmemAllocationProp, option: CUmemAllocationGranularity_flags);
        cuMemExportToShareableHandle(shareable: *mut c_void, handle: CUmemGenericAllocationHandle, ty: CUmemAllocationHandleType, flags: c_ulonglong);
        cuMemImportFromShareableHandle(handle: *mut CUmemGenericAllocationHandle, os_handle: *mut c_void, ty: CUmemAllocationHandleType);
    }
}

/// The pool backend's driver functions ([`gasan_uvm::DriverFns`]), from the [`sys`] table: each
/// field is the table's entry of the same exact export (a type mismatch does not compile), or
/// the first one libcuda lacks.
pub fn vmm_fns() -> Result<gasan_uvm::DriverFns, gasan_uvm::UvmError> {
    // Counting (`call_times=1`), each field is the entry's counted twin instead of the entry.
    let counting = crate::call_times::enabled();
    macro_rules! from_table {
        ($($field:ident = $entry:ident,)*) => {
            gasan_uvm::DriverFns {
                $($field: {
                    let f = sys::$entry.get().ok_or_else(|| gasan_uvm::UvmError::Unavailable(format!("driver entry point {} missing", stringify!($field))))?;
                    if counting { sys::counted::$entry } else { f }
                },)*
            }
        };
    }
    Ok(from_table! {
        cuMemAddressReserve = cuMemAddressReserve,
        cuMemAddressFree = cuMemAddressFree,
        cuMemCreate = cuMemCreate,
        cuMemRelease = cuMemRelease,
        cuMemMap = cuMemMap,
        cuMemUnmap = cuMemUnmap,
        cuMemSetAccess = cuMemSetAccess,
        cuMemGetAllocationGranularity = cuMemGetAllocationGranularity,
        cuMemcpyHtoDAsync = cuMemcpyHtoDAsync_v2,
        cuMemcpyDtoH = cuMemcpyDtoH_v2,
        cuMemcpyDtoDAsync = cuMemcpyDtoDAsync_v2,
        cuMemsetD8Async = cuMemsetD8Async,
        cuEventCreate = cuEventCreate,
        cuEventRecord = cuEventRecord,
        cuEventQuery = cuEventQuery,
        cuEventSynchronize = cuEventSynchronize,
        cuStreamCreate = cuStreamCreate,
        cuStreamSynchronize = cuStreamSynchronize,
        cuDeviceGet = cuDeviceGet,
        cuDeviceGetAttribute = cuDeviceGetAttribute,
        cuMemExportToShareableHandle = cuMemExportToShareableHandle,
        cuMemImportFromShareableHandle = cuMemImportFromShareableHandle,
        cuMemGetAccess = cuMemGetAccess,
    })
}

/// A driver error code other than `CUDA_SUCCESS`, as the driver answered it (kept as an integer: a
/// driver may answer codes cudarc's enum lacks). Displays as the number, as gasan's messages have
/// always printed it ("CUDA error 700").
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DriverError(pub CuResult);

/// `Ok` for `CUDA_SUCCESS`, the code as a [`DriverError`] otherwise.
pub fn check(r: CuResult) -> Result<(), DriverError> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError(r))
    }
}

/// gasan's own driver calls as results (cudarc's `result` layer): out-parameters become return
/// values, a failure a [`DriverError`]. Over the [`sys`] table; hooks call the program's real
/// functions through their own `real` instead.
// Handles (contexts, modules, libraries) and the host address `mem_host_get_device_pointer` asks
// about are raw pointers the driver looks up and validates, never dereferences as the caller's
// memory: passing any value is safe (an unknown one is an error code).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub mod result {
    use super::{check, DriverError, CUDA_ERROR_UNKNOWN};
    use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUlibrary, CUlimit, CUmodule, CUmoduleLoadingMode, CUstream};
    use std::ffi::{c_void, CStr};

    pub type Result<T> = std::result::Result<T, DriverError>;

    /// Calls the real export `name` of the [`super::sys`] table with `args` as a result;
    /// `CUDA_ERROR_UNKNOWN` when libcuda lacks it.
    macro_rules! call {
        ($name:ident($($arg:expr),*)) => {
            match super::sys::$name.get() {
                None => Err(DriverError(CUDA_ERROR_UNKNOWN)),
                // SAFETY: the entry's type is the export's prototype (checked against cudarc's),
                // and every call in this module passes what that function's contract asks for:
                // out-pointers to live locals, handles the driver gave, buffers of the length
                // passed (the `unsafe fn`s below state what their callers guarantee).
                Some(f) => check(if crate::call_times::enabled() { unsafe { super::sys::counted::$name($($arg),*) } } else { unsafe { f($($arg),*) } }),
            }
        };
    }

    /// The calling thread's current context (null when none).
    pub fn ctx_get_current() -> Result<CUcontext> {
        let mut ctx = std::ptr::null_mut();
        call!(cuCtxGetCurrent(&mut ctx)).map(|()| ctx)
    }

    /// The device of the current context.
    pub fn ctx_get_device() -> Result<CUdevice> {
        let mut d = -1;
        call!(cuCtxGetDevice(&mut d)).map(|()| d)
    }

    /// The device of context `ctx` (CUDA 13's `cuCtxGetDevice_v2`; a driver without it: made
    /// current for the question and popped again).
    pub fn ctx_device(ctx: CUcontext) -> Result<CUdevice> {
        let mut d = -1;
        if call!(cuCtxGetDevice_v2(&mut d, ctx)).is_ok() {
            return Ok(d);
        }
        call!(cuCtxPushCurrent_v2(ctx))?;
        let asked = ctx_get_device();
        let mut popped = std::ptr::null_mut();
        call!(cuCtxPopCurrent_v2(&mut popped))?;
        asked
    }

    /// A current context on the calling thread for as long as the guard lives: the thread's own,
    /// or, where it has none, `stream`'s context (else `device`'s primary context), pushed now and
    /// popped on drop. A driver call that names a stream runs in the stream's context, so a
    /// program may allocate on a thread that never made a context current (PyTorch's
    /// cudaMallocAsync backend), while the pool's own work for that call (a shadow memset, a
    /// stream of its own) needs one: without it the driver answers CUDA_ERROR_INVALID_CONTEXT.
    /// Asked before the device is known (`device` `None`), it pushes the stream's context only,
    /// so that the current device is the stream's: gasan's first use of a GPU may be such a call.
    pub fn current_context_for(stream: CUstream, device: Option<CUdevice>) -> ContextGuard {
        if !matches!(ctx_get_current(), Ok(c) if c.is_null()) {
            return ContextGuard { pushed: false, retained: None, settled: true };
        }
        let mut ctx = std::ptr::null_mut();
        let of_stream = call!(cuStreamGetCtx(stream, &mut ctx)).is_ok() && !ctx.is_null();
        let retained = device.filter(|&device| !of_stream && call!(cuDevicePrimaryCtxRetain(&mut ctx, device)).is_ok());
        let pushed = (of_stream || retained.is_some()) && call!(cuCtxPushCurrent_v2(ctx)).is_ok();
        ContextGuard { pushed, retained, settled: pushed }
    }

    /// See [`current_context_for`]: pops what it pushed and releases what it retained.
    pub struct ContextGuard {
        pushed: bool,
        retained: Option<CUdevice>,
        /// A context is current while the guard lives (the thread's own or the one pushed).
        settled: bool,
    }

    impl ContextGuard {
        /// Whether a context is current while the guard lives: then a second guard for the same
        /// call has nothing to do (and need not ask the driver again).
        pub fn settled(&self) -> bool {
            self.settled
        }
    }

    impl Drop for ContextGuard {
        fn drop(&mut self) {
            if self.pushed {
                let mut popped = std::ptr::null_mut();
                let _ = call!(cuCtxPopCurrent_v2(&mut popped));
            }
            if let Some(device) = self.retained {
                let _ = call!(cuDevicePrimaryCtxRelease_v2(device));
            }
        }
    }

    /// A limit of the current context.
    pub fn ctx_get_limit(limit: CUlimit) -> Result<usize> {
        let mut v = 0;
        call!(cuCtxGetLimit(&mut v, limit)).map(|()| v)
    }

    pub fn ctx_set_current(ctx: CUcontext) -> Result<()> {
        call!(cuCtxSetCurrent(ctx))
    }

    pub fn ctx_synchronize() -> Result<()> {
        call!(cuCtxSynchronize())
    }

    pub fn device_get_attribute(attribute: CUdevice_attribute, device: CUdevice) -> Result<i32> {
        let mut v = 0;
        call!(cuDeviceGetAttribute(&mut v, attribute, device)).map(|()| v)
    }

    pub fn device_get_count() -> Result<i32> {
        let mut n = 0;
        call!(cuDeviceGetCount(&mut n)).map(|()| n)
    }

    /// Whether `device`'s primary context is active (its flags too).
    pub fn device_primary_ctx_get_state(device: CUdevice) -> Result<(u32, bool)> {
        let (mut flags, mut active) = (0, 0);
        call!(cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)).map(|()| (flags, active != 0))
    }

    pub fn driver_get_version() -> Result<i32> {
        let mut v = 0;
        call!(cuDriverGetVersion(&mut v)).map(|()| v)
    }

    /// The device address and size of global `name` of a loaded module.
    pub fn module_get_global(module: CUmodule, name: &CStr) -> Result<(CUdeviceptr, usize)> {
        let (mut dptr, mut bytes) = (0, 0);
        call!(cuModuleGetGlobal_v2(&mut dptr, &mut bytes, module, name.as_ptr())).map(|()| (dptr, bytes))
    }

    /// The device address and size of global `name` of a loaded library.
    pub fn library_get_global(library: CUlibrary, name: &CStr) -> Result<(CUdeviceptr, usize)> {
        let (mut dptr, mut bytes) = (0, 0);
        call!(cuLibraryGetGlobal(&mut dptr, &mut bytes, library, name.as_ptr())).map(|()| (dptr, bytes))
    }

    pub fn library_get_module(library: CUlibrary) -> Result<CUmodule> {
        let mut m = std::ptr::null_mut();
        call!(cuLibraryGetModule(&mut m, library)).map(|()| m)
    }

    /// Loads `image` (a fatbin, cubin or PTX the loaders take) as a library, without JIT or library
    /// options, into the current context. The library is the caller's to hand on or unload.
    ///
    /// # Safety
    /// `image` is a valid module image that stays alive for the call.
    pub unsafe fn library_load_data(image: *const c_void) -> Result<CUlibrary> {
        let mut library = std::ptr::null_mut();
        let (no_jit, no_values, no_options) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        call!(cuLibraryLoadData(&mut library, image, no_jit, no_values, 0, no_options, no_values, 0)).map(|()| library)
    }

    /// Device memory from the driver (gasan's own: the outside table).
    pub fn mem_alloc(bytes: usize) -> Result<CUdeviceptr> {
        let mut d = 0;
        call!(cuMemAlloc_v2(&mut d, bytes)).map(|()| d)
    }

    /// Copies device memory at `src` into `dst`, synchronously.
    pub fn memcpy_dtoh(dst: &mut [u8], src: CUdeviceptr) -> Result<()> {
        call!(cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()))
    }

    /// Copies `src` to device memory at `dst`, synchronously.
    pub fn memcpy_htod(dst: CUdeviceptr, src: &[u8]) -> Result<()> {
        call!(cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()))
    }

    /// Copies `src` to device memory at `dst` on `stream`, then waits for the stream (so `src`
    /// need only live for the call).
    pub fn memcpy_htod_and_wait(dst: CUdeviceptr, src: &[u8], stream: &Stream) -> Result<()> {
        call!(cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), stream.raw()))?;
        call!(cuStreamSynchronize(stream.raw()))
    }

    /// Pinned host memory of `bytes` bytes with `flags`, never freed by gasan.
    pub fn mem_host_alloc(bytes: usize, flags: u32) -> Result<*mut c_void> {
        let mut host = std::ptr::null_mut();
        call!(cuMemHostAlloc(&mut host, bytes, flags)).map(|()| host)
    }

    /// The device address of mapped pinned host memory `host`.
    pub fn mem_host_get_device_pointer(host: *mut c_void) -> Result<CUdeviceptr> {
        let mut d = 0;
        call!(cuMemHostGetDevicePointer_v2(&mut d, host, 0)).map(|()| d)
    }

    /// Pins and maps `bytes` bytes of host memory at `host`.
    ///
    /// # Safety
    /// `host` is `bytes` bytes of this process's memory that stay mapped while registered.
    pub unsafe fn mem_host_register(host: *mut c_void, bytes: usize, flags: u32) -> Result<()> {
        call!(cuMemHostRegister_v2(host, bytes, flags))
    }

    pub fn module_get_loading_mode() -> Result<CUmoduleLoadingMode> {
        let mut mode = CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
        call!(cuModuleGetLoadingMode(&mut mode)).map(|()| mode)
    }

    /// A stream gasan created for its own work, destroyed when dropped.
    #[derive(Debug)]
    pub struct Stream(CUstream);

    // SAFETY: a CUstream is a driver handle usable from any thread of the process.
    unsafe impl Send for Stream {}
    // SAFETY: as above; the driver serializes use of a stream.
    unsafe impl Sync for Stream {}

    impl Stream {
        /// A new stream with `flags` (`CU_STREAM_NON_BLOCKING`: not ordered with the legacy one).
        pub fn new(flags: u32) -> Result<Stream> {
            let mut s = std::ptr::null_mut();
            call!(cuStreamCreate(&mut s, flags)).map(|()| Stream(s))
        }

        pub fn raw(&self) -> CUstream {
            self.0
        }
    }

    impl Drop for Stream {
        fn drop(&mut self) {
            // An error here (the context already gone at exit) leaves nothing to undo.
            let _ = call!(cuStreamDestroy_v2(self.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_driver_code_and_print_it_as_before() {
        assert_eq!(check(CUDA_SUCCESS), Ok(()));
        assert_eq!(check(CUDA_ERROR_ILLEGAL_ADDRESS), Err(DriverError(700)));
        // A code cudarc's enum lacks stays as the driver answered it.
        assert_eq!(check(123_456), Err(DriverError(123_456)));
        assert_eq!(format!("CUDA error {}", DriverError(700)), "CUDA error 700");
    }
}
