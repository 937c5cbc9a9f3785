//! Recognition of memory instructions: which statements touch global memory, where their address
//! operand is, how wide they are, and whether they read, write or both.

use super::opcode::{Op, Opcode, SplitBytes};
use crate::abi::AccessKind;

/// Why a memory-like statement gets no check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum SkipReason {
    /// `.shared`, `.local`, `.param`, `.const` state space.
    NotGlobalSpace,
    /// `[var]` of a module-scope variable: never pool memory.
    ModuleVariable,
    /// `prefetch`, `prefetchu`, `cp.async.bulk.prefetch`: hints that never fault.
    Prefetch,
    /// TMA tensor copies: validated on the host when the tensor map is encoded.
    Tensor,
    /// `multimem.*`: multicast addresses outside the pool.
    Multicast,
    /// Opcodes that address shared memory, registers, textures or tensor memory only.
    NonGlobalOpcode,
}

impl SkipReason {
    /// The name used in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotGlobalSpace => "NotGlobalSpace",
            Self::ModuleVariable => "ModuleVariable",
            Self::Prefetch => "Prefetch",
            Self::Tensor => "Tensor",
            Self::Multicast => "Multicast",
            Self::NonGlobalOpcode => "NonGlobalOpcode",
        }
    }
}

/// Where the address of a checked access comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AddrBase {
    Reg(String),
    Imm(u64),
}

/// The width of a checked access.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    Fixed(u32),
    /// Bulk copies: first and last byte of a register-sized range are checked.
    Reg(String),
    /// A `wmma` tile whose stride (in elements) is in a register: `stride * per_stride + row`
    /// bytes ([`WmmaTile`]), first and last byte checked.
    Tile {
        stride: String,
        per_stride: u32,
        row: u32,
    },
}

/// The extent of a `wmma` fragment's tile in memory: the matrix (`a`: M x K, `b`: K x N,
/// `c`/`d`: M x N of the shape `mMnNkK`) is stored by rows (`row`) or by columns (`col`) `stride`
/// elements apart, so from the tile's address to the end of its last element there are
/// `(outer - 1) * stride + inner` elements: `per_stride * stride + row` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WmmaTile {
    /// Elements of one row (column, for `col`): the least stride, and the stride when absent.
    pub inner: i64,
    /// (outer - 1) x element size.
    pub per_stride: i64,
    /// inner x element size.
    pub row: i64,
}

impl WmmaTile {
    /// The tile of a `wmma.load`/`wmma.store` (its opcode's qualifiers), or `None` for what is not
    /// modelled: sub-byte types, unknown shapes, matrices or layouts.
    pub(crate) fn of(quals: &[&str]) -> Option<Self> {
        let matrix = *quals.get(2)?;
        let shape = quals.iter().find(|q| q.starts_with('m') && q.contains('n') && q.contains('k'))?;
        let dim = |c: char| -> Option<i64> {
            let at = shape.find(c)? + 1;
            shape[at..].split(|x: char| !x.is_ascii_digit()).next()?.parse().ok()
        };
        let (m, n, k) = (dim('m')?, dim('n')?, dim('k')?);
        let (rows, cols) = match matrix {
            "a" => (m, k),
            "b" => (k, n),
            "c" | "d" => (m, n),
            _ => return None,
        };
        let (outer, inner) = if quals.contains(&"row") {
            (rows, cols)
        } else if quals.contains(&"col") {
            (cols, rows)
        } else {
            return None;
        };
        let elem = match *quals.last()? {
            "s8" | "u8" => 1,
            "f16" | "bf16" => 2,
            "tf32" | "f32" | "s32" => 4,
            "f64" => 8,
            _ => return None,
        };
        (outer >= 1 && inner >= 1).then_some(WmmaTile { inner, per_stride: (outer - 1) * elem, row: inner * elem })
    }

    /// Bytes of the tile at `stride` elements (`None`: the default, dense); `None` when rows would
    /// overlap (not a layout nvcc emits) or the size overflows.
    pub(crate) fn bytes(&self, stride: Option<i64>) -> Option<u32> {
        let stride = stride.unwrap_or(self.inner);
        if stride < self.inner {
            return None;
        }
        u32::try_from(self.per_stride.checked_mul(stride)?.checked_add(self.row)?).ok()
    }
}

/// The state spaces of an asynchronous copy's (`cp.async`, `cp.async.bulk`,
/// `cp.reduce.async.bulk`) destination and source: the first two named after the opcode, in that
/// order.
fn copy_spaces<'q>(quals: &[&'q str]) -> Vec<&'q str> {
    quals.iter().copied().filter(|q| q.starts_with("global") || q.starts_with("shared")).take(2).collect()
}

/// An asynchronous copy's size operand: `cp.async`'s cp-size (an immediate of 1 to 16 bytes), a
/// bulk copy's immediate or register; `None` for anything else.
fn copy_size(ins: &Instr<'_>, quals: &[&str]) -> Option<Width> {
    let size = ins.operands.get(2).map(|s| s.trim()).unwrap_or("");
    let bulk = quals.contains(&"bulk");
    match parse_int(size) {
        Some(n) if bulk && n > 0 => Some(Width::Fixed(n as u32)),
        Some(n) if !bulk && (1..=16).contains(&n) => Some(Width::Fixed(n as u32)),
        None if bulk && size.starts_with('%') => Some(Width::Reg(size.to_string())),
        _ => None,
    }
}

/// The state space of an access's address, as its opcode names it: decided here once, for the
/// global checks ([`classify`]: [`Space::Global`] and [`Space::Generic`]) and the shared/local
/// ones (spaces.rs: [`Space::Shared`], [`Space::Local`], and generic addresses traced to a
/// variable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::ptx) enum Space {
    /// No space named: a generic address.
    Generic,
    /// `.global`; for loads and stores also any qualifier starting `global` or `tex`, and one
    /// starting `param`/`const` with more than a `::` sub-qualifier after it.
    Global,
    /// `.shared`, `.shared::cta`: the CTA's own shared memory.
    Shared,
    /// `.shared::cluster`: any CTA's of the cluster.
    SharedCluster,
    Local,
    /// `.param`, `.param::entry`, `.param::func`.
    Param,
    /// `.const`, `.const::…`.
    Const,
    /// A `shared::`/`local::` sub-qualifier PTX does not have (`ld.local::x`), or two spaces: the
    /// global checks take it as not global, the shared/local checks as generic when
    /// `other_named` is false and as none of theirs when it is. (The two decoders this one
    /// replaced disagreed on such opcodes; each keeps its reading, which a `REVISION` bump may
    /// unify.)
    Malformed {
        other_named: bool,
    },
}

impl Space {
    /// Whether the global checks take an access in this space.
    pub(in crate::ptx) fn global_or_generic(self) -> bool {
        matches!(self, Space::Global | Space::Generic)
    }

    /// The space of an `ld`/`ldu`/`st`/`atom`/`red` (`parts`: the opcode's parts): each part
    /// looked at once, by its first byte, for what the rules below ask of it (they asked each
    /// question of every part: a fifth of classifying an access).
    fn of_load_store(parts: &[&str]) -> Space {
        // Whether `q` is `s` or `s::...`.
        let family = |q: &str, s: &str| q.strip_prefix(s).is_some_and(|r| r.is_empty() || r.starts_with("::"));
        let (mut shared_family, mut local_family, mut param_family, mut const_family) = (false, false, false, false);
        let (mut shared, mut local, mut shared_cluster, mut global_like) = (false, false, false, false);
        for &q in parts {
            match q.as_bytes().first() {
                Some(b's') => {
                    shared_family |= family(q, "shared");
                    shared |= matches!(q, "shared" | "shared::cta");
                    shared_cluster |= q == "shared::cluster";
                    global_like |= q.starts_with("shared::cluster");
                }
                Some(b'l') => {
                    local_family |= family(q, "local");
                    local |= q == "local";
                }
                Some(b'p') => {
                    param_family |= family(q, "param");
                    global_like |= q.starts_with("param");
                }
                Some(b'c') => {
                    const_family |= family(q, "const");
                    global_like |= q.starts_with("const");
                }
                Some(b'g') => global_like |= q.starts_with("global"),
                Some(b't') => global_like |= q.starts_with("tex"),
                _ => {}
            }
        }
        let not_global = shared_family || local_family || param_family || const_family;
        if shared {
            Space::Shared
        } else if local {
            Space::Local
        } else if global_like {
            if !not_global {
                Space::Global
            } else if shared_cluster {
                Space::SharedCluster
            } else if param_family {
                Space::Param
            } else if const_family {
                Space::Const
            } else {
                Space::Malformed { other_named: true }
            }
        } else if not_global {
            Space::Malformed { other_named: false }
        } else {
            Space::Generic
        }
    }

    /// The space of a `wmma` load or store, which names `.global` or `.shared{::cta}` or none.
    fn of_wmma(parts: &[&str]) -> Space {
        let shared_family = parts.iter().any(|q| q.strip_prefix("shared").is_some_and(|r| r.is_empty() || r.starts_with("::")));
        if parts.iter().any(|q| q.starts_with("global")) {
            if shared_family {
                Space::Malformed { other_named: true }
            } else {
                Space::Global
            }
        } else if parts.iter().any(|q| matches!(*q, "shared" | "shared::cta")) {
            Space::Shared
        } else if shared_family {
            Space::Malformed { other_named: false }
        } else {
            Space::Generic
        }
    }

    /// The space of one of an asynchronous copy's operands, from its qualifier ([`copy_spaces`]).
    fn of_copy_operand(q: &str) -> Space {
        match q {
            "shared" | "shared::cta" => Space::Shared,
            "shared::cluster" => Space::SharedCluster,
            _ if q.starts_with("global") => Space::Global,
            _ => Space::Malformed { other_named: false },
        }
    }
}

/// How many bytes from an access's address it touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) enum Extent<'a> {
    Bytes(u32),
    /// A `wmma` tile and its stride operand (absent: dense).
    Tile {
        tile: WmmaTile,
        stride: Option<&'a str>,
    },
    /// An asynchronous copy's size operand ([`copy_size`]).
    Copy(Width),
}

/// One memory access of an instruction, in whichever space: the one decoder of the state space,
/// address operand and extent of `ld`/`ldu`/`st`/`atom`/`red`, `cp.async` copies and reductions,
/// `ldmatrix`/`stmatrix` and `wmma` loads and stores, which the global checks ([`classify`])
/// and the shared/local ones (spaces.rs) read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct MemAccess<'a> {
    pub space: Space,
    /// The operand holding the address (for a `wmma` neither load nor store, whose `extent` is
    /// `None`: 0).
    pub addr_idx: usize,
    pub kind: AccessKind,
    /// `None`: not understood (an unknown type, vector count, tile or copy size).
    pub extent: Option<Extent<'a>>,
    /// The lanes of the warp that supply an address (`ldmatrix`/`stmatrix` `.x1`/`.x2` read the
    /// addresses of lanes 0-7 / 0-15 only; the others' may be anything).
    pub lanes: u32,
}

/// The memory accesses of an instruction ([`MemAccess`]; `parts`: its opcode's parts): one, or
/// for an asynchronous copy its destination and its source, in that order. `None` where there
/// is none to decode: other opcodes, `st.async`/`red.async` (another CTA's memory), asynchronous
/// tensor copies and prefetches, `ldmatrix`/`stmatrix` other than `.m8n8` `.b16` rows in the
/// CTA's shared memory.
pub(in crate::ptx) fn decode<'a>(ins: &Instr<'a>, parts: &[&'a str]) -> [Option<MemAccess<'a>>; 2] {
    let op = ins.opcode.op;
    let one = |a: MemAccess<'a>| [Some(a), None];
    match op {
        _ if op.is_load_store() && !(matches!(op, Op::St | Op::Red) && ins.opcode.first_qual() == Some("async")) => {
            let (addr_idx, kind) = match op {
                Op::Ld | Op::Ldu => (1, AccessKind::Read),
                Op::St | Op::Red => (0, AccessKind::Write),
                _ => (1, AccessKind::Atomic),
            };
            let bytes = || Some(vector_count(parts)? * parts.iter().rev().find_map(|q| type_size(q))?);
            one(MemAccess { space: Space::of_load_store(parts), addr_idx, kind, extent: bytes().map(Extent::Bytes), lanes: 32 })
        }
        // cp.async.{ca,cg}.shared{::cta}.global [dst], [src], cp-size{, src-size}: cp-size bytes
        // (zeros past src-size). cp.async.bulk.<dst>.<src>... [dst], [src], size and
        // cp.reduce.async.bulk.<dst>.<src>... [dst], [src], size.
        Op::Cp if matches!(parts.get(1), Some(&"async") | Some(&"reduce")) && !parts.iter().any(|q| matches!(*q, "tensor" | "prefetch")) => {
            let extent = copy_size(ins, parts).map(Extent::Copy);
            let mut out = [None, None];
            for (i, q) in copy_spaces(parts).into_iter().enumerate() {
                let kind = if i == 0 { AccessKind::Write } else { AccessKind::Read };
                out[i] = Some(MemAccess { space: Space::of_copy_operand(q), addr_idx: i, kind, extent: extent.clone(), lanes: 32 });
            }
            out
        }
        // ldmatrix.sync.aligned.m8n8.x4{.trans}.shared{::cta}.b16 d, [p] (stmatrix: [p], s): each
        // supplying lane names one 16-byte row of 8 b16 elements.
        Op::LdMatrix | Op::StMatrix if parts.contains(&"m8n8") && parts.contains(&"b16") && parts.iter().any(|q| matches!(*q, "shared" | "shared::cta")) => {
            let lanes = match parts.iter().find(|q| q.starts_with('x')) {
                Some(&"x1") => 8,
                Some(&"x2") => 16,
                Some(&"x4") => 32,
                _ => return [None, None],
            };
            let (addr_idx, kind) = if op == Op::LdMatrix { (1, AccessKind::Read) } else { (0, AccessKind::Write) };
            one(MemAccess { space: Space::Shared, addr_idx, kind, extent: Some(Extent::Bytes(16)), lanes })
        }
        // wmma.load.{a,b,c}.sync.aligned.{row,col}.shape{.space}.type r, [p]{, stride} and
        // wmma.store.d...[p], r{, stride}: the warp's whole tile.
        Op::Wmma => {
            let (addr_idx, kind, tile) = match parts.get(1) {
                Some(&"load") => (1, AccessKind::Read, WmmaTile::of(parts)),
                Some(&"store") => (0, AccessKind::Write, WmmaTile::of(parts)),
                _ => (0, AccessKind::Read, None),
            };
            let extent = tile.map(|tile| Extent::Tile { tile, stride: ins.operands.get(2).map(|s| s.trim()) });
            one(MemAccess { space: Space::of_wmma(parts), addr_idx, kind, extent, lanes: 32 })
        }
        _ => [None, None],
    }
}

/// A global or generic access that gets a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub base: AddrBase,
    pub offset: i64,
    pub width: Width,
    pub kind: AccessKind,
    /// Destination registers of a load or atomic (zeroed when recover mode skips the access).
    pub dests: Vec<String>,
    /// Bulk range: check the first and the last byte instead of one access.
    pub bulk: bool,
    /// `cp.async` with a register `src-size`: a zero size copies nothing (zero fill) and is not checked.
    pub guard_nonzero: Option<String>,
}

/// Classification of one statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classified {
    NotMemory,
    /// (Boxed: every parsed statement holds a `Classified` in place, and an `Access` is some 90
    /// bytes more than the other variants while about one statement in ten is one. The lines of
    /// a module are read into one vector up front, so its size is memory written, copied between
    /// the reading threads and dropped for every line.)
    Check(Box<Access>),
    Skip(SkipReason),
    /// Looks like a memory instruction but is not understood: left alone and counted.
    Unknown(String),
}

/// A statement split into its parts: `@%p opcode operands;`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instr<'a> {
    /// The guard predicate including `!`, e.g. `%p1` or `!%p1`.
    pub guard: Option<&'a str>,
    pub opcode: Opcode<'a>,
    pub operands: Operands<'a>,
}

/// An instruction's top-level operands: up to [`Operands::INLINE`] held in place (most
/// instructions have two to four), more in a vector. Every parsed statement has one, so this
/// spares an allocation (and a reallocation past four) per instruction. Reads as a slice. (Also
/// an opcode's parts where a pass wants them as a slice: most opcodes have four or fewer.)
#[derive(Clone)]
pub enum Operands<'a> {
    /// The first `len` of `ops`.
    Inline { ops: [&'a str; Operands::INLINE], len: u8 },
    /// All the operands, once there are more than fit inline. (An enum, not both side by side:
    /// every parsed statement holds one, and the vector's place would make each line 24 bytes
    /// larger.)
    Spill(Vec<&'a str>),
}

impl<'a> Operands<'a> {
    pub const INLINE: usize = 4;

    pub(in crate::ptx) fn new() -> Self {
        Operands::Inline { ops: [""; Self::INLINE], len: 0 }
    }

    /// (Always inlined: the statement decoder pushes every operand, and the call cost as much as
    /// the push.)
    #[inline(always)]
    pub(in crate::ptx) fn push(&mut self, o: &'a str) {
        match self {
            Operands::Inline { ops, len } if usize::from(*len) < Self::INLINE => {
                ops[usize::from(*len)] = o;
                *len += 1;
            }
            Operands::Inline { ops, .. } => {
                let mut spill = Vec::with_capacity(2 * Self::INLINE);
                spill.extend_from_slice(ops);
                spill.push(o);
                *self = Operands::Spill(spill);
            }
            Operands::Spill(spill) => spill.push(o),
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[&'a str] {
        match self {
            Operands::Inline { ops, len } => &ops[..usize::from(*len)],
            Operands::Spill(spill) => spill,
        }
    }
}

impl<'a> std::ops::Deref for Operands<'a> {
    type Target = [&'a str];

    #[inline]
    fn deref(&self) -> &[&'a str] {
        self.as_slice()
    }
}

impl<'a> FromIterator<&'a str> for Operands<'a> {
    fn from_iter<I: IntoIterator<Item = &'a str>>(iter: I) -> Self {
        let mut out = Operands::new();
        for o in iter {
            out.push(o);
        }
        out
    }
}

impl PartialEq for Operands<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Operands<'_> {}

impl std::fmt::Debug for Operands<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// Splits a statement (without the trailing `;`) into guard, opcode and top-level operands.
pub fn split_instr(stmt: &str) -> Option<Instr<'_>> {
    let mut s = trim(stmt);
    let mut guard = None;
    if let Some(rest) = s.strip_prefix('@') {
        let end = find_whitespace(rest)?;
        guard = Some(&rest[..end]);
        s = trim_start(&rest[end..]);
    }
    // The opcode runs to the first whitespace and its name to the opcode's first `.`: both found
    // in one pass over its bytes, a table lookup a byte (the statement decoder runs on every
    // statement, and these scans were most of it). A non-ASCII byte hands the rest of the
    // opcode to the `char` searches ([`find_whitespace`], [`Opcode::parse`]), which decide there.
    let b = s.as_bytes();
    if !b.first()?.is_ascii_alphabetic() {
        return None;
    }
    let (mut end, mut dot, mut ascii) = (b.len(), None, true);
    for (i, &c) in b.iter().enumerate().skip(1) {
        let class = BYTE_CLASS[usize::from(c)];
        if class & (WHITESPACE | NON_ASCII | DOT) == 0 {
            continue;
        }
        if class & DOT != 0 {
            dot.get_or_insert(i);
            continue;
        }
        ascii = class & NON_ASCII == 0;
        end = i;
        break;
    }
    let opcode = if ascii {
        Opcode { text: &s[..end], op: Op::from_name(&s[..dot.unwrap_or(end)]) }
    } else {
        end = find_whitespace(s).unwrap_or(s.len());
        Opcode::parse(&s[..end])
    };
    // (One call: inlined here, the operands are written in place.)
    Some(Instr { guard, opcode, operands: split_operands(&s[end..])? })
}

/// [`BYTE_CLASS`] bits: ASCII whitespace as `char::is_whitespace` sees it ([`ascii_whitespace`]).
const WHITESPACE: u8 = 1;
/// A byte of a multi-byte character.
const NON_ASCII: u8 = 2;
const DOT: u8 = 4;
/// `[`, `{`, `(`.
const OPEN: u8 = 8;
/// `]`, `}`, `)`.
const CLOSE: u8 = 16;
const COMMA: u8 = 32;

/// The class of each byte the statement decoder tells apart ([`split_instr`],
/// [`split_operands`]): one lookup a byte instead of a chain of compares.
static BYTE_CLASS: [u8; 256] = {
    let mut t = [0; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c >= 0x80 {
            NON_ASCII
        } else if ascii_whitespace(c) {
            WHITESPACE
        } else {
            match c {
                b'.' => DOT,
                b'[' | b'{' | b'(' => OPEN,
                b']' | b'}' | b')' => CLOSE,
                b',' => COMMA,
                _ => 0,
            }
        };
        b += 1;
    }
    t
};

/// `s.trim_start()`: byte by byte while the bytes are ASCII, as PTX is (the `char` searcher
/// behind `str::trim_start` costs several times more per call, and every operand is trimmed);
/// from a first non-ASCII byte on, `str::trim_start` decides (it may start a Unicode space).
#[inline]
pub(in crate::ptx) fn trim_start(s: &str) -> &str {
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if !b.is_ascii() {
            return s[i..].trim_start();
        }
        if !ascii_whitespace(b) {
            return &s[i..];
        }
    }
    ""
}

/// `s.trim_end()`, as [`trim_start`].
#[inline]
pub(in crate::ptx) fn trim_end(s: &str) -> &str {
    for (i, &b) in s.as_bytes().iter().enumerate().rev() {
        if !b.is_ascii() {
            return s[..=i].trim_end();
        }
        if !ascii_whitespace(b) {
            return &s[..=i];
        }
    }
    ""
}

/// `s.trim()`, as [`trim_start`].
#[inline]
pub(in crate::ptx) fn trim(s: &str) -> &str {
    trim_end(trim_start(s))
}

/// The ASCII bytes `char::is_whitespace` takes: `u8::is_ascii_whitespace` and the vertical tab.
#[inline]
pub(in crate::ptx) const fn ascii_whitespace(b: u8) -> bool {
    b.is_ascii_whitespace() || b == 0x0b
}

/// `s.rfind(char::is_whitespace)`, as [`find_whitespace`] from the end.
#[inline]
pub(in crate::ptx) fn rfind_whitespace(s: &str) -> Option<usize> {
    for (i, &b) in s.as_bytes().iter().enumerate().rev() {
        if !b.is_ascii() {
            return s.rfind(char::is_whitespace);
        }
        if ascii_whitespace(b) {
            return Some(i);
        }
    }
    None
}

/// Byte offset of the first whitespace character of `s` (as `s.find(char::is_whitespace)`):
/// byte by byte while the text is ASCII, as PTX is, decoding characters only from the first
/// other byte on.
#[inline]
pub(in crate::ptx) fn find_whitespace(s: &str) -> Option<usize> {
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if !b.is_ascii() {
            return s[i..].find(char::is_whitespace).map(|j| i + j);
        }
        if ascii_whitespace(b) {
            return Some(i);
        }
    }
    None
}

/// Splits on commas that are not inside `[]`, `{}` or `()`; `None` when those do not balance (no
/// PTX operand list, and passes copy operands into added lines, which must balance their braces).
/// (Byte by byte: the delimiters are ASCII, and no byte of a multi-byte character is.)
fn split_operands(s: &str) -> Option<Operands<'_>> {
    let mut out = Operands::new();
    let b = s.as_bytes();
    let (mut depth, mut start, mut i) = (0i32, 0usize, 0usize);
    // (An index loop: the iterator's form kept three counters a byte.)
    while i < b.len() {
        let class = BYTE_CLASS[usize::from(b[i])];
        if class & (OPEN | CLOSE | COMMA) != 0 {
            if class & OPEN != 0 {
                depth += 1;
            } else if class & CLOSE != 0 {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            } else if depth == 0 {
                out.push(trim_operand(&s[start..i]));
                start = i + 1;
            }
        }
        i += 1;
    }
    if depth != 0 {
        return None;
    }
    let last = trim_operand(&s[start..]);
    if !last.is_empty() {
        out.push(last);
    }
    Some(out)
}

/// [`trim`] of an operand, its ends found with [`BYTE_CLASS`] (a lookup a byte, inlined: every
/// operand of every statement is trimmed); a non-ASCII byte at either end hands the operand to
/// `str::trim` (it may end in a Unicode space).
#[inline(always)]
fn trim_operand(s: &str) -> &str {
    let b = s.as_bytes();
    let (mut from, mut to) = (0, b.len());
    while from < to && BYTE_CLASS[usize::from(b[from])] & WHITESPACE != 0 {
        from += 1;
    }
    while to > from && BYTE_CLASS[usize::from(b[to - 1])] & WHITESPACE != 0 {
        to -= 1;
    }
    if from < to && (!b[from].is_ascii() || !b[to - 1].is_ascii()) {
        return s.trim();
    }
    &s[from..to]
}

/// Instructions that take a bracketed operand but never address global memory (through that
/// operand): matrix, barrier, texture and surface instructions, address conversions and queries,
/// asynchronous stores and reductions to other CTAs, and calls.
fn addresses_no_global(o: Opcode<'_>) -> bool {
    use Op::*;
    match o.op {
        LdMatrix | StMatrix | Mbarrier | Tex | Tld4 | Suld | Sust | Sured | Suq | Txq | Wgmma | Tcgen05 | ApplyPriority | Discard | CreatePolicy | IsSpaceP | Cvta | Mapa | GetCtaRank | TensorMap
        | Elect | SetMaxNReg | Barrier | Bar | Call | IsTypeP | ClusterLaunchControl | MovMatrix => true,
        St | Red => o.first_qual() == Some("async"),
        _ => false,
    }
}

/// Elements per access from an opcode's qualifiers: 1 without `.vN`, N for `.v2`/`.v4`/`.v8`,
/// `None` for any other vector count (malformed: `.v0` would make a zero-width access).
pub(in crate::ptx) fn vector_count(quals: &[&str]) -> Option<u32> {
    match quals.iter().find_map(|q| q.strip_prefix('v').and_then(|n| n.parse::<u32>().ok())) {
        None => Some(1),
        Some(n @ (2 | 4 | 8)) => Some(n),
        Some(_) => None,
    }
}

pub(in crate::ptx) fn type_size(q: &str) -> Option<u32> {
    Some(match q {
        "b8" | "u8" | "s8" => 1,
        "b16" | "u16" | "s16" | "f16" | "bf16" | "e4m3x2" | "e5m2x2" => 2,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" | "tf32" => 4,
        "b64" | "u64" | "s64" | "f64" => 8,
        "b128" => 16,
        _ => return None,
    })
}

/// Parses `[reg]`, `[reg+imm]`, `[reg+-imm]`, `[var]`, `[var+imm]`, `[imm]`.
/// Returns `Err(())` for a module variable.
pub(in crate::ptx) fn parse_address(op: &str) -> Option<Result<(AddrBase, i64), ()>> {
    let inner = trim(trim(op).strip_prefix('[')?.strip_suffix(']')?);
    let (base, off) = match inner.find('+') {
        Some(p) => (trim(&inner[..p]), trim(&inner[p + 1..])),
        None => match inner.rfind('-') {
            Some(p) if p > 0 => (trim(&inner[..p]), &inner[p..]),
            _ => (inner, ""),
        },
    };
    let offset = if off.is_empty() { 0 } else { parse_int(off)? };
    if let Some(name) = base.strip_prefix('%') {
        // A register's name only: the checks copy it into the lines they add, so any other text
        // (a brace or bracket of malformed input) would break the function's structure there.
        let register = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$');
        register.then(|| Ok((AddrBase::Reg(base.to_string()), offset)))
    } else if let Some(v) = parse_int(base) {
        Some(Ok((AddrBase::Imm(v as u64), offset)))
    } else if base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$') {
        Some(Err(()))
    } else {
        None
    }
}

pub(crate) fn parse_int(s: &str) -> Option<i64> {
    let s = trim(s);
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, trim(r)),
        None => (false, s),
    };
    let s = s.strip_suffix('U').unwrap_or(s);
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok().or_else(|| u64::from_str_radix(h, 16).ok().map(|v| v as i64))?
    } else {
        s.parse::<i64>().ok()?
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// The registers a destination operand names: a vector's elements (`{%r1, %r2}`), both of a
/// `setp`'s `%p|%q`, or the one register; never an address or a call's `(%r1)` return list. The
/// one reading of destinations every pass uses ([`Instr::dests`]).
fn registers_written(op: &str) -> Dests<'_> {
    Dests(SplitBytes::new(trim_braces(op)))
}

/// `op.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace())`: byte by byte while the
/// bytes are ASCII (as [`trim`]), `str::trim_matches` itself from a first other byte on.
fn trim_braces(op: &str) -> &str {
    let trimmed = |b: u8| b == b'{' || b == b'}' || ascii_whitespace(b);
    let b = op.as_bytes();
    let mut start = 0;
    while start < b.len() && b[start].is_ascii() && trimmed(b[start]) {
        start += 1;
    }
    let mut end = b.len();
    while end > start && b[end - 1].is_ascii() && trimmed(b[end - 1]) {
        end -= 1;
    }
    // (A non-ASCII byte where the trims stopped may begin or end a Unicode space.)
    if (start < b.len() && !b[start].is_ascii()) || (end > start && !b[end - 1].is_ascii()) {
        return op.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace());
    }
    &op[start..end]
}

/// [`registers_written`]: the pieces between `,` and `|`, trimmed, that name a register.
#[derive(Clone, Debug)]
pub struct Dests<'a>(SplitBytes<'a, b',', b'|'>);

impl Dests<'_> {
    /// No registers (a statement that is no instruction).
    pub(in crate::ptx) fn none() -> Self {
        Dests(SplitBytes::none())
    }
}

impl<'a> Iterator for Dests<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        self.0.by_ref().map(trim).find(|piece| piece.starts_with('%'))
    }
}

impl<'a> Instr<'a> {
    /// The registers the instruction writes: its first operand's, for every instruction but
    /// stores and reductions (whose first operand is the address).
    #[inline]
    pub fn dests(&self) -> Dests<'a> {
        let first = match self.opcode.op {
            Op::St | Op::Red => "",
            _ => self.operands.first().copied().unwrap_or(""),
        };
        registers_written(first)
    }

    /// The source operands: every operand but a destination ([`Instr::dests`]).
    pub fn sources(&self) -> &[&'a str] {
        if self.dests().next().is_some() {
            &self.operands[1..]
        } else {
            &self.operands
        }
    }

    /// The registers the instruction reads: those in its sources, and its guard.
    pub fn registers_read(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.sources().iter().copied().chain(self.guard.map(|g| g.trim_start_matches('!'))).flat_map(registers_in)
    }
}

/// Register names inside an operand (`%r1`, `[%rd2+4]`, `{%f1, %f2}`).
fn registers_in(op: &str) -> impl Iterator<Item = &str> {
    op.split(|c: char| !(c.is_ascii_alphanumeric() || c == '%' || c == '_' || c == '$' || c == '.')).filter(|t| t.starts_with('%') && !t.contains('.'))
}

/// The registers a checked load or atomic writes ([`Access::dests`]; none for a store, whose address
/// comes first): `None` when its destination is no register and no `{...}` list of registers (text
/// around a vector, `%a {%r8, %r9}`; an empty operand), a malformed access, as a `.v0` vector is.
/// Recover mode copies these registers into added lines (zeroing them when the access is skipped),
/// which must not echo stray braces or other text of the input.
fn access_dests(ins: &Instr<'_>, addr_idx: usize) -> Option<Vec<String>> {
    if addr_idx != 1 {
        return Some(Vec::new());
    }
    let op = trim(ins.operands[0]);
    let list = match op.strip_prefix('{') {
        Some(rest) => rest.strip_suffix('}')?,
        None => op,
    };
    // A register (`%r1`), a vector variable's element (`%v.x`), a name without `%` (inline asm's
    // `t`) or the sink `_`.
    let register = |piece: &str| !piece.is_empty() && piece.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.'));
    list.split(',').map(trim).all(register).then(|| registers_written(op).map(String::from).collect())
}

/// Classifies one instruction.
pub fn classify(ins: &Instr<'_>, global_vars_ok: bool) -> Classified {
    let _ = global_vars_ok;
    let op = ins.opcode.op;
    // Fast exit for the common case: an arithmetic or control statement (no address operand).
    if !op.may_access_memory() && !ins.operands.iter().any(|o| trim_start(o).starts_with('[')) {
        return Classified::NotMemory;
    }
    let quals: Operands<'_> = ins.opcode.parts().collect();

    match op {
        Op::Prefetch | Op::Prefetchu => return Classified::Skip(SkipReason::Prefetch),
        Op::Multimem => return Classified::Skip(SkipReason::Multicast),
        _ => {}
    }
    if addresses_no_global(ins.opcode) {
        let addresses = ins.operands.iter().any(|o| trim_start(o).starts_with('['));
        return if addresses { Classified::Skip(SkipReason::NonGlobalOpcode) } else { Classified::NotMemory };
    }

    match op {
        _ if op.is_load_store() => {
            // (`st.async`/`red.async`, which decode to nothing, are `addresses_no_global`.)
            let [Some(MemAccess { space, addr_idx, kind, extent, .. }), _] = decode(ins, &quals) else {
                return Classified::Unknown(ins.opcode.to_string());
            };
            if !space.global_or_generic() {
                return Classified::Skip(SkipReason::NotGlobalSpace);
            }
            let Some(Extent::Bytes(bytes)) = extent else {
                return Classified::Unknown(ins.opcode.to_string());
            };
            let Some(addr) = ins.operands.get(addr_idx) else {
                return Classified::Unknown(ins.opcode.to_string());
            };
            let (base, offset) = match parse_address(addr) {
                Some(Ok(a)) => a,
                Some(Err(())) => return Classified::Skip(SkipReason::ModuleVariable),
                None => return Classified::Unknown(ins.opcode.to_string()),
            };
            let Some(dests) = access_dests(ins, addr_idx) else {
                return Classified::Unknown(ins.opcode.to_string());
            };
            Classified::Check(Box::new(Access { base, offset, width: Width::Fixed(bytes), kind, dests, bulk: false, guard_nonzero: None }))
        }
        Op::Cp => classify_copy(ins, &quals),
        Op::Wmma => {
            let [Some(a), _] = decode(ins, &quals) else {
                return Classified::Unknown(ins.opcode.to_string());
            };
            // Tensor-core tiles in shared memory are the shared checks' (spaces.rs).
            if !a.space.global_or_generic() {
                return Classified::Skip(SkipReason::NotGlobalSpace);
            }
            classify_wmma(ins, a)
        }
        _ => {
            if ins.operands.iter().any(|o| trim_start(o).starts_with('[')) {
                Classified::Unknown(ins.opcode.to_string())
            } else {
                Classified::NotMemory
            }
        }
    }
}

/// A global or generic `wmma.load`/`wmma.store`: its whole tile, first and last byte (the
/// address is the same for every lane of the warp, so a failed check skips the warp-wide
/// instruction for all of them or none).
fn classify_wmma(ins: &Instr<'_>, a: MemAccess<'_>) -> Classified {
    let unknown = || Classified::Unknown(ins.opcode.to_string());
    let MemAccess { addr_idx, kind, extent: Some(Extent::Tile { tile, stride }), .. } = a else {
        return unknown();
    };
    let Some(op) = ins.operands.get(addr_idx) else {
        return unknown();
    };
    let (base, offset) = match parse_address(op) {
        Some(Ok(a)) => a,
        Some(Err(())) => return Classified::Skip(SkipReason::ModuleVariable),
        None => return unknown(),
    };
    let width = match stride {
        None => tile.bytes(None).map(Width::Fixed),
        Some(s) if s.starts_with('%') => (|| Some(Width::Tile { stride: s.to_string(), per_stride: u32::try_from(tile.per_stride).ok()?, row: u32::try_from(tile.row).ok()? }))(),
        Some(s) => parse_int(s).and_then(|v| tile.bytes(Some(v))).map(Width::Fixed),
    };
    let Some(width) = width else { return unknown() };
    let Some(dests) = access_dests(ins, addr_idx) else { return unknown() };
    Classified::Check(Box::new(Access { base, offset, width, kind, dests, bulk: true, guard_nonzero: None }))
}

fn classify_copy(ins: &Instr<'_>, quals: &[&str]) -> Classified {
    // cp.async.ca.shared.global [dst], [src], cp-size{, src-size}
    // cp.async.bulk.<dst>.<src>... [dst], [src], size ...
    // cp.reduce.async.bulk.<dst>.<src>... [dst], [src], size
    if quals.get(1) != Some(&"async") && quals.get(1) != Some(&"reduce") {
        return Classified::Unknown(ins.opcode.to_string());
    }
    if quals.contains(&"prefetch") {
        return Classified::Skip(SkipReason::Prefetch);
    }
    if quals.contains(&"tensor") {
        return Classified::Skip(SkipReason::Tensor);
    }
    let is_bulk = quals.contains(&"bulk");
    if !is_bulk && quals.len() <= 2 {
        // cp.async.commit_group / wait_group / wait_all carry no address.
        return Classified::NotMemory;
    }
    if !is_bulk && matches!(quals.get(2), Some(q) if q.starts_with("commit") || q.starts_with("wait") || q.starts_with("mbarrier")) {
        return Classified::NotMemory;
    }
    if is_bulk && matches!(quals.last(), Some(q) if q.starts_with("commit") || q.starts_with("wait")) {
        return Classified::NotMemory;
    }
    let Some(global) = decode(ins, quals).into_iter().flatten().find(|a| a.space == Space::Global) else {
        return Classified::Skip(SkipReason::NotGlobalSpace);
    };
    let Some(op) = ins.operands.get(global.addr_idx) else {
        return Classified::Unknown(ins.opcode.to_string());
    };
    let (base, offset) = match parse_address(op) {
        Some(Ok(a)) => a,
        Some(Err(())) => return Classified::Skip(SkipReason::ModuleVariable),
        None => return Classified::Unknown(ins.opcode.to_string()),
    };
    let kind = global.kind;
    let Some(Extent::Copy(size)) = global.extent else {
        return Classified::Unknown(ins.opcode.to_string());
    };
    if is_bulk {
        return Classified::Check(Box::new(Access { base, offset, width: size, kind, dests: vec![], bulk: true, guard_nonzero: None }));
    }
    let Width::Fixed(mut width) = size else {
        return Classified::Unknown(ins.opcode.to_string());
    };
    let mut guard_nonzero = None;
    if let Some(src_size) = ins.operands.get(3).map(|s| s.trim()) {
        if let Some(n) = parse_int(src_size) {
            if n == 0 {
                return Classified::NotMemory;
            }
            width = (n as u32).min(width);
        } else if src_size.starts_with('%') {
            guard_nonzero = Some(src_size.to_string());
        }
    }
    Classified::Check(Box::new(Access { base, offset, width: Width::Fixed(width), kind, dests: vec![], bulk: false, guard_nonzero }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Classified {
        classify(&split_instr(s).unwrap(), true)
    }

    #[test]
    fn wmma_tiles_in_global_memory_are_checked_whole() {
        let frag = "{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}";
        // Stride in a register: the tile's byte count is computed (col-major A: 15 columns of
        // stride elements, then 16 halves).
        match c(&format!("wmma.load.a.sync.aligned.col.m16n16k16.global.f16 {frag}, [%rd14+32], %r17")) {
            Classified::Check(a) => {
                assert_eq!((a.kind, a.bulk, a.offset, a.dests.len()), (AccessKind::Read, true, 32, 8));
                assert_eq!(a.width, Width::Tile { stride: "%r17".into(), per_stride: 30, row: 32 });
            }
            o => panic!("{o:?}"),
        }
        // Immediate or absent stride: a fixed range; a store writes it.
        match c(&format!("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd3], {frag}, 24")) {
            Classified::Check(a) => assert_eq!((a.kind, a.width, a.dests.len()), (AccessKind::Write, Width::Fixed(15 * 24 * 4 + 64), 0)),
            o => panic!("{o:?}"),
        }
        assert!(matches!(c(&format!("wmma.load.b.sync.aligned.row.m8n32k16.global.s8 {frag}, [%rd3]")), Classified::Check(a) if matches!(*a, Access { width: Width::Fixed(512), .. })));
        // Shared tiles are the shared checks' (spaces.rs); the MMA itself touches no memory.
        assert_eq!(c(&format!("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {frag}, [%r3], %r4")), Classified::Skip(SkipReason::NotGlobalSpace));
        assert_eq!(c(&format!("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {frag}, {frag}, {frag}, {frag}")), Classified::NotMemory);
        // Not modelled: left alone and counted.
        assert!(matches!(c(&format!("wmma.load.a.sync.aligned.row.m8n8k32.global.s4 {frag}, [%rd3], %r4")), Classified::Unknown(_)));
        assert!(matches!(c(&format!("wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {frag}, [%rd3], 8")), Classified::Unknown(_)), "rows would overlap");
    }

    #[test]
    fn loads_and_stores() {
        match c("ld.global.nc.v4.f32 {%f1,%f2,%f3,%f4}, [%rd3]") {
            Classified::Check(a) => {
                assert_eq!(a.width, Width::Fixed(16));
                assert_eq!(a.dests.len(), 4);
                assert_eq!(a.kind, AccessKind::Read);
            }
            o => panic!("{o:?}"),
        }
        match c("st.global.f32 [%rd10+-8], %f3") {
            Classified::Check(a) => {
                assert_eq!(a.offset, -8);
                assert_eq!(a.kind, AccessKind::Write);
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(c("ld.shared.f32 %f5, [%r9+-64]"), Classified::Skip(SkipReason::NotGlobalSpace));
        assert_eq!(c("ld.param.u64 %rd1, [x_param_0]"), Classified::Skip(SkipReason::NotGlobalSpace));
        assert_eq!(c("ld.global.u32 %r1, [gvar+4]"), Classified::Skip(SkipReason::ModuleVariable));
        assert!(matches!(c("atom.global.add.u32 %r6, [%rd9], 1"), Classified::Check(a) if matches!(*a, Access { kind: AccessKind::Atomic, .. })));
        assert!(matches!(c("ld.u8 %rs1, [%rd1]"), Classified::Check(a) if matches!(*a, Access { width: Width::Fixed(1), .. })));
        assert_eq!(c("prefetch.global.L2 [%rd1]"), Classified::Skip(SkipReason::Prefetch));
        assert_eq!(c("add.s64 %rd5, %rd1, %rd4"), Classified::NotMemory);
        assert_eq!(c("cp.async.commit_group"), Classified::NotMemory);
    }

    #[test]
    fn async_copies() {
        match c("cp.async.ca.shared.global [%r1], [%rd1], 4, 4") {
            Classified::Check(a) => {
                assert_eq!(a.base, AddrBase::Reg("%rd1".into()));
                assert_eq!(a.width, Width::Fixed(4));
            }
            o => panic!("{o:?}"),
        }
        match c("cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], %r3") {
            Classified::Check(a) => {
                assert!(a.bulk);
                assert_eq!(a.kind, AccessKind::Write);
                assert_eq!(a.width, Width::Reg("%r3".into()));
            }
            o => panic!("{o:?}"),
        }
        match c("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 256, [%r4]") {
            Classified::Check(a) => {
                assert_eq!(a.base, AddrBase::Reg("%rd2".into()));
                assert_eq!(a.kind, AccessKind::Read);
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(c("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4]"), Classified::Skip(SkipReason::Tensor));
    }

    /// The state space of each access form, decided once for the global and the shared/local
    /// checks.
    #[test]
    fn the_decoder_names_the_space_of_every_access_form() {
        let spaces = |s: &str| {
            let ins = split_instr(s).unwrap();
            let parts: Vec<&str> = ins.opcode.parts().collect();
            decode(&ins, &parts).map(|a| a.map(|a| a.space))
        };
        let one = |s: Space| [Some(s), None];
        assert_eq!(spaces("ld.global.nc.v4.f32 {%f1,%f2,%f3,%f4}, [%rd3]"), one(Space::Global));
        assert_eq!(spaces("ld.u8 %rs1, [%rd1]"), one(Space::Generic));
        assert_eq!(spaces("ld.shared::cta.u32 %r1, [%r2]"), one(Space::Shared));
        assert_eq!(spaces("st.shared::cluster.u32 [%r1], %r2"), one(Space::SharedCluster));
        assert_eq!(spaces("atom.local.add.u32 %r1, [%rd1], 1"), one(Space::Local));
        assert_eq!(spaces("ld.param::entry.u64 %rd1, [p]"), one(Space::Param));
        assert_eq!(spaces("ld.const.u32 %r1, [c]"), one(Space::Const));
        // A sub-qualifier PTX does not have: not global for the global checks; generic for the
        // shared/local ones unless another space is named.
        assert_eq!(spaces("ld.local::x.u32 %r1, [%rd1]"), one(Space::Malformed { other_named: false }));
        assert_eq!(spaces("ld.global.local::x.u32 %r1, [%rd1]"), one(Space::Malformed { other_named: true }));
        assert_eq!(c("ld.local::x.u32 %r1, [%rd1]"), Classified::Skip(SkipReason::NotGlobalSpace));
        // A copy: destination, then source.
        assert_eq!(spaces("cp.async.ca.shared.global [%r1], [%rd1], 4"), [Some(Space::Shared), Some(Space::Global)]);
        assert_eq!(spaces("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 256, [%r4]"), [Some(Space::SharedCluster), Some(Space::Global)]);
        assert_eq!(spaces("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4]"), [None, None]);
        assert_eq!(spaces("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3]"), [None, None]);
        // Rows of a matrix: half of the warp supplies them for .x2.
        let ins = split_instr("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r1, %r2}, [%r3]").unwrap();
        let parts: Vec<&str> = ins.opcode.parts().collect();
        assert!(matches!(&decode(&ins, &parts), [Some(MemAccess { space: Space::Shared, addr_idx: 1, lanes: 16, extent: Some(Extent::Bytes(16)), .. }), None]));
        let frag = "{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}";
        assert_eq!(spaces(&format!("wmma.load.a.sync.aligned.row.m16n16k16.f16 {frag}, [%rd3]")), one(Space::Generic));
        assert_eq!(spaces(&format!("wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {frag}, [%rd3]")), one(Space::Global));
        assert_eq!(spaces(&format!("wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%r3], {frag}")), one(Space::Shared));
    }

    /// [`split_instr`] as it was before its table-driven scans: the `char` searches, one pass
    /// for the opcode's end and another for its name, compares a byte for the delimiters.
    fn split_instr_by_chars(stmt: &str) -> Option<Instr<'_>> {
        let mut s = stmt.trim();
        let mut guard = None;
        if let Some(rest) = s.strip_prefix('@') {
            let end = rest.find(char::is_whitespace)?;
            guard = Some(&rest[..end]);
            s = rest[end..].trim_start();
        }
        let end = s.find(char::is_whitespace).unwrap_or(s.len());
        let opcode = &s[..end];
        if opcode.is_empty() || !opcode.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return None;
        }
        let rest = &s[end..];
        let mut out = Operands::new();
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, &b) in rest.as_bytes().iter().enumerate() {
            match b {
                b'[' | b'{' | b'(' => depth += 1,
                b']' | b'}' | b')' => {
                    depth -= 1;
                    if depth < 0 {
                        return None;
                    }
                }
                b',' if depth == 0 => {
                    out.push(rest[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            }
        }
        if depth != 0 {
            return None;
        }
        let last = rest[start..].trim();
        if !last.is_empty() {
            out.push(last);
        }
        Some(Instr { guard, opcode: Opcode::parse(opcode), operands: out })
    }

    /// [`Space::of_load_store`] as it was before it looked at each part once.
    fn of_load_store_by_rules(parts: &[&str]) -> Space {
        let is = |s: &str| parts.iter().any(|q| q.strip_prefix(s).is_some_and(|r| r.is_empty() || r.starts_with("::")));
        let not_global = is("shared") || is("local") || is("param") || is("const");
        if parts.iter().any(|q| matches!(*q, "shared" | "shared::cta")) {
            Space::Shared
        } else if parts.contains(&"local") {
            Space::Local
        } else if parts.iter().any(|q| ["global", "param", "const", "shared::cluster", "tex"].iter().any(|s| q.starts_with(s))) {
            if !not_global {
                Space::Global
            } else if parts.contains(&"shared::cluster") {
                Space::SharedCluster
            } else if is("param") {
                Space::Param
            } else if is("const") {
                Space::Const
            } else {
                Space::Malformed { other_named: true }
            }
        } else if not_global {
            Space::Malformed { other_named: false }
        } else {
            Space::Generic
        }
    }

    proptest::proptest! {
        /// The space of a load or store read part by part is the space the rules give.
        #[test]
        fn load_store_spaces_are_read_as_by_the_rules(parts in proptest::collection::vec("(ld|st|shared|local|param|const|global|tex|cta|cluster|::|x|nc|v2|u32|s|l|p|c|g|t){0,3}", 0..6)) {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            proptest::prop_assert_eq!(Space::of_load_store(&parts), of_load_store_by_rules(&parts));
        }
    }

    #[test]
    fn statements_split_as_the_character_searches_split_them() {
        for s in [
            "ld.global.u32 %r1, [%rd1+4]",
            "@!%p1 bra $L__BB0_2",
            "ret",
            "  mov.u32\t%r1 ,  %r2 ",
            "@%p1",
            "1add x",
            "st.v2.f32 [%rd1], {%f1, %f2}",
            "call.uni (retval0), f, (%r1, %r2)",
            "ld.é.u32 %r1, [a]",
            "add.s32 %r1, %r2, ",
            "]x",
            "a.b.c",
            "x(,)",
        ] {
            assert_eq!(split_instr(s), split_instr_by_chars(s), "{s:?}");
        }
    }

    proptest::proptest! {
        /// The table-driven decoder splits every statement as the `char` searches do, ASCII or
        /// not.
        #[test]
        fn split_instr_is_the_character_split(s in "[@!%a-c.x0-9 \t\x0b\x0c\r\n\u{85}\u{a0}\u{3000}é\\[\\]{}(),+-]{0,32}") {
            proptest::prop_assert_eq!(split_instr(&s), split_instr_by_chars(&s));
        }

        /// The byte scan finds what the character search finds, in ASCII and in other text.
        #[test]
        fn find_whitespace_is_the_character_search(s in "[a-z. \t\x0b\x0c\r\n\u{85}\u{a0}\u{3000}é%]{0,24}") {
            proptest::prop_assert_eq!(find_whitespace(&s), s.find(char::is_whitespace));
        }

        /// An operand's trim is `str::trim`, ASCII or not.
        #[test]
        fn trim_operand_is_the_character_trim(t in "[ a-z%\t\x0b\x0c\r\n\u{85}\u{a0}\u{3000}é.;]{0,12}") {
            proptest::prop_assert_eq!(trim_operand(&t), t.trim());
        }

        /// A destination's braces and spaces trimmed byte by byte as `str::trim_matches` trims them.
        #[test]
        fn trim_braces_is_the_character_trim(s in "[{}a-z%, \t\x0b\x0c\r\n\u{85}\u{a0}\u{3000}é]{0,24}") {
            proptest::prop_assert_eq!(trim_braces(&s), s.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace()));
        }
    }
}
