//! Check placement within basic blocks (halt mode with optimization). ptxas does not move a load
//! above a branch, so in a basic block with several checks each shadow load would wait behind the
//! previous check's branch, and the checks' latencies would add up. Instead, in order of preference:
//!
//! * **Pipeline**: in a loop that is one basic block (its label reached only by its own back edge)
//!   with at most [`MAX_PIPELINED_PER_LOOP`] such accesses, the shadow byte is loaded one iteration
//!   ahead: the preheader loads it for the first iteration, the top of each iteration loads it for
//!   the next one (the address recomputed from the values the loop-carried registers will have at
//!   the back edge), and the back edge moves it into place, so the check never waits for it.
//! * **Batch**: the accesses of a block whose addresses are known by its first check line (the
//!   address register final there, or computable from registers final there by recomputing a
//!   short chain of address arithmetic — `add`, `mul.wide`, `cvta`, ... — into temporaries) load
//!   their shadow bytes, test them and OR the results into one predicate; one branch before the
//!   block's first access covers them all (up to [`MAX_BATCH`]). A failed batch rechecks its
//!   members in order to report the right one.
//! * **Prefetch**: the others load their shadow byte right after the last write of the address
//!   register (or earlier through a recomputed chain) when a check lies between, and test it at
//!   the access.
//!
//! Batched and prefetched loads outside loops also prefetch their data into L2 where their shadow
//! byte is loaded, so the load after the check's branch finds it on its way.
//!
//! Only plain statements inside one basic block are considered: no labels, branches, braces,
//! declarations, block comments or statements continued over lines lie between the anchor and
//! the access, so the registers read at the anchor hold the values the access will use.

use super::access::Operands;
use super::bodies::Bodies;
use super::branches::Branches;
use super::defs::{Defs, ModuleDefs};
use super::opcode::Op;
use super::{Line, LineMap, LineSet};

/// How far back a prefetch may go (bounds the scan in long unrolled blocks).
const WINDOW: usize = 256;
/// Longest address-arithmetic chain recomputed for one prefetch.
const MAX_CHAIN: usize = 10;
/// Loops with more pipelinable accesses than this are not pipelined (their accesses get the plain
/// placement): each holds two registers across the body and adds next-iteration arithmetic, and
/// in access-dense loops that cost more than the hidden latency gained (measured on the H100: the
/// naive GEMM's 6-check loop slowed from 3.3x to 3.6x, a 1-check reduction sped up from 1.5x to 1.1x).
const MAX_PIPELINED_PER_LOOP: usize = 4;

/// Which register a prefetch loads, and whether it declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// Declares and loads the access's shadow register (in its own block).
    Plain,
    /// Loop preheader: declares the current and next-iteration registers, loads the current one.
    Preheader,
    /// Top of the loop body: loads the next iteration's register (declared by the preheader).
    NextIteration,
    /// One of a basic block's batched checks: loads and tests the byte at the anchor and ORs the
    /// result into the block's batch predicate, branched on once at the block's first check line
    /// (the key). The access itself then needs no check of its own.
    Batch(usize),
}

/// A plain single check the pre-pass found: a prefetch candidate.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub line: usize,
    /// Address register.
    pub base: String,
    /// Has a guard predicate (never batched: the guard may be computed after the batch point).
    pub guarded: bool,
    /// The `.loc` in effect at the access (a batched access's site is made at the batch point).
    pub loc: Option<(u32, u32, u32)>,
}

/// One prefetch: the access line, the lines of arithmetic to recompute first (in order), and for
/// [`Target::NextIteration`] the loop-carried registers the chain reads, each with the chain that
/// computes its value at the back edge (which replaces it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Prefetch {
    pub access: usize,
    pub chain: Vec<usize>,
    pub target: Target,
    pub next_values: Vec<(String, Vec<usize>)>,
    /// Also prefetch the load's data into L2 (outside loops only: see [`plan`]).
    pub data: bool,
    /// Keep that data prefetch where the kernel-parameter fast path decides the check without a
    /// shadow load: only in batches of [`MIN_FAST_DATA_BATCH`] or more (see [`plan`]).
    pub data_on_fast_path: bool,
    /// The access's `.loc` (for its site, when batched).
    pub loc: Option<(u32, u32, u32)>,
}

/// Where prefetch code goes: before which lines, and the back-edge moves of pipelined loops.
#[derive(Default)]
pub(super) struct PrefetchPlan {
    /// Anchor line (emit before it) → prefetches.
    pub at: LineMap<Vec<Prefetch>>,
    /// Back-edge line (emit before it) → pipelined accesses whose next-iteration byte moves into place.
    pub moves: LineMap<Vec<usize>>,
}

/// Fewest members of a batch whose loads keep their data prefetch on the kernel-parameter fast
/// path. There the batch's tests are a few instructions per member; the prefetch still pays when
/// many members delay the loads behind the batch's branch (stencil2d, a batch of four on the
/// H100: 1.10x with it, 1.18x without), not in a batch of two (scan's add-back: 1.72x with it,
/// 1.36x without; benches/results/h100.md, run 28).
const MIN_FAST_DATA_BATCH: usize = 3;

/// Fewest accesses worth a batch (one alone is its own check).
const MIN_BATCH: usize = 2;
/// Most accesses in one batch: the batch keeps their shadow bytes and addresses live up to its
/// branch, and ptxas then schedules all their loads together, which costs registers; the rest of
/// the block's accesses keep their own checks.
const MAX_BATCH: usize = 8;

/// Plans prefetches for `candidates` (plain single checks, in line order).
pub(super) fn plan<'a>(lines: &[Line<'a>], defs: &ModuleDefs<'_, 'a>, branches: &Branches<'_>, check_lines: &LineSet, candidates: &[Candidate], batches: bool) -> PrefetchPlan {
    let mut out = PrefetchPlan::default();
    let mut sc = Scan::new(lines, defs);
    let pipelined: Vec<Option<Pipelined>> = candidates.iter().map(|c| pipeline(&mut sc, c.line, &c.base, branches)).collect();
    let mut per_loop: LineMap<usize> = LineMap::default();
    for p in pipelined.iter().flatten() {
        *per_loop.entry(p.back_edge).or_default() += 1;
    }
    // Batch candidates by their block's first check line.
    let mut batchable: LineMap<Vec<(&Candidate, usize, Vec<usize>)>> = LineMap::default();
    let mut rest = Vec::new();
    for (c, p) in candidates.iter().zip(pipelined) {
        if let Some(p) = p.filter(|p| per_loop[&p.back_edge] <= MAX_PIPELINED_PER_LOOP) {
            out.at.entry(p.preheader).or_default().push(Prefetch {
                access: c.line,
                chain: p.chain.clone(),
                target: Target::Preheader,
                next_values: Vec::new(),
                data: false,
                data_on_fast_path: false,
                loc: c.loc,
            });
            out.at.entry(p.start).or_default().push(Prefetch {
                access: c.line,
                chain: p.chain,
                target: Target::NextIteration,
                next_values: p.next_values,
                data: false,
                data_on_fast_path: false,
                loc: c.loc,
            });
            out.moves.entry(p.back_edge).or_default().push(c.line);
        } else if let Some((first_check, anchor, chain)) = (batches && !c.guarded).then(|| batch_place(&mut sc, c.line, &c.base, check_lines)).flatten() {
            batchable.entry(first_check).or_default().push((c, anchor, chain));
        } else {
            rest.push(c);
        }
    }
    // Batches (the first MAX_BATCH members in line order); the others go alone.
    let mut alone = LineSet::default();
    for (first_check, mut members) in batchable {
        if members.len() < MIN_BATCH {
            alone.extend(members.iter().map(|m| m.0.line));
            continue;
        }
        alone.extend(members.iter().skip(MAX_BATCH).map(|m| m.0.line));
        members.truncate(MAX_BATCH);
        let data_on_fast_path = members.len() >= MIN_FAST_DATA_BATCH;
        for (c, anchor, chain) in members {
            out.at.entry(anchor).or_default().push(Prefetch { access: c.line, chain, target: Target::Batch(first_check), next_values: Vec::new(), data: false, data_on_fast_path, loc: c.loc });
        }
    }
    for c in candidates.iter().filter(|c| alone.contains(&c.line)).chain(rest) {
        if let Some((anchor, chain)) = place(&mut sc, c.line, &c.base, check_lines) {
            out.at.entry(anchor).or_default().push(Prefetch { access: c.line, chain, target: Target::Plain, next_values: Vec::new(), data: false, data_on_fast_path: false, loc: c.loc });
        }
    }
    // Data prefetch for the batched and prefetched loads outside loops. Inside loops it measured
    // slower (pipelined loops hide the check already; cache-resident loops pay the instructions),
    // and single checks are left out too: their addresses come from loaded values (gathers),
    // where a line-sized prefetch multiplies DRAM traffic.
    for p in out.at.values_mut().flatten() {
        p.data = matches!(p.target, Target::Batch(_) | Target::Plain) && !branches.in_loop(p.access);
    }
    // Several prefetches at one anchor: keep line order (deterministic output).
    for v in out.at.values_mut() {
        v.sort_by_key(|p| (p.access, matches!(p.target, Target::NextIteration)));
    }
    out
}

/// For batching the access at `j`: its block's first check line, and an anchor at or before it
/// where the access's address can be had (directly or through a recomputed chain).
fn batch_place(sc: &mut Scan<'_, '_, '_>, j: usize, base: &str, check_lines: &LineSet) -> Option<(usize, usize, Vec<usize>)> {
    let start = sc.block_start(j)?;
    let first_check = (start..=j).find(|k| check_lines.contains(k))?;
    let plain = sc.after_last_write(base, start, j);
    if plain <= first_check {
        return Some((first_check, plain, Vec::new()));
    }
    if let Some((at, chain)) = address_at(sc, base, start, j, None).filter(|(at, chain)| *at <= first_check && !chain.is_empty()) {
        return Some((first_check, at, chain));
    }
    // address_at recomputes as far back as it can, and fails when that runs into a load or its
    // budget above the anchor; recomputing only what is not yet final at the first check often
    // succeeds (a strided walk: `p2 = p1 + s` with p1 final there).
    let (mut chain, mut budget) = (Vec::new(), MAX_CHAIN);
    chain_from(sc, base, start, first_check, j, &mut budget, &mut chain)?;
    chain.sort_unstable();
    (!chain.is_empty()).then_some((first_check, first_check, chain))
}

/// The lines that recompute `reg`'s value at `before` from values final at `anchor` (inserted
/// before line `anchor`), appended to `chain`; `None` when a needed line is not plain address
/// arithmetic or the chain would exceed `budget` lines.
fn chain_from(sc: &mut Scan<'_, '_, '_>, reg: &str, start: usize, anchor: usize, before: usize, budget: &mut usize, chain: &mut Vec<usize>) -> Option<()> {
    let Some(k) = sc.last_write(reg, start, before).filter(|&k| k >= anchor) else { return Some(()) };
    if chain.contains(&k) {
        return Some(());
    }
    *budget = budget.checked_sub(1)?;
    for &input in sc.arithmetic_inputs(k)?.iter() {
        chain_from(sc, input, start, anchor, k, budget, chain)?;
    }
    chain.push(k);
    Some(())
}

/// A pipelined access's placement.
struct Pipelined {
    /// The loop's label line (preheader code goes before it), first body line, back-edge line.
    preheader: usize,
    start: usize,
    back_edge: usize,
    chain: Vec<usize>,
    next_values: Vec<(String, Vec<usize>)>,
}

/// Pipelining of the access at `j` when its block is a single-block loop and its address, and the
/// next iteration's, can be computed at the top of the body.
fn pipeline(sc: &mut Scan<'_, '_, '_>, j: usize, base: &str, branches: &Branches<'_>) -> Option<Pipelined> {
    let start = sc.block_start(j)?;
    let lines = sc.lines;
    let label_line = start.checked_sub(1)?;
    lines[label_line].label()?;
    // The block ends at a branch back to its own label.
    if !sc.bodies.interior(label_line) {
        return None;
    }
    // (`interior(k)` of the lines after `j`: inside `j`'s body, known without a search.)
    let body = sc.bodies.holding(j).map(|b| (b.open, b.close));
    let interior = |k: usize| match body {
        Some((open, close)) if open < k => k < close,
        _ => sc.bodies.interior(k),
    };
    let back_edge = (j + 1..lines.len().min(j + WINDOW)).find(|&k| !interior(k) || (!lines[k].is_blank() && lines[k].kills_checks()))?;
    if !sc.bodies.interior(back_edge) {
        return None;
    }
    if lines[j..=back_edge].iter().any(Line::block_comment_marker) {
        return None;
    }
    // Entered only by falling through from the preheader, and left only at the back edge.
    if branches.single_block_loop(lines, sc.bodies, label_line, back_edge)?.other_entries != 0 {
        return None;
    }
    // This iteration's address from values at the top of the body.
    let mut reads = Vec::new();
    let (at, chain) = address_at(sc, base, start, j, Some(&mut reads))?;
    if at != start {
        return None;
    }
    // The next iteration's: each loop-carried register read at the top is replaced by its value at
    // the back edge, itself computed from values at the top.
    let mut next_values = Vec::new();
    for r in reads {
        if sc.last_write(&r, start, back_edge).is_none() {
            continue; // loop-invariant
        }
        let (at, c) = address_at(sc, &r, start, back_edge, None)?;
        if at != start {
            return None;
        }
        next_values.push((r, c));
    }
    if next_values.is_empty() {
        return None; // the same address every iteration: the plain placement does as well
    }
    Some(Pipelined { preheader: label_line, start, back_edge, chain, next_values })
}

/// Where an address can be had: the anchor line and the chain to recompute there ([`address_at`]).
type Address = (usize, Vec<usize>);

/// Per-module scan state: each candidate's block start (found walking back to the nearest boundary
/// or the previous candidate); where registers are written is read from the bodies' one index of
/// definitions (ir/defs.rs), built once however many candidates look at a body.
struct Scan<'l, 'a, 'm> {
    lines: &'l [Line<'a>],
    /// Nothing is placed outside the body of the access it serves.
    bodies: &'l Bodies,
    /// The bodies' register definitions (where a value was last written), and the last body's
    /// (opening and closing line: candidates come in line order, most asks are in one body).
    defs: &'l ModuleDefs<'m, 'a>,
    body_defs: Option<(usize, usize, Defs<'l, 'a>)>,
    starts: LineMap<Option<usize>>,
    /// Last line asked about, and its block's state: `Some(first line)` or `None` (poisoned by a
    /// block comment).
    walk: Option<(usize, Option<usize>)>,
    /// [`arithmetic_inputs`] of each line asked about: the chains of a block's candidates, and
    /// of one candidate's pipelining, batching and plain placement, pass the same lines.
    inputs: LineMap<Option<Operands<'a>>>,
    /// [`address_at`] without reads, by the line it is asked before: (register, block start,
    /// answer).
    addresses: LineMap<(String, usize, Option<Address>)>,
}

impl<'l, 'a, 'm> Scan<'l, 'a, 'm> {
    fn new(lines: &'l [Line<'a>], defs: &'l ModuleDefs<'m, 'a>) -> Self {
        Self { lines, bodies: defs.bodies(), defs, body_defs: None, starts: LineMap::default(), walk: None, inputs: LineMap::default(), addresses: LineMap::default() }
    }

    /// The first line of `j`'s basic block (at most [`WINDOW`] lines back), or `None` when the block
    /// holds something a prefetch must not be moved across or into (block comments, a statement
    /// continued over lines at the start).
    fn block_start(&mut self, j: usize) -> Option<usize> {
        if let Some(&s) = self.starts.get(&j) {
            return s;
        }
        // Walk back to the nearest boundary, or to the previous candidate of the same block
        // (whose state carries over): each line is looked at about once.
        let lo = j.saturating_sub(WINDOW);
        let prev = self.walk.filter(|&(pj, _)| pj < j && pj >= lo);
        let mut state = Some(lo);
        // `interior(k)` of the lines walked back over: inside `j`'s body, known without a search.
        let body = self.bodies.holding(j).map(|b| (b.open, b.close));
        let interior = |k: usize| match body {
            Some((open, close)) if open < k => k < close,
            _ => self.bodies.interior(k),
        };
        for k in (lo..j).rev() {
            if self.lines[k].block_comment_marker() {
                state = None;
                break;
            }
            if let Some((pj, pst)) = prev {
                if k == pj {
                    state = pst;
                    break;
                }
            }
            // Declarations start a region too: nothing declared after them may be used above them.
            if !interior(k) || (!self.lines[k].is_blank() && (self.lines[k].kills_checks() || matches!(self.lines[k].directive(), Some(".reg" | ".local" | ".shared")))) {
                state = Some(k + 1);
                break;
            }
        }
        self.walk = Some((j, state));
        let start = state.map(|s| s.max(j.saturating_sub(WINDOW))).filter(|&s| {
            // The start must begin a statement: the code line before it ends one.
            let before = self.lines[..s].iter().rev().find(|l| !l.is_blank());
            !matches!(before, Some(l) if !(l.ends_statement() || l.directive().is_some()))
        });
        self.starts.insert(j, start);
        start
    }

    /// The line after the last write of `reg` in `[start, before)` (`start` when none): where
    /// its value at `before` is first available as it is.
    fn after_last_write(&mut self, reg: &str, start: usize, before: usize) -> usize {
        self.last_write(reg, start, before).map_or(start, |k| k + 1)
    }

    /// [`arithmetic_inputs`] of line `k`, decided once.
    fn arithmetic_inputs(&mut self, k: usize) -> Option<Operands<'a>> {
        let lines = self.lines;
        self.inputs.entry(k).or_insert_with(|| arithmetic_inputs(&lines[k])).clone()
    }

    /// Last line in `[start, before)` that writes `reg` (lines of one body: a scan looks no
    /// further than the block of the access it serves).
    fn last_write(&mut self, reg: &str, start: usize, before: usize) -> Option<usize> {
        let last = before.checked_sub(1).filter(|&last| last >= start)?;
        let defs = match self.body_defs {
            Some((open, close, defs)) if open <= last && last <= close => defs,
            _ => {
                let b = self.bodies.holding(last)?;
                let defs = self.defs.of(b);
                self.body_defs = Some((b.open, b.close, defs));
                defs
            }
        };
        debug_assert!(self.bodies.holding(start).is_some_and(|b| b.open <= last && last <= b.close), "a scan stays inside one body");
        defs.last_write(reg, start, before)
    }
}

/// The register operands a recomputable arithmetic statement reads, or `None` when it is not one
/// (guarded, several statements, or an opcode outside the address-arithmetic set).
fn arithmetic_inputs<'a>(line: &Line<'a>) -> Option<Operands<'a>> {
    let ins = line.lone_statement()?.instr.as_ref()?;
    if ins.guard.is_some() {
        return None;
    }
    // Integer adds, subtracts, shifts, multiplies (low or wide), moves, widening conversions and
    // the conversion of a generic address to global.
    let mut quals = ins.opcode.quals();
    let q: [Option<&str>; 4] = std::array::from_fn(|_| quals.next());
    let ok = match (ins.opcode.op, q) {
        (Op::Add | Op::Sub, [Some("s64" | "u64" | "s32" | "u32"), None, ..]) => true,
        (Op::Shl, [Some("b64" | "b32"), None, ..]) => true,
        (Op::Mul | Op::Mad, [Some("wide" | "lo"), Some(_), ..]) => true,
        (Op::Cvta, [Some("to"), Some("global"), Some("u64"), None]) => true,
        (Op::Mov, [Some("u64" | "b64" | "u32" | "b32" | "s32" | "s64"), None, ..]) => true,
        (Op::Cvt, [Some(to), Some(from), None, _]) => matches!((to, from), ("u64" | "s64", "u32" | "s32")),
        _ => false,
    };
    if !ok || ins.operands.len() < 2 {
        return None;
    }
    // (Held inline: asked again for each candidate whose chain passes the line.)
    let mut inputs = Operands::new();
    for o in &ins.operands[1..] {
        if o.starts_with('%') {
            // Special registers (%tid.x, %ctaid.y, ...) hold the same value everywhere.
            if !o.contains('.') {
                inputs.push(o);
            }
        } else if o.parse::<i64>().is_err() && !o.starts_with("0x") && !o.starts_with("-0x") {
            return None; // symbols, vectors, anything else
        }
    }
    Some(inputs)
}

/// Earliest line (within `[start, before)`) at which `reg`'s value at `before` can be had, and the
/// arithmetic lines to recompute on the way (`budget` bounds their number).
/// Registers read at the anchor (not recomputed) are added to `reads`, when asked for. The lines
/// are added to `chain` once each, in no particular order.
fn earliest(sc: &mut Scan<'_, '_, '_>, reg: &str, start: usize, before: usize, budget: &mut usize, chain: &mut Vec<usize>, reads: &mut Option<&mut Vec<String>>) -> usize {
    let Some(k) = sc.last_write(reg, start, before) else {
        if let Some(reads) = reads.as_deref_mut().filter(|reads| !reads.iter().any(|r| r == reg)) {
            reads.push(reg.to_string());
        }
        return start;
    };
    if *budget == 0 {
        return k + 1;
    }
    let Some(inputs) = sc.arithmetic_inputs(k) else { return k + 1 };
    *budget -= 1;
    let mut at = start;
    for &input in inputs.iter() {
        at = at.max(earliest(sc, input, start, k, budget, chain, reads));
    }
    // Inputs redefined between the anchor and `k` would change the value: the recursion anchors
    // each input after its last write before `k`, and `at` is the latest of those.
    if !chain.contains(&k) {
        chain.push(k);
    }
    at
}

/// The earliest anchor for `reg`'s value at `before` through recomputed arithmetic, and the
/// chain (in line order) to recompute there; `None` when a chain line would lie above the anchor
/// (it reads values final only there). Registers read at the anchor go to `reads`, if given.
fn address_at(sc: &mut Scan<'_, '_, '_>, reg: &str, start: usize, before: usize, mut reads: Option<&mut Vec<String>>) -> Option<(usize, Vec<usize>)> {
    // (Without `reads`, a pure function of its arguments: asked again of an access that batching
    // and then the plain placement both place, it is answered as before.)
    if reads.is_none() {
        if let Some((r, s, found)) = sc.addresses.get(&before) {
            if r == reg && *s == start {
                return found.clone();
            }
        }
        let found = address_at_uncached(sc, reg, start, before, None);
        sc.addresses.insert(before, (reg.to_string(), start, found.clone()));
        return found;
    }
    address_at_uncached(sc, reg, start, before, reads.take())
}

/// [`address_at`], found.
fn address_at_uncached(sc: &mut Scan<'_, '_, '_>, reg: &str, start: usize, before: usize, mut reads: Option<&mut Vec<String>>) -> Option<(usize, Vec<usize>)> {
    let (mut budget, mut chain) = (MAX_CHAIN, Vec::new());
    let at = earliest(sc, reg, start, before, &mut budget, &mut chain, &mut reads);
    chain.sort_unstable();
    chain.iter().all(|&l| l >= at).then_some((at, chain))
}

/// Anchor and recompute chain for the access at `j` through `base`, if a prefetch gains anything.
fn place(sc: &mut Scan<'_, '_, '_>, j: usize, base: &str, check_lines: &LineSet) -> Option<(usize, Vec<usize>)> {
    let start = sc.block_start(j)?;
    let checks_in = |from: usize| (from..j).any(|k| check_lines.contains(&k));
    let plain = sc.after_last_write(base, start, j);
    if checks_in(plain) {
        return Some((plain, Vec::new()));
    }
    let (at, chain) = address_at(sc, base, start, j, None)?;
    (!chain.is_empty() && checks_in(at)).then_some((at, chain))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::ir::bodies::Bodies;
    use proptest::prelude::*;

    proptest! {
        /// An address asked again, in any order and after others, is the one found afresh.
        #[test]
        fn a_remembered_address_is_the_one_found_afresh(
            body in proptest::collection::vec((0usize..5, 0usize..6, 0usize..6, 0usize..6), 1..14),
            asks in proptest::collection::vec((0usize..6, 0usize..16), 1..12),
        ) {
            let ops = ["add.s64 %rd{a}, %rd{b}, %rd{c};", "mul.wide.s32 %rd{a}, %r{b}, 4;", "ld.global.u64 %rd{a}, [%rd{b}];", "mov.u64 %rd{a}, %rd{c};", "shl.b64 %rd{a}, %rd{b}, 2;"];
            let mut text = String::from(".visible .entry k()\n{\n");
            for (op, a, b, c) in &body {
                text.push_str(&ops[*op].replace("{a}", &a.to_string()).replace("{b}", &b.to_string()).replace("{c}", &c.to_string()));
                text.push('\n');
            }
            text.push_str("ret;\n}\n");
            let lines = Line::read_all(text.split_inclusive('\n'));
            let bodies = Bodies::scan(&lines);
            let defs = ModuleDefs::new(&lines, &bodies);
            let mut remembering = Scan::new(&lines, &defs);
            let start = 2;
            for (reg, before) in asks {
                let (reg, before) = (format!("%rd{reg}"), start + before % (body.len() + 1));
                let found = address_at(&mut remembering, &reg, start, before, None);
                prop_assert_eq!(&found, &address_at_uncached(&mut Scan::new(&lines, &defs), &reg, start, before, None));
                prop_assert_eq!(found, address_at(&mut remembering, &reg, start, before, None));
            }
        }
    }
}
