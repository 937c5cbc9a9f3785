//! Module and library loading (checked code instead of the program's), cuLink*, and cudart's
//! private loaders.

use super::*;

hooks! {
    real;
    // ---- module loading ----

    cuLinkCreate_v2(n: u32, o: *mut i32, v: *mut *mut c_void, st: Out<CUlinkState>) {
        let r = real(n, o, v, st);
        if let Some(link) = st.written(r) { crate::link::on_create(link.into()); }
        r
    }
    cuLinkAddData_v2(st: CUlinkState, ty: i32, data: *mut c_void, size: usize, name: *const c_char, n: u32, o: *mut i32, v: *mut *mut c_void) {
        // SAFETY: checked_input needs `data` to point to `size` readable bytes (or be null, which
        // it checks); cuLinkAddData's contract asks the same of the program.
        match unsafe { crate::link::checked_input(st.into(), ty, data, size) } {
            Some((p, len)) => real(st, crate::link::CU_JIT_INPUT_PTX, p as *mut c_void, len, name, n, o, v),
            None => real(st, ty, data, size, name, n, o, v),
        }
    }
    cuLinkAddFile_v2(st: CUlinkState, ty: i32, path: CStrIn, n: u32, o: *mut i32, v: *mut *mut c_void) {
        // The data entry point a checked input goes through (a libcuda without it: unchecked, and
        // nothing recorded for the link).
        let add_data = crate::driver::sys::cuLinkAddData_v2.get();
        let checkable = add_data.is_some() && (ty == crate::link::CU_JIT_INPUT_PTX || ty == crate::link::CU_JIT_INPUT_FATBINARY);
        let bytes = if checkable { read_file(path) } else { None };
        // SAFETY: `b` is our own buffer, `b.len()` readable bytes.
        let checked = bytes.as_ref().and_then(|b| unsafe { crate::link::checked_input(st.into(), ty, b.as_ptr().cast(), b.len()) });
        match (checked, add_data) {
            // The real cuLinkAddData_v2 (present: `checkable`), with the checked PTX in place of
            // the file.
            (Some((p, len)), Some(f)) => {
                // SAFETY: `st` and the `n` options in `o` / `v` are the program's, valid under
                // cuLinkAddFile's contract, which cuLinkAddData shares; `p` is `len` bytes of
                // NUL-terminated checked PTX kept in the link's state until cuLinkDestroy; `path`
                // (a C string) serves as the input's name.
                unsafe { f(st, crate::link::CU_JIT_INPUT_PTX, p as *mut c_void, len, path.raw(), n, o, v) }
            }
            _ => real(st, ty, path, n, o, v),
        }
    }
    cuLinkComplete(st: CUlinkState, out: Out<*mut c_void>, size: *mut usize) {
        let r = real(st, out, size);
        if let Some(cubin) = out.written(r) { crate::link::on_complete(st.into(), cubin); }
        else if r != CUDA_SUCCESS { crate::state::log(0, || format!("WARNING: cuLinkComplete failed ({r}) on a link with gasan-checked inputs")); }
        r
    }
    cuLinkDestroy(st: CUlinkState) { crate::link::on_destroy(st.into()); real(st) }
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
    cuModuleLoad(module: *mut CUmodule, fname: CStrIn) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        let load_data = crate::driver::sys::cuModuleLoadData.get();
        match (read_file(fname), load_data) {
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
    cuLibraryLoadFromFile(lib: *mut CUlibrary, fname: CStrIn, jo: *mut i32, jv: *mut *mut c_void, njo: u32, lo: *mut i32, lv: *mut *mut c_void, nlo: u32) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        let load_data = crate::driver::sys::cuLibraryLoadData.get();
        match (read_file(fname), load_data) {
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
fn read_file(fname: CStrIn) -> Option<Vec<u8>> {
    let p = fname.get()?.to_str().ok()?;
    let mut b = std::fs::read(p).ok()?;
    b.push(0);
    Some(b)
}

// ---- cudart's private module loaders (CUDART_INTERFACE export table slots 1, 6, 8) ----

/// cudart's own module loaders, from slots 1, 6 and 8 of its CUDART_INTERFACE export table (which
/// interpose.rs replaces with ours): the one way gasan reaches them, each declared once with the
/// prototype of its slot; `None` for a null slot.
struct CudartLoaders {
    get_module_from_cubin: Option<unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CuResult>,
    get_module_from_cubin_ext1: Option<unsafe extern "C" fn(*mut CUmodule, *const c_void, *mut c_void, *mut c_void, u32) -> CuResult>,
    get_module_from_cubin_ext2: Option<unsafe extern "C" fn(*const c_void, *mut CUmodule, *mut c_void, *mut c_void, u32) -> CuResult>,
}

static CUDART_LOADERS: std::sync::OnceLock<CudartLoaders> = std::sync::OnceLock::new();

/// Keeps cudart's loaders `orig` (slots 1, 6, 8 of CUDART_INTERFACE) and returns ours for them.
///
/// # Safety
/// `orig` holds the entries of slots 1, 6 and 8 of the driver's CUDART_INTERFACE table, in that
/// order: each null or cudart's loader of that slot.
pub(crate) unsafe fn take_cudart_loaders(orig: [usize; 3]) -> [usize; 3] {
    // SAFETY: each entry is null (`None`: the niche of `Option<fn>`) or the loader of its slot,
    // whose prototype is the field's (this function's contract); usize and a function pointer
    // have the same size.
    let _ = CUDART_LOADERS.set(unsafe {
        CudartLoaders {
            get_module_from_cubin: std::mem::transmute::<usize, Option<_>>(orig[0]),
            get_module_from_cubin_ext1: std::mem::transmute::<usize, Option<_>>(orig[1]),
            get_module_from_cubin_ext2: std::mem::transmute::<usize, Option<_>>(orig[2]),
        }
    });
    [cudart_get_module_from_cubin as *const () as usize, cudart_get_module_from_cubin_ext1 as *const () as usize, cudart_get_module_from_cubin_ext2 as *const () as usize]
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
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
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
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin_ext1) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        // SAFETY: as in cudart_get_module_from_cubin; `a`, `b` and `c` go to the original as
        // cudart passed them.
        unsafe { modules::load_checked(wrapper, Ok(Vec::new()), checked_wrapper, |img| f(module, img, a, b, c), modules::LoadOut::Module(module)) }
    })
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin_ext2(header: *const c_void, module: *mut CUmodule, a: *mut c_void, b: *mut c_void, c: u32) -> CuResult {
    guard("get_module_from_cubin_ext2", || {
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin_ext2) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        // SAFETY: `header` is the fatbin cudart passes this slot, a module image load_checked can
        // read; `load` calls the slot's original with it or with a fatbin of the checked code
        // (kept alive after a successful load), and cudart's other arguments unchanged.
        // `*module` is read only after a successful load wrote it.
        unsafe { modules::load_checked(header, Ok(Vec::new()), modules::fatbin, |img| f(img, module, a, b, c), modules::LoadOut::Module(module)) }
    })
}
