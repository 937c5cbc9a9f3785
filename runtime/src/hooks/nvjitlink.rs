//! nvJitLink (issue 39 item 5): Numba-CUDA 0.16 and later links a kernel's PTX with cuda.core's
//! `Linker`, which runs nvJitLink in-process whenever it loads (the driver's `cuLink*`, which the
//! runtime checks, only when it does not), so the driver gets a cubin the runtime cannot check. The
//! same holds for any program that links PTX with nvJitLink. These wrappers make the linked cubin a
//! checked one, as [`super::nvrtc`] does for NVRTC: the program's link runs as it is; after it
//! completes, the same inputs are linked again with the link's first PTX input checked and marked
//! ([`gasan_jit::check_module`]: its marker, site table and parameter tags, so the runtime
//! recognises the cubin at load), and `nvJitLinkGetLinkedCubinSize` / `nvJitLinkGetLinkedCubin`
//! serve that cubin. Only one PTX input per link is checked: a marked cubin carries one module's
//! tables and control block (other PTX inputs, such as CUDA C++ files Numba compiled with NVRTC
//! for `link=`, stay unchecked). Links that make PTX (`-ptx`) or optimise LTO-IR (`-lto`) are left
//! alone.
//!
//! It never breaks the program: whatever fails on gasan's side gives a warning and the program gets
//! nvJitLink's cubin. Each function is wrapped under its plain name (cuda-bindings looks these up)
//! and its CUDA 13.0 versioned one (`__nvJitLinkCreate_13_0`, which nvJitLink.h's inline functions
//! call). How calls get here: [`super::library`].

use super::library::Library;
use crate::jit_origin::{self, Origin};
use crate::options::{process, Options};
use crate::state::log;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

/// `nvJitLinkResult`.
type LinkResult = c_int;
/// `nvJitLinkHandle` (an opaque pointer).
type Handle = *mut c_void;

const NVJITLINK_SUCCESS: LinkResult = 0;
const NVJITLINK_ERROR_INTERNAL: LinkResult = 6;
/// `nvJitLinkInputType`: PTX, and "any" (the library looks at the bytes).
const INPUT_PTX: c_int = 2;
const INPUT_ANY: c_int = 10;

/// Declares each wrapper under its plain and its versioned name (same body, which reaches
/// nvJitLink through the plain name's [`sys`] entry).
macro_rules! wrappers {
    ($( $plain:ident | $versioned:ident ( $($a:ident : $t:ty),* ) => $body:ident; )*) => {
        $(
            /// # Safety
            /// nvJitLink.h's contract for the function of this name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $plain($($a: $t),*) -> LinkResult {
                // SAFETY: the program's arguments, under this function's contract.
                unsafe { $body($($a),*) }
            }
            /// # Safety
            /// nvJitLink.h's contract for the function of this name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $versioned($($a: $t),*) -> LinkResult {
                // SAFETY: the program's arguments, under this function's contract.
                unsafe { $body($($a),*) }
            }
        )*
        fn table() -> &'static [(&'static str, usize)] {
            static T: OnceLock<Vec<(&str, usize)>> = OnceLock::new();
            T.get_or_init(|| {
                let mut v = vec![$((stringify!($plain), $plain as *const () as usize)),*];
                v.extend([$((stringify!($versioned), $versioned as *const () as usize)),*]);
                v
            })
        }
    };
}

wrappers! {
    nvJitLinkCreate | __nvJitLinkCreate_13_0 (handle: *mut Handle, n: u32, options: *const *const c_char) => create;
    nvJitLinkDestroy | __nvJitLinkDestroy_13_0 (handle: *mut Handle) => destroy;
    nvJitLinkAddData | __nvJitLinkAddData_13_0 (handle: Handle, kind: c_int, data: *const c_void, size: usize, name: *const c_char) => add_data;
    nvJitLinkAddFile | __nvJitLinkAddFile_13_0 (handle: Handle, kind: c_int, file: *const c_char) => add_file;
    nvJitLinkComplete | __nvJitLinkComplete_13_0 (handle: Handle) => complete;
    nvJitLinkGetLinkedCubinSize | __nvJitLinkGetLinkedCubinSize_13_0 (handle: Handle, size: *mut usize) => cubin_size;
    nvJitLinkGetLinkedCubin | __nvJitLinkGetLinkedCubin_13_0 (handle: Handle, out: *mut c_void) => cubin;
}

/// nvJitLink, as the wrappers reach it.
pub(crate) static NVJITLINK: Library = Library::new(table);

/// nvJitLink's functions gasan calls, each declared once with nvJitLink.h's (CUDA 13.0) prototype
/// under its plain name (the versioned names are the same functions).
mod sys {
    use super::{Handle, LinkResult, NVJITLINK};
    use std::ffi::{c_char, c_int, c_void};
    super::super::library::exports! { NVJITLINK -> LinkResult;
        nvJitLinkCreate(handle: *mut Handle, n: u32, options: *const *const c_char);
        nvJitLinkDestroy(handle: *mut Handle);
        nvJitLinkAddData(handle: Handle, kind: c_int, data: *const c_void, size: usize, name: *const c_char);
        nvJitLinkAddFile(handle: Handle, kind: c_int, file: *const c_char);
        nvJitLinkComplete(handle: Handle);
        nvJitLinkGetLinkedCubinSize(handle: Handle, size: *mut usize);
        nvJitLinkGetLinkedCubin(handle: Handle, cubin: *mut c_void);
    }
}

/// One input of a link, as the program added it.
enum Input {
    Data { kind: c_int, bytes: Vec<u8>, name: Option<CString> },
    File { kind: c_int, path: CString },
}

/// What gasan keeps of one link: what linking it again needs, and its checked cubin.
#[derive(Default)]
struct Link {
    options: Vec<CString>,
    inputs: Vec<Input>,
    checked: Option<Vec<u8>>,
}

fn links() -> &'static Mutex<HashMap<usize, Link>> {
    static M: OnceLock<Mutex<HashMap<usize, Link>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn with_links<R>(f: impl FnOnce(&mut HashMap<usize, Link>) -> R) -> R {
    f(&mut links().lock().unwrap_or_else(|e| e.into_inner()))
}

/// Runs gasan's part of a wrapper; a panic in it is reported and otherwise ignored.
fn ours(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        eprintln!("==gasan== internal error in {what}; the program's nvJitLink call is unaffected");
    }
}

/// # Safety
/// nvJitLinkCreate's contract.
unsafe fn create(handle: *mut Handle, n: u32, options: *const *const c_char) -> LinkResult {
    let Some(f) = sys::nvJitLinkCreate.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { f(handle, n, options) };
    if r == NVJITLINK_SUCCESS && !handle.is_null() && process().instrument {
        ours("nvJitLinkCreate", || {
            // SAFETY: the call succeeded: `options` holds `n` C strings (unused when `n` is 0).
            let options: Vec<CString> = (0..n as usize).filter_map(|k| unsafe { (*options.add(k)).as_ref().map(|p| CStr::from_ptr(p).to_owned()) }).collect();
            // SAFETY: nvJitLink wrote the new handle to `handle` (non-null, checked above).
            let h = unsafe { *handle } as usize;
            with_links(|m| m.insert(h, Link { options, ..Link::default() }));
        });
    }
    r
}

/// # Safety
/// nvJitLinkAddData's contract.
unsafe fn add_data(handle: Handle, kind: c_int, data: *const c_void, size: usize, name: *const c_char) -> LinkResult {
    let Some(f) = sys::nvJitLinkAddData.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { f(handle, kind, data, size, name) };
    if r == NVJITLINK_SUCCESS && !data.is_null() {
        ours("nvJitLinkAddData", || {
            // SAFETY: the call succeeded: `data` holds `size` bytes, `name` is null or a C string.
            let input = unsafe { Input::Data { kind, bytes: std::slice::from_raw_parts(data.cast::<u8>(), size).to_vec(), name: name.as_ref().map(|p| CStr::from_ptr(p).to_owned()) } };
            with_links(|m| m.get_mut(&(handle as usize)).map(|l| l.inputs.push(input)));
        });
    }
    r
}

/// # Safety
/// nvJitLinkAddFile's contract.
unsafe fn add_file(handle: Handle, kind: c_int, file: *const c_char) -> LinkResult {
    let Some(f) = sys::nvJitLinkAddFile.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { f(handle, kind, file) };
    if r == NVJITLINK_SUCCESS && !file.is_null() {
        ours("nvJitLinkAddFile", || {
            // SAFETY: the call succeeded: `file` is a C string.
            let input = Input::File { kind, path: unsafe { CStr::from_ptr(file) }.to_owned() };
            with_links(|m| m.get_mut(&(handle as usize)).map(|l| l.inputs.push(input)));
        });
    }
    r
}

/// # Safety
/// nvJitLinkComplete's contract.
unsafe fn complete(handle: Handle) -> LinkResult {
    let Some(f) = sys::nvJitLinkComplete.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's argument, under the function's contract.
    let r = unsafe { f(handle) };
    if r == NVJITLINK_SUCCESS {
        ours("nvJitLinkComplete", || {
            // The link's inputs are taken while it is checked, and given back with the result.
            let Some(mut link) = with_links(|m| m.remove(&(handle as usize))) else { return };
            link.checked = check_link(&link, process());
            with_links(|m| m.insert(handle as usize, link));
        });
    }
    r
}

/// # Safety
/// nvJitLinkGetLinkedCubinSize's contract.
unsafe fn cubin_size(handle: Handle, size: *mut usize) -> LinkResult {
    if !size.is_null() {
        if let Some(n) = with_links(|m| m.get(&(handle as usize)).and_then(|l| l.checked.as_ref().map(Vec::len))) {
            // SAFETY: the program's out-pointer (non-null, checked above).
            unsafe { *size = n };
            return NVJITLINK_SUCCESS;
        }
    }
    let Some(f) = sys::nvJitLinkGetLinkedCubinSize.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's arguments, under the function's contract.
    unsafe { f(handle, size) }
}

/// # Safety
/// nvJitLinkGetLinkedCubin's contract: `cubin` has room for nvJitLinkGetLinkedCubinSize's
/// answer, which for a checked link is the checked cubin's size.
unsafe fn cubin(handle: Handle, cubin: *mut c_void) -> LinkResult {
    if !cubin.is_null() {
        let served = with_links(|m| {
            let c = m.get(&(handle as usize))?.checked.as_ref()?;
            // SAFETY: the program sized `cubin` with nvJitLinkGetLinkedCubinSize, which answered
            // `c.len()` (this function's contract); `c` is gasan's own buffer.
            unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), cubin.cast::<u8>(), c.len()) };
            Some(())
        });
        if served.is_some() {
            return NVJITLINK_SUCCESS;
        }
    }
    let Some(f) = sys::nvJitLinkGetLinkedCubin.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's arguments, under the function's contract.
    unsafe { f(handle, cubin) }
}

/// # Safety
/// nvJitLinkDestroy's contract.
unsafe fn destroy(handle: *mut Handle) -> LinkResult {
    if !handle.is_null() {
        // SAFETY: the program's pointer to its handle (non-null, checked above).
        let h = unsafe { *handle } as usize;
        with_links(|m| m.remove(&h));
    }
    let Some(f) = sys::nvJitLinkDestroy.get() else { return NVJITLINK_ERROR_INTERNAL };
    // SAFETY: the program's argument, under the function's contract.
    unsafe { f(handle) }
}

/// The PTX text of an input, if it is PTX.
fn ptx_of(input: &Input) -> Option<&str> {
    let Input::Data { kind, bytes, .. } = input else { return None };
    let text = std::str::from_utf8(bytes.split(|&b| b == 0).next()?).ok()?;
    (*kind == INPUT_PTX || (*kind == INPUT_ANY && text.contains(".target"))).then_some(text)
}

/// The checked cubin of a link that just completed, or `None` (with a warning where something
/// failed, at `verbosity=1` where there is nothing to check).
fn check_link(link: &Link, o: &Options) -> Option<Vec<u8>> {
    let opts: Vec<String> = link.options.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let skip = |why: &str| {
        log(1, || format!("nvJitLink link: not checked: {why}"));
        jit_origin::left_unchecked(Origin::NvJitLink, why);
    };
    if let Some(x) = opts.iter().find(|x| *x == "-ptx" || *x == "-lto") {
        skip(&format!("{x}: no cubin from PTX to check"));
        return None;
    }
    if !opts.iter().any(|x| x.starts_with("-arch=sm_")) {
        skip("no -arch=sm_XX");
        return None;
    }
    let Some(first) = link.inputs.iter().position(|i| ptx_of(i).is_some()) else {
        skip("no PTX input");
        return None;
    };
    match checked_link(link, first, o) {
        Ok((cubin, key)) => {
            log(1, || format!("nvJitLink link: checked cubin ({} bytes, PTX input {} of {})", cubin.len(), first + 1, link.inputs.len()));
            jit_origin::made(Origin::NvJitLink, key);
            Some(cubin)
        }
        Err(why) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            super::library::warn(&WARNED, format!("nvJitLink link: not checked ({why}); the program gets nvJitLink's own cubin"));
            jit_origin::left_unchecked(Origin::NvJitLink, "failed on gasan's side (warned)");
            None
        }
    }
}

/// Links the inputs again with input `first` checked, and returns the cubin and its marker's key.
fn checked_link(link: &Link, first: usize, o: &Options) -> Result<(Vec<u8>, [u8; 32]), String> {
    let ptx = ptx_of(&link.inputs[first]).ok_or("not PTX")?;
    let iopts = crate::modules::instrument_options_for(o, false);
    let checked = gasan_jit::check_module(ptx, &iopts, &o.code_key()).map_err(|e| format!("the rewriter refused its PTX: {e}"))?;
    let checked_text = CString::new(checked.text).map_err(|_| "checked PTX holds NUL")?;
    let fns = (
        sys::nvJitLinkCreate.get(),
        sys::nvJitLinkAddData.get(),
        sys::nvJitLinkAddFile.get(),
        sys::nvJitLinkComplete.get(),
        sys::nvJitLinkGetLinkedCubinSize.get(),
        sys::nvJitLinkGetLinkedCubin.get(),
        sys::nvJitLinkDestroy.get(),
    );
    let (Some(create), Some(add_data), Some(add_file), Some(complete), Some(size), Some(get), Some(destroy)) = fns else { return Err("nvJitLink's functions not found".into()) };
    let optp: Vec<*const c_char> = link.options.iter().map(|c| c.as_ptr()).collect();
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: nvJitLink's create with the program's options (copies alive for the call).
    let r = unsafe { create(&mut h, optp.len() as u32, optp.as_ptr()) };
    if r != NVJITLINK_SUCCESS {
        return Err(format!("nvJitLinkCreate of the copy: error {r}"));
    }
    let result = (|| {
        for (k, input) in link.inputs.iter().enumerate() {
            let r = match input {
                // SAFETY: `h` is live; the checked PTX with its NUL, alive for the call.
                _ if k == first => unsafe { add_data(h, INPUT_PTX, checked_text.as_ptr().cast(), checked_text.as_bytes_with_nul().len(), c"gasan-checked.ptx".as_ptr()) },
                // SAFETY: `h` is live; the program's input bytes as it added them.
                Input::Data { kind, bytes, name } => unsafe { add_data(h, *kind, bytes.as_ptr().cast(), bytes.len(), name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr())) },
                // SAFETY: `h` is live; the program's file name.
                Input::File { kind, path } => unsafe { add_file(h, *kind, path.as_ptr()) },
            };
            if r != NVJITLINK_SUCCESS {
                return Err(format!("adding input {} to the copy: error {r}", k + 1));
            }
        }
        // SAFETY: `h` is live with every input added.
        let r = unsafe { complete(h) };
        if r != NVJITLINK_SUCCESS {
            return Err(format!("linking the checked copy: error {r}"));
        }
        let mut n = 0usize;
        // SAFETY: `h` is complete; `n` a valid out-pointer.
        let r = unsafe { size(h, &mut n) };
        if r != NVJITLINK_SUCCESS || n == 0 {
            return Err(format!("nvJitLinkGetLinkedCubinSize: error {r}"));
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` has the `n` bytes nvJitLinkGetLinkedCubinSize asked for.
        let r = unsafe { get(h, buf.as_mut_ptr().cast()) };
        if r != NVJITLINK_SUCCESS {
            return Err(format!("nvJitLinkGetLinkedCubin: error {r}"));
        }
        Ok(buf)
    })();
    // SAFETY: `h` is the link created above, destroyed once.
    unsafe { destroy(&mut h) };
    let cubin = result?;
    match gasan_jit::recognise(&cubin, gasan_jit::Expected { scale: o.shadow_scale, recover: !o.halt_on_error }) {
        gasan_jit::Recognition::Checked { marker, .. } => Ok((cubin, marker.key)),
        other => Err(format!("the checked cubin is not recognised ({other:?})")),
    }
}
