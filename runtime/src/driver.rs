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
        cuStreamSynchronize(stream: CUstream);
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
