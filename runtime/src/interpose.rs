//! How calls reach us: an exported `dlsym` that answers only for libcuda handles, `cuGetProcAddress`
//! (all ABI variants: the real one picks the variant, we swap in our wrapper for exactly that
//! variant), and exported `cu*` symbols. Wrapping the module-loading slots of cudart's
//! `cuGetExportTable` table is opt-in (`patch_export_table`, off by default) for older runtimes:
//! CUDA 13's static cudart refuses a replaced table, and its modules are caught at
//! `cuLibraryLoadData` instead.

use crate::driver::{self, CuResult, CUDA_SUCCESS};
use crate::hook_abi::{CStrIn, Out};
use crate::hooks;
use crate::state::log;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

/// Every exact driver symbol we answer for, with our wrapper.
fn all_wrappers() -> Vec<(&'static str, usize)> {
    let mut v = hooks::table();
    v.push(("cuGetProcAddress_v2", cuGetProcAddress_v2 as *const () as usize));
    v.push(("cuGetProcAddress", cuGetProcAddress as *const () as usize));
    v.push(("cuGetExportTable", cuGetExportTable as *const () as usize));
    v
}

/// Real entry point address → our wrapper, for every hooked exact name.
fn wrapper_by_real() -> &'static HashMap<usize, usize> {
    static M: OnceLock<HashMap<usize, usize>> = OnceLock::new();
    M.get_or_init(|| all_wrappers().into_iter().filter_map(|(name, w)| driver::real_symbol(name).map(|r| (r, w))).collect())
}

fn wrapper_by_name(name: &str) -> Option<usize> {
    static M: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    M.get_or_init(|| all_wrappers().into_iter().collect()).get(name).copied()
}

/// Decides `dlsym(handle, name)`: our wrapper for hooked names on a libcuda handle, NVRTC's,
/// nvJitLink's and NCCL's as [`hooks::library::dlsym_answer`] decides (its `DLSYM_NULL`: answer
/// null), else null (the caller
/// then jumps to glibc's dlsym with the original return address, so `RTLD_NEXT` keeps working for
/// everybody).
extern "C" fn dlsym_filter(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    driver::real_dlsym();
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dlsym's name is a C string.
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    if n.starts_with(b"nvrtc") || n.starts_with(b"nvJitLink") || n.starts_with(b"__nvJitLink") || n.starts_with(b"nccl") {
        return std::panic::catch_unwind(|| hooks::library::dlsym_answer(handle, n)).unwrap_or(std::ptr::null_mut());
    }
    if handle.is_null() || handle == libc::RTLD_NEXT {
        return std::ptr::null_mut();
    }
    if !n.starts_with(b"cu") {
        return std::ptr::null_mut();
    }
    let Ok(n) = std::str::from_utf8(n) else { return std::ptr::null_mut() };
    let found = std::panic::catch_unwind(|| if driver::is_libcuda_handle(handle) { wrapper_by_name(n) } else { None });
    match found {
        Ok(Some(w)) => {
            log(2, || format!("dlsym(libcuda, {n}) -> gasan wrapper"));
            w as *mut c_void
        }
        _ => std::ptr::null_mut(),
    }
}

/// Our `dlsym`. A naked trampoline: ask [`dlsym_filter`]; if it declines, tail-jump to glibc's dlsym
/// so that the caller's return address (which `RTLD_NEXT` lookups depend on) is unchanged; its
/// answer 1 is null.
#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
/// # Safety
/// Called by the program (or the dynamic loader) with the C contract of the function it replaces.
pub unsafe extern "C" fn dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {filter}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "jmp qword ptr [rip + {real}]",
        "2:",
        "cmp rax, 1",
        "jne 3f",
        "xor eax, eax",
        "3:",
        "ret",
        filter = sym dlsym_filter,
        real = sym driver::REAL_DLSYM,
    )
}

/// Swaps the real pointer the driver returned (its call answered `r`) for our wrapper of the same
/// variant.
fn swap_in_wrapper(r: CuResult, symbol: CStrIn, pfn: Out<*mut c_void>, flags: u64) {
    let Some(real) = pfn.written(r).filter(|p| !p.is_null()) else { return };
    let wrapped = wrapper_by_real().get(&(real as usize)).copied();
    if let Some(w) = wrapped {
        pfn.set(w as *mut c_void);
    }
    log(2, || {
        let n = symbol.get().map(CStr::to_string_lossy).unwrap_or_default();
        format!("cuGetProcAddress({n}, flags={flags}) -> {}", if wrapped.is_some() { "gasan wrapper" } else { "driver" })
    });
}

/// # Safety
/// Called by the program (or the dynamic loader) with the C contract of the function it replaces.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(symbol: CStrIn, pfn: Out<*mut c_void>, version: i32, flags: u64, status: *mut i32) -> CuResult {
    let Some(real) = driver::sys::cuGetProcAddress_v2.get() else {
        return driver::CUDA_ERROR_UNKNOWN;
    };
    // SAFETY: the program's arguments, under cuGetProcAddress_v2's contract (this function's).
    let r = unsafe { real(symbol.raw(), pfn.raw(), version, flags, status) };
    swap_in_wrapper(r, symbol, pfn, flags);
    r
}

/// # Safety
/// Called by the program (or the dynamic loader) with the C contract of the function it replaces.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(symbol: CStrIn, pfn: Out<*mut c_void>, version: i32, flags: u64) -> CuResult {
    let Some(real) = driver::sys::cuGetProcAddress.get() else {
        return driver::CUDA_ERROR_UNKNOWN;
    };
    // SAFETY: the program's arguments, under cuGetProcAddress's contract (this function's).
    let r = unsafe { real(symbol.raw(), pfn.raw(), version, flags) };
    swap_in_wrapper(r, symbol, pfn, flags);
    r
}

/// The CUDART_INTERFACE export table GUID {6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9}.
const CUDART_INTERFACE: [u8; 16] = [0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9];

/// # Safety
/// Called by the program (or the dynamic loader) with the C contract of the function it replaces.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) -> CuResult {
    let Some(real) = driver::sys::cuGetExportTable.get() else {
        return driver::CUDA_ERROR_UNKNOWN;
    };
    // SAFETY: the program's arguments, under cuGetExportTable's contract (this function's).
    let r = unsafe { real(table, id) };
    if r != CUDA_SUCCESS || table.is_null() || id.is_null() {
        return r;
    }
    // SAFETY: `id` is non-null (checked above) and, by cuGetExportTable's contract, points to the
    // 16-byte table id the program asks for.
    let guid = unsafe { *id };
    log(2, || format!("cuGetExportTable({})", guid.iter().map(|b| format!("{b:02x}")).collect::<String>()));
    // Replacing this table makes CUDA 13's static cudart fail its integrity check (error 103,
    // seen on the H100 with driver 580): cudart's modules are caught at cuLibraryLoadData instead.
    if guid == CUDART_INTERFACE && crate::state::state().opts.patch_export_table {
        static COPY: OnceLock<usize> = OnceLock::new();
        // SAFETY: the call succeeded and `table` is non-null (checked above): the driver wrote the
        // table's address to the program's out-pointer.
        let orig = unsafe { *table } as *const usize;
        // SAFETY: `orig` is the CUDART_INTERFACE table the driver just returned, which starts with
        // its size in bytes and is that long: patched_cudart_table's contract.
        let copy = *COPY.get_or_init(|| unsafe { patched_cudart_table(orig) });
        if copy != 0 {
            // SAFETY: the program's out-pointer, non-null and writable by cuGetExportTable's
            // contract.
            unsafe { *table = copy as *const c_void };
        }
    }
    r
}

/// A copy of the CUDART_INTERFACE table with the module-loading slots (1, 6, 8) wrapped. The table
/// starts with its size in bytes.
///
/// # Safety
/// `orig` points to the driver's CUDART_INTERFACE table: readable for as many bytes as its first
/// word says.
unsafe fn patched_cudart_table(orig: *const usize) -> usize {
    // SAFETY: the table's first word (its size), readable by this function's contract.
    let size = unsafe { *orig };
    if !(9 * 8..0x10000).contains(&size) || size % 8 != 0 {
        log(1, || format!("CUDART_INTERFACE table has unexpected size {size}; not patched"));
        return 0;
    }
    let n = size / 8;
    // SAFETY: `i < size / 8`, so word `i` lies within the table's `size` bytes, readable by this
    // function's contract.
    let mut v: Vec<usize> = (0..n).map(|i| unsafe { *orig.add(i) }).collect();
    // Slots 1, 6 and 8 load modules from fatbins.
    // SAFETY: `v` is a copy of the CUDART_INTERFACE table (this function's contract), whose slots
    // 1, 6 and 8 are cudart's module loaders.
    [v[1], v[6], v[8]] = unsafe { hooks::take_cudart_loaders([v[1], v[6], v[8]]) };
    Box::leak(v.into_boxed_slice()).as_ptr() as usize
}
