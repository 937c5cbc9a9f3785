//! Which statements define each register of a function body ([`Defs`]), built once per body on
//! first use ([`ModuleDefs`]) and read by every analysis that follows registers to their
//! definitions: the shared/local provenance (spaces.rs), the thread-index values
//! (thread_ranges.rs), the kernel-parameter bounds (bounds.rs) and the prefetch chains
//! (prefetch.rs). Each keeps its own lattice; what a statement defines, and where, is decided here.
//!
//! A body's statements are those of its lines from the opening one to the closing one, both
//! included (text around the braces there is the body's too). A definition is a register an
//! instruction writes ([`Instr::dests`]: its first operand's registers, for every instruction but
//! stores and reductions), or a register a `call` receives its result in (`call (%r1), f, ...;`,
//! a function returning in a `.reg`; marked [`Def::call_result`]: its value is the callee's,
//! which no analysis follows).

use super::access::Instr;
use super::bodies::{Bodies, Body};
use super::line::Line;
use super::opcode::{Op, Opcode};
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

/// An instruction of the body that defines at least one register.
#[derive(Clone, Copy)]
pub(in crate::ptx) struct Writer<'l, 'a> {
    pub instr: &'l Instr<'a>,
    at: WriterAt,
}

/// Where a [`Writer`] is (its line, its index among the line's statements), and its definitions:
/// positions `[first_def, end_def)` of [`DefIndex::defs`].
#[derive(Clone, Copy)]
struct WriterAt {
    line: u32,
    stmt: u32,
    first_def: u32,
    end_def: u32,
}

/// One definition of a register (8 bytes: a body's index is kept until the rewrite ends).
#[derive(Clone, Copy)]
pub(in crate::ptx) struct Def {
    /// Index of the defining instruction among [`Defs::writers`], with [`Def::CALL_RESULT`] set
    /// when the register receives a `call`'s result (not one of the instruction's
    /// [`Instr::dests`]).
    writer_and_kind: u32,
    /// The register's number among the body's ([`Defs::reg_count`]).
    pub reg_id: u32,
}

impl Def {
    const CALL_RESULT: u32 = 1 << 31;

    /// The register receives a `call`'s result (not one of the instruction's [`Instr::dests`]).
    pub fn call_result(&self) -> bool {
        self.writer_and_kind & Self::CALL_RESULT != 0
    }

    /// Index of the defining instruction among [`Defs::writers`].
    fn writer(&self) -> usize {
        (self.writer_and_kind & !Self::CALL_RESULT) as usize
    }
}

/// A register: its name, how many definitions, how many of them guarded, and where their list
/// starts in [`DefIndex::grouped`].
#[derive(Clone, Copy)]
struct RegDefs<'a> {
    name: &'a str,
    count: u32,
    guarded: u32,
    start: u32,
}

/// The register definitions of one function body, in text order (by position, not borrowing the
/// lines: [`Defs`] reads them with the lines).
struct DefIndex<'a> {
    writers: Vec<WriterAt>,
    defs: Vec<Def>,
    /// Each register's number.
    ids: RegIds<'a>,
    regs: Vec<RegDefs<'a>>,
    /// Positions in `defs`, grouped by register, each register's in text order: a register's
    /// definitions are one slice, searched by line.
    grouped: Vec<u32>,
}

/// The registers' numbers, by name: a name of at most seven bytes (nearly every register's:
/// `%rd123`) keyed by its bytes packed into a `u64` ([`short_key`]: hashed with one multiply and
/// compared as an integer, where a string key was hashed byte by byte and compared with
/// `memcmp`), a longer one by its text.
struct RegIds<'a> {
    short: FxHashMap<u64, u32>,
    long: FxHashMap<&'a str, u32>,
}

impl<'a> RegIds<'a> {
    fn with_capacity(n: usize) -> Self {
        RegIds { short: FxHashMap::with_capacity_and_hasher(n, Default::default()), long: FxHashMap::default() }
    }

    /// `name`'s number, given `next` when it has none yet.
    #[inline]
    fn get_or_insert(&mut self, name: &'a str, next: u32) -> u32 {
        match short_key(name) {
            Some(k) => *self.short.entry(k).or_insert(next),
            None => *self.long.entry(name).or_insert(next),
        }
    }

    #[inline]
    fn get(&self, name: &str) -> Option<u32> {
        match short_key(name) {
            Some(k) => self.short.get(&k).copied(),
            None => self.long.get(name).copied(),
        }
    }
}

/// A name of at most seven bytes as one `u64`: its bytes in order from the lowest, the rest zero,
/// and its length in the top byte (so `a` and `a\0` differ); `None` for a longer name. Distinct
/// names get distinct keys: the key gives the bytes back. (Read with overlapping loads, no loop: a
/// byte where two loads overlap is the same byte in both.)
#[inline]
fn short_key(name: &str) -> Option<u64> {
    let b = name.as_bytes();
    let n = b.len();
    let bytes = match n {
        0 => 0,
        1..=3 => u64::from(b[0]) | u64::from(b[n / 2]) << (8 * (n / 2)) | u64::from(b[n - 1]) << (8 * (n - 1)),
        4..=7 => {
            let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]);
            u64::from(lo) | u64::from(hi) << (8 * (n - 4))
        }
        _ => return None,
    };
    Some(bytes | (n as u64) << 56)
}

fn index32(k: usize) -> u32 {
    u32::try_from(k).expect("fewer statements than u32::MAX")
}

impl<'a> DefIndex<'a> {
    fn build(lines: &[Line<'a>], b: &Body) -> Self {
        let end = b.close.min(lines.len().saturating_sub(1));
        // (About a register per two lines, a writer and a definition per line: sized once, not
        // grown by rehashing and reallocating, and shrunk to what they hold below.)
        let lines_in = (end + 1).saturating_sub(b.open);
        let mut d = DefIndex {
            writers: Vec::with_capacity(lines_in),
            defs: Vec::with_capacity(lines_in),
            ids: RegIds::with_capacity(lines_in / 2),
            regs: Vec::with_capacity(lines_in / 2),
            grouped: Vec::new(),
        };
        for (line, l) in lines.iter().enumerate().take(end + 1).skip(b.open) {
            // (A lone directive, `.loc` or `.reg`, defines nothing: not split into statements,
            // which no other pass asks of it.)
            if l.is_lone_directive() {
                continue;
            }
            // (A line the rewriter wrote, [`Line::generated`], defines only gasan's own
            // registers, which no input line reads: no register an analysis follows.)
            if l.generated {
                continue;
            }
            for (stmt, st) in l.stmts().iter().enumerate() {
                let Some(instr) = &st.instr else { continue };
                let (writer, before) = (index32(d.writers.len()), d.defs.len());
                if instr.opcode.op == Op::Call {
                    for r in call_results(instr) {
                        d.push(r, writer, true, instr.guard.is_some());
                    }
                }
                for r in instr.dests() {
                    d.push(r, writer, false, instr.guard.is_some());
                }
                if d.defs.len() > before {
                    d.writers.push(WriterAt { line: index32(line), stmt: index32(stmt), first_def: index32(before), end_def: index32(d.defs.len()) });
                }
            }
        }
        // Each register's list, by counting: its start, then the positions in text order.
        let mut at = 0;
        for r in &mut d.regs {
            r.start = at;
            at += r.count;
        }
        let mut next: Vec<u32> = d.regs.iter().map(|r| r.start).collect();
        // (Kept until the rewrite ends: no slack.)
        d.writers.shrink_to_fit();
        d.defs.shrink_to_fit();
        d.regs.shrink_to_fit();
        d.grouped = vec![0; d.defs.len()];
        for (k, def) in d.defs.iter().enumerate() {
            let slot = &mut next[def.reg_id as usize];
            d.grouped[*slot as usize] = index32(k);
            *slot += 1;
        }
        d
    }

    fn push(&mut self, reg: &'a str, writer: u32, call_result: bool, guarded: bool) {
        let next_id = index32(self.regs.len());
        let reg_id = self.ids.get_or_insert(reg, next_id);
        if reg_id == next_id {
            self.regs.push(RegDefs { name: reg, count: 0, guarded: 0, start: 0 });
        }
        let r = &mut self.regs[reg_id as usize];
        r.count += 1;
        r.guarded += u32::from(guarded);
        assert!(writer < Def::CALL_RESULT, "fewer statements than 2^31");
        self.defs.push(Def { writer_and_kind: writer | if call_result { Def::CALL_RESULT } else { 0 }, reg_id });
    }

    /// The positions in `defs` of `reg`'s definitions, in text order.
    fn of(&self, reg: &str) -> &[u32] {
        match self.ids.get(reg) {
            Some(id) => {
                let r = self.regs[id as usize];
                &self.grouped[r.start as usize..(r.start + r.count) as usize]
            }
            None => &[],
        }
    }
}

/// The register definitions of one function body, in text order, with its lines.
#[derive(Clone, Copy)]
pub(in crate::ptx) struct Defs<'l, 'a> {
    lines: &'l [Line<'a>],
    index: &'l DefIndex<'a>,
}

impl<'l, 'a> Defs<'l, 'a> {
    fn writer_at(&self, at: WriterAt) -> Writer<'l, 'a> {
        let instr = self.lines[at.line as usize].stmts()[at.stmt as usize].instr.as_ref().expect("a writer is an instruction");
        Writer { instr, at }
    }

    /// The instructions that define registers, in text order.
    pub fn writers(&self) -> impl Iterator<Item = Writer<'l, 'a>> + '_ {
        self.index.writers.iter().map(|&at| self.writer_at(at))
    }

    /// Every definition, in text order (an instruction's call results before its destinations).
    pub fn defs(&self) -> &'l [Def] {
        &self.index.defs
    }

    /// The definitions writer `w` makes (its call results first).
    pub fn made_by(&self, w: &Writer<'_, '_>) -> &'l [Def] {
        &self.index.defs[w.at.first_def as usize..w.at.end_def as usize]
    }

    /// The instruction that makes definition `d`.
    pub fn writer(&self, d: &Def) -> Writer<'l, 'a> {
        self.writer_at(self.index.writers[d.writer()])
    }

    /// `reg`'s definitions, the last first.
    #[cfg(test)]
    fn of(&self, reg: &str) -> impl Iterator<Item = &'l Def> {
        let index: &'l DefIndex<'a> = self.index;
        index.of(reg).iter().rev().map(move |&k| &index.defs[k as usize])
    }

    /// How many registers the body defines (their numbers are `0..reg_count()`).
    pub fn reg_count(&self) -> usize {
        self.index.regs.len()
    }

    /// The number of a register the body defines.
    pub fn reg_id(&self, reg: &str) -> Option<u32> {
        self.index.ids.get(reg)
    }

    /// The name of register number `id`.
    pub fn reg_name(&self, id: u32) -> &'a str {
        self.index.regs[id as usize].name
    }

    /// Whether `reg` has exactly one definition, unguarded.
    pub fn defined_once_unguarded(&self, reg: &str) -> bool {
        self.only_writer(reg).is_some()
    }

    /// The instruction of `reg`'s one definition, when it has exactly one and it is unguarded.
    pub fn only_writer(&self, reg: &str) -> Option<&'l Instr<'a>> {
        let id = self.index.ids.get(reg)?;
        let r = self.index.regs[id as usize];
        (r.count == 1 && r.guarded == 0).then(|| self.writer(&self.index.defs[self.index.grouped[r.start as usize] as usize]).instr)
    }

    /// The last line in `[start, before)` with a definition of `reg`.
    pub fn last_write(&self, reg: &str, start: usize, before: usize) -> Option<usize> {
        let line = |k: u32| self.index.writers[self.index.defs[k as usize].writer()].line as usize;
        let list = self.index.of(reg);
        let below = list.partition_point(|&k| line(k) < before);
        below.checked_sub(1).map(|p| line(list[p])).filter(|&l| l >= start)
    }
}

/// The registers a `call` receives its results in: `call (%r1, %r2), f, (...)`'s first operand.
fn call_results<'a>(ins: &Instr<'a>) -> impl Iterator<Item = &'a str> {
    let results = ins.operands.first().copied().unwrap_or("");
    results.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '_' | '$'))).filter(|r| r.starts_with('%'))
}

/// Each body's [`Defs`] over one vector of lines, built on first use, at most once.
pub(in crate::ptx) struct ModuleDefs<'l, 'a> {
    lines: &'l [Line<'a>],
    bodies: &'l Bodies,
    /// The bodies' opening lines, ascending, and their indexes.
    opens: Vec<usize>,
    slots: Vec<OnceLock<DefIndex<'a>>>,
}

impl<'l, 'a> ModuleDefs<'l, 'a> {
    pub fn new(lines: &'l [Line<'a>], bodies: &'l Bodies) -> Self {
        let opens: Vec<usize> = bodies.iter().map(|b| b.open).collect();
        let slots = opens.iter().map(|_| OnceLock::new()).collect();
        ModuleDefs { lines, bodies, opens, slots }
    }

    /// The module's bodies.
    pub fn bodies(&self) -> &'l Bodies {
        self.bodies
    }

    /// Body `b`'s definitions (a body of the `bodies` this was made with, or of a part of them).
    pub fn of(&self, b: &Body) -> Defs<'_, 'a> {
        match self.opens.binary_search(&b.open) {
            Ok(k) => Defs { lines: self.lines, index: self.slots[k].get_or_init(|| DefIndex::build(self.lines, b)) },
            Err(_) => panic!("body at line {} is not one of the module's", b.open),
        }
    }
}

/// How an instruction's destination derives from its sources (the pointer it carries).
pub enum PointerFlow<'s> {
    Param(&'s str),
    /// The destination is the one operand (of these) that derives from a parameter, when exactly
    /// one does and the others derive from none.
    OneOf(&'s [&'s str]),
    Other,
}

/// Whether an opcode moves a 64-bit integer (what a pointer parameter is read as).
pub fn wide64(opcode: Opcode<'_>) -> bool {
    // A qualifier is the text between a `.` and the next `.` or the end: found on the bytes,
    // without splitting the opcode into its parts (asked of most instructions of a kernel, where
    // the split cost more than the test).
    let b = opcode.text.as_bytes();
    (0..b.len()).any(|p| b[p] == b'.' && matches!(b.get(p + 1..p + 4), Some(b"u64" | b"s64" | b"b64")) && b.get(p + 4).is_none_or(|&c| c == b'.'))
}

/// Which of an instruction's operands can carry a pointer parameter into its destination:
/// parameter bounds' derivations (bounds.rs), and loop versioning's choice of the ranges that share
/// a lookup.
pub fn pointer_flow<'s>(opcode: Opcode<'_>, operands: &'s [&'s str]) -> PointerFlow<'s> {
    // (Asked of every instruction of a kernel: the qualifiers are read only for the opcodes that
    // can define a parameter's register.)
    if !matches!(opcode.op, Op::Ld | Op::Mov | Op::Cvta | Op::Add | Op::Sub | Op::Mad) {
        return PointerFlow::Other;
    }
    // (Read only where the opcode and the operand count are right.)
    let wide64 = || wide64(opcode);
    let src = |i: usize| operands.get(i).copied();
    match opcode.op {
        Op::Ld if opcode.first_qual() == Some("param") && wide64() => match src(1).and_then(|a| a.strip_prefix('[')).and_then(|a| a.strip_suffix(']')) {
            Some(a) => PointerFlow::Param(a.trim()),
            None => PointerFlow::Other,
        },
        Op::Mov | Op::Cvta if operands.len() == 2 && wide64() => PointerFlow::OneOf(&operands[1..2]),
        Op::Add if operands.len() == 3 && wide64() => PointerFlow::OneOf(&operands[1..3]),
        Op::Sub if operands.len() == 3 && wide64() => PointerFlow::OneOf(&operands[1..2]),
        // mad.wide.{s,u}32 d, a, b, c / mad.lo.{s,u}64 d, a, b, c: the 64-bit addend.
        Op::Mad if operands.len() == 4 && (opcode.quals().any(|q| q == "wide") || wide64()) => PointerFlow::OneOf(&operands[3..4]),
        _ => PointerFlow::Other,
    }
}

/// An unguarded integer `add` of a register and a constant, `add.{s,u}{32,64} %d, %base, imm`:
/// its destination, base register, constant and bits (Triton computes a tile's addresses so:
/// `%rd2 = %rd1 + 512`, `%r46 = %r44 + 2048`).
pub fn constant_add<'a>(ins: &Instr<'a>) -> Option<(&'a str, &'a str, i64, u32)> {
    let bits = match ins.opcode.only_qual()? {
        "s32" | "u32" => 32,
        "s64" | "u64" => 64,
        _ => return None,
    };
    let (Op::Add, None, &[dst, base, imm]) = (ins.opcode.op, ins.guard, ins.operands.as_slice()) else { return None };
    let add = super::access::parse_int(imm)?;
    base.starts_with('%').then_some((dst, base, add, bits))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A short name's key gives its bytes back (distinct names, distinct keys), and the
        /// numbers kept by key are those a map by name keeps.
        #[test]
        fn register_keys_are_the_names(names in proptest::collection::vec("[%rdf0-9\\x00é]{0,9}", 0..24)) {
            for n in &names {
                match short_key(n) {
                    Some(k) => {
                        let len = (k >> 56) as usize;
                        proptest::prop_assert_eq!(&k.to_le_bytes()[..len], n.as_bytes());
                        proptest::prop_assert_eq!((k & ((1 << 56) - 1)) >> (8 * len), 0);
                    }
                    None => proptest::prop_assert!(n.len() > 7),
                }
            }
            let (mut ids, mut reference) = (RegIds::with_capacity(4), std::collections::HashMap::new());
            for (k, n) in names.iter().enumerate() {
                let next = u32::try_from(k).unwrap();
                proptest::prop_assert_eq!(ids.get(n), reference.get(n.as_str()).copied());
                proptest::prop_assert_eq!(ids.get_or_insert(n, next), *reference.entry(n.as_str()).or_insert(next));
            }
        }
    }

    fn defs_of(body: &str, f: impl FnOnce(&Defs<'_, '_>)) {
        let text = format!(".visible .entry k()\n{{\n{body}\n}}\n");
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        let m = ModuleDefs::new(&lines, &bodies);
        let d = m.of(bodies.nth(0));
        assert!(std::ptr::eq(d.index, m.of(bodies.nth(0)).index), "built once");
        f(&d);
    }

    #[test]
    fn definitions_by_register_in_text_order() {
        let body = "mov.u32 %r1, 0;\n@%p1 mov.u32 %r2, 1; add.s32 %r1, %r1, 2;\nst.global.u32 [%rd1], %r1;\ncall (%r3), f, (%r1);\nld.global.v2.u32 {%r4, %r5}, [%rd1];";
        defs_of(body, |d| {
            let lines_of = |r: &str| d.of(r).map(|x| (d.writer(x).at.line, d.writer(x).at.stmt, x.call_result())).collect::<Vec<_>>();
            assert_eq!(lines_of("%r1"), [(3, 1, false), (2, 0, false)], "last first");
            assert_eq!(lines_of("%r3"), [(5, 0, true)]);
            assert_eq!(lines_of("%r5"), [(6, 0, false)]);
            assert_eq!(lines_of("%rd1"), [], "a store's address is read, not written");
            assert!(d.defined_once_unguarded("%r4") && !d.defined_once_unguarded("%r1") && !d.defined_once_unguarded("%r2"));
            assert!(d.defined_once_unguarded("%r3"), "a call's result is a definition");
            assert_eq!(d.writers().map(|w| w.at.line).collect::<Vec<_>>(), [2, 3, 3, 5, 6]);
            assert_eq!(d.last_write("%r1", 2, 4), Some(3));
            assert_eq!(d.last_write("%r1", 2, 3), Some(2));
            assert_eq!(d.last_write("%r1", 3, 3), None);
            assert_eq!(d.last_write("%r3", 0, 9), Some(5));
        });
    }
}
