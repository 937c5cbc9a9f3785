//! Compile-time check of the hooks' prototypes against cudarc's bindings of cuda.h 13.0.
//!
//! `same_parameters!(cuName (a: A, b: B))` compiles only if the hook's parameter list has
//! cudarc's `driver::sys::cuName`'s arity and each parameter passes as cudarc's does
//! ([`AbiAs`]): the same type, or one of the listed integer stand-ins for an enum (a hook keeps
//! enum-valued parameters as integers: a value the Rust enum lacks would be undefined behaviour).
//! The `_ptsz`/`_ptds` aliases of a hook share its declaration, so they are checked with it.
//!
//! Also the types hooks take their pointer arguments as ([`Out`], [`In`], [`CStrIn`]): each
//! passes in the C ABI as the pointer it wraps and gives the hook's body safe access to it.

use cudarc::driver::sys as cu;
use std::ffi::{c_char, c_void, CStr};

/// `Self` passes in the C ABI exactly as `T` does (same size, alignment and register class).
pub trait AbiAs<T> {}
impl<T> AbiAs<T> for T {}

/// Integer stand-ins for the enums and small structs hooks take as integers; each checked for
/// size and alignment here.
macro_rules! abi_as {
    ($($int:ty => $c:ty;)*) => {$(
        impl AbiAs<$c> for $int {}
        const _: () = assert!(std::mem::size_of::<$int>() == std::mem::size_of::<$c>() && std::mem::align_of::<$int>() >= std::mem::align_of::<$c>());
    )*};
}
abi_as! {
    u32 => cu::CUjit_option;
    i32 => cu::CUjitInputType;
    u32 => cu::CUpointer_attribute;
    u32 => cu::CUmem_advise;
    u32 => cu::CUmemPool_attribute;
    i32 => cu::CUlimit;
    i32 => cu::CUstreamCaptureMode;
    u32 => cu::CUtensorMapDataType;
    u32 => cu::CUtensorMapInterleave;
    u32 => cu::CUtensorMapSwizzle;
    u32 => cu::CUtensorMapL2promotion;
    u32 => cu::CUtensorMapFloatOOBfill;
    u32 => cu::CUtensorMapIm2ColWideMode;
    // CUmemLocation (two ints, passed by value in one integer register).
    u64 => cu::CUmemLocation;
}
impl AbiAs<*mut cu::CUpointer_attribute> for *mut u32 {}
impl AbiAs<*mut cu::CUjit_option> for *mut i32 {}
impl AbiAs<*mut cu::CUlibraryOption> for *mut i32 {}
impl AbiAs<*mut c_void> for *const c_void {}
impl AbiAs<*mut cu::CUdriverProcAddressQueryResult> for *mut i32 {}
// CUuuid: 16 bytes, alignment 1.
impl AbiAs<*const cu::CUuuid> for *const [u8; 16] {}
const _: () = assert!(std::mem::size_of::<cu::CUuuid>() == 16 && std::mem::align_of::<cu::CUuuid>() == 1);

/// gasan's views of the copy descriptors (crate::copies), laid out as cuda.h's.
macro_rules! same_layout {
    ($($ours:ty => $c:ty;)*) => {$(
        impl AbiAs<*const $c> for *const $ours {}
        impl AbiAs<*const $c> for In<$ours> {}
        const _: () = assert!(std::mem::size_of::<$ours>() == std::mem::size_of::<$c>() && std::mem::align_of::<$ours>() == std::mem::align_of::<$c>());
    )*};
}
same_layout! {
    crate::copies::Memcpy2D => cu::CUDA_MEMCPY2D;
    crate::copies::Memcpy3D => cu::CUDA_MEMCPY3D;
    crate::copies::Memcpy3D => cu::CUDA_MEMCPY3D_PEER;
}

/// A hook's `unsafe extern "C" fn` type passes its parameters as cudarc's `unsafe fn` type does.
pub trait SameParameters<C> {}

macro_rules! same_parameters_impls {
    ($(($($h:ident $c:ident),*))*) => {$(
        impl<$($h: AbiAs<$c>, $c),*> SameParameters<unsafe fn($($c),*) -> cu::CUresult> for unsafe extern "C" fn($($h),*) -> i32 {}
    )*};
}
same_parameters_impls! {
    ()
    (H1 C1)
    (H1 C1, H2 C2)
    (H1 C1, H2 C2, H3 C3)
    (H1 C1, H2 C2, H3 C3, H4 C4)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9, H10 C10)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9, H10 C10, H11 C11)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9, H10 C10, H11 C11, H12 C12)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9, H10 C10, H11 C11, H12 C12, H13 C13, H14 C14, H15 C15)
    (H1 C1, H2 C2, H3 C3, H4 C4, H5 C5, H6 C6, H7 C7, H8 C8, H9 C9, H10 C10, H11 C11, H12 C12, H13 C13, H14 C14, H15 C15, H16 C16)
}

/// Compiles only when `H` (a hook's type) passes its parameters as `C` (cudarc's) does.
pub fn check<H: SameParameters<C>, C>(_: C) {}

/// `_` for each parameter: cudarc's function coerced to a pointer of the hook's arity.
#[doc(hidden)]
#[macro_export]
macro_rules! __hook_abi_hole {
    ($x:ident) => {
        _
    };
}

/// Prototypes of the exports cuda.h 13.0 declares only in its legacy section (for programs built
/// with older headers), which cudarc leaves out: copied from that section, in cudarc's types.
#[allow(non_snake_case, dead_code, unused_variables, clippy::missing_safety_doc)]
pub mod legacy {
    use cudarc::driver::sys::{cuuint64_t, CUcontext, CUdevice, CUdeviceptr, CUexecAffinityParam, CUmem_advise, CUresult, CUstream};
    use std::ffi::{c_char, c_int, c_uint, c_void};
    /// `CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);`
    pub unsafe fn cuMemPrefetchAsync(devPtr: CUdeviceptr, count: usize, dstDevice: CUdevice, hStream: CUstream) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
    /// `CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);`
    pub unsafe fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cudaVersion: c_int, flags: cuuint64_t) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
    /// `CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);`
    /// (cudarc's CUDA 13 bindings have no binding of it, nor of `_v3`, to check the hooks against:
    /// cuda.h 13.0 declares both only in its versioning section.)
    pub unsafe fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
    /// `CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev);`
    pub unsafe fn cuCtxCreate_v3(pctx: *mut CUcontext, paramsArray: *mut CUexecAffinityParam, numParams: c_int, flags: c_uint, dev: CUdevice) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
    /// `CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);`
    pub unsafe fn cuMemAdvise(devPtr: CUdeviceptr, count: usize, advice: CUmem_advise, device: CUdevice) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
}

/// Checks hook `name`'s parameters against cudarc's `driver::sys::name` (module doc); a hook
/// marked `legacy` against [`legacy`]'s prototype.
macro_rules! same_parameters {
    (legacy $name:ident ( $($arg:ident : $t:ty),* )) => {
        const _: () = {
            #[allow(dead_code)]
            fn signature_check() {
                let header: unsafe fn($($crate::__hook_abi_hole!($arg)),*) -> _ = crate::hook_abi::legacy::$name;
                crate::hook_abi::check::<unsafe extern "C" fn($($t),*) -> i32, _>(header);
            }
        };
    };
    ($name:ident ( $($arg:ident : $t:ty),* )) => {
        const _: () = {
            #[allow(dead_code)]
            fn signature_check() {
                let cudarc: unsafe fn($($crate::__hook_abi_hole!($arg)),*) -> _ = cudarc::driver::sys::$name;
                crate::hook_abi::check::<unsafe extern "C" fn($($t),*) -> i32, _>(cudarc);
            }
        };
    };
}
pub(crate) use same_parameters;

/// An out-parameter of a hook (`T *` in the driver's prototype): null, or valid for reads and
/// writes of a `T` for the duration of the call. It only appears as a hook's parameter, where the
/// program's call under the driver function's contract (the hook's `# Safety`) makes it so, and
/// it passes in the C ABI exactly as the pointer does (`repr(transparent)`), so a hook hands it
/// to its `real` unchanged.
#[repr(transparent)]
pub struct Out<T>(*mut T);

impl<T> Clone for Out<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Out<T> {}
impl<T> AbiAs<*mut T> for Out<T> {}

impl<T: Copy> Out<T> {
    /// An out-parameter gasan makes itself (cudart's loaders, tests).
    ///
    /// # Safety
    /// `p` is null or valid for reads and writes of a `T` for as long as the value is used.
    pub unsafe fn new(p: *mut T) -> Self {
        Out(p)
    }

    pub fn is_null(self) -> bool {
        self.0.is_null()
    }

    /// Writes `v` for the caller; `false` (nothing written) when the pointer is null.
    pub fn set(self, v: T) -> bool {
        if self.0.is_null() {
            return false;
        }
        // SAFETY: non-null, so valid for writes of a `T` (the type's invariant).
        unsafe { self.0.write(v) };
        true
    }

    /// What the driver wrote when its call answered `r`: the value after a success, `None` after
    /// a failure (the driver then leaves the out-parameter as it was, maybe uninitialized) or for
    /// a null pointer.
    pub fn written(self, r: i32) -> Option<T> {
        if r != cu::CUresult::CUDA_SUCCESS as i32 || self.0.is_null() {
            return None;
        }
        // SAFETY: non-null, so valid for reads of a `T` (the type's invariant), and the driver's
        // successful call initialized it (its contract for an out-parameter).
        Some(unsafe { self.0.read() })
    }

    /// The same out-parameter as a `U` of the same size (`void **` as the address it holds).
    pub fn cast<U: Copy>(self) -> Out<U> {
        const { assert!(std::mem::size_of::<U>() == std::mem::size_of::<T>() && std::mem::align_of::<U>() <= std::mem::align_of::<T>()) };
        Out(self.0.cast())
    }

    /// The pointer, for a callee that takes it raw.
    pub fn raw(self) -> *mut T {
        self.0
    }
}

/// A hook's pointer to a `T` it reads (`const T *`): null, or valid for reads of a `T` for the
/// duration of the call (by the hook's contract, as for [`Out`]).
#[repr(transparent)]
pub struct In<T>(*const T);

impl<T> Clone for In<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for In<T> {}
impl<T> AbiAs<*const T> for In<T> {}

impl<T> In<T> {
    /// The value the caller passed, borrowed for no longer than this parameter (the call);
    /// `None` for a null pointer.
    pub fn get(&self) -> Option<&T> {
        // SAFETY: null or valid for reads of a `T` for the call (the type's invariant); the
        // borrow cannot outlive `self`, a parameter of the hook.
        unsafe { self.0.as_ref() }
    }
}

/// A hook's C string parameter (`const char *`): null, or a NUL-terminated string valid for the
/// call (by the hook's contract, as for [`Out`]).
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct CStrIn(*const c_char);

impl AbiAs<*const c_char> for CStrIn {}

impl CStrIn {
    /// The string, borrowed for no longer than this parameter (the call); `None` for null.
    pub fn get(&self) -> Option<&CStr> {
        // SAFETY: non-null (checked), so a NUL-terminated string valid for the call (the type's
        // invariant); the borrow cannot outlive `self`, a parameter of the hook.
        (!self.0.is_null()).then(|| unsafe { CStr::from_ptr(self.0) })
    }

    /// The pointer, for a callee that takes it raw.
    pub fn raw(self) -> *const c_char {
        self.0
    }
}

/// A module image a loader hook takes (`const void *image`: a cubin, PTX text, fatbin or fatbin
/// wrapper): null, or an image as the driver's loaders accept it, readable as its headers say for
/// as long as the value is used (the hook's call, by its contract, as for [`Out`]; or gasan's own
/// image, kept alive). It passes in the C ABI as the pointer does, so a hook hands it to its
/// `real` unchanged; the code that reads it ([`crate::modules`]) relies on this invariant.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ModuleImage(*const c_void);

impl AbiAs<*const c_void> for ModuleImage {}

impl ModuleImage {
    /// # Safety
    /// `p` is null or a module image as the driver's loaders accept it, readable as its headers
    /// say for as long as the value is used.
    pub unsafe fn new(p: *const c_void) -> Self {
        ModuleImage(p)
    }

    /// The pointer, for a callee that takes it raw.
    pub fn raw(self) -> *const c_void {
        self.0
    }
}

/// A loader's option arrays (JIT options, or a library loader's library options): `n` option
/// codes and `n` values, read once at the hook's boundary. Codes stay integers (a code the Rust
/// enum lacks would be undefined behaviour as that enum); values are the raw words the driver
/// reads each option's value from.
#[derive(Clone, Copy, Debug, Default)]
pub struct OptionArrays<'a> {
    pub options: &'a [i32],
    pub values: &'a [*mut c_void],
}

impl<'a> OptionArrays<'a> {
    /// The arrays a loader was passed; each empty when `n` is 0 or it is null.
    ///
    /// # Safety
    /// Each of `options` and `values` that is not null holds `n` entries, readable for `'a`.
    pub unsafe fn new(n: u32, options: *const i32, values: *const *mut c_void) -> Self {
        let n = n as usize;
        // SAFETY: a non-null array holds `n` entries readable for `'a` (this function's
        // contract); a null one, or `n` 0, is read as empty.
        unsafe {
            OptionArrays {
                options: if n == 0 || options.is_null() { &[] } else { std::slice::from_raw_parts(options, n) },
                values: if n == 0 || values.is_null() { &[] } else { std::slice::from_raw_parts(values, n) },
            }
        }
    }

    /// Each option with its value's word (none when either array is empty).
    pub fn pairs(&self) -> impl Iterator<Item = (i32, usize)> + 'a {
        self.options.iter().zip(self.values).map(|(&o, &v)| (o, v as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUCCESS: i32 = cu::CUresult::CUDA_SUCCESS as i32;
    const INVALID: i32 = cu::CUresult::CUDA_ERROR_INVALID_VALUE as i32;

    #[test]
    fn out_parameters_are_read_only_after_a_success_and_never_through_null() {
        let mut v = 7u64;
        let out = Out(&mut v as *mut u64);
        assert_eq!(out.written(INVALID), None, "a failed call's out-parameter is not read");
        assert_eq!(out.written(SUCCESS), Some(7));
        assert!(out.set(9));
        assert_eq!(v, 9);
        let null = Out::<u64>(std::ptr::null_mut());
        assert!(null.is_null() && !null.set(1));
        assert_eq!(null.written(SUCCESS), None);
        // `void **` read as the address it holds.
        let mut p: *mut c_void = 0x1000 as *mut c_void;
        assert_eq!(Out(&mut p as *mut *mut c_void).cast::<u64>().written(SUCCESS), Some(0x1000));
    }

    #[test]
    fn inputs_and_strings_borrow_what_the_caller_passed() {
        let x = 5i32;
        assert_eq!(In(&x as *const i32).get(), Some(&5));
        assert_eq!(In::<i32>(std::ptr::null()).get(), None);
        assert_eq!(CStrIn(c"kernel".as_ptr()).get(), Some(c"kernel"));
        assert_eq!(CStrIn(std::ptr::null()).get(), None);
    }

    #[test]
    fn option_arrays_read_n_entries_and_nothing_without_arrays() {
        let (opts, vals) = ([1i32, 7], [0x10 as *mut c_void, 0x20 as *mut c_void]);
        // SAFETY: two entries each, alive for the test.
        let a = unsafe { OptionArrays::new(2, opts.as_ptr(), vals.as_ptr()) };
        assert_eq!(a.pairs().collect::<Vec<_>>(), [(1, 0x10), (7, 0x20)]);
        // SAFETY: `n` 0, or a null array: nothing is read.
        let (none, null) = unsafe { (OptionArrays::new(0, opts.as_ptr(), vals.as_ptr()), OptionArrays::new(2, opts.as_ptr(), std::ptr::null())) };
        assert!(none.options.is_empty() && none.values.is_empty());
        assert_eq!((null.options, null.values.len()), (&opts[..], 0));
        assert!(null.pairs().next().is_none());
    }

    #[test]
    fn boundary_types_pass_as_the_pointers_they_wrap() {
        assert_eq!(std::mem::size_of::<Out<u64>>(), std::mem::size_of::<*mut u64>());
        assert_eq!(std::mem::size_of::<In<crate::copies::Memcpy3D>>(), std::mem::size_of::<*const u8>());
        assert_eq!(std::mem::size_of::<CStrIn>(), std::mem::size_of::<*const c_char>());
        assert_eq!(std::mem::size_of::<ModuleImage>(), std::mem::size_of::<*const c_void>());
    }
}
