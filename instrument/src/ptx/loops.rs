//! Loop versioning (halt mode with optimization): in a loop that is one basic block, the checks of
//! accesses whose addresses are affine in the iteration are replaced by one range test per address
//! at the loop's entry, against the pool's extent table ([`crate::abi::ControlBlock::extent_table`]).
//!
//! ```text
//!   { range test: trip count, first and last address of each hoisted access, extent lookups;
//!     a range whose extent entry proves nothing (a block of a shared slab) sweeps its shadow
//!     bytes instead, when it spans no more granules than the loop has iterations
//!     @!ok bra L; }           the test failed: run the original, checked loop
//! $gasan_loopN:               fast copy: hoisted accesses unchecked, the others checked as usual
//!   ...  @p bra $gasan_loopN;
//!   bra $gasan_loopN_done;
//! L: ...  @p bra L;           the original loop, every access checked (also where L is entered
//! $gasan_loopN_done:           by other branches)
//! ```
//!
//! The fast copy runs only when every byte any hoisted access can touch lies inside one live
//! allocation, so it reports nothing the checked loop would; when the test fails, the checked loop
//! reports the bad access at its own iteration, as without versioning. In the fast copy the covered
//! loads move to the top of the iteration where nothing orders them ([`fast_order`]), so checks that
//! depend on their values (gathers) no longer wait behind each other's branches. No trip count or range is
//! ever guessed: every quantity is computed from the loop's own registers at its entry.
//!
//! Affinity is established symbolically over the body: a loop-carried register is an induction
//! variable when its value at the back edge is its entry value plus a loop-invariant amount
//! (`add`/`sub` chains), and a value is affine when it is built from induction variables and
//! invariants by `add`, `sub`, `mul`/`mad` by an invariant, `shl`, widening `cvt` and `cvta`. An
//! affine address takes its extreme values at the first and the last iteration, computed at the
//! entry by re-running its arithmetic with each induction variable at its first and last value.
//! The trip count comes from the back edge's `setp` of an affine value against an invariant bound;
//! counts whose arithmetic could wrap are refused at run time (the checked loop runs).
//!
//! An access that touches memory only while such a comparison of the iteration holds (its guard,
//! or the predicate its copy's source size is selected by: Triton's pipelined loops prefetch a
//! later iteration's tile under a mask that is false in the last iterations, whose addresses run
//! past the tensor) has its range clipped ([`Clip`]): when the comparison holds in a prefix of the
//! iterations (its value moves towards its bound and does not wrap over the loop), the range
//! ends at the last iteration it holds in, counted as the trip count is. Otherwise it spans the
//! whole loop.
//!
//! Shared-memory accesses whose offset in a dynamic shared variable is bounded for every thread
//! and iteration, where the only value that changes between iterations is a stage counter that
//! wraps (Triton's multi-buffered tiles, [`SharedTest`]), lose their checks in the fast copy
//! too: the test adds that each such counter starts in its range and that the launch's dynamic
//! shared size holds the highest end.

use super::access::{parse_address, parse_int, AddrBase, Instr, Operands, Width};
use super::bodies::Bodies;
use super::branches::Branches;
use super::defs::{pointer_flow, Defs, ModuleDefs, PointerFlow};
use super::line::split_lines;
use super::lines::{ln, numbered, Lines, Piece};
use super::opcode::Op;
use super::spaces::{declarations, space_access, SpaceAccess};
use super::thread_ranges::ThreadValues;
use super::{type_bits, DeclaredRegs, Line, LineSet, RegTypes, MARKER};
use crate::abi::{ctl_offset, MemorySpace, CONTROL_BLOCK_SYMBOL, RANGE_SWEEP_SYMBOL};
use crate::shadow::Scale;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::borrow::Cow;
use std::cell::OnceCell;

/// Longest loop body considered (lines): Triton's attention loop has about 1,300.
const MAX_BODY: usize = 2000;
/// Most distinct hoisted addresses per loop (each costs a range test at every loop entry, about
/// what two checks cost, so a loop of a few iterations pays it back). Triton's tiles load through
/// one address register per element: 128 in the unhinted matmul's loop. With 32, its fast loop kept
/// 96 checks (3,744 SASS instructions, 96 shadow loads); with 256 it keeps none (1,285; native
/// 1,175), and attention's 2,448 fall to 1,558 (native 1,444). ptxas 13.0, sm_90a.
const MAX_RANGES: usize = 256;

/// The module's lines after versioning, and what the rewriter must know about them.
pub(super) struct Versioned<'a> {
    pub lines: Vec<Cow<'a, str>>,
    /// Index of the input line each line stands for (copies: their original; inserted lines: the
    /// loop label they precede), for PTX line numbers in sites and errors.
    pub origin: Vec<usize>,
    /// Accesses of fast copies covered by their loop's range test.
    pub covered: LineSet,
    /// Lines of fast copies (they repeat input lines: not counted again in statistics).
    pub copies: LineSet,
    /// Lines the versioning wrote (range tests, labels, branches): passed through unchanged.
    pub inserted: LineSet,
    /// Lines of fast copies whose shared-memory check the range test covers ([`SharedTest`]).
    pub space_covered: LineSet,
    /// Some range test calls [`RANGE_SWEEP_SYMBOL`]: the module needs [`sweep_function`].
    pub sweeps: bool,
}

/// The statements that turn `off`, a pool offset (a `.b64` register), into the address of its
/// extent-table entry ([`crate::abi::ControlBlock::extent_table`]: entry `i` describes the pool
/// block `off >> shift == i`), in place. The range tests here and the kernel-parameter lookups
/// (bounds.rs) both read the table this way.
pub(super) fn extent_entry_address(v: &mut Lines<'_>, off: &str, shift: &str, table: &str) {
    ln!(v; "shr.u64 ", off, ", ", off, ", ", shift, ";");
    ln!(v; "mad.lo.u64 ", off, ", ", off, ", ", crate::abi::EXTENT_ENTRY_SIZE, ", ", table, ";");
}

impl<'a> Versioned<'a> {
    /// The versioned module as lines for the passes, taking over `input` (the lines versioning
    /// read): each input line is moved to its place with the statements it has parsed already
    /// (a fast copy's lines are clones, made before their originals move); only the lines
    /// versioning wrote are read. Also where each input line went (`usize::MAX`: nowhere, as
    /// nothing is dropped). Reading and parsing the whole rewritten text again cost as much as
    /// the first read of every module.
    pub fn take_lines<'v>(&'v self, input: Vec<Line<'a>>) -> (Vec<Line<'v>>, Vec<usize>)
    where
        'a: 'v,
    {
        let mut moved_to = vec![usize::MAX; input.len()];
        let mut input: Vec<Option<Line<'a>>> = input.into_iter().map(Some).collect();
        let lines = (0..self.lines.len())
            .map(|j| {
                if self.inserted.contains(&j) {
                    return Line::read_generated(&self.lines[j]);
                }
                let k = self.origin[j];
                let line = if self.copies.contains(&j) {
                    input[k].clone()
                } else {
                    moved_to[k] = j;
                    input[k].take()
                };
                line.expect("a fast copy precedes its original, and every input line has one place").shortened()
            })
            .collect();
        (lines, moved_to)
    }

    /// The lines of every versioned loop, its fast copy and its checked original: `true` at their
    /// indexes (flags by line, set from the copies and the inserted lines: no set is searched per
    /// line).
    pub fn loop_lines(&self) -> Vec<bool> {
        let n = self.lines.len();
        let (mut copy, mut inserted) = (vec![false; n], vec![false; n]);
        for &l in &self.copies {
            copy[l] = true;
        }
        for &l in &self.inserted {
            inserted[l] = true;
        }
        // (Input lines: each line's origin is one of them.)
        let mut original = vec![false; self.origin.iter().max().map_or(0, |&m| m + 1)];
        for &l in &self.copies {
            original[self.origin[l]] = true;
        }
        (0..n).map(|l| copy[l] || (!inserted[l] && original[self.origin[l]])).collect()
    }
}

/// Versions the single-block loops of `lines` that have hoistable accesses; `None` when none has.
/// The candidates are `branches`' back edges that are guarded branches with one target. `vote`:
/// the module's PTX has `activemask` (6.2 and later), so range tests vote over the warp
/// ([`Emitter::leave_unless_ok`]).
pub(super) fn version<'a>(lines: &[Line<'a>], bodies: &Bodies, branches: &Branches<'_>, scale: Scale, vote: bool) -> Option<Versioned<'a>> {
    let mut plans = Vec::new();
    // The current function's register types, read down its body as its loops need them.
    let mut declared: Option<DeclaredRegs> = None;
    let facts = ModuleFacts { lines, bodies, defs: OnceCell::new(), dynamic_vars: OnceCell::new() };
    for edge in branches.back_edges() {
        let (s, k) = (edge.label_line, edge.branch_line);
        let Some(body) = bodies.holding(k) else { continue };
        let declared = match &mut declared {
            Some(d) if d.body_open() == body.open => d,
            d => d.insert(DeclaredRegs::of_body(body.open)),
        };
        // A loop the range test can skip: one that can end at its back edge.
        let Some(lp) = branches.single_block_loop(lines, bodies, s, k).filter(|lp| lp.guarded) else { continue };
        if k - s <= MAX_BODY {
            let branched_to = |at: usize, label: &str| branches.refs(bodies, at, label) > 0;
            if let Some(p) = analyze(&facts, lp.label, (s, k), declared, plans.len(), scale, vote, &branched_to) {
                plans.push(p);
            }
        }
    }
    if plans.is_empty() {
        return None;
    }
    Some(assemble(lines, plans))
}

/// The module-local `.func` a range test calls ([`RANGE_SWEEP_SYMBOL`]) for a range `[lo, hi]` whose
/// extent entry proved nothing, with `n` the loop's iterations minus one: returns 1 when every
/// granule from `lo`'s to `hi`'s grants its bytes up to its end (`hi`'s granule: up to `hi`), else
/// 0. Accessible bytes are a prefix of each granule, so that covers every byte of the range, and a
/// run of such granules lies in one live block: blocks are separated by poisoned redzones of at
/// least a granule. Ranges outside the pool or of more granules than `n + 1` return 0 at once, so a
/// sweep never reads more shadow bytes than the checked loop would.
pub(super) fn sweep_function(scale: Scale) -> String {
    let (ctl, sh, gran) = (CONTROL_BLOCK_SYMBOL, scale.shift(), scale.granule());
    let mut out = format!(".func (.param .b32 gasan_ok) {RANGE_SWEEP_SYMBOL}(.param .b64 gasan_lo, .param .b64 gasan_hi, .param .b64 gasan_n)\n{{\n");
    let mut body = Lines::unmarked(&mut out, "\t");
    body.texts(&[
        ".reg .b64 %s<8>;",
        ".reg .b32 %w<4>;",
        ".reg .pred %q<3>;",
        "mov.u32 %w0, 0;",
        "st.param.b32 [gasan_ok], %w0;",
        "ld.param.u64 %s0, [gasan_lo];",
        "ld.param.u64 %s1, [gasan_hi];",
        "ld.param.u64 %s2, [gasan_n];",
    ]);
    ln!(body; "ld.const.u64 %s3, [", ctl, "+", ctl_offset::POOL_BASE, "];");
    ln!(body; "ld.const.u64 %s4, [", ctl, "+", ctl_offset::POOL_SIZE, "];");
    ln!(body; "ld.const.u64 %s5, [", ctl, "+", ctl_offset::SHADOW_BASE, "];");
    body.texts(&["sub.s64 %s6, %s0, %s3;", "sub.s64 %s7, %s1, %s3;", "setp.lt.u64 %q0, %s6, %s4;", "setp.lt.and.u64 %q0, %s7, %s4, %q0;", "setp.le.and.u64 %q0, %s0, %s1, %q0;", "@!%q0 ret;"]);
    ln!(body; "shr.u64 %s6, %s6, ", sh, ";");
    ln!(body; "shr.u64 %s7, %s7, ", sh, ";");
    body.texts(&[
        "sub.s64 %s0, %s7, %s6;",
        "setp.le.u64 %q0, %s0, %s2;",
        "@!%q0 ret;",
        // %s6, %s7: the shadow bytes of the first and the last granule.
        "add.s64 %s6, %s5, %s6;",
        "add.s64 %s7, %s5, %s7;",
        "cvt.u32.u64 %w1, %s1;",
    ]);
    ln!(body; "and.b32 %w1, %w1, ", gran - 1, ";");
    // The one-byte check at the last byte of each granule (of the last one: `hi`'s), as every
    // checked access makes it; its limits computed once, outside the loop.
    super::lines::encoding_limit(&mut body, scale, 1, "%w1");
    let full = scale.fast_test(1).limit(scale, gran - 1);
    body.texts(&["$gasan_sweep:", "ld.global.nc.u8 %w2, [%s6];", "setp.eq.u64 %q1, %s6, %s7;"]);
    ln!(body; "selp.b32 %w3, %w1, ", full, ", %q1;");
    super::lines::encoding_compare(&mut body, "%w2", "%w3", "%q2");
    body.texts(&["@%q2 ret;", "add.s64 %s6, %s6, 1;", "@!%q1 bra $gasan_sweep;", "mov.u32 %w0, 1;", "st.param.b32 [gasan_ok], %w0;", "ret;"]);
    out.push_str("}\n");
    out
}

/// One versioned loop.
struct LoopPlan {
    label_line: usize,
    back_edge: usize,
    /// Body lines whose checks the range test covers.
    hoisted: Vec<usize>,
    /// The fast copy's body lines, in its order (covered loads moved up: see [`fast_order`]).
    fast_order: Vec<usize>,
    /// The range test (lines, each marked).
    preheader: String,
    /// The range test calls [`RANGE_SWEEP_SYMBOL`].
    sweeps: bool,
    /// The back edge retargeted at the fast copy.
    fast_back_edge: String,
    /// Body lines whose shared-memory check the range test covers.
    space_covered: Vec<usize>,
    id: usize,
}

fn fast_label(id: usize) -> String {
    format!("$gasan_loop{id}")
}

fn assemble<'a>(lines: &[Line<'a>], plans: Vec<LoopPlan>) -> Versioned<'a> {
    // (The sets sized for what the plans add, and the lines for the copies and the range tests:
    // grown from empty, a module's loops rehashed them a dozen times.)
    let copied: usize = plans.iter().map(|p| p.fast_order.len() + 1).sum();
    let written: usize = plans.iter().map(|p| memchr::memchr_iter(b'\n', p.preheader.as_bytes()).count() + 5).sum();
    let total = lines.len() + copied + written;
    let mut v = Versioned {
        lines: Vec::with_capacity(total),
        origin: Vec::with_capacity(total),
        covered: LineSet::with_capacity_and_hasher(plans.iter().map(|p| p.hoisted.len()).sum(), Default::default()),
        copies: LineSet::with_capacity_and_hasher(copied, Default::default()),
        inserted: LineSet::with_capacity_and_hasher(written, Default::default()),
        space_covered: LineSet::with_capacity_and_hasher(plans.iter().map(|p| p.space_covered.len()).sum(), Default::default()),
        sweeps: false,
    };
    let mut next = 0;
    let push = |v: &mut Versioned<'a>, text: Cow<'a, str>, origin: usize, inserted: bool| {
        if inserted {
            v.inserted.insert(v.lines.len());
        }
        v.lines.push(text);
        v.origin.push(origin);
    };
    for p in plans {
        for (k, l) in lines.iter().enumerate().take(p.label_line).skip(next) {
            push(&mut v, Cow::Borrowed(l.raw), k, false);
        }
        v.sweeps |= p.sweeps;
        for l in split_lines(&p.preheader) {
            push(&mut v, Cow::Owned(l.to_string()), p.label_line, true);
        }
        push(&mut v, Cow::Owned(format!("{}: {MARKER}\n", fast_label(p.id))), p.label_line, true);
        for &k in &p.fast_order {
            v.copies.insert(v.lines.len());
            if p.hoisted.contains(&k) {
                v.covered.insert(v.lines.len());
            }
            if p.space_covered.contains(&k) {
                v.space_covered.insert(v.lines.len());
            }
            push(&mut v, Cow::Borrowed(lines[k].raw), k, false);
        }
        v.copies.insert(v.lines.len());
        push(&mut v, Cow::Owned(p.fast_back_edge.clone()), p.back_edge, true);
        push(&mut v, Cow::Owned(format!("\tbra {}_done; {MARKER}\n", fast_label(p.id))), p.back_edge, true);
        for (k, l) in lines.iter().enumerate().take(p.back_edge + 1).skip(p.label_line) {
            push(&mut v, Cow::Borrowed(l.raw), k, false);
        }
        push(&mut v, Cow::Owned(format!("{}_done: {MARKER}\n", fast_label(p.id))), p.back_edge, true);
        next = p.back_edge + 1;
    }
    for (k, l) in lines.iter().enumerate().skip(next) {
        push(&mut v, Cow::Borrowed(l.raw), k, false);
    }
    v
}

/// What a register holds, as a function of the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val<'a> {
    /// The same in every iteration.
    Inv,
    /// Affine in the iteration number.
    Lin,
    /// The entry value of induction candidate `reg` plus an invariant (`off`: that invariant when
    /// it is a known constant).
    Biv { reg: &'a str, off: Option<i64> },
    /// Anything else.
    Opaque,
}

impl<'a> Val<'a> {
    fn affine(&self) -> bool {
        !matches!(self, Val::Opaque)
    }
    fn demote(self) -> Val<'a> {
        match self {
            Val::Biv { .. } => Val::Lin,
            v => v,
        }
    }
}

/// A statement of a loop body, parsed once: its line, its parts, the registers it writes and the
/// registers it reads (sources and guard).
struct BodyStmt<'a> {
    line: usize,
    ins: Instr<'a>,
    dests: Vec<&'a str>,
    reads: Vec<&'a str>,
    /// Where [`Instr::sources`] start in the operands (1 after a destination): the walk and the
    /// range test ask for a statement's sources many times.
    src_from: usize,
}

impl<'a> BodyStmt<'a> {
    fn new(line: usize, ins: Instr<'a>) -> Self {
        let dests: Vec<&'a str> = ins.dests().collect();
        let src_from = usize::from(!dests.is_empty());
        BodyStmt { line, dests, reads: ins.registers_read().collect(), ins, src_from }
    }

    /// [`Instr::sources`].
    fn sources(&self) -> &[&'a str] {
        &self.ins.operands[self.src_from..]
    }
}

/// The symbolic value of one body statement: for each source operand, the statement defining it
/// in this iteration (`None`: its value at the iteration's start, or not a register) and its
/// value; and the value it computes.
struct Stmt<'a> {
    srcs: Vec<Option<usize>>,
    src_vals: Vec<Val<'a>>,
    val: Val<'a>,
}

/// Integer type suffixes the affine rules accept.
fn int_bits(ty: &str) -> Option<u32> {
    match ty {
        "s32" | "u32" | "b32" => Some(32),
        "s64" | "u64" | "b64" => Some(64),
        _ => None,
    }
}

/// Special registers that change while a thread runs (everything else named `%x` that is not a
/// declared register is constant for the thread: `%tid.x`, `%ctaid.y`, `%laneid`, ...).
fn volatile_special(op: &str) -> bool {
    ["%clock", "%globaltimer", "%pm", "%smid", "%warpid", "%nsmid", "%activemask", "%dynamic_smem"].iter().any(|p| op.starts_with(p))
}

/// Opcodes (first component) whose result depends only on their operands.
fn pure_op(op: Op) -> bool {
    use Op::*;
    matches!(op, Add | Sub | Mul | Mad | Mul24 | Mad24 | And | Or | Xor | Not | Cnot | Min | Max | Div | Rem | Shl | Shr | Abs | Neg | Bfe | Bfi | Popc | Clz | Brev | Prmt | Cvt | Cvta | Mov)
}

/// The symbolic walk over a loop body.
struct Body<'b, 'a> {
    body: &'b [BodyStmt<'a>],
    stmts: Vec<Stmt<'a>>,
    /// Last definition (statement) of each register at the end of the body.
    last_def: HashMap<&'a str, usize>,
}

fn walk<'b, 'a>(body: &'b [BodyStmt<'a>], candidates: &HashSet<&'a str>, written: &HashSet<&'a str>, regs: &RegTypes) -> Body<'b, 'a> {
    let mut stmts: Vec<Stmt<'a>> = Vec::with_capacity(body.len());
    // (Sized for a destination a statement: only looked up, so its order reaches nothing.)
    let mut last_def: HashMap<&'a str, usize> = HashMap::with_capacity_and_hasher(body.len(), Default::default());
    for (idx, b) in body.iter().enumerate() {
        let sources = b.sources();
        let (srcs, src_vals): (Vec<_>, Vec<_>) = sources.iter().map(|op| operand(op, &last_def, &stmts, candidates, written, regs)).unzip();
        let val = if b.ins.guard.is_some() || b.dests.len() != 1 { Val::Opaque } else { eval(&b.ins, sources, &src_vals, regs) };
        stmts.push(Stmt { srcs, src_vals, val });
        for d in &b.dests {
            last_def.insert(d, idx);
        }
    }
    Body { body, stmts, last_def }
}

/// The value of a source operand at this point of the walk, and its defining statement.
fn operand<'a>(op: &'a str, last_def: &HashMap<&'a str, usize>, stmts: &[Stmt<'a>], candidates: &HashSet<&'a str>, written: &HashSet<&'a str>, regs: &RegTypes) -> (Option<usize>, Val<'a>) {
    if let Some(inner) = op.strip_prefix('[') {
        // A memory operand stands for its address register (no rule computes with it as a value:
        // memory statements are opaque).
        let reg = inner.split(['+', ']']).next().unwrap_or("").trim();
        return if reg.starts_with('%') { operand(reg, last_def, stmts, candidates, written, regs) } else { (None, Val::Opaque) };
    }
    if !op.starts_with('%') {
        // Immediates and symbol addresses are constant; vectors are not values here.
        let plain = !op.contains(['{', '(', ' ']);
        return (None, if plain { Val::Inv } else { Val::Opaque });
    }
    if let Some(&d) = last_def.get(op) {
        return (Some(d), stmts[d].val);
    }
    let declared = regs.type_of(op);
    let val = match declared {
        None if volatile_special(op) => Val::Opaque,
        None => Val::Inv,
        Some("pred") => Val::Opaque,
        Some(_) if candidates.contains(op) => Val::Biv { reg: op, off: Some(0) },
        Some(_) if written.contains(op) => Val::Opaque,
        Some(_) => Val::Inv,
    };
    (None, val)
}

/// The value an unguarded single-destination statement computes.
fn eval<'a>(ins: &Instr<'_>, srcs: &[&str], vals: &[Val<'a>], regs: &RegTypes) -> Val<'a> {
    let parts: Operands<'_> = ins.opcode.parts().collect();
    let op = ins.opcode.op;
    let ty = *parts.last().unwrap_or(&"");
    let all_inv = vals.iter().all(|v| *v == Val::Inv);
    let any_opaque = vals.iter().any(|v| !v.affine());
    // Predicate operands (selp, ...) are not tracked.
    let pred_operand = srcs.iter().any(|s| regs.type_of(s) == Some("pred"));
    if pred_operand || any_opaque {
        return Val::Opaque;
    }
    let int = int_bits(ty).is_some();
    match (op, parts.len(), vals) {
        (Op::Mov, 2, [v]) => *v,
        (Op::Add, 2, [a, b]) | (Op::Sub, 2, [a, b]) if int => {
            let sub = op == Op::Sub;
            match (a, b) {
                (Val::Inv, Val::Inv) => Val::Inv,
                (Val::Biv { reg, off }, Val::Inv) => {
                    let k = parse_int(srcs[1]).map(|k| if sub { k.wrapping_neg() } else { k });
                    Val::Biv { reg, off: off.zip(k).map(|(o, k)| o.wrapping_add(k)) }
                }
                (Val::Inv, Val::Biv { reg, off }) if !sub => Val::Biv { reg, off: off.zip(parse_int(srcs[0])).map(|(o, k)| o.wrapping_add(k)) },
                _ => Val::Lin,
            }
        }
        (Op::Mul, 3, [a, b]) | (Op::Mad, 3, [a, b, _]) if int && (parts[1] == "lo" || parts[1] == "wide") => {
            let product = match (a, b) {
                (Val::Inv, Val::Inv) => Val::Inv,
                (x, Val::Inv) | (Val::Inv, x) => x.demote(),
                _ => return Val::Opaque,
            };
            match (op, product, vals.get(2)) {
                (Op::Mad, Val::Inv, Some(Val::Inv)) => Val::Inv,
                (Op::Mad, _, _) => Val::Lin,
                (_, p, _) => p,
            }
        }
        (Op::Shl, 2, [a, Val::Inv]) if int => a.demote(),
        (Op::Neg, 2, [a]) if int => a.demote(),
        (Op::Cvt, 3, [a]) if int_bits(parts[1]).is_some() && int_bits(parts[2]).is_some() && int_bits(parts[1]) >= int_bits(parts[2]) => a.demote(),
        (Op::Cvta, _, [a]) if parts.contains(&"global") => a.demote(),
        _ if all_inv && pure_op(op) => Val::Inv,
        _ => Val::Opaque,
    }
}

/// A hoisted address: the register's value at some point (its defining statement, or its value at
/// the iteration's start), and the byte span the accesses through it cover relative to it.
struct Range {
    reg: String,
    def: Option<usize>,
    lo: i64,
    hi_end: i64,
    lines: Vec<usize>,
    /// The induction variable the address is (plus a constant), when it is one: see
    /// [`Emitter::sweepable`].
    walks: Option<String>,
    /// A comparison without which the accesses touch no memory ([`clip_of`]).
    clip: Option<Clip>,
}

/// A comparison an access needs to hold to touch memory: the `setp` (a body statement) writing
/// the predicate that guards it or selects its copy's source size, and whether the access needs
/// it false. Triton's pipelined loops prefetch a later iteration's tile under such a mask, which
/// turns false for the last iterations, whose addresses run past the tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Clip {
    setp: usize,
    negated: bool,
}

/// The statement before body statement `j` that last writes `reg` in the iteration.
fn def_before(body: &[BodyStmt<'_>], j: usize, reg: &str) -> Option<usize> {
    body[..j].iter().rposition(|b| b.dests.contains(&reg))
}

/// A comparison that must hold for the access at body statement `j` to touch memory: the one its
/// guard (`@%p`, `@!%p`) or its copy's source size (`selp.b32 %size, 16, 0, %p`: size 0, no bytes
/// read, when `%p` is false) is written from, in this iteration, through `and.pred` and nested
/// `selp`s; the first comparison of the form a range can be clipped by ([`exit_of`]: one side
/// moves, `lt`/`le`/`gt`/`ge`).
fn clip_of(body: &[BodyStmt<'_>], walked: &Body<'_, '_>, j: usize, size_reg: Option<&str>) -> Option<Clip> {
    // (predicate's defining statement, needed false)
    let mut preds: Vec<(usize, bool)> = Vec::new();
    if let Some(g) = body[j].ins.guard {
        let (p, negated) = g.strip_prefix('!').map_or((g, false), |p| (p, true));
        preds.extend(def_before(body, j, p).map(|d| (d, negated)));
    }
    // The source size's definition: a `selp` keeps it 0 unless its predicate says otherwise.
    let mut size = size_reg.and_then(|r| body[j].sources().iter().position(|o| o.trim() == r)).and_then(|i| walked.stmts[j].srcs[i]);
    while let Some(d) = size.take() {
        let ins = &body[d].ins;
        if ins.opcode.op != Op::Selp || ins.guard.is_some() || ins.operands.len() != 4 {
            break;
        }
        let p = ins.operands[3].trim();
        let (a, b) = (ins.operands[1].trim(), ins.operands[2].trim());
        let (needed_false, other) = match (parse_int(a), parse_int(b)) {
            (_, Some(0)) => (false, 0),
            (Some(0), _) => (true, 1),
            _ => break,
        };
        preds.extend(def_before(body, d, p).map(|k| (k, needed_false)));
        size = walked.stmts[d].srcs[other];
    }
    while let Some((d, negated)) = preds.pop() {
        let ins = &body[d].ins;
        if ins.opcode.op == Op::Setp {
            match exit_of(ins, d, negated) {
                Some(e) if !matches!(e.cmp, Cmp::Eq | Cmp::Ne) => {
                    let vals = &walked.stmts[d].src_vals;
                    if vals.len() == 2 && vals.iter().all(Val::affine) && (vals[0] == Val::Inv) != (vals[1] == Val::Inv) {
                        return Some(Clip { setp: d, negated });
                    }
                }
                _ => {}
            }
        } else if ins.opcode.op == Op::And && !negated && ins.guard.is_none() && ins.operands.len() == 3 && ins.opcode.parts().any(|q| q == "pred") {
            for q in &ins.operands[1..] {
                let q = q.trim();
                if !q.starts_with('!') {
                    preds.extend(def_before(body, d, q).map(|k| (k, false)));
                }
            }
        }
    }
    None
}

/// What the shared-memory proofs of a module's loops read ([`shared_test`]), built on first use:
/// most modules with loops have no dynamic shared memory.
struct ModuleFacts<'l, 'a> {
    lines: &'l [Line<'a>],
    bodies: &'l Bodies,
    defs: OnceCell<ModuleDefs<'l, 'a>>,
    /// The module's dynamic shared variables (`.extern .shared .b8 smem[]`).
    dynamic_vars: OnceCell<Vec<String>>,
}

impl<'l, 'a> ModuleFacts<'l, 'a> {
    fn dynamic_vars(&self) -> &[String] {
        self.dynamic_vars.get_or_init(|| {
            let mut vars: Vec<String> = declarations(self.lines).vars.into_iter().filter(|(_, v)| v.space == MemorySpace::Shared && v.size.is_none()).map(|(name, _)| name).collect();
            vars.sort_unstable();
            vars
        })
    }

    fn defs(&self) -> &ModuleDefs<'l, 'a> {
        self.defs.get_or_init(|| ModuleDefs::new(self.lines, self.bodies))
    }
}

/// The shared-memory accesses of a loop the range test can cover: each, for every thread and
/// iteration, inside a dynamic shared variable up to a constant end, where the only values that
/// change from one iteration to the next are wrapping stage counters ([`wrapping_counter`]).
/// Triton's pipelined loops copy each tile into one of a few shared buffers picked by such a
/// counter, at an offset swizzled from the thread's index; in the fast copy those accesses lose
/// their checks, and the test adds: every counter starts in its range, and the launch's dynamic
/// shared memory holds the highest end.
struct SharedTest {
    /// The counters the proofs rely on, with their highest value.
    counters: Vec<(String, i64)>,
    /// The highest end (offset + width) of the covered accesses in their variable.
    end: i64,
    /// Body lines whose check the test covers.
    lines: Vec<usize>,
}

/// The loop-carried `reg`'s highest value when it is a stage counter that wraps: its one
/// definition in the body is `selp x, 0, t, p` with `t = x + 1` (x's value at the iteration's
/// start) and `p = t > C` (`setp.gt`, `C` a constant). From an entry value in [0, C] it stays
/// in [0, C] (the value before `x + 1` wraps is far beyond).
fn wrapping_counter(body: &[BodyStmt<'_>], reg: &str) -> Option<i64> {
    let mut defs = body.iter().enumerate().filter(|(_, b)| b.dests.contains(&reg)).map(|(i, _)| i);
    let (Some(d), None) = (defs.next(), defs.next()) else { return None };
    let plain = |ins: &Instr<'_>, op: Op, n: usize| ins.opcode.op == op && ins.guard.is_none() && ins.operands.len() == n;
    let sel = &body[d].ins;
    if !plain(sel, Op::Selp, 4) || parse_int(sel.operands[1].trim()) != Some(0) {
        return None;
    }
    let (next, p) = (sel.operands[2].trim(), sel.operands[3].trim());
    let t = def_before(body, d, next)?;
    let add = &body[t].ins;
    if !plain(add, Op::Add, 3) || add.operands[1].trim() != reg || parse_int(add.operands[2].trim()) != Some(1) || int_bits(add.opcode.parts().last()?) != Some(32) {
        return None;
    }
    let q = def_before(body, d, p)?;
    let setp = &body[q].ins;
    let parts: Vec<&str> = setp.opcode.parts().collect();
    if !plain(setp, Op::Setp, 3) || parts.len() != 3 || parts[1] != "gt" || !matches!(parts[2], "s32" | "u32" | "b32") || setp.operands[1].trim() != next || def_before(body, q, next) != Some(t) {
        return None;
    }
    parse_int(setp.operands[2].trim()).filter(|c| (0..1 << 20).contains(c))
}

/// [`SharedTest`] of the loop from its label's line `s` to its back edge `e` (`body`, its
/// `carried` registers).
fn shared_test<'a>(facts: &ModuleFacts<'_, 'a>, (s, e): (usize, usize), body: &[BodyStmt<'a>], carried: &HashSet<&'a str>, regs: &RegTypes) -> Option<SharedTest> {
    let accesses: Vec<(usize, SpaceAccess)> = body
        .iter()
        .filter(|b| b.ins.opcode.quals().any(|q| q.starts_with("shared")) && facts.lines[b.line].is_lone_statement())
        .filter_map(|b| Some((b.line, space_access(&b.ins, &|_| None)?)))
        .filter(|(_, a)| a.space == Some(MemorySpace::Shared) && a.width_reg.is_none() && a.width > 0)
        .collect();
    if accesses.is_empty() {
        return None;
    }
    let vars: Vec<&str> = facts.dynamic_vars().iter().map(String::as_str).collect();
    if vars.is_empty() {
        return None;
    }
    let function = facts.bodies.holding(s)?;
    // A counter's range holds inside the loop only: one read elsewhere (a value computed from
    // it before the loop, from whatever it held then) would be taken for one in the range.
    let read_outside = |x: &str| {
        (function.open + 1..function.close).filter(|&k| k < s || k > e).any(|k| facts.lines[k].stmts().iter().filter_map(|st| st.instr.as_ref()).any(|ins| ins.registers_read().any(|r| r == x)))
    };
    let mut counters: Vec<(&str, i64)> =
        carried.iter().filter(|r| regs.type_of(r).and_then(type_bits) == Some(32)).filter_map(|&r| Some((r, wrapping_counter(body, r)?))).filter(|(r, _)| !read_outside(r)).collect();
    counters.sort_unstable();
    let seeds: Vec<(&str, (i64, i64))> = counters.iter().map(|&(r, c)| (r, (0, c))).collect();
    let values = ThreadValues::of_body_seeded(facts.defs().of(function), &seeds);
    let mut test = SharedTest { counters: Vec::new(), end: 0, lines: Vec::new() };
    for (line, a) in accesses {
        let Some(ins) = facts.lines[line].lone_statement().and_then(|st| st.instr.as_ref()) else { continue };
        let Some(Ok((AddrBase::Reg(r), off))) = ins.operands.get(a.addr_idx).and_then(|op| parse_address(op)) else { continue };
        let Some((lo, hi)) = values.var_offsets(&r, &vars) else { continue };
        let Some(end) = hi.checked_add(off).and_then(|e| e.checked_add(i64::from(a.width))) else { continue };
        if lo + off < 0 || end > u32::MAX as i64 {
            continue;
        }
        for seed in values.seeds_used(&r) {
            if let Some(&(_, c)) = counters.iter().find(|(r, _)| *r == seed) {
                if !test.counters.iter().any(|(r, _)| r == seed) {
                    test.counters.push((seed.to_string(), c));
                }
            }
        }
        test.end = test.end.max(end);
        test.lines.push(line);
    }
    (!test.lines.is_empty()).then_some(test)
}

/// The loop-exit comparison: the loop continues while `a CMP b` (the `setp`'s two sources).
struct Exit {
    setp: usize,
    cmp: Cmp,
    signed: bool,
    bits: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
    Eq,
}

impl Cmp {
    fn negate(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Ge,
            Cmp::Le => Cmp::Gt,
            Cmp::Gt => Cmp::Le,
            Cmp::Ge => Cmp::Lt,
            Cmp::Ne => Cmp::Eq,
            Cmp::Eq => Cmp::Ne,
        }
    }
    fn mirror(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            c => c,
        }
    }
}

/// What a body statement's value carries of a pointer, followed through the operands that can
/// carry one ([`pointer_flow`], as parameter bounds follow them).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carried<'a> {
    /// No pointer (an offset: `mul.wide`, a constant).
    Nothing,
    /// This loop-invariant register, plus offsets.
    Invariant(&'a str),
    /// A value that changes from one iteration to the next (a walking pointer), or more than one
    /// candidate.
    Unknown,
}

fn pointer_carried<'a>(body: &Body<'_, 'a>, d: usize) -> Carried<'a> {
    let (b, st) = (&body.body[d], &body.stmts[d]);
    let carriers = match pointer_flow(b.ins.opcode, &b.ins.operands) {
        PointerFlow::OneOf(carriers) => carriers,
        PointerFlow::Other => return Carried::Nothing,
        PointerFlow::Param(_) => return Carried::Unknown,
    };
    let mut found = Carried::Nothing;
    for (k, s) in b.sources().iter().enumerate().filter(|(_, s)| carriers.contains(*s)) {
        let c = match st.srcs[k] {
            Some(def) => pointer_carried(body, def),
            None if !s.starts_with('%') => Carried::Nothing,
            None if st.src_vals[k] == Val::Inv => Carried::Invariant(s),
            None => Carried::Unknown,
        };
        found = match (found, c) {
            (Carried::Nothing, c) | (c, Carried::Nothing) => c,
            _ => Carried::Unknown,
        };
    }
    found
}

/// The kernel parameter (its `ld.param` operand) an invariant pointer `reg` was computed from
/// before the loop, through each register's one definition and the operands that can carry a
/// pointer ([`pointer_flow`]; Triton's row pointers: `mad.wide.s32 %rd5, %r9, 2, %rd1`). `None` where
/// it reaches none, or two.
fn parameter_of(defs: &Defs<'_, '_>, reg: &str, depth: u32) -> Option<String> {
    let ins = defs.only_writer(reg)?;
    match pointer_flow(ins.opcode, &ins.operands) {
        PointerFlow::Param(p) => Some(p.to_string()),
        PointerFlow::OneOf(carriers) if depth < 16 => {
            let mut params = carriers.iter().filter(|r| r.starts_with('%')).filter_map(|r| parameter_of(defs, r, depth + 1));
            match (params.next(), params.next()) {
                (Some(p), None) => Some(p),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The plan for the loop from its label's line `s` to its back edge `e`; `branched_to(line,
/// label)`: whether some branch targets the label on that line.
#[allow(clippy::too_many_arguments)]
fn analyze(
    facts: &ModuleFacts<'_, '_>,
    label: &str,
    (s, e): (usize, usize),
    declared: &mut DeclaredRegs,
    id: usize,
    scale: Scale,
    vote: bool,
    branched_to: &dyn Fn(usize, &str) -> bool,
) -> Option<LoopPlan> {
    let lines = facts.lines;
    let label = label.to_string();
    // The body: plain statements only, one per line.
    let mut body: Vec<BodyStmt<'_>> = Vec::new();
    let mut any_check = false;
    // Labels no branch names (Triton's `$L__tmpN`, which only the debug sections reference): the
    // block goes on through them; the fast copy leaves them out (a label is defined once), and
    // the debug sections keep naming the original loop's.
    let mut unnamed_labels: Vec<usize> = Vec::new();
    for (k, line) in lines.iter().enumerate().take(e).skip(s + 1) {
        if line.block_comment_marker() {
            return None;
        }
        // (A brace anywhere, even on a `.pragma` line, would be copied into the fast copy and
        // change where the body ends.)
        if line.braces && !(line.is_lone_statement() && line.braces_pair_up()) {
            return None;
        }
        if line.is_blank() || matches!(line.directive(), Some(".loc" | ".pragma")) {
            continue;
        }
        if line.label().is_some_and(|l| !branched_to(k, l)) {
            unnamed_labels.push(k);
            continue;
        }
        // (A statement spread over lines is none of a body's: `lone_statement` is the line's only
        // statement, ended by its `;`.)
        if line.label().is_some() || line.directive().is_some() {
            return None;
        }
        let ins = line.lone_statement()?.instr.as_ref()?.clone();
        if ins.opcode.op.transfers_control() {
            return None;
        }
        any_check |= line.brackets && line.first_stmt().is_some_and(|st| st.checked_access().is_some());
        body.push(BodyStmt::new(k, ins));
    }
    // Nothing to hoist (loops over shared memory, ...): no symbolic walk.
    if !any_check {
        return None;
    }
    // (The body declares nothing: its lines are instructions.)
    let regs: &RegTypes = declared.at(lines, s);
    let edge = lines[e].sole_instr()?;
    let edge_guard = edge.guard?;
    let (negated, pred) = match edge_guard.strip_prefix('!') {
        Some(p) => (true, p),
        None => (false, edge_guard),
    };

    // Loop-carried registers: written in the body and read before their first write.
    // (`written` is only looked up: sized for a destination a statement. `carried` is iterated,
    // into the shared test's counters: grown as before.)
    let mut written: HashSet<&str> = HashSet::with_capacity_and_hasher(body.len(), Default::default());
    let mut carried: HashSet<&str> = HashSet::default();
    for b in &body {
        carried.extend(b.reads.iter().filter(|r| !written.contains(*r)));
        written.extend(&b.dests);
    }
    carried.retain(|r| written.contains(r));
    // Induction variables: candidates whose back-edge value is their entry value plus an
    // invariant; drop the others until that holds for all.
    let mut candidates: HashSet<&str> = carried.iter().copied().filter(|r| regs.type_of(r).and_then(type_bits).is_some_and(|b| b == 32 || b == 64)).collect();
    let walked = loop {
        let w = walk(&body, &candidates, &written, regs);
        let failed: Vec<&str> = candidates.iter().copied().filter(|r| !matches!(w.last_def.get(r).map(|&d| &w.stmts[d].val), Some(Val::Biv { reg, .. }) if reg == r)).collect();
        if failed.is_empty() {
            break w;
        }
        for r in failed {
            candidates.remove(r);
        }
    };

    // The exit test.
    let setp = *walked.last_def.get(pred)?;
    let exit = exit_of(&body[setp].ins, setp, negated)?;

    // Hoistable accesses, grouped by the value of their address register and what clips them.
    let mut ranges: Vec<Range> = Vec::new();
    for (j, (b, st)) in body.iter().zip(&walked.stmts).enumerate() {
        let Some(a) = lines[b.line].first_stmt().and_then(|st| st.checked_access()) else { continue };
        let (AddrBase::Reg(r), Width::Fixed(w), false) = (&a.base, &a.width, a.bulk) else { continue };
        // The address register's definition and value as this statement sees them.
        let Some(i) = b.sources().iter().position(|o| o.starts_with('[') && o.contains(r.as_str())) else { continue };
        let (def, val) = (st.srcs[i], &st.src_vals[i]);
        if !val.affine() {
            continue;
        }
        // An end past i64 (offsets are whatever the input wrote) is no range to test.
        let Some(hi_end) = a.offset.checked_add(i64::from(*w)).filter(|&e| e > a.offset) else { continue };
        let lo = a.offset;
        let line = b.line;
        let clip = clip_of(&body, &walked, j, a.guard_nonzero.as_deref());
        if let Some(g) = ranges.iter_mut().find(|g| g.reg == *r && g.def == def && g.clip == clip) {
            g.lo = g.lo.min(lo);
            g.hi_end = g.hi_end.max(hi_end);
            g.lines.push(line);
        } else if ranges.len() < MAX_RANGES {
            let walks = match val {
                Val::Biv { reg, off: Some(_) } => Some(reg.to_string()),
                _ => None,
            };
            ranges.push(Range { reg: r.clone(), def, lo, hi_end, lines: vec![line], walks, clip });
        }
    }
    if ranges.is_empty() {
        return None;
    }
    let shared = shared_test(facts, (s, e), &body, &carried, regs);
    // Which ranges are off one pointer (they share a lookup, [`Emitter::range_test`]): the
    // kernel parameter the one loop-invariant pointer their address carries was computed from.
    // (Only a parameter: an invariant reached otherwise may be an offset both tensors add, as
    // nvcc's column walks add one stride.)
    let defs = facts.bodies.holding(s).map(|f| facts.defs().of(f));
    let roots: Vec<Option<String>> = ranges
        .iter()
        .map(|g| match (g.def.map(|d| pointer_carried(&walked, d)), &defs) {
            (Some(Carried::Invariant(r)), Some(defs)) => parameter_of(defs, r, 0),
            _ => None,
        })
        .collect();
    let (preheader, sweeps) = Emitter::new(id, &walked, &candidates, regs, scale, vote).range_test(&exit, &ranges, &roots, shared.as_ref(), &label)?;
    let fast_back_edge = format!("\t@{edge_guard} bra {}; {MARKER}\n", fast_label(id));
    let hoisted: Vec<usize> = ranges.iter().flat_map(|g| g.lines.iter().copied()).collect();
    let mut fast_order = fast_order(s, e, &body, &hoisted);
    fast_order.retain(|k| !unnamed_labels.contains(k));
    let space_covered = shared.map(|t| t.lines).unwrap_or_default();
    Some(LoopPlan { label_line: s, back_edge: e, hoisted, fast_order, preheader, sweeps, fast_back_edge, space_covered, id })
}

/// The fast copy's line order: each covered plain load moves up past the statements before it
/// that neither write what it reads, nor read or write what it writes, nor order memory (stores,
/// atomics, barriers, fences, volatile or ordered loads). Its check is gone, and a load ptxas finds
/// after a later check's branch would wait for that branch (ptxas does not move loads across
/// branches): moved up, the loads of an iteration issue together, and checks that depend on
/// their values (gathers) can load their shadow bytes and batch behind one branch. The range
/// test proved these loads in bounds, so issuing them earlier in the iteration is safe.
fn fast_order(s: usize, e: usize, body: &[BodyStmt<'_>], covered: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (s + 1..e).collect();
    let stmt_at: HashMap<usize, &BodyStmt<'_>> = body.iter().map(|b| (b.line, b)).collect();
    let orders_memory = |ins: &Instr<'_>| {
        use Op::*;
        let o = ins.opcode;
        matches!(o.op, St | Atom | Red | Bar | Barrier | Membar | Fence | Cp | Mbarrier) || (o.op == Ld && o.quals().any(|p| matches!(p, "volatile" | "acquire" | "relaxed" | "mmio")))
    };
    // Moved loads keep their order among themselves: none moves above the previous one.
    let mut floor = 0;
    for b in body {
        if !covered.contains(&b.line) || b.ins.opcode.op != Op::Ld || orders_memory(&b.ins) {
            continue;
        }
        let Some(pos) = order.iter().position(|&l| l == b.line) else { continue };
        let mut to = pos;
        for k in (floor..pos).rev() {
            let Some(other) = stmt_at.get(&order[k]) else { continue };
            let conflict = other.dests.iter().any(|w| b.reads.contains(w) || b.dests.contains(w)) || other.reads.iter().any(|r| b.dests.contains(r));
            if conflict || orders_memory(&other.ins) {
                break;
            }
            to = k;
        }
        let l = order.remove(pos);
        order.insert(to, l);
        floor = to + 1;
    }
    order
}

/// Whether `ins` widens 32-bit integer sources to 64 bits (`cvt.u64.u32`, `mul.wide.s32`,
/// `mad.wide.u32`, ...), and whether it sign-extends them.
fn widens_32_bits(ins: &Instr<'_>) -> Option<bool> {
    let parts: Operands<'_> = ins.opcode.parts().collect();
    let from = match (ins.opcode.op, parts.as_slice()) {
        (Op::Cvt, [_, to, from]) if int_bits(to) == Some(64) => from,
        (Op::Mul | Op::Mad, [_, "wide", from]) => from,
        _ => return None,
    };
    (int_bits(from) == Some(32)).then(|| from.starts_with('s'))
}

fn exit_of(ins: &Instr<'_>, idx: usize, negated: bool) -> Option<Exit> {
    let parts: Operands<'_> = ins.opcode.parts().collect();
    if ins.guard.is_some() || parts.len() != 3 || ins.opcode.op != Op::Setp || ins.operands.len() != 3 || ins.operands[0].contains('|') {
        return None;
    }
    let ty = parts[2];
    let bits = int_bits(ty)?;
    let signed = ty.starts_with('s');
    let cmp = match parts[1] {
        "lt" | "lo" => Cmp::Lt,
        "le" | "ls" => Cmp::Le,
        "gt" | "hi" => Cmp::Gt,
        "ge" | "hs" => Cmp::Ge,
        "ne" => Cmp::Ne,
        "eq" => Cmp::Eq,
        _ => return None,
    };
    if matches!(parts[1], "lo" | "ls" | "hi" | "hs") && signed {
        return None;
    }
    Some(Exit { setp: idx, cmp: if negated { cmp.negate() } else { cmp }, signed, bits })
}

/// Writes the range test of one loop.
struct Emitter<'b, 'a> {
    /// The start of its temporaries' names, `%gsh{id}_` (the loop's number written once).
    stem: String,
    body: &'b Body<'b, 'a>,
    bivs: &'b HashSet<&'a str>,
    regs: &'b RegTypes,
    /// The shadow encoding the sweep reads.
    scale: Scale,
    /// The test's register declarations, each a marked line.
    decls: String,
    /// Its statements, each a marked line.
    code: String,
    next: usize,
    /// The test's predicate: every condition is ANDed into it.
    ok: String,
    /// 32-bit values the recomputed addresses widen to 64 bits (their defining statements, and
    /// whether they are sign-extended): each must not wrap over the loop ([`Emitter::no_wrap`]).
    widened: Vec<(usize, bool)>,
    /// The warp votes on the verdict ([`Emitter::leave_unless_ok`]).
    vote: bool,
}

/// Recomputed values: (iteration, statement) -> the temporary holding it.
type Memo = HashMap<(At, usize), String>;

/// Values of the induction variables a recomputation starts from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum At {
    /// The first iteration (their values at the loop's entry).
    First,
    /// Another, with the values given by a map (the last iteration, or the second for steps).
    Mapped,
}

impl<'b, 'a> Emitter<'b, 'a> {
    fn new(id: usize, body: &'b Body<'b, 'a>, bivs: &'b HashSet<&'a str>, regs: &'b RegTypes, scale: Scale, vote: bool) -> Self {
        let mut stem = numbered("%gsh", id);
        stem.push('_');
        // (Sized for most tests: the corpus's 81 have declarations of 1.2 kB and statements of
        // 3 kB at the median, 1.7 and 5.1 kB at the 90th percentile. Grown from empty, each was
        // reallocated some ten times.)
        Self { stem, body, bivs, regs, scale, decls: String::with_capacity(2048), code: String::with_capacity(8192), next: 0, ok: String::new(), widened: Vec::new(), vote }
    }

    /// A new register of type `ty`, declared in the test's scope.
    fn temp(&mut self, ty: &str) -> String {
        let mut name = String::with_capacity(self.stem.len() + 8);
        name.push_str(&self.stem);
        self.next.put(&mut name);
        self.next += 1;
        ln!(Lines::new(&mut self.decls, "\t"); ".reg .", ty, " ", name, ";");
        name
    }

    /// A `.b{bits}` [`Emitter::temp`].
    fn temp_bits(&mut self, bits: u32) -> String {
        // (The widths the walk types have, named without a string built for each.)
        match bits {
            32 => self.temp("b32"),
            64 => self.temp("b64"),
            _ => self.temp(&numbered("b", bits)),
        }
    }

    /// `dst = n / d` and, with `rem`, `rem = n % d`, unsigned 64-bit (`d` at least 1). ptxas 13.0
    /// calls a division subroutine for `div.u64`, even by a constant (five calls before
    /// attention's loop, each on the path every launch takes), and inlines `div.u32`. So a power
    /// of two divides by a shift and a mask, and a register divides in 32 bits when both operands
    /// are below 2^32 (a grid-stride loop's step and distance), in 64 otherwise.
    fn divide_u64(&mut self, dst: &str, n: &str, d: &str, rem: Option<&str>) {
        if let Some(k) = d.parse::<u64>().ok().filter(|k| k.is_power_of_two()) {
            ln!(self; "shr.u64 ", dst, ", ", n, ", ", k.trailing_zeros(), ";");
            if let Some(r) = rem {
                ln!(self; "and.b64 ", r, ", ", n, ", ", k - 1, ";");
            }
            return;
        }
        if !d.starts_with('%') {
            ln!(self; "div.u64 ", dst, ", ", n, ", ", d, ";");
            if let Some(r) = rem {
                ln!(self; "rem.u64 ", r, ", ", n, ", ", d, ";");
            }
            return;
        }
        let (high, small) = (self.temp("b64"), self.temp("pred"));
        let (n32, d32, q32) = (self.temp("b32"), self.temp("b32"), self.temp("b32"));
        ln!(self; "or.b64 ", high, ", ", n, ", ", d, ";");
        ln!(self; "shr.u64 ", high, ", ", high, ", 32;");
        ln!(self; "setp.eq.u64 ", small, ", ", high, ", 0;");
        ln!(self; "cvt.u32.u64 ", n32, ", ", n, ";");
        ln!(self; "cvt.u32.u64 ", d32, ", ", d, ";");
        // (A large divisor's low half may be 0: it divides in 64 bits below.)
        ln!(self; "selp.b32 ", d32, ", ", d32, ", 1, ", small, ";");
        ln!(self; "div.u32 ", q32, ", ", n32, ", ", d32, ";");
        ln!(self; "cvt.u64.u32 ", dst, ", ", q32, ";");
        ln!(self; "@!", small, " div.u64 ", dst, ", ", n, ", ", d, ";");
        if let Some(r) = rem {
            ln!(self; "rem.u32 ", q32, ", ", n32, ", ", d32, ";");
            ln!(self; "cvt.u64.u32 ", r, ", ", q32, ";");
            ln!(self; "@!", small, " rem.u64 ", r, ", ", n, ", ", d, ";");
        }
    }

    /// The test's statements ([`ln!`] writes through [`Emitter::line`]).
    fn lines(&mut self) -> Lines<'_> {
        Lines::new(&mut self.code, "\t")
    }

    fn line(&mut self, pieces: impl FnOnce(&mut String)) {
        self.lines().line(pieces);
    }

    /// The range test, and whether it calls the sweep; `None` when something in it cannot be
    /// written (the loop stays as it is).
    fn range_test(mut self, exit: &Exit, ranges: &[Range], roots: &[Option<String>], shared: Option<&SharedTest>, label: &str) -> Option<(String, bool)> {
        let ctl = CONTROL_BLOCK_SYMBOL;
        let (base, size, table, shift, ok) = (self.temp("b64"), self.temp("b64"), self.temp("b64"), self.temp("b32"), self.temp("pred"));
        ln!(self; "ld.const.u64 ", base, ", [", ctl, "+", ctl_offset::POOL_BASE, "];");
        ln!(self; "ld.const.u64 ", size, ", [", ctl, "+", ctl_offset::POOL_SIZE, "];");
        ln!(self; "ld.const.u64 ", table, ", [", ctl, "+", ctl_offset::EXTENT_TABLE, "];");
        ln!(self; "ld.const.u32 ", shift, ", [", ctl, "+", ctl_offset::EXTENT_SHIFT, "];");
        // Sweeps where some range can have one ([`Emitter::sweepable`]); a range that cannot
        // must pass its extent lookup as in the plain test. The sweep is a predicated call, so
        // the test stays one straight-line block either way (sweeps written inline, with
        // branches, made ptxas drop the fast loop's unroll: gemm ran 1.25x slower on the H100).
        let sweepable: Vec<bool> = ranges.iter().map(|g| self.sweepable(g)).collect();
        let sweeping = sweepable.contains(&true);
        if sweeping {
            // The pool exists (an unwritten control block reads zero: the checked loop runs, and
            // checks nothing either).
            ln!(self; "setp.ne.u64 ", ok, ", ", size, ", 0;");
        } else {
            ln!(self; "setp.ne.u64 ", ok, ", ", table, ", 0;");
        }
        self.ok = ok.clone();

        // Steps of the induction variables (in their own widths), and the trip count.
        let mut memo: HashMap<(At, usize), String> = HashMap::default();
        let mut bivs: Vec<&'a str> = self.bivs.iter().copied().collect();
        bivs.sort_unstable();
        let mut steps: HashMap<&'a str, (String, u32)> = HashMap::default();
        for r in &bivs {
            let bits = self.regs.type_of(r).and_then(type_bits)?;
            let d = *self.body.last_def.get(r)?;
            let step = match &self.body.stmts[d].val {
                Val::Biv { off: Some(k), .. } => {
                    let k = if bits == 32 { i64::from(*k as i32) } else { *k };
                    k.to_string()
                }
                _ => {
                    let next = self.value_of_stmt(d, At::First, &mut memo, &HashMap::default())?;
                    let t = self.temp_bits(bits);
                    ln!(self; "sub.s", bits, " ", t, ", ", next, ", ", r, ";");
                    t
                }
            };
            steps.insert(r, (step, bits));
        }
        let tm1 = self.trip_count(exit, &steps, &mut memo, None)?;
        // Bound the count so that count × step cannot wrap.
        let q = self.temp("pred");
        ln!(self; "setp.lt.u64 ", q, ", ", tm1, ", 2147483648;");
        ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
        // Last values of the induction variables.
        let mut last: HashMap<&'a str, String> = HashMap::default();
        let used = self.used_bivs(ranges);
        for r in bivs.iter().filter(|r| used.contains(**r)) {
            let (step, bits) = steps.get(r)?.clone();
            let step64 = self.widen(&step, bits, true);
            if parse_int(&step).is_none() {
                let (a, q) = (self.temp("b64"), self.temp("pred"));
                ln!(self; "abs.s64 ", a, ", ", step64, ";");
                ln!(self; "setp.lt.u64 ", q, ", ", a, ", 2147483648;");
                ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
            }
            let v = self.stepped(r, tm1.as_str(), (&step, &step64), bits);
            if bits == 32 {
                // The loop computes it modulo 2^32; the 64-bit value shows whether it wrapped
                // (as signed or as unsigned) on the way, which would break monotony.
                for (conv, lo, hi) in [("cvt.s64.s32", "-2147483648", "2147483647"), ("cvt.u64.u32", "0", "4294967295")] {
                    let (w, e, q) = (self.temp("b64"), self.temp("b64"), self.temp("pred"));
                    ln!(self; conv, " ", w, ", ", r, ";");
                    ln!(self; "mad.lo.s64 ", e, ", ", tm1, ", ", step64, ", ", w, ";");
                    ln!(self; "setp.ge.s64 ", q, ", ", e, ", ", lo, ";");
                    ln!(self; "setp.le.and.s64 ", q, ", ", e, ", ", hi, ", ", q, ";");
                    ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
                }
            }
            last.insert(r, v);
        }
        // Clipped ranges end at the last iteration their comparison holds in.
        let mut clipped: Vec<(Clip, HashMap<&'a str, String>, Memo)> = Vec::new();
        for clip in ranges.iter().filter_map(|g| g.clip) {
            if clipped.iter().all(|(c, _, _)| *c != clip) {
                // (A comparison whose count cannot be written leaves its ranges unclipped.)
                let at = self.clipped_last(clip, &tm1, &steps, &used, &mut memo).unwrap_or_else(|| last.clone());
                let first: Memo = memo.iter().filter(|((at, _), _)| *at == At::First).map(|(k, v)| (*k, v.clone())).collect();
                clipped.push((clip, at, first));
            }
        }
        let which: Vec<Option<usize>> = ranges.iter().map(|g| g.clip.and_then(|c| clipped.iter().position(|(k, _, _)| *k == c))).collect();
        // A range's span, over the iterations its clip holds in.
        let mut span_of = |e: &mut Self, g: &Range, which: Option<usize>| match which {
            Some(k) => {
                let (_, at, m) = &mut clipped[k];
                e.span(g, m, at)
            }
            None => e.span(g, &mut memo, &last),
        };
        // Ranges off one loop-invariant pointer share a lookup of their union: a block is
        // contiguous, so the union inside one live block puts each of them inside it (each span's
        // own order is tested too: a wrapped span is not inside the union). Swept ranges keep
        // lookups of their own. (The benchmark's attention read its K and V tiles in eight
        // rows, eight lookups before the loop; two with this.)
        let roots: Vec<Option<&str>> = roots.iter().zip(&sweepable).map(|(r, &sw)| if sw { None } else { r.as_deref() }).collect();
        let mut units: Vec<Vec<usize>> = Vec::with_capacity(ranges.len());
        for (i, root) in roots.iter().enumerate() {
            match units.iter_mut().find(|u| root.is_some() && roots[u[0]] == *root) {
                Some(u) => u.push(i),
                None => units.push(vec![i]),
            }
        }
        if sweeping {
            // The conditions so far (count, no wrapping) hold for every range: without them no
            // first or last address means anything.
            self.leave_unless_ok(label);
        }
        // Each hoisted address: first and last value, the span, then the extent lookup, each
        // with a predicate of its own, and'ed into the test's after the last is issued (a
        // lookup guarded by the test's running predicate waited for the previous one's load).
        // A range whose extent entry proves nothing (blocks in shared slabs have none) then has
        // its shadow swept by a predicated call: no branch, so the test stays one block ending
        // in one branch, as without sweeps (with branches here ptxas no longer unrolled the fast
        // loop: gemm ran 1.25x slower). Spans are computed again for the calls rather than kept
        // live through the lookups (live spans cost ptxas registers in the whole loop).
        let mut passed = Vec::with_capacity(units.len());
        for unit in &units {
            let r = self.temp("pred");
            ln!(self; "setp.ne.u64 ", r, ", ", table, ", 0;");
            let (lo, hi) = span_of(&mut self, &ranges[unit[0]], which[unit[0]])?;
            if unit.len() > 1 {
                ln!(self; "setp.le.and.u64 ", r, ", ", lo, ", ", hi, ", ", r, ";");
            }
            for &i in &unit[1..] {
                let (l, h) = span_of(&mut self, &ranges[i], which[i])?;
                ln!(self; "setp.le.and.u64 ", r, ", ", l, ", ", h, ", ", r, ";");
                ln!(self; "min.u64 ", lo, ", ", lo, ", ", l, ";");
                ln!(self; "max.u64 ", hi, ", ", hi, ", ", h, ";");
            }
            self.extent_lookup(&lo, &hi, &r, [&base, &size, &shift, &table]);
            passed.push(r);
        }
        if !sweeping {
            // Every range must pass its lookup: one predicate, one branch.
            for r in &passed {
                ln!(self; "and.pred ", ok, ", ", ok, ", ", r, ";");
            }
            self.shared_conditions(shared);
            self.no_wrap(&tm1, &steps, &mut memo)?;
            self.leave_unless_ok(label);
            return Some((self.finish(), false));
        }
        for (unit, r) in units.iter().zip(&passed) {
            let (g, which) = (&ranges[unit[0]], which[unit[0]]);
            if !sweepable[unit[0]] {
                ln!(self; "and.pred ", ok, ", ", ok, ", ", r, ";");
                continue;
            }
            let at = which.map_or(&last, |k| &clipped[k].1);
            let (lo, hi) = self.span(g, &mut HashMap::default(), at)?;
            let (call, swept, v) = (self.temp("pred"), self.temp("pred"), self.temp("b32"));
            ln!(self; "not.pred ", call, ", ", r, ";");
            let id = self.next;
            self.next += 1;
            self.lines().text("{");
            ln!(self; ".param .b64 %gsc", id, "_lo;");
            ln!(self; ".param .b64 %gsc", id, "_hi;");
            ln!(self; ".param .b64 %gsc", id, "_n;");
            ln!(self; ".param .b32 %gsc", id, "_ok;");
            ln!(self; "st.param.b64 [%gsc", id, "_lo], ", lo, ";");
            ln!(self; "st.param.b64 [%gsc", id, "_hi], ", hi, ";");
            ln!(self; "st.param.b64 [%gsc", id, "_n], ", tm1, ";");
            ln!(self; "@", call, " call.uni (%gsc", id, "_ok), ", RANGE_SWEEP_SYMBOL, ", (%gsc", id, "_lo, %gsc", id, "_hi, %gsc", id, "_n);");
            ln!(self; "ld.param.b32 ", v, ", [%gsc", id, "_ok];");
            self.lines().text("}");
            ln!(self; "setp.ne.and.u32 ", swept, ", ", v, ", 0, ", call, ";");
            ln!(self; "or.pred ", r, ", ", r, ", ", swept, ";");
            ln!(self; "and.pred ", ok, ", ", ok, ", ", r, ";");
        }
        self.shared_conditions(shared);
        self.no_wrap(&tm1, &steps, &mut memo)?;
        self.leave_unless_ok(label);
        Some((self.finish(), true))
    }

    /// The test's exit to the checked loop `label` unless its predicate holds. With `vote` (PTX
    /// 6.2 and later: `activemask`) the lanes' verdicts are first and-ed over the warp's active
    /// lanes, so that the whole warp takes one loop and the branch is uniform (`bra.uni`). A
    /// branch on each lane's own verdict made ptxas treat everything after it as divergent: the
    /// pipelined matmul's fast loop lost the uniform registers its `wgmma` descriptors and stage
    /// counters live in (209 SASS instructions an iteration, 32 of them `R2UR`, against native's
    /// 167; 172 with the vote and joined checks, [`super::emit::Form::fails_after_joins`]). A warp
    /// with one lane whose range fails runs the checked loop, which checks every lane.
    fn leave_unless_ok(&mut self, label: &str) {
        let ok = self.ok.clone();
        if self.vote {
            let active = self.temp("b32");
            ln!(self; "activemask.b32 ", active, ";");
            ln!(self; "vote.sync.all.pred ", ok, ", ", ok, ", ", active, ";");
            ln!(self; "@!", ok, " bra.uni ", label, ";");
        } else {
            ln!(self; "@!", ok, " bra ", label, ";");
        }
    }

    /// The conditions under which [`SharedTest`]'s accesses stay inside their variable, and'ed
    /// into the test: each stage counter it relies on starts in its range, and the launch's
    /// dynamic shared memory holds the accesses' highest end.
    fn shared_conditions(&mut self, shared: Option<&SharedTest>) {
        let Some(t) = shared else { return };
        let ok = self.ok.clone();
        let (size, q) = (self.temp("b32"), self.temp("pred"));
        ln!(self; "mov.u32 ", size, ", %dynamic_smem_size;");
        ln!(self; "setp.ge.u32 ", q, ", ", size, ", ", t.end, ";");
        ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
        for (reg, bound) in &t.counters {
            let q = self.temp("pred");
            ln!(self; "setp.ge.s32 ", q, ", ", reg, ", 0;");
            ln!(self; "setp.le.and.s32 ", q, ", ", reg, ", ", bound, ", ", q, ";");
            ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
        }
    }

    /// The test as one block: its register declarations, then its code.
    fn finish(self) -> String {
        let mut out = String::with_capacity(self.decls.len() + self.code.len() + 64);
        Lines::new(&mut out, "\t").text("{");
        out.push_str(&self.decls);
        out.push_str(&self.code);
        Lines::new(&mut out, "\t").text("}");
        out
    }

    /// Whether range `g` can be swept: its address is an induction variable (plus a constant)
    /// that moves by a known constant of at most a granule per iteration (a pointer walking an
    /// array), so its range spans no more granules than the loop has iterations, whatever the
    /// count. A run-time or larger step nearly always spans more.
    fn sweepable(&self, g: &Range) -> bool {
        let Some(r) = g.walks.as_deref() else { return false };
        let Some(bits) = self.regs.type_of(r).and_then(type_bits) else { return false };
        let Some(&d) = self.body.last_def.get(r) else { return false };
        match &self.body.stmts[d].val {
            Val::Biv { off: Some(k), .. } => {
                let k = if bits == 32 { i64::from(*k as i32) } else { *k };
                k != 0 && k.unsigned_abs() <= self.scale.granule()
            }
            _ => false,
        }
    }

    /// ANDs into `pred` that `[lo, hi]` is a range in the pool inside the live block its extent
    /// entry names (the lookup is made only while `pred` holds).
    fn extent_lookup(&mut self, lo: &str, hi: &str, pred: &str, [base, size, shift, table]: [&str; 4]) {
        let (off, q, start, end) = (self.temp("b64"), self.temp("pred"), self.temp("b64"), self.temp("b64"));
        ln!(self; "sub.s64 ", off, ", ", lo, ", ", base, ";");
        ln!(self; "setp.lt.u64 ", q, ", ", off, ", ", size, ";");
        ln!(self; "and.pred ", pred, ", ", pred, ", ", q, ";");
        ln!(self; "setp.le.and.u64 ", pred, ", ", lo, ", ", hi, ", ", pred, ";");
        extent_entry_address(&mut self.lines(), &off, shift, table);
        ln!(self; "mov.u64 ", start, ", 0;");
        ln!(self; "mov.u64 ", end, ", 0;");
        ln!(self; "@", pred, " ld.global.v2.u64 {", start, ", ", end, "}, [", off, "];");
        ln!(self; "setp.ge.and.u64 ", pred, ", ", lo, ", ", start, ", ", pred, ";");
        ln!(self; "setp.lt.and.u64 ", pred, ", ", hi, ", ", end, ", ", pred, ";");
    }

    /// The lowest and the highest byte `g`'s accesses touch over the whole loop (from the first
    /// and the last value of its address), computed into two new registers.
    fn span(&mut self, g: &Range, memo: &mut HashMap<(At, usize), String>, last: &HashMap<&'a str, String>) -> Option<(String, String)> {
        let first = self.value_of(&g.reg, g.def, At::First, memo, last)?;
        let lastv = self.value_of(&g.reg, g.def, At::Mapped, memo, last)?;
        let (lo, hi) = (self.temp("b64"), self.temp("b64"));
        if first == lastv {
            ln!(self; "add.s64 ", lo, ", ", first, ", ", g.lo, ";");
            ln!(self; "add.s64 ", hi, ", ", first, ", ", g.hi_end - 1, ";");
        } else {
            ln!(self; "min.u64 ", lo, ", ", first, ", ", lastv, ";");
            ln!(self; "max.u64 ", hi, ", ", first, ", ", lastv, ";");
            ln!(self; "add.s64 ", lo, ", ", lo, ", ", g.lo, ";");
            ln!(self; "add.s64 ", hi, ", ", hi, ", ", g.hi_end - 1, ";");
        }
        Some((lo, hi))
    }

    /// Induction variables the hoisted addresses depend on.
    fn used_bivs(&self, ranges: &[Range]) -> HashSet<&'a str> {
        let mut out = HashSet::default();
        let mut stack: Vec<usize> = Vec::new();
        let mut seen = HashSet::default();
        for g in ranges {
            match g.def {
                Some(d) => stack.push(d),
                None => {
                    if let Some(r) = self.bivs.get(g.reg.as_str()) {
                        out.insert(*r);
                    }
                }
            }
        }
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            let st = &self.body.stmts[d];
            for (op, src) in self.body.body[d].sources().iter().zip(&st.srcs) {
                match src {
                    Some(s) => stack.push(*s),
                    None => {
                        if let Some(r) = self.bivs.get(op) {
                            out.insert(*r);
                        }
                    }
                }
            }
        }
        out
    }

    /// The register or constant holding `reg`'s value as defined by `def` (or at the iteration's
    /// start), in iteration `at`.
    fn value_of(&mut self, reg: &str, def: Option<usize>, at: At, memo: &mut HashMap<(At, usize), String>, last: &HashMap<&'a str, String>) -> Option<String> {
        match def {
            Some(d) => self.value_of_stmt(d, at, memo, last),
            None => Some(self.entry(reg, at, last)),
        }
    }

    fn entry(&self, reg: &str, at: At, last: &HashMap<&'a str, String>) -> String {
        match at {
            At::Mapped => last.get(reg).cloned().unwrap_or_else(|| reg.to_string()),
            _ => reg.to_string(),
        }
    }

    /// Recomputes statement `d` (and what it reads) into temporaries.
    fn value_of_stmt(&mut self, d: usize, at: At, memo: &mut HashMap<(At, usize), String>, last: &HashMap<&'a str, String>) -> Option<String> {
        if let Some(t) = memo.get(&(at, d)) {
            return Some(t.clone());
        }
        let (body, b) = (self.body, &self.body.body[d]);
        let st = &body.stmts[d];
        if !st.val.affine() {
            return None;
        }
        let bits = self.regs.type_of(b.dests.first()?).and_then(type_bits)?;
        if let Some(signed) = widens_32_bits(&b.ins) {
            // A source read as the iteration starts is an invariant or an induction variable
            // (whose own test rules out wrapping); a value computed in the body may wrap.
            for &s in st.srcs.iter().take(2).flatten() {
                if !self.widened.contains(&(s, signed)) {
                    self.widened.push((s, signed));
                }
            }
        }
        let mut srcs = Vec::new();
        for (op, src) in b.sources().iter().zip(&st.srcs) {
            srcs.push(match src {
                Some(s) => self.value_of_stmt(*s, at, memo, last)?,
                None if op.starts_with('%') => self.entry(op, at, last),
                None => op.to_string(),
            });
        }
        let t = self.temp_bits(bits);
        ln!(self; b.ins.opcode.text, " ", t, ", ", srcs.join(", "), ";");
        memo.insert((at, d), t.clone());
        Some(t)
    }

    /// Each induction variable's value in the second iteration (its entry value plus its step).
    fn advanced(&mut self, steps: &HashMap<&'a str, (String, u32)>) -> HashMap<&'a str, String> {
        let mut advanced: HashMap<&'a str, String> = HashMap::default();
        let mut regs: Vec<_> = steps.iter().collect();
        regs.sort_unstable_by_key(|(r, _)| **r);
        for (r, (s, b)) in regs {
            let t = self.temp_bits(*b);
            ln!(self; "add.s", b, " ", t, ", ", r, ", ", s, ";");
            advanced.insert(*r, t);
        }
        advanced
    }

    /// ANDs into the test that no 32-bit value an address widens wraps over the loop. Such a value
    /// `x` is affine modulo 2^32 in the iteration `i` (it is built by 32-bit `add`, `sub`, `mul`,
    /// `shl`, `neg` from induction variables and invariants), so `x(i) = x(0) + i·d` with
    /// `d = x(1) - x(0)` taken as a signed 32-bit step. When `x(0) + (n-1)·d`, computed in 64 bits
    /// from the widened `x(0)`, lies in the widening's range, no iteration wrapped: the widened
    /// values are exactly that line, so the first and the last address are the extreme ones. When
    /// one wraps they are not (the address jumps by 2^32 elements), and the range test would prove
    /// a span the loop leaves.
    fn no_wrap(&mut self, tm1: &str, steps: &HashMap<&'a str, (String, u32)>, memo: &mut HashMap<(At, usize), String>) -> Option<()> {
        if self.widened.is_empty() {
            return Some(());
        }
        let advanced = self.advanced(steps);
        let mut second: HashMap<(At, usize), String> = HashMap::default();
        let mut done = 0;
        // (Recomputing a 32-bit value widens nothing: the list does not grow here.)
        while done < self.widened.len() {
            let (s, signed) = self.widened[done];
            done += 1;
            let x0 = self.value_of_stmt(s, At::First, memo, &HashMap::default())?;
            let x1 = self.value_of_stmt(s, At::Mapped, &mut second, &advanced)?;
            let (d, e, q) = (self.temp("b32"), self.temp("b64"), self.temp("pred"));
            ln!(self; "sub.s32 ", d, ", ", x1, ", ", x0, ";");
            let (dw, x0w) = (self.widen(&d, 32, true), self.widen(&x0, 32, signed));
            ln!(self; "mad.lo.s64 ", e, ", ", tm1, ", ", dw, ", ", x0w, ";");
            let (lo, hi) = if signed { ("-2147483648", "2147483647") } else { ("0", "4294967295") };
            ln!(self; "setp.ge.s64 ", q, ", ", e, ", ", lo, ";");
            ln!(self; "setp.le.and.s64 ", q, ", ", e, ", ", hi, ", ", q, ";");
            let ok = self.ok.clone();
            ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
        }
        Some(())
    }

    /// The used induction variables' values in the last iteration `clip` holds in (the loop's last
    /// when it holds in all, its first when in none): the accesses it clips lie between the first
    /// iteration's addresses and those. Where its count cannot be proven (its value wraps over the
    /// loop, or moves away from its bound) the loop's last iteration is taken: unclipped.
    fn clipped_last(&mut self, clip: Clip, tm1: &str, steps: &HashMap<&'a str, (String, u32)>, used: &HashSet<&'a str>, memo: &mut HashMap<(At, usize), String>) -> Option<HashMap<&'a str, String>> {
        let cmp = exit_of(&self.body.body[clip.setp].ins, clip.setp, clip.negated)?;
        // The count's own conditions go to a predicate of their own.
        let (held, ok) = (self.temp("pred"), std::mem::take(&mut self.ok));
        ln!(self; "setp.eq.u32 ", held, ", 0, 0;");
        self.ok = held.clone();
        let count = self.trip_count(&cmp, steps, memo, Some(tm1));
        self.ok = ok;
        let count = count?;
        let (t, end) = (self.temp("b64"), self.temp("b64"));
        ln!(self; "max.u64 ", t, ", ", count, ", 1;");
        ln!(self; "sub.s64 ", t, ", ", t, ", 1;");
        ln!(self; "min.u64 ", t, ", ", t, ", ", tm1, ";");
        ln!(self; "selp.b64 ", end, ", ", t, ", ", tm1, ", ", held, ";");
        let mut at: HashMap<&'a str, String> = HashMap::default();
        let mut regs: Vec<&'a str> = used.iter().copied().collect();
        regs.sort_unstable();
        for r in regs {
            // (No wrap up to the loop's last iteration was tested with its value there. A 64-bit
            // step widens to itself.)
            let (step, bits) = steps.get(r)?.clone();
            let v = self.stepped(r, &end, (&step, &step), bits);
            at.insert(r, v);
        }
        Some(at)
    }

    /// Induction variable `r`'s value after `n` (a 64-bit register) steps of `step` (`bits` wide;
    /// with `step64`, it widened to 64 bits), computed as the loop computes it (modulo 2^32 for a
    /// 32-bit one).
    fn stepped(&mut self, r: &str, n: &str, (step, step64): (&str, &str), bits: u32) -> String {
        let v = self.temp_bits(bits);
        if bits == 64 {
            let t = self.temp("b64");
            ln!(self; "mul.lo.s64 ", t, ", ", n, ", ", step64, ";");
            ln!(self; "add.s64 ", v, ", ", r, ", ", t, ";");
        } else {
            let (n32, t) = (self.temp("b32"), self.temp("b32"));
            ln!(self; "cvt.u32.u64 ", n32, ", ", n, ";");
            ln!(self; "mul.lo.s32 ", t, ", ", n32, ", ", step, ";");
            ln!(self; "add.s32 ", v, ", ", r, ", ", t, ";");
        }
        v
    }

    /// A register or constant of `bits` bits, sign- or zero-extended to 64.
    fn widen(&mut self, v: &str, bits: u32, signed: bool) -> String {
        if bits == 64 {
            return v.to_string();
        }
        if let Some(k) = parse_int(v) {
            return if signed { i64::from(k as i32).to_string() } else { u64::from(k as u32).to_string() };
        }
        let t = self.temp("b64");
        ln!(self; "cvt.", if signed { "s" } else { "u" }, "64.", if signed { "s" } else { "u" }, "32 ", t, ", ", v, ";");
        t
    }

    /// The number of iterations minus one, as a 64-bit register, with its validity ANDed into the
    /// test's predicate. More generally, for any comparison of the body of that form, the number
    /// of leading iterations it holds in; `over`: the loop's count (minus one), when that is not
    /// what is counted, over which the compared value must not wrap (so that it holds in a
    /// prefix of the loop's iterations).
    fn trip_count(&mut self, exit: &Exit, steps: &HashMap<&'a str, (String, u32)>, memo: &mut HashMap<(At, usize), String>, over: Option<&str>) -> Option<String> {
        let st = &self.body.stmts[exit.setp];
        let ops = self.body.body[exit.setp].sources();
        let vals = &st.src_vals;
        // One side moves, the other is the bound.
        let (c_src, b_src, cmp) = match (&vals[0], &vals[1]) {
            (Val::Inv, Val::Inv) | (Val::Opaque, _) | (_, Val::Opaque) => return None,
            (Val::Inv, _) => (1, 0, exit.cmp.mirror()),
            (_, Val::Inv) => (0, 1, exit.cmp),
            _ => return None,
        };
        let bits = exit.bits;
        let c0 = match st.srcs[c_src] {
            Some(d) => self.value_of_stmt(d, At::First, memo, &HashMap::default())?,
            None => ops[c_src].to_string(),
        };
        let bound = match st.srcs[b_src] {
            Some(d) => self.value_of_stmt(d, At::First, memo, &HashMap::default())?,
            None => ops[b_src].to_string(),
        };
        // The compared value's step per iteration.
        let step: String = match &vals[c_src] {
            Val::Biv { reg, .. } => steps.get(reg)?.0.clone(),
            _ => {
                // c at the second iteration minus c at the first: recompute with each induction
                // variable advanced by its step.
                let advanced = self.advanced(steps);
                let c1 = match st.srcs[c_src] {
                    Some(d) => self.value_of_stmt(d, At::Mapped, &mut HashMap::default(), &advanced)?,
                    None => return None,
                };
                let t = self.temp_bits(bits);
                ln!(self; "sub.s", bits, " ", t, ", ", c1, ", ", c0, ";");
                t
            }
        };
        let ok = self.ok.clone();
        let (tm1, q) = (self.temp("b64"), self.temp("pred"));
        match cmp {
            Cmp::Eq => return None,
            Cmp::Ne => {
                // Steps must be known here: an exact multiple of the step apart, or no count.
                let k = parse_int(&step)?;
                let k = if bits == 32 { i64::from(k as i32) } else { k };
                if k == 0 {
                    return None;
                }
                let d = self.temp_bits(bits);
                if k > 0 {
                    ln!(self; "sub.s", bits, " ", d, ", ", bound, ", ", c0, ";");
                } else {
                    ln!(self; "sub.s", bits, " ", d, ", ", c0, ", ", bound, ";");
                }
                let n = self.widen(&d, bits, false);
                let (r, a) = (self.temp("b64"), k.unsigned_abs());
                self.divide_u64(&tm1, &n, &a.to_string(), Some(&r));
                ln!(self; "setp.eq.u64 ", q, ", ", r, ", 0;");
                ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
            }
            _ => {
                let up = matches!(cmp, Cmp::Lt | Cmp::Le);
                let signed = exit.signed;
                let (cw, bw) = (self.widen(&c0, bits, signed), self.widen(&bound, bits, signed));
                let sw = self.widen(&step, bits, true);
                // |step| (`div`), which must point towards the bound: a known step is checked here
                // and divides as a constant; a register step is checked at run time.
                let div = match parse_int(&sw) {
                    Some(k) if (k > 0) == up && k != 0 => k.unsigned_abs().to_string(),
                    Some(_) => return None,
                    None => {
                        let a = self.temp("b64");
                        if up {
                            ln!(self; "mov.b64 ", a, ", ", sw, ";");
                        } else {
                            ln!(self; "neg.s64 ", a, ", ", sw, ";");
                        }
                        ln!(self; "setp.gt.s64 ", q, ", ", a, ", 0;");
                        ln!(self; "and.pred ", ok, ", ", ok, ", ", q, ";");
                        // A failed test divides by 1 (its result is not used).
                        let div = self.temp("b64");
                        ln!(self; "max.s64 ", div, ", ", a, ", 1;");
                        div
                    }
                };
                let ty = if signed { "s64" } else { "u64" };
                // done: the first compare already fails; dist: how far the bound is.
                let (done, dist, cnt) = (self.temp("pred"), self.temp("b64"), self.temp("b64"));
                let (done_cmp, strict) = match cmp {
                    Cmp::Lt => ("ge", true),
                    Cmp::Le => ("gt", false),
                    Cmp::Gt => ("le", true),
                    _ => ("lt", false),
                };
                ln!(self; "setp.", done_cmp, ".", ty, " ", done, ", ", cw, ", ", bw, ";");
                if up {
                    ln!(self; "sub.s64 ", dist, ", ", bw, ", ", cw, ";");
                } else {
                    ln!(self; "sub.s64 ", dist, ", ", cw, ", ", bw, ";");
                }
                if strict {
                    // ceil(dist / |step|)
                    ln!(self; "add.s64 ", dist, ", ", dist, ", ", div, ";");
                    ln!(self; "sub.s64 ", dist, ", ", dist, ", 1;");
                    self.divide_u64(&cnt, &dist, &div, None);
                } else {
                    self.divide_u64(&cnt, &dist, &div, None);
                    ln!(self; "add.s64 ", cnt, ", ", cnt, ", 1;");
                }
                ln!(self; "selp.b64 ", tm1, ", 0, ", cnt, ", ", done, ";");
                // The last compared value must not have wrapped in the comparison's type.
                if bits == 32 {
                    let (e, q2) = (self.temp("b64"), self.temp("pred"));
                    ln!(self; "mad.lo.s64 ", e, ", ", over.unwrap_or(&tm1), ", ", sw, ", ", cw, ";");
                    let (lo, hi) = if signed { ("-2147483648", "2147483647") } else { ("0", "4294967295") };
                    ln!(self; "setp.ge.s64 ", q2, ", ", e, ", ", lo, ";");
                    ln!(self; "setp.le.and.s64 ", q2, ", ", e, ", ", hi, ", ", q2, ";");
                    ln!(self; "and.pred ", ok, ", ", ok, ", ", q2, ";");
                }
            }
        }
        Some(tm1)
    }
}
