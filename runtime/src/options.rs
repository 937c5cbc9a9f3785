//! Options, declared once ([`options_table!`] below, ASan's `asan_flags.inc` pattern).
//!
//! Each row of the table gives an option's name (ASan's where ASan has one), its type, its default,
//! the check of its values, whether it changes the checked PTX, and its help text. That one row
//! drives everything else:
//! - the [`Options`] struct field and its default;
//! - `GASAN_OPTIONS` parsing ([`Options::parse`], [`Options::set`]) with the type's syntax
//!   ([`Value`]) and the row's check ([`Check`]);
//! - gasan-run's `--flag` (the name with `-` for `_`), its `--help` line (help text, allowed values,
//!   default) — see [`TABLE`];
//! - the checks against the machine made before the program starts ([`Options::validate`]: log
//!   directory writable, suppressions file readable and well-formed);
//! - [`Options::to_env_string`], how gasan-run hands the options to the preloaded runtime;
//! - the checked-PTX cache key ([`Options::code_key`]: the options whose row says [`CODE`]).
//!
//! **Adding an option is one line in the table** (plus reading the field where it is used): e.g.
//! `sass_cache_mb: u64 = 512, Range(0, 1 << 20), HOST, "MiB of ...";`. A new value type implements
//! [`Value`]; a new kind of check implements [`Check`].
//!
//! Syntax of `GASAN_OPTIONS`: `name=value` items separated by `:` or whitespace; a value that holds
//! a separator is quoted: `log_path="/x/a b:c"` (inside double quotes `\"` and `\\` are escapes) or
//! `log_path='/x/a b:c'` (literal up to the next `'`). An empty value (`log_path=`) unsets an
//! optional value. The last value of a repeated option wins. A bad name or value is refused with an
//! error that names it ([`OptionsError`]), worded the same whether it came from a flag or from
//! `GASAN_OPTIONS`; gasan-run and the preloaded runtime exit with status 2 on it
//! ([`EXIT_BAD_OPTIONS`]), never 1 (the status of a reported error).

use gasan_instrument::shadow::Scale;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// Exit status of gasan-run and of the runtime when options are refused (1 is "error found").
pub const EXIT_BAD_OPTIONS: i32 = 2;

/// Marks a row whose option changes the checked PTX (it enters the cache key).
pub const CODE: bool = true;
/// Marks a row whose option does not change the checked PTX.
pub const HOST: bool = false;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
}

/// One row of the table, as gasan-run and the docs see it.
pub struct OptionSpec {
    /// `GASAN_OPTIONS` name; the flag is `--` and this with `-` for `_`.
    pub name: &'static str,
    /// Shape of a value, for usage lines (`0|1`, `N`, `PATH`, ...).
    pub shape: &'static str,
    pub help: &'static str,
    /// The option changes the checked PTX (it is part of the cache key).
    pub affects_code: bool,
    /// Allowed values beyond the shape (`1..=255`), if the row restricts them.
    pub allowed: fn() -> Option<String>,
    /// The default as `GASAN_OPTIONS` would write it (empty: unset).
    pub default: fn() -> String,
}

impl OptionSpec {
    /// The gasan-run flag, without the leading `--`.
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    /// One help line: the help text, the allowed values and the default.
    pub fn help_line(&self) -> String {
        let mut s = self.help.to_string();
        if let Some(a) = (self.allowed)() {
            s += &format!(" [allowed: {a}]");
        }
        let d = (self.default)();
        if !d.is_empty() {
            s += &format!(" [default: {d}]");
        }
        s
    }
}

/// The syntax of one type of value.
pub trait Value: Sized {
    /// Shape for usage lines.
    const SHAPE: &'static str;
    fn parse(s: &str) -> Result<Self, String>;
    /// The value as `parse` reads it back.
    fn show(&self) -> String;
    /// The values the type itself allows, for a parse error when the row's check names none.
    fn natural_range() -> Option<String> {
        None
    }
}

impl Value for bool {
    const SHAPE: &'static str = "0|1";
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err("expected 0 or 1".into()),
        }
    }
    fn show(&self) -> String {
        (*self as u8).to_string()
    }
}

macro_rules! number_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            const SHAPE: &'static str = "N";
            fn parse(s: &str) -> Result<Self, String> {
                s.parse().map_err(|_| "expected a whole number".to_string())
            }
            fn show(&self) -> String {
                self.to_string()
            }
            fn natural_range() -> Option<String> {
                Some(format!("{}..={}", <$t>::MIN, <$t>::MAX))
            }
        }
    )*};
}
number_value!(u32, u64, i32);

impl Value for PathBuf {
    const SHAPE: &'static str = "PATH";
    fn parse(s: &str) -> Result<Self, String> {
        Ok(PathBuf::from(s))
    }
    fn show(&self) -> String {
        // Values come from UTF-8 strings, so this is lossless for every parsed path.
        self.to_string_lossy().into_owned()
    }
}

/// Optional values: empty means unset.
impl<T: Value> Value for Option<T> {
    const SHAPE: &'static str = T::SHAPE;
    fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            Ok(None)
        } else {
            T::parse(s).map(Some)
        }
    }
    fn show(&self) -> String {
        self.as_ref().map(T::show).unwrap_or_default()
    }
    fn natural_range() -> Option<String> {
        T::natural_range()
    }
}

impl Value for Scale {
    const SHAPE: &'static str = "7|8";
    fn parse(s: &str) -> Result<Self, String> {
        s.parse().ok().and_then(Scale::from_shift).ok_or_else(|| "must be 7 or 8".into())
    }
    fn show(&self) -> String {
        self.shift().to_string()
    }
}

impl Value for ReportFormat {
    const SHAPE: &'static str = "text|json";
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(ReportFormat::Text),
            "json" => Ok(ReportFormat::Json),
            _ => Err("must be text or json".into()),
        }
    }
    fn show(&self) -> String {
        match self {
            ReportFormat::Text => "text",
            ReportFormat::Json => "json",
        }
        .into()
    }
}

/// The check of a row's values.
pub trait Check<T> {
    /// Checks a parsed value (no side effects; run on every `set`).
    fn check(&self, _v: &T) -> Result<(), String> {
        Ok(())
    }
    /// Checks the value against this machine (files, directories); run by [`Options::validate`]
    /// before the program starts.
    fn check_env(&self, _v: &T) -> Result<(), String> {
        Ok(())
    }
    /// Allowed values, for the help line.
    fn allowed(&self) -> Option<String> {
        None
    }
    /// Allowed values, for the error about a value that does not parse (the help line's, unless
    /// the row says more there than its help text does).
    fn values(&self) -> Option<String> {
        self.allowed()
    }
}

/// Any value of the type.
pub struct Any;
impl<T> Check<T> for Any {}

/// An inclusive range.
pub struct Range<N>(pub N, pub N);
impl<N: PartialOrd + Display + Copy> Check<N> for Range<N> {
    fn check(&self, v: &N) -> Result<(), String> {
        if *v < self.0 || *v > self.1 {
            return Err(format!("must be from {} to {}", self.0, self.1));
        }
        Ok(())
    }
    fn allowed(&self) -> Option<String> {
        Some(format!("{}..={}", self.0, self.1))
    }
}

/// A power of two in an inclusive range.
pub struct PowerOfTwo(pub u64, pub u64);
impl Check<u64> for PowerOfTwo {
    fn check(&self, v: &u64) -> Result<(), String> {
        if !v.is_power_of_two() || *v < self.0 || *v > self.1 {
            return Err(format!("must be a power of two from {} to {}", self.0, self.1));
        }
        Ok(())
    }
    fn allowed(&self) -> Option<String> {
        Some(format!("power of two, {}..={}", self.0, self.1))
    }
}

/// A tag-window count: 0 (off) or a power of two up to 64.
pub struct TagCount;
impl Check<u64> for TagCount {
    fn check(&self, v: &u64) -> Result<(), String> {
        if *v != 0 && (!v.is_power_of_two() || *v > 64) {
            return Err("must be 0 (off) or a power of two up to 64".into());
        }
        Ok(())
    }
    fn allowed(&self) -> Option<String> {
        Some("0, 1, 2, 4, 8, 16, 32 or 64".into())
    }
}

/// An optional number that, when set, is at least 1.
pub struct NonZero;
impl Check<Option<u64>> for NonZero {
    fn check(&self, v: &Option<u64>) -> Result<(), String> {
        if *v == Some(0) {
            return Err("must be at least 1 (leave it unset for the default)".into());
        }
        Ok(())
    }
    fn values(&self) -> Option<String> {
        Some(format!("1..={}, or empty for the default", u64::MAX))
    }
}

/// The report log: `<path>.<pid>` must be creatable, so the directory of `<path>.<pid>` must exist
/// and be writable (checked with `access(W_OK|X_OK)`; no file is created before a report).
pub struct LogPath;
impl Check<Option<PathBuf>> for LogPath {
    fn check_env(&self, v: &Option<PathBuf>) -> Result<(), String> {
        let Some(p) = v else { return Ok(()) };
        let mut file = p.clone().into_os_string();
        file.push(".<pid>");
        let dir = match Path::new(&file).parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(format!("cannot create {}: {} is not a directory", Path::new(&file).display(), dir.display()));
        }
        writable_dir(&dir).map_err(|e| format!("cannot create {}: {}: {e}", Path::new(&file).display(), dir.display()))
    }
}

fn writable_dir(dir: &Path) -> Result<(), std::io::Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A suppressions file: a readable regular file of at most [`SUPPRESSIONS_MAX_BYTES`], in the
/// format [`crate::suppressions::parse_suppressions`] accepts.
pub struct SuppressionsFile;
impl Check<Option<PathBuf>> for SuppressionsFile {
    fn check_env(&self, v: &Option<PathBuf>) -> Result<(), String> {
        let Some(p) = v else { return Ok(()) };
        check_suppressions(p).map(|_| ())
    }
}

/// Suppression rules (`(kind, pattern)` pairs) by file, as each file last passed its check.
type CheckedSuppressions = std::collections::HashMap<PathBuf, Vec<(String, String)>>;
static CHECKED_SUPPRESSIONS: std::sync::Mutex<Option<CheckedSuppressions>> = std::sync::Mutex::new(None);

/// Reads and parses suppressions file `p` (the check before the program starts), keeping the
/// rules it passed with for [`suppression_rules`].
fn check_suppressions(p: &Path) -> Result<Vec<(String, String)>, String> {
    let text = read_small_file(p, SUPPRESSIONS_MAX_BYTES)?;
    let rules = crate::suppressions::parse_suppressions(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    CHECKED_SUPPRESSIONS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Default::default).insert(p.to_path_buf(), rules.clone());
    Ok(rules)
}

/// The rules of suppressions file `p` as its check read them (the options were checked before
/// the program started, so the file is read once per process), or checked now when it never was.
pub fn suppression_rules(p: &Path) -> Result<Vec<(String, String)>, String> {
    let checked = CHECKED_SUPPRESSIONS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(p).cloned());
    checked.map_or_else(|| check_suppressions(p), Ok)
}

/// The largest suppressions file read (ASan's are a few lines; a larger one is a wrong path).
pub const SUPPRESSIONS_MAX_BYTES: u64 = 1 << 20;

/// The text of `p`, a regular file of at most `max` bytes. Anything else is refused without
/// waiting or reading on: a FIFO would block the open (and with it the program, before `main`)
/// until a writer came, and `/dev/zero` never ends. The file is opened non-blocking and judged by
/// its own descriptor, so what is read is what was checked.
pub fn read_small_file(p: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| format!("cannot read {}: {}", p.display(), os_error_text(&e));
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(p).map_err(cannot)?;
    let meta = f.metadata().map_err(cannot)?;
    if !meta.is_file() {
        let what = match meta.file_type() {
            t if t.is_dir() => "a directory",
            t if std::os::unix::fs::FileTypeExt::is_fifo(&t) => "a FIFO",
            t if std::os::unix::fs::FileTypeExt::is_char_device(&t) => "a character device",
            t if std::os::unix::fs::FileTypeExt::is_block_device(&t) => "a block device",
            t if std::os::unix::fs::FileTypeExt::is_socket(&t) => "a socket",
            _ => "not a regular file",
        };
        return Err(format!("{} is {what}, not a regular file", p.display()));
    }
    if meta.len() > max {
        return Err(format!("{} is {} bytes, more than the {} allowed", p.display(), meta.len(), max));
    }
    // A file that grows after the check is read up to the cap and refused past it.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > max {
        return Err(format!("{} grew past the {max} bytes allowed while being read", p.display()));
    }
    String::from_utf8(bytes).map_err(|e| format!("{} is not UTF-8 text (byte {})", p.display(), e.utf8_error().valid_up_to()))
}

/// An optional program: when set, an executable file.
pub struct Executable;
impl Check<Option<PathBuf>> for Executable {
    fn check_env(&self, v: &Option<PathBuf>) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let Some(p) = v else { return Ok(()) };
        let m = std::fs::metadata(p).map_err(|e| format!("cannot run {}: {}", p.display(), os_error_text(&e)))?;
        if !m.is_file() || m.mode() & 0o111 == 0 {
            return Err(format!("{} is not an executable file", p.display()));
        }
        Ok(())
    }
}

/// An I/O error as the C library words it, without Rust's " (os error N)".
pub fn os_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Declares the options: one row each,
/// `name: Type = default, check, CODE|HOST, "help";`.
macro_rules! options_table {
    ($($name:ident : $ty:ty = $default:expr, $check:expr, $code:expr, $help:literal;)*) => {
        /// The options, one field per row of the table (see the module doc).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Options {
            $(#[doc = $help] pub $name: $ty,)*
        }

        impl Default for Options {
            fn default() -> Self {
                Self { $($name: $default,)* }
            }
        }

        /// Every option, in table order.
        pub static TABLE: &[OptionSpec] = &[$(OptionSpec {
            name: stringify!($name),
            shape: <$ty as Value>::SHAPE,
            help: $help,
            affects_code: $code,
            allowed: || Check::<$ty>::allowed(&$check),
            default: || {
                let d: $ty = $default;
                Value::show(&d)
            },
        },)*];

        impl Options {
            /// Sets option `k` from its text `v` (type syntax, then the row's check).
            pub fn set(&mut self, k: &str, v: &str) -> Result<(), OptionsError> {
                let bad = |why: String| OptionsError::BadValue { name: k.into(), value: v.into(), why };
                match k {
                    $(stringify!($name) => {
                        // A value that does not parse is told the row's allowed values, not
                        // the Rust type's.
                        let allowed = || Check::<$ty>::values(&$check).or_else(<$ty as Value>::natural_range);
                        let x = <$ty as Value>::parse(v).map_err(|why| bad(match allowed() {
                            Some(a) => format!("{why}; allowed: {a}"),
                            None => why,
                        }))?;
                        Check::<$ty>::check(&$check, &x).map_err(bad)?;
                        self.$name = x;
                    })*
                    _ => return Err(OptionsError::Unknown(k.into())),
                }
                Ok(())
            }

            /// Option `k`'s value as `GASAN_OPTIONS` writes it (unquoted).
            pub fn get(&self, k: &str) -> Option<String> {
                match k {
                    $(stringify!($name) => Some(Value::show(&self.$name)),)*
                    _ => None,
                }
            }

            /// Checks the set options against this machine (log directory, suppressions file),
            /// in table order; the first refusal names its option.
            pub fn validate(&self) -> Result<(), OptionsError> {
                $(Check::<$ty>::check_env(&$check, &self.$name).map_err(|why| OptionsError::BadValue {
                    name: stringify!($name).into(),
                    value: Value::show(&self.$name),
                    why,
                })?;)*
                Ok(())
            }
        }
    };
}

options_table! {
    halt_on_error: bool = true, Any, CODE, "1: stop at the first error (device: trap; host: exit); 0: report and continue (recover mode; bad loads yield 0).";
    exitcode: i32 = 1, Range(1, 255), HOST, "Exit code of the program after an error report.";
    log_path: Option<PathBuf> = None, LogPath, HOST, "Write reports to PATH.<pid> instead of stderr (the directory must exist and be writable).";
    shadow_scale: Scale = Scale::S8, Any, CODE, "Shadow granule: 7 (GASan-128, 128-byte granules) or 8 (GASan-256).";
    redzone: u64 = 2, Range(0, 64), HOST, "Redzone scale L: redzone = max(L*size/16, min_redzone).";
    min_redzone: u64 = 256, PowerOfTwo(256, 65536), HOST, "Minimum redzone B in bytes.";
    quarantine_size_mb: u64 = 256, Range(0, 1 << 20), HOST, "MiB of stream-ordered frees kept mapped until released (freed ranges are never reused, so they stay detectable).";
    unmap_thread: bool = true, Any, HOST, "1: a thread of gasan's own unmaps the memory of freed large blocks (over 256 KiB), so the program's thread only records the free; 0: the thread that frees (or whose stream-ordered free leaves the quarantine) unmaps it.";
    detect_leaks: bool = false, Any, HOST, "1: report device allocations still live at exit.";
    print_limit: u32 = 0, Any, HOST, "Recover mode: stop printing after this many reports (0: no limit).";
    malloc_context_size: u32 = 30, Range(0, 256), HOST, "Host stack frames recorded per allocation and printed per host report.";
    suppressions: Option<PathBuf> = None, SuppressionsFile, HOST, "File of reports not to print: one `kernel:NAME`, `src:FILE` or `call:NAME` per line, `#` comments.";
    report_format: ReportFormat = ReportFormat::Text, Any, HOST, "Report format: text (ASan-style) or json (one object per line).";
    instrument: bool = true, Any, HOST, "0: allocation-level checks only (no PTX instrumentation).";
    hoist_loops: bool = true, Any, CODE, "0: check every access in every loop iteration (no range tests at loop entry).";
    param_bounds: bool = true, Any, CODE, "1: straight-line kernels find, once, the block each pointer parameter points into (from the bounds its launch passed in the argument; a parameter no launch may tag, from the extent table of large blocks) and skip the shadow load of accesses inside it; 0: every check loads its shadow byte.";
    outside_checks: bool = false, Any, CODE, "1: kernels also check memory outside the pool whose bounds gasan knows: host memory registered with cuMemHostRegister (cudaHostRegister), and managed or pinned host memory the driver allocated when the pool could not; an access within 4 KiB of such a range, or in one unregistered since, is reported (heap-buffer-overflow, heap-use-after-free). Costs each out-of-pool access an out-of-line lookup, and checked kernels are larger and compile slower; 0: such memory is checked in host API calls only.";
    arg_bounds: bool = true, Any, HOST, "1: a launch of a checked kernel passes each pointer argument with its block's bounds in the pointer's unused top bits (the kernel strips them where the program reads the argument); launches captured into graphs are not tagged; 0: no launch is, and checked kernels' accesses through those arguments load their shadow bytes (as with param_bounds=0).";
    call_times: bool = false, Any, HOST, "1: at exit, print the host time of each call the program made through gasan (calls, total, the driver's part, gasan's part), of the driver calls gasan made itself (the pool's mappings, shadow writes, waits) and of its host stack captures, so that a run slower on the host can be told from slower kernels; 0: nothing is timed.";
    verbosity: u32 = 0, Any, HOST, "1: summary at exit (modules, untracked memory, or that the program made no CUDA call); 2: every intercepted call.";
    tags: u64 = 4, TagCount, HOST, "Pointer tags: the pool is seen through this many alias windows and each allocation's pointer names one, so a pointer that walks into another live allocation is reported (tag-mismatch). A power of two up to 64; 0 (or 1): off.";
    pool_size: Option<u64> = None, NonZero, HOST, "Device pool size in bytes [default: as large as reservations allow].";
    cache_dir: Option<PathBuf> = None, Any, HOST, "Directory of the checked-module cache: checked PTX, site tables, cubins [default: $XDG_CACHE_HOME/gasan or ~/.cache/gasan].";
    cache_size_mb: u64 = 1024, Range(1, 1 << 22), HOST, "MiB the cache may hold; the least recently used entries go first.";
    sass: bool = true, Any, HOST, "1: compile checked PTX to a cubin with ptxas once and cache it, so later runs load it as the driver loads native code (no JIT); 0: hand checked PTX to the driver's JIT.";
    prefetch: bool = true, Any, HOST, "1: a background thread looks up in the cache the checked cubins of the modules in the program's files, so a kernel's first launch does not wait for that: the program's own from process start, for the GPU the last run set up (remembered in the cache; dropped if this one differs), every file's once the GPU is set up (cache hits only: nothing is instrumented or compiled ahead); 0: each module is looked up when cudart loads it.";
    preload: bool = true, Any, HOST, "1: under lazy module loading (CUDA's default) the prefetch thread also loads each module it found into the context the GPU was set up in, and hands it to cudart when cudart loads that module, so a kernel's first launch does not wait for the driver's load of the checked cubin (larger than the native one); needs prefetch=1; 0: modules load inside their first launch, as natively.";
    ptxas: Option<PathBuf> = None, Executable, HOST, "The ptxas for sass=1 [default: $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then PATH; none found: the driver's JIT].";
    patch_export_table: bool = false, Any, HOST, "1: wrap the module loaders of cudart's export table (older CUDA runtimes only; CUDA 13's static cudart refuses it with error 103).";
    managed_memory: bool = true, Any, HOST, "1: managed allocations (cudaMallocManaged, cuMemAllocManaged) come from the pool, so kernels' accesses to them are checked like device memory: pinned host memory that the CPU and the GPU share at one address, moved to device memory by a prefetch to the GPU and back by a prefetch to the CPU or the CPU's next access; 0: the driver's managed memory, checked by host API calls only.";
    host_memory: bool = true, Any, HOST, "1: pinned host allocations (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc) come from the pool, so kernels' accesses to them (mapped pinned memory) are checked like device memory; each takes at least one 2 MiB chunk of pinned memory; 0: the driver's, checked by host API calls only.";
    framework_pools: bool = true, Any, HOST, "1: Python frameworks hand out individually checked allocations: where the user has not set them, gasan-run sets PyTorch's cudaMallocAsync backend (or no caching), CuPy's PTX kernels, Numba's immediate frees and JAX's cuda_async allocator without preallocation (README lists the variables), and puts a start-up hook on PYTHONPATH that turns CuPy's memory pools off and points JAX's XLA at gasan's ptxas front end; 0: leave frameworks alone (JAX's kernels then stay unchecked).";
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("unknown option '{0}' (known: {known})", known = known_names())]
    Unknown(String),
    #[error("bad value '{value}' for option '{name}': {why}")]
    BadValue { name: String, value: String, why: String },
    #[error("option '{0}' needs a value (name=value)")]
    NoValue(String),
    /// Invalid bytes shown as `\xNN`; the option they are in, when that can be told.
    #[error("not valid UTF-8{}: '{text}'", name.as_ref().map(|n| format!(" (in option '{n}')")).unwrap_or_default())]
    NotUtf8 { name: Option<String>, text: String },
}

impl OptionsError {
    /// The option the error is about, if it names one.
    pub fn option(&self) -> Option<&str> {
        match self {
            OptionsError::Unknown(n) | OptionsError::NoValue(n) | OptionsError::BadValue { name: n, .. } => Some(n),
            OptionsError::NotUtf8 { name, .. } => name.as_deref(),
        }
    }
}

fn known_names() -> String {
    TABLE.iter().map(|o| o.name).collect::<Vec<_>>().join(", ")
}

/// Every option's name, in table order.
pub fn known() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|o| o.name)
}

fn is_sep(c: char) -> bool {
    c == ':' || c.is_whitespace()
}

/// Splits a `GASAN_OPTIONS` string into `(name, value)` pairs, unquoting values (module doc).
pub fn pairs(s: &str) -> Result<Vec<(String, String)>, OptionsError> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.next_if(|&c| is_sep(c)).is_some() {}
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut name = String::new();
        while let Some(c) = it.next_if(|&c| c != '=' && !is_sep(c)) {
            name.push(c);
        }
        if it.next_if_eq(&'=').is_none() {
            return Err(OptionsError::NoValue(name));
        }
        let mut value = String::new();
        let bad = |value: String, why: &str| OptionsError::BadValue { name: name.clone(), value, why: why.into() };
        match it.peek() {
            Some(&q @ ('"' | '\'')) => {
                it.next();
                let mut closed = false;
                while let Some(c) = it.next() {
                    if c == q {
                        closed = true;
                        break;
                    }
                    if q == '"' && c == '\\' && matches!(it.peek(), Some('"' | '\\')) {
                        value.push(it.next().expect("peeked"));
                    } else {
                        value.push(c);
                    }
                }
                if !closed {
                    return Err(bad(format!("{q}{value}"), "no closing quote"));
                }
                if it.peek().is_some_and(|&c| !is_sep(c)) {
                    let rest: String = it.clone().take_while(|&c| !is_sep(c)).collect();
                    return Err(bad(format!("{q}{value}{q}{rest}"), "text after the closing quote"));
                }
            }
            _ => {
                while let Some(c) = it.next_if(|&c| !is_sep(c)) {
                    value.push(c);
                }
            }
        }
        out.push((name, value));
    }
}

/// The error for a `GASAN_OPTIONS` that is not UTF-8: the text with `\xNN` for the bad bytes, and
/// the option whose item holds the first of them.
pub fn not_utf8(bytes: &[u8]) -> OptionsError {
    let mut text = String::new();
    let mut name = None;
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        if !chunk.invalid().is_empty() && name.is_none() {
            // The item holding the bad bytes starts after the last separator before them.
            let item = text.rsplit(is_sep).next().unwrap_or("");
            name = item.split_once('=').map(|(n, _)| n.to_string());
        }
        for b in chunk.invalid() {
            text.push_str(&format!("\\x{b:02x}"));
        }
    }
    OptionsError::NotUtf8 { name, text }
}

/// `v` as a `GASAN_OPTIONS` value: quoted when it holds a separator, a quote or a backslash, or
/// when it is empty.
pub fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains(|c: char| is_sep(c) || c == '"' || c == '\'' || c == '\\') {
        return v.to_string();
    }
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

impl Options {
    /// Parses a `GASAN_OPTIONS` string over the defaults.
    pub fn parse(s: &str) -> Result<Options, OptionsError> {
        let mut o = Options::default();
        o.apply(s)?;
        Ok(o)
    }

    /// Applies a `GASAN_OPTIONS` string over the current values.
    pub fn apply(&mut self, s: &str) -> Result<(), OptionsError> {
        for (k, v) in pairs(s)? {
            self.set(&k, &v)?;
        }
        Ok(())
    }

    /// The raw `GASAN_OPTIONS` (empty when unset); refused when it is not UTF-8.
    pub fn env_string() -> Result<String, OptionsError> {
        match std::env::var_os("GASAN_OPTIONS") {
            None => Ok(String::new()),
            Some(v) => v.into_string().map_err(|v| not_utf8(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()))),
        }
    }

    /// Options from `GASAN_OPTIONS`, parsed and checked against this machine.
    pub fn from_env() -> Result<Options, OptionsError> {
        let o = Options::parse(&Options::env_string()?)?;
        o.validate()?;
        Ok(o)
    }

    /// The options that differ from the defaults, as a `GASAN_OPTIONS` string that
    /// [`Options::parse`] reads back to `self` (values quoted as needed).
    pub fn to_env_string(&self) -> String {
        let d = Options::default();
        TABLE
            .iter()
            .filter_map(|o| {
                let v = self.get(o.name).expect("table name");
                (Some(&v) != d.get(o.name).as_ref()).then(|| format!("{}={}", o.name, quote(&v)))
            })
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The options that change the checked PTX (rows marked [`CODE`]), for the cache key.
    pub fn code_key(&self) -> String {
        TABLE.iter().filter(|o| o.affects_code).map(|o| format!("{}={}", o.name, quote(&self.get(o.name).expect("table name")))).collect::<Vec<_>>().join(":")
    }
}

/// The options as a Markdown table (README's list of options is this, checked by a test).
pub fn markdown_table() -> String {
    let mut s = String::from("| flag / `GASAN_OPTIONS` name | value | default | meaning |\n|---|---|---|---|\n");
    for o in TABLE {
        let allowed = (o.allowed)().map(|a| format!(" Allowed: {a}.")).unwrap_or_default();
        let d = (o.default)();
        let d = if d.is_empty() { "unset".to_string() } else { format!("`{d}`") };
        s += &format!("| `--{}` / `{}` | `{}` | {d} | {}{allowed} |\n", o.flag(), o.name, o.shape.replace('|', "\\|"), o.help.replace('|', "\\|").replace('<', "&lt;"));
    }
    s
}

/// This process's options: `GASAN_OPTIONS` parsed and checked once, at the first call (the
/// runtime's load, [`crate::init::at_load`]); every subsystem reads these. A refusal ends the
/// process ([`exit_refused`]).
pub fn process() -> &'static Options {
    static PARSED: std::sync::OnceLock<Options> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| Options::from_env().unwrap_or_else(|e| exit_refused(&e)))
}

/// Prints why `GASAN_OPTIONS` was refused and ends the process with [`EXIT_BAD_OPTIONS`] (the
/// preloaded runtime's answer; gasan-run words the same error itself).
pub fn exit_refused(e: &OptionsError) -> ! {
    eprintln!("==gasan== error: GASAN_OPTIONS: {e}");
    // SAFETY: ending the process on a configuration error, as ASan does; nothing of the program's
    // has run through gasan yet, and its buffered output is flushed first.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(EXIT_BAD_OPTIONS)
    }
}

/// Set by gasan-run to its own pid, which the program keeps across gasan-run's exec.
pub const RUN_PID_ENV: &str = "GASAN_RUN_PID";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        let o = Options::parse("halt_on_error=0:shadow_scale=7 exitcode=3:report_format=json:log_path=/tmp/x").unwrap();
        assert!(!o.halt_on_error);
        assert_eq!(o.shadow_scale, Scale::S7);
        assert_eq!(o.exitcode, 3);
        assert_eq!(o.report_format, ReportFormat::Json);
        assert_eq!(Options::parse(&o.to_env_string()).unwrap(), o);
    }

    #[test]
    fn quoted_values_keep_separators_and_quotes() {
        let p = pairs(r#"log_path="/x/a b:c" cache_dir='/y:z w':exitcode=3 suppressions="q\"\\r\n""#).unwrap();
        assert_eq!(p[0], ("log_path".into(), "/x/a b:c".into()));
        assert_eq!(p[1], ("cache_dir".into(), "/y:z w".into()));
        assert_eq!(p[2], ("exitcode".into(), "3".into()));
        assert_eq!(p[3], ("suppressions".into(), "q\"\\r\\n".into()));
        assert_eq!(quote("/x/a b:c"), r#""/x/a b:c""#);
        assert_eq!(quote("plain"), "plain");
        assert!(matches!(pairs("log_path=\"/x"), Err(OptionsError::BadValue { why, .. }) if why == "no closing quote"));
        assert!(matches!(pairs("log_path=\"/x\"y"), Err(OptionsError::BadValue { .. })));
    }

    #[test]
    fn bad_options_name_themselves() {
        let e = Options::parse("halt_on_eror=1").unwrap_err().to_string();
        assert!(e.contains("halt_on_eror"), "{e}");
        let e = Options::parse("shadow_scale=9").unwrap_err().to_string();
        assert!(e.contains("shadow_scale") && e.contains('9'), "{e}");
        assert!(Options::parse("exitcode").unwrap_err().to_string().contains("exitcode"));
        assert!(Options::parse("min_redzone=100").is_err());
        assert!(Options::parse("tags=3").is_err() && Options::parse("tags=128").is_err());
        assert_eq!(Options::parse("tags=0").unwrap().tags, 0);
    }

    #[test]
    fn code_key_holds_exactly_the_code_rows() {
        let k = Options::default().code_key();
        assert_eq!(k, "halt_on_error=1:shadow_scale=8:hoist_loops=1:param_bounds=1:outside_checks=0");
        let o = Options { verbosity: 2, exitcode: 9, ..Options::default() };
        assert_eq!(o.code_key(), k, "host-only options leave the key alone");
        let o = Options { hoist_loops: false, ..Options::default() };
        assert_ne!(o.code_key(), k);
    }
}
