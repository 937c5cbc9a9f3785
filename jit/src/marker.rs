//! The marker a checked module carries into its cubin, so that the runtime recognises a cubin the
//! ptxas front end made when a framework loads it (`cuModuleLoadData`, `cuModuleLoadFatBinary`).
//!
//! The marker is one initialised module-scope variable, [`MARKER_SYMBOL`], appended to the checked
//! PTX:
//!
//! ```text
//! .visible .global .align 8 .b8 __gasan_jit[56] = { 'G','A','S','A','N','J','I','T', format, REVISION, options, key };
//! ```
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | [`MAGIC`] `GASANJIT` |
//! | 8..12 | [`FORMAT`] (u32 LE): this layout |
//! | 12..16 | the rewriter's `REVISION` (u32 LE) that made the checks |
//! | 16..24 | the instrumenter's options ([`encode_options`], u64 LE) |
//! | 24..56 | the module's key ([`module_key`]): SHA-256 of gasan's version, `REVISION`, the code options and the original PTX |
//!
//! A second variable, [`TABLES_SYMBOL`], carries what reports and launches need of the module:
//! its site table (JSON, [`SiteTable::to_json`]) and its kernels' parameter tags
//! ([`ParamTagTable::to_text`]), framed by [`Tables::to_bytes`] and LZ4-compressed (site tables
//! compress about 12x: Triton's f16 matmul, 386 sites, 27,911 bytes of JSON).
//!
//! Why in the cubin and not only in gasan's cache: frameworks keep cubins longer and further than
//! gasan keeps its cache (Triton's cache outlives `gasan-run --cache-clear` and eviction, is shared
//! between users and shipped in images; AOTInductor saves cubins next to a model), and a cubin
//! whose site table is gone could only report "site 12 of some module". The cost: a few KiB of
//! device memory per module. Why not the control block alone: every checked module has
//! `__gasan_ctl`, but the runtime needs more than "checked": the sites, and the revision and
//! options the checks were made with (a cubin checked with another shadow scale must not run
//! against this process's shadow). `.visible` keeps ptxas from dropping the unreferenced
//! variables; their bytes land in the cubin's `.nv.global.init` section, where [`find_in_cubin`]
//! and [`tables_in_cubin`] read them from the ELF symbol table without a driver.
//!
//! A cubin linked from several checked PTX inputs (the runtime's nvJitLink wrapper links every
//! PTX input of a link checked) carries one marker and, for its first input, [`TABLES_SYMBOL`];
//! each further input `n` keeps its own control block and slow path under names with
//! [`link_suffix`]`(n)` (`__gasan_ctl_l1`: the control blocks are `.weak`, so unrenamed ones would
//! merge and one input's reports would name another's sites) and carries its tables as
//! `__gasan_jit_tables_l<n>` ([`linked_tables_in_cubin`]). The runtime registers each input's
//! sites and writes each control block.
//!
//! The key is the one runtime/src/modules.rs (`cached_instrumentation`) gives the same PTX
//! checked with the same options, so a runtime that also caches the module's checked PTX names it
//! the same way.

use gasan_instrument::abi::ParamTagTable;
use gasan_instrument::ptx::{InstrumentOptions, SiteTable, REVISION};
use gasan_instrument::shadow::Scale;
use object::{Object, ObjectSection, ObjectSymbol};
use sha2::{Digest, Sha256};

/// Name of the marker variable.
pub const MARKER_SYMBOL: &str = "__gasan_jit";
/// Name of the variable holding the module's compressed site table and parameter tags.
pub const TABLES_SYMBOL: &str = "__gasan_jit_tables";
/// First bytes of the marker.
pub const MAGIC: [u8; 8] = *b"GASANJIT";
/// Layout version of the marker and the tables (1: the marker alone; 2: with [`TABLES_SYMBOL`]).
/// The front end's `--version` answer names it, so Triton compiles again when it changes.
pub const FORMAT: u32 = 2;
/// Bytes of the marker.
pub const MARKER_SIZE: usize = 56;

/// What a checked cubin says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The rewriter's `REVISION` when the checks were made.
    pub revision: u32,
    /// The instrumenter's options ([`encode_options`]).
    pub options: u64,
    /// The module's key ([`module_key`]): names its cache entries.
    pub key: [u8; 32],
}

/// Why bytes are not a marker this build understands.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MarkerError {
    #[error("not an ELF image: {0}")]
    NotElf(String),
    #[error("marker symbol {MARKER_SYMBOL} is {0} bytes, not {MARKER_SIZE}")]
    Size(u64),
    #[error("marker symbol {MARKER_SYMBOL} has no initialised bytes in the image")]
    NoData,
    #[error("marker has the wrong magic")]
    Magic,
    #[error("marker format {0}, this gasan reads format {FORMAT}")]
    Format(u32),
    #[error("{TABLES_SYMBOL}: {0}")]
    Tables(String),
}

impl Marker {
    /// The marker of a module with `key`, checked now with `opts`.
    pub fn new(key: [u8; 32], opts: &InstrumentOptions) -> Marker {
        Marker { revision: REVISION, options: encode_options(opts), key }
    }

    pub fn to_bytes(&self) -> [u8; MARKER_SIZE] {
        let mut b = [0u8; MARKER_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        b[12..16].copy_from_slice(&self.revision.to_le_bytes());
        b[16..24].copy_from_slice(&self.options.to_le_bytes());
        b[24..56].copy_from_slice(&self.key);
        b
    }

    pub fn from_bytes(b: &[u8]) -> Result<Marker, MarkerError> {
        if b.len() != MARKER_SIZE {
            return Err(MarkerError::Size(b.len() as u64));
        }
        if b[0..8] != MAGIC {
            return Err(MarkerError::Magic);
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u32_at(8) != FORMAT {
            return Err(MarkerError::Format(u32_at(8)));
        }
        Ok(Marker { revision: u32_at(12), options: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")), key: b[24..56].try_into().expect("32 bytes") })
    }

    /// The PTX declaration that carries the marker (one line, appended to the checked module).
    pub fn ptx_declaration(&self) -> String {
        let bytes: Vec<String> = self.to_bytes().iter().map(u8::to_string).collect();
        format!(".visible .global .align 8 .b8 {MARKER_SYMBOL}[{MARKER_SIZE}] = {{{}}}; {}\n", bytes.join(","), gasan_instrument::ptx::MARKER)
    }

    /// The key as cache entries name it (64 lowercase hex digits).
    pub fn key_hex(&self) -> String {
        self.key.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The options the checks were made with, when this build knows every bit of them.
    pub fn instrument_options(&self) -> Option<InstrumentOptions> {
        decode_options(self.options)
    }
}

/// The initialised bytes of symbol `name` in an ELF image (`Ok(None)`: no such symbol).
fn symbol_bytes<'a>(file: &object::File<'a>, name: &str) -> Result<Option<&'a [u8]>, MarkerError> {
    let Some(sym) = file.symbols().find(|s| s.name() == Ok(name)) else {
        return Ok(None);
    };
    let section = sym.section_index().and_then(|i| file.section_by_index(i).ok()).ok_or(MarkerError::NoData)?;
    let data = section.data().map_err(|_| MarkerError::NoData)?;
    // A cubin's symbol values are offsets into their sections.
    let start = usize::try_from(sym.address().saturating_sub(section.address())).map_err(|_| MarkerError::NoData)?;
    let len = usize::try_from(sym.size()).map_err(|_| MarkerError::NoData)?;
    data.get(start..start.checked_add(len).ok_or(MarkerError::NoData)?).ok_or(MarkerError::NoData).map(Some)
}

/// The marker of a cubin (an ELF image): `Ok(None)` when it has no marker symbol (not made by the
/// front end: native, or checked by the runtime itself).
pub fn find_in_cubin(elf: &[u8]) -> Result<Option<Marker>, MarkerError> {
    let file = object::File::parse(elf).map_err(|e| MarkerError::NotElf(e.to_string()))?;
    match symbol_bytes(&file, MARKER_SYMBOL)? {
        None => Ok(None),
        Some(b) => Marker::from_bytes(b).map(Some),
    }
}

/// What a checked module's reports and launches need: its site table and parameter tags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub sites: SiteTable,
    pub param_tags: ParamTagTable,
}

impl Tables {
    /// `u32 LE` length of the tags' text, the tags' text, the site table's JSON; LZ4-compressed
    /// with the uncompressed size in front (`lz4_flex::compress_prepend_size`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let tags = self.param_tags.to_text();
        let mut raw = Vec::new();
        raw.extend_from_slice(&u32::try_from(tags.len()).expect("parameter tags under 4 GiB").to_le_bytes());
        raw.extend_from_slice(tags.as_bytes());
        raw.extend_from_slice(self.sites.to_json().as_bytes());
        lz4_flex::compress_prepend_size(&raw)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Tables, MarkerError> {
        let bad = |m: String| MarkerError::Tables(m);
        let raw = lz4_flex::decompress_size_prepended(b).map_err(|e| bad(e.to_string()))?;
        let n = u32::from_le_bytes(raw.get(..4).ok_or_else(|| bad("shorter than its header".into()))?.try_into().expect("4 bytes")) as usize;
        let tags = raw.get(4..4 + n).and_then(|t| std::str::from_utf8(t).ok()).ok_or_else(|| bad("parameter tags cut short or not UTF-8".into()))?;
        let param_tags = ParamTagTable::from_text(tags).ok_or_else(|| bad("malformed parameter tags".into()))?;
        let json = std::str::from_utf8(&raw[4 + n..]).map_err(|e| bad(e.to_string()))?;
        let sites = SiteTable::from_json(json).map_err(|e| bad(format!("site table: {e}")))?;
        Ok(Tables { sites, param_tags })
    }

    /// The PTX declaration that carries the tables (one line, appended to the checked module).
    pub fn ptx_declaration(&self) -> String {
        self.ptx_declaration_as(TABLES_SYMBOL)
    }

    /// The declaration under another variable name (a linked input's, [`linked_tables_symbol`]).
    pub fn ptx_declaration_as(&self, symbol: &str) -> String {
        let b = self.to_bytes();
        let bytes: Vec<String> = b.iter().map(u8::to_string).collect();
        format!(".visible .global .align 8 .b8 {symbol}[{}] = {{{}}}; {}\n", b.len(), bytes.join(","), gasan_instrument::ptx::MARKER)
    }
}

/// The suffix of input `n`'s own symbols in a link of several checked inputs (input 0 keeps the
/// plain names).
pub fn link_suffix(n: usize) -> String {
    format!("_l{n}")
}

/// The variable that carries the tables of input `n` (at least 1) of a link.
pub fn linked_tables_symbol(n: usize) -> String {
    format!("{TABLES_SYMBOL}{}", link_suffix(n))
}

/// A further checked input of a linked cubin: its tables and the control block its checks read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedInput {
    pub control_block: String,
    pub tables: Tables,
}

/// The further checked inputs a cubin carries ([`linked_tables_symbol`]), by input number; the
/// numbers must run 1, 2, ... without a gap (a gap is a cubin gasan did not make).
pub fn linked_tables_in_cubin(elf: &[u8]) -> Result<Vec<LinkedInput>, MarkerError> {
    let file = object::File::parse(elf).map_err(|e| MarkerError::NotElf(e.to_string()))?;
    let prefix = format!("{TABLES_SYMBOL}_l");
    let mut numbers: Vec<usize> = file.symbols().filter_map(|s| s.name().ok()?.strip_prefix(prefix.as_str())?.parse().ok()).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut out = Vec::with_capacity(numbers.len());
    for (k, n) in numbers.into_iter().enumerate() {
        if n != k + 1 {
            return Err(MarkerError::Tables(format!("linked input tables numbered {n} where {} was expected", k + 1)));
        }
        let symbol = linked_tables_symbol(n);
        let b = symbol_bytes(&file, &symbol)?.ok_or(MarkerError::NoData)?;
        let tables = Tables::from_bytes(b).map_err(|e| MarkerError::Tables(format!("{symbol}: {e}")))?;
        out.push(LinkedInput { control_block: format!("{}{}", gasan_instrument::abi::CONTROL_BLOCK_SYMBOL, link_suffix(n)), tables });
    }
    Ok(out)
}

/// The site table and parameter tags a cubin carries (`Ok(None)`: it has none).
pub fn tables_in_cubin(elf: &[u8]) -> Result<Option<Tables>, MarkerError> {
    let file = object::File::parse(elf).map_err(|e| MarkerError::NotElf(e.to_string()))?;
    match symbol_bytes(&file, TABLES_SYMBOL)? {
        None => Ok(None),
        Some(b) => Tables::from_bytes(b).map(Some),
    }
}

/// The instrumenter's options as one word: bit 0 optimize, 1 recover, 2 aligned pool, 3 hoist
/// loops, 4 parameter bounds, 5 outside checks; bits 8..16 the shadow scale's shift.
pub fn encode_options(o: &InstrumentOptions) -> u64 {
    // Destructured whole: a new field does not compile until it has a bit here.
    let InstrumentOptions { scale, optimize, recover, aligned_pool, hoist_loops, param_bounds, outside_checks } = *o;
    let flags = [optimize, recover, aligned_pool, hoist_loops, param_bounds, outside_checks];
    flags.iter().enumerate().fold(0u64, |w, (i, &f)| w | (u64::from(f) << i)) | (u64::from(scale.shift()) << 8)
}

/// [`encode_options`] read back; `None` for a word with bits this build does not know.
pub fn decode_options(w: u64) -> Option<InstrumentOptions> {
    if w & !0xff3f != 0 {
        return None;
    }
    let bit = |i: u32| w & (1 << i) != 0;
    Some(InstrumentOptions {
        scale: Scale::from_shift(((w >> 8) & 0xff) as u32)?,
        optimize: bit(0),
        recover: bit(1),
        aligned_pool: bit(2),
        hoist_loops: bit(3),
        param_bounds: bit(4),
        outside_checks: bit(5),
    })
}

/// The key of `ptx` checked with `opts` under the code options `code_key` (the runtime's
/// `Options::code_key()`): SHA-256 over gasan's version, `REVISION`, `code_key`, the options and
/// the text, in the order runtime/src/modules.rs hashes them.
pub fn module_key(ptx: &str, opts: &InstrumentOptions, code_key: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION"));
    h.update(REVISION.to_le_bytes());
    h.update(code_key);
    h.update(format!("{opts:?}").as_bytes());
    h.update(ptx.as_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_options() -> Vec<InstrumentOptions> {
        let mut v = Vec::new();
        for bits in 0..64u32 {
            for scale in [Scale::S7, Scale::S8] {
                let b = |i: u32| bits & (1 << i) != 0;
                v.push(InstrumentOptions { scale, optimize: b(0), recover: b(1), aligned_pool: b(2), hoist_loops: b(3), param_bounds: b(4), outside_checks: b(5) });
            }
        }
        v
    }

    #[test]
    fn every_option_set_reads_back_and_differs() {
        let opts = all_options();
        let words: std::collections::BTreeSet<u64> = opts.iter().map(encode_options).collect();
        assert_eq!(words.len(), opts.len());
        for o in &opts {
            assert_eq!(decode_options(encode_options(o)), Some(*o));
        }
        assert_eq!(decode_options(1 << 40), None);
        assert_eq!(decode_options(9 << 8), None, "shift 9 is no scale");
    }

    #[test]
    fn marker_bytes_read_back_and_bad_ones_are_named() {
        let m = Marker::new([7; 32], &InstrumentOptions::default());
        assert_eq!(Marker::from_bytes(&m.to_bytes()), Ok(m));
        let mut b = m.to_bytes();
        b[0] = b'X';
        assert_eq!(Marker::from_bytes(&b), Err(MarkerError::Magic));
        let mut b = m.to_bytes();
        b[8] = 1;
        assert_eq!(Marker::from_bytes(&b), Err(MarkerError::Format(1)));
        assert_eq!(Marker::from_bytes(&b[..10]), Err(MarkerError::Size(10)));
        let decl = m.ptx_declaration();
        assert!(decl.starts_with(".visible .global .align 8 .b8 __gasan_jit[56] = {71,65,83,65,78,74,73,84,2,0,0,0,"), "{decl}");
        assert_eq!(m.key_hex(), "07".repeat(32));
    }

    #[test]
    fn the_key_changes_with_text_options_and_code_key() {
        let o = InstrumentOptions::default();
        let k = module_key("a", &o, "x=1");
        assert_ne!(k, module_key("b", &o, "x=1"));
        assert_ne!(k, module_key("a", &InstrumentOptions { recover: true, ..o }, "x=1"));
        assert_ne!(k, module_key("a", &o, "x=2"));
        assert_eq!(k, module_key("a", &o, "x=1"));
    }

    #[test]
    fn tables_read_back_and_damage_is_named() {
        let mut sites = SiteTable::default();
        sites.files.insert(1, "kernels.py".into());
        let tags = ParamTagTable::from_text("k 3 0 2\n").unwrap();
        let t = Tables { sites, param_tags: tags };
        let b = t.to_bytes();
        assert_eq!(Tables::from_bytes(&b), Ok(t.clone()));
        assert!(matches!(Tables::from_bytes(&b[..b.len() - 1]), Err(MarkerError::Tables(_))));
        assert!(matches!(Tables::from_bytes(b"\x05\0\0\0abcde"), Err(MarkerError::Tables(_))));
        let decl = t.ptx_declaration();
        assert!(decl.starts_with(&format!(".visible .global .align 8 .b8 __gasan_jit_tables[{}] = {{", b.len())), "{decl}");
    }

    #[test]
    fn non_elf_is_refused() {
        assert!(matches!(find_in_cubin(b"not an elf"), Err(MarkerError::NotElf(_))));
        assert!(matches!(tables_in_cubin(b"not an elf"), Err(MarkerError::NotElf(_))));
    }
}
