//! Fatbinary, ELF and PTX image reader.
//!
//! The runtime receives module images as raw pointers with no length (`cuModuleLoadData`). It calls
//! [`sniff`] on the first bytes, then [`image_len`] on a prefix of at least [`LEN_PREFIX`] bytes to
//! learn how many bytes the image spans, then [`Fatbin::parse`] / [`Entry::payload`] /
//! [`Fatbin::best_ptx`]. For files (apps, shared libraries, `.fatbin`) use [`fatbins_in_file`];
//! `gasan-ptx extract` is [`extract_command`].

use std::borrow::Cow;
use std::mem::{offset_of, size_of};
use std::path::Path;

use object::elf::{ELFCLASS64, ELFDATA2LSB};

/// [`FatbinWrapper::magic`].
pub const WRAPPER_MAGIC: u32 = 0x466243B1;
/// [`FatbinHeader::magic`].
pub const FATBIN_MAGIC: u32 = 0xBA55ED50;
/// [`FatbinHeader::version`] of every fatbin the driver takes.
pub const FATBIN_VERSION: u16 = 1;
/// [`FatbinEntryHeader::header_version`] as nvcc writes it.
pub const ENTRY_HEADER_VERSION: u16 = 0x101;
/// [`FatbinEntryHeader::flags`]: the code is for a 64-bit host.
pub const FLAG_64BIT: u64 = 0x1;
/// [`FatbinEntryHeader::flags`]: the code was built on / for a Linux host.
pub const FLAG_HOST_LINUX: u64 = 0x10;
/// [`FatbinEntryHeader::flags`]: the payload is an LZ4 block.
pub const FLAG_LZ4: u64 = 0x2000;
/// [`FatbinEntryHeader::flags`]: the payload is a zstd frame.
pub const FLAG_ZSTD: u64 = 0x8000;
/// [`FatbinEntryHeader::flags`]: arch-specific code (`sm_90a`), which runs only on exactly its arch.
pub const FLAG_ARCH_SPECIFIC: u64 = 0x100000;
/// Prefix length [`image_len`] needs to size any image.
pub const LEN_PREFIX: usize = 64;
const _: () = assert!(LEN_PREFIX >= FatbinWrapper::SIZE && LEN_PREFIX >= FatbinHeader::SIZE && LEN_PREFIX >= Elf64Header::SIZE);
/// Upper bound for one decompressed entry (guards against hostile size fields).
const MAX_ENTRY: usize = 1 << 30;
/// Most bytes one compressed byte of an LZ4 block can stand for.
const LZ4_MAX_RATIO: usize = 256;
/// A zstd entry's output buffer is reserved up to this many times its compressed size (or its
/// declared size, if smaller), and grows with the data beyond: real PTX compresses about 5-10x,
/// and a frame of RLE blocks could claim 32,768x.
const ZSTD_PREALLOC_RATIO: usize = 16;
/// Fatbin entries (and fatbins stored back to back) start on this alignment; payloads are zero
/// padded to it.
const FATBIN_ALIGN: usize = 8;

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

/// A field of an on-disk layout, stored little-endian.
trait LeField: Sized {
    /// The field from exactly its `size_of` bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Stores the field into exactly its `size_of` bytes.
    fn write_le(&self, out: &mut [u8]);
}

macro_rules! le_integer_fields {
    ($($int:ty),*) => {$(
        impl LeField for $int {
            fn read_le(bytes: &[u8]) -> Self {
                let mut le = [0u8; size_of::<$int>()];
                le.copy_from_slice(bytes);
                <$int>::from_le_bytes(le)
            }
            fn write_le(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
le_integer_fields!(u8, u16, u32, u64);

impl<const N: usize> LeField for [u8; N] {
    fn read_le(bytes: &[u8]) -> Self {
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        out
    }
    fn write_le(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }
}

/// Declares a binary layout once: a `repr(C)` struct whose field order and types are the on-disk
/// layout (little-endian, no padding: checked at compile time), its `SIZE`, and `parse` / `to_bytes`
/// that read and write every field at its `offset_of!`, so reader and writer cannot disagree.
macro_rules! binary_layout {
    ($(#[$meta:meta])* pub struct $name:ident, truncated as $what:literal { $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        // No padding: every byte of the layout belongs to one field, so `to_bytes` writes them all.
        const _: () = assert!(0 $(+ size_of::<$ty>())* == size_of::<$name>());

        impl $name {
            /// Bytes of this layout.
            pub const SIZE: usize = size_of::<$name>();

            /// The layout's fields from the first [`Self::SIZE`] bytes of `bytes` (no field is validated).
            pub fn parse(bytes: &[u8]) -> Result<Self> {
                let bytes = bytes.get(..$name::SIZE).ok_or(ContainerError::Truncated { what: $what, at: 0, need: $name::SIZE, have: bytes.len() })?;
                Ok($name { $($field: LeField::read_le(&bytes[offset_of!($name, $field)..][..size_of::<$ty>()]),)* })
            }

            /// The bytes [`Self::parse`] reads back as `self`.
            pub fn to_bytes(&self) -> [u8; size_of::<$name>()] {
                let mut out = [0u8; size_of::<$name>()];
                $(self.$field.write_le(&mut out[offset_of!($name, $field)..][..size_of::<$ty>()]);)*
                out
            }
        }
    };
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

binary_layout! {
    /// `__fatBinC_Wrapper_t`, the struct cudart registers modules with: its magic
    /// ([`WRAPPER_MAGIC`]), a version, the fatbin's host address, and (version 2, prelinked RDC) the
    /// list of fatbins to link. Read by [`image_len`], written by the runtime for checked code.
    pub struct FatbinWrapper, truncated as "wrapper" {
        pub magic: u32,
        pub version: u32,
        pub data: u64,
        pub filename_or_fatbins: u64,
    }
}

binary_layout! {
    /// `fatBinaryHeader`, the start of every fatbin: its entries follow `header_size` bytes from the
    /// start and span `payload_size` bytes.
    pub struct FatbinHeader, truncated as "fatbin header" {
        /// [`FATBIN_MAGIC`].
        pub magic: u32,
        /// [`FATBIN_VERSION`].
        pub version: u16,
        /// Bytes from the fatbin's start to its first entry (at least [`FatbinHeader::SIZE`]).
        pub header_size: u16,
        /// Bytes of entries after the header.
        pub payload_size: u64,
    }
}

impl FatbinHeader {
    /// The header of a fatbin whose entries span `payload_size` bytes, as nvcc writes it.
    pub fn new(payload_size: u64) -> Self {
        Self { magic: FATBIN_MAGIC, version: FATBIN_VERSION, header_size: Self::SIZE as u16, payload_size }
    }
}

binary_layout! {
    /// The header of one fatbin entry: what its payload is and for which arch, where its strings
    /// and payload lie (offsets from the entry's start), and how the payload is stored.
    pub struct FatbinEntryHeader, truncated as "entry header" {
        /// [`EntryKind::raw`].
        pub kind: u16,
        /// [`ENTRY_HEADER_VERSION`].
        pub header_version: u16,
        /// Bytes from the entry's start to its payload: this header and the strings after it.
        pub header_size: u32,
        /// Bytes of payload after the header, zero padded to 8.
        pub payload_size: u64,
        /// Exact stored bytes of a compressed payload (its padding excluded); 0 when uncompressed.
        pub compressed_size: u32,
        /// Offset of the entry's NUL-terminated options (0: none).
        pub options_offset: u32,
        /// Code version (PTX ISA version for PTX entries): minor, then major.
        pub version_minor: u16,
        pub version_major: u16,
        /// SM number (90 for sm_90 / compute_90).
        pub arch: u32,
        /// Offset and length of the entry's identifier (0: none).
        pub identifier_offset: u32,
        pub identifier_len: u32,
        /// `FLAG_*` bits: host, compression, arch-specific code.
        pub flags: u64,
        /// Not read by gasan; nvcc writes 0.
        pub reserved: u64,
        /// Bytes of a compressed payload once decompressed.
        pub uncompressed_size: u64,
    }
}

/// Bytes an entry's `kind` and `header_size` span: enough to tell an entry from the zero padding
/// that may follow the last one.
const ENTRY_KIND_AND_SIZE: usize = offset_of!(FatbinEntryHeader, header_size) + size_of::<u32>();

binary_layout! {
    /// `Elf64_Ehdr`, the ELF64 file header (`e_ident` split into its bytes); [`image_len`] sizes a
    /// cubin from its header tables.
    pub struct Elf64Header, truncated as "ELF header" {
        /// `\x7fELF`.
        pub ei_magic: [u8; 4],
        /// `ELFCLASS64` for ELF64.
        pub ei_class: u8,
        /// `ELFDATA2LSB` for little-endian.
        pub ei_data: u8,
        pub ei_version: u8,
        pub ei_osabi: u8,
        pub ei_abiversion: u8,
        pub ei_pad: [u8; 7],
        pub e_type: u16,
        pub e_machine: u16,
        pub e_version: u32,
        pub e_entry: u64,
        pub e_phoff: u64,
        pub e_shoff: u64,
        pub e_flags: u32,
        pub e_ehsize: u16,
        pub e_phentsize: u16,
        pub e_phnum: u16,
        pub e_shentsize: u16,
        pub e_shnum: u16,
        pub e_shstrndx: u16,
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
            let header = FatbinHeader::parse(prefix)?;
            let fs = header.payload_size;
            let total =
                u64::from(header.header_size).checked_add(fs).filter(|&t| t <= MAX_ENTRY as u64 * 4).ok_or(ContainerError::Malformed { what: "fatbin header", detail: format!("size {fs:#x}") })?;
            Ok(ImageLen::Bytes(total as usize))
        }
        ImageKind::Elf => {
            // Class and byte order first: an ELF32 header is shorter than an ELF64 one.
            if prefix.get(offset_of!(Elf64Header, ei_class)) != Some(&ELFCLASS64) || prefix.get(offset_of!(Elf64Header, ei_data)) != Some(&ELFDATA2LSB) {
                return Err(ContainerError::Elf("only little-endian ELF64 is supported".into()));
            }
            let elf = Elf64Header::parse(prefix)?;
            // Section data precedes the section header table in cubins; the table ends the file.
            let end_sh = elf.e_shoff.checked_add(u64::from(elf.e_shentsize) * u64::from(elf.e_shnum));
            let end_ph = elf.e_phoff.checked_add(u64::from(elf.e_phentsize) * u64::from(elf.e_phnum));
            let end = end_sh.zip(end_ph).map(|(a, b)| a.max(b).max(Elf64Header::SIZE as u64)).filter(|&e| e <= MAX_ENTRY as u64).ok_or(ContainerError::Elf("header table offsets overflow".into()))?;
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

impl EntryKind {
    /// The kind of [`FatbinEntryHeader::kind`].
    pub fn from_raw(kind: u16) -> Self {
        match kind {
            1 => EntryKind::Ptx,
            2 => EntryKind::Elf,
            8 => EntryKind::LtoIr,
            k => EntryKind::Other(k),
        }
    }

    /// [`FatbinEntryHeader::kind`] for this kind.
    pub fn raw(self) -> u16 {
        match self {
            EntryKind::Ptx => 1,
            EntryKind::Elf => 2,
            EntryKind::LtoIr => 8,
            EntryKind::Other(k) => k,
        }
    }
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
        self.flags & FLAG_ARCH_SPECIFIC != 0
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
        let header = FatbinHeader::parse(b)?;
        if header.magic != FATBIN_MAGIC {
            return Err(ContainerError::BadMagic(header.magic));
        }
        let hs = usize::from(header.header_size);
        let fs = header.payload_size;
        if hs < FatbinHeader::SIZE {
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
        while off + ENTRY_KIND_AND_SIZE <= end {
            let e = &b[off..end];
            // Kind and header size first: the zero padding after the last entry may be shorter than a header.
            let kind_raw = u16_at(e, offset_of!(FatbinEntryHeader, kind), "entry header")?;
            let ehs = u32_at(e, offset_of!(FatbinEntryHeader, header_size), "entry header")? as usize;
            if kind_raw == 0 && ehs == 0 {
                break;
            }
            let header = FatbinEntryHeader::parse(e).map_err(|_| ContainerError::Truncated { what: "entry header", at: off, need: FatbinEntryHeader::SIZE, have: e.len() })?;
            if ehs < FatbinEntryHeader::SIZE || ehs > e.len() {
                return Err(ContainerError::Malformed { what: "entry header", detail: format!("header size {ehs} at {off}") });
            }
            let size = header.payload_size;
            let payload_end = (ehs as u64).checked_add(size).filter(|&p| p <= e.len() as u64).ok_or(ContainerError::Truncated {
                what: "entry payload",
                at: off,
                need: size.min(usize::MAX as u64) as usize,
                have: e.len(),
            })? as usize;
            let options_off = header.options_offset as usize;
            let id_off = header.identifier_offset as usize;
            let id_len = header.identifier_len as usize;
            let flags = header.flags;
            // The payload is padded to 8 bytes; a compressed entry states its exact stored size.
            let compressed_size = header.compressed_size as usize;
            let payload_end = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 && compressed_size > 0 && ehs + compressed_size <= payload_end { ehs + compressed_size } else { payload_end };
            let identifier = (id_off != 0 && id_off < ehs).then(|| c_string(&e[..ehs], id_off, Some(id_len.min(ehs - id_off)))).flatten();
            let options = (options_off != 0 && options_off < ehs).then(|| c_string(&e[..ehs], options_off, None)).flatten();
            entries.push(Entry {
                kind: EntryKind::from_raw(kind_raw),
                arch: header.arch,
                flags,
                version: (header.version_major, header.version_minor),
                identifier,
                options,
                raw: &e[ehs..payload_end],
                uncompressed_size: header.uncompressed_size,
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
            if b.len() < FatbinHeader::SIZE {
                return Ok(out);
            }
            let f = Fatbin::parse(b)?;
            let adv = f.len.div_ceil(FATBIN_ALIGN) * FATBIN_ALIGN;
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
    one_entry_fatbin(EntryKind::Ptx, &payload, arch, ptx_version, FLAG_64BIT | FLAG_HOST_LINUX)
}

/// Builds a fatbin holding one uncompressed cubin (ELF) entry for `sm_<arch>` (`arch_specific`:
/// `sm_<arch>a`), laid out as nvcc lays out its ELF entries (version 1.8, 64-bit Linux host).
pub fn build_elf_fatbin(cubin: &[u8], arch: u32, arch_specific: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(ONE_ENTRY_HEADERS + cubin.len() + FATBIN_ALIGN);
    b.resize(ONE_ENTRY_HEADERS, 0);
    b.extend_from_slice(cubin);
    elf_fatbin_in_place(&mut b, arch, arch_specific);
    b
}

/// Bytes before the payload of a one-entry fatbin: its [`FatbinHeader`], then the entry's
/// [`FatbinEntryHeader`].
pub const ONE_ENTRY_HEADERS: usize = FatbinHeader::SIZE + FatbinEntryHeader::SIZE;

/// [`build_elf_fatbin`] in place: `buf` holds [`ONE_ENTRY_HEADERS`] bytes of room, then the cubin;
/// the headers are written into the room and the payload padded, so a cubin read into such a
/// buffer becomes a fatbin of itself without being copied.
pub fn elf_fatbin_in_place(buf: &mut Vec<u8>, arch: u32, arch_specific: bool) {
    let flags = FLAG_64BIT | FLAG_HOST_LINUX | if arch_specific { FLAG_ARCH_SPECIFIC } else { 0 };
    one_entry_in_place(buf, EntryKind::Elf, arch, (1, 8), flags);
}

fn one_entry_fatbin(kind: EntryKind, payload: &[u8], arch: u32, version: (u16, u16), flags: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(ONE_ENTRY_HEADERS + payload.len() + FATBIN_ALIGN);
    b.resize(ONE_ENTRY_HEADERS, 0);
    b.extend_from_slice(payload);
    one_entry_in_place(&mut b, kind, arch, version, flags);
    b
}

/// Writes the headers of a one-entry fatbin into `buf[..ONE_ENTRY_HEADERS]` for the payload after
/// them, which it pads to [`FATBIN_ALIGN`] (the one definition of this layout).
fn one_entry_in_place(buf: &mut Vec<u8>, kind: EntryKind, arch: u32, version: (u16, u16), flags: u64) {
    let payload_len = buf.len().saturating_sub(ONE_ENTRY_HEADERS);
    let padded_len = payload_len.div_ceil(FATBIN_ALIGN) * FATBIN_ALIGN;
    let entry = FatbinEntryHeader {
        kind: kind.raw(),
        header_version: ENTRY_HEADER_VERSION,
        header_size: FatbinEntryHeader::SIZE as u32,
        payload_size: padded_len as u64,
        version_major: version.0,
        version_minor: version.1,
        arch,
        flags,
        ..FatbinEntryHeader::default()
    };
    let header = FatbinHeader::new((FatbinEntryHeader::SIZE + padded_len) as u64);
    buf.resize(ONE_ENTRY_HEADERS + padded_len, 0);
    buf[..FatbinHeader::SIZE].copy_from_slice(&header.to_bytes());
    buf[FatbinHeader::SIZE..ONE_ENTRY_HEADERS].copy_from_slice(&entry.to_bytes());
}

/// The `.version` of a PTX text, e.g. (9, 0) ([`crate::ptx::PtxHeader`]).
pub fn ptx_version(ptx: &str) -> Option<(u16, u16)> {
    crate::ptx::PtxHeader::parse(ptx).version_number()
}

/// The byte ranges, in an ELF image (a cubin), of the named symbols' initial data, from one parse
/// of the image: where the driver takes each variable's value from when it loads the image
/// (`.nv.constant3` for a `.const` variable). `None` for a name when the image does not parse, the
/// symbol is absent or undefined, or its section has no data in the file (`NOBITS`) for all of
/// its bytes.
pub fn symbol_data_ranges<const N: usize>(elf: &[u8], names: [&str; N]) -> [Option<std::ops::Range<usize>>; N] {
    use object::{Object, ObjectSection, ObjectSymbol};
    let Ok(file) = object::File::parse(elf) else { return std::array::from_fn(|_| None) };
    let range_of = |name: &str| -> Option<std::ops::Range<usize>> {
        let symbol = file.symbols().find(|s| s.name() == Ok(name))?;
        let section = file.section_by_index(symbol.section_index()?).ok()?;
        let (offset, len) = section.file_range()?;
        let start = offset.checked_add(symbol.address().checked_sub(section.address())?)?;
        let end = start.checked_add(symbol.size())?;
        (end <= offset.checked_add(len)? && end <= elf.len() as u64).then_some(start as usize..end as usize)
    };
    names.map(range_of)
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

    fn entry(kind: EntryKind, arch: u32, flags: u64, payload: &[u8], uncompressed_size: u64) -> Vec<u8> {
        let padded = payload.len().div_ceil(8) * 8;
        let compressed_size = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 { payload.len() as u32 } else { 0 };
        let header = FatbinEntryHeader {
            kind: kind.raw(),
            header_version: ENTRY_HEADER_VERSION,
            header_size: FatbinEntryHeader::SIZE as u32,
            payload_size: padded as u64,
            compressed_size,
            arch,
            flags,
            uncompressed_size,
            ..FatbinEntryHeader::default()
        };
        let mut e = header.to_bytes().to_vec();
        e.extend_from_slice(payload);
        e.resize(FatbinEntryHeader::SIZE + padded, 0);
        e
    }

    pub(crate) fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut b = FatbinHeader::new(body.len() as u64).to_bytes().to_vec();
        b.extend_from_slice(&body);
        b
    }

    /// The layouts' bytes spelled out by hand (as nvcc writes them, and as this module wrote them
    /// before the structs): a reordered field would go unnoticed by a reader and writer that agree.
    #[test]
    fn built_fatbin_has_nvcc_byte_layout() {
        let fb = build_elf_fatbin(b"\x7fELF", 90, true);
        let mut want = Vec::new();
        want.extend_from_slice(&[0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0]); // magic, version 1, header size 16
        want.extend_from_slice(&72u64.to_le_bytes()); // entries: one 64-byte header + 8 bytes
        want.extend_from_slice(&[2, 0, 0x01, 0x01, 64, 0, 0, 0]); // kind ELF, header version 0x101, header size 64
        want.extend_from_slice(&8u64.to_le_bytes()); // padded payload size
        want.extend_from_slice(&[0; 8]); // compressed size, options offset
        want.extend_from_slice(&[8, 0, 1, 0, 90, 0, 0, 0]); // version 1.8 (minor first), sm_90
        want.extend_from_slice(&[0; 8]); // identifier offset and length
        want.extend_from_slice(&0x100011u64.to_le_bytes()); // arch-specific, Linux host, 64-bit
        want.extend_from_slice(&[0; 16]); // reserved, uncompressed size
        want.extend_from_slice(b"\x7fELF\0\0\0\0");
        assert_eq!(fb, want);
        let header = FatbinHeader::parse(&fb).unwrap();
        assert_eq!((header.header_size, header.payload_size), (16, 72));
        let elf = Elf64Header {
            ei_magic: *b"\x7fELF",
            ei_class: ELFCLASS64,
            ei_data: ELFDATA2LSB,
            e_phoff: 64,
            e_phentsize: 56,
            e_phnum: 2,
            e_shoff: 4096,
            e_shentsize: 64,
            e_shnum: 10,
            ..Elf64Header::default()
        };
        let bytes = elf.to_bytes();
        assert_eq!((bytes[4], bytes[5], bytes[0x20], bytes[0x28..0x2a].to_vec(), bytes[0x3a], bytes[0x3c]), (2, 1, 64, vec![0x00, 0x10], 64, 10));
        assert_eq!(image_len(&bytes).unwrap(), ImageLen::Bytes(4096 + 640));
    }

    #[test]
    fn short_headers_are_truncated_not_misread() {
        let fb = build_ptx_fatbin(".version 8.0\n", 90, (8, 0));
        assert_eq!(Fatbin::parse(&fb[..10]), Err(ContainerError::Truncated { what: "fatbin header", at: 0, need: 16, have: 10 }));
        // A fatbin whose entries are 12 bytes: too few for an entry header.
        let mut short = FatbinHeader::new(12).to_bytes().to_vec();
        short.extend_from_slice(&fb[16..28]);
        assert_eq!(Fatbin::parse(&short), Err(ContainerError::Truncated { what: "entry header", at: 16, need: 64, have: 12 }));
        // Zero padding after the last entry is not an entry.
        let mut padded = FatbinHeader::new(fb.len() as u64 - 16 + 8).to_bytes().to_vec();
        padded.extend_from_slice(&fb[16..]);
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(Fatbin::parse(&padded).unwrap().entries.len(), 1);
        assert!(matches!(image_len(b"\x7fELF\x02\x01\x01\0"), Err(ContainerError::Truncated { what: "ELF header", need: 64, .. })));
        assert!(matches!(image_len(b"\x7fELF\x01\x01\x01\0"), Err(ContainerError::Elf(_))));
    }

    #[test]
    fn parses_entries_and_picks_best_ptx() {
        let ptx75 = b".version 7.0\n.target sm_75\n";
        let ptx90 = b".version 8.0\n.target sm_90\n";
        let lz = lz4_flex::block::compress(ptx90);
        let fb = fatbin(&[
            entry(EntryKind::Ptx, 75, FLAG_64BIT | FLAG_HOST_LINUX, ptx75, 0),
            entry(EntryKind::Ptx, 90, FLAG_64BIT | FLAG_HOST_LINUX | FLAG_LZ4, &lz, ptx90.len() as u64),
            entry(EntryKind::Elf, 90, FLAG_64BIT | FLAG_HOST_LINUX, b"\x7fELF....", 0),
        ]);
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
