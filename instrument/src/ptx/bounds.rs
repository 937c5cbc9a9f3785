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

use super::bodies::Body;
use super::emit::{ln, Lines, Numbered};
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
}

/// One parameter the kernel's header declares, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Declared {
    name: String,
    /// A scalar 64-bit integer (`.u64`, `.s64`, `.b64`): a pointer argument can be one.
    scalar64: bool,
}

/// The kernel parameters declared in the header of the body that opens at `open`, in order.
fn kernel_params(lines: &[Line<'_>], open: usize) -> Vec<Declared> {
    let Some(start) = lines[..=open].iter().rposition(|l| l.code.split_whitespace().any(|w| w == ".entry")) else { return Vec::new() };
    let mut declared = Vec::new();
    for line in &lines[start..=open] {
        for piece in line.code.split([',', '(', ')']) {
            let Some(rest) = piece.trim().strip_prefix(".param") else { continue };
            let words: Vec<&str> = rest.split_whitespace().collect();
            if let Some(name) = words.last() {
                let scalar64 = !name.contains('[') && words.len() == 2 && matches!(words[0], ".u64" | ".s64" | ".b64");
                declared.push(Declared { name: name.split('[').next().unwrap_or(name).to_string(), scalar64 });
            }
        }
    }
    declared
}

/// Whether `text` names `name` as a whole word (PTX identifiers: letters, digits, `_`, `$`,
/// `%`). Each occurrence of the name's first byte is found with `memchr` and compared there: a
/// body's every line is searched, most are a few dozen bytes without that byte, and a substring
/// searcher's setup or rolling hash cost more than that.
fn names(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%');
    let (hay, needle) = (text.as_bytes(), name.as_bytes());
    let Some((&first, _)) = needle.split_first() else {
        // (The empty name occurs at every position.)
        return (0..=text.len()).any(|i| text.is_char_boundary(i) && !text[..i].ends_with(word) && !text[i..].starts_with(word));
    };
    memchr::memchr_iter(first, hay).any(|i| hay[i..].starts_with(needle) && !text[..i].ends_with(word) && !text[i + needle.len()..].starts_with(word))
}

/// How an instruction's destination derives from its sources.
enum Def<'s> {
    Param(&'s str),
    /// The destination is the one operand (of these) that derives from a parameter, when exactly
    /// one does and the others derive from none.
    OneOf(&'s [&'s str]),
    Other,
}

/// Whether an opcode moves a 64-bit integer (what a pointer parameter is read as).
fn wide64(opcode: Opcode<'_>) -> bool {
    opcode.quals().any(|q| matches!(q, "u64" | "s64" | "b64"))
}

fn def_of<'s>(opcode: Opcode<'_>, operands: &'s [&'s str]) -> Def<'s> {
    // (Asked of every instruction of a kernel: the qualifiers are read only for the opcodes that
    // can define a parameter's register.)
    if !matches!(opcode.op, Op::Ld | Op::Mov | Op::Cvta | Op::Add | Op::Sub | Op::Mad) {
        return Def::Other;
    }
    let wide64 = wide64(opcode);
    let src = |i: usize| operands.get(i).copied();
    match opcode.op {
        Op::Ld if opcode.first_qual() == Some("param") && wide64 => match src(1).and_then(|a| a.strip_prefix('[')).and_then(|a| a.strip_suffix(']')) {
            Some(a) => Def::Param(a.trim()),
            None => Def::Other,
        },
        Op::Mov | Op::Cvta if wide64 && operands.len() == 2 => Def::OneOf(&operands[1..2]),
        Op::Add if wide64 && operands.len() == 3 => Def::OneOf(&operands[1..3]),
        Op::Sub if wide64 && operands.len() == 3 => Def::OneOf(&operands[1..2]),
        // mad.wide.{s,u}32 d, a, b, c / mad.lo.{s,u}64 d, a, b, c: the 64-bit addend.
        Op::Mad if operands.len() == 4 && (opcode.quals().any(|q| q == "wide") || wide64) => Def::OneOf(&operands[3..4]),
        _ => Def::Other,
    }
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
    pub fn analyze(lines: &[Line<'_>], body: &Body, versioned: impl Fn(usize) -> bool, any_in_loop: impl Fn(std::ops::Range<usize>) -> bool) -> Option<ParamBounds> {
        // (A body that opens and closes on one line holds nothing to check.)
        let body_lines = lines.get(body.open + 1..body.close).filter(|_| body.entry)?;
        if any_in_loop(body.open + 1..body.close) {
            return None;
        }
        let declared = kernel_params(lines, body.open);
        if declared.is_empty() {
            return None;
        }
        let is_declared = |operand: &str| {
            let name = operand.split('+').next().unwrap_or(operand).trim();
            declared.iter().any(|d| d.name == name)
        };
        // Loop-free (checked above): every definition that reaches a use comes before it in the
        // text, so one pass in order sees them all. A register defined more than once keeps a
        // parameter only when every definition agrees.
        // (Sized for a definition a line: grown from empty, it rehashed several times a kernel.)
        let mut root: HashMap<&str, Root> = HashMap::with_capacity_and_hasher(body_lines.len(), Default::default());
        let mut operands_of_params: Vec<&str> = Vec::new();
        for line in body_lines {
            for st in line.stmts() {
                let Some(ins) = &st.instr else { continue };
                let mut dests = ins.dests();
                let Some(d) = dests.next() else { continue };
                let mut rest = dests.peekable();
                let v = if rest.peek().is_some() {
                    Root::Other
                } else {
                    match def_of(ins.opcode, &ins.operands) {
                        Def::Param(p) if is_declared(p) => {
                            let k = operands_of_params.iter().position(|q| *q == p).unwrap_or_else(|| {
                                operands_of_params.push(p);
                                operands_of_params.len() - 1
                            });
                            Root::Param(k)
                        }
                        Def::Param(_) | Def::Other => Root::Other,
                        Def::OneOf(ops) => {
                            let mut derived = ops.iter().filter_map(|o| match root.get(o) {
                                Some(Root::Param(k)) => Some(*k),
                                _ => None,
                            });
                            match (derived.next(), derived.next()) {
                                (Some(k), None) => Root::Param(k),
                                _ => Root::Other,
                            }
                        }
                    }
                };
                for r in std::iter::once(d).chain(rest) {
                    let v = if r == d { v } else { Root::Other };
                    root.entry(r)
                        .and_modify(|e| {
                            if *e != v {
                                *e = Root::Other;
                            }
                        })
                        .or_insert(v);
                }
            }
        }
        if operands_of_params.is_empty() {
            return None;
        }
        // The parameters checked accesses use, the most used first.
        let mut uses = vec![0usize; operands_of_params.len()];
        for (i, line) in body_lines.iter().enumerate().map(|(k, l)| (body.open + 1 + k, l)) {
            if versioned(i) {
                continue;
            }
            for st in line.stmts() {
                if let Some(super::access::AddrBase::Reg(r)) = st.checked_access().map(|a| &a.base) {
                    if let Some(Root::Param(k)) = root.get(r.as_str()) {
                        uses[*k] += 1;
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
        let of_reg = root
            .into_iter()
            .filter_map(|(r, v)| match v {
                Root::Param(i) => order.iter().position(|&o| o == i).map(|k| (r.to_string(), k)),
                _ => None,
            })
            .collect();
        let mut untag = Vec::new();
        let tag_ordinal = params
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let ordinal = declared.iter().position(|d| d.name == *p && d.scalar64)?;
                untag.extend(Self::plain_reads(lines, body, p)?.into_iter().map(|(l, r)| (l, r, k)));
                u32::try_from(ordinal).ok()
            })
            .collect();
        untag.sort();
        Some(ParamBounds { params, of_reg, tag_ordinal, untag, declared_count: declared.len() as u32 })
    }

    /// The program's reads of parameter `name` — (line index, destination) — when each is a
    /// whole 64-bit `ld.param` alone on its line, so that untagging its destination after the
    /// line covers every use; `None` when any use is another form (a part read, its address
    /// taken, a guarded read): such a parameter is never tagged.
    fn plain_reads(lines: &[Line<'_>], body: &Body, name: &str) -> Option<Vec<(usize, String)>> {
        let operand = format!("[{name}]");
        let mut reads = Vec::new();
        for (i, line) in lines.iter().enumerate().take(body.close).skip(body.open + 1) {
            if line.code.len() < name.len() || !names(line.code, name) {
                continue;
            }
            let [st] = line.stmts() else { return None };
            let ins = st.instr.as_ref().filter(|ins| ins.guard.is_none())?;
            let plain = ins.opcode.op == Op::Ld && ins.opcode.first_qual() == Some("param") && wide64(ins.opcode) && ins.opcode.quals().count() == 2;
            match ins.operands.as_slice() {
                [d, a] if plain && d.starts_with('%') && a.replace(' ', "") == operand => reads.push((i, d.to_string())),
                _ => return None,
            }
        }
        Some(reads)
    }

    /// The kernel's entry in the module's [`crate::abi::ParamTagTable`], when some parameter may
    /// be tagged.
    pub fn tags(&self) -> Option<crate::abi::KernelParamTags> {
        let mut tagged: Vec<u32> = self.tag_ordinal.iter().flatten().copied().collect();
        tagged.sort_unstable();
        (!tagged.is_empty()).then_some(crate::abi::KernelParamTags { count: self.declared_count, tagged })
    }

    /// The fast path of a check whose address register is `reg`, branching to `label`.
    pub fn fast_path(&self, reg: &str, label: Numbered<'static, u32>) -> Option<FastPath> {
        let k = *self.of_reg.get(reg)?;
        Some(FastPath { lo: Numbered("%gsbl", k), hi: Numbered("%gsbh", k), label })
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
