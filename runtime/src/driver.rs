//! The real CUDA driver: `dlopen("libcuda.so.1")` and the real `dlsym`, never our own exports.

use cudarc::driver::sys::CUresult;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

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

/// Address of an exact libcuda export (`"cuMemAlloc_v2"`), via the real dlsym.
pub fn real_symbol(name: &str) -> Option<usize> {
    let h = libcuda()?;
    let c = CString::new(name).ok()?;
    // SAFETY: valid handle and name.
    let p = unsafe { real_dlsym()(h, c.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// One real entry point, resolved at its first call and kept: each hook, each [`api`] function
/// site and each other place gasan calls the driver holds one in a `static`, so calling the driver
/// costs no lookup. This is the one way gasan reaches the real driver's exports.
pub struct RealFn {
    name: &'static str,
    addr: OnceLock<usize>,
}

impl RealFn {
    pub const fn new(name: &'static str) -> Self {
        RealFn { name, addr: OnceLock::new() }
    }

    /// The entry point's address, 0 when libcuda lacks it.
    pub fn get(&self) -> usize {
        *self.addr.get_or_init(|| real_symbol(self.name).unwrap_or(0))
    }

    /// The entry point as a function pointer of type `F`, `None` when libcuda lacks it.
    ///
    /// # Safety
    /// `F` is an `unsafe extern "C" fn` type with the C signature of the driver function this
    /// names (its CUDA 13.0 prototype).
    pub unsafe fn typed<F: Copy>(&self) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>(), "RealFn::typed: F must be a function pointer") };
        let p = self.get();
        // SAFETY: `p` is the non-null address of the driver export `self.name`, and `F` is a
        // function pointer type (same size, checked above) with that export's signature (this
        // function's contract).
        (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}

/// Declares driver functions gasan calls on its own behalf, once each with its CUDA 13.0
/// signature in cudarc's `driver::sys` types: `name(arg: Type, ...)` becomes
/// `api::name(args) -> CuResult`, which calls the real export (resolved at the first call and
/// kept) or answers `CUDA_ERROR_UNKNOWN` when the driver lacks it. Each declaration is checked at
/// compile time against cudarc's prototype of the same function (bindgen over cuda.h 13.0); the
/// result stays an integer (a driver may answer codes the enum lacks). The hooks' own real calls
/// come from `hooks!`; these are the others.
macro_rules! driver_api {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {
        $(
            // The parameters are cuda.h's, as cudarc declares them.
            const _: unsafe fn($($t),*) -> cudarc::driver::sys::CUresult = cudarc::driver::sys::$name;
            #[allow(non_snake_case, clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]
            pub fn $name($($arg: $t),*) -> CuResult {
                static REAL: RealFn = RealFn::new(stringify!($name));
                type F = unsafe extern "C" fn($($t),*) -> CuResult;
                // SAFETY: `F` is the driver function's CUDA 13.0 signature, declared once above.
                match unsafe { REAL.typed::<F>() } {
                    None => CUDA_ERROR_UNKNOWN,
                    // SAFETY: every caller is gasan's own code passing what the driver function's
                    // contract asks for (out-pointers to live locals, handles the driver gave).
                    Some(f) => unsafe { f($($arg),*) },
                }
            }
        )*
    };
}

/// The driver calls gasan makes on its own behalf (see [`driver_api!`]).
pub mod api {
    use super::{CuResult, RealFn, CUDA_ERROR_UNKNOWN};
    use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUjit_option, CUlibrary, CUlibraryOption, CUlimit, CUmodule, CUmoduleLoadingMode, CUstream};
    use std::ffi::{c_char, c_int, c_uint, c_void};
    driver_api! {
        cuCtxGetCurrent(ctx: *mut CUcontext);
        cuCtxGetDevice(device: *mut CUdevice);
        cuCtxGetLimit(value: *mut usize, limit: CUlimit);
        cuCtxSetCurrent(ctx: CUcontext);
        cuCtxSynchronize();
        cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, device: CUdevice);
        cuDeviceGetCount(count: *mut c_int);
        cuDevicePrimaryCtxGetState(device: CUdevice, flags: *mut c_uint, active: *mut c_int);
        cuDriverGetVersion(version: *mut c_int);
        cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, library: CUlibrary, name: *const c_char);
        cuLibraryGetModule(module: *mut CUmodule, library: CUlibrary);
        cuLibraryLoadData(library: *mut CUlibrary, code: *const c_void, jit_options: *mut CUjit_option, jit_values: *mut *mut c_void, jit_count: c_uint, options: *mut CUlibraryOption, values: *mut *mut c_void, count: c_uint);
        cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize);
        cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize);
        cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize);
        cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream);
        cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint);
        cuMemHostGetDevicePointer_v2(dptr: *mut CUdeviceptr, host: *mut c_void, flags: c_uint);
        cuMemHostRegister_v2(host: *mut c_void, bytes: usize, flags: c_uint);
        cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, module: CUmodule, name: *const c_char);
        cuModuleGetLoadingMode(mode: *mut CUmoduleLoadingMode);
        cuStreamCreate(stream: *mut CUstream, flags: c_uint);
        cuStreamDestroy_v2(stream: CUstream);
        cuStreamSynchronize(stream: CUstream);
    }
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
/// values, a failure a [`DriverError`]. Over the [`api`] table; hooks call the program's real
/// functions through their own `real` instead.
pub mod result {
    use super::{api, check, DriverError};
    use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUlibrary, CUlimit, CUmodule, CUmoduleLoadingMode, CUstream};
    use std::ffi::{c_void, CStr};

    pub type Result<T> = std::result::Result<T, DriverError>;

    /// The calling thread's current context (null when none).
    pub fn ctx_get_current() -> Result<CUcontext> {
        let mut ctx = std::ptr::null_mut();
        check(api::cuCtxGetCurrent(&mut ctx)).map(|()| ctx)
    }

    /// The device of the current context.
    pub fn ctx_get_device() -> Result<CUdevice> {
        let mut d = -1;
        check(api::cuCtxGetDevice(&mut d)).map(|()| d)
    }

    /// A limit of the current context.
    pub fn ctx_get_limit(limit: CUlimit) -> Result<usize> {
        let mut v = 0;
        check(api::cuCtxGetLimit(&mut v, limit)).map(|()| v)
    }

    pub fn ctx_set_current(ctx: CUcontext) -> Result<()> {
        check(api::cuCtxSetCurrent(ctx))
    }

    pub fn ctx_synchronize() -> Result<()> {
        check(api::cuCtxSynchronize())
    }

    pub fn device_get_attribute(attribute: CUdevice_attribute, device: CUdevice) -> Result<i32> {
        let mut v = 0;
        check(api::cuDeviceGetAttribute(&mut v, attribute, device)).map(|()| v)
    }

    pub fn device_get_count() -> Result<i32> {
        let mut n = 0;
        check(api::cuDeviceGetCount(&mut n)).map(|()| n)
    }

    /// Whether `device`'s primary context is active (its flags too).
    pub fn device_primary_ctx_get_state(device: CUdevice) -> Result<(u32, bool)> {
        let (mut flags, mut active) = (0, 0);
        check(api::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)).map(|()| (flags, active != 0))
    }

    pub fn driver_get_version() -> Result<i32> {
        let mut v = 0;
        check(api::cuDriverGetVersion(&mut v)).map(|()| v)
    }

    /// The device address and size of global `name` of a loaded module.
    pub fn module_get_global(module: CUmodule, name: &CStr) -> Result<(CUdeviceptr, usize)> {
        let (mut dptr, mut bytes) = (0, 0);
        check(api::cuModuleGetGlobal_v2(&mut dptr, &mut bytes, module, name.as_ptr())).map(|()| (dptr, bytes))
    }

    /// The device address and size of global `name` of a loaded library.
    pub fn library_get_global(library: CUlibrary, name: &CStr) -> Result<(CUdeviceptr, usize)> {
        let (mut dptr, mut bytes) = (0, 0);
        check(api::cuLibraryGetGlobal(&mut dptr, &mut bytes, library, name.as_ptr())).map(|()| (dptr, bytes))
    }

    pub fn library_get_module(library: CUlibrary) -> Result<CUmodule> {
        let mut m = std::ptr::null_mut();
        check(api::cuLibraryGetModule(&mut m, library)).map(|()| m)
    }

    /// Loads `image` (a fatbin, cubin or PTX the loaders take) as a library, without JIT or library
    /// options, into the current context. The library is the caller's to hand on or unload.
    ///
    /// # Safety
    /// `image` is a valid module image that stays alive for the call.
    pub unsafe fn library_load_data(image: *const c_void) -> Result<CUlibrary> {
        let mut library = std::ptr::null_mut();
        let (no_jit, no_values, no_options) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        check(api::cuLibraryLoadData(&mut library, image, no_jit, no_values, 0, no_options, no_values, 0)).map(|()| library)
    }

    /// Device memory from the driver (gasan's own: the outside table).
    pub fn mem_alloc(bytes: usize) -> Result<CUdeviceptr> {
        let mut d = 0;
        check(api::cuMemAlloc_v2(&mut d, bytes)).map(|()| d)
    }

    /// Copies device memory at `src` into `dst`, synchronously.
    pub fn memcpy_dtoh(dst: &mut [u8], src: CUdeviceptr) -> Result<()> {
        check(api::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()))
    }

    /// Copies `src` to device memory at `dst`, synchronously.
    pub fn memcpy_htod(dst: CUdeviceptr, src: &[u8]) -> Result<()> {
        check(api::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()))
    }

    /// Copies `src` to device memory at `dst` on `stream`, then waits for the stream (so `src`
    /// need only live for the call).
    pub fn memcpy_htod_and_wait(dst: CUdeviceptr, src: &[u8], stream: &Stream) -> Result<()> {
        check(api::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), stream.raw()))?;
        check(api::cuStreamSynchronize(stream.raw()))
    }

    /// Pinned host memory of `bytes` bytes with `flags`, never freed by gasan.
    pub fn mem_host_alloc(bytes: usize, flags: u32) -> Result<*mut c_void> {
        let mut host = std::ptr::null_mut();
        check(api::cuMemHostAlloc(&mut host, bytes, flags)).map(|()| host)
    }

    /// The device address of mapped pinned host memory `host`.
    pub fn mem_host_get_device_pointer(host: *mut c_void) -> Result<CUdeviceptr> {
        let mut d = 0;
        check(api::cuMemHostGetDevicePointer_v2(&mut d, host, 0)).map(|()| d)
    }

    /// Pins and maps `bytes` bytes of host memory at `host`.
    ///
    /// # Safety
    /// `host` is `bytes` bytes of this process's memory that stay mapped while registered.
    pub unsafe fn mem_host_register(host: *mut c_void, bytes: usize, flags: u32) -> Result<()> {
        check(api::cuMemHostRegister_v2(host, bytes, flags))
    }

    pub fn module_get_loading_mode() -> Result<CUmoduleLoadingMode> {
        let mut mode = CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
        check(api::cuModuleGetLoadingMode(&mut mode)).map(|()| mode)
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
            check(api::cuStreamCreate(&mut s, flags)).map(|()| Stream(s))
        }

        pub fn raw(&self) -> CUstream {
            self.0
        }
    }

    impl Drop for Stream {
        fn drop(&mut self) {
            // An error here (the context already gone at exit) leaves nothing to undo.
            let _ = api::cuStreamDestroy_v2(self.0);
        }
    }
}

/// Resolver handed to the uvm-shim Vmm backend: base names → the real driver's newest variant.
pub fn resolver() -> gasan_uvm::Resolver {
    Box::new(|name: &CStr| {
        let base = name.to_str().unwrap_or("");
        // Prefer the versioned export the CUDA 13 headers map the base name to.
        for suffix in ["_v2", ""] {
            if let Some(p) = real_symbol(&format!("{base}{suffix}")) {
                return p as *mut c_void;
            }
        }
        std::ptr::null_mut()
    })
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
