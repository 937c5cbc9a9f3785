//! Fatbinary, ELF and PTX image reader.
//!
//! The runtime receives module images as raw pointers with no length (`cuModuleLoadData`). It calls
//! [`sniff`] on the first bytes, then [`image_len`] on a prefix of at least [`LEN_PREFIX`] bytes to
//! learn how many bytes the image spans, then [`Fatbin::parse`] / [`Entry::payload`] /
//! [`Fatbin::best_ptx`]. For files (apps, shared libraries, `.fatbin`) use [`fatbins_in_file`];
//! `gasan-ptx extract` is [`extract_command`].

use std::borrow::Cow;
use std::path::Path;

pub const WRAPPER_MAGIC: u32 = 0x466243B1;
pub const FATBIN_MAGIC: u32 = 0xBA55ED50;
pub const FLAG_LZ4: u64 = 0x2000;
pub const FLAG_ZSTD: u64 = 0x8000;
/// Prefix length [`image_len`] needs to size any image.
pub const LEN_PREFIX: usize = 64;
/// Upper bound for one decompressed entry (guards against hostile size fields).
const MAX_ENTRY: usize = 1 << 30;
/// Most bytes one compressed byte of an LZ4 block can stand for.
const LZ4_MAX_RATIO: usize = 256;
/// A zstd entry's output buffer is reserved up to this many times its compressed size (or its
/// declared size, if smaller), and grows with the data beyond: real PTX compresses about 5-10x,
/// and a frame of RLE blocks could claim 32,768x.
const ZSTD_PREALLOC_RATIO: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContainerError {
    #[error("truncated {what}: need {need} bytes at offset {at}, have {have}")]
    Truncated { what: &'static str, at: usize, need: usize, have: usize },
    #[error("bad magic {0:#x}")]
    BadMagic(u32),
    #[error("bad {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error("decompression failed ({codec}): {detail}")]
    Decompress { codec: &'static str, detail: String },
    #[error("not an ELF file: {0}")]
    Elf(String),
    #[error("{path}: {err}")]
    Io { path: String, err: String },
    #[error("no fatbinary found in {0}")]
    NoFatbin(String),
}

type Result<T> = std::result::Result<T, ContainerError>;

/// What a raw module image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    FatbinWrapper,
    Fatbin,
    Elf,
    Ptx,
    Unknown,
}

fn u16_at(b: &[u8], at: usize, what: &'static str) -> Result<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes(s.try_into().unwrap())).ok_or(ContainerError::Truncated { what, at, need: 2, have: b.len().saturating_sub(at) })
}
fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).ok_or(ContainerError::Truncated { what, at, need: 4, have: b.len().saturating_sub(at) })
}
fn u64_at(b: &[u8], at: usize, what: &'static str) -> Result<u64> {
    b.get(at..at + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap())).ok_or(ContainerError::Truncated { what, at, need: 8, have: b.len().saturating_sub(at) })
}

/// Classifies an image by its first bytes.
pub fn sniff(prefix: &[u8]) -> ImageKind {
    match prefix.get(0..4).map(|s| u32::from_le_bytes(s.try_into().unwrap())) {
        Some(WRAPPER_MAGIC) => ImageKind::FatbinWrapper,
        Some(FATBIN_MAGIC) => ImageKind::Fatbin,
        _ if prefix.starts_with(b"\x7fELF") => ImageKind::Elf,
        _ => {
            let text = prefix.iter().take_while(|&&c| c != 0).copied().collect::<Vec<_>>();
            let t = String::from_utf8_lossy(&text);
            let looks_ptx = t.contains(".version") || t.contains("//") || t.trim_start().starts_with('.');
            if looks_ptx && !text.is_empty() && text.iter().all(|&c| c == b'\t' || c == b'\n' || c == b'\r' || (32..127).contains(&c)) {
                ImageKind::Ptx
            } else {
                ImageKind::Unknown
            }
        }
    }
}

/// `__fatBinC_Wrapper_t`, the struct cudart registers modules with: its magic
/// ([`WRAPPER_MAGIC`]), a version, the fatbin's host address, and (version 2, prelinked RDC) the
/// list of fatbins to link. Read by [`image_len`], written by the runtime for checked code.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatbinWrapper {
    pub magic: u32,
    pub version: u32,
    pub data: u64,
    pub filename_or_fatbins: u64,
}

/// Bytes of a [`FatbinWrapper`].
pub const WRAPPER_SIZE: usize = 24;
/// Bytes of a fatbin's own header (magic, version, header size, payload size).
pub const FATBIN_HEADER_SIZE: usize = 16;
const _: () = assert!(std::mem::size_of::<FatbinWrapper>() == WRAPPER_SIZE);

impl FatbinWrapper {
    /// The wrapper in the first [`WRAPPER_SIZE`] bytes of `b` (its magic is not checked).
    pub fn parse(b: &[u8]) -> Result<Self> {
        Ok(Self { magic: u32_at(b, 0, "wrapper")?, version: u32_at(b, 4, "wrapper")?, data: u64_at(b, 8, "wrapper")?, filename_or_fatbins: u64_at(b, 16, "wrapper")? })
    }

    /// The wrapper as the bytes cudart reads (little-endian, no padding).
    pub fn to_bytes(&self) -> [u8; WRAPPER_SIZE] {
        let mut out = [0u8; WRAPPER_SIZE];
        out[0..4].copy_from_slice(&self.magic.to_le_bytes());
        out[4..8].copy_from_slice(&self.version.to_le_bytes());
        out[8..16].copy_from_slice(&self.data.to_le_bytes());
        out[16..24].copy_from_slice(&self.filename_or_fatbins.to_le_bytes());
        out
    }
}

/// How far an image extends, computed from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageLen {
    /// The image is exactly this many bytes.
    Bytes(usize),
    /// NUL-terminated text: read up to the first 0 byte.
    NulTerminated,
    /// A `__fatBinC_Wrapper_t`: the fatbin is at this (host) address; size it with [`image_len`].
    Wrapper { version: u32, data: u64, filename_or_fatbins: u64 },
}

/// Sizes an image from a prefix of at least [`LEN_PREFIX`] bytes (fewer only if the image is shorter).
pub fn image_len(prefix: &[u8]) -> Result<ImageLen> {
    match sniff(prefix) {
        ImageKind::FatbinWrapper => {
            let w = FatbinWrapper::parse(prefix)?;
            Ok(ImageLen::Wrapper { version: w.version, data: w.data, filename_or_fatbins: w.filename_or_fatbins })
        }
        ImageKind::Fatbin => {
            let hs = u16_at(prefix, 6, "fatbin header")? as usize;
            let fs = u64_at(prefix, 8, "fatbin header")?;
            let total = (hs as u64).checked_add(fs).filter(|&t| t <= MAX_ENTRY as u64 * 4).ok_or(ContainerError::Malformed { what: "fatbin header", detail: format!("size {fs:#x}") })?;
            Ok(ImageLen::Bytes(total as usize))
        }
        ImageKind::Elf => {
            if prefix.get(4) != Some(&2) || prefix.get(5) != Some(&1) {
                return Err(ContainerError::Elf("only little-endian ELF64 is supported".into()));
            }
            let phoff = u64_at(prefix, 0x20, "ELF header")?;
            let shoff = u64_at(prefix, 0x28, "ELF header")?;
            let phentsize = u16_at(prefix, 0x36, "ELF header")? as u64;
            let phnum = u16_at(prefix, 0x38, "ELF header")? as u64;
            let shentsize = u16_at(prefix, 0x3a, "ELF header")? as u64;
            let shnum = u16_at(prefix, 0x3c, "ELF header")? as u64;
            // Section data precedes the section header table in cubins; the table ends the file.
            let end_sh = shoff.checked_add(shentsize * shnum);
            let end_ph = phoff.checked_add(phentsize * phnum);
            let end = end_sh.zip(end_ph).map(|(a, b)| a.max(b).max(64)).filter(|&e| e <= MAX_ENTRY as u64).ok_or(ContainerError::Elf("header table offsets overflow".into()))?;
            Ok(ImageLen::Bytes(end as usize))
        }
        ImageKind::Ptx => Ok(ImageLen::NulTerminated),
        ImageKind::Unknown => Err(ContainerError::BadMagic(u32_at(prefix, 0, "image").unwrap_or(0))),
    }
}

/// Kind of a fatbin entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Ptx,
    Elf,
    LtoIr,
    Other(u16),
}

/// One entry of a fatbin (borrowed from the container).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub kind: EntryKind,
    /// SM number (90 for sm_90 / compute_90).
    pub arch: u32,
    pub flags: u64,
    /// Code version (PTX ISA version for PTX entries): (major, minor).
    pub version: (u16, u16),
    pub identifier: Option<String>,
    pub options: Option<String>,
    /// Stored bytes (compressed when a compression flag is set).
    pub raw: &'a [u8],
    pub uncompressed_size: u64,
}

impl Entry<'_> {
    pub fn is_compressed(&self) -> bool {
        self.flags & (FLAG_LZ4 | FLAG_ZSTD) != 0
    }
    /// Arch-specific (`sm_90a`) entries run only on exactly that arch.
    pub fn arch_specific(&self) -> bool {
        self.flags & 0x100000 != 0
    }

    /// The entry's content, decompressed; PTX loses its trailing NUL padding.
    ///
    /// A compressed entry inflates to at most its declared uncompressed size (itself at most
    /// [`MAX_ENTRY`]): decompression stops one byte past it with an error, so a small hostile
    /// entry cannot make the reader allocate or spend time beyond what its header states, and
    /// nothing is allocated ahead of the data that a stream of this length could not produce.
    pub fn payload(&self) -> Result<Cow<'_, [u8]>> {
        let declared = usize::try_from(self.uncompressed_size).unwrap_or(usize::MAX);
        let mut data: Cow<'_, [u8]> = if self.flags & FLAG_ZSTD != 0 {
            let zstd_err = |detail: String| ContainerError::Decompress { codec: "zstd", detail };
            if declared > MAX_ENTRY {
                return Err(zstd_err(format!("declared size {declared} exceeds the {MAX_ENTRY}-byte limit")));
            }
            let mut out = Vec::with_capacity(declared.min(self.raw.len().saturating_mul(ZSTD_PREALLOC_RATIO)));
            let mut dec = ruzstd::decoding::StreamingDecoder::new(self.raw).map_err(|e| zstd_err(e.to_string()))?;
            use std::io::Read;
            // One byte more than declared tells an overlong stream from an exact one.
            (&mut dec).take(declared as u64 + 1).read_to_end(&mut out).map_err(|e| zstd_err(e.to_string()))?;
            if out.len() > declared {
                return Err(zstd_err(format!("inflates past its declared size of {declared} bytes")));
            }
            Cow::Owned(out)
        } else if self.flags & FLAG_LZ4 != 0 {
            let lz4_err = |detail: String| ContainerError::Decompress { codec: "lz4", detail };
            if declared == 0 || declared > MAX_ENTRY {
                return Err(lz4_err(format!("bad size {declared}")));
            }
            // An LZ4 block inflates at most about 255-fold (each length byte adds at most 255).
            if declared > self.raw.len().saturating_mul(LZ4_MAX_RATIO).saturating_add(64) {
                return Err(lz4_err(format!("declared size {declared} is more than {} compressed bytes can hold", self.raw.len())));
            }
            // Decoding stops with an error at the declared size (the output buffer's size).
            let out = lz4_flex::block::decompress(self.raw, declared).map_err(|e| lz4_err(e.to_string()))?;
            Cow::Owned(out)
        } else {
            Cow::Borrowed(self.raw)
        };
        if self.kind == EntryKind::Ptx {
            let end = data.iter().rposition(|&c| c != 0).map_or(0, |p| p + 1);
            data = match data {
                Cow::Borrowed(b) => Cow::Borrowed(&b[..end]),
                Cow::Owned(mut v) => {
                    v.truncate(end);
                    Cow::Owned(v)
                }
            };
        }
        Ok(data)
    }

    /// The PTX text of a PTX entry.
    pub fn ptx(&self) -> Result<String> {
        let p = self.payload()?;
        String::from_utf8(p.into_owned()).map_err(|e| ContainerError::Malformed { what: "PTX entry", detail: e.to_string() })
    }
}

/// One parsed fatbin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fatbin<'a> {
    pub entries: Vec<Entry<'a>>,
    /// Bytes this fatbin occupies (header + entries).
    pub len: usize,
}

fn c_string(b: &[u8], at: usize, len: Option<usize>) -> Option<String> {
    let s = b.get(at..)?;
    let s = match len {
        Some(n) => s.get(..n)?,
        None => &s[..s.iter().position(|&c| c == 0)?],
    };
    Some(String::from_utf8_lossy(s).trim_end_matches('\0').to_string())
}

impl<'a> Fatbin<'a> {
    /// Parses one fatbin at the start of `b`.
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        let magic = u32_at(b, 0, "fatbin header")?;
        if magic != FATBIN_MAGIC {
            return Err(ContainerError::BadMagic(magic));
        }
        let hs = u16_at(b, 6, "fatbin header")? as usize;
        let fs = u64_at(b, 8, "fatbin header")?;
        if hs < 16 {
            return Err(ContainerError::Malformed { what: "fatbin header", detail: format!("header size {hs}") });
        }
        let end = (hs as u64).checked_add(fs).filter(|&e| e <= b.len() as u64).ok_or(ContainerError::Truncated {
            what: "fatbin",
            at: 0,
            need: (hs as u64).saturating_add(fs).min(usize::MAX as u64) as usize,
            have: b.len(),
        })? as usize;
        let mut entries = Vec::new();
        let mut off = hs;
        while off + 8 <= end {
            let e = &b[off..end];
            let kind_raw = u16_at(e, 0, "entry header")?;
            let ehs = u32_at(e, 4, "entry header")? as usize;
            let size = u64_at(e, 8, "entry header")?;
            if kind_raw == 0 && ehs == 0 {
                break; // zero padding
            }
            if ehs < 0x40 || ehs > e.len() {
                return Err(ContainerError::Malformed { what: "entry header", detail: format!("header size {ehs} at {off}") });
            }
            let payload_end = (ehs as u64).checked_add(size).filter(|&p| p <= e.len() as u64).ok_or(ContainerError::Truncated {
                what: "entry payload",
                at: off,
                need: size.min(usize::MAX as u64) as usize,
                have: e.len(),
            })? as usize;
            let options_off = u32_at(e, 0x14, "entry header")? as usize;
            let minor = u16_at(e, 0x18, "entry header")?;
            let major = u16_at(e, 0x1a, "entry header")?;
            let arch = u32_at(e, 0x1c, "entry header")?;
            let id_off = u32_at(e, 0x20, "entry header")? as usize;
            let id_len = u32_at(e, 0x24, "entry header")? as usize;
            let flags = u64_at(e, 0x28, "entry header")?;
            let uncompressed_size = u64_at(e, 0x38, "entry header")?;
            // The payload is padded to 8 bytes; a compressed entry states its exact stored size.
            let compressed_size = u32_at(e, 0x10, "entry header")? as usize;
            let payload_end = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 && compressed_size > 0 && ehs + compressed_size <= payload_end { ehs + compressed_size } else { payload_end };
            let identifier = (id_off != 0 && id_off < ehs).then(|| c_string(&e[..ehs], id_off, Some(id_len.min(ehs - id_off)))).flatten();
            let options = (options_off != 0 && options_off < ehs).then(|| c_string(&e[..ehs], options_off, None)).flatten();
            entries.push(Entry {
                kind: match kind_raw {
                    1 => EntryKind::Ptx,
                    2 => EntryKind::Elf,
                    8 => EntryKind::LtoIr,
                    k => EntryKind::Other(k),
                },
                arch,
                flags,
                version: (major, minor),
                identifier,
                options,
                raw: &e[ehs..payload_end],
                uncompressed_size,
            });
            off += ehs + size as usize;
        }
        Ok(Fatbin { entries, len: end })
    }

    /// Parses fatbins stored back to back (8-byte aligned, zero padded), as in `.nv_fatbin`.
    pub fn parse_all(mut b: &'a [u8]) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        loop {
            while b.len() >= 4 && u32_at(b, 0, "fatbin").ok() != Some(FATBIN_MAGIC) {
                if b[..4] != [0, 0, 0, 0] {
                    return Err(ContainerError::BadMagic(u32_at(b, 0, "fatbin")?));
                }
                b = &b[4..];
            }
            if b.len() < 16 {
                return Ok(out);
            }
            let f = Fatbin::parse(b)?;
            let adv = f.len.div_ceil(8) * 8;
            b = b.get(adv..).unwrap_or(&[]);
            out.push(f);
        }
    }

    /// The PTX entry the driver would JIT for a device of compute capability `sm` (e.g. 90): the
    /// highest PTX arch ≤ `sm`, where an arch-specific entry (`sm_90a`) qualifies only for its own arch.
    pub fn best_ptx(&self, sm: u32) -> Option<&Entry<'a>> {
        self.entries.iter().filter(|e| e.kind == EntryKind::Ptx && e.arch <= sm && (!e.arch_specific() || e.arch == sm)).max_by_key(|e| (e.arch, e.arch_specific()))
    }

    /// Whether the fatbin carries SASS the device runs natively (same major, ≤ minor).
    pub fn has_sass_for(&self, sm: u32) -> bool {
        self.entries.iter().any(|e| e.kind == EntryKind::Elf && e.arch / 10 == sm / 10 && e.arch <= sm)
    }
}

/// Every fatbin inside a file: an ELF executable / shared object (`.nv_fatbin`, `__nv_relfatbin`), or
/// a bare fatbin file.
pub fn fatbins_in_file(bytes: &[u8]) -> Result<Vec<(String, Fatbin<'_>)>> {
    match sniff(bytes) {
        ImageKind::Fatbin => Ok(Fatbin::parse_all(bytes)?.into_iter().map(|f| ("fatbin".to_string(), f)).collect()),
        ImageKind::Elf => {
            use object::{Object, ObjectSection};
            let obj = object::File::parse(bytes).map_err(|e| ContainerError::Elf(e.to_string()))?;
            let mut out = Vec::new();
            for sec in obj.sections() {
                let name = sec.name().unwrap_or("");
                if name == ".nv_fatbin" || name == "__nv_relfatbin" {
                    let data = sec.data().map_err(|e| ContainerError::Elf(e.to_string()))?;
                    for f in Fatbin::parse_all(data)? {
                        out.push((name.to_string(), f));
                    }
                }
            }
            Ok(out)
        }
        ImageKind::FatbinWrapper => Err(ContainerError::Malformed { what: "file", detail: "a fatbin wrapper holds a pointer; only a running process can follow it".into() }),
        ImageKind::Ptx | ImageKind::Unknown => Err(ContainerError::BadMagic(u32_at(bytes, 0, "file").unwrap_or(0))),
    }
}

fn kind_name(k: EntryKind) -> String {
    match k {
        EntryKind::Ptx => "ptx".into(),
        EntryKind::Elf => "cubin".into(),
        EntryKind::LtoIr => "ltoir".into(),
        EntryKind::Other(n) => format!("kind{n}"),
    }
}

/// `gasan-ptx extract`: lists the entries of an app, library or fatbin; with `out_dir`, writes each
/// entry decompressed as `NN.sm_XX.{ptx,cubin,ltoir}`. Returns the listing.
pub fn extract_command(input: &Path, out_dir: Option<&Path>) -> Result<String> {
    let io = |e: std::io::Error, p: &Path| ContainerError::Io { path: p.display().to_string(), err: e.to_string() };
    let bytes = std::fs::read(input).map_err(|e| io(e, input))?;
    let fatbins = fatbins_in_file(&bytes)?;
    if fatbins.is_empty() {
        return Err(ContainerError::NoFatbin(input.display().to_string()));
    }
    if let Some(d) = out_dir {
        std::fs::create_dir_all(d).map_err(|e| io(e, d))?;
    }
    let mut listing = String::new();
    let mut n = 0;
    for (fi, (section, fb)) in fatbins.iter().enumerate() {
        for e in &fb.entries {
            let compression = if e.flags & FLAG_ZSTD != 0 {
                "zstd"
            } else if e.flags & FLAG_LZ4 != 0 {
                "lz4"
            } else {
                "none"
            };
            listing.push_str(&format!(
                "{n:3} fatbin {fi} ({section}) {:<6} sm_{}{} flags={:#x} compression={compression} size={} id={}\n",
                kind_name(e.kind),
                e.arch,
                if e.arch_specific() { "a" } else { "" },
                e.flags,
                e.raw.len(),
                e.identifier.as_deref().unwrap_or("-")
            ));
            if let Some(d) = out_dir {
                let ext = match e.kind {
                    EntryKind::Ptx => "ptx",
                    EntryKind::Elf => "cubin",
                    EntryKind::LtoIr => "ltoir",
                    EntryKind::Other(_) => "bin",
                };
                let p = d.join(format!("{n:02}.sm_{}.{ext}", e.arch));
                std::fs::write(&p, e.payload()?).map_err(|er| io(er, &p))?;
            }
            n += 1;
        }
    }
    Ok(listing)
}

/// Builds a fatbin holding one uncompressed PTX entry (what the driver's fatbin loaders accept), e.g.
/// to hand checked PTX to a loader that only takes fatbins.
pub fn build_ptx_fatbin(ptx: &str, arch: u32, ptx_version: (u16, u16)) -> Vec<u8> {
    let mut payload = ptx.as_bytes().to_vec();
    payload.push(0);
    one_entry_fatbin(1, &payload, arch, ptx_version, 0x11)
}

/// Builds a fatbin holding one uncompressed cubin (ELF) entry for `sm_<arch>` (`arch_specific`:
/// `sm_<arch>a`), laid out as nvcc lays out its ELF entries (version 1.8, flags 0x11).
pub fn build_elf_fatbin(cubin: &[u8], arch: u32, arch_specific: bool) -> Vec<u8> {
    let flags = 0x11 | if arch_specific { 0x100000 } else { 0 };
    one_entry_fatbin(2, cubin, arch, (1, 8), flags)
}

fn one_entry_fatbin(kind: u16, payload: &[u8], arch: u32, version: (u16, u16), flags: u64) -> Vec<u8> {
    let mut payload = payload.to_vec();
    payload.resize(payload.len().div_ceil(8) * 8, 0);
    let mut e = vec![0u8; 64];
    e[0..2].copy_from_slice(&kind.to_le_bytes());
    e[2..4].copy_from_slice(&0x101u16.to_le_bytes());
    e[4..8].copy_from_slice(&64u32.to_le_bytes());
    e[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    e[0x18..0x1a].copy_from_slice(&version.1.to_le_bytes());
    e[0x1a..0x1c].copy_from_slice(&version.0.to_le_bytes());
    e[0x1c..0x20].copy_from_slice(&arch.to_le_bytes());
    e[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&payload);
    let mut b = Vec::with_capacity(16 + e.len());
    b.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(&(e.len() as u64).to_le_bytes());
    b.extend_from_slice(&e);
    b
}

/// The `.version` of a PTX text, e.g. (9, 0).
pub fn ptx_version(ptx: &str) -> Option<(u16, u16)> {
    let line = ptx.lines().map(str::trim).find(|l| l.starts_with(".version"))?;
    let (a, b) = line.trim_start_matches(".version").trim().split_once('.')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_fatbin_round_trips() {
        let cubin: Vec<u8> = (0..1001u32).map(|i| i as u8).collect();
        for specific in [false, true] {
            let fb = build_elf_fatbin(&cubin, 90, specific);
            let f = Fatbin::parse(&fb).unwrap();
            assert_eq!(f.len, fb.len());
            let e = &f.entries[0];
            assert_eq!((e.kind, e.arch, e.arch_specific()), (EntryKind::Elf, 90, specific));
            assert_eq!(&e.payload().unwrap()[..cubin.len()], &cubin[..]);
            assert!(f.has_sass_for(90));
            assert!(f.best_ptx(90).is_none());
        }
    }

    fn entry(kind: u16, arch: u32, flags: u64, payload: &[u8], usize_: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        let padded = payload.len().div_ceil(8) * 8;
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[0x1c..0x20].copy_from_slice(&arch.to_le_bytes());
        if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 {
            h[0x10..0x14].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        }
        h[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
        h[0x38..0x40].copy_from_slice(&usize_.to_le_bytes());
        h.extend_from_slice(payload);
        h.resize(64 + padded, 0);
        h
    }

    pub(crate) fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut b = Vec::new();
        b.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&(body.len() as u64).to_le_bytes());
        b.extend_from_slice(&body);
        b
    }

    #[test]
    fn parses_entries_and_picks_best_ptx() {
        let ptx75 = b".version 7.0\n.target sm_75\n";
        let ptx90 = b".version 8.0\n.target sm_90\n";
        let lz = lz4_flex::block::compress(ptx90);
        let fb = fatbin(&[entry(1, 75, 0x11, ptx75, 0), entry(1, 90, 0x11 | FLAG_LZ4, &lz, ptx90.len() as u64), entry(2, 90, 0x11, b"\x7fELF....", 0)]);
        assert_eq!(image_len(&fb[..LEN_PREFIX]).unwrap(), ImageLen::Bytes(fb.len()));
        let f = Fatbin::parse(&fb).unwrap();
        assert_eq!(f.entries.len(), 3);
        assert_eq!(f.best_ptx(90).unwrap().ptx().unwrap().as_bytes(), ptx90);
        assert_eq!(f.best_ptx(80).unwrap().ptx().unwrap().as_bytes(), ptx75);
        assert!(f.best_ptx(70).is_none());
        assert!(f.has_sass_for(90));
        assert!(!f.has_sass_for(80));
    }

    #[test]
    fn built_fatbin_round_trips() {
        let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n";
        let fb = build_ptx_fatbin(ptx, 90, ptx_version(ptx).unwrap());
        let f = Fatbin::parse(&fb).unwrap();
        assert_eq!(f.best_ptx(90).unwrap().ptx().unwrap(), ptx);
        assert_eq!(f.entries[0].version, (8, 5));
    }

    #[test]
    fn sniffs() {
        assert_eq!(sniff(b".version 8.0\n"), ImageKind::Ptx);
        assert_eq!(sniff(b"\x7fELF\x02\x01"), ImageKind::Elf);
        assert_eq!(sniff(&WRAPPER_MAGIC.to_le_bytes()), ImageKind::FatbinWrapper);
        assert_eq!(sniff(&[0xff, 0xfe, 0, 1]), ImageKind::Unknown);
    }

    #[test]
    fn a_written_wrapper_reads_back() {
        let w = FatbinWrapper { magic: WRAPPER_MAGIC, version: 1, data: 0x7f00_1234_5678, filename_or_fatbins: 0 };
        let b = w.to_bytes();
        assert_eq!(FatbinWrapper::parse(&b).unwrap(), w);
        assert_eq!(sniff(&b), ImageKind::FatbinWrapper);
        assert_eq!(image_len(&b).unwrap(), ImageLen::Wrapper { version: 1, data: 0x7f00_1234_5678, filename_or_fatbins: 0 });
        assert!(FatbinWrapper::parse(&b[..20]).is_err());
    }
}
