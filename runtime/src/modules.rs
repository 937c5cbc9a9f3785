//! Module loading through the instrumenter: image → best PTX → checked PTX (cached on disk) → the
//! real loader; the control block is written after load. Anything unexpected loads the original.
//!
//! What loading takes from the options is [`ModuleOptions`], built once from them; nothing here
//! (nor in the loaders, the NVRTC and nvJitLink wrappers and the prefetch, which use it) reads the
//! whole [`Options`].

use crate::cache::Cache;
use crate::device::{compute_capability, current_device, LoadedHandle};
use crate::hook_abi::{ModuleImage, OptionArrays, Out};
use crate::options::Options;
use crate::report::ModuleSites;
use crate::sass;
use crate::state::{log, state};
use gasan_instrument::abi::ParamTagTable;
use gasan_instrument::container::{self, ImageKind, ImageLen};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, SiteTable};
use gasan_instrument::shadow::Scale;
use gasan_jit::{Expected, Recognition};
use sha2::{Digest, Sha256};
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// What module loading takes from the options (compiler-rt's `AllocatorOptions::SetFrom`, as
/// [`crate::allocator::AllocatorOptions`] and [`crate::errors::ErrorOptions`] do), built once from
/// them ([`options`] for this process): whether and how modules are checked, where their checked
/// code and cubins are cached, and the code key that cache keys carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleOptions {
    /// Check modules at all (`instrument`).
    pub instrument: bool,
    /// Compile checked PTX to cubins with ptxas (`sass`).
    pub sass: bool,
    /// Look the program's modules up before their first launch (`prefetch`).
    pub prefetch: bool,
    /// The shadow scale checks are made for (`shadow_scale`).
    pub scale: Scale,
    /// Checks report and go on (`halt_on_error=0`).
    pub recover: bool,
    /// The instrumenter's options of the same names.
    pub hoist_loops: bool,
    pub param_bounds: bool,
    pub outside_checks: bool,
    /// The ptxas asked for (`ptxas`).
    pub ptxas: Option<PathBuf>,
    /// The cache directory asked for (`cache_dir`) and the cache's size (`cache_size_mb`).
    pub cache_dir: Option<PathBuf>,
    pub cache_size_mb: u64,
    /// Every option that changes checked code ([`Options::code_key`]), for cache keys.
    pub code_key: String,
}

impl From<&Options> for ModuleOptions {
    fn from(o: &Options) -> Self {
        ModuleOptions {
            instrument: o.instrument,
            sass: o.sass,
            prefetch: o.prefetch,
            scale: o.shadow_scale,
            recover: !o.halt_on_error,
            hoist_loops: o.hoist_loops,
            param_bounds: o.param_bounds,
            outside_checks: o.outside_checks,
            ptxas: o.ptxas.clone(),
            cache_dir: o.cache_dir.clone(),
            cache_size_mb: o.cache_size_mb,
            code_key: o.code_key(),
        }
    }
}

impl ModuleOptions {
    /// The instrumenter's options for a pool that does (or does not) allow the aligned-pool
    /// checks (gasan-ptxas and the NVRTC and nvJitLink wrappers use it without them).
    pub fn instrument_options(&self, aligned_pool: bool) -> InstrumentOptions {
        InstrumentOptions {
            scale: self.scale,
            optimize: true,
            recover: self.recover,
            aligned_pool,
            hoist_loops: self.hoist_loops,
            param_bounds: self.param_bounds,
            outside_checks: self.outside_checks,
        }
    }

    /// What a cubin checked for these options carries ([`gasan_jit::recognise`]).
    pub fn expected(&self) -> Expected {
        Expected { scale: self.scale, recover: self.recover }
    }

    /// The checked-module cache these options name (none when no directory can be named).
    pub fn cache(&self) -> Option<Cache> {
        crate::cache::dir_for(self.cache_dir.as_deref()).map(|d| Cache::new(d, self.cache_size_mb << 20))
    }
}

/// This process's [`ModuleOptions`], built once from [`crate::options::process`].
pub fn options() -> &'static ModuleOptions {
    static BUILT: OnceLock<ModuleOptions> = OnceLock::new();
    BUILT.get_or_init(|| ModuleOptions::from(crate::options::process()))
}

/// The PTX of a module image as it is stored: a fatbin entry's bytes (compressed or not) or PTX
/// text. The text is made on first use ([`Self::text`]): a module whose checked code is cached
/// by its stored bytes ([`instrumentation`]) is never decompressed (about 0.3-0.6 ms for a
/// 120 KiB zstd entry, paid on every run's first launch otherwise).
pub struct PtxSource {
    /// A copy of the stored bytes (a loader's image need not outlive its call).
    stored: Vec<u8>,
    /// The entry's header fields that decide its text (kind, flags, sizes, version); `None` for
    /// PTX text.
    entry: Option<container::Entry<'static>>,
    text: OnceLock<Result<String, String>>,
}

impl PtxSource {
    fn from_text(text: String) -> Self {
        let t = OnceLock::new();
        let _ = t.set(Ok(text));
        PtxSource { stored: Vec::new(), entry: None, text: t }
    }

    fn from_entry(e: &container::Entry<'_>) -> Self {
        let entry = container::Entry { kind: e.kind, arch: e.arch, flags: e.flags, version: e.version, identifier: None, options: None, raw: &[], uncompressed_size: e.uncompressed_size };
        PtxSource { stored: e.raw.to_vec(), entry: Some(entry), text: OnceLock::new() }
    }

    /// The PTX text (decompressed on first use).
    pub fn text(&self) -> Result<&str, String> {
        let t = self.text.get_or_init(|| {
            let e = self.entry.as_ref().ok_or("PTX source without text or entry")?;
            container::Entry { raw: &self.stored, ..e.clone() }.ptx().map_err(|e| e.to_string())
        });
        t.as_deref().map_err(Clone::clone)
    }

    /// What identifies the text without making it: a compressed entry's header fields and bytes.
    /// `None` where the text is at hand anyway (PTX text, uncompressed entries).
    fn stored_identity(&self) -> Option<(String, &[u8])> {
        let e = self.entry.as_ref().filter(|e| e.is_compressed())?;
        Some((format!("{:?}|{}|{}|{:?}", e.kind, e.flags, e.uncompressed_size, e.version), &self.stored))
    }
}

/// A checked module ready for the real loader.
pub struct Checked {
    /// NUL-terminated checked PTX, made or read from the cache when something needs it ([`Self::ptx`]):
    /// a module whose cubin is cached never reads it.
    ptx: OnceLock<Result<std::ffi::CString, String>>,
    /// The PTX it was made from, and how (instrumented again if the cached checked PTX is gone).
    original: PtxSource,
    opts: InstrumentOptions,
    pub sites: ModuleSites,
    /// Which kernel parameters launches may tag (crate::arg_bounds).
    pub param_tags: Arc<ParamTagTable>,
    pub version: (u16, u16),
    pub arch: u32,
    /// Content hash of the original PTX, gasan's revision and the instrumentation options (the
    /// cache key): it decides the checked PTX.
    pub key: String,
    /// ptxas `-arch` for this GPU ([`sass::target_for`]).
    pub target: String,
}

impl Checked {
    /// Hands its site table to the process's registry (reports look sites up there) and returns
    /// the module id the registry gave it; done once, before the module's cubin is loaded (a
    /// cubin can carry its id in its control block).
    fn register_sites(&mut self) -> u64 {
        state().sites.register(std::mem::replace(&mut self.sites, ModuleSites::parsed(SiteTable::default())))
    }

    /// Whether its cubin is for the arch-specific target (`sm_90a`).
    fn arch_specific(&self) -> bool {
        self.target.ends_with('a')
    }

    /// Its cubin from cache entry `name`, read into a fatbin for its target.
    fn read_cubin(&self, cache: &Cache, name: &str) -> Option<CubinImage> {
        CubinImage::read(cache, name, self.arch, self.arch_specific())
    }

    /// The checked PTX: as instrumented in this process, else from the cache, else instrumented again.
    pub fn ptx(&self) -> Result<&CStr, String> {
        let p = self.ptx.get_or_init(|| {
            let cached = cache().and_then(|c| c.get(&format!("{}.ptx", self.key))).and_then(|b| String::from_utf8(b).ok());
            let text = match cached {
                Some(t) => t,
                None => instrument_ptx(self.original.text()?, &self.opts).map_err(|e| e.to_string())?.ptx,
            };
            std::ffi::CString::new(text).map_err(|e| e.to_string())
        });
        p.as_ref().map(|c| c.as_c_str()).map_err(Clone::clone)
    }

    /// Hands the checked PTX over for good (a loader may keep pointing at it).
    fn leak_ptx(self) {
        if let Some(Ok(p)) = self.ptx.into_inner() {
            std::mem::forget(p);
        }
    }
}

/// The code handed to a loader: checked PTX, or the cubin compiled from it.
pub enum Code<'a> {
    Ptx(&'a CStr),
    Cubin(&'a CubinImage),
}

impl Code<'_> {
    /// The code as a raw image (PTX text or ELF) for loaders that take one.
    pub fn as_ptr(&self) -> *const c_void {
        match self {
            Code::Ptx(p) => p.as_ptr().cast(),
            Code::Cubin(b) => b.cubin().as_ptr().cast(),
        }
    }
}

/// A checked cubin kept inside a one-entry fatbin of itself (the headers written in front of it
/// as it was read), so a loader that takes fatbins (cudart's) gets it without a copy: a 0.5 MiB
/// copy into fresh pages is about 0.1 ms, paid inside the first launch under lazy loading.
pub struct CubinImage {
    fatbin: Vec<u8>,
    len: usize,
}

impl CubinImage {
    /// Around `cubin` (one copy: for a cubin compiled now), for `sm_<arch>` (`arch_specific`:
    /// `sm_<arch>a`).
    fn new(cubin: &[u8], arch: u32, arch_specific: bool) -> Self {
        CubinImage { fatbin: container::build_elf_fatbin(cubin, arch, arch_specific), len: cubin.len() }
    }

    /// Cache entry `name` read into one (no copy), if it holds a cubin.
    fn read(cache: &Cache, name: &str, arch: u32, arch_specific: bool) -> Option<Self> {
        let mut fatbin = vec![0u8; container::ONE_ENTRY_HEADERS];
        cache.read_into(name, &mut fatbin)?;
        let len = fatbin.len() - container::ONE_ENTRY_HEADERS;
        if !sass::is_cubin(&fatbin[container::ONE_ENTRY_HEADERS..]) {
            return None;
        }
        container::elf_fatbin_in_place(&mut fatbin, arch, arch_specific);
        Some(CubinImage { fatbin, len })
    }

    pub fn cubin(&self) -> &[u8] {
        &self.fatbin[container::ONE_ENTRY_HEADERS..][..self.len]
    }

    pub fn cubin_mut(&mut self) -> &mut [u8] {
        &mut self.fatbin[container::ONE_ENTRY_HEADERS..][..self.len]
    }

    /// The one-entry fatbin holding the cubin.
    pub fn fatbin(&self) -> &[u8] {
        &self.fatbin
    }
}

/// What a loader is handed for some code: the code itself, bytes the code already sits in, or
/// bytes built around it (kept for good once loaded: a loader may keep the pointer).
pub enum Image<'a> {
    Code,
    Within(&'a [u8]),
    Built(Vec<u8>),
}

/// Image builder for loaders that take raw PTX or cubins: no wrapping (the code itself is loaded).
pub fn plain<'a>(_: &Checked, _: &Code<'a>) -> Image<'a> {
    Image::Code
}

/// A fatbin of one entry holding the code: the one a cubin sits in, or one built for PTX.
pub fn fatbin_bytes<'a>(c: &Checked, code: &Code<'a>) -> std::borrow::Cow<'a, [u8]> {
    match code {
        Code::Ptx(p) => std::borrow::Cow::Owned(container::build_ptx_fatbin(p.to_str().unwrap_or(""), c.arch, c.version)),
        Code::Cubin(b) => std::borrow::Cow::Borrowed(b.fatbin()),
    }
}

/// Image builder for loaders that take fatbins: [`fatbin_bytes`].
pub fn fatbin<'a>(c: &Checked, code: &Code<'a>) -> Image<'a> {
    match fatbin_bytes(c, code) {
        std::borrow::Cow::Borrowed(b) => Image::Within(b),
        std::borrow::Cow::Owned(v) => Image::Built(v),
    }
}

/// The ptxas flags a loader's JIT options ask for, or why the module goes to the driver's JIT.
pub fn jit_options(jit: &OptionArrays) -> Result<Vec<String>, String> {
    if jit.options.is_empty() || jit.values.is_empty() {
        return Ok(Vec::new());
    }
    sass::jit_flags(&jit.pairs().collect::<Vec<_>>())
}

/// Why a module is loaded unchanged.
#[derive(Debug)]
pub enum Skip {
    Disabled,
    SassOnly,
    Error(String),
}

/// One checked input of an application's `cuLink*` link (link.rs): its site table's module id
/// and its renamed control block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInput {
    pub module_id: u64,
    pub ctl_symbol: String,
}

/// Linked images (cubin pointer from cuLinkComplete, valid until cuLinkDestroy) → the link they
/// came from and its checked inputs: loading one writes each input's control block. Filled by
/// link.rs, read by the loaders here (so that modules does not depend on link).
type LinkedImages = std::collections::HashMap<usize, (usize, Vec<LinkInput>)>;
static LINKED: std::sync::Mutex<Option<LinkedImages>> = std::sync::Mutex::new(None);

/// Records that `cubin` was linked by `link` from the checked `inputs`.
pub fn register_linked(cubin: *const c_void, link: usize, inputs: Vec<LinkInput>) {
    LINKED.lock().unwrap().get_or_insert_with(Default::default).insert(cubin as usize, (link, inputs));
}

/// Forgets the images of `link` (cuLinkDestroy frees them).
pub fn forget_linked(link: usize) {
    if let Some(m) = LINKED.lock().unwrap().as_mut() {
        m.retain(|_, (l, _)| *l != link);
    }
}

/// The checked inputs of `image` if it is a cubin a checked link produced.
pub fn linked_inputs(image: *const c_void) -> Option<Vec<LinkInput>> {
    LINKED.lock().unwrap().as_ref()?.get(&(image as usize)).map(|(_, v)| v.clone())
}

/// Reads the PTX the driver would JIT from a raw module image.
///
/// # Safety
/// `image` must point to a module image as the driver's loaders accept it.
pub unsafe fn image_ptx(image: *const c_void, cc: u32) -> Result<PtxSource, Skip> {
    // SAFETY: this function's contract.
    unsafe { image_ptx_source(image, cc, None) }
}

/// [`image_ptx`] for an image known to span `limit` bytes (when `Some`): a fatbin whose header
/// claims more, or a wrapper pointing elsewhere, is refused instead of read past its end.
///
/// # Safety
/// As [`image_ptx`]; with a limit, `image` spans at least `limit` readable bytes.
pub unsafe fn image_ptx_within(image: *const c_void, cc: u32, limit: Option<usize>) -> Result<String, Skip> {
    // SAFETY: this function's contract is image_ptx_source's.
    let src = unsafe { image_ptx_source(image, cc, limit) }?;
    src.text().map(str::to_string).map_err(Skip::Error)
}

/// The stored PTX of an image ([`image_ptx_within`]), not yet decompressed.
///
/// # Safety
/// As [`image_ptx_within`].
unsafe fn image_ptx_source(image: *const c_void, cc: u32, limit: Option<usize>) -> Result<PtxSource, Skip> {
    if image.is_null() {
        return Err(Skip::Error("null image".into()));
    }
    let p = image as *const u8;
    // SAFETY: `image` is non-null and a module image (spanning `limit` bytes when known) by this
    // function's contract, which is image_magic's.
    let magic = unsafe { image_magic(p, limit) };
    let header_len = match container::sniff(&magic) {
        ImageKind::FatbinWrapper => container::FatbinWrapper::SIZE,
        ImageKind::Fatbin => container::FatbinHeader::SIZE,
        ImageKind::Elf => return Err(Skip::SassOnly),
        _ => {
            // Text: NUL-terminated (within the limit, when one is known).
            let s = match limit {
                Some(l) => {
                    // SAFETY: with a limit the image spans `l` readable bytes (contract).
                    let all = unsafe { std::slice::from_raw_parts(p, l) };
                    CStr::from_bytes_until_nul(all).map_err(|_| Skip::Error("PTX text without its terminating NUL".into()))?
                }
                // SAFETY: no binary magic, so by this function's contract the image is PTX text,
                // which the loaders take NUL-terminated.
                None => unsafe { CStr::from_ptr(p.cast()) },
            };
            let s = s.to_str().map_err(|e| Skip::Error(format!("PTX is not UTF-8: {e}")))?;
            return match container::sniff(s.as_bytes()) {
                ImageKind::Ptx => Ok(PtxSource::from_text(s.to_string())),
                _ => Err(Skip::Error("unrecognised module image".into())),
            };
        }
    };
    if limit.is_some_and(|l| l < header_len) {
        return Err(Skip::Error(format!("{} bytes: shorter than a fatbin header", limit.unwrap_or(0))));
    }
    // SAFETY: the magic says the image is a fatbin wrapper (a `__fatBinC_Wrapper_t`,
    // `FatbinWrapper::SIZE` bytes) or a fatbin (a `FatbinHeader::SIZE`-byte header first), and by
    // this function's contract it is one (and spans `header_len` bytes when a limit is known:
    // checked above).
    let prefix = unsafe { std::slice::from_raw_parts(p, header_len) };
    let fatbin_ptr = match container::image_len(prefix).map_err(|e| Skip::Error(e.to_string()))? {
        ImageLen::Wrapper { version: 1, data, .. } => data as *const u8,
        ImageLen::Wrapper { version, .. } => return Err(Skip::Error(format!("fatbin wrapper version {version} (prelinked RDC) not supported yet"))),
        _ => p,
    };
    // SAFETY: `fatbin_ptr` is the fatbin a version-1 wrapper points to, or the image itself (a
    // fatbin by its magic); a valid image's fatbin starts with a 16-byte header.
    let hdr = unsafe { std::slice::from_raw_parts(fatbin_ptr, container::FatbinHeader::SIZE) };
    let len = match container::image_len(hdr).map_err(|e| Skip::Error(e.to_string()))? {
        ImageLen::Bytes(n) => n,
        other => return Err(Skip::Error(format!("unexpected fatbin size {other:?}"))),
    };
    if let Some(limit) = limit {
        if fatbin_ptr != p || len > limit {
            return Err(Skip::Error(format!("fatbin header claims {len} bytes, the input has {limit}")));
        }
    }
    // SAFETY: `len` is the fatbin's size from its own header (header plus payload, bounded by
    // image_len), and a valid image's fatbin spans that many readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(fatbin_ptr, len) };
    let fb = container::Fatbin::parse(bytes).map_err(|e| Skip::Error(e.to_string()))?;
    match fb.best_ptx(cc) {
        Some(e) => Ok(PtxSource::from_entry(e)),
        None => Err(Skip::SassOnly),
    }
}

/// The first 4 bytes of a module image, stopping at a NUL: PTX text (even one the driver would
/// refuse, shorter than 4 bytes) ends there, and no binary magic holds a zero byte.
///
/// # Safety
/// `p` is a non-null module image as the driver's loaders take it (spanning `limit` bytes when
/// `limit` is known).
unsafe fn image_magic(p: *const u8, limit: Option<usize>) -> [u8; 4] {
    let mut magic = [0u8; 4];
    for (i, m) in magic.iter_mut().enumerate().take(limit.unwrap_or(4)) {
        // SAFETY: bytes 0..i were not NUL, so the image (binary, or text not yet terminated) goes
        // on to byte i (within `limit` when known: the loop stops there).
        *m = unsafe { *p.add(i) };
        if *m == 0 {
            break;
        }
    }
    magic
}

/// The fatbin a module image holds: a fatbin wrapper's data pointer, or a fatbin's own address
/// (`None` for PTX text, ELF and anything else).
///
/// # Safety
/// `image` is a module image as the driver's loaders take it.
pub unsafe fn image_fatbin_address(image: *const c_void) -> Option<usize> {
    if image.is_null() {
        return None;
    }
    let p = image as *const u8;
    // SAFETY: a non-null module image (this function's contract).
    match container::sniff(&unsafe { image_magic(p, None) }) {
        ImageKind::Fatbin => Some(image as usize),
        ImageKind::FatbinWrapper => {
            // SAFETY: a wrapper by its magic, so `FatbinWrapper::SIZE` bytes.
            let w = unsafe { std::slice::from_raw_parts(p, container::FatbinWrapper::SIZE) };
            match container::image_len(w).ok()? {
                ImageLen::Wrapper { data, .. } => Some(data as usize),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The checked-module cache this process's options name (none when no directory can be named).
pub fn cache() -> Option<Cache> {
    options().cache()
}

/// The instrumentation of one PTX module: its cache key and options, its site table, and its
/// checked PTX when it was wanted or made now.
struct Instrumentation {
    key: String,
    opts: InstrumentOptions,
    sites: ModuleSites,
    /// Which kernel parameters launches may tag (crate::arg_bounds).
    param_tags: Arc<ParamTagTable>,
    ptx: Option<String>,
    /// The original's `.version` and `.target` lines (what the loaders need of its text).
    header: String,
}

/// The `.version` and `.target` lines of a PTX module.
fn header_lines(ptx: &str) -> String {
    gasan_instrument::ptx::PtxHeader::parse(ptx).lines()
}

/// Instruments `src`, or takes it from the on-disk cache: with `want_ptx` false a cache hit reads
/// the site table only (the checked PTX stays on disk until something needs it).
///
/// The key hashes the PTX text. A compressed entry is also indexed by its stored bytes
/// (`<hash>.idx`: the text's key and header lines), so that a later run finds its checked code
/// without decompressing it.
fn instrumentation(src: &PtxSource, want_ptx: bool) -> Result<Instrumentation, String> {
    let s = state();
    let (i, hit) = cached_instrumentation(src, want_ptx, instrument_options(), &options().code_key, cache().as_ref(), OnMiss::Instrument)?.ok_or("instrumentation went missing")?;
    if hit {
        s.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
    }
    Ok(i)
}

/// The instrumenter's options for this process's modules.
fn instrument_options() -> InstrumentOptions {
    let s = state();
    // The cheaper aligned-pool checks when the pool allows them (its control block is the only
    // one these modules will see; a GPU without the pool gets zeros, which pass either form).
    let aligned_pool = s.device().is_some_and(|d| {
        let (base, size, _) = d.alloc.control_fields();
        options().scale.pool_allows_aligned_check(base, size)
    });
    options().instrument_options(aligned_pool)
}

/// What [`cached_instrumentation`] does when the cache does not hold the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnMiss {
    /// Instrument it (and cache the result).
    Instrument,
    /// Give up (`None`) as soon as a miss is certain, without decompressing or instrumenting.
    GiveUp,
}

/// [`instrumentation`] with its options, code key and cache given: the instrumentation, and
/// whether it came from the cache; `None` only for a miss with [`OnMiss::GiveUp`].
fn cached_instrumentation(src: &PtxSource, want_ptx: bool, opts: InstrumentOptions, code_key: &str, cache: Option<&Cache>, on_miss: OnMiss) -> Result<Option<(Instrumentation, bool)>, String> {
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION"));
    h.update(gasan_instrument::ptx::REVISION.to_le_bytes());
    // The options whose table row says they change checked code, then every field of the
    // instrumenter's options (derived from them and from the pool): none is listed by hand, so a
    // new one cannot be left out of the key.
    h.update(code_key);
    h.update(format!("{opts:?}").as_bytes());
    let index_name = src.stored_identity().filter(|_| cache.is_some()).map(|(fields, bytes)| {
        let mut h = h.clone();
        h.update(b"stored entry");
        h.update(fields.as_bytes());
        h.update(bytes);
        format!("{}.idx", crate::cache::key_hex(&h.finalize()))
    });
    // An index entry: the text's key (64 hex digits) on its first line, its header lines after.
    let indexed = index_name.as_ref().zip(cache).and_then(|(n, c)| c.get(n)).and_then(|b| String::from_utf8(b).ok()).and_then(|t| {
        let (key, header) = t.split_once('\n')?;
        (key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit())).then(|| (key.to_string(), header.to_string()))
    });
    let index_read = indexed.is_some();
    // A compressed entry without its index entry was never instrumented with these options
    // (the index is written with every pair).
    if on_miss == OnMiss::GiveUp && (cache.is_none() || (index_name.is_some() && !index_read)) {
        return Ok(None);
    }
    let (key, header) = match indexed {
        Some(kh) => kh,
        None => {
            let text = src.text()?;
            h.update(text.as_bytes());
            (crate::cache::key_hex(&h.finalize()), header_lines(text))
        }
    };
    // A PTX ISA or target the instrumenter does not know is left native (the caller warns).
    crate::ptx_header::supported(&header)?;
    let write_index = |c: &Cache| {
        if let (Some(n), false) = (&index_name, index_read) {
            let _ = c.put(n, format!("{key}\n{header}").as_bytes());
        }
    };
    if let Some(c) = cache {
        let (ptx_name, sites_name) = (format!("{key}.ptx"), format!("{key}.sites.json"));
        // A lone file of the pair is a miss (each is written whole and renamed into place).
        let checked = if want_ptx { c.get(&ptx_name).and_then(|b| String::from_utf8(b).ok()).map(Some) } else { c.has(&ptx_name).then_some(None) };
        if let (Some(checked), Some(Ok(json))) = (checked, c.get(&sites_name).map(String::from_utf8)) {
            // Parsed when a report needs it; the shape of a whole table is checked here (a file
            // cut short or not gasan's is a miss).
            if json.starts_with("{\"sites\":") && json.trim_end().ends_with('}') {
                write_index(c);
                // Written before the pair: missing or unreadable, no parameter is tagged.
                let param_tags = c.get(&format!("{key}.tags")).and_then(|b| ParamTagTable::from_text(std::str::from_utf8(&b).ok()?)).unwrap_or_default();
                return Ok(Some((Instrumentation { key, opts, sites: ModuleSites::json(json), param_tags: Arc::new(param_tags), ptx: checked, header }, true)));
            }
        }
    }
    if on_miss == OnMiss::GiveUp {
        return Ok(None);
    }
    let r = instrument_ptx(src.text()?, &opts).map_err(|e| e.to_string())?;
    if let Some(c) = cache {
        // Each file is written whole and renamed into place, so concurrent processes never read
        // half of one (a lone file of the pair is a miss); the index goes last, so one that is
        // found names a pair that was written.
        let _ = c.put(&format!("{key}.tags"), r.param_tags.to_text().as_bytes());
        let _ = c.put(&format!("{key}.sites.json"), r.sites.to_json().as_bytes());
        let _ = c.put(&format!("{key}.ptx"), r.ptx.as_bytes());
        write_index(c);
    }
    let t = r.stats.total();
    log(1, || format!("instrumented module: {} accesses, {} checked, {} eliminated, {} unknown", t.found, t.checked, t.eliminated, t.unknown));
    Ok(Some((Instrumentation { key, opts, sites: ModuleSites::parsed(r.sites), param_tags: Arc::new(r.param_tags), ptx: Some(r.ptx), header }, false)))
}

/// Instruments `ptx` (or takes it from the on-disk cache): (checked PTX, site table, cache key).
pub fn check_ptx(ptx: &str) -> Result<(String, SiteTable, String), String> {
    let i = instrumentation(&PtxSource::from_text(ptx.to_string()), true)?;
    Ok((i.ptx.ok_or("the checked PTX went missing")?, i.sites.into_table(), i.key))
}

/// The `ptxas` found for this process and its identity (for cubin keys), looked up once.
fn compiler() -> Option<&'static (PathBuf, String)> {
    static C: OnceLock<Option<(PathBuf, String)>> = OnceLock::new();
    C.get_or_init(|| {
        let p = sass::find_ptxas(options().ptxas.as_deref(), |k| std::env::var_os(k))?;
        let id = sass::file_identity(&p)?;
        Some((p, id))
    })
    .as_ref()
}

/// The driver's identity for cubin keys: its version and its library file.
fn driver_identity() -> &'static str {
    static D: OnceLock<String> = OnceLock::new();
    D.get_or_init(|| {
        let v = crate::driver::result::driver_get_version().unwrap_or(0);
        let mut lib = String::new();
        // Any libcuda export names the library file; dladdr needs only its address.
        let f = crate::driver::sys::cuDriverGetVersion.address();
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: dladdr only writes `info`; `f` is an address inside libcuda (or 0: not found).
        if f != 0 && unsafe { libc::dladdr(f as *const c_void, info.as_mut_ptr()) } != 0 {
            // SAFETY: dladdr succeeded, so `info` is initialized.
            let name = unsafe { info.assume_init() }.dli_fname;
            if !name.is_null() {
                // SAFETY: a NUL-terminated string owned by the dynamic linker.
                let p = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
                lib = sass::file_identity(std::path::Path::new(&p)).unwrap_or(p);
            }
        }
        format!("{v}|{lib}")
    })
}

/// The cache entry that says this driver takes control blocks preset in gasan's cubins (an
/// earlier process read one back: [`crate::control::ControlBlocks::preset_module_loaded`]), named by the
/// driver's identity and gasan's version and revision.
fn preset_marker() -> Option<(Cache, String)> {
    let mut h = Sha256::new();
    h.update(driver_identity());
    h.update(env!("CARGO_PKG_VERSION"));
    h.update(gasan_instrument::ptx::REVISION.to_le_bytes());
    Some((cache()?, format!("{}.preset", crate::cache::key_hex(&h.finalize()))))
}

/// Notes a module handed to the driver's JIT as PTX instead of a cubin.
fn on_ptx_path(why: &str) {
    state().counters.sass_ptx_path.fetch_add(1, Ordering::Relaxed);
    log(1, || format!("checked module goes to the driver's PTX JIT: {why}"));
}

/// The checked module compiled for this GPU: from the cache, or compiled now with ptxas and
/// cached. `None` (the module then goes to the driver's JIT as PTX) when `sass=0`, when the
/// loader's JIT options have no ptxas equivalent, without a cache directory or a ptxas, or when
/// ptxas fails (remembered in the cache, so later runs do not retry the same compile).
fn cubin_for(c: &Checked, jit: &Result<Vec<String>, String>) -> Option<(CubinImage, Cache, String)> {
    let s = state();
    if !options().sass {
        s.counters.sass_ptx_path.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let flags = match jit {
        Ok(f) => f,
        Err(why) => {
            on_ptx_path(&format!("{why} has no ptxas equivalent"));
            return None;
        }
    };
    let Some(cache) = cache() else {
        on_ptx_path("no cache directory (set cache_dir or HOME)");
        return None;
    };
    let Some((ptxas, compiler)) = compiler() else {
        on_ptx_path("no ptxas found (set ptxas=PATH or CUDA_HOME)");
        return None;
    };
    let lookup = std::time::Instant::now();
    let (name, fail) = cubin_names(c, flags, compiler, driver_identity());
    let cached = c.read_cubin(&cache, &name);
    s.counters.cubin_lookup_us.fetch_add(lookup.elapsed().as_micros() as u64, Ordering::Relaxed);
    if let Some(b) = cached {
        s.counters.cubins_cached.fetch_add(1, Ordering::Relaxed);
        return Some((b, cache, fail));
    }
    if cache.has(&fail) {
        on_ptx_path(&format!("an earlier compile of it failed ({})", cache.dir.join(&fail).display()));
        return None;
    }
    let ptx = match c.ptx() {
        Ok(p) => p,
        Err(e) => {
            on_ptx_path(&format!("no checked PTX to compile ({e})"));
            return None;
        }
    };
    let t = std::time::Instant::now();
    let r = sass::compile(&sass::Compile { ptxas, target: &c.target, flags, split: 0 }, &cache, ptx.to_bytes(), &name);
    s.counters.cubin_compile_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    match r {
        Ok(b) => {
            s.counters.cubins_compiled.fetch_add(1, Ordering::Relaxed);
            log(1, || format!("compiled checked module to {} ({} KiB PTX -> {} KiB cubin) in {:.1} ms", c.target, ptx.to_bytes().len() >> 10, b.len() >> 10, t.elapsed().as_secs_f64() * 1e3));
            Some((CubinImage::new(&b, c.arch, c.arch_specific()), cache, fail))
        }
        Err(e) => {
            if e.permanent {
                let _ = cache.put(&fail, e.message.as_bytes());
            }
            on_ptx_path(&e.message);
            None
        }
    }
}

/// The cache entries of a checked module's cubin compiled with ptxas `flags` by `compiler` (its
/// [`sass::file_identity`]): (the cubin, the marker of a failed compile).
fn cubin_names(c: &Checked, flags: &[String], compiler: &str, driver: &str) -> (String, String) {
    let inputs = sass::KeyInputs { checked: &c.key, target: &c.target, flags, compiler, driver, gasan: env!("CARGO_PKG_VERSION") };
    sass::entry_names(&sass::cubin_key(&inputs), &c.target)
}

/// Compute capability of the current context's device (device 0 without one).
fn current_cc() -> Option<u32> {
    compute_capability(current_device().unwrap_or(0))
}

/// Prepares a checked version of a module image for a GPU of compute capability `cc`, or says
/// why the original must be loaded.
///
/// # Safety
/// As for [`image_ptx`].
unsafe fn prepare_for(image: *const c_void, cc: u32) -> Result<Checked, Skip> {
    if !options().instrument {
        return Err(Skip::Disabled);
    }
    // SAFETY: `image` satisfies image_ptx's contract, which is this function's.
    let src = unsafe { image_ptx(image, cc) }?;
    let i = instrumentation(&src, false).map_err(Skip::Error)?;
    Ok(checked_from(src, i, cc))
}

/// Everything a load needs before the driver, done now: the checked module for a GPU of compute
/// capability `cc` (instrumented on a cache miss) and its cubin for a loader with JIT options
/// `jit` (compiled on a miss; `None`: the module goes to the driver's JIT), counted.
///
/// # Safety
/// As for [`image_ptx`].
pub unsafe fn prepare_now(image: *const c_void, cc: u32, jit: &Result<Vec<String>, String>) -> Result<Prepared, Skip> {
    let start = std::time::Instant::now();
    // SAFETY: this function's contract.
    let checked = unsafe { prepare_for(image, cc) }?;
    state().counters.prepare_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    let cubin = cubin_for(&checked, jit);
    Ok(Prepared { checked, cubin, preloaded: None })
}

/// The checked module made (or found) by `i` from `src`, for a GPU of compute capability `cc`.
fn checked_from(src: PtxSource, i: Instrumentation, cc: u32) -> Checked {
    // Instrumentation keeps the module's header: its version and target are the original's.
    let version = container::ptx_version(&i.header).unwrap_or((8, 0));
    let target = sass::target_for(&i.header, cc);
    let checked_ptx = OnceLock::new();
    if let Some(p) = i.ptx {
        let _ = checked_ptx.set(std::ffi::CString::new(p).map_err(|e| e.to_string()));
    }
    Checked { ptx: checked_ptx, original: src, opts: i.opts, sites: i.sites, param_tags: i.param_tags, version, arch: cc, key: i.key, target }
}

/// A module made ready for the driver's loader: the checked module and its cubin.
pub struct Prepared {
    pub checked: Checked,
    /// The cubin, the cache it came from and its failure marker's name, as [`cubin_for`] gives
    /// (`None`: load the checked PTX).
    pub cubin: Option<(CubinImage, Cache, String)>,
    /// The cubin already loaded into a context ahead of its loader ([`preload`]).
    pub preloaded: Option<Preloaded>,
}

/// A checked cubin loaded ahead of its loader ([`preload`]): its sites are registered and its
/// control block preset, as a load in its loader would have done.
pub struct Preloaded {
    /// Its module id ([`ModuleRegistry::register`](crate::report::ModuleRegistry)).
    pub id: u64,
    /// As [`ControlBlocks::preset`](crate::control::ControlBlocks) answered for its cubin.
    pub preset: Option<bool>,
    /// The library (`CUlibrary`) the driver made of it, already loaded into the context the GPU
    /// was set up in; `None` when the driver refused it or that context went away (its loader
    /// then loads it as before, under this id).
    pub library: Option<usize>,
}

/// Where a loader writes what it loaded: the program's module or library out-pointer. A library
/// loader's call is `adoptable` when its library options ask for nothing a library loaded ahead
/// (without options) lacks.
#[derive(Clone, Copy)]
pub enum LoadOut {
    Module(Out<cudarc::driver::sys::CUmodule>),
    Library { out: Out<cudarc::driver::sys::CUlibrary>, adoptable: bool },
}

impl LoadOut {
    /// What the loader wrote, read after a successful load into this out-pointer (the driver's
    /// write, or [`LoadOut::adopt`]'s); `None` for a null one.
    fn loaded(self) -> Option<LoadedHandle> {
        let ok = crate::driver::CUDA_SUCCESS;
        match self {
            LoadOut::Module(m) => m.written(ok).map(LoadedHandle::Module),
            LoadOut::Library { out, .. } => out.written(ok).map(LoadedHandle::Library),
        }
    }

    /// Hands `library`, loaded ahead, to the program as its loader would: false for a module
    /// loader (it must return a module the program may unload), a library loader whose options
    /// the library lacks, or a null out-pointer.
    fn adopt(self, library: usize) -> bool {
        match self {
            LoadOut::Library { out, adoptable: true } => out.set(library as cudarc::driver::sys::CUlibrary),
            _ => false,
        }
    }
}

/// Can a library loaded without options stand for one loaded with these ([`LoadOut::adopt`])?
/// Only `CU_LIBRARY_BINARY_IS_PRESERVED`, a memory hint, may be asked; a host table of
/// functions and data (`CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE`) may not.
pub fn library_options_adoptable(options: &OptionArrays) -> bool {
    options.options.iter().all(|&o| o == cudarc::driver::sys::CUlibraryOption::CU_LIBRARY_BINARY_IS_PRESERVED as i32)
}

/// Loads a prepared module's cubin ahead of its loader (crate::prefetch), as a library (what
/// CUDA 13's cudart loads), and loads that library's module into the calling thread's current
/// context, which a first launch would otherwise do; first what the loader would do before
/// loading: its sites registered, its control block preset. The cubin stays in `p` (the driver
/// may keep pointing at it under lazy loading). False when it has no cubin or the driver refused.
pub fn preload(p: &mut Prepared) -> bool {
    let Some((cubin, _, _)) = p.cubin.as_mut() else { return false };
    let s = state();
    let id = p.checked.register_sites();
    let preset = s.control.preset(s, cubin.cubin_mut(), id);
    let t = std::time::Instant::now();
    // SAFETY: the fatbin lives in `p` (kept for the process once loaded) for the call.
    let library = match unsafe { crate::driver::result::library_load_data(cubin.fatbin().as_ptr().cast()) } {
        Ok(library) => library,
        Err(r) => {
            log(1, || format!("module {id}: not loaded ahead (CUDA error {r})"));
            p.preloaded = Some(Preloaded { id, preset, library: None });
            return false;
        }
    };
    // Resolves the library's module now (the loader's handle stays the library).
    let _ = crate::driver::result::library_get_module(library);
    s.counters.modules_preloaded.fetch_add(1, Ordering::Relaxed);
    s.counters.preload_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    p.preloaded = Some(Preloaded { id, preset, library: Some(library as usize) });
    true
}

impl Prepared {
    /// The memory its cubin holds.
    pub fn bytes(&self) -> usize {
        self.cubin.as_ref().map_or(0, |(c, _, _)| c.fatbin().len())
    }
}

/// Everything the cache keys of a module's checked code and cubin depend on besides the module
/// itself, for a GPU of compute capability `cc` and a loader without JIT options (cudart's):
/// what [`prepare_cached`] looks modules up with. Made for this process once the GPU is set up
/// ([`Self::for_this_process`]), or before, from a remembered device ([`Self::speculative`]);
/// two that are equal find the same entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheLookup {
    pub cc: u32,
    instrument: InstrumentOptions,
    code_key: String,
    cache: Cache,
    /// [`sass::file_identity`] of ptxas.
    compiler: String,
    /// [`driver_identity`].
    driver: String,
}

impl CacheLookup {
    /// This process's lookup, once its GPU is set up (the pool decides the aligned-pool checks,
    /// the loaded driver its identity); `None` when the options rule cached cubins out
    /// (`instrument=0`, `sass=0`) or there is no cache directory or ptxas.
    pub fn for_this_process(cc: u32) -> Option<Self> {
        let o = options();
        if !o.instrument || !o.sass {
            return None;
        }
        let cache = cache()?;
        let (_, compiler) = compiler()?;
        Some(CacheLookup { cc, instrument: instrument_options(), code_key: o.code_key.clone(), cache, compiler: compiler.clone(), driver: driver_identity().to_string() })
    }

    /// The lookup of a process with options `opts` and cache `cache` whose GPU, once set up, has
    /// compute capability `cc`, a pool that does or does not allow the aligned-pool checks, and a
    /// driver of identity `driver` (remembered from an earlier process: crate::prefetch). Calls
    /// no CUDA function and touches no process-wide state (it runs before the program's `main`,
    /// on a thread a fork may leave behind): ptxas is looked up with `env`.
    pub fn speculative(opts: &ModuleOptions, cache: Cache, cc: u32, aligned_pool: bool, driver: String, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<Self> {
        if !opts.instrument || !opts.sass {
            return None;
        }
        let compiler = sass::file_identity(&sass::find_ptxas(opts.ptxas.as_deref(), env)?)?;
        Some(CacheLookup { cc, instrument: opts.instrument_options(aligned_pool), code_key: opts.code_key.clone(), cache, compiler, driver })
    }

    /// Whether the checked code it finds uses the aligned-pool checks.
    pub fn aligned_pool(&self) -> bool {
        self.instrument.aligned_pool
    }

    /// The driver identity its cubin keys name.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The cache it reads.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }
}

/// Prepares a fatbin from the cache alone, as `lookup` says: `None` unless the cache holds both
/// its checked code and its cubin. Nothing is instrumented, compiled or counted, no CUDA function
/// is called and no process-wide state is touched (crate::prefetch runs it before `main` too),
/// and a miss is given up on as soon as it is certain, so this costs little for modules the
/// program never loads ([`crate::prefetch`]).
///
/// # Safety
/// `fatbin` spans at least `len` readable bytes for the whole process.
pub unsafe fn prepare_cached(fatbin: *const c_void, len: usize, lookup: &CacheLookup) -> Option<Prepared> {
    // SAFETY: `fatbin` spans `len` readable bytes (this function's contract); image_ptx_source
    // reads no byte past them and refuses what is not a fatbin within them.
    let src = unsafe { image_ptx_source(fatbin, lookup.cc, Some(len)) }.ok()?;
    let cache = &lookup.cache;
    let (i, _) = cached_instrumentation(&src, false, lookup.instrument, &lookup.code_key, Some(cache), OnMiss::GiveUp).ok()??;
    let checked = checked_from(src, i, lookup.cc);
    let (name, fail) = cubin_names(&checked, &[], &lookup.compiler, &lookup.driver);
    let image = checked.read_cubin(cache, &name)?;
    Some(Prepared { checked, cubin: Some((image, cache.clone(), fail)), preloaded: None })
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

/// Where loads find modules prepared ahead: `prefetch::take`, a layer above this one (it prepares
/// modules with this file's functions), handed in by `init::at_load` rather than named here.
type TakePrepared = unsafe fn(*const c_void) -> Option<Prepared>;
static PREFETCHED: OnceLock<TakePrepared> = OnceLock::new();

/// Sets where [`load_checked`] finds modules prepared ahead (once; later calls are ignored).
/// `take`'s contract: given a module image as the driver's loaders take it, it may read it.
pub fn take_prepared_from(take: TakePrepared) {
    let _ = PREFETCHED.set(take);
}

/// Loads via `load(image)`: the checked module as a cubin first ([`cubin_for`]), then as checked
/// PTX, then the original (with a warning) on any failure. `wrap` builds the image a loader takes
/// from the code ([`plain`]: the code itself); `jit` is what the loader's JIT options ask of ptxas
/// ([`jit_options`]).
///
/// The cubin is handed to the loader like any native one, so `CUDA_MODULE_LOADING` (lazy or eager)
/// applies to it as it does natively; nothing here resolves functions. A library the prefetch thread
/// loaded ahead ([`preload`]) is handed to a library loader through `out` ([`LoadOut::adopt`])
/// instead of being loaded again.
///
/// `load` is the driver loader the program called (its `real`, or the data loader a file's bytes
/// go through), with the program's out-pointer `out`; the image it gets is `image` or gasan's
/// checked one.
pub fn load_checked(image: ModuleImage, jit: Result<Vec<String>, String>, wrap: impl for<'c> Fn(&Checked, &Code<'c>) -> Image<'c>, load: impl Fn(ModuleImage) -> i32, out: LoadOut) -> i32 {
    // A cubin from the application's own checked cuLink: load it, then write each input's block.
    if let Some(inputs) = linked_inputs(image.raw()) {
        let r = load(image);
        if let Some(h) = out.loaded().filter(|_| r == 0) {
            let s = state();
            s.counters.modules_instrumented.fetch_add(1, Ordering::Relaxed);
            for i in inputs {
                s.control.set_named(s, h, i.module_id, &i.ctl_symbol);
            }
        }
        return r;
    }
    let start = std::time::Instant::now();
    let s = state();
    // The device runtime first: setting it up starts the prefetch (crate::prefetch), which must
    // know that this module is already being loaded.
    if options().instrument && options().prefetch {
        let _ = s.device();
    }
    // Prepared ahead (a loader without JIT options, the same GPU), else prepared now.
    // SAFETY: `image` is a module image (ModuleImage's invariant), as take requires.
    let prefetched = PREFETCHED.get().and_then(|take| unsafe { take(image.raw()) }).filter(|p| matches!(&jit, Ok(f) if f.is_empty()) && Some(p.checked.arch) == current_cc());
    let prepared = match prefetched {
        Some(p) => {
            s.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            s.counters.cubins_cached.fetch_add(1, Ordering::Relaxed);
            s.counters.cubins_prefetched.fetch_add(1, Ordering::Relaxed);
            s.counters.prepare_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            Ok(p)
        }
        None if !options().instrument => Err(Skip::Disabled),
        // SAFETY: `image` is a module image as image_ptx requires (ModuleImage's invariant),
        // which is prepare_now's contract.
        None => current_cc().ok_or_else(|| Skip::Error("no compute capability".into())).and_then(|cc| unsafe { prepare_now(image.raw(), cc, &jit) }),
    };
    let Prepared { mut checked, mut cubin, preloaded } = match prepared {
        Ok(p) => p,
        Err(Skip::SassOnly) => return load_cubin(image, load, out),
        Err(skip) => {
            note_skip(&skip);
            return load(image);
        }
    };
    // The module id first: a cubin can carry its control block in (ControlBlocks::preset).
    // A module loaded ahead has one already.
    let id = match &preloaded {
        Some(p) => p.id,
        None => checked.register_sites(),
    };
    // Loads `code` (wrapped as the loader needs); the image stays alive for the process, since a
    // loader may keep the pointer (lazy loading).
    let try_load = |code: Code| -> i32 {
        let image = wrap(&checked, &code);
        let img = match &image {
            Image::Code => code.as_ptr(),
            Image::Within(b) => b.as_ptr().cast(),
            Image::Built(b) => b.as_ptr().cast(),
        };
        let t = std::time::Instant::now();
        // SAFETY: gasan's checked code as the loader takes it (`wrap`), alive for the call and,
        // once loaded, for the process (forgotten below).
        let r = load(unsafe { ModuleImage::new(img) });
        s.counters.driver_load_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        if r == 0 {
            std::mem::forget(image);
        }
        r
    };
    let mut loaded = false;
    // Some(the module has a device-heap symbol) when the cubin carries its control block.
    let mut preset: Option<bool> = None;
    if let Some(library) = preloaded.as_ref().and_then(|p| p.library) {
        // Loaded ahead: the library is handed over as the loader would have made it. Otherwise
        // (a module loader, library options it lacks) it stays loaded unused: unloading it here
        // could break a stream capture under way (a lazy load inside a captured launch).
        if out.adopt(library) {
            loaded = true;
            preset = preloaded.as_ref().and_then(|p| p.preset);
            s.counters.modules_adopted.fetch_add(1, Ordering::Relaxed);
            if let Some((image, _, _)) = cubin.take() {
                std::mem::forget(image);
            }
        } else {
            log(1, || format!("module {id}: loaded ahead, but its loader {}; loading it again", if matches!(out, LoadOut::Module(_)) { "returns a module" } else { "asks for library options" }));
        }
    }
    if let Some((mut cubin, cache, fail)) = cubin {
        let carries_block = s.control.preset(s, cubin.cubin_mut(), id);
        let r = try_load(Code::Cubin(&cubin));
        if r == 0 {
            loaded = true;
            preset = carries_block;
            std::mem::forget(cubin);
        } else {
            s.counters.cubins_refused.fetch_add(1, Ordering::Relaxed);
            // The image's kind or architecture: this driver will refuse this cubin every time.
            if matches!(r, 200 | 209 | 222) {
                let _ = cache.put(&fail, format!("the driver refused the cubin (CUDA error {r})").as_bytes());
            }
            log(1, || format!("the driver refused the checked cubin (CUDA error {r}); loading checked PTX"));
        }
    }
    if !loaded {
        let r = match checked.ptx() {
            Ok(p) => try_load(Code::Ptx(p)),
            Err(e) => {
                note_skip(&Skip::Error(e));
                return load(image);
            }
        };
        if r != 0 {
            note_skip(&Skip::Error(format!("the driver refused the checked module (CUDA error {r})")));
            return load(image);
        }
    }
    if let Some(h) = out.loaded() {
        finish_checked_load(h, id, preset, &checked.param_tags);
    }
    s.counters.module_load_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    // Loaded as PTX: the loader may keep pointing at it. (A cubin load frees the PTX a compile made.)
    if !loaded {
        checked.leak_ptx();
    }
    0
}

/// What a load does with a cubin that has no PTX for this GPU (an ELF image, or a fatbin's ELF
/// entry): [`gasan_jit::recognise`]'s answer (jit/README.md, "What the runtime must do at load"),
/// with a checked cubin's sites registered.
#[derive(Debug)]
pub enum CubinPlan {
    /// Checked by gasan-ptxas with this process's checks: its sites are module `id`; after the
    /// load its control block is written and `param_tags` kept, as for a module checked here
    /// (`finish_checked_load`). A cubin linked from several checked inputs (the nvJitLink
    /// wrapper's) has each further input's sites registered apart (`linked`: its module id and
    /// control block, written after the load too) and every input's kernels in `param_tags`.
    Checked { id: u64, param_tags: Arc<ParamTagTable>, linked: Vec<LinkInput> },
    /// Checked by another gasan build or with other checks: loaded without its control block
    /// (all zeros: its checks pass), for this reason.
    Foreign(String),
    /// Native SASS: loaded unchanged, MMU-level protection only.
    Native,
    /// A marker or tables that do not read: loaded unchanged, for this reason.
    Damaged(String),
}

/// Decides what a load does with cubin `elf` in a process with options `opts`; a checked cubin's
/// site tables go to `register` (the process's registry: `ModuleRegistry::register`), which gives
/// each its module id. Calls no driver function.
pub fn plan_cubin(elf: &[u8], opts: &ModuleOptions, mut register: impl FnMut(ModuleSites) -> u64) -> CubinPlan {
    match gasan_jit::recognise(elf, opts.expected()) {
        Recognition::Native => CubinPlan::Native,
        Recognition::Checked { tables, linked, .. } => {
            let id = register(ModuleSites::parsed(tables.sites));
            let mut param_tags = tables.param_tags;
            let linked = linked
                .into_iter()
                .map(|input| {
                    // Kernel names are unique across a link's inputs (the link would fail otherwise).
                    param_tags.kernels.extend(input.tables.param_tags.kernels);
                    LinkInput { module_id: register(ModuleSites::parsed(input.tables.sites)), ctl_symbol: input.control_block }
                })
                .collect();
            CubinPlan::Checked { id, param_tags: Arc::new(param_tags), linked }
        }
        Recognition::Foreign { why, .. } => CubinPlan::Foreign(why),
        Recognition::Damaged(e) => CubinPlan::Damaged(e.to_string()),
    }
}

/// The cubin a loader runs from a module image without PTX for a GPU of compute capability `cc`:
/// the image itself when it is ELF, else its fatbin's ELF entry for `cc` (the highest arch of
/// the same major, no newer than `cc`; an arch-specific one only for its own arch), decompressed.
/// `Ok(None)`: it has none.
///
/// # Safety
/// `image` is a module image as the driver's loaders take it.
pub unsafe fn image_cubin(image: *const c_void, cc: Option<u32>) -> Result<Option<Vec<u8>>, String> {
    if image.is_null() {
        return Ok(None);
    }
    let p = image as *const u8;
    // SAFETY: a non-null module image (this function's contract).
    let is_elf = container::sniff(&unsafe { image_magic(p, None) }) == ImageKind::Elf;
    let (start, header) = if is_elf {
        (p, container::Elf64Header::SIZE)
    } else {
        // SAFETY: as above.
        match unsafe { image_fatbin_address(image) } {
            Some(a) => (a as *const u8, container::FatbinHeader::SIZE),
            None => return Ok(None),
        }
    };
    // SAFETY: an ELF image (its 64-byte header first) or a fatbin (its 16-byte header first), as
    // the magic says and the loaders require of a valid image.
    let prefix = unsafe { std::slice::from_raw_parts(start, header) };
    let len = match container::image_len(prefix).map_err(|e| e.to_string())? {
        ImageLen::Bytes(n) => n,
        other => return Err(format!("unexpected image size {other:?}")),
    };
    // SAFETY: `len` is the image's size from its own header (an ELF's header tables end it, a
    // fatbin's header counts its payload), and a valid image spans that many readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(start, len) };
    if is_elf {
        return Ok(Some(bytes.to_vec()));
    }
    let Some(cc) = cc else { return Ok(None) };
    let fb = container::Fatbin::parse(bytes).map_err(|e| e.to_string())?;
    let runs = |e: &&container::Entry<'_>| e.kind == container::EntryKind::Elf && e.arch / 10 == cc / 10 && e.arch <= cc && (!e.arch_specific() || e.arch == cc);
    match fb.entries.iter().filter(runs).max_by_key(|e| (e.arch, e.arch_specific())) {
        Some(e) => e.payload().map(|c| Some(c.into_owned())).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// Set once a foreign cubin, and once a damaged one, has been warned about at verbosity 0 (later
/// ones are told at verbosity 1).
static FOREIGN_WARNED: AtomicBool = AtomicBool::new(false);
static DAMAGED_WARNED: AtomicBool = AtomicBool::new(false);

/// Loads an image without PTX for this GPU unchanged, recognising a cubin gasan-ptxas checked
/// ([`plan_cubin`]): its sites registered before the load, its control block written after.
fn load_cubin(image: ModuleImage, load: impl Fn(ModuleImage) -> i32, out: LoadOut) -> i32 {
    let s = state();
    // SAFETY: `image` is a module image (ModuleImage's invariant).
    let elf = unsafe { image_cubin(image.raw(), current_cc()) };
    let cubin = elf.as_ref().ok().and_then(|e| e.as_deref());
    let plan = match &elf {
        Ok(Some(elf)) => plan_cubin(elf, options(), |m| s.sites.register(m)),
        Ok(None) => CubinPlan::Native,
        // Not ours to judge (the loader had no PTX in it either): SASS only, as before.
        Err(e) => {
            log(1, || format!("module image not searched for a gasan marker ({e})"));
            CubinPlan::Native
        }
    };
    let unchecked = |warned: &AtomicBool, what: String| {
        s.counters.modules_fallback.fetch_add(1, Ordering::Relaxed);
        let level = u32::from(warned.swap(true, Ordering::Relaxed));
        log(level, || format!("WARNING: {what}; loading it unchecked"));
    };
    let origin = |checked: bool, why: &str| crate::jit_origin::loaded(cubin, checked, why);
    match plan {
        CubinPlan::Native => {
            note_skip(&Skip::SassOnly);
            origin(false, "SASS only");
        }
        CubinPlan::Foreign(why) => {
            unchecked(&FOREIGN_WARNED, format!("cubin checked by another gasan build ({why}): compile it again (clear the framework's kernel cache)"));
            origin(false, "checked by another gasan build or options");
        }
        CubinPlan::Damaged(e) => {
            unchecked(&DAMAGED_WARNED, format!("cubin whose gasan marker or tables do not read ({e})"));
            origin(false, "marker or tables unreadable");
        }
        CubinPlan::Checked { id, param_tags, linked } => {
            let r = load(image);
            origin(r == 0, "refused by the driver");
            if let Some(h) = out.loaded().filter(|_| r == 0) {
                log(1, || {
                    format!("module {id}: checked at compile time by gasan-ptxas{}", if linked.is_empty() { String::new() } else { format!(", linked with {} more checked input(s)", linked.len()) })
                });
                finish_checked_load(h, id, None, &param_tags);
                for input in &linked {
                    s.control.set_named(s, h, input.module_id, &input.ctl_symbol);
                }
            }
            return r;
        }
    }
    load(image)
}

/// What the load of every checked module ends with: counted, its control block written (with
/// `preset` = `Some(has a device heap)` when its cubin carried it in), and its parameter tags kept
/// for launches (crate::arg_bounds).
fn finish_checked_load(h: LoadedHandle, id: u64, preset: Option<bool>, param_tags: &Arc<ParamTagTable>) {
    let s = state();
    s.counters.modules_instrumented.fetch_add(1, Ordering::Relaxed);
    let control = std::time::Instant::now();
    match preset {
        Some(has_heap) => {
            // The marker matters until this process has settled whether presets work.
            let marker = if s.control.preset_settled() { None } else { preset_marker() };
            let known = marker.as_ref().is_some_and(|(c, n)| c.has(n));
            if s.control.preset_module_loaded(s, h, id, has_heap, known) {
                if let Some((c, n)) = &marker {
                    let _ = c.put(n, driver_identity().as_bytes());
                }
            }
        }
        None => s.control.set(s, h, id),
    }
    s.counters.control_block_us.fetch_add(control.elapsed().as_micros() as u64, Ordering::Relaxed);
    let owner = match h {
        LoadedHandle::Module(m) => m.into(),
        LoadedHandle::Library(l) => l.into(),
    };
    crate::arg_bounds::on_loaded(owner, matches!(h, LoadedHandle::Module(_)), param_tags);
}

#[cfg(test)]
mod bounded_image_tests {
    use super::{image_ptx_within, Skip};

    fn within(bytes: &[u8]) -> Result<String, Skip> {
        // SAFETY: `bytes` spans `bytes.len()` readable bytes.
        unsafe { image_ptx_within(bytes.as_ptr().cast(), 90, Some(bytes.len())) }
    }

    /// Inputs whose own headers claim more than they hold are refused, never read past.
    #[test]
    fn lying_or_short_inputs_are_refused_within_their_bytes() {
        // A fatbin magic in 2 bytes; a 16-byte fatbin header claiming 1 MiB of payload.
        assert!(within(&[0x50, 0xed]).is_err());
        let hdr = gasan_instrument::container::FatbinHeader::new(1 << 20).to_bytes();
        assert!(matches!(within(&hdr), Err(Skip::Error(e)) if e.contains("claims")), "{:?}", within(&hdr));
        // Text with no NUL in its bytes; then the same, terminated.
        assert!(within(b".version 8.0\n.target sm_90").is_err());
        assert!(within(b".version 8.0\n.target sm_90\n.address_size 64\n\0").is_ok());
        assert!(within(b"ab\0").is_err() && within(b"").is_err());
    }
}

#[cfg(test)]
mod stored_index_tests {
    use super::{cached_instrumentation, Cache, OnMiss, PtxSource};
    use gasan_instrument::container::{Entry, EntryKind, FLAG_64BIT, FLAG_LZ4};
    use gasan_instrument::ptx::InstrumentOptions;
    use gasan_instrument::shadow::Scale;

    fn ptx(k: u32) -> String {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k{k}(.param .u64 p)\n{{\n.reg .b64 %rd<3>;\n.reg .f32 %f<2>;\n\
             ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd2, %rd1;\nld.global.f32 %f1, [%rd2+{}];\nst.global.f32 [%rd2], %f1;\nret;\n}}\n",
            4 * k
        )
    }

    /// An lz4-compressed PTX entry of `text`, as a fatbin stores it.
    fn compressed(text: &str) -> PtxSource {
        let stored = lz4_flex::block::compress(text.as_bytes());
        let e = Entry { kind: EntryKind::Ptx, arch: 90, flags: FLAG_64BIT | FLAG_LZ4, version: (8, 0), identifier: None, options: None, raw: &stored, uncompressed_size: text.len() as u64 };
        PtxSource::from_entry(&e)
    }

    const OPTS: InstrumentOptions = InstrumentOptions { scale: Scale::S8, optimize: true, recover: false, aligned_pool: true, hoist_loops: true, param_bounds: true, outside_checks: false };

    fn cache(name: &str) -> Cache {
        let d = std::env::temp_dir().join(format!("gasan-idx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Cache::new(d, 1 << 30)
    }

    /// A second load of a compressed entry finds its checked code by the stored bytes, without
    /// decompressing them, under the same key as the text's; other text or options miss.
    #[test]
    fn compressed_entries_are_found_again_without_decompressing() {
        let c = cache("hit");
        let (first, hit) = cached_instrumentation(&compressed(&ptx(1)), false, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
        assert!(!hit);
        let src = compressed(&ptx(1));
        let (again, hit) = cached_instrumentation(&src, false, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
        assert!(hit && src.text.get().is_none(), "hit {hit}; decompressed {}", src.text.get().is_some());
        assert_eq!((again.key.as_str(), again.header.as_str()), (first.key.as_str(), ".version 8.0\n.target sm_90\n"));
        // The same PTX as text: the same key (the index only saves the decompression).
        let (text, hit) = cached_instrumentation(&PtxSource::from_text(ptx(1)), false, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
        assert!(hit);
        assert_eq!(text.key, first.key);
        // Other PTX, other options, another code key: other entries.
        for (src, opts, code) in [(compressed(&ptx(2)), OPTS, "k"), (compressed(&ptx(1)), InstrumentOptions { hoist_loops: false, ..OPTS }, "k"), (compressed(&ptx(1)), OPTS, "k2")] {
            let (other, hit) = cached_instrumentation(&src, false, opts, code, Some(&c), OnMiss::Instrument).unwrap().unwrap();
            assert!(!hit);
            assert_ne!(other.key, first.key);
        }
        // Checked PTX from a hit by index is the module's own.
        let (with_ptx, _) = cached_instrumentation(&compressed(&ptx(1)), true, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
        assert!(with_ptx.ptx.unwrap().contains(".entry k1("));
        let _ = std::fs::remove_dir_all(&c.dir);
    }

    /// An index entry that is not one (cut short, garbage) is a miss, never another module's code.
    #[test]
    fn a_bad_index_entry_is_a_miss() {
        let c = cache("bad");
        let (first, _) = cached_instrumentation(&compressed(&ptx(3)), false, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
        let idx: Vec<_> = c.entries().into_iter().filter(|e| e.name.ends_with(".idx")).collect();
        assert_eq!(idx.len(), 1, "one index entry for one compressed module");
        for bad in ["", "not a key\n.version 8.0\n", &"0".repeat(63)] {
            std::fs::write(c.dir.join(&idx[0].name), bad).unwrap();
            let src = compressed(&ptx(3));
            let (again, hit) = cached_instrumentation(&src, false, OPTS, "k", Some(&c), OnMiss::Instrument).unwrap().unwrap();
            assert!(hit && src.text.get().is_some(), "{bad:?}: found by the text's key after decompressing");
            assert_eq!(again.key, first.key);
        }
        let _ = std::fs::remove_dir_all(&c.dir);
    }
}

#[cfg(test)]
mod preload_tests {
    use super::{library_options_adoptable, LoadOut};
    use crate::hook_abi::Out;
    use cudarc::driver::sys::CUlibraryOption::{CU_LIBRARY_BINARY_IS_PRESERVED as PRESERVED, CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE as HOST_TABLE};

    fn adoptable(options: &[i32]) -> bool {
        library_options_adoptable(&crate::hook_abi::OptionArrays { options, values: &[] })
    }

    #[test]
    fn a_library_loaded_ahead_stands_only_for_loads_that_ask_nothing_it_lacks() {
        // cudart's (CUDA 13): the binary-is-preserved hint alone.
        assert!(adoptable(&[PRESERVED as i32]));
        assert!(adoptable(&[]));
        // SAFETY: a null array with a count of 0 is "no options".
        assert!(library_options_adoptable(&unsafe { crate::hook_abi::OptionArrays::new(0, std::ptr::null(), std::ptr::null()) }));
        assert!(!adoptable(&[HOST_TABLE as i32]));
        assert!(!adoptable(&[PRESERVED as i32, HOST_TABLE as i32]));
    }

    #[test]
    fn only_an_adoptable_library_loader_takes_a_library_loaded_ahead() {
        let library = 0x1234usize;
        let (mut lib, mut module) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: each out-pointer is a live local (or null), used while they live.
        let (lib_out, module_out, null_out) = unsafe { (Out::new(&mut lib), Out::new(&mut module), Out::new(std::ptr::null_mut())) };
        assert!(!LoadOut::Module(module_out).adopt(library));
        assert!(!LoadOut::Library { out: lib_out, adoptable: false }.adopt(library));
        assert!(lib.is_null() && module.is_null());
        assert!(LoadOut::Library { out: lib_out, adoptable: true }.adopt(library));
        assert_eq!(lib as usize, library);
        assert!(!LoadOut::Library { out: null_out, adoptable: true }.adopt(library));
    }
}
