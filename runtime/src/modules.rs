//! Module loading through the instrumenter: image → best PTX → checked PTX (cached on disk) → the
//! real loader; the control block is written after load. Anything unexpected loads the original.

use crate::state::{compute_capability, current_device, log, state, LoadedHandle};
use gasan_instrument::container::{self, ImageKind, ImageLen};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, SiteTable};
use sha2::{Digest, Sha256};
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// A checked module ready for the real loader.
pub struct Checked {
    /// NUL-terminated checked PTX.
    pub ptx: std::ffi::CString,
    pub sites: SiteTable,
    pub version: (u16, u16),
    pub arch: u32,
    /// Content hash of the original PTX and the instrumentation options (the cache key).
    pub key: String,
}

/// Why a module is loaded unchanged.
#[derive(Debug)]
pub enum Skip {
    Disabled,
    SassOnly,
    Error(String),
}

/// Reads the PTX the driver would JIT from a raw module image.
///
/// # Safety
/// `image` must point to a module image as the driver's loaders accept it.
pub unsafe fn image_ptx(image: *const c_void, cc: u32) -> Result<String, Skip> {
    if image.is_null() {
        return Err(Skip::Error("null image".into()));
    }
    let p = image as *const u8;
    let magic = unsafe { std::slice::from_raw_parts(p, 4) };
    let header_len = match container::sniff(magic) {
        ImageKind::FatbinWrapper => 24,
        ImageKind::Fatbin => 16,
        ImageKind::Elf => return Err(Skip::SassOnly),
        _ => {
            // Text: NUL-terminated.
            let s = unsafe { CStr::from_ptr(p.cast()) };
            let s = s.to_str().map_err(|e| Skip::Error(format!("PTX is not UTF-8: {e}")))?;
            return match container::sniff(s.as_bytes()) {
                ImageKind::Ptx => Ok(s.to_string()),
                _ => Err(Skip::Error("unrecognised module image".into())),
            };
        }
    };
    let prefix = unsafe { std::slice::from_raw_parts(p, header_len) };
    let fatbin_ptr = match container::image_len(prefix).map_err(|e| Skip::Error(e.to_string()))? {
        ImageLen::Wrapper { version: 1, data, .. } => data as *const u8,
        ImageLen::Wrapper { version, .. } => return Err(Skip::Error(format!("fatbin wrapper version {version} (prelinked RDC) not supported yet"))),
        _ => p,
    };
    let hdr = unsafe { std::slice::from_raw_parts(fatbin_ptr, 16) };
    let len = match container::image_len(hdr).map_err(|e| Skip::Error(e.to_string()))? {
        ImageLen::Bytes(n) => n,
        other => return Err(Skip::Error(format!("unexpected fatbin size {other:?}"))),
    };
    let bytes = unsafe { std::slice::from_raw_parts(fatbin_ptr, len) };
    let fb = container::Fatbin::parse(bytes).map_err(|e| Skip::Error(e.to_string()))?;
    match fb.best_ptx(cc) {
        Some(e) => e.ptx().map_err(|e| Skip::Error(e.to_string())),
        None => Err(Skip::SassOnly),
    }
}

fn cache_dir() -> Option<PathBuf> {
    let s = state();
    if let Some(d) = &s.opts.cache_dir {
        return Some(d.clone());
    }
    let base = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("gasan"))
}

/// Instruments `ptx` (or takes it from the on-disk cache).
pub fn check_ptx(ptx: &str) -> Result<(String, SiteTable, String), String> {
    let s = state();
    // The cheaper aligned-pool checks when the pool allows them (its control block is the only
    // one these modules will see; a GPU without the pool gets zeros, which pass either form).
    let aligned_pool = s.device().is_some_and(|d| {
        let (base, size, _) = d.alloc.control_fields();
        s.opts.shadow_scale.pool_allows_aligned_check(base, size)
    });
    let opts = InstrumentOptions { scale: s.opts.shadow_scale, optimize: true, recover: !s.opts.halt_on_error, aligned_pool, hoist_loops: s.opts.hoist_loops };
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION"));
    h.update(gasan_instrument::ptx::REVISION.to_le_bytes());
    // The options whose table row says they change checked code, then what the runtime derives.
    h.update(s.opts.code_key());
    h.update([opts.optimize as u8, opts.aligned_pool as u8]);
    h.update(ptx.as_bytes());
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let dir = cache_dir();
    if let Some(d) = &dir {
        let (p, j) = (d.join(format!("{key}.ptx")), d.join(format!("{key}.sites.json")));
        if let (Ok(ptx), Ok(json)) = (std::fs::read_to_string(&p), std::fs::read_to_string(&j)) {
            if let Ok(sites) = SiteTable::from_json(&json) {
                s.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok((ptx, sites, key));
            }
        }
    }
    let r = instrument_ptx(ptx, &opts).map_err(|e| e.to_string())?;
    if let Some(d) = &dir {
        cache_put(d, &format!("{key}.sites.json"), r.sites.to_json().as_bytes());
        cache_put(d, &format!("{key}.ptx"), r.ptx.as_bytes());
    }
    let t = r.stats.total();
    log(1, || format!("instrumented module: {} accesses, {} checked, {} eliminated, {} unknown", t.found, t.checked, t.eliminated, t.unknown));
    Ok((r.ptx, r.sites, key))
}

/// Writes `data` as `dir/name` atomically (write, then rename), so concurrent processes never
/// read half a file.
fn cache_put(dir: &std::path::Path, name: &str, data: &[u8]) {
    if std::fs::create_dir_all(dir).is_ok() {
        let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
        if std::fs::write(&tmp, data).is_ok() {
            let _ = std::fs::rename(&tmp, dir.join(name));
        }
    }
}

/// Prepares a checked version of a module image, or says why the original must be loaded.
///
/// # Safety
/// As for [`image_ptx`].
pub unsafe fn prepare(image: *const c_void) -> Result<Checked, Skip> {
    let s = state();
    if !s.opts.instrument {
        return Err(Skip::Disabled);
    }
    let dev = current_device().unwrap_or(0);
    let cc = compute_capability(dev).ok_or_else(|| Skip::Error("no compute capability".into()))?;
    let ptx = unsafe { image_ptx(image, cc) }?;
    let (checked, sites, key) = check_ptx(&ptx).map_err(Skip::Error)?;
    let version = container::ptx_version(&checked).unwrap_or((8, 0));
    Ok(Checked { ptx: std::ffi::CString::new(checked).map_err(|e| Skip::Error(e.to_string()))?, sites, version, arch: cc, key })
}

/// Counts and explains a module loaded unchanged.
pub fn note_skip(skip: &Skip) {
    let s = state();
    match skip {
        Skip::Disabled => {}
        Skip::SassOnly => {
            s.counters.modules_sass_only.fetch_add(1, Ordering::Relaxed);
            log(1, || "module has no PTX for this GPU: loaded unchanged (SASS only, MMU-level protection only)".into());
        }
        Skip::Error(e) => {
            s.counters.modules_fallback.fetch_add(1, Ordering::Relaxed);
            log(0, || format!("WARNING: module not instrumented ({e}); loading the original"));
        }
    }
}

/// Loads via `load(image)`: the checked PTX first, the original on any failure.
///
/// # Safety
/// `image` as for [`image_ptx`]; `load` is a real driver loader.
pub unsafe fn load_checked(
    image: *const c_void,
    wrap: impl Fn(&Checked) -> Vec<u8>,
    load: impl Fn(*const c_void) -> i32,
    handle: impl Fn() -> LoadedHandle,
) -> i32 {
    // A cubin from the application's own checked cuLink: load it, then write each input's block.
    if let Some(inputs) = crate::link::linked_inputs(image) {
        let r = load(image);
        if r == 0 {
            let s = state();
            s.counters.modules_instrumented.fetch_add(1, Ordering::Relaxed);
            for i in inputs {
                s.set_control_block_named(handle(), i.module_id, &i.ctl_symbol);
            }
        }
        return r;
    }
    let checked = match unsafe { prepare(image) } {
        Ok(c) => c,
        Err(skip) => {
            note_skip(&skip);
            return load(image);
        }
    };
    let t = std::time::Instant::now();
    // The checked PTX goes to the driver's JIT as PTX: compiling it ourselves with cuLink (to cache
    // a cubin) made kernels slower, because cuLink compiles PTX as relocatable code (see
    // benches/results). The driver keeps its own JIT cache for the second run.
    let bytes = wrap(&checked);
    let img: *const c_void = if bytes.is_empty() { checked.ptx.as_ptr().cast() } else { bytes.as_ptr().cast() };
    let r = load(img);
    if r != 0 {
        note_skip(&Skip::Error(format!("the driver refused the checked module (CUDA error {r})")));
        return load(image);
    }
    // The loader may keep the pointer (lazy loading): keep the image alive for the process.
    std::mem::forget(bytes);
    std::mem::forget(checked.ptx);
    let s = state();
    s.counters.module_load_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    s.counters.modules_instrumented.fetch_add(1, Ordering::Relaxed);
    let id = s.register_sites(checked.sites);
    s.set_control_block(handle(), id);
    0
}
