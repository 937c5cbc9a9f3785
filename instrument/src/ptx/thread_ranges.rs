//! Shared/local accesses whose bounds hold for every thread, proven from the thread's index: the
//! check is dropped.
//!
//! nvcc indexes a block's shared arrays by `threadIdx`: `s[threadIdx.x]` is `s + 4·%tid.x`, and a
//! 1024-element array holds every `%tid.x` a block can have (a block has at most 1024 threads in x
//! and y, 64 in z; a warp 32 lanes). Scans and reductions read `s[tid - off]` behind
//! `if (tid >= off)`, a branch around the access whose fall-through implies the bound. So a
//! register's value is followed as `c + Σ k·atom`, the atoms being the thread's indices, a value
//! masked with `and` or reduced with `rem` (each with its range) and a variable's address;
//! conditional branches the access is reached by falling through narrow the atoms' ranges. When
//! the offset from the variable lies inside it for every value in the ranges, the access needs no
//! check.
//!
//! A constant address (`[var+off]`) inside its variable needs no check either.
//!
//! Only registers with one unguarded definition are followed (a value read before its one
//! definition, around a loop's back edge, is not), so every use sees that definition's value.

use super::access::{parse_int, Instr};
use super::bodies::Body;
use super::defs::Defs;
use super::opcode::Op;
use super::space_check::{Base, SpaceCheck};
use super::stmt::falls_through;
use super::Line;
use rustc_hash::FxHashMap as HashMap;

/// `c + Σ k·atom`, terms sorted by atom.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Affine<'a> {
    c: i64,
    terms: Vec<(&'a str, i64)>,
}

impl<'a> Affine<'a> {
    fn constant(c: i64) -> Self {
        Affine { c, terms: Vec::new() }
    }
    fn atom(a: &'a str) -> Self {
        Affine { c: 0, terms: vec![(a, 1)] }
    }
    fn plus(&self, o: &Affine<'a>, sign: i64) -> Option<Self> {
        let mut terms = self.terms.clone();
        for &(a, k) in &o.terms {
            match terms.iter_mut().find(|(b, _)| *b == a) {
                Some(t) => t.1 = t.1.checked_add(k.checked_mul(sign)?)?,
                None => terms.push((a, k.checked_mul(sign)?)),
            }
        }
        terms.retain(|&(_, k)| k != 0);
        terms.sort_unstable();
        Some(Affine { c: self.c.checked_add(o.c.checked_mul(sign)?)?, terms })
    }
    fn times(&self, k: i64) -> Option<Self> {
        let terms = self.terms.iter().filter(|_| k != 0).map(|&(a, j)| Some((a, j.checked_mul(k)?))).collect::<Option<Vec<_>>>()?;
        Some(Affine { c: self.c.checked_mul(k)?, terms })
    }
}

/// Values a thread's registers hold, as far as their one definition says.
pub(super) struct ThreadValues<'a> {
    values: HashMap<&'a str, Affine<'a>>,
    /// Ranges of the atoms that have one (inclusive).
    ranges: HashMap<&'a str, (i64, i64)>,
    /// The bits an atom may have set, for atoms made by bit operations (`and` with a constant,
    /// `or`, `xor`, `bfe` of such values: Triton's swizzled shared-memory offsets): never
    /// negative, and at most the mask. Kept besides the range because an `or` of two values
    /// with disjoint bits is much smaller than the range their sizes give.
    bits: HashMap<&'a str, u64>,
    /// The seeds ([`Self::of_body_seeded`]) each atom made by a bit operation was computed from:
    /// its range holds only where theirs do.
    from_seeds: HashMap<&'a str, Vec<&'a str>>,
    seeds: Vec<&'a str>,
    /// Predicates with one definition `setp.cmp.t %p, reg, imm`: (comparison, register, value).
    preds: HashMap<&'a str, (&'a str, &'a str, i64)>,
}

/// Values past this are not reasoned about (32-bit wrap-around stays out of reach).
const LIMIT: i64 = 1 << 30;

fn special_range(reg: &str) -> Option<(i64, i64)> {
    match reg {
        "%tid.x" | "%tid.y" => Some((0, 1023)),
        "%tid.z" => Some((0, 63)),
        "%laneid" => Some((0, 31)),
        _ => None,
    }
}

impl<'a> ThreadValues<'a> {
    /// The values of a body's registers, from its definitions.
    pub fn of_body(defs: Defs<'_, 'a>) -> Self {
        Self::of_body_seeded(defs, &[])
    }

    /// [`Self::of_body`] with `seeds`, registers of several definitions taken as atoms in the
    /// given ranges: valid only where the caller has proven each stays in its range (a loop's
    /// wrapping stage counter, loops.rs).
    pub fn of_body_seeded(defs: Defs<'_, 'a>, seeds: &[(&'a str, (i64, i64))]) -> Self {
        let mut t = ThreadValues {
            values: HashMap::default(),
            ranges: HashMap::default(),
            bits: HashMap::default(),
            from_seeds: HashMap::default(),
            seeds: seeds.iter().map(|s| s.0).collect(),
            preds: HashMap::default(),
        };
        for &(reg, range) in seeds {
            t.values.insert(reg, Affine::atom(reg));
            t.ranges.insert(reg, range);
        }
        for w in defs.writers() {
            let ins = w.instr;
            let mut dests = ins.dests();
            // (A guarded definition leaves the old value on some paths: never followed.)
            let (Some(d), None) = (dests.next(), dests.next()) else { continue };
            if !defs.defined_once_unguarded(d) {
                continue;
            }
            if ins.opcode.op == Op::Setp {
                if let Some(p) = t.predicate(ins) {
                    t.preds.insert(d, p);
                }
                continue;
            }
            if let Some(v) = t.evaluate(d, ins) {
                if v.c.abs() < LIMIT && v.terms.iter().all(|&(_, k)| k.abs() < LIMIT) {
                    t.values.insert(d, v);
                }
            }
        }
        t
    }

    fn operand(&mut self, op: &'a str) -> Option<Affine<'a>> {
        let op = op.trim();
        if let Some(v) = parse_int(op) {
            return Some(Affine::constant(v));
        }
        if let Some(r) = special_range(op) {
            self.ranges.insert(op, r);
            return Some(Affine::atom(op));
        }
        self.values.get(op).cloned()
    }

    fn evaluate(&mut self, d: &'a str, ins: &Instr<'a>) -> Option<Affine<'a>> {
        let ops = &ins.operands;
        let int = |q: &str| matches!(q, "u32" | "s32" | "b32" | "u64" | "s64" | "b64");
        let quals: Vec<&str> = ins.opcode.parts().collect();
        if !quals.iter().skip(1).all(|q| int(q) || matches!(*q, "lo" | "wide")) {
            return None;
        }
        match (ins.opcode.op, ops.len()) {
            (Op::Mov, 2) => {
                let src = ops[1].trim();
                // A variable's address is an atom of its own (no range: the check subtracts it).
                if !src.starts_with('%') && parse_int(src).is_none() && !src.contains(['{', '[']) {
                    return Some(Affine::atom(src));
                }
                self.operand(src)
            }
            (Op::Add, 3) => self.operand(ops[1])?.plus(&self.operand(ops[2])?, 1),
            (Op::Sub, 3) => self.operand(ops[1])?.plus(&self.operand(ops[2])?, -1),
            (Op::Shl, 3) => {
                let s = parse_int(ops[2].trim()).filter(|s| (0..20).contains(s))?;
                self.operand(ops[1])?.times(1 << s)
            }
            (Op::Mul, 3) => {
                let k = parse_int(ops[2].trim()).filter(|k| k.abs() < LIMIT)?;
                self.operand(ops[1])?.times(k)
            }
            (Op::Mad, 4) if quals.get(1) == Some(&"lo") => {
                let k = parse_int(ops[2].trim()).filter(|k| k.abs() < LIMIT)?;
                self.operand(ops[1])?.times(k)?.plus(&self.operand(ops[3])?, 1)
            }
            // A mask or a remainder: a fresh atom with its range. (A mask of a value whose bits
            // are known keeps only those.)
            (Op::And, 3) => {
                let m = parse_int(ops[2].trim()).filter(|m| (0..LIMIT).contains(m))? as u64;
                let v = self.operand(ops[1]);
                let known = v.as_ref().and_then(|v| self.bits_of(v));
                Some(self.bits_atom(d, known.map_or(m, |b| b & m), v.iter().filter(|_| known.is_some())))
            }
            // Bit operations of values whose bits are known (never negative).
            (Op::Or | Op::Xor, 3) => {
                let (a, b) = (self.operand(ops[1])?, self.operand(ops[2])?);
                let m = self.bits_of(&a)? | self.bits_of(&b)?;
                (m < LIMIT as u64).then(|| self.bits_atom(d, m, [&a, &b]))
            }
            (Op::Bfe, 4) if quals.get(1) == Some(&"u32") => {
                let pos = parse_int(ops[2].trim()).filter(|p| (0..32).contains(p))?;
                let len = parse_int(ops[3].trim()).filter(|l| (1..30).contains(l))?;
                let field = (1u64 << len) - 1;
                let v = self.operand(ops[1]);
                let known = v.as_ref().and_then(|v| self.bits_of(v));
                Some(self.bits_atom(d, known.map_or(field, |b| (b >> pos) & field), v.iter().filter(|_| known.is_some())))
            }
            (Op::Rem, 3) if quals.get(1).is_some_and(|q| q.starts_with('u')) => {
                let m = parse_int(ops[2].trim()).filter(|m| (1..LIMIT).contains(m))?;
                self.ranges.insert(d, (0, m - 1));
                Some(Affine::atom(d))
            }
            _ => None,
        }
    }

    /// `d` as an atom of at most the bits `mask` (its range `[0, mask]`), computed from the
    /// values `from`.
    fn bits_atom<'v>(&mut self, d: &'a str, mask: u64, from: impl IntoIterator<Item = &'v Affine<'a>>) -> Affine<'a>
    where
        'a: 'v,
    {
        let mut seeds: Vec<&'a str> = from.into_iter().flat_map(|v| self.seeds_of(v)).collect();
        seeds.sort_unstable();
        seeds.dedup();
        if !seeds.is_empty() {
            self.from_seeds.insert(d, seeds);
        }
        self.bits.insert(d, mask);
        self.ranges.insert(d, (0, mask as i64));
        Affine::atom(d)
    }

    /// The bits value `v` may have set, when it is never negative: a constant's own; a sum of
    /// power-of-two multiples of atoms with known bits (or non-negative ranges) whose bits do
    /// not overlap is their `or` (no carries); otherwise every bit up to the sum's highest value
    /// (below [`LIMIT`]: the sums stay far from wrapping).
    fn bits_of(&self, v: &Affine<'a>) -> Option<u64> {
        let ones_to = |hi: i64| if hi <= 0 { 0 } else { u64::MAX >> (hi as u64).leading_zeros() };
        let atom_bits = |a: &str| self.bits.get(a).copied().or_else(|| self.ranges.get(a).filter(|r| r.0 >= 0).map(|r| ones_to(r.1)));
        if v.c < 0 {
            return None;
        }
        let (mut or, mut overlap, mut hi) = (v.c as u64, false, v.c);
        for &(a, k) in &v.terms {
            let b = atom_bits(a)?;
            if k <= 0 {
                return None;
            }
            hi = hi.checked_add((b as i64).checked_mul(k)?)?;
            if k.count_ones() == 1 {
                let shifted = b << k.trailing_zeros();
                overlap |= or & shifted != 0;
                or |= shifted;
            } else {
                overlap = true; // (3·x: x + 2·x, whose bits overlap)
            }
        }
        let bits = if overlap { ones_to(hi) } else { or };
        (bits < LIMIT as u64).then_some(bits)
    }

    /// `setp.cmp.t %p, reg, imm` with `reg` one ranged atom plus a constant.
    fn predicate(&mut self, ins: &Instr<'a>) -> Option<(&'a str, &'a str, i64)> {
        let quals: Vec<&str> = ins.opcode.parts().collect();
        let (cmp, ty) = (*quals.get(1)?, *quals.get(2)?);
        if quals.len() != 3 || !matches!(ty, "s32" | "u32") || ins.operands.len() != 3 {
            return None;
        }
        let imm = parse_int(ins.operands[2].trim()).filter(|v| (0..LIMIT).contains(v))?;
        Some((cmp, ins.operands[1].trim(), imm))
    }
}

/// The range of atom `a` when `reg cmp imm` is `holds` (reg = a + c).
fn narrow(range: (i64, i64), c: i64, cmp: &str, imm: i64, holds: bool) -> Option<(i64, i64)> {
    let (lo, hi) = range;
    // On a + c: the comparison's outcome as bounds of a.
    let v = imm - c;
    let cmp = if holds {
        cmp
    } else {
        match cmp {
            "eq" => "ne",
            "ne" => "eq",
            "lt" => "ge",
            "le" => "gt",
            "gt" => "le",
            "ge" => "lt",
            _ => return None,
        }
    };
    let r = match cmp {
        "eq" => (lo.max(v), hi.min(v)),
        "ne" if v == lo => (lo + 1, hi),
        "ne" if v == hi => (lo, hi - 1),
        "ne" => (lo, hi),
        "lt" => (lo, hi.min(v - 1)),
        "le" => (lo, hi.min(v)),
        "gt" => (lo.max(v + 1), hi),
        "ge" => (lo.max(v), hi),
        _ => return None,
    };
    Some(r)
}

impl<'a> ThreadValues<'a> {
    /// The thread indices' ranges at statement `key` of body `b` as the conditional branches it
    /// is reached from by falling through narrow them (back to the block's label, an
    /// unconditional jump, or the body's start); atoms not narrowed keep [`Self::ranges`].
    fn narrowed_at(&self, lines: &[Line<'a>], b: &Body, key: (usize, usize)) -> HashMap<&'a str, (i64, i64)> {
        let mut ranges: HashMap<&'a str, (i64, i64)> = HashMap::default();
        let (line, stmt) = key;
        for i in (b.open + 1..=line).rev() {
            let l = &lines[i];
            if l.label().is_some() {
                break;
            }
            let stmts = l.stmts();
            let upto = if i == line { stmt } else { stmts.len() };
            for s in stmts[..upto].iter().rev() {
                let Some(ins) = s.instr.as_ref() else { continue };
                if !falls_through(ins) {
                    return ranges; // reached only through a label: stop here
                }
                if ins.opcode.op != Op::Bra {
                    continue;
                }
                let Some(g) = ins.guard else { continue };
                // Fell through `@p bra`: p is false; through `@!p bra`: p is true.
                let (p, holds) = match g.strip_prefix('!') {
                    Some(p) => (p, true),
                    None => (g, false),
                };
                let Some(&(cmp, reg, imm)) = self.preds.get(p) else { continue };
                // Only a thread's index (the same value whenever it is read) is narrowed, by a
                // comparison no wrap-around can turn (the compared value is never negative).
                let Some(Affine { c, terms }) = self.values.get(reg) else { continue };
                if let [(a, 1)] = terms.as_slice() {
                    if let (Some(_), Some(&r)) = (special_range(a), ranges.get(a).or_else(|| self.ranges.get(a))) {
                        if r.0 + c >= 0 {
                            if let Some(n) = narrow(r, *c, cmp, imm, holds) {
                                ranges.insert(a, n);
                            }
                        }
                    }
                }
            }
        }
        ranges
    }

    /// Does every thread's access of `c` (statement `key` of body `b`) stay inside its variable?
    pub fn proves(&self, lines: &[Line<'a>], b: &Body, key: (usize, usize), c: &SpaceCheck) -> bool {
        if let (Base::Symbol, Some(size), None) = (&c.base, c.size, &c.width_reg) {
            // `[var+off]`: a constant offset.
            return c.offset >= 0 && c.offset + i64::from(c.width) <= size as i64;
        }
        let (Base::Window(r, _), Some(size), None) = (&c.base, c.size, &c.width_reg) else { return false };
        let Some(v) = self.values.get(r.as_str()) else { return false };
        let narrowed = self.narrowed_at(lines, b, key);
        match self.offsets(v, &c.var, &narrowed) {
            Some((lo, hi)) => lo + c.offset >= 0 && hi + c.offset + i64::from(c.width) <= size as i64,
            None => false,
        }
    }

    /// The offsets from variable `var` that value `v` can take, inclusive: `v` must be `var`'s
    /// address plus ranged terms (`narrowed` first, then [`Self::ranges`]).
    fn offsets(&self, v: &Affine<'a>, var: &str, narrowed: &HashMap<&'a str, (i64, i64)>) -> Option<(i64, i64)> {
        if !v.terms.iter().any(|&(a, k)| a == var && k == 1) {
            return None;
        }
        let (mut lo, mut hi) = (v.c, v.c);
        for &(a, k) in v.terms.iter().filter(|(a, _)| *a != var) {
            let &(alo, ahi) = narrowed.get(a).or_else(|| self.ranges.get(a))?;
            if alo > ahi {
                return None; // no thread gets here, as far as the ranges say: left checked
            }
            let (x, y) = (alo * k, ahi * k);
            lo += x.min(y);
            hi += x.max(y);
        }
        Some((lo, hi))
    }

    /// `reg`'s lowest and highest offset from one of `vars`, when its value is that variable's
    /// address plus ranged terms, for every thread (no branch narrows the ranges).
    pub fn var_offsets(&self, reg: &str, vars: &[&str]) -> Option<(i64, i64)> {
        let v = self.values.get(reg)?;
        let var = v.terms.iter().map(|&(a, _)| a).find(|a| vars.contains(a))?;
        self.offsets(v, var, &HashMap::default())
    }

    /// The seeds whose ranges value `v`'s range relies on: its seed atoms, and those its bit
    /// atoms were computed from.
    fn seeds_of(&self, v: &Affine<'a>) -> Vec<&'a str> {
        let mut out = Vec::new();
        for &(a, _) in &v.terms {
            if self.seeds.contains(&a) {
                out.push(a);
            }
            out.extend(self.from_seeds.get(a).into_iter().flatten());
        }
        out
    }

    /// The seeds whose ranges `reg`'s value relies on.
    pub fn seeds_used(&self, reg: &str) -> Vec<&'a str> {
        self.values.get(reg).map(|v| self.seeds_of(v)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::spaces::{analyze, plan};
    use super::super::{bodies::Bodies, defs::ModuleDefs, DeclaredRegs, Line};
    use super::*;

    /// Which of the body's shared accesses are proven, in order.
    fn proven(body: &str) -> Vec<bool> {
        proven_with(body, 4096)
    }

    /// [`proven`] with `s` of `s_size` bytes.
    fn proven_with(body: &str, s_size: u32) -> Vec<bool> {
        let text = format!(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u32 n)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<20>;\n.shared .align 4 .b8 s[{s_size}];\n.shared .align 4 .b8 t[512];\n{body}\nret;\n}}\n");
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        let defs = ModuleDefs::new(&lines, &bodies);
        let m = analyze(&lines, &bodies, &defs, &Default::default());
        let b = bodies.nth(0);
        let f = &m.functions["k"];
        let values = ThreadValues::of_body(defs.of(b));
        let mut declared = DeclaredRegs::of_body(b.open);
        let mut out = Vec::new();
        for i in b.open + 1..=b.close {
            let regs = declared.at(&lines, i);
            for (j, st) in lines[i].stmts().iter().enumerate() {
                let reg_bits = |r: &str| regs.type_of(r).and_then(super::super::type_bits);
                if let Some(c) = st.instr.as_ref().and_then(|ins| plan(ins, &m, f, &reg_bits)) {
                    out.push(values.proves(&lines, b, (i, j), &c));
                }
            }
        }
        out
    }

    const TID4: &str = "mov.u32 %r1, %tid.x;\nshl.b32 %r2, %r1, 2;\nmov.u32 %r3, s;\nadd.s32 %r4, %r3, %r2;\nmov.u32 %r13, t;\nadd.s32 %r14, %r13, %r2;\n";

    #[test]
    fn a_thread_index_inside_the_array_is_proven_and_one_that_may_run_past_it_is_not() {
        // s[tid] (4096 bytes hold 1024 threads), t[tid] (512 bytes: 128 of them), s[tid + 1].
        let body = format!("{TID4}ld.shared.u32 %r5, [%r4];\nld.shared.u32 %r15, [%r14];\nld.shared.u32 %r6, [%r4+4];\nld.shared.u32 %r7, [s+4092];\nld.shared.u32 %r8, [s+4096];");
        assert_eq!(proven(&body), [true, false, false, true, false]);
    }

    #[test]
    fn a_branch_around_the_access_narrows_the_index() {
        // if (tid != 0) s[tid - 1]; if (tid >= 2) s[tid - 2]; the other way round: not proven.
        let body = format!("{TID4}setp.eq.s32 %p1, %r1, 0;\n@%p1 bra L1;\nld.shared.u32 %r5, [%r4+-4];\nL1:\nsetp.lt.u32 %p2, %r1, 2;\n@%p2 bra L2;\nld.shared.u32 %r6, [%r4+-8];\nL2:\nsetp.ge.u32 %p3, %r1, 2;\n@%p3 bra L3;\nld.shared.u32 %r7, [%r4+-8];\nL3:\nld.shared.u32 %r8, [%r4+-4];");
        assert_eq!(proven(&body), [true, true, false, false]);
    }

    #[test]
    fn a_label_between_branch_and_access_or_a_second_definition_stops_the_proof() {
        let body = format!("{TID4}setp.eq.s32 %p1, %r1, 0;\n@%p1 bra L1;\nL0:\nld.shared.u32 %r5, [%r4+-4];\nL1:\nmov.u32 %r9, %tid.x;\nadd.s32 %r9, %r9, 1;\nshl.b32 %r10, %r9, 2;\nadd.s32 %r11, %r3, %r10;\nld.shared.u32 %r12, [%r11];");
        assert_eq!(proven(&body), [false, false]);
    }

    #[test]
    fn a_mask_bounds_the_index() {
        // s[(i & 1023)], t[(i & 127)], t[(i & 128)].
        let body = "ld.param.u32 %r1, [n];\nand.b32 %r2, %r1, 1023;\nshl.b32 %r3, %r2, 2;\nmov.u32 %r4, s;\nadd.s32 %r5, %r4, %r3;\nld.shared.u32 %r6, [%r5];\nand.b32 %r7, %r1, 127;\nmov.u32 %r8, t;\nmad.lo.s32 %r9, %r7, 4, %r8;\nld.shared.u32 %r10, [%r9];\nand.b32 %r11, %r1, 128;\nmad.lo.s32 %r12, %r11, 4, %r8;\nld.shared.u32 %r13, [%r12];";
        assert_eq!(proven(body), [true, true, false]);
    }

    #[test]
    fn bit_operations_bound_the_index_by_the_bits_they_can_set() {
        // t[(tid & 28) ^ ((tid << 3) & 96)]: at most byte 124 of 512 (the `or` of the masks, not
        // their sum); at +384 the last word still fits, at +388 it does not. t[bfe(tid, 2, 5) << 2]:
        // at most byte 124. An `add` of overlapping bits carries: (tid & 127) + (tid & 127) ^ 0
        // reaches 254, so at +256 it no longer fits.
        let body = "mov.u32 %r1, %tid.x;\nand.b32 %r8, %r1, 28;\nshl.b32 %r9, %r1, 3;\nand.b32 %r10, %r9, 96;\nxor.b32 %r2, %r8, %r10;\nmov.u32 %r4, t;\nadd.s32 %r5, %r4, %r2;\nld.shared.u32 %r6, [%r5+384];\nld.shared.u32 %r7, [%r5+388];\nbfe.u32 %r11, %r1, 2, 5;\nshl.b32 %r12, %r11, 2;\nadd.s32 %r13, %r4, %r12;\nld.shared.u32 %r14, [%r13+384];\nand.b32 %r15, %r1, 127;\nadd.s32 %r16, %r15, %r15;\nxor.b32 %r17, %r16, 0;\nadd.s32 %r18, %r4, %r17;\nld.shared.u32 %r19, [%r18+252];\nld.shared.u32 %r3, [%r18+256];";
        assert_eq!(proven(body), [true, false, true, true, false]);
    }

    /// One generated access: `s + k·x + c` read at `off`, x the thread's `tid.x` (or lane, or
    /// `tid.x & mask`, or a swizzle `(tid.x & mask) ^ ((tid.x << 3) & 96)`, or the bit field
    /// `bfe(tid.x, 2, 5)`), reached by falling through a branch on `tid.x` or not.
    #[derive(Clone, Debug)]
    struct Case {
        size: u32,
        atom: u8,
        mask: i64,
        shift: u32,
        c: i64,
        off: i64,
        guard: Option<(&'static str, i64, bool)>,
    }

    fn case() -> impl proptest::strategy::Strategy<Value = Case> {
        use proptest::prelude::*;
        let cmp = prop_oneof![Just("eq"), Just("ne"), Just("lt"), Just("le"), Just("gt"), Just("ge")];
        (prop_oneof![Just(64u32), Just(128), Just(512), Just(4096)], 0u8..5, 0i64..1100, 0u32..4, -64i64..64, -2i64..3, proptest::option::of((cmp, 0i64..1100, any::<bool>())))
            .prop_map(|(size, atom, mask, shift, c, off, guard)| Case { size, atom, mask, shift, c: c * 4, off: off * 4, guard })
    }

    impl Case {
        fn body(&self) -> String {
            let src = if self.atom == 1 { "%laneid" } else { "%tid.x" };
            let x = match self.atom {
                2 => format!("and.b32 %r2, %r1, {};", self.mask),
                3 => format!("and.b32 %r8, %r1, {};\nshl.b32 %r9, %r1, 3;\nand.b32 %r10, %r9, 96;\nxor.b32 %r2, %r8, %r10;", self.mask),
                4 => "bfe.u32 %r2, %r1, 2, 5;".to_string(),
                _ => format!("mov.u32 %r2, {src};"),
            };
            let branch = match self.guard {
                Some((cmp, imm, negated)) => format!("setp.{cmp}.u32 %p1, %r1, {imm};\n@{}%p1 bra L1;\n", if negated { "!" } else { "" }),
                None => String::new(),
            };
            format!(
                "mov.u32 %r1, {src};\n{x}\nshl.b32 %r3, %r2, {};\nadd.s32 %r4, %r3, {};\nmov.u32 %r5, s;\nadd.s32 %r6, %r5, %r4;\n{branch}ld.shared.u32 %r7, [%r6+{}];\nL1:",
                self.shift, self.c, self.off
            )
        }

        /// Is every thread that reaches the access inside `s`?
        fn safe(&self) -> bool {
            let xs = if self.atom == 1 { 0..32 } else { 0..1024 };
            xs.into_iter().all(|r1: i64| {
                let reached = match self.guard {
                    Some((cmp, imm, negated)) => {
                        let p = match cmp {
                            "eq" => r1 == imm,
                            "ne" => r1 != imm,
                            "lt" => r1 < imm,
                            "le" => r1 <= imm,
                            "gt" => r1 > imm,
                            _ => r1 >= imm,
                        };
                        // `@p bra` is taken when p holds (`@!p` when it does not).
                        p == negated
                    }
                    None => true,
                };
                let x = match self.atom {
                    2 => r1 & self.mask,
                    3 => (r1 & self.mask) ^ ((r1 << 3) & 96),
                    4 => (r1 >> 2) & 31,
                    _ => r1,
                };
                let at = (x << self.shift) + self.c + self.off;
                !reached || (at >= 0 && at + 4 <= i64::from(self.size))
            })
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// A dropped check is one no thread could fail: every proof agrees with trying all
        /// 1024 values of the thread's index.
        #[test]
        fn a_proven_access_is_inside_for_every_thread(c in case()) {
            let proven = proven_with(&c.body(), c.size);
            proptest::prop_assert_eq!(proven.len(), 1);
            if proven[0] {
                proptest::prop_assert!(c.safe(), "proven but some thread runs past: {:?}\n{}", c, c.body());
            }
        }
    }
}
