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
//! Why a variable and not the control block alone: every checked module has `__gasan_ctl`, but
//! the runtime needs more than "checked" to use a cubin it did not make: the site table (kept in
//! gasan's cache under the key: `<key>.sites.json`, `<key>.tags`, `<key>.ptx`) and the revision and
//! options the checks were made with (a cubin checked with another shadow scale must not run
//! against this process's shadow). `.visible` keeps ptxas from dropping the unreferenced
//! variable; its bytes land in the cubin's `.nv.global.init` section, where [`find_in_cubin`]
//! reads them from the ELF symbol table without a driver. The variable costs 56 bytes of global
//! memory per module.
//!
//! The key is the one runtime/src/modules.rs (`cached_instrumentation`) gives the same PTX
//! checked with the same options, so the cache entries the front end writes are those the runtime
//! would write, and either finds the other's.

use gasan_instrument::ptx::{InstrumentOptions, REVISION};
use gasan_instrument::shadow::Scale;
use object::{Object, ObjectSection, ObjectSymbol};
use sha2::{Digest, Sha256};

/// Name of the marker variable.
pub const MARKER_SYMBOL: &str = "__gasan_jit";
/// First bytes of the marker.
pub const MAGIC: [u8; 8] = *b"GASANJIT";
/// Layout version of the marker.
pub const FORMAT: u32 = 1;
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

/// The marker of a cubin (an ELF image): `Ok(None)` when it has no marker symbol (not made by the
/// front end: native, or checked by the runtime itself).
pub fn find_in_cubin(elf: &[u8]) -> Result<Option<Marker>, MarkerError> {
    let file = object::File::parse(elf).map_err(|e| MarkerError::NotElf(e.to_string()))?;
    let Some(sym) = file.symbols().find(|s| s.name() == Ok(MARKER_SYMBOL)) else {
        return Ok(None);
    };
    if sym.size() != MARKER_SIZE as u64 {
        return Err(MarkerError::Size(sym.size()));
    }
    let section = sym.section_index().and_then(|i| file.section_by_index(i).ok()).ok_or(MarkerError::NoData)?;
    let data = section.data().map_err(|_| MarkerError::NoData)?;
    // A cubin's symbol values are offsets into their sections.
    let start = usize::try_from(sym.address().saturating_sub(section.address())).map_err(|_| MarkerError::NoData)?;
    let bytes = data.get(start..start + MARKER_SIZE).ok_or(MarkerError::NoData)?;
    Marker::from_bytes(bytes).map(Some)
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
        b[8] = 2;
        assert_eq!(Marker::from_bytes(&b), Err(MarkerError::Format(2)));
        assert_eq!(Marker::from_bytes(&b[..10]), Err(MarkerError::Size(10)));
        let decl = m.ptx_declaration();
        assert!(decl.starts_with(".visible .global .align 8 .b8 __gasan_jit[56] = {71,65,83,65,78,74,73,84,1,0,0,0,"), "{decl}");
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
    fn non_elf_is_refused() {
        assert!(matches!(find_in_cubin(b"not an elf"), Err(MarkerError::NotElf(_))));
    }
}
