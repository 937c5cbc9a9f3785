//! nvJitLink (issue 39 item 5): Numba-CUDA 0.16 and later links a kernel with cuda.core's
//! `Linker`, which runs nvJitLink in-process whenever it loads (the driver's `cuLink*`, which the
//! runtime checks, only when it does not), so the driver gets a cubin the runtime cannot check. The
//! same holds for any program that links with nvJitLink. These wrappers make the linked cubin a
//! checked one, as [`super::nvrtc`] does for NVRTC: the program's link runs as it is; after it
//! completes, gasan links again with checked code ([`gasan_jit::check_module`]: its marker, site
//! table and parameter tags, so the runtime recognises the cubin at load), and
//! `nvJitLinkGetLinkedCubinSize` / `nvJitLinkGetLinkedCubin` serve that cubin:
//!
//! - a link of PTX: the same inputs, with every PTX input checked (CUDA C++ files Numba compiled
//!   with NVRTC for `link=` included). Separately compiled PTX modules cannot be merged into one
//!   module before the link (nvJitLink makes PTX only with `-lto`), so each keeps its own control
//!   block and site table in the one cubin ([`gasan_jit::check_link_input`]: the first input as
//!   a single module is checked, each further one with its control block and slow path renamed
//!   and its tables under a name of its own); the runtime's load registers every input's sites
//!   and writes every control block;
//! - a link-time-optimised link (`-lto`, LTO-IR inputs: what Numba-CUDA 0.30 makes with NVVM, and
//!   NVRTC `-dlto`): the LTO-IR inputs are linked with the program's options and `-ptx`, which
//!   gives the whole optimised program as one PTX module (every LTO-IR input, the CUDA C++ of
//!   Numba's `link=` included, so all of it is checked); that PTX is checked and linked, without
//!   the LTO-only options, with the link's other inputs (PTX inputs checked as further inputs as
//!   above; cubins, fatbins, libraries such as `libcudadevrt.a` as they were) to the cubin served. LTO-IR inside a fatbin, object or library input is not
//!   looked for: such a link's checked copy fails to link, and the program gets nvJitLink's cubin
//!   with a warning.
//!
//! Links that make PTX (`-ptx`) are left alone. It never breaks the program: whatever fails on
//! gasan's side gives a warning and the program gets nvJitLink's cubin. Each function is wrapped
//! under its plain name (cuda-bindings looks these up) and its CUDA 13.0 versioned one
//! (`__nvJitLinkCreate_13_0`, which nvJitLink.h's inline functions call). How calls get here:
//! [`super::library`].

use crate::jit_origin::{self, Origin};
use crate::library::Library;
use crate::modules::ModuleOptions;
use crate::state::log;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

/// `nvJitLinkResult`.
type LinkResult = c_int;
/// `nvJitLinkHandle` (an opaque pointer).
type Handle = *mut c_void;

const NVJITLINK_SUCCESS: LinkResult = 0;
const NVJITLINK_ERROR_INTERNAL: LinkResult = 6;
/// `nvJitLinkInputType`: PTX, LTO-IR, and "any" (the library looks at the bytes).
const INPUT_PTX: c_int = 2;
const INPUT_LTOIR: c_int = 3;
const INPUT_ANY: c_int = 10;
/// The first bytes of LTO-IR (NVVM's, from NVRTC `-dlto` and Numba-CUDA alike), which tell an
/// input added as "any" apart.
const LTOIR_MAGIC: [u8; 4] = [0xed, 0x43, 0x4e, 0x7f];
/// Options that only steer link-time optimisation (nvJitLink.h, "Supported Link Options"): the
/// checked PTX of an `-lto` link is optimised already, and a link of PTX refuses or ignores them.
const LTO_ONLY_OPTIONS: &[&str] = &["-lto", "-ptx", "-Xnvvm", "-split-compile-extended", "-kernels-used", "-variables-used", "-optimize-unused-variables"];

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
    crate::library::exports! { NVJITLINK -> LinkResult;
        nvJitLinkCreate(handle: *mut Handle, n: u32, options: *const *const c_char);
        nvJitLinkDestroy(handle: *mut Handle);
        nvJitLinkAddData(handle: Handle, kind: c_int, data: *const c_void, size: usize, name: *const c_char);
        nvJitLinkAddFile(handle: Handle, kind: c_int, file: *const c_char);
        nvJitLinkComplete(handle: Handle);
        nvJitLinkGetLinkedCubinSize(handle: Handle, size: *mut usize);
        nvJitLinkGetLinkedCubin(handle: Handle, cubin: *mut c_void);
        nvJitLinkGetLinkedPtxSize(handle: Handle, size: *mut usize);
        nvJitLinkGetLinkedPtx(handle: Handle, ptx: *mut c_char);
        nvJitLinkGetErrorLogSize(handle: Handle, size: *mut usize);
        nvJitLinkGetErrorLog(handle: Handle, log: *mut c_char);
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
    if r == NVJITLINK_SUCCESS && !handle.is_null() && crate::modules::options().instrument {
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
            link.checked = check_link(&link, crate::modules::options());
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

/// Whether an input is LTO-IR: added as such, or as "any" with LTO-IR's first bytes.
fn is_ltoir(input: &Input) -> bool {
    match input {
        Input::Data { kind, bytes, .. } => *kind == INPUT_LTOIR || (*kind == INPUT_ANY && bytes.starts_with(&LTOIR_MAGIC)),
        Input::File { kind, path } => {
            *kind == INPUT_LTOIR
                || (*kind == INPUT_ANY && {
                    let mut head = [0u8; 4];
                    std::fs::File::open(std::ffi::OsStr::from_bytes(path.to_bytes())).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok() && head == LTOIR_MAGIC
                })
        }
    }
}

/// The checked cubin of a link that just completed, or `None` (with a warning where something
/// failed, at `verbosity=1` where there is nothing to check).
fn check_link(link: &Link, o: &ModuleOptions) -> Option<Vec<u8>> {
    let opts: Vec<String> = link.options.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let skip = |why: &str| {
        log(1, || format!("nvJitLink link: not checked: {why}"));
        jit_origin::left_unchecked(Origin::NvJitLink, why);
    };
    if opts.iter().any(|x| x == "-ptx") {
        skip("-ptx: the link makes PTX, not a cubin");
        return None;
    }
    if !opts.iter().any(|x| x.starts_with("-arch=sm_")) {
        skip("no -arch=sm_XX");
        return None;
    }
    let lto = opts.iter().any(|x| x == "-lto");
    let ptx_inputs = link.inputs.iter().filter(|i| ptx_of(i).is_some()).count();
    let made = if lto {
        if !link.inputs.iter().any(is_ltoir) {
            skip("-lto with no LTO-IR input");
            return None;
        }
        checked_lto_link(link, o).map(|(cubin, key)| {
            let n = link.inputs.iter().filter(|i| is_ltoir(i)).count();
            (cubin, key, format!("LTO-IR inputs ({n}) optimised to one PTX module, checked; {ptx_inputs} PTX input(s) checked; {} other inputs as they were", link.inputs.len() - n - ptx_inputs))
        })
    } else {
        if ptx_inputs == 0 {
            skip("no PTX input");
            return None;
        }
        checked_link(link, o).map(|(cubin, key)| (cubin, key, format!("{ptx_inputs} PTX input(s) of {} checked", link.inputs.len())))
    };
    match made {
        Ok((cubin, key, what)) => {
            log(1, || format!("nvJitLink link: checked cubin ({} bytes, {what})", cubin.len()));
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

/// What one of gasan's own links makes.
#[derive(Clone, Copy, PartialEq)]
enum Output {
    Cubin,
    Ptx,
}

/// One input of one of gasan's own links, borrowed from the program's or gasan's.
enum Add<'a> {
    Data { kind: c_int, bytes: &'a [u8], name: *const c_char },
    File { kind: c_int, path: &'a CStr },
}

impl<'a> From<&'a Input> for Add<'a> {
    fn from(i: &'a Input) -> Self {
        match i {
            Input::Data { kind, bytes, name } => Add::Data { kind: *kind, bytes, name: name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()) },
            Input::File { kind, path } => Add::File { kind: *kind, path },
        }
    }
}

/// Links `inputs` with `options` on a handle of gasan's own and returns what it made.
fn link_once(options: &[CString], inputs: &[Add], output: Output) -> Result<Vec<u8>, String> {
    let fns = (sys::nvJitLinkCreate.get(), sys::nvJitLinkAddData.get(), sys::nvJitLinkAddFile.get(), sys::nvJitLinkComplete.get(), sys::nvJitLinkDestroy.get());
    let (Some(create), Some(add_data), Some(add_file), Some(complete), Some(destroy)) = fns else { return Err("nvJitLink's functions not found".into()) };
    let size = match output {
        Output::Cubin => sys::nvJitLinkGetLinkedCubinSize.get(),
        Output::Ptx => sys::nvJitLinkGetLinkedPtxSize.get(),
    };
    let Some(size) = size else { return Err("nvJitLink's functions not found".into()) };
    // The output into `buf` (sized by `size`), or `None` where nvJitLink lacks the function.
    let get = |h: Handle, buf: &mut [u8]| match output {
        // SAFETY: `h` is complete; `buf` has the bytes the size function asked for.
        Output::Cubin => sys::nvJitLinkGetLinkedCubin.get().map(|f| unsafe { f(h, buf.as_mut_ptr().cast()) }),
        // SAFETY: as above.
        Output::Ptx => sys::nvJitLinkGetLinkedPtx.get().map(|f| unsafe { f(h, buf.as_mut_ptr().cast()) }),
    };
    let what = if output == Output::Ptx { "PTX" } else { "cubin" };
    let optp: Vec<*const c_char> = options.iter().map(|c| c.as_ptr()).collect();
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: nvJitLink's create with `optp.len()` C strings (copies alive for the call).
    let r = unsafe { create(&mut h, optp.len() as u32, optp.as_ptr()) };
    if r != NVJITLINK_SUCCESS {
        return Err(format!("nvJitLinkCreate for the {what}: error {r}"));
    }
    let result = (|| {
        for (k, input) in inputs.iter().enumerate() {
            let r = match input {
                // SAFETY: `h` is live; the bytes and the name (null or a C string) are alive for the call.
                Add::Data { kind, bytes, name } => unsafe { add_data(h, *kind, bytes.as_ptr().cast(), bytes.len(), *name) },
                // SAFETY: `h` is live; a C string.
                Add::File { kind, path } => unsafe { add_file(h, *kind, path.as_ptr()) },
            };
            if r != NVJITLINK_SUCCESS {
                return Err(format!("adding input {} to the link for the {what}: error {r}{}", k + 1, error_log(h)));
            }
        }
        // SAFETY: `h` is live with every input added.
        let r = unsafe { complete(h) };
        if r != NVJITLINK_SUCCESS {
            return Err(format!("linking the {what}: error {r}{}", error_log(h)));
        }
        let mut n = 0usize;
        // SAFETY: `h` is complete; `n` a valid out-pointer.
        let r = unsafe { size(h, &mut n) };
        if r != NVJITLINK_SUCCESS || n == 0 {
            return Err(format!("the linked {what}'s size: error {r}"));
        }
        let mut buf = vec![0u8; n];
        let r = get(h, &mut buf).ok_or("nvJitLink's functions not found")?;
        if r != NVJITLINK_SUCCESS {
            return Err(format!("the linked {what}: error {r}"));
        }
        Ok(buf)
    })();
    // SAFETY: `h` is the link created above, destroyed once.
    unsafe { destroy(&mut h) };
    result
}

/// `": <first line of the link's error log>"`, or nothing.
fn error_log(h: Handle) -> String {
    let (Some(size), Some(get)) = (sys::nvJitLinkGetErrorLogSize.get(), sys::nvJitLinkGetErrorLog.get()) else { return String::new() };
    let mut n = 0usize;
    // SAFETY: `h` is live; `n` a valid out-pointer.
    if unsafe { size(h, &mut n) } != NVJITLINK_SUCCESS || n == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; n];
    // SAFETY: `buf` has the `n` bytes asked for.
    if unsafe { get(h, buf.as_mut_ptr().cast()) } != NVJITLINK_SUCCESS {
        return String::new();
    }
    let text = String::from_utf8_lossy(buf.split(|&b| b == 0).next().unwrap_or_default()).into_owned();
    text.lines().map(str::trim).find(|l| !l.is_empty()).map(|l| format!(": {l}")).unwrap_or_default()
}

/// `ptx` checked as checked input `n` of a link ([`gasan_jit::check_link_input`]), as a
/// NUL-terminated PTX input.
fn checked_ptx(ptx: &str, o: &ModuleOptions, n: usize) -> Result<CString, String> {
    let checked = gasan_jit::check_link_input(ptx, &o.instrument_options(false), &o.code_key, n).map_err(|e| format!("the rewriter refused its PTX (checked input {}): {e}", n + 1))?;
    CString::new(checked.text).map_err(|_| "checked PTX holds NUL".into())
}

/// `cubin` if the runtime's load will recognise it as checked, with all `inputs` checked inputs
/// (so every input's control block gets written); with its marker's key.
fn recognised(cubin: Vec<u8>, o: &ModuleOptions, inputs: usize) -> Result<(Vec<u8>, [u8; 32]), String> {
    match gasan_jit::recognise(&cubin, o.expected()) {
        gasan_jit::Recognition::Checked { marker, linked, .. } if linked.len() + 1 == inputs => Ok((cubin, marker.key)),
        gasan_jit::Recognition::Checked { linked, .. } => Err(format!("the checked cubin carries the tables of {} checked inputs, not {inputs}", linked.len() + 1)),
        other => Err(format!("the checked cubin is not recognised ({other:?})")),
    }
}

/// The PTX inputs among `inputs` checked, the `n`-th as checked input `first + n`.
fn check_ptx_inputs(inputs: &[&Input], o: &ModuleOptions, first: usize) -> Result<Vec<CString>, String> {
    inputs.iter().filter_map(|i| ptx_of(i)).enumerate().map(|(n, ptx)| checked_ptx(ptx, o, first + n)).collect()
}

/// `inputs` in their order, each PTX input replaced by its checked PTX (`checked`, from
/// [`check_ptx_inputs`]), the others as they were.
fn with_checked<'a>(inputs: &[&'a Input], checked: &'a [CString]) -> Vec<Add<'a>> {
    let mut checked = checked.iter();
    inputs
        .iter()
        .map(|&i| match ptx_of(i).and_then(|_| checked.next()) {
            Some(c) => Add::Data { kind: INPUT_PTX, bytes: c.as_bytes_with_nul(), name: c"gasan-checked.ptx".as_ptr() },
            None => Add::from(i),
        })
        .collect()
}

/// Links the inputs again with every PTX input checked, and returns the cubin and its marker's key.
fn checked_link(link: &Link, o: &ModuleOptions) -> Result<(Vec<u8>, [u8; 32]), String> {
    let all: Vec<&Input> = link.inputs.iter().collect();
    let checked = check_ptx_inputs(&all, o, 0)?;
    recognised(link_once(&link.options, &with_checked(&all, &checked), Output::Cubin)?, o, checked.len())
}

/// Whether a link option only steers link-time optimisation (`-Xnvvm` with anything after it,
/// the others alone or with `=value`).
fn lto_only(option: &[u8]) -> bool {
    LTO_ONLY_OPTIONS.iter().any(|x| option.starts_with(x.as_bytes()) && (*x == "-Xnvvm" || matches!(option.get(x.len()), None | Some(b'='))))
}

/// An `-lto` link: its LTO-IR optimised to PTX with the program's options, checked, and linked
/// with the other inputs without the LTO-only options; returns the cubin and its marker's key.
fn checked_lto_link(link: &Link, o: &ModuleOptions) -> Result<(Vec<u8>, [u8; 32]), String> {
    let mut ptx_options = link.options.clone();
    ptx_options.push(c"-ptx".to_owned());
    let ltoir: Vec<Add> = link.inputs.iter().filter(|i| is_ltoir(i)).map(Add::from).collect();
    let ptx = link_once(&ptx_options, &ltoir, Output::Ptx)?;
    let ptx = std::str::from_utf8(ptx.split(|&b| b == 0).next().unwrap_or_default()).map_err(|_| "the linked PTX is not UTF-8")?;
    let checked = checked_ptx(ptx, o, 0)?;
    let cubin_options: Vec<CString> = link.options.iter().filter(|c| !lto_only(c.to_bytes())).cloned().collect();
    let others: Vec<&Input> = link.inputs.iter().filter(|i| !is_ltoir(i)).collect();
    let others_checked = check_ptx_inputs(&others, o, 1)?;
    let mut inputs = vec![Add::Data { kind: INPUT_PTX, bytes: checked.as_bytes_with_nul(), name: c"gasan-checked-lto.ptx".as_ptr() }];
    inputs.extend(with_checked(&others, &others_checked));
    recognised(link_once(&cubin_options, &inputs, Output::Cubin)?, o, 1 + others_checked.len())
}
