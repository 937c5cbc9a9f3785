//! Kernel-parameter bounds: a check whose address is inside the live pool block a kernel's
//! pointer parameter points into needs no shadow load.
//!
//! At a kernel's entry, each pointer parameter that checked addresses are computed from gets its
//! block's bounds once: decoded from the launch's argument, where the runtime put them
//! ([`crate::abi::param_tag`]), or, for a parameter no launch may tag, looked up in the pool's
//! extent table ([`crate::abi::ControlBlock::extent_table`]: one 16-byte load a thread) — instead
//! of one shadow-byte load per checked access. Each check of an
//! address derived from that parameter first compares the address with the block's whole
//! granules, two compares against registers; inside them, the shadow byte would say "every byte
//! accessible" ([`crate::shadow::OUT_OF_POOL_SHADOW`] passes like it), so the load is skipped.
//! On the H100, shadow loads are most of what checks cost in L1-bound kernels (stencils,
//! transposes: benches/results/variants.md).
//!
//! Soundness does not rest on the provenance found here: the fast path passes an address only
//! when it lies in whole granules of a block that was live at the kernel's start (extent entries
//! are set after a block's shadow and cleared before it is freed, and never claim a block with
//! poisoned bytes inside: pitched rows), whatever parameter it came from. A wrong or missing
//! provenance only means the ordinary check runs. What it does rest on: a block freed while a
//! kernel using it still runs (a race in the program) is treated as live until the kernel ends.
//! The exception is the index test ([`IndexTest`]), which tests the index an address was made
//! from instead of the address: it rests on the address being exactly `P + E·i`, so it is taken
//! only where each register of that chain has one unguarded definition in a body without loops
//! (what [`scaled_registers`] finds), and it is property-tested by execution in `loops_sim.rs`.

use super::access::{Access, AddrBase, Width};
use super::bodies::Body;
use super::defs::{pointer_flow, wide64, Defs, PointerFlow};
use super::func::{FnHeader, Param};
use super::line::NameSet;
use super::lines::{ln, Lines, Numbered};
use super::opcode::{Op, Opcode};
use super::Line;
use crate::abi::{ctl_offset, CONTROL_BLOCK_SYMBOL};
use crate::shadow::Scale;
use rustc_hash::FxHashMap as HashMap;

/// At most this many parameters get bounds per kernel (each holds two 64-bit registers for the
/// whole kernel): the ones the most checks use.
pub(super) const MAX_PARAMS: usize = 4;

/// A zeroed module global (declared in every checked module's prelude): the extent entry a lookup
/// reads when its pointer is outside the pool or there is no extent table.
pub(super) const NO_EXTENT_SYMBOL: &str = "__gasan_no_extent";

/// The bounds registers of one looked-up parameter: the first and the end of the block's whole
/// granules (both zero when the lookup claims nothing: no address passes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FastPath {
    pub lo: Numbered<'static, usize>,
    pub hi: Numbered<'static, usize>,
    /// The label the fast path branches to, unique in the function.
    pub label: Numbered<'static, u32>,
    /// The test on the access's 32-bit element index instead of its 64-bit address, when it has
    /// one ([`IndexTest`]).
    pub index: Option<IndexTest>,
}

/// The fast path's test of an access at `P + E·i + c` (`P` a tagged parameter's pointer, `i` a
/// 32-bit index widened by `mul.wide`/`mad.wide`, `E = 2^shift`, `c = E·add`, width at most `E`):
/// the access lies in `[P, P + reach)` exactly when `i + add`, read as unsigned 32 bits, is below
/// `reach / E` (the invariant: `tests::index_in_reach`, property-tested; the limit is decoded
/// with the reach at the entry). One 32-bit compare, and an add when `add != 0`, where the
/// address test is four SASS compares of two 64-bit values; the index is what the program
/// computed anyway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct IndexTest {
    /// The index register where the check runs (a recomputed chain renames it: [`Self::renamed`]).
    pub index: String,
    pub add: i32,
    /// The reach of the parameter's block in elements.
    pub limit: LimitReg,
}

impl FastPath {
    /// The fast path where the registers in `renamed` hold their values under new names.
    pub fn renamed(&self, renamed: &HashMap<String, String>) -> FastPath {
        let mut fp = self.clone();
        if let Some(ix) = &mut fp.index {
            if let Some(r) = renamed.get(&ix.index) {
                ix.index.clone_from(r);
            }
        }
        fp
    }
}

/// The limit register of parameter `k`'s reach in elements of `2^shift` bytes, `%gsbi{k}_{shift}`
/// (written where it is emitted: one per index test).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LimitReg {
    k: usize,
    shift: u32,
}

impl super::lines::Piece for LimitReg {
    fn put(&self, out: &mut String) {
        Numbered("%gsbi", self.k).put(out);
        Numbered("_", self.shift).put(out);
    }
}

/// Largest `|add|` an [`IndexTest`] takes: with the reach below 2^30 bytes, `i + add` wraps in 32
/// bits only to values at or above 2^31 - 2^29, past every limit.
const MAX_INDEX_ADD: i64 = 1 << 29;

/// The index test of an access `c` bytes past `P + E·i` (`E = 2^shift`), `width` bytes wide:
/// `add = c / E` when `c` is a multiple of `E`, `width <= E`, `|add|` below [`MAX_INDEX_ADD`],
/// and, for a zero-extended index, `add <= 0` (a positive `add` could wrap a large index back
/// below the limit).
fn index_add(signed: bool, shift: u32, c: i64, width: u32) -> Option<i32> {
    let e = 1i64 << shift;
    (u64::from(width) <= e as u64 && c % e == 0 && (c / e).abs() < MAX_INDEX_ADD && (signed || c <= 0)).then(|| (c / e) as i32)
}

/// A register whose one definition scales a 32-bit index onto a tagged parameter's pointer.
#[derive(Clone, Debug)]
struct Scaled {
    /// Index into [`ParamBounds::params`].
    k: usize,
    index: String,
    shift: u32,
    signed: bool,
}

/// What a register's value is derived from, as far as the analysis can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    /// The pointer parameter with this index in [`ParamBounds::params`], plus or minus offsets.
    Param(usize),
    /// Anything else.
    Other,
}

/// One kernel's looked-up parameters and which registers derive from them.
#[derive(Clone, Debug, Default)]
pub(super) struct ParamBounds {
    /// `ld.param` operands (`name` or `name+8`) of the parameters looked up, in lookup order.
    params: Vec<String>,
    /// Register → index into `params`.
    of_reg: HashMap<String, usize>,
    /// Per entry of `params`: its ordinal when launches may tag it ([`crate::abi::param_tag`]).
    tag_ordinal: Vec<Option<u32>>,
    /// The program's reads of tagged parameters: (line index, destination register, index into
    /// `params`), each followed by the untagged pointer's copy into the register.
    untag: Vec<(usize, String, usize)>,
    /// Parameters the kernel declares.
    declared_count: u32,
    /// Address registers of the form `P + E·i` ([`IndexTest`]), by name.
    scaled: HashMap<String, Scaled>,
    /// The (parameter, shift) pairs whose limits the entry decodes, ascending.
    limits: Vec<(usize, u32)>,
}

/// What a register's one definition computes, as far as [`Scaled`] needs.
#[derive(Clone, Copy)]
enum Shape<'s> {
    /// A parameter's value (index into the parameter operands found), read, moved or `cvta`'d
    /// (the identity on a pool address: a global one).
    Param(usize),
    /// `mul.wide.{s,u}32 d, index, 2^shift`.
    Wide {
        index: &'s str,
        shift: u32,
        signed: bool,
    },
    /// `add.{s,u}64 d, a, b`.
    Sum(&'s str, &'s str),
    /// `mad.wide.{s,u}32 d, index, 2^shift, base`.
    WidePlus {
        index: &'s str,
        shift: u32,
        signed: bool,
        base: &'s str,
    },
    Other,
}

/// `mul.wide`/`mad.wide` of a 32-bit register by a power of two (at most 16): (index, shift,
/// signed).
fn wide_scale<'s>(opcode: Opcode<'_>, index: &'s str, factor: &str) -> Option<(&'s str, u32, bool)> {
    let mut q = opcode.quals();
    let signed = match (q.next(), q.next(), q.next()) {
        (Some("wide"), Some("s32"), None) => true,
        (Some("wide"), Some("u32"), None) => false,
        _ => return None,
    };
    let f = super::access::parse_int(factor).filter(|f| matches!(f, 1 | 2 | 4 | 8 | 16))?;
    index.starts_with('%').then_some((index, f.trailing_zeros(), signed))
}

/// What the analysis knows of one register of a kernel body.
#[derive(Clone, Copy)]
struct Reg<'a> {
    /// What its definitions derive from (`None` until a destination defines it).
    root: Option<Root>,
    /// Its one definition's order and shape ([`scaled_registers`]); `None` once it is defined more
    /// than once or under a guard.
    def: Option<(usize, Shape<'a>)>,
}

/// The registers of a kernel body, numbered by its index of definitions: one slot per register,
/// `None` until the pass reaches its first definition.
struct Regs<'d, 'a> {
    defs: Defs<'d, 'a>,
    slots: Vec<Option<Reg<'a>>>,
}

impl<'a> Regs<'_, 'a> {
    fn get(&self, r: &str) -> Option<&Reg<'a>> {
        self.defs.reg_id(r).and_then(|id| self.slots[id as usize].as_ref())
    }

    /// The registers defined so far, with what is known of each.
    fn iter(&self) -> impl Iterator<Item = (&'a str, &Reg<'a>)> + '_ {
        self.slots.iter().enumerate().filter_map(|(id, g)| Some((self.defs.reg_name(id as u32), g.as_ref()?)))
    }
}

/// The shape of an unguarded instruction's one destination; `param`: the parameter operand it
/// reads, when it is a parameter read.
fn shape_of<'a>(ins: &super::access::Instr<'a>, param: Option<usize>, regs: &Regs<'_, 'a>) -> Shape<'a> {
    let o: &[&'a str] = &ins.operands;
    match (ins.opcode.op, o) {
        (Op::Ld, _) => param.map_or(Shape::Other, Shape::Param),
        (Op::Mov | Op::Cvta, &[_, src]) if wide64(ins.opcode) && (ins.opcode.op == Op::Mov || ins.opcode.has("global")) => match regs.get(src).and_then(|g| g.def) {
            Some((_, Shape::Param(j))) => Shape::Param(j),
            _ => Shape::Other,
        },
        (Op::Mul, &[_, i, f]) => wide_scale(ins.opcode, i, f).map_or(Shape::Other, |(index, shift, signed)| Shape::Wide { index, shift, signed }),
        (Op::Mad, &[_, i, f, base]) => wide_scale(ins.opcode, i, f).map_or(Shape::Other, |(index, shift, signed)| Shape::WidePlus { index, shift, signed, base }),
        (Op::Add, &[_, a, b])
            if {
                let mut q = ins.opcode.quals();
                matches!((q.next(), q.next()), (Some("s64" | "u64"), None))
            } =>
        {
            Shape::Sum(a, b)
        }
        _ => Shape::Other,
    }
}

/// The registers of a loop-free kernel body holding `P + E·i` ([`Scaled`]) for a parameter
/// `param_index` maps to a tagged entry of [`ParamBounds::params`] (from its index among the
/// parameter operands the analysis found), from the body's registers `regs`. Only registers
/// each defined once, unguarded, count — the address, the scaled index, the index and the
/// pointer — each defined before the one it feeds: a register defined once keeps its value from
/// there on in a body without loops, so the index the check reads is the one the address was made
/// from (nvcc's registers defined once come from LLVM's SSA values, whose definitions dominate
/// their uses).
fn scaled_registers(regs: &Regs<'_, '_>, param_index: impl Fn(usize) -> Option<usize>) -> HashMap<String, Scaled> {
    let def = |r: &str| regs.get(r).and_then(|g| g.def);
    // `P + E·i` from the pointer register and the index's (scale, signedness), when each is
    // defined once, the pointer before `ptr_by` and the index before `index_by`.
    let scaled = |ptr: &str, index: &str, shift: u32, signed: bool, ptr_by: usize, index_by: usize| {
        let (Some((p_at, Shape::Param(j))), Some((i_at, _))) = (def(ptr), def(index)) else { return None };
        let k = param_index(j)?;
        (p_at < ptr_by && i_at < index_by).then(|| Scaled { k, index: index.to_string(), shift, signed })
    };
    let mut out = HashMap::default();
    for (r, g) in regs.iter() {
        let Some((at, shape)) = &g.def else { continue };
        let s = match *shape {
            Shape::Sum(a, b) => [(a, b), (b, a)].into_iter().find_map(|(p, w)| match def(w) {
                Some((w_at, Shape::Wide { index, shift, signed })) if w_at < *at => scaled(p, index, shift, signed, *at, w_at),
                _ => None,
            }),
            Shape::WidePlus { index, shift, signed, base } => scaled(base, index, shift, signed, *at, *at),
            _ => None,
        };
        if let Some(s) = s {
            out.insert(r.to_string(), s);
        }
    }
    out
}

impl ParamBounds {
    /// The analysis of one kernel body (device functions get none: their parameters are not the
    /// launch's). `None` when no checked access derives from a kernel pointer parameter.
    /// `versioned(i)`: line `i` is in a loop that loop versioning copied (its fast copy has no
    /// checks, its checked copy rarely runs): its checks do not count. `any_in_loop(r)`: some
    /// line of range `r` is in a loop. A kernel with any loop gets no bounds: the bounds registers would stay live
    /// across it next to what the loop keeps (gemm_tiled on the H100, whose only check outside
    /// its versioned loop is the final store, went from 32 to 39 registers: half the blocks per
    /// SM, 1.07x to 1.38x native), while straight-line kernels (stencils, transposes, the
    /// shapes whose checks cost most) have registers to spare.
    pub fn analyze(lines: &[Line<'_>], body: &Body, defs: Defs<'_, '_>, versioned: impl Fn(usize) -> bool, any_in_loop: impl Fn(std::ops::Range<usize>) -> bool) -> Option<ParamBounds> {
        // (A body that opens and closes on one line holds nothing to check.)
        let body_lines = lines.get(body.open + 1..body.close).filter(|_| body.entry)?;
        // In a body with a loop a definition may reach a use from below it, so a register's root
        // found in one pass may be another parameter's: the address fast path stays sound (it
        // passes only addresses in a block live at the kernel's start, whatever parameter they
        // came from), the index test would not, and is kept to loop-free bodies.
        let looped = any_in_loop(body.open + 1..body.close);
        let header = FnHeader::text_of(lines, body);
        // The parameters the kernel's header declares, in order.
        let declared: Vec<Param<'_>> = FnHeader::parse(&header).map(|h| h.params.into_iter().filter(|p| p.space == ".param").collect()).unwrap_or_default();
        if declared.is_empty() {
            return None;
        }
        let is_declared = |operand: &str| {
            let name = operand.split('+').next().unwrap_or(operand).trim();
            declared.iter().any(|d| d.name == name)
        };
        // One pass in text order: loop-free, every definition that reaches a use comes before it
        // (with a loop, see above). A register defined more than once keeps a parameter only when
        // every definition agrees.
        let mut regs = Regs { defs, slots: vec![None; defs.reg_count()] };
        let mut operands_of_params: Vec<&str> = Vec::new();
        // The body's instructions that define registers, in order (`seq`: the position, all the
        // index tests compare).
        for (seq, w) in defs.writers().enumerate() {
            let ins = w.instr;
            // A call's results (not among its `dests`) derive from no parameter the analysis
            // knows, and none of them is defined once for index tests.
            let made = defs.made_by(&w);
            let results = made.iter().take_while(|d| d.call_result()).count();
            for r in &made[..results] {
                regs.slots[r.reg_id as usize] = Some(Reg { root: Some(Root::Other), def: None });
            }
            let dests = &made[results..];
            let Some(d) = dests.first().map(|d| defs.reg_name(d.reg_id)) else { continue };
            let single = dests.len() == 1;
            let mut param = None;
            let v = if !single {
                Root::Other
            } else {
                match pointer_flow(ins.opcode, &ins.operands) {
                    PointerFlow::Param(p) if is_declared(p) => {
                        let k = operands_of_params.iter().position(|q| *q == p).unwrap_or_else(|| {
                            operands_of_params.push(p);
                            operands_of_params.len() - 1
                        });
                        param = Some(k);
                        Root::Param(k)
                    }
                    PointerFlow::Param(_) | PointerFlow::Other => Root::Other,
                    PointerFlow::OneOf(ops) => {
                        let mut derived = ops.iter().filter_map(|o| match regs.get(o).and_then(|g| g.root) {
                            Some(Root::Param(k)) => Some(k),
                            _ => None,
                        });
                        match (derived.next(), derived.next()) {
                            (Some(k), None) => Root::Param(k),
                            _ => Root::Other,
                        }
                    }
                }
            };
            let shape = if single && ins.guard.is_none() && !looped { shape_of(ins, param, &regs) } else { Shape::Other };
            for r in dests {
                let v = if defs.reg_name(r.reg_id) == d { v } else { Root::Other };
                match &mut regs.slots[r.reg_id as usize] {
                    slot @ None => *slot = Some(Reg { root: Some(v), def: ins.guard.is_none().then_some((seq, shape)) }),
                    Some(g) => {
                        // Every definition must agree; a second one ends the index tests'.
                        g.root = Some(match g.root {
                            Some(e) if e != v => Root::Other,
                            _ => v,
                        });
                        g.def = None;
                    }
                }
            }
        }
        if operands_of_params.is_empty() {
            return None;
        }
        // The parameters checked accesses use, the most used first.
        // (The same walk keeps every checked access's address register, versioned or not, for
        // the index tests' limits below.)
        let mut uses = vec![0usize; operands_of_params.len()];
        let mut bases: Vec<&str> = Vec::new();
        for (i, line) in body_lines.iter().enumerate().map(|(k, l)| (body.open + 1 + k, l)) {
            // A checked access names its address in brackets (access.rs parse_address): a line
            // without any holds none, and its statements need no classifying. Nor do loop
            // versioning's lines (`Line::generated`): their loads' registers are gasan's own,
            // which the definition index skips, so they would count no use and give no limit.
            if !line.brackets || line.generated {
                continue;
            }
            let counted = !versioned(i);
            for st in line.stmts() {
                if let Some(AddrBase::Reg(r)) = st.checked_access().map(|a| &a.base) {
                    bases.push(r.as_str());
                    if !counted {
                        continue;
                    }
                    if let Some(Root::Param(k)) = regs.get(r.as_str()).and_then(|g| g.root) {
                        uses[k] += 1;
                    }
                }
            }
        }
        // Even one check pays: the lookup reads one entry every thread of the grid shares (cached),
        // the shadow load a byte of the buffer's own shadow, which a streaming kernel misses in
        // cache (stencil2d on the H100: 1.30x with its one-check output parameter looked up, 1.51x
        // without).
        let mut order: Vec<usize> = (0..uses.len()).filter(|&i| uses[i] > 0).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(uses[i]), i));
        order.truncate(MAX_PARAMS);
        if order.is_empty() {
            return None;
        }
        let params: Vec<String> = order.iter().map(|&i| operands_of_params[i].to_string()).collect();
        let of_reg = regs
            .iter()
            .filter_map(|(r, g)| match g.root {
                Some(Root::Param(i)) => order.iter().position(|&o| o == i).map(|k| (r.to_string(), k)),
                _ => None,
            })
            .collect();
        // A parameter may be tagged when it is declared a 64-bit scalar and every use of it is a
        // plain read ([`ParamBounds::plain_reads`], one walk for them all). A `.ptr` parameter of
        // a kernel with a loop is looked up, not tagged: ptxas keeps such a parameter, read as it
        // is, in uniform registers for the loop's addressing, but moves the untagged copy there
        // again in every iteration (Triton's hinted matmul: 32 more `R2UR` an iteration,
        // jit/FORMS.md item 6), while the lookup is paid once. Loop-free kernels would pay the
        // lookup's latency before their first access.
        let taggable = |d: &Param<'_>| d.scalar64() && !(looped && d.declared_pointer());
        let ordinals: Vec<Option<usize>> = params.iter().map(|p| declared.iter().position(|d| d.name == *p && taggable(d))).collect();
        let candidates: Vec<&str> = params.iter().zip(&ordinals).filter(|(_, o)| o.is_some()).map(|(p, _)| p.as_str()).collect();
        let mut reads = Self::plain_reads(lines, body, &candidates).into_iter();
        let mut untag = Vec::new();
        let tag_ordinal: Vec<Option<u32>> = ordinals
            .iter()
            .enumerate()
            .map(|(k, ordinal)| {
                let ordinal = (*ordinal)?;
                untag.extend(reads.next().flatten()?.into_iter().map(|(l, r)| (l, r, k)));
                u32::try_from(ordinal).ok()
            })
            .collect();
        untag.sort();
        let scaled = scaled_registers(&regs, |j| order.iter().position(|&o| o == j).filter(|&k| tag_ordinal[k].is_some()));
        let mut limits: Vec<(usize, u32)> = bases.iter().filter_map(|r| scaled.get(*r).map(|s| (s.k, s.shift))).collect();
        limits.sort_unstable();
        limits.dedup();
        Some(ParamBounds { params, of_reg, tag_ordinal, untag, declared_count: declared.len() as u32, scaled, limits })
    }

    /// The program's reads of each parameter of `names` — (line index, destination) — when each
    /// is a whole 64-bit `ld.param` alone on its line, so that untagging its destination after the
    /// line covers every use; `None` for a parameter any use of which is another form (a part
    /// read, its address taken, a guarded read): such a parameter is never tagged. One walk of the
    /// body for all of them.
    fn plain_reads(lines: &[Line<'_>], body: &Body, names: &[&str]) -> Vec<Option<Vec<(usize, String)>>> {
        let mut out: Vec<Option<Vec<(usize, String)>>> = names.iter().map(|_| Some(Vec::new())).collect();
        if names.is_empty() {
            return out;
        }
        let set = NameSet::new(names);
        for (i, line) in lines.iter().enumerate().take(body.close).skip(body.open + 1) {
            let named = line.names_of(&set);
            if named == 0 {
                continue;
            }
            // The line's one statement, when it is an unguarded whole 64-bit parameter read: its
            // destination and address.
            let read = match line.stmts() {
                [st] => st.instr.as_ref().filter(|ins| ins.guard.is_none()).and_then(|ins| {
                    let plain = ins.opcode.op == Op::Ld && ins.opcode.first_qual() == Some("param") && wide64(ins.opcode) && ins.opcode.quals().count() == 2;
                    match ins.operands.as_slice() {
                        [d, a] if plain && d.starts_with('%') => Some((*d, a.replace(' ', ""))),
                        _ => None,
                    }
                }),
                _ => None,
            };
            for (k, name) in names.iter().enumerate() {
                if named & (1 << k) == 0 {
                    continue;
                }
                let Some(reads) = &mut out[k] else { continue };
                match &read {
                    Some((d, a)) if a.strip_prefix('[').and_then(|a| a.strip_suffix(']')) == Some(name) => reads.push((i, d.to_string())),
                    _ => out[k] = None,
                }
            }
        }
        out
    }

    /// The kernel's entry in the module's [`crate::abi::ParamTagTable`], when some parameter may
    /// be tagged.
    pub fn tags(&self) -> Option<crate::abi::KernelParamTags> {
        let mut tagged: Vec<u32> = self.tag_ordinal.iter().flatten().copied().collect();
        tagged.sort_unstable();
        (!tagged.is_empty()).then_some(crate::abi::KernelParamTags { count: self.declared_count, tagged })
    }

    /// The fast path of a check of `a` (its address register's program name), branching to
    /// `label`.
    pub fn fast_path(&self, a: &Access, label: Numbered<'static, u32>) -> Option<FastPath> {
        let AddrBase::Reg(reg) = &a.base else { return None };
        let k = *self.of_reg.get(reg.as_str())?;
        let index = match (&a.width, a.bulk) {
            (Width::Fixed(w), false) => self.scaled.get(reg.as_str()).filter(|s| s.k == k && self.limits.binary_search(&(k, s.shift)).is_ok()).and_then(|s| {
                let add = index_add(s.signed, s.shift, a.offset, *w)?;
                Some(IndexTest { index: s.index.clone(), add, limit: LimitReg { k, shift: s.shift } })
            }),
            _ => None,
        };
        Some(FastPath { lo: Numbered("%gsbl", k), hi: Numbered("%gsbh", k), label, index })
    }

    /// What follows the program's read of a tagged parameter on line `line`, if it has one: the
    /// read value replaced by the pointer without its tag, which the entry kept (no tag test
    /// per read). Appended to `out`.
    pub fn untag_after(&self, out: &mut String, line: usize) {
        let Ok(i) = self.untag.binary_search_by_key(&line, |(l, _, _)| *l) else { return };
        let (_, reg, k) = &self.untag[i];
        ln!(Lines::new(out, "\t"); "mov.b64 ", reg, ", %gsbp", k, ";");
    }

    /// The lookup of parameter `k`'s block from its (untagged) value in `%gsbt3`: its extent
    /// entry's load into `%gsbl{k}`, `%gsbh{k}`, not yet narrowed to whole granules.
    fn lookup(s: &mut Lines<'_>, k: usize) {
        s.texts(&["sub.s64 %gsbt3, %gsbt3, %gsbt0;", "setp.lt.u64 %gsbq, %gsbt3, %gsbt1;", "setp.ne.and.u64 %gsbq, %gsbt2, 0, %gsbq;"]);
        super::loops::extent_entry_address(s, "%gsbt3", "%gsbs", "%gsbt2");
        // Unpredicated (a predicated load costs the H100's stencils 9 %: variants.md): a pointer
        // outside the pool reads the entry that claims nothing. `.nc`: the table only changes for
        // blocks allocated or freed while the kernel runs (a new claim read as none checks as
        // before; a freed block still claimed is a race in the program).
        s.text("selp.b64 %gsbt3, %gsbt3, %gsbt4, %gsbq;");
        ln!(s; "ld.global.nc.v2.u64 {%gsbl", k, ", %gsbh", k, "}, [%gsbt3];");
    }

    /// Whole granules only: inside them the shadow says every byte is accessible.
    fn narrow(s: &mut Lines<'_>, k: usize, g: u64) {
        ln!(s; "add.s64 %gsbl", k, ", %gsbl", k, ", ", g - 1, ";");
        ln!(s; "and.b64 %gsbl", k, ", %gsbl", k, ", ", (g as i64).wrapping_neg(), ";");
        ln!(s; "and.b64 %gsbh", k, ", %gsbh", k, ", ", (g as i64).wrapping_neg(), ";");
    }

    /// The bounds, written at the top of the kernel's body. Parameters launches may tag
    /// ([`crate::abi::param_tag`]) come all tagged or none, so the first one's mark tells: each
    /// tagged one's bounds are decoded from its value (its reach, and the pointer without the tag
    /// for the program's reads, in `%gsbp{k}`); in a launch that did not tag them (captured into a
    /// graph, an argument buffer, a handle gasan did not see handed out, `arg_bounds=0`) their
    /// bounds are empty, so their checks load shadow bytes as without bounds, and the values pass
    /// unchanged. The other parameters always look their blocks up.
    ///
    /// Branch-free, with `selp`: a kernel running one element per thread pays this per warp, and
    /// the earlier form (a branch to lookups for untagged launches, joined after the decode) cost
    /// the H100's issue-bound kernels 5–8% more (stencil2d 1.11x -> 1.06x, jacobi2d's steps 1.20x
    /// -> 1.14x, scan's add-back 1.25x -> 1.19x; the join kept the bounds out of uniform registers).
    pub fn entry_lookups(&self, out: &mut String, scale: Scale) {
        use crate::abi::param_tag as tag;
        let (ctl, n, g) = (CONTROL_BLOCK_SYMBOL, self.params.len(), scale.granule());
        let mut s = Lines::new(out, "\t");
        let (tagged, untagged): (Vec<usize>, Vec<usize>) = (0..n).partition(|&k| self.tag_ordinal[k].is_some());
        ln!(s; ".reg .b64 %gsbl<", n, ">, %gsbh<", n, ">, %gsbp<", n, ">;");
        for &(k, shift) in &self.limits {
            ln!(s; ".reg .b32 ", LimitReg { k, shift }, ";");
        }
        s.texts(&["{", ".reg .b64 %gsbt<8>; .reg .b32 %gsbs; .reg .pred %gsbq, %gsbr;"]);
        if !untagged.is_empty() {
            ln!(s; "ld.const.u64 %gsbt0, [", ctl, "+", ctl_offset::POOL_BASE, "];");
            ln!(s; "ld.const.u64 %gsbt1, [", ctl, "+", ctl_offset::POOL_SIZE, "];");
            ln!(s; "ld.const.u64 %gsbt2, [", ctl, "+", ctl_offset::EXTENT_TABLE, "];");
            ln!(s; "ld.const.u32 %gsbs, [", ctl, "+", ctl_offset::EXTENT_SHIFT, "];");
            ln!(s; "mov.u64 %gsbt4, ", NO_EXTENT_SYMBOL, ";");
        }
        for &k in &untagged {
            ln!(s; "ld.param.u64 %gsbt3, [", self.params[k], "];");
            Self::lookup(&mut s, k);
        }
        if let Some(&first) = tagged.first() {
            for &k in &tagged {
                ln!(s; "ld.param.u64 %gsbp", k, ", [", self.params[k], "];");
            }
            // %gsbr: tagged. %gsbt7: the mask that strips a tag (all ones when there is none).
            ln!(s; "shr.u64 %gsbt5, %gsbp", first, ", 62;");
            ln!(s; "setp.eq.u64 %gsbr, %gsbt5, ", tag::MARK, ";");
            ln!(s; "selp.b64 %gsbt7, ", tag::ADDRESS_MASK, ", -1, %gsbr;");
            // Decoded as param_tag::decode does. The reach ends inside the block's whole granules
            // and starts at the pointer, so no narrowing; untagged, it is zero: lo = hi.
            for &k in &tagged {
                ln!(s; "and.b64 %gsbt6, %gsbp", k, ", ", u64::from(tag::REACH_MASK_HIGH_WORD) << 32, ";");
                s.text("shr.u64 %gsbt6, %gsbt6, 32;");
                s.text("selp.b64 %gsbt6, %gsbt6, 0, %gsbr;");
                // The reach in elements, for index tests (below 2^30 bytes: 32 bits hold it).
                for &(_, shift) in self.limits.iter().filter(|l| l.0 == k) {
                    let limit = LimitReg { k, shift };
                    ln!(s; "cvt.u32.u64 ", limit, ", %gsbt6;");
                    if shift > 0 {
                        ln!(s; "shr.u32 ", limit, ", ", limit, ", ", shift, ";");
                    }
                }
                ln!(s; "and.b64 %gsbp", k, ", %gsbp", k, ", %gsbt7;");
                ln!(s; "mov.b64 %gsbl", k, ", %gsbp", k, ";");
                ln!(s; "add.s64 %gsbh", k, ", %gsbp", k, ", %gsbt6;");
            }
        }
        for &k in &untagged {
            Self::narrow(&mut s, k, g);
        }
        s.text("}");
    }
}

#[cfg(test)]
mod tests {
    use super::index_add;
    use proptest::prelude::*;

    /// The invariant an [`IndexTest`] rests on, over exact integers: the access of `width` bytes at
    /// `E·i + c` bytes from the pointer (`i` sign- or zero-extended from 32 bits, `E = 2^shift`)
    /// lies inside `[0, reach)` — what the 32-bit test says, given [`index_add`]'s conditions and
    /// `reach` a multiple of `E` below 2^30. Property-tested against the 32-bit computation.
    fn index_in_reach(i: u32, signed: bool, shift: u32, c: i64, width: u64, reach: u64) -> bool {
        let i = if signed { i64::from(i as i32) } else { i64::from(i) };
        let at = (i << shift) as i128 + c as i128;
        at >= 0 && at + width as i128 <= reach as i128
    }

    /// What the emitted [`IndexTest`] computes: `i + add` as unsigned 32 bits, below `reach >> shift`.
    fn index_test_passes(i: u32, add: i32, shift: u32, reach: u64) -> bool {
        i.wrapping_add(add as u32) < (reach as u32) >> shift
    }

    proptest! {
        /// The byte test finds a 64-bit qualifier where the opcode's qualifiers hold one.
        #[test]
        fn wide64_is_a_64_bit_qualifier(text in "(ld|mov|u64|b64)(\\.|u64|s64|b64|u6|64|x|param|::)*") {
            let o = super::Opcode::parse(&text);
            prop_assert_eq!(super::wide64(o), o.quals().any(|q| matches!(q, "u64" | "s64" | "b64")), "{:?}", text);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn the_index_test_passes_exactly_the_accesses_inside_the_reach(
            i in prop_oneof![any::<u32>(), (0u32..1 << 20), (-(1i32 << 20)..0).prop_map(|x| x as u32), ((1u32 << 31) - 64..(1 << 31) + 64)],
            signed in any::<bool>(), shift in 0u32..5, width_shift in 0u32..5, add in prop_oneof![-64i64..64, -(1i64 << 29) - 2..(1 << 29) + 2],
            units in 0u64..(1 << 14), edge in 0u8..3, near in -2i64..3,
        ) {
            let (c, width, reach) = (add << shift, 1u64 << width_shift, units << 16);
            if let Some(a) = index_add(signed, shift, c, width as u32) {
                // Or an index at either end of the reach.
                let i = match edge {
                    0 => (near - i64::from(a)) as u32,
                    1 => ((reach >> shift) as i64 - i64::from(a) + near) as u32,
                    _ => i,
                };
                prop_assert_eq!(index_test_passes(i, a, shift, reach), index_in_reach(i, signed, shift, c, width, reach), "i={} a={} reach={}", i, a, reach);
            }
        }
    }
}
