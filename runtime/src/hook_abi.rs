//! Compile-time check of the hooks' prototypes against cudarc's bindings of cuda.h 13.0.
//!
//! `same_parameters!(cuName (a: A, b: B))` compiles only if the hook's parameter list has
//! cudarc's `driver::sys::cuName`'s arity and each parameter passes as cudarc's does
//! ([`AbiAs`]): the same type, or one of the listed integer stand-ins for an enum (a hook keeps
//! enum-valued parameters as integers: a value the Rust enum lacks would be undefined behaviour).
//! The `_ptsz`/`_ptds` aliases of a hook share its declaration, so they are checked with it.

use cudarc::driver::sys as cu;
use std::ffi::c_void;

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
    i32 => cu::CUlimit;
    i32 => cu::CUstreamCaptureMode;
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
        const _: () = assert!(std::mem::size_of::<$ours>() == std::mem::size_of::<$c>() && std::mem::align_of::<$ours>() == std::mem::align_of::<$c>());
    )*};
}
same_layout! {
    crate::copies::Memcpy2D => cu::CUDA_MEMCPY2D;
    crate::copies::Memcpy3D => cu::CUDA_MEMCPY3D;
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
    use cudarc::driver::sys::{cuuint64_t, CUdevice, CUdeviceptr, CUmem_advise, CUresult, CUstream};
    use std::ffi::{c_char, c_int, c_void};
    /// `CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);`
    pub unsafe fn cuMemPrefetchAsync(devPtr: CUdeviceptr, count: usize, dstDevice: CUdevice, hStream: CUstream) -> CUresult {
        unreachable!("a prototype for the compile-time check only")
    }
    /// `CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);`
    pub unsafe fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cudaVersion: c_int, flags: cuuint64_t) -> CUresult {
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
