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
        // SAFETY: `data` points to `size` readable bytes where not null (cuLinkAddData's
        // contract), for the call.
        let input = (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>().cast_const(), size) });
        match crate::link::checked_input(st.into(), ty, input) {
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
        let checked = bytes.as_ref().and_then(|b| crate::link::checked_input(st.into(), ty, Some(b)));
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
    cuModuleLoadData(module: Out<CUmodule>, image: ModuleImage) {
        modules::load_checked(image, Ok(Vec::new()), modules::plain, |img| real(module, img), modules::LoadOut::Module(module))
    }
    cuModuleLoadDataEx(module: Out<CUmodule>, image: ModuleImage, n: u32, opts: *mut i32, vals: *mut *mut c_void) {
        // SAFETY: `opts` and `vals` hold `n` entries each where not null, as cuModuleLoadDataEx
        // requires, for the call.
        let jit = unsafe { OptionArrays::new(n, opts, vals) };
        modules::load_checked(image, modules::jit_options(&jit), modules::plain, |img| real(module, img, n, opts, vals), modules::LoadOut::Module(module))
    }
    cuModuleLoadFatBinary(module: Out<CUmodule>, image: ModuleImage) {
        modules::load_checked(image, Ok(Vec::new()), modules::fatbin, |img| real(module, img), modules::LoadOut::Module(module))
    }
    cuModuleLoad(module: Out<CUmodule>, fname: CStrIn) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        let load_data = crate::driver::sys::cuModuleLoadData.get();
        match (read_file(fname), load_data) {
            (Some(bytes), Some(f)) => {
                let load = |img: ModuleImage| -> CuResult {
                    // SAFETY: `module` is the program's out-pointer (cuModuleLoad's contract);
                    // `img` is the file's bytes or the checked code load_checked built, either
                    // alive for the call and kept after a successful load.
                    unsafe { f(module.raw(), img.raw()) }
                };
                modules::load_checked(file_image(bytes), Ok(Vec::new()), modules::plain, load, modules::LoadOut::Module(module))
            }
            _ => real(module, fname),
        }
    }
    cuLibraryLoadData(lib: Out<CUlibrary>, code: ModuleImage, jo: *mut i32, jv: *mut *mut c_void, njo: u32, lo: *mut i32, lv: *mut *mut c_void, nlo: u32) {
        // SAFETY: `jo` / `jv` hold `njo` JIT options and `lo` / `lv` `nlo` library options, each
        // where not null, as cuLibraryLoadData requires, for the call.
        let (jit, options) = unsafe { (OptionArrays::new(njo, jo, jv), OptionArrays::new(nlo, lo, lv)) };
        let adoptable = modules::library_options_adoptable(&options);
        crate::state::log(2, || format!("cuLibraryLoadData: {njo} JIT options, library options {:?}", options.pairs().map(|(o, v)| (o, v as *mut c_void)).collect::<Vec<_>>()));
        modules::load_checked(code, modules::jit_options(&jit), modules::plain, |img| real(lib, img, jo, jv, njo, lo, lv, nlo), modules::LoadOut::Library { out: lib, adoptable })
    }
    cuLibraryLoadFromFile(lib: Out<CUlibrary>, fname: CStrIn, jo: *mut i32, jv: *mut *mut c_void, njo: u32, lo: *mut i32, lv: *mut *mut c_void, nlo: u32) {
        // The data loader the file's (checked) bytes go through; a libcuda without it: unchecked.
        let load_data = crate::driver::sys::cuLibraryLoadData.get();
        match (read_file(fname), load_data) {
            (Some(bytes), Some(f)) => {
                let load = |img: ModuleImage| -> CuResult {
                    // SAFETY: `lib` and the option arrays are the program's, valid under
                    // cuLibraryLoadFromFile's contract, which cuLibraryLoadData shares; `img` is the
                    // file's bytes or the checked code load_checked built, alive for the call.
                    unsafe { f(lib.raw(), img.raw(), jo, jv, njo, lo, lv, nlo) }
                };
                // SAFETY: `jo` / `jv` hold `njo` JIT options where not null, as
                // cuLibraryLoadFromFile requires, for the call.
                let jit = unsafe { OptionArrays::new(njo, jo, jv) };
                modules::load_checked(file_image(bytes), modules::jit_options(&jit), modules::plain, load, modules::LoadOut::Library { out: lib, adoptable: false })
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

/// A module file's bytes ([`read_file`]) as the image a data loader takes, kept for the process
/// (a loader may keep pointing at it).
fn file_image(bytes: Vec<u8>) -> ModuleImage {
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    // SAFETY: the module file the program named (a cubin, PTX or fatbin, as cuModuleLoad and
    // cuLibraryLoadFromFile require of it), NUL-terminated, and never freed.
    unsafe { ModuleImage::new(bytes.as_ptr().cast()) }
}

// ---- cudart's private module loaders (CUDART_INTERFACE export table slots 1, 6, 8) ----

/// cudart's own module loaders, from slots 1, 6 and 8 of its CUDART_INTERFACE export table (which
/// interpose.rs replaces with ours): the one way gasan reaches them, each declared once with the
/// prototype of its slot (the module out-pointer and image as the boundary types they pass as);
/// `None` for a null slot.
struct CudartLoaders {
    get_module_from_cubin: Option<unsafe extern "C" fn(Out<CUmodule>, ModuleImage) -> CuResult>,
    get_module_from_cubin_ext1: Option<unsafe extern "C" fn(Out<CUmodule>, ModuleImage, *mut c_void, *mut c_void, u32) -> CuResult>,
    get_module_from_cubin_ext2: Option<unsafe extern "C" fn(ModuleImage, Out<CUmodule>, *mut c_void, *mut c_void, u32) -> CuResult>,
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
pub unsafe extern "C" fn cudart_get_module_from_cubin(module: Out<CUmodule>, wrapper: ModuleImage) -> CuResult {
    guard("get_module_from_cubin", || {
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        let load = |img| {
            // SAFETY: the slot's original, called with cudart's `module` and its fatbin wrapper
            // (`__fatBinC_Wrapper_t`) or one checked_wrapper built (alive for the call, leaked
            // once loaded), under the contract cudart called this slot with.
            unsafe { f(module, img) }
        };
        modules::load_checked(wrapper, Ok(Vec::new()), checked_wrapper, load, modules::LoadOut::Module(module))
    })
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin_ext1(module: Out<CUmodule>, wrapper: ModuleImage, a: *mut c_void, b: *mut c_void, c: u32) -> CuResult {
    guard("get_module_from_cubin_ext1", || {
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin_ext1) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        let load = |img| {
            // SAFETY: as in cudart_get_module_from_cubin; `a`, `b` and `c` go to the original as
            // cudart passed them.
            unsafe { f(module, img, a, b, c) }
        };
        modules::load_checked(wrapper, Ok(Vec::new()), checked_wrapper, load, modules::LoadOut::Module(module))
    })
}

/// # Safety
/// cudart calls it through its export table with the contract of the slot it replaces.
pub unsafe extern "C" fn cudart_get_module_from_cubin_ext2(header: ModuleImage, module: Out<CUmodule>, a: *mut c_void, b: *mut c_void, c: u32) -> CuResult {
    guard("get_module_from_cubin_ext2", || {
        let Some(f) = CUDART_LOADERS.get().and_then(|l| l.get_module_from_cubin_ext2) else { return crate::driver::CUDA_ERROR_NOT_INITIALIZED };
        let load = |img| {
            // SAFETY: the slot's original, called with cudart's fatbin or a fatbin of the checked
            // code (kept alive after a successful load) and cudart's other arguments unchanged,
            // under the contract cudart called this slot with.
            unsafe { f(img, module, a, b, c) }
        };
        modules::load_checked(header, Ok(Vec::new()), modules::fatbin, load, modules::LoadOut::Module(module))
    })
}
