//! Options (`GASAN_OPTIONS` and gasan-run flags), by ASan's names. A bad option names itself.

use gasan_instrument::shadow::Scale;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Stop at the first error (device: `trap`; host: exit). 0 = recover and keep going.
    pub halt_on_error: bool,
    /// Exit code after an error report.
    pub exitcode: i32,
    /// Write reports to `<log_path>.<pid>` instead of stderr.
    pub log_path: Option<String>,
    pub shadow_scale: Scale,
    /// Redzone scale L (GASan: redzone = max(L·size, B)), in 1/16ths of the allocation size.
    pub redzone: u64,
    /// Minimum redzone B in bytes.
    pub min_redzone: u64,
    /// Memory of stream-ordered frees kept mapped until released (their unmapping must wait for
    /// the stream). Freed address ranges themselves are never reused, so they stay poisoned and
    /// detectable regardless of this bound.
    pub quarantine_size_mb: u64,
    pub detect_leaks: bool,
    /// Recover mode: stop printing after this many reports (0 = no limit).
    pub print_limit: u32,
    pub malloc_context_size: u32,
    pub suppressions: Option<PathBuf>,
    pub report_format: ReportFormat,
    /// Instrument modules (0: allocation-level checks only).
    pub instrument: bool,
    /// Hoist the checks of loops over address ranges to one range test per loop entry
    /// (instrument's loop versioning; 0: every iteration checks every access).
    pub hoist_loops: bool,
    pub verbosity: u32,
    /// Pool size in bytes (default: as large as reservations allow).
    pub pool_size: Option<u64>,
    /// Where checked PTX is cached (default `$XDG_CACHE_HOME/gasan` or `~/.cache/gasan`).
    pub cache_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            halt_on_error: true,
            exitcode: 1,
            log_path: None,
            shadow_scale: Scale::S8,
            redzone: 2,
            min_redzone: 256,
            quarantine_size_mb: 256,
            detect_leaks: false,
            print_limit: 0,
            malloc_context_size: 30,
            suppressions: None,
            report_format: ReportFormat::Text,
            instrument: true,
            hoist_loops: true,
            verbosity: 0,
            pool_size: None,
            cache_dir: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("unknown option '{0}' (known: {known})", known = KNOWN.join(", "))]
    Unknown(String),
    #[error("bad value '{value}' for option '{name}': {why}")]
    BadValue { name: String, value: String, why: &'static str },
    #[error("option '{0}' needs a value (name=value)")]
    NoValue(String),
}

pub const KNOWN: &[&str] = &[
    "halt_on_error", "exitcode", "log_path", "shadow_scale", "redzone", "min_redzone", "quarantine_size_mb",
    "detect_leaks", "print_limit", "malloc_context_size", "suppressions", "report_format", "instrument",
    "hoist_loops", "verbosity", "pool_size", "cache_dir",
];

fn bool_of(name: &str, v: &str) -> Result<bool, OptionsError> {
    match v {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(OptionsError::BadValue { name: name.into(), value: v.into(), why: "expected 0 or 1" }),
    }
}

fn num_of<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, OptionsError> {
    v.parse().map_err(|_| OptionsError::BadValue { name: name.into(), value: v.into(), why: "expected a number" })
}

impl Options {
    /// Parses `name=value` pairs separated by ':' or whitespace, over the defaults.
    pub fn parse(s: &str) -> Result<Options, OptionsError> {
        let mut o = Options::default();
        o.apply(s)?;
        Ok(o)
    }

    /// Applies `name=value` pairs over the current values.
    pub fn apply(&mut self, s: &str) -> Result<(), OptionsError> {
        for item in s.split(|c: char| c == ':' || c.is_whitespace()).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| OptionsError::NoValue(item.into()))?;
            self.set(k, v)?;
        }
        Ok(())
    }

    pub fn set(&mut self, k: &str, v: &str) -> Result<(), OptionsError> {
        match k {
            "halt_on_error" => self.halt_on_error = bool_of(k, v)?,
            "exitcode" => self.exitcode = num_of(k, v)?,
            "log_path" => self.log_path = (!v.is_empty()).then(|| v.to_string()),
            "shadow_scale" => {
                self.shadow_scale = Scale::from_shift(num_of(k, v)?)
                    .ok_or(OptionsError::BadValue { name: k.into(), value: v.into(), why: "must be 7 or 8" })?
            }
            "redzone" => self.redzone = num_of(k, v)?,
            "min_redzone" => {
                let b: u64 = num_of(k, v)?;
                if b < 256 || !b.is_power_of_two() {
                    return Err(OptionsError::BadValue { name: k.into(), value: v.into(), why: "must be a power of two >= 256" });
                }
                self.min_redzone = b;
            }
            "quarantine_size_mb" => self.quarantine_size_mb = num_of(k, v)?,
            "detect_leaks" => self.detect_leaks = bool_of(k, v)?,
            "print_limit" => self.print_limit = num_of(k, v)?,
            "malloc_context_size" => self.malloc_context_size = num_of(k, v)?,
            "suppressions" => self.suppressions = Some(PathBuf::from(v)),
            "report_format" => {
                self.report_format = match v {
                    "text" => ReportFormat::Text,
                    "json" => ReportFormat::Json,
                    _ => return Err(OptionsError::BadValue { name: k.into(), value: v.into(), why: "must be text or json" }),
                }
            }
            "instrument" => self.instrument = bool_of(k, v)?,
            "hoist_loops" => self.hoist_loops = bool_of(k, v)?,
            "verbosity" => self.verbosity = num_of(k, v)?,
            "pool_size" => self.pool_size = Some(num_of(k, v)?),
            "cache_dir" => self.cache_dir = Some(PathBuf::from(v)),
            _ => return Err(OptionsError::Unknown(k.into())),
        }
        Ok(())
    }

    pub fn from_env() -> Result<Options, OptionsError> {
        Options::parse(&std::env::var("GASAN_OPTIONS").unwrap_or_default())
    }

    /// The options that differ from the defaults, as a `GASAN_OPTIONS` string.
    pub fn to_env_string(&self) -> String {
        let d = Options::default();
        let mut v = Vec::new();
        macro_rules! put {
            ($f:ident, $s:expr) => {
                if self.$f != d.$f {
                    v.push(format!("{}={}", stringify!($f), $s));
                }
            };
        }
        put!(halt_on_error, self.halt_on_error as u8);
        put!(exitcode, self.exitcode);
        put!(log_path, self.log_path.clone().unwrap_or_default());
        put!(shadow_scale, self.shadow_scale.shift());
        put!(redzone, self.redzone);
        put!(min_redzone, self.min_redzone);
        put!(quarantine_size_mb, self.quarantine_size_mb);
        put!(detect_leaks, self.detect_leaks as u8);
        put!(print_limit, self.print_limit);
        put!(malloc_context_size, self.malloc_context_size);
        put!(suppressions, self.suppressions.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        put!(report_format, if self.report_format == ReportFormat::Json { "json" } else { "text" });
        put!(instrument, self.instrument as u8);
        put!(hoist_loops, self.hoist_loops as u8);
        put!(verbosity, self.verbosity);
        put!(pool_size, self.pool_size.unwrap_or(0));
        put!(cache_dir, self.cache_dir.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        v.join(":")
    }
}

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
    fn bad_options_name_themselves() {
        let e = Options::parse("halt_on_eror=1").unwrap_err().to_string();
        assert!(e.contains("halt_on_eror"), "{e}");
        let e = Options::parse("shadow_scale=9").unwrap_err().to_string();
        assert!(e.contains("shadow_scale") && e.contains('9'), "{e}");
        assert!(Options::parse("exitcode").unwrap_err().to_string().contains("exitcode"));
        assert!(Options::parse("min_redzone=100").is_err());
    }
}
