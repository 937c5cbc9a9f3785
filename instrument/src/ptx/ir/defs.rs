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
use super::opcode::Op;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

/// No definition (the end of a register's chain of definitions).
const NONE: u32 = u32::MAX;

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

/// One definition of a register.
#[derive(Clone, Copy)]
pub(in crate::ptx) struct Def<'a> {
    pub reg: &'a str,
    /// Index of the defining instruction among [`Defs::writers`].
    pub writer: u32,
    /// The register receives a `call`'s result (not one of the instruction's [`Instr::dests`]).
    pub call_result: bool,
    /// The register's previous definition (index into [`DefIndex::defs`]), or [`NONE`].
    prev: u32,
}

/// A register's definitions: its last one (index into [`DefIndex::defs`]), how many, how many
/// of them guarded.
#[derive(Clone, Copy)]
struct Chain {
    last: u32,
    count: u32,
    guarded: u32,
}

/// The register definitions of one function body, in text order (by position, not borrowing the
/// lines: [`Defs`] reads them with the lines).
struct DefIndex<'a> {
    writers: Vec<WriterAt>,
    defs: Vec<Def<'a>>,
    by_reg: FxHashMap<&'a str, Chain>,
}

fn index32(k: usize) -> u32 {
    u32::try_from(k).expect("fewer statements than u32::MAX")
}

impl<'a> DefIndex<'a> {
    fn build(lines: &[Line<'a>], b: &Body) -> Self {
        let end = b.close.min(lines.len().saturating_sub(1));
        let mut d = DefIndex { writers: Vec::new(), defs: Vec::new(), by_reg: FxHashMap::default() };
        for (line, l) in lines.iter().enumerate().take(end + 1).skip(b.open) {
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
        d
    }

    fn push(&mut self, reg: &'a str, writer: u32, call_result: bool, guarded: bool) {
        let k = index32(self.defs.len());
        let chain = self.by_reg.entry(reg).or_insert(Chain { last: NONE, count: 0, guarded: 0 });
        self.defs.push(Def { reg, writer, call_result, prev: chain.last });
        chain.last = k;
        chain.count += 1;
        chain.guarded += u32::from(guarded);
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
    pub fn defs(&self) -> &'l [Def<'a>] {
        &self.index.defs
    }

    /// The definitions writer `w` makes (its call results first).
    pub fn made_by(&self, w: &Writer<'_, '_>) -> &'l [Def<'a>] {
        &self.index.defs[w.at.first_def as usize..w.at.end_def as usize]
    }

    /// The instruction that makes definition `d`.
    pub fn writer(&self, d: &Def<'_>) -> Writer<'l, 'a> {
        self.writer_at(self.index.writers[d.writer as usize])
    }

    /// `reg`'s definitions, the last first.
    pub fn of(&self, reg: &str) -> impl Iterator<Item = &'l Def<'a>> {
        let defs: &'l [Def<'a>] = &self.index.defs;
        let mut k = self.index.by_reg.get(reg).map_or(NONE, |c| c.last);
        std::iter::from_fn(move || {
            let d = defs.get(k as usize)?;
            k = d.prev;
            Some(d)
        })
    }

    /// Whether `reg` has exactly one definition, unguarded.
    pub fn defined_once_unguarded(&self, reg: &str) -> bool {
        self.index.by_reg.get(reg).is_some_and(|c| c.count == 1 && c.guarded == 0)
    }

    /// The last line in `[start, before)` with a definition of `reg`.
    pub fn last_write(&self, reg: &str, start: usize, before: usize) -> Option<usize> {
        let writers = &self.index.writers;
        self.of(reg).map(|d| writers[d.writer as usize].line as usize).find(|&l| l < before).filter(|&l| l >= start)
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let lines_of = |r: &str| d.of(r).map(|x| (d.writer(x).at.line, d.writer(x).at.stmt, x.call_result)).collect::<Vec<_>>();
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
