//! NVRTC (issue 39 item 6): a program that compiles CUDA C++ at run time straight to a cubin
//! (`-arch=sm_XX`, then `nvrtcGetCUBIN`) hands the driver SASS, which the runtime cannot check.
//! These wrappers make that cubin a checked one: after the program's own compile succeeds,
//! the same source (headers, name expressions) is compiled again for the virtual architecture
//! (`compute_XX`, [`gasan_jit::nvrtc::plan`]) to PTX, checked and marked as gasan-ptxas marks
//! Triton's ([`gasan_jit::check_module`]), assembled with the real ptxas ([`sass::compile`],
//! cached in gasan's cache), and `nvrtcGetCUBINSize` / `nvrtcGetCUBIN` serve it; the runtime
//! recognises it when it is loaded ([`crate::modules`]). The program's compile, log, PTX and
//! lowered names are NVRTC's own, untouched.
//!
//! It never breaks the program: whatever fails on gasan's side (no ptxas, PTX the rewriter
//! refuses, a checked copy ptxas refuses) gives a warning and the program gets NVRTC's cubin.
//!
//! How calls get here: [`super::library`] (linked, `dlsym(RTLD_DEFAULT)`, `dlsym` on a handle).

use crate::jit_origin::{self, Origin};
use crate::library::Library;
use crate::modules::ModuleOptions;
use crate::sass;
use crate::state::log;
use gasan_jit::nvrtc::{plan, Plan};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

/// `nvrtcResult`.
type NvrtcResult = c_int;
/// `nvrtcProgram` (an opaque pointer).
type Program = *mut c_void;

const NVRTC_SUCCESS: NvrtcResult = 0;
const NVRTC_ERROR_INTERNAL_ERROR: NvrtcResult = 11;

fn table() -> &'static [(&'static str, usize)] {
    static T: OnceLock<[(&str, usize); 6]> = OnceLock::new();
    T.get_or_init(|| {
        [
            ("nvrtcCreateProgram", nvrtcCreateProgram as *const () as usize),
            ("nvrtcAddNameExpression", nvrtcAddNameExpression as *const () as usize),
            ("nvrtcCompileProgram", nvrtcCompileProgram as *const () as usize),
            ("nvrtcGetCUBINSize", nvrtcGetCUBINSize as *const () as usize),
            ("nvrtcGetCUBIN", nvrtcGetCUBIN as *const () as usize),
            ("nvrtcDestroyProgram", nvrtcDestroyProgram as *const () as usize),
        ]
    })
}

/// NVRTC, as the wrappers reach it.
pub(crate) static NVRTC: Library = Library::new(table);

/// What gasan keeps of one program: what compiling it again needs, and its checked cubin.
#[derive(Default)]
struct Source {
    src: CString,
    name: Option<CString>,
    headers: Vec<(Option<CString>, Option<CString>)>,
    name_expressions: Vec<CString>,
    checked: Option<Vec<u8>>,
}

fn programs() -> &'static Mutex<HashMap<usize, Source>> {
    static M: OnceLock<Mutex<HashMap<usize, Source>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn with_programs<R>(f: impl FnOnce(&mut HashMap<usize, Source>) -> R) -> R {
    f(&mut programs().lock().unwrap_or_else(|e| e.into_inner()))
}

/// A C string the program passed, copied (null stays `None`).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn copied(p: *const c_char) -> Option<CString> {
    // SAFETY: by this function's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

/// Whether programs are checked at all: `instrument=1`.
fn checking() -> bool {
    crate::modules::options().instrument
}

/// Runs gasan's part of a wrapper; a panic in it is reported and otherwise ignored (the program's
/// call has its NVRTC answer already).
fn ours(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        eprintln!("==gasan== internal error in {what}; the program's NVRTC call is unaffected");
    }
}

/// NVRTC's functions gasan calls (the wrapped ones for the program, and for its second compile
/// two it does not wrap), each declared once with nvrtc.h's (CUDA 13.0) prototype.
mod sys {
    use super::{NvrtcResult, Program, NVRTC};
    use std::ffi::{c_char, c_int};
    crate::library::exports! { NVRTC -> NvrtcResult;
        nvrtcCreateProgram(prog: *mut Program, src: *const c_char, name: *const c_char, num_headers: c_int, headers: *const *const c_char, include_names: *const *const c_char);
        nvrtcAddNameExpression(prog: Program, expr: *const c_char);
        nvrtcCompileProgram(prog: Program, num_options: c_int, options: *const *const c_char);
        nvrtcGetCUBINSize(prog: Program, size: *mut usize);
        nvrtcGetCUBIN(prog: Program, cubin: *mut c_char);
        nvrtcDestroyProgram(prog: *mut Program);
        nvrtcGetPTXSize(prog: Program, size: *mut usize);
        nvrtcGetPTX(prog: Program, ptx: *mut c_char);
    }
}

/// # Safety
/// nvrtc.h's contract for `nvrtcCreateProgram`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcCreateProgram(
    prog: *mut Program,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> NvrtcResult {
    let Some(f) = sys::nvrtcCreateProgram.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under nvrtcCreateProgram's contract (this function's).
    let r = unsafe { f(prog, src, name, num_headers, headers, include_names) };
    if r == NVRTC_SUCCESS && !prog.is_null() && !src.is_null() && checking() {
        ours("nvrtcCreateProgram", || {
            let n = usize::try_from(num_headers).unwrap_or(0);
            // SAFETY: the call succeeded, so `src` and `name` are C strings (or `name` null) and
            // `headers` and `include_names` hold `num_headers` C strings each where non-null
            // (nvrtcCreateProgram's contract).
            let source = unsafe {
                Source {
                    src: CStr::from_ptr(src).to_owned(),
                    name: copied(name),
                    headers: (0..n).map(|k| (if headers.is_null() { None } else { copied(*headers.add(k)) }, if include_names.is_null() { None } else { copied(*include_names.add(k)) })).collect(),
                    ..Source::default()
                }
            };
            // SAFETY: NVRTC wrote the new program's handle to `prog` (non-null, checked above).
            let handle = unsafe { *prog } as usize;
            with_programs(|m| m.insert(handle, source));
        });
    }
    r
}

/// # Safety
/// nvrtc.h's contract for `nvrtcAddNameExpression`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcAddNameExpression(prog: Program, expr: *const c_char) -> NvrtcResult {
    let Some(f) = sys::nvrtcAddNameExpression.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { f(prog, expr) };
    if r == NVRTC_SUCCESS && !expr.is_null() {
        ours("nvrtcAddNameExpression", || {
            // SAFETY: the call succeeded: `expr` is a C string.
            let e = unsafe { CStr::from_ptr(expr) }.to_owned();
            with_programs(|m| m.get_mut(&(prog as usize)).map(|s| s.name_expressions.push(e)));
        });
    }
    r
}

/// # Safety
/// nvrtc.h's contract for `nvrtcCompileProgram`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcCompileProgram(prog: Program, num_options: c_int, options: *const *const c_char) -> NvrtcResult {
    let Some(f) = sys::nvrtcCompileProgram.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { f(prog, num_options, options) };
    ours("nvrtcCompileProgram", || {
        // A compile replaces the program's results: never serve the previous checked cubin.
        let known = with_programs(|m| m.get_mut(&(prog as usize)).map(|s| s.checked = None).is_some());
        if r != NVRTC_SUCCESS || !known {
            return;
        }
        let n = usize::try_from(num_options).unwrap_or(0);
        // SAFETY: the call succeeded, so `options` holds `num_options` C strings (or is unused
        // when there are none).
        let opts: Option<Vec<String>> = (0..n).map(|k| unsafe { copied(*options.add(k)) }.and_then(|c| c.into_string().ok())).collect();
        let Some(opts) = opts else { return };
        let checked = check_program(prog, &opts, crate::modules::options());
        with_programs(|m| m.get_mut(&(prog as usize)).map(|s| s.checked = checked));
    });
    r
}

/// # Safety
/// nvrtc.h's contract for `nvrtcGetCUBINSize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcGetCUBINSize(prog: Program, size: *mut usize) -> NvrtcResult {
    if !size.is_null() {
        if let Some(n) = with_programs(|m| m.get(&(prog as usize)).and_then(|s| s.checked.as_ref().map(Vec::len))) {
            // SAFETY: the program's out-pointer (non-null, checked above).
            unsafe { *size = n };
            return NVRTC_SUCCESS;
        }
    }
    let Some(f) = sys::nvrtcGetCUBINSize.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under the function's contract.
    unsafe { f(prog, size) }
}

/// # Safety
/// nvrtc.h's contract for `nvrtcGetCUBIN`: `cubin` has room for `nvrtcGetCUBINSize`'s answer,
/// which for a checked program is the checked cubin's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcGetCUBIN(prog: Program, cubin: *mut c_char) -> NvrtcResult {
    if !cubin.is_null() {
        let served = with_programs(|m| {
            let c = m.get(&(prog as usize))?.checked.as_ref()?;
            // SAFETY: the program sized `cubin` with nvrtcGetCUBINSize, which answered `c.len()`
            // (this function's contract); `c` is gasan's own buffer, not overlapping it.
            unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), cubin.cast::<u8>(), c.len()) };
            Some(())
        });
        if served.is_some() {
            return NVRTC_SUCCESS;
        }
    }
    let Some(f) = sys::nvrtcGetCUBIN.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under the function's contract.
    unsafe { f(prog, cubin) }
}

/// # Safety
/// nvrtc.h's contract for `nvrtcDestroyProgram`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrtcDestroyProgram(prog: *mut Program) -> NvrtcResult {
    if !prog.is_null() {
        // SAFETY: the program's pointer to its handle (non-null, checked above).
        let handle = unsafe { *prog } as usize;
        with_programs(|m| m.remove(&handle));
    }
    let Some(f) = sys::nvrtcDestroyProgram.get() else { return NVRTC_ERROR_INTERNAL_ERROR };
    // SAFETY: the program's argument, under the function's contract.
    unsafe { f(prog) }
}

/// The checked cubin of a program NVRTC just compiled with `opts`, or `None` (with a warning
/// where something failed, at `verbosity=1` where there is nothing to check).
fn check_program(prog: Program, opts: &[String], o: &ModuleOptions) -> Option<Vec<u8>> {
    let name = with_programs(|m| m.get(&(prog as usize)).and_then(|s| s.name.as_ref().map(|n| n.to_string_lossy().into_owned()))).unwrap_or_else(|| "<unnamed>".into());
    let (target, shadow, flags) = match plan(opts) {
        Plan::Check { target, shadow_options, ptxas_flags } => (target, shadow_options, ptxas_flags),
        Plan::PtxOnly(why) => {
            log(1, || format!("NVRTC program {name}: {why}"));
            return None;
        }
        Plan::NotChecked(why) => {
            log(1, || format!("NVRTC program {name}: not checked: {why}"));
            jit_origin::left_unchecked(Origin::Nvrtc, &why);
            return None;
        }
    };
    match checked_cubin(prog, opts, &target, &shadow, &flags, o) {
        Ok((cubin, key)) => {
            log(1, || format!("NVRTC program {name}: checked cubin for {target} ({} bytes)", cubin.len()));
            jit_origin::made(Origin::Nvrtc, key);
            Some(cubin)
        }
        Err(why) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            super::library::warn(&WARNED, format!("NVRTC program {name}: not checked ({why}); the program gets NVRTC's own cubin"));
            jit_origin::left_unchecked(Origin::Nvrtc, "failed on gasan's side (warned)");
            None
        }
    }
}

/// Compiles the program's source again for the virtual architecture and returns its PTX.
fn shadow_ptx(prog: Program, shadow: &[String]) -> Result<String, String> {
    let (src, name, headers, exprs) = with_programs(|m| m.get(&(prog as usize)).map(|s| (s.src.clone(), s.name.clone(), s.headers.clone(), s.name_expressions.clone()))).ok_or("program forgotten")?;
    let (Some(create), Some(add), Some(compile), Some(destroy)) = (sys::nvrtcCreateProgram.get(), sys::nvrtcAddNameExpression.get(), sys::nvrtcCompileProgram.get(), sys::nvrtcDestroyProgram.get())
    else {
        return Err("NVRTC's functions not found".into());
    };
    let (Some(ptx_size), Some(get_ptx)) = (sys::nvrtcGetPTXSize.get(), sys::nvrtcGetPTX.get()) else { return Err("nvrtcGetPTX not found".into()) };
    let hdr: Vec<*const c_char> = headers.iter().map(|(h, _)| h.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())).collect();
    let inc: Vec<*const c_char> = headers.iter().map(|(_, n)| n.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())).collect();
    let copts: Vec<CString> = shadow.iter().map(|s| CString::new(s.as_str())).collect::<Result<_, _>>().map_err(|_| "an option holds NUL")?;
    let optp: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    let mut sp: Program = std::ptr::null_mut();
    // SAFETY: NVRTC's nvrtcCreateProgram with the program's own source, name and headers (copies
    // alive for the call), `hdr` and `inc` of `headers.len()` entries each.
    let r = unsafe { create(&mut sp, src.as_ptr(), name.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()), headers.len() as c_int, hdr.as_ptr(), inc.as_ptr()) };
    if r != NVRTC_SUCCESS {
        return Err(format!("nvrtcCreateProgram of the copy: error {r}"));
    }
    let result = (|| {
        for e in &exprs {
            // SAFETY: `sp` is the live program created above; `e` a C string.
            let r = unsafe { add(sp, e.as_ptr()) };
            if r != NVRTC_SUCCESS {
                return Err(format!("nvrtcAddNameExpression({}): error {r}", e.to_string_lossy()));
            }
        }
        // SAFETY: `sp` is live; `optp` holds `optp.len()` C strings alive for the call.
        let r = unsafe { compile(sp, optp.len() as c_int, optp.as_ptr()) };
        if r != NVRTC_SUCCESS {
            return Err(format!("compiling it for {}: error {r}", shadow.first().map_or("", String::as_str)));
        }
        let mut n = 0usize;
        // SAFETY: `sp` is live and compiled; `n` a valid out-pointer.
        let r = unsafe { ptx_size(sp, &mut n) };
        if r != NVRTC_SUCCESS || n == 0 {
            return Err(format!("nvrtcGetPTXSize: error {r}"));
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` has the `n` bytes nvrtcGetPTXSize asked for.
        let r = unsafe { get_ptx(sp, buf.as_mut_ptr().cast()) };
        if r != NVRTC_SUCCESS {
            return Err(format!("nvrtcGetPTX: error {r}"));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        String::from_utf8(buf).map_err(|_| "PTX is not UTF-8".to_string())
    })();
    // SAFETY: `sp` is the program created above, destroyed once.
    unsafe { destroy(&mut sp) };
    result
}

/// Bumped when what a source key covers, or the entry it names, changes.
const SOURCE_KEY_FORMAT: &str = "gasan-nvrtc-1";

/// The cache key of a program's checked cubin: everything that decides it before NVRTC runs (the
/// program's source, name, headers, name expressions and options; the NVRTC and ptxas binaries;
/// gasan's version, `REVISION` and the options that change checked code), so a warm run skips
/// the second compile, the rewriter and ptxas. Each field length-prefixed.
fn source_key(src: &Source, opts: &[String], nvrtc: &str, compiler: &str, o: &ModuleOptions) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(SOURCE_KEY_FORMAT.as_bytes());
    field(env!("CARGO_PKG_VERSION").as_bytes());
    field(&gasan_instrument::ptx::REVISION.to_le_bytes());
    field(o.code_key.as_bytes());
    field(nvrtc.as_bytes());
    field(compiler.as_bytes());
    field(src.src.as_bytes());
    field(src.name.as_ref().map_or(&b""[..], |n| n.as_bytes()));
    field(&(src.headers.len() as u64).to_le_bytes());
    for (text, name) in &src.headers {
        field(text.as_ref().map_or(&b""[..], |t| t.as_bytes()));
        field(name.as_ref().map_or(&b""[..], |n| n.as_bytes()));
    }
    field(&(src.name_expressions.len() as u64).to_le_bytes());
    for e in &src.name_expressions {
        field(e.as_bytes());
    }
    field(&(opts.len() as u64).to_le_bytes());
    for x in opts {
        field(x.as_bytes());
    }
    crate::cache::key_hex(&h.finalize())
}

/// The program's PTX for `target`, checked, marked and assembled with the real ptxas, with its
/// marker's key; cached by [`source_key`].
fn checked_cubin(prog: Program, opts: &[String], target: &str, shadow: &[String], flags: &[String], o: &ModuleOptions) -> Result<(Vec<u8>, [u8; 32]), String> {
    let ptxas = sass::find_ptxas(o.ptxas.as_deref(), |k| std::env::var_os(k)).ok_or("no ptxas found (set ptxas= or CUDA_HOME)")?;
    let cache = o.cache().ok_or("no cache directory")?;
    let compiler = sass::file_identity(&ptxas).ok_or_else(|| format!("cannot read {}", ptxas.display()))?;
    let nvrtc = sys::nvrtcCompileProgram.file().and_then(|f| sass::file_identity(&f)).ok_or("cannot identify the NVRTC library")?;
    let key = with_programs(|m| m.get(&(prog as usize)).map(|s| source_key(s, opts, &nvrtc, &compiler, o))).ok_or("program forgotten")?;
    let (entry, _) = sass::entry_names(&key, target);
    let expected = o.expected();
    if let Some(b) = cache.get(&entry) {
        if let gasan_jit::Recognition::Checked { marker, .. } = gasan_jit::recognise(&b, expected) {
            log(2, || format!("NVRTC: checked cubin {entry} from the cache"));
            return Ok((b, marker.key));
        }
    }
    let ptx = shadow_ptx(prog, shadow)?;
    let checked = gasan_jit::check_module(&ptx, &o.instrument_options(false), &o.code_key).map_err(|e| format!("the rewriter refused its PTX: {e}"))?;
    let cubin = sass::compile(&sass::Compile { ptxas: &ptxas, target, flags, split: 0 }, &cache, checked.text.as_bytes(), &entry).map_err(|e| e.message)?;
    // What the runtime will make of it at load: it must be recognised as checked.
    match gasan_jit::recognise(&cubin, expected) {
        gasan_jit::Recognition::Checked { marker, .. } => Ok((cubin, marker.key)),
        other => Err(format!("the checked cubin is not recognised ({other:?})")),
    }
}
