//! Shared- and local-memory checks: bounds of the variable an access's address derives from.
//!
//! Shared and local memory have no shadow. Instead each access is checked against the bounds of
//! the one variable its base register was computed from, as PTX shows it: nvcc takes a variable's
//! address with `mov.u32 %r, smem;` (`mov.u64 %SPL, __local_depotN;` for a frame) and adds the
//! index to it. A flow-insensitive pass per function ([`analyze`]) follows those registers through
//! `add`/`sub`/`mad`/`cvt`/`cvta`/`selp`/`mov`; a register gets a variable only when *every*
//! definition of it derives from that same variable, so a check never names the wrong one. That
//! gives exact per-variable bounds (one past the end of one array, into the next one, is caught)
//! with no re-layout of the module's shared memory and no per-CTA poisoning, for 3–4 integer
//! instructions and no memory access per check (the bound is an immediate; dynamic shared memory
//! reads `%dynamic_smem_size`, the size the launch passed, so the runtime changes nothing).
//!
//! Use after return: in a kernel, a local address (or generic local
//! one) that is not traced to a variable and lies outside the kernel's own frame is in the frame
//! of a function that has returned (no caller's frame is live in a kernel), and is reported as
//! `stack-use-after-scope`. ptxas lays the frames of a call graph without recursion out
//! statically, a callee's frame *above* its caller's (on the H100 a kernel's frame at R1+0 and
//! its callee's at R1+0x20, with R1 never moved), while recursive calls move the stack pointer
//! down; a called function learns where its live callers' frames end from frames.rs. (A first version tested every function's addresses against
//! the lower end of its own frame, and reported the clean twin of tests/suite's
//! use_after_return_scope: a callee writing its caller's array, 32 bytes below its own frame.)
//!
//! Besides `ld`/`st`/`atom`/`red`, these are checked the same way: the shared operand of
//! `cp.async` copies (the destination of a global→shared copy, cp-size bytes; either shared side
//! of a bulk copy, its size an immediate or a register); the row addresses of
//! `ldmatrix`/`stmatrix` (m8n8 .b16: 16 bytes per lane, only the lanes whose address the
//! `.x1`/`.x2` forms read); the tiles of `wmma` loads and stores (the whole tile: (rows - 1) x
//! stride + row length elements, when the stride is an immediate or a register every definition
//! of which moves one).
//!
//! Not checked: accesses whose base cannot be traced to one variable (a shared pointer passed to a
//! non-inlined function, loaded from memory, or selected between two variables); distributed
//! shared memory (`shared::cluster` loads and stores, a bulk copy's peer CTA); `wmma` tiles of
//! sub-byte types or with a stride computed at run time, and other `ldmatrix` shapes; a bulk copy
//! sized by a register into dynamic shared memory; bulk reductions; block-scope lifetimes inside
//! one function (PTX keeps every local array in the frame until the function returns).
//!
//! Called functions: frames.rs passes each the end of its callers' live frames; an untraced
//! local address in one is checked against that end (`Base::PastTop`): one computed from a
//! parameter may not reach it (past a caller's array), any other may not reach it outside the
//! function's own frame (a returned frame). An overrun of a caller's array into the caller's next
//! array stays below the end and is not seen.

use super::access::{self, parse_address, parse_int, AddrBase, Extent, Instr, Operands, Space, Width};
use super::bodies::{Bodies, Body};
use super::defs::{constant_add, Defs, ModuleDefs};
use super::func::FnHeader;
use super::ir::decl::{space_declaration as parse_declaration, SpaceVar};
use super::ir::line::contains_dotted;
use super::lines::{ln, Lines, Piece};
use super::opcode::Op;
pub(super) use super::space_check::{Base, SpaceCheck};
use super::stmt::{ends_block, falls_through};
use super::{Line, ParsedStmt};
use crate::abi::{AccessKind, MemorySpace, SLOW_PATH_SYMBOL};
use rustc_hash::FxHashMap as HashMap;
use rustc_hash::{FxHashMap, FxHashSet};

/// Where a register's value points, as far as every definition of it agrees.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Prov {
    /// Into `var`: a window (`.shared`/`.local` state-space) address, or a generic one.
    Var {
        var: String,
        generic: bool,
    },
    /// Computed from one of the function's own parameters (a called function's, see frames.rs):
    /// a pointer its caller made, never into the function's own frame or above it.
    Param {
        generic: bool,
    },
    Unknown,
}

/// What one function's checks need.
#[derive(Clone, Debug, Default)]
pub(super) struct FnSpaces {
    regs: HashMap<String, Prov>,
    /// The function's frame (`__local_depotN`) and its size.
    depot: Option<(String, u64)>,
    /// The function allocates on the stack at run time (`alloca`, `stackrestore`): live local
    /// memory then lies below its frame, so addresses there prove nothing.
    dynamic_stack: bool,
    /// A kernel (`.entry`): no caller's frame is live, so its own frame is all the local memory
    /// its code may reach (use after return: see the module doc).
    entry: bool,
    /// Registers whose every definition moves one integer into them (`mov.u32 %r52, 16;`, a
    /// `wmma` stride), by value.
    consts: HashMap<String, i64>,
    /// A called function given the top of its callers' live frames (frames.rs,
    /// [`super::frames::TOP_PARAM`]).
    top_param: bool,
    /// It calls a function (whose frame, once returned, is dead local memory it may point into).
    calls: bool,
}

/// The module's shared/local variables and, per function name, its register provenance.
#[derive(Clone, Debug, Default)]
pub(super) struct ModuleSpaces {
    pub vars: HashMap<String, SpaceVar>,
    pub functions: HashMap<String, FnSpaces>,
    /// The functions that take [`super::frames::TOP_PARAM`].
    pub top_params: FxHashSet<String>,
}

impl ModuleSpaces {
    /// Does the module declare any shared or local variable? (Otherwise nothing here applies and
    /// the checked PTX is what it was before shared/local checks existed.)
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

/// Scans the module: its shared/local declarations, then every function's register provenance
/// (the rewriter does both steps itself: mod.rs `Module::plan`).
#[cfg(test)]
pub(super) fn analyze<'a>(lines: &[Line<'a>], bodies: &Bodies, defs: &ModuleDefs<'_, 'a>, top_params: &FxHashSet<String>) -> ModuleSpaces {
    let mut m = declarations(lines);
    m.top_params = top_params.clone();
    analyze_functions(lines, bodies, defs, &mut m);
    m
}

/// The module's shared/local declarations (no function analyzed yet).
pub(super) fn declarations(lines: &[Line<'_>]) -> ModuleSpaces {
    let mut m = ModuleSpaces::default();
    // (A line the rewriter wrote declares only registers and call parameters: not searched.)
    for line in lines {
        if !line.generated && line.may_declare(&[".shared", ".local"]) {
            for s in line.statements() {
                if s.starts_with('.') {
                    if let Some((name, v)) = parse_declaration(s) {
                        m.vars.insert(name, v);
                    }
                }
            }
        }
    }
    m
}

/// The register provenance of the functions of `bodies` (none when the module declares no
/// shared/local variable), added to `m`.
pub(super) fn analyze_functions<'a>(lines: &[Line<'a>], bodies: &Bodies, defs: &ModuleDefs<'_, 'a>, m: &mut ModuleSpaces) {
    if m.vars.is_empty() {
        return;
    }
    // Function bodies: the statements from the body's opening line to its closing one.
    for b in bodies.iter() {
        let stmts: Vec<&ParsedStmt<'_>> = body_lines(lines, b, b.open).flat_map(|(_, l)| l.stmts()).collect();
        let top_param = m.top_params.contains(&b.name);
        // A called function given its callers' top (frames.rs) follows its own parameters: the
        // ones its header declares.
        let header = if top_param { FnHeader::text_of(lines, b) } else { String::new() };
        let own_params: Option<Vec<&str>> = top_param.then(|| FnHeader::parse(&header).map(|h| h.params.iter().map(|p| p.name).collect()).unwrap_or_default());
        m.functions.insert(b.name.clone(), FnSpaces { entry: b.entry, top_param, ..analyze_function(&stmts, defs.of(b), &m.vars, own_params.as_deref()) });
    }
}

/// The lines of body `b` from line `from` to its closing line (or the module's end), numbered.
fn body_lines<'l, 'a>(lines: &'l [Line<'a>], b: &Body, from: usize) -> impl Iterator<Item = (usize, &'l Line<'a>)> + 'l {
    let end = b.close.min(lines.len().saturating_sub(1));
    (from..=end).filter_map(move |i| lines.get(i).map(|l| (i, l)))
}

/// `params`: the function's own parameters, when they are followed too ([`Prov::Param`]).
fn analyze_function<'a>(stmts: &[&ParsedStmt<'a>], index: Defs<'_, 'a>, vars: &HashMap<String, SpaceVar>, params: Option<&[&str]>) -> FnSpaces {
    let mut f = FnSpaces::default();
    for &&ParsedStmt { text: s, ref instr, .. } in stmts {
        if s.starts_with('.') {
            // The frame is the one declaration wanted here (most directives are `.loc`).
            if let Some((name, v)) = s.starts_with(".local").then(|| parse_declaration(s)).flatten() {
                if v.space == MemorySpace::Local && name.starts_with("__local_depot") {
                    f.depot = v.size.map(|size| (name, size));
                }
            }
            continue;
        }
        let Some(ins) = instr else { continue };
        if matches!(ins.opcode.op, Op::Alloca | Op::StackRestore) {
            f.dynamic_stack = true;
        }
        f.calls |= ins.opcode.op == Op::Call;
    }
    // Definitions: (register, defining instruction), from the body's one index (a call's result
    // is one, of unknown provenance: [`evaluate`] knows no `call`).
    let defs: Vec<(&'a str, &Instr<'a>)> = index.defs().iter().map(|d| (index.reg_name(d.reg_id), index.writer(d).instr)).collect();
    // Constants: registers every definition of which moves the same immediate, unguarded.
    // (This map and `readers` below are sized for the registers the body defines: grown from
    // empty, they were rehashed a dozen times in a large body. Their order reaches nothing
    // written: `FnSpaces::consts` is only looked up.)
    let mut consts: FxHashMap<&str, Option<i64>> = FxHashMap::with_capacity_and_hasher(index.reg_count(), Default::default());
    for &(d, ins) in &defs {
        let value = (ins.guard.is_none() && ins.opcode.op == Op::Mov && ins.opcode.first_qual().is_some() && ins.operands.len() == 2).then(|| parse_int(ins.operands[1].trim())).flatten();
        let entry = consts.entry(d).or_insert(value);
        if *entry != value {
            *entry = None;
        }
    }
    f.consts = consts.into_iter().filter_map(|(r, v)| Some((r.to_string(), v?))).collect();
    // Registers that may hold a variable's address: defined from a variable's name or from such a
    // register, transitively. Only their definitions enter the fixed point below (most of a
    // function's registers never touch a variable); every other register is unknown to it. Found
    // by a walk from the definitions naming a variable along "register read by definition".
    // (Each register's readers are a list threaded through one vector, `reads`: (definition,
    // the register's next read), from the register's last read in `readers`. A vector a
    // register, allocated at its first read, was a fifth of this analysis. Only which registers
    // the walk reaches is kept, not the order it reaches them in.)
    const NO_READ: usize = usize::MAX;
    let mut readers: FxHashMap<&str, usize> = FxHashMap::with_capacity_and_hasher(index.reg_count(), Default::default());
    let mut reads: Vec<(usize, usize)> = Vec::with_capacity(defs.len());
    let mut work: Vec<usize> = Vec::new();
    for (k, &(_, ins)) in defs.iter().enumerate() {
        for op in ins.operands.iter().skip(1) {
            // (Immediates, starting with a digit, name nothing.)
            for t in op.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.'))).filter(|t| !t.is_empty() && !t.starts_with(|c: char| c.is_ascii_digit())) {
                if vars.contains_key(t) {
                    work.push(k);
                } else {
                    let last = readers.entry(t).or_insert(NO_READ);
                    reads.push((k, *last));
                    *last = reads.len() - 1;
                }
            }
        }
    }
    // (`.param`s declared in the body are a call's arguments and results, `callseq` blocks.)
    let own_param = |ins: &Instr<'_>| params.is_some_and(|own| param_load(ins).is_some_and(|p| own.contains(&p)));
    if params.is_some() {
        work.extend(defs.iter().enumerate().filter(|(_, &(_, ins))| own_param(ins)).map(|(k, _)| k));
    }
    let mut tainted: FxHashSet<&str> = FxHashSet::default();
    while let Some(k) = work.pop() {
        let d = defs[k].0;
        if tainted.insert(d) {
            let mut at = readers.get(d).copied().unwrap_or(NO_READ);
            while at != NO_READ {
                let (reader, next) = reads[at];
                work.push(reader);
                at = next;
            }
        }
    }
    let defs: Vec<(&str, &Instr<'_>)> = defs.into_iter().filter(|(d, _)| tainted.contains(d)).collect();
    // The provenances each register may hold, grown to a fixed point by a worklist over the one
    // index of their definitions: a definition is evaluated again only when a register it reads
    // gains a value. Values only grow ([`MayProv::join`]) in a lattice of height four, so each
    // register changes at most four times and the worklist empties by construction, however long
    // the chains of definitions are (rounds of the whole function, bounded, gave up on large CUB
    // and Thrust kernels and kept no provenance at all).
    let mut readers_of: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    for (k, (_, ins)) in defs.iter().enumerate() {
        for op in ins.operands.iter().skip(1) {
            let op = op.trim();
            if tainted.contains(op) {
                let r = readers_of.entry(op).or_default();
                if r.last() != Some(&k) {
                    r.push(k);
                }
            }
        }
    }
    let mut vals: FxHashMap<&str, MayProv> = FxHashMap::default();
    let mut work: Vec<usize> = (0..defs.len()).rev().collect();
    let mut queued = vec![true; defs.len()];
    while let Some(k) = work.pop() {
        queued[k] = false;
        let (d, ins) = defs[k];
        let got = if own_param(ins) { MayProv::of(Prov::Param { generic: true }) } else { evaluate_may(ins, &vals, &tainted, vars) };
        let now = vals.entry(d).or_default();
        let joined = now.join(&got);
        if joined != *now {
            *now = joined;
            for &r in readers_of.get(d).into_iter().flatten() {
                if !queued[r] {
                    queued[r] = true;
                    work.push(r);
                }
            }
        }
    }
    f.regs = vals.into_iter().filter_map(|(r, v)| Some((r.to_string(), v.exact()?))).collect();
    f
}

/// The provenances a register may hold: one pointer ([`Prov::Var`] or [`Prov::Param`]) and/or
/// other values ([`Prov::Unknown`]: anything not known to point into a variable), or `many`
/// (two pointers or more: nothing can be said, and what is computed from it is unknown too).
/// Empty: no definition has given it a value yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MayProv {
    pointer: Option<Prov>,
    other: bool,
    many: bool,
}

impl MayProv {
    fn of(p: Prov) -> Self {
        match p {
            Prov::Unknown => MayProv { other: true, ..Default::default() },
            p => MayProv { pointer: Some(p), ..Default::default() },
        }
    }

    fn join(&self, o: &MayProv) -> MayProv {
        let many = self.many || o.many || matches!((&self.pointer, &o.pointer), (Some(a), Some(b)) if a != b);
        if many {
            return MayProv { pointer: None, other: false, many: true };
        }
        MayProv { pointer: self.pointer.clone().or_else(|| o.pointer.clone()), other: self.other || o.other, many: false }
    }

    /// The one provenance it holds on every path, if it is a pointer.
    fn exact(self) -> Option<Prov> {
        if self.other || self.many {
            return None;
        }
        self.pointer
    }

    /// The values [`evaluate`] is asked with: each pointer or other value it may hold (`many` is
    /// asked as an unknown value, the result then marked `many` as well); none when empty.
    fn choices(&self) -> Vec<Prov> {
        if self.many {
            return vec![Prov::Unknown];
        }
        self.pointer.iter().cloned().chain(self.other.then_some(Prov::Unknown)).collect()
    }
}

/// What one definition may give its destination: [`evaluate`] of every combination of the values
/// its tainted register operands may hold (an operand with no value yet is asked as `None`, as
/// [`evaluate`] allows), joined. `selp` may give either operand.
fn evaluate_may(ins: &Instr<'_>, vals: &FxHashMap<&str, MayProv>, tainted: &FxHashSet<&str>, vars: &HashMap<String, SpaceVar>) -> MayProv {
    let value_of = |op: &str| -> Option<MayProv> {
        let op = op.trim();
        if vars.contains_key(op) {
            return Some(MayProv::of(Prov::Var { var: op.to_string(), generic: false }));
        }
        if tainted.contains(op) {
            return vals.get(op).filter(|v| **v != MayProv::default()).cloned();
        }
        Some(MayProv::of(Prov::Unknown))
    };
    if ins.opcode.op == Op::Selp && ins.operands.len() == 4 {
        return [value_of(ins.operands[1]), value_of(ins.operands[2])].into_iter().flatten().fold(MayProv::default(), |a, b| a.join(&b));
    }
    // The distinct tainted registers read, each with its choices.
    let mut regs: Vec<(&str, Vec<Prov>)> = Vec::new();
    let mut many = false;
    for op in ins.operands.iter().skip(1) {
        let op = op.trim();
        if tainted.contains(op) && !regs.iter().any(|(r, _)| *r == op) {
            let v = vals.get(op).cloned().unwrap_or_default();
            many |= v.many;
            regs.push((op, v.choices()));
        }
    }
    let mut out = MayProv { many, ..Default::default() };
    let mut pick = vec![0usize; regs.len()];
    loop {
        let lookup = |op: &str| -> Option<Prov> {
            let op = op.trim();
            if vars.contains_key(op) {
                return Some(Prov::Var { var: op.to_string(), generic: false });
            }
            match regs.iter().position(|(r, _)| *r == op) {
                Some(j) => regs[j].1.get(pick[j]).cloned(),
                None => Some(Prov::Unknown),
            }
        };
        if let Some(p) = evaluate(ins, &lookup, vars) {
            out = out.join(&MayProv::of(p));
        }
        // The next combination (an operand with no value has one: `None`).
        let Some(j) = (0..regs.len()).find(|&j| pick[j] + 1 < regs[j].1.len()) else { break };
        pick[j] += 1;
        pick[..j].iter_mut().for_each(|p| *p = 0);
    }
    out
}

/// The parameter an `ld.param` reads (`[name]`, `[name+8]`).
fn param_load<'a>(ins: &Instr<'a>) -> Option<&'a str> {
    if ins.opcode.op != Op::Ld || ins.opcode.first_qual() != Some("param") || ins.operands.len() != 2 {
        return None;
    }
    let inner = ins.operands[1].trim().strip_prefix('[')?.strip_suffix(']')?;
    Some(inner.split('+').next()?.trim())
}

/// The provenance one definition gives its destination (`None`: depends on registers with no
/// information yet).
fn evaluate(ins: &Instr<'_>, lookup: &dyn Fn(&str) -> Option<Prov>, vars: &HashMap<String, SpaceVar>) -> Option<Prov> {
    let ops = &ins.operands;
    let quals: Operands<'_> = ins.opcode.parts().collect();
    // No information yet is passed on as such (the fixed point decides later).
    let is_var = |p: &Option<Prov>| matches!(p, Some(Prov::Var { .. }));
    let is_param = |p: &Option<Prov>| matches!(p, Some(Prov::Param { .. }));
    let pointer_plus = |ptr: Option<Prov>, others: &[Option<Prov>]| -> Option<Prov> {
        if others.iter().any(is_var) {
            return Some(Prov::Unknown); // two pointers combined: not an address into one of them
        }
        ptr
    };
    const UNKNOWN: Option<Prov> = Some(Prov::Unknown);
    // A predicated definition keeps the register's old value on some paths, which the meet over
    // all definitions covers: no special case.
    match (ins.opcode.op, ops.len()) {
        (Op::Mov, 2) if !ops[1].starts_with('{') => lookup(ops[1]),
        (Op::Cvt, 2) if quals.len() == 3 && quals.iter().all(|q| matches!(*q, "cvt" | "u32" | "u64" | "s32" | "s64" | "b32" | "b64")) => {
            // Widening or narrowing a window address keeps it (window addresses fit in 32 bits).
            match lookup(ops[1]) {
                Some(Prov::Var { var, generic: false }) => Some(Prov::Var { var, generic: false }),
                Some(Prov::Param { generic: false }) => Some(Prov::Param { generic: false }),
                None => None,
                _ => UNKNOWN,
            }
        }
        (Op::Cvta, 2) => {
            let to = quals.get(1) == Some(&"to");
            let space = quals.get(if to { 2 } else { 1 }).copied().unwrap_or("");
            match lookup(ops[1]) {
                Some(Prov::Var { var, generic }) if generic == to => {
                    let want = if space.starts_with("shared") {
                        MemorySpace::Shared
                    } else if space == "local" {
                        MemorySpace::Local
                    } else {
                        return UNKNOWN;
                    };
                    if vars.get(&var).map(|v| v.space) == Some(want) && space != "shared::cluster" {
                        Some(Prov::Var { var, generic: !to })
                    } else {
                        UNKNOWN
                    }
                }
                // A parameter in and out of the local window (nvcc's `cvta.to.local` of a pointer
                // argument it knows is local).
                Some(Prov::Param { generic }) if generic == to && space == "local" => Some(Prov::Param { generic: !to }),
                None => None,
                _ => UNKNOWN,
            }
        }
        (Op::Add, 3) => {
            let (a, b) = (lookup(ops[1]), lookup(ops[2]));
            match (is_var(&a), is_var(&b)) {
                (true, true) => UNKNOWN,
                (true, false) => pointer_plus(a, &[b]),
                (false, true) => pointer_plus(b, &[a]),
                // Neither a pointer yet: unknown once both are known not to be.
                _ if a.is_none() || b.is_none() => None,
                // A parameter plus anything but a variable's address: an index into what the
                // caller passed.
                _ if is_param(&a) || is_param(&b) => Some(Prov::Param { generic: [a, b].iter().any(|p| matches!(p, Some(Prov::Param { generic: true }))) }),
                _ => UNKNOWN,
            }
        }
        (Op::Sub, 3) => {
            let (a, b) = (lookup(ops[1]), lookup(ops[2]));
            if is_var(&a) {
                pointer_plus(a, &[b])
            } else if a.is_none() || (is_param(&a) && b.is_none()) {
                None
            } else if is_param(&a) {
                a
            } else {
                UNKNOWN
            }
        }
        (Op::Mad, 4) if quals.get(1) == Some(&"lo") => {
            let (a, b, c) = (lookup(ops[1]), lookup(ops[2]), lookup(ops[3]));
            if is_var(&c) {
                pointer_plus(c, &[a, b])
            } else if c.is_none() || (is_param(&c) && (a.is_none() || b.is_none())) {
                None
            } else if is_param(&c) {
                c
            } else {
                UNKNOWN
            }
        }
        (Op::Selp, 4) => match (lookup(ops[1]), lookup(ops[2])) {
            (Some(a), Some(b)) => Some(if a == b { a } else { Prov::Unknown }),
            (a, b) => a.or(b),
        },
        _ => UNKNOWN,
    }
}

/// Where a shared/local access's address is and what it touches.
pub(super) struct SpaceAccess {
    pub addr_idx: usize,
    pub kind: AccessKind,
    pub width: u32,
    /// The state space the opcode names (`None`: generic).
    pub space: Option<MemorySpace>,
    /// The lanes of the warp that supply an address (`ldmatrix`/`stmatrix` `.x1`/`.x2` read the
    /// addresses of lanes 0-7 / 0-15 only; the others' may be anything).
    pub lanes: u32,
    /// A 32-bit register holding the width in bytes, instead of `width` (a bulk copy's size).
    pub width_reg: Option<String>,
}

impl SpaceAccess {
    /// The state space (shared or local) the instruction names for its memory access, when it
    /// makes one this module checks: what `gasan-ptx stats` counts as shared/local accesses,
    /// checked or not.
    pub(super) fn named_space(&self) -> Option<MemorySpace> {
        self.space.filter(|s| matches!(s, MemorySpace::Shared | MemorySpace::Local))
    }
}

/// Whether the instruction may make an access [`SpaceAccess::named_space`] finds: its opcode names
/// `.shared` or `.local` (the decoder's shared and local spaces, a copy's shared operands
/// included, come only from an opcode part `shared`, `shared::cta`, `shared::cluster` or
/// `local`). A filter before decoding where only those accesses are counted: most accesses are
/// global, and decoding one costs some 500 instructions.
pub(super) fn may_name_space(ins: &Instr<'_>) -> bool {
    contains_dotted(ins.opcode.text, &[".shared", ".local"])
}

/// [`space_access`] in function `f` (its registers that hold one constant).
pub(super) fn access_in(ins: &Instr<'_>, f: &FnSpaces) -> Option<SpaceAccess> {
    space_access(ins, &|r: &str| f.consts.get(r).copied())
}

/// The shared/local (or generic) access of an instruction, as the one decoder
/// ([`access::decode`]) gives it: the shared operand of a `cp.async` copy (reductions are not
/// looked at), the access of the others. `constant` gives a register's value when every
/// definition of it moves one immediate (a `wmma` tile's stride).
pub(super) fn space_access(ins: &Instr<'_>, constant: &dyn Fn(&str) -> Option<i64>) -> Option<SpaceAccess> {
    let parts: Operands<'_> = ins.opcode.parts().collect();
    let decoded = access::decode(ins, &parts);
    let copy = ins.opcode.op == Op::Cp;
    let a = if copy {
        if parts.get(1) != Some(&"async") {
            return None;
        }
        // The CTA's own shared operand first (a bulk copy between two CTAs' memory reads its own
        // and writes a peer's; a shared::cluster destination is this CTA's memory when its
        // address is traced to one of its variables).
        let operand = |space: Space| decoded.iter().flatten().find(|a| a.space == space);
        operand(Space::Shared).or_else(|| operand(Space::SharedCluster))?
    } else {
        decoded[0].as_ref()?
    };
    let space = match a.space {
        _ if copy => Some(MemorySpace::Shared),
        Space::Shared => Some(MemorySpace::Shared),
        Space::Local => Some(MemorySpace::Local),
        Space::Generic | Space::Malformed { other_named: false } => None,
        _ => return None,
    };
    let (width, width_reg) = match a.extent.as_ref()? {
        Extent::Bytes(w) | Extent::Copy(Width::Fixed(w)) => (*w, None),
        Extent::Copy(Width::Reg(r)) => (0, Some(r.clone())),
        Extent::Copy(Width::Tile { .. }) => return None,
        Extent::Tile { tile, stride } => {
            let stride = match stride {
                Some(s) => Some(parse_int(s).or_else(|| constant(s))?),
                None => None,
            };
            (tile.bytes(stride)?, None)
        }
    };
    Some(SpaceAccess { addr_idx: a.addr_idx, kind: a.kind, width, space, lanes: a.lanes, width_reg })
}

/// The check an access gets here, if any. `reg_bits` gives a register's declared width.
pub(super) fn plan(ins: &Instr<'_>, m: &ModuleSpaces, f: &FnSpaces, reg_bits: &dyn Fn(&str) -> Option<u32>) -> Option<SpaceCheck> {
    plan_access(access_in(ins, f)?, ins, m, f, reg_bits)
}

/// [`plan`] of an access already decoded ([`access_in`]).
pub(super) fn plan_access(sa: SpaceAccess, ins: &Instr<'_>, m: &ModuleSpaces, f: &FnSpaces, reg_bits: &dyn Fn(&str) -> Option<u32>) -> Option<SpaceCheck> {
    let SpaceAccess { addr_idx, kind, width, space, lanes, width_reg } = sa;
    let op = ins.operands.get(addr_idx)?;
    let traced = |var: &str, base: Base, offset: i64| -> Option<SpaceCheck> {
        let v = m.vars.get(var)?;
        // (A register width against dynamic shared memory's launch size is not modelled.)
        if width_reg.is_some() && v.size.is_none() {
            return None;
        }
        Some(SpaceCheck { space: v.space, var: var.to_string(), size: v.size, base, offset, width, kind, lanes, width_reg: width_reg.clone() })
    };
    match parse_address(op)? {
        Err(()) => {
            // `[var]`, `[var+off]`: the variable's own state space only.
            let inner = op.trim().trim_start_matches('[').trim_end_matches(']');
            let (name, off) = match inner.split_once('+') {
                Some((n, o)) => (n.trim(), parse_int(o)?),
                None => (inner.trim(), 0),
            };
            let v = m.vars.get(name)?;
            (Some(v.space) == space).then_some(())?;
            traced(name, Base::Symbol, off)
        }
        Ok((AddrBase::Imm(_), _)) => None,
        Ok((AddrBase::Reg(r), offset)) => {
            // An untraced address a frame check can take: a 64-bit register, in the local window
            // (`false`) or generic (`true`).
            let untraced_local = || -> Option<bool> {
                let generic = match space {
                    Some(MemorySpace::Local) => false,
                    None => true,
                    _ => return None,
                };
                (reg_bits(&r) == Some(64)).then_some(generic)
            };
            match f.regs.get(&r) {
                Some(Prov::Var { var, generic }) => {
                    let v = m.vars.get(var)?;
                    match (space, generic) {
                        (Some(s), false) if s == v.space => traced(var, Base::Window(r.clone(), reg_bits(&r)?), offset),
                        (None, true) => traced(var, Base::Generic(r.clone()), offset),
                        _ => None,
                    }
                }
                _ if f.entry && !f.dynamic_stack => {
                    let generic = untraced_local()?;
                    match &f.depot {
                        Some((depot, size)) => Some(SpaceCheck {
                            space: MemorySpace::LocalOutOfScope,
                            var: depot.clone(),
                            size: Some(*size),
                            base: Base::OutsideFrame(r, generic),
                            offset,
                            width,
                            kind,
                            lanes,
                            width_reg: None,
                        }),
                        // A kernel without a frame (nvcc removed its arrays) has no live local
                        // memory: every local address it uses lies in a returned callee's frame,
                        // unless the module declares named local variables (not frames) it may
                        // have reached untraced. (Size 0: every access is past it. A kernel that
                        // calls nothing has no local address to use.)
                        None if f.calls && !m.vars.iter().any(|(name, v)| v.space == MemorySpace::Local && !name.starts_with("__local_depot")) => Some(SpaceCheck {
                            space: MemorySpace::LocalDeadFrame,
                            var: NO_FRAME.to_string(),
                            size: Some(0),
                            base: Base::NoFrame(r, generic),
                            offset,
                            width,
                            kind,
                            lanes,
                            width_reg: None,
                        }),
                        None => None,
                    }
                }
                // A called function: nothing it did not compute from its own frame may lie at or past
                // its callers' top, outside its own frame; nothing computed from its parameters may
                // lie at or past that top at all (its frame is newer than any pointer its caller
                // made).
                _ if f.top_param && !f.dynamic_stack => {
                    let generic = untraced_local()?;
                    let from_param = matches!(f.regs.get(&r), Some(Prov::Param { .. }));
                    let (var, size) = match (&f.depot, from_param) {
                        (Some((depot, size)), false) => (depot.clone(), Some(*size)),
                        // (Named after the parameter it is checked against: sites name a variable.)
                        _ => (super::frames::TOP_PARAM.to_string(), None),
                    };
                    let space = if from_param { MemorySpace::LocalPastTop } else { MemorySpace::LocalDeadFrame };
                    Some(SpaceCheck { space, var, size, base: Base::PastTop(r, generic), offset, width, kind, lanes, width_reg: None })
                }
                _ => None,
            }
        }
    }
}

/// The variable a frameless kernel's local check names (sites name a variable): no symbol of
/// the module, the frames of the callees it called.
pub const NO_FRAME: &str = "__gasan_returned_frames";

/// The per-function block that reports a failed shared/local check (halt mode,
/// [`super::emit::ReportBlock::Space`]): `LAST_ADDR` holds the offset from the variable, `LAST_SITE`
/// the packed site. Shadow byte 0.
pub(super) const SPACE_FAIL: &str = "$gasan_fail_space";

/// The width of the offset [`offset_lines`] computes.
fn offset_bits(c: &SpaceCheck) -> u32 {
    match &c.base {
        Base::Window(_, bits) => *bits,
        Base::Generic(_) | Base::OutsideFrame(..) | Base::NoFrame(..) => 64,
        // Local-window addresses are 32 bits (ld.local uses no more), so the offset from the top
        // is taken in 32 bits when the immediates fit (64-bit arithmetic cost ptxas 2 more
        // instructions and registers a check).
        Base::PastTop(..) if past_top_fits_32(c) => 32,
        Base::PastTop(..) => 64,
        Base::Symbol => 32,
    }
}

/// Whether a [`Base::PastTop`] check's offset, width and frame size fit 32-bit arithmetic.
fn past_top_fits_32(c: &SpaceCheck) -> bool {
    const LIMIT: u64 = 1 << 30;
    c.offset.unsigned_abs() < LIMIT && u64::from(c.width) < LIMIT && c.size.is_none_or(|s| s < LIMIT)
}

/// The statements leaving, in `%gso0` ([`offset_bits`] wide), the access's offset from the
/// variable's start (frame checks: from the frame's start).
fn offset_lines(v: &mut Lines<'_>, c: &SpaceCheck) {
    let bits = offset_bits(c);
    match &c.base {
        Base::Window(r, _) => {
            ln!(v; "mov.u", bits, " %gso1, ", c.var, ";");
            ln!(v; "sub.s", bits, " %gso0, ", r, ", %gso1;");
        }
        Base::Generic(r) => {
            let space = if c.space == MemorySpace::Shared { "shared" } else { "local" };
            ln!(v; "cvta.to.", space, ".u64 %gso0, ", r, ";");
            ln!(v; "mov.u64 %gso1, ", c.var, ";");
            v.text("sub.s64 %gso0, %gso0, %gso1;");
        }
        Base::Symbol => {
            ln!(v; "mov.u32 %gso0, ", c.offset as i32, ";");
            return;
        }
        Base::OutsideFrame(r, generic) => {
            if *generic {
                ln!(v; "cvta.to.local.u64 %gso0, ", r, ";");
            } else {
                ln!(v; "mov.b64 %gso0, ", r, ";");
            }
            ln!(v; "mov.u64 %gso1, ", c.var, ";");
            v.text("sub.s64 %gso0, %gso0, %gso1;");
        }
        Base::NoFrame(r, generic) => {
            // The offset reported is the window address itself.
            if *generic {
                ln!(v; "cvta.to.local.u64 %gso0, ", r, ";");
            } else {
                ln!(v; "mov.b64 %gso0, ", r, ";");
            }
        }
        Base::PastTop(r, generic) if bits == 32 => {
            // The low halves of the window address and of the top (`%gsot`: 64-bit scratch).
            v.text(".reg .b64 %gsot;");
            if *generic {
                ln!(v; "cvta.to.local.u64 %gsot, ", r, ";");
                v.text("cvt.u32.u64 %gso0, %gsot;");
            } else {
                ln!(v; "cvt.u32.u64 %gso0, ", r, ";");
            }
            load_top(v, bits);
            v.text("sub.s32 %gso0, %gso0, %gso1;");
        }
        Base::PastTop(r, generic) => {
            if *generic {
                ln!(v; "cvta.to.local.u64 %gso0, ", r, ";");
            } else {
                ln!(v; "mov.b64 %gso0, ", r, ";");
            }
            load_top(v, bits);
            v.text("sub.s64 %gso0, %gso0, %gso1;");
        }
    }
    if c.offset != 0 {
        ln!(v; "add.s", bits, " %gso0, %gso0, ", c.offset, ";");
    }
}

/// The declarations, offset computation and test of one check, leaving `%gsq0` = bad and
/// `%gso0` = the offset (`bits` wide, returned), inside a scope the caller opens and closes.
pub(super) fn check_body(v: &mut Lines<'_>, c: &SpaceCheck, guard: Option<&str>) -> u32 {
    let bits = offset_bits(c);
    ln!(v; ".reg .b", bits, " %gso<3>;");
    v.texts(&[".reg .b32 %gsw<2>;", ".reg .pred %gsq<3>;"]);
    if let Base::OutsideFrame(r, true) | Base::NoFrame(r, true) | Base::PastTop(r, true) = &c.base {
        // Only generic addresses in the local window are frame addresses.
        ln!(v; "isspacep.local %gsq1, ", r, ";");
    }
    offset_lines(v, c);
    if let Base::PastTop(..) = &c.base {
        past_top_test(v, c, bits);
    } else {
        bounds_test(v, c, bits);
    }
    if let Base::OutsideFrame(_, true) | Base::NoFrame(_, true) | Base::PastTop(_, true) = &c.base {
        // Generic addresses outside the local window are not the frame's business.
        v.text("and.pred %gsq0, %gsq0, %gsq1;");
    }
    if c.lanes < 32 {
        // Lanes whose address the instruction ignores are not checked.
        v.text("mov.u32 %gsw1, %laneid;");
        ln!(v; "setp.lt.u32 %gsq2, %gsw1, ", c.lanes, ";");
        v.text("and.pred %gsq0, %gsq0, %gsq2;");
    }
    if let Some(g) = guard {
        match g.strip_prefix('!') {
            Some(p) => {
                ln!(v; "not.pred %gsq2, ", p, ";");
                v.text("and.pred %gsq0, %gsq0, %gsq2;");
            }
            None => ln!(v; "and.pred %gsq0, %gsq0, ", g, ";"),
        }
    }
    bits
}

/// `%gso1` = the callers' top ([`super::frames::TOP_PARAM`]), `bits` wide: its low half in 32 bits
/// (through the 64-bit scratch `%gsot` the 32-bit offset computation declares).
fn load_top(v: &mut Lines<'_>, bits: u32) {
    if bits == 32 {
        ln!(v; "ld.param.u64 %gsot, [", super::frames::TOP_PARAM, "];");
        v.text("cvt.u32.u64 %gso1, %gsot;");
    } else {
        ln!(v; "ld.param.u64 %gso1, [", super::frames::TOP_PARAM, "];");
    }
}

/// `%gsq0` = the access of [`Base::PastTop`] check `c`, its offset from the top in `%gso0`, is bad.
fn past_top_test(v: &mut Lines<'_>, c: &SpaceCheck, bits: u32) {
    // Bad when the access's last byte is at or past the top (signed: the callers' frames lie
    // below it)...
    ln!(v; "setp.ge.s", bits, " %gsq0, %gso0, ", 1 - i64::from(c.width), ";");
    // ...and, when the function's own frame is allowed, it is not wholly inside that frame.
    // (The top is loaded again although `%gso1` still holds it: ptxas folds the load, and this
    // is the text measured on the H100.)
    if let Some(limit) = c.size.and_then(|size| size.checked_sub(u64::from(c.width))) {
        load_top(v, bits);
        ln!(v; "add.s", bits, " %gso1, %gso0, %gso1;");
        ln!(v; "mov.u", bits, " %gso2, ", c.var, ";");
        ln!(v; "sub.s", bits, " %gso1, %gso1, %gso2;");
        ln!(v; "setp.gt.u", bits, " %gsq2, %gso1, ", limit, ";");
        v.text("and.pred %gsq0, %gsq0, %gsq2;");
    }
}

/// `%gsq0` = the offset in `%gso0` (`bits` wide) puts the access outside its variable (or frame).
fn bounds_test(v: &mut Lines<'_>, c: &SpaceCheck, bits: u32) {
    match (c.size, &c.width_reg) {
        (Some(size), Some(w)) => {
            // Bad when offset > size or offset + width > size.
            if bits == 64 {
                ln!(v; "cvt.u64.u32 %gso2, ", w, ";");
            } else {
                ln!(v; "mov.u32 %gso2, ", w, ";");
            }
            ln!(v; "add.s", bits, " %gso1, %gso0, %gso2;");
            ln!(v; "setp.gt.u", bits, " %gsq0, %gso0, ", size, ";");
            ln!(v; "setp.gt.u", bits, " %gsq2, %gso1, ", size, ";");
            v.text("or.pred %gsq0, %gsq0, %gsq2;");
        }
        (Some(size), None) => match size.checked_sub(u64::from(c.width)) {
            // Unsigned: an offset below the start wraps to a huge value.
            Some(limit) => ln!(v; "setp.gt.u", bits, " %gsq0, %gso0, ", limit, ";"),
            None => ln!(v; "setp.eq.u", bits, " %gsq0, %gso0, %gso0;"),
        },
        (None, _) => {
            // Dynamic shared memory: bad when offset > size or offset + width > size (plan gives
            // no register width here).
            v.text("mov.u32 %gsw0, %dynamic_smem_size;");
            if bits == 64 {
                v.text("cvt.u64.u32 %gso2, %gsw0;");
            } else {
                v.text("mov.u32 %gso2, %gsw0;");
            }
            ln!(v; "setp.gt.u", bits, " %gsq0, %gso0, %gso2;");
            ln!(v; "add.s", bits, " %gso1, %gso0, ", c.width, ";");
            ln!(v; "setp.gt.u", bits, " %gsq2, %gso1, %gso2;");
            v.text("or.pred %gsq0, %gsq0, %gsq2;");
        }
    }
}

/// [`check_body`]'s lines, unindented and unmarked (tests read them).
#[cfg(test)]
pub(super) fn check_body_lines(c: &SpaceCheck, guard: Option<&str>) -> Vec<String> {
    let mut s = String::new();
    check_body(&mut Lines::unmarked(&mut s, ""), c, guard);
    s.lines().map(String::from).collect()
}

/// `dst` = the offset in `%gso0` as 64 bits (sign-extended); `prefix` goes before the statement
/// (a predicate, or nothing).
fn offset_to_b64(v: &mut Lines<'_>, prefix: &str, bits: u32, dst: &str) {
    if bits == 64 {
        ln!(v; prefix, "mov.b64 ", dst, ", %gso0;");
    } else {
        ln!(v; prefix, "cvt.s64.s32 ", dst, ", %gso0;");
    }
}

/// `LAST_SITE`'s value for a failing access (see emit.rs).
fn packed_site(c: &SpaceCheck, site: u32) -> u64 {
    u64::from(site) | (u64::from(c.width) << 32) | (u64::from(c.kind as u8) << 56)
}

/// The inline check of one access (before the statement) and, in halt mode, its out-of-line stub.
/// `label` is unique in the module.
pub(super) fn emit_check(c: &SpaceCheck, guard: Option<&str>, indent: &str, site: u32, label: u32, recover: bool) -> (String, String) {
    use super::lines::{LAST_ADDR, LAST_SITE};
    let (mut inline, mut stub) = (String::with_capacity(1024), String::new());
    let mut v = Lines::new(&mut inline, indent);
    v.text("{");
    let bits = check_body(&mut v, c, guard);
    if recover {
        // The slow path records the error (the access proceeds: shared/local windows are mapped
        // per CTA/thread, so a recovered run may read or clobber a neighbour, never fault).
        v.text(".reg .b64 %gsl;");
        offset_to_b64(&mut v, "", bits, "%gsl");
        let width: &dyn Piece = match &c.width_reg {
            Some(w) => w,
            None => &c.width,
        };
        ln!(v; "@%gsq0 call (%gsw1), ", SLOW_PATH_SYMBOL, ", (%gsl, ", width, ", ", c.kind as u8, ", ", site, ", 0);");
    } else {
        ln!(v; "@%gsq0 bra $gasan_sfail_", label, ";");
        // Out of line: recompute the offset from the unchanged operands, name the site.
        let mut s = Lines::new(&mut stub, indent);
        ln!(s; "$gasan_sfail_", label, ":");
        s.text("{");
        ln!(s; ".reg .b", bits, " %gso<3>;");
        offset_lines(&mut s, c);
        offset_to_b64(&mut s, "", bits, LAST_ADDR);
        match &c.width_reg {
            // The width the register held, in the packed site's width field.
            Some(w) => {
                s.text(".reg .b64 %gsz;");
                ln!(s; "cvt.u64.u32 %gsz, ", w, ";");
                s.text("shl.b64 %gsz, %gsz, 32;");
                ln!(s; "or.b64 ", LAST_SITE, ", %gsz, ", packed_site(c, site), ";");
            }
            None => ln!(s; "mov.b64 ", LAST_SITE, ", ", packed_site(c, site), ";"),
        }
        s.text("}");
        ln!(s; "bra.uni ", SPACE_FAIL, ";");
    }
    v.text("}");
    (inline, stub)
}

/// One access of a basic block's range check.
#[derive(Clone, Debug)]
pub(super) struct Member {
    /// Its statement: (index of its line in the rewriter's lines, index in the line).
    pub key: (usize, usize),
    pub loc: Option<super::Loc>,
    pub check: SpaceCheck,
}

/// The range of the variable a group's check covers: [lowest offset, highest end) of its members.
pub(super) fn merged_range(members: &[Member]) -> (i64, i64) {
    let lo = members.iter().map(|mb| mb.check.offset).min().expect("a group has members");
    let hi = members.iter().map(|mb| mb.check.offset + i64::from(mb.check.width)).max().expect("a group has members");
    (lo, hi)
}

/// An access's part in its basic block's range check (halt mode with optimization): accesses of
/// one basic block through the same unguarded base register, not redefined in between, are
/// checked together at the first one, as one range [lowest offset, highest end) — nvcc's
/// unrolled tile loops read a tile through one register at many immediate offsets. A called
/// function's accesses through a pointer it was passed ([`MemorySpace::LocalPastTop`]) group the
/// same way: the range's check is its highest end's (a callee reading its caller's array).
#[derive(Clone, Debug)]
pub(super) enum Role {
    /// The first access: checks the group's range (all members, itself first).
    Leader(Vec<Member>),
    /// Checked by its group's leader.
    Covered,
    /// Proven by checks made earlier on every path to it ([`available_checks`]): no check, and a
    /// leader's members with it.
    Available,
    /// In a loop's fast copy, proven by the loop's range test (loops.rs, `SharedTest`): no
    /// check, and none made for later accesses either.
    RangeTested,
}

/// Largest offset from its root register an access is grouped at ([`Sums::rebased`]).
const MAX_SUM_OFFSET: i64 = 1 << 24;

/// Registers that hold another register plus a constant, from an unguarded `add` of an integer
/// (`%r46 = %r44 + 2048`: Triton's pipelined loads write each stage's shared destination so),
/// known along a straight line of code: forgotten at a label or any statement that ends the
/// groups (a branch, a barrier), and when either register is written. A check of an access
/// through such a register is grouped as one through the root register at the constant's offset,
/// so that a tile's copies into one shared buffer share one range check.
#[derive(Default)]
struct Sums<'a> {
    /// register -> (root register, constant, bits of the addition)
    of: FxHashMap<&'a str, (&'a str, i64, u32)>,
}

impl<'a> Sums<'a> {
    fn forget_all(&mut self) {
        self.of.clear();
    }

    /// `reg` is written: what it held and what was computed from it are forgotten.
    fn written(&mut self, reg: &str) {
        self.of.remove(reg);
        self.of.retain(|_, (root, _, _)| *root != reg);
    }

    /// Records a statement after the checks before it were planned: its writes, and the sum it
    /// makes when it is an unguarded `add` of a register and an integer.
    fn record(&mut self, ins: Option<&Instr<'a>>, dests: impl Iterator<Item = &'a str>) {
        let sum = ins.and_then(constant_add).and_then(|(dst, base, add, bits)| {
            let (root, k) = match self.of.get(base) {
                Some(&(root, k, b)) if b == bits => (root, k.checked_add(add)?),
                Some(_) => return None,
                None => (base, add),
            };
            // A 32-bit sum wraps: `0xFFFFFFF0` adds -16.
            let k = if bits == 32 { i64::from(k as i32) } else { k };
            Some((dst, root, k, bits))
        });
        for d in dests {
            self.written(d);
        }
        if let Some((dst, root, k, bits)) = sum.filter(|&(dst, root, _, _)| dst != root) {
            self.of.insert(dst, (root, k, bits));
        }
    }

    /// The check through its root register, when its address register holds a known sum of the
    /// same width.
    fn rebased(&self, c: &SpaceCheck) -> Option<SpaceCheck> {
        let (reg, bits) = match &c.base {
            Base::Window(r, bits) => (r, *bits),
            Base::Generic(r) => (r, 64),
            _ => return None,
        };
        let &(root, k, b) = self.of.get(reg.as_str()).filter(|&&(_, _, b)| b == bits)?;
        let base = match &c.base {
            Base::Window(..) => Base::Window(root.to_string(), b),
            _ => Base::Generic(root.to_string()),
        };
        // Offsets stay far from wrapping: a group's range is one interval of the variable only
        // while its members' offsets are (shared and local variables are far smaller).
        let offset = c.offset.checked_add(k).filter(|o| o.abs() < MAX_SUM_OFFSET)?;
        Some(SpaceCheck { base, offset, ..c.clone() })
    }
}

/// The groups of the module's shared/local accesses, by (line index, statement index in line).
/// Lines in `skip` (loop versioning's own lines) are never accesses; the accesses on lines in
/// `range_tested` are [`Role::RangeTested`]. `locs`: the source location at each line.
/// `sums_at`: whether an access on that line may be grouped through a sum ([`Sums`]).
pub(super) fn group_accesses<'a>(
    lines: &[Line<'a>],
    bodies: &Bodies,
    defs: &ModuleDefs<'_, 'a>,
    m: &ModuleSpaces,
    range_tested: &super::LineSet,
    locs: &[Option<super::Loc>],
    sums_at: &dyn Fn(usize) -> bool,
) -> HashMap<(usize, usize), Role> {
    let mut roles = HashMap::default();
    if m.is_empty() {
        return roles;
    }
    // Open groups by base register: (leader key, members).
    type OpenGroups = HashMap<String, ((usize, usize), Vec<Member>)>;
    let mut open: OpenGroups = HashMap::default();
    let close = |open: &mut OpenGroups, roles: &mut HashMap<(usize, usize), Role>, reg: Option<&str>| {
        let keys: Vec<String> = match reg {
            Some(r) => open.keys().filter(|k| k.as_str() == r).cloned().collect(),
            None => open.keys().cloned().collect(),
        };
        for k in keys {
            let (leader, members) = open.remove(&k).expect("listed");
            // A group of one is a plain check; the others' members are covered by their leader.
            if members.len() > 1 {
                for mb in &members[1..] {
                    roles.insert(mb.key, Role::Covered);
                }
                roles.insert(leader, Role::Leader(members));
            }
        }
    };
    // The lines the rewriter checks: after the opening line, to the closing one.
    for b in bodies.iter() {
        let (f, mut declared) = (m.functions.get(b.name.as_str()), super::DeclaredRegs::of_body(b.open));
        // Thread-index values, found when a check could use them (thread_ranges.rs), and the
        // accesses they prove.
        let mut thread_values: Option<super::thread_ranges::ThreadValues<'_>> = None;
        let mut proven: FxHashSet<(usize, usize)> = FxHashSet::default();
        // Every access's check, guarded or not, for the cross-block pass below.
        let mut planned: HashMap<(usize, usize), SpaceCheck> = HashMap::default();
        let mut sums = Sums::default();
        for (i, line) in body_lines(lines, b, b.open + 1) {
            let loc = locs[i];
            let regs = declared.at(lines, i);
            // (Loop versioning's lines, `Line::generated`, hold no access to check, and write only
            // gasan's own registers, which no group is keyed by: their statements are not read.)
            let memory = !line.generated && line.memory().0;
            if !memory {
                if line.kills_checks() {
                    close(&mut open, &mut roles, None);
                    sums.forget_all();
                } else if !line.generated {
                    for d in line.dests() {
                        close(&mut open, &mut roles, Some(d));
                    }
                    for st in line.stmts() {
                        sums.record(st.instr.as_ref(), st.dests());
                    }
                }
            } else {
                for (j, st) in line.stmts().iter().enumerate() {
                    let stmt = st.text;
                    let reg_bits = |r: &str| regs.type_of(r).and_then(super::type_bits);
                    let check = match (f, st.instr.as_ref()) {
                        (Some(f), Some(ins)) if range_tested.contains(&i) => {
                            if plan(ins, m, f, &reg_bits).is_some() {
                                roles.insert((i, j), Role::RangeTested);
                            }
                            None
                        }
                        (Some(f), Some(ins)) => plan(ins, m, f, &reg_bits).map(|c| {
                            // Inside its variable for every thread (decided below, once groups
                            // are formed).
                            if matches!(c.base, Base::Window(..) | Base::Symbol)
                                && c.size.is_some()
                                && thread_values.get_or_insert_with(|| super::thread_ranges::ThreadValues::of_body(defs.of(b))).proves(lines, b, (i, j), &c)
                            {
                                proven.insert((i, j));
                            }
                            planned.insert((i, j), c.clone());
                            (c, ins.guard.is_none())
                        }),
                        _ => None,
                    };
                    // (Lane-limited checks stand alone: a range check is every lane's.)
                    if let Some((c, true)) = check.filter(|(c, _)| c.lanes == 32 && c.width_reg.is_none()) {
                        let c = if sums_at(i) { sums.rebased(&c).unwrap_or(c) } else { c };
                        let reg = match &c.base {
                            Base::Window(r, _) | Base::Generic(r) => Some(r.clone()),
                            // A called function's accesses through a pointer its caller made: each
                            // is bad when its end passes the top, so the group's highest end
                            // stands for all of them (the own-frame form is not one interval).
                            Base::PastTop(r, _) if c.space == MemorySpace::LocalPastTop => Some(r.clone()),
                            _ => None,
                        };
                        if let Some(r) = reg {
                            let member = Member { key: (i, j), loc, check: c };
                            match open.get_mut(&r) {
                                Some((_, members)) if members[0].check.var == member.check.var && members[0].check.base == member.check.base => {
                                    members.push(member);
                                }
                                _ => {
                                    close(&mut open, &mut roles, Some(&r));
                                    open.insert(r, ((i, j), vec![member]));
                                }
                            }
                        }
                    }
                    if super::kills_checks(stmt) {
                        close(&mut open, &mut roles, None);
                        sums.forget_all();
                    } else {
                        for d in st.dests() {
                            close(&mut open, &mut roles, Some(d));
                        }
                        sums.record(None, st.dests());
                    }
                }
            }
        }
        close(&mut open, &mut roles, None);
        // Only a check of every lane proves anything for later accesses (and only unguarded).
        if planned.values().any(|c| c.lanes == 32) {
            available_checks(lines, b, &planned, &mut roles);
        }
        // Accesses proven for every thread lose their check: alone, or with their whole group. A
        // group with one member left to check keeps its one range check where it was (dropping
        // its proven first member moved the check and cost gemm_tiled 6 registers, 1.07x ->
        // 1.36x on the H100).
        for &key in &proven {
            match roles.get(&key) {
                None => {
                    roles.insert(key, Role::Available);
                }
                Some(Role::Leader(members)) if members.iter().all(|mb| proven.contains(&mb.key)) => {
                    let keys: Vec<(usize, usize)> = members.iter().map(|mb| mb.key).collect();
                    for k in keys {
                        roles.insert(k, Role::Available);
                    }
                }
                _ => {}
            }
        }
    }
    roles
}

/// What a passed check proved: the bytes `[lo, hi)` of `var` from the address in `reg` are the
/// variable's (through a window or a generic address, as `generic` says). A check's result
/// depends on the register's value and the variable's bounds only (shared and local memory have
/// no shadow to change), so it stands until the register is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proven<'p> {
    /// Borrowed from the planned check: the analysis copies facts at every meet.
    reg: &'p str,
    var: &'p str,
    generic: bool,
    lo: i64,
    hi: i64,
}

/// A step of a basic block, in order.
enum Step<'a, 'p> {
    /// A shared/local access at its key: what its check would prove, and whether it proves it
    /// for the accesses after it (an unguarded check of every lane).
    Access((usize, usize), Proven<'p>, bool),
    /// Registers written.
    Writes(Vec<&'a str>),
}

#[derive(Default)]
struct Block<'a, 'p> {
    steps: Vec<Step<'a, 'p>>,
    /// Labels it may branch to.
    targets: Vec<&'a str>,
    /// Whether the next block is reached by falling through.
    falls_through: bool,
}

/// Facts known at a point: `None` is every fact (a block no path has reached yet).
type Facts<'p> = Option<Vec<Proven<'p>>>;

/// Facts a point keeps at most (a block of hundreds of checks through one register would
/// otherwise make the meet quadratic); past it, the newest are dropped, which only keeps checks.
const MAX_FACTS: usize = 64;

/// The facts true after both `a` and `b`: the overlaps of their ranges of one register and
/// variable, without any that another one covers.
fn meet_facts<'p>(a: &Facts<'p>, b: &Facts<'p>) -> Facts<'p> {
    match (a, b) {
        (None, x) | (x, None) => x.clone(),
        (Some(a), Some(b)) => {
            let mut out: Vec<Proven<'p>> = Vec::new();
            for x in a {
                for y in b.iter().filter(|y| (&y.reg, &y.var, y.generic) == (&x.reg, &x.var, x.generic)) {
                    let p = Proven { lo: x.lo.max(y.lo), hi: x.hi.min(y.hi), ..*x };
                    if p.lo < p.hi && !covers(&out, &p) {
                        out.retain(|q| !(q.reg == p.reg && q.var == p.var && q.generic == p.generic && p.lo <= q.lo && q.hi <= p.hi));
                        out.push(p);
                    }
                }
            }
            out.truncate(MAX_FACTS);
            Some(out)
        }
    }
}

fn covers(facts: &[Proven], p: &Proven) -> bool {
    facts.iter().any(|f| f.reg == p.reg && f.var == p.var && f.generic == p.generic && f.lo <= p.lo && p.hi <= f.hi)
}

/// Marks [`Role::Available`] the checks of `b` that checks made earlier on every path already
/// prove (scan's unrolled `s[tid] += s[tid - off]` stages check `s[tid]` once, not once per
/// stage): a forward must-analysis over the body's basic blocks, a fact per passed check (its
/// whole range for a group's leader), killed by any write of its register. Bodies with an
/// indirect branch (`brx.idx`) are left as they are. `planned`: the check of each of the body's
/// shared/local accesses, by key.
fn available_checks<'a, 'p>(lines: &[Line<'a>], b: &Body, planned: &'p HashMap<(usize, usize), SpaceCheck>, roles: &mut HashMap<(usize, usize), Role>) {
    let mut blocks: Vec<Block<'a, 'p>> = vec![Block { falls_through: true, ..Block::default() }];
    let mut labels: HashMap<&'a str, usize> = HashMap::default();
    let new_block = |blocks: &mut Vec<Block<'a, 'p>>| {
        if !blocks.last().is_some_and(|bl| bl.steps.is_empty() && bl.targets.is_empty() && bl.falls_through) {
            blocks.push(Block { falls_through: true, ..Block::default() });
        }
    };
    for (i, line) in body_lines(lines, b, b.open + 1) {
        if let Some(name) = line.label() {
            new_block(&mut blocks);
            labels.insert(name, blocks.len() - 1);
            continue;
        }
        for (j, st) in line.stmts().iter().enumerate() {
            let Some(ins) = st.instr.as_ref() else { continue };
            let block = blocks.last_mut().expect("one block at least");
            if let Some(c) = planned.get(&(i, j)).filter(|c| c.width_reg.is_none()) {
                let proven = match (&c.base, roles.get(&(i, j))) {
                    (_, Some(Role::Covered)) => None,
                    (Base::Window(r, _), role) | (Base::Generic(r), role) => {
                        let (lo, hi) = match role {
                            Some(Role::Leader(members)) => merged_range(members),
                            _ => (c.offset, c.offset + i64::from(c.width)),
                        };
                        Some(Proven { reg: r, var: &c.var, generic: matches!(c.base, Base::Generic(_)), lo, hi })
                    }
                    _ => None,
                };
                if let Some(p) = proven.filter(|p| p.lo < p.hi) {
                    block.steps.push(Step::Access((i, j), p, ins.guard.is_none() && c.lanes == 32));
                }
            }
            let writes: Vec<&'a str> = st.dests().collect();
            if !writes.is_empty() {
                block.steps.push(Step::Writes(writes));
            }
            if ends_block(ins) {
                match ins.opcode.op {
                    // (Its targets are a table's: not followed.)
                    Op::Brx => return,
                    Op::Bra => {
                        let Some(target) = ins.operands.first() else { return };
                        block.targets.push(target.trim());
                    }
                    _ => {}
                }
                block.falls_through = falls_through(ins);
                new_block(&mut blocks);
            }
        }
    }
    // Predecessors; a branch to a label the body lacks leaves it as it is.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); blocks.len()];
    for (k, bl) in blocks.iter().enumerate() {
        for t in &bl.targets {
            let Some(&to) = labels.get(t) else { return };
            preds[to].push(k);
        }
        if bl.falls_through && k + 1 < blocks.len() {
            preds[k + 1].push(k);
        }
    }
    let transfer = |bl: &Block<'a, 'p>, mut facts: Facts<'p>, mut on_access: Option<&mut dyn FnMut((usize, usize), bool)>| -> Facts<'p> {
        for step in &bl.steps {
            match step {
                Step::Access(key, p, proves) => {
                    let known = facts.as_ref().is_none_or(|fs| covers(fs, p));
                    if let Some(cb) = on_access.as_mut() {
                        cb(*key, known);
                    }
                    if let (Some(fs), true, false) = (facts.as_mut(), *proves, known) {
                        if fs.len() < MAX_FACTS {
                            fs.push(*p);
                        }
                    }
                }
                Step::Writes(ws) => {
                    if let Some(fs) = facts.as_mut() {
                        fs.retain(|p| !ws.contains(&p.reg));
                    }
                }
            }
        }
        facts
    };
    // Entry: nothing known. Iterate to the fixed point (facts only shrink).
    let mut out: Vec<Facts<'p>> = vec![None; blocks.len()];
    let in_of = |k: usize, out: &[Facts<'p>]| -> Facts<'p> {
        if k == 0 {
            return Some(Vec::new());
        }
        preds[k].iter().fold(None, |acc, &p| meet_facts(&acc, &out[p]))
    };
    // Facts only shrink, so this ends within a few passes (one more per loop nesting level); the
    // cap on facts could make a pass undo another's, so past a bound nothing is marked.
    let mut changed = true;
    let mut passes = 0;
    while changed {
        passes += 1;
        if passes > blocks.len() + 8 {
            return;
        }
        changed = false;
        for k in 0..blocks.len() {
            let new = transfer(&blocks[k], in_of(k, &out), None);
            if new != out[k] {
                out[k] = new;
                changed = true;
            }
        }
    }
    for (k, block) in blocks.iter().enumerate() {
        let facts = in_of(k, &out);
        // A block no path reaches keeps its checks (nothing to gain, nothing to risk).
        if facts.is_none() {
            continue;
        }
        let mut mark = |key: (usize, usize), known: bool| {
            if known {
                // A proven leader takes its members with it (they had no check but its).
                if let Some(Role::Leader(members)) = roles.insert(key, Role::Available) {
                    for mb in &members[1..] {
                        roles.insert(mb.key, Role::Available);
                    }
                }
            }
        };
        transfer(block, facts, Some(&mut mark));
    }
}

/// The inline range check of a group (before its leader) and its out-of-line stub, which rechecks
/// every member to report the one that is out of bounds. `sites[k]` is member `k`'s site.
pub(super) fn emit_group(members: &[Member], sites: &[u32], indent: &str, label: u32) -> (String, String) {
    use super::lines::{LAST_ADDR, LAST_SITE};
    let (lo, hi) = merged_range(members);
    let merged = SpaceCheck { offset: lo, width: u32::try_from(hi - lo).unwrap_or(u32::MAX), ..members[0].check.clone() };
    let (mut inline, mut stub) = (String::with_capacity(1024), String::new());
    let mut v = Lines::new(&mut inline, indent);
    v.text("{");
    check_body(&mut v, &merged, None);
    ln!(v; "@%gsq0 bra $gasan_sfail_", label, ";");
    v.text("}");
    let mut s = Lines::new(&mut stub, indent);
    ln!(s; "$gasan_sfail_", label, ":");
    for (mb, &site) in members.iter().zip(sites) {
        s.text("{");
        let bits = check_body(&mut s, &mb.check, None);
        offset_to_b64(&mut s, "@%gsq0 ", bits, LAST_ADDR);
        ln!(s; "@%gsq0 mov.b64 ", LAST_SITE, ", ", packed_site(&mb.check, site), ";");
        ln!(s; "@%gsq0 bra.uni ", SPACE_FAIL, ";");
        s.text("}");
    }
    // The range failed, so one end's member fails: never reached.
    s.text("trap;");
    (inline, stub)
}

#[cfg(test)]
mod tests {
    use super::super::access::split_instr;
    use super::*;

    proptest::proptest! {
        /// An access whose shared/local space is counted names `.shared` or `.local` in its
        /// opcode ([`may_name_space`], the filter before the count).
        #[test]
        fn a_named_space_is_named_in_the_opcode(
            op in proptest::sample::select(vec!["ld", "st", "atom", "red", "ldu", "cp", "ldmatrix", "stmatrix", "wmma", "prefetch", "mov"]),
            quals in proptest::collection::vec(proptest::sample::select(vec!["shared", "shared::cta", "shared::cluster", "local", "global", "param", "const", "async", "bulk", "ca", "cg", "sync", "aligned", "m8n8", "x1", "x4", "b16", "u32", "v2", "f32", "load", "store", "a", "d", "row", "m16n16k16", "tensor", "reduce", "add", "global::L2"]), 0..6),
            operands in proptest::sample::select(vec!["%r1, [%r2]", "[%r1], %r2", "[%r1], [%rd1], 16", "[%r1], [%rd1], %r3", "{%f1, %f2}, [%r1], 16", "[%r1], {%f1, %f2}, %r4"]),
        ) {
            let text = std::iter::once(op).chain(quals.iter().copied()).collect::<Vec<_>>().join(".");
            let stmt = format!("{text} {operands}");
            let ins = split_instr(&stmt).expect("an instruction");
            let consts = |_: &str| Some(16);
            if space_access(&ins, &consts).is_some_and(|a| a.named_space().is_some()) {
                proptest::prop_assert!(may_name_space(&ins), "{}", text);
            }
        }
    }

    #[test]
    fn declarations() {
        let d = |s| parse_declaration(s);
        assert_eq!(d(".shared .align 4 .b8 _ZZ1kE1s[256];"), Some(("_ZZ1kE1s".into(), SpaceVar { space: MemorySpace::Shared, size: Some(256) })));
        assert_eq!(d(".extern .shared .align 16 .b8 d[];"), Some(("d".into(), SpaceVar { space: MemorySpace::Shared, size: None })));
        assert_eq!(d(".local .align 8 .b8 \t__local_depot3[40];"), Some(("__local_depot3".into(), SpaceVar { space: MemorySpace::Local, size: Some(40) })));
        assert_eq!(d(".shared .align 4 .f32 t[4][8];").unwrap().1.size, Some(128));
        assert_eq!(d(".shared .u64 x;").unwrap().1.size, Some(8));
        assert_eq!(d(".shared .align 4 .b8 s[];"), None);
        assert_eq!(d(".global .align 4 .b8 g[16];"), None);
    }

    fn module(body: &str) -> ModuleSpaces {
        let lines = Line::read_all(body.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        analyze(&lines, &bodies, &ModuleDefs::new(&lines, &bodies), &Default::default())
    }

    #[test]
    fn provenance_follows_index_arithmetic_and_refuses_mixtures() {
        let m = module(
            ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .b64 %rd<9>;\n\
             .shared .align 4 .b8 a[128];\n.shared .align 4 .b8 b[128];\n\
             mov.u32 %r1, a;\nshl.b32 %r2, %r9, 2;\nadd.s32 %r3, %r1, %r2;\n\
             mov.u32 %r4, b;\nadd.s32 %r5, %r4, %r3;\nselp.b32 %r6, %r1, %r4, %p1;\n\
             add.s32 %r7, %r7, 4;\nmov.u32 %r7, %r3;\ncvt.u64.u32 %rd1, %r3;\ncvta.shared.u64 %rd2, %rd1;\nadd.s64 %rd3, %rd2, 8;\n}\n",
        );
        let f = &m.functions["k"];
        let var = |v: &str, generic| Some(Prov::Var { var: v.into(), generic });
        assert_eq!(f.regs.get("%r3").cloned(), var("a", false));
        assert_eq!(f.regs.get("%r5").cloned(), None, "a + b names neither");
        assert_eq!(f.regs.get("%r6").cloned(), None, "selected between two variables");
        assert_eq!(f.regs.get("%r7").cloned(), var("a", false), "loop-carried pointer");
        assert_eq!(f.regs.get("%rd3").cloned(), var("a", true));
    }

    #[test]
    fn copies_and_matrix_loads_check_their_shared_operand() {
        let m = module(
            ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .b64 %rd<9>;\n\
             .shared .align 16 .b8 t[512];\nmov.u32 %r1, t;\nadd.s32 %r2, %r1, %r9;\n}\n",
        );
        let f = &m.functions["k"];
        let bits = |r: &str| r.starts_with("%rd").then_some(64).or(Some(32));
        let check = |stmt: &str| plan(&split_instr(stmt).unwrap(), &m, f, &bits).map(|c| (c.kind, c.width, c.lanes, c.offset));
        // cp.async: the shared destination, cp-size bytes, zero-filled past src-size or not.
        assert_eq!(check("cp.async.cg.shared.global [%r2], [%rd1], 16, 16"), Some((AccessKind::Write, 16, 32, 0)));
        assert_eq!(check("cp.async.ca.shared::cta.global.L2::128B [%r2+4], [%rd1], 4"), Some((AccessKind::Write, 4, 32, 4)));
        // Bulk copies: the CTA's own shared operand, when the size is an immediate.
        assert_eq!(check("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1], 256, [%r3]"), Some((AccessKind::Write, 256, 32, 0)));
        assert_eq!(check("cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], 128"), Some((AccessKind::Read, 128, 32, 0)));
        assert_eq!(check("cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], %r5"), Some((AccessKind::Read, 0, 32, 0)), "a register size");
        assert_eq!(check("cp.async.ca.shared.global [%r2], [%rd1], %r5"), None, "cp.async proper takes an immediate");
        assert_eq!(check("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r5]"), None);
        assert_eq!(check("cp.async.commit_group"), None);
        // ldmatrix / stmatrix: a 16-byte row per supplying lane.
        assert_eq!(check("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r3, %r4, %r5, %r6}, [%r2]"), Some((AccessKind::Read, 16, 32, 0)));
        assert_eq!(check("ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%r3, %r4}, [%r2+32]"), Some((AccessKind::Read, 16, 16, 32)));
        assert_eq!(check("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%r2], {%r3}"), Some((AccessKind::Write, 16, 8, 0)));
        assert_eq!(check("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r3, %r4}, [%r2]"), None, "other shapes are not modelled");
        // Not traced to a variable: no check.
        assert_eq!(check("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r3, %r4, %r5, %r6}, [%r9]"), None);
    }

    #[test]
    fn wmma_tiles_span_their_rows_at_the_stride() {
        let bytes = |op: &str, stride: Option<i64>| super::super::access::WmmaTile::of(&op.split('.').collect::<Vec<_>>()).and_then(|t| t.bytes(stride));
        // 16x16 f16 A, row-major, dense: 512 bytes; a stride of 24 elements: 15 rows of 48 bytes + 32.
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16", Some(16)), Some(512));
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16", Some(24)), Some(15 * 48 + 32));
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16", None), Some(512));
        // m32n8k16: A is 32x16, B 16x8, C 32x8; column-major swaps rows and columns.
        assert_eq!(bytes("wmma.load.a.sync.aligned.col.m32n8k16.shared.bf16", Some(32)), Some((15 * 32 + 32) * 2));
        assert_eq!(bytes("wmma.load.b.sync.aligned.row.m32n8k16.shared.u8", Some(8)), Some(16 * 8));
        assert_eq!(bytes("wmma.store.d.sync.aligned.row.m32n8k16.shared.f32", Some(8)), Some(32 * 8 * 4));
        assert_eq!(bytes("wmma.load.c.sync.aligned.col.m8n8k4.shared.f64", Some(8)), Some(64 * 8));
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m16n16k8.shared.tf32", Some(8)), Some(16 * 8 * 4));
        // Not modelled: sub-byte types, rows overlapping, no layout.
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m8n8k32.shared.s4", Some(32)), None);
        assert_eq!(bytes("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16", Some(8)), None);
        assert_eq!(bytes("wmma.load.a.sync.aligned.m16n16k16.shared.f16", Some(16)), None);
    }

    #[test]
    fn wmma_strides_come_from_constant_registers() {
        let m = module(
            ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .pred %p<2>;\n\
             .shared .align 16 .b8 sa[512];\nmov.u32 %r1, sa;\nadd.s32 %r2, %r1, %r9;\nmov.u32 %r3, 16;\n\
             mov.u32 %r4, 16;\nmov.u32 %r4, 24;\n@%p1 mov.u32 %r5, 16;\n}\n",
        );
        let f = &m.functions["k"];
        let bits = |_: &str| Some(32);
        let check = |stmt: &str| plan(&split_instr(stmt).unwrap(), &m, f, &bits).map(|c| (c.kind, c.width));
        let load = |stride: &str| format!("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {{%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}}, [%r2], {stride}");
        assert_eq!(check(&load("%r3")), Some((AccessKind::Read, 512)));
        assert_eq!(check(&load("16")), Some((AccessKind::Read, 512)));
        assert_eq!(check(&load("%r4")), None, "two values: not a constant");
        assert_eq!(check(&load("%r5")), None, "a guarded definition: not a constant");
        assert_eq!(check(&load("%r9")), None, "unknown stride");
        assert_eq!(check("wmma.store.d.sync.aligned.col.m16n16k16.shared.f32 [%r2], {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, %r3"), Some((AccessKind::Write, 1024)));
        assert_eq!(check("wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, [%rd1], %r3"), None);
    }

    #[test]
    fn lanes_that_supply_no_address_are_not_checked() {
        let c =
            SpaceCheck { space: MemorySpace::Shared, var: "t".into(), size: Some(512), base: Base::Window("%r2".into(), 32), offset: 0, width: 16, kind: AccessKind::Read, lanes: 16, width_reg: None };
        let body = check_body_lines(&c, None);
        let lane_test = body.iter().position(|l| l == "setp.lt.u32 %gsq2, %gsw1, 16;").expect("lane test");
        assert_eq!(body[lane_test + 1], "and.pred %gsq0, %gsq0, %gsq2;");
        assert!(body[..lane_test].iter().any(|l| l == "mov.u32 %gsw1, %laneid;"));
        let all = check_body_lines(&SpaceCheck { lanes: 32, ..c }, None);
        assert!(!all.iter().any(|l| l.contains("%laneid")), "every lane's address is checked: no lane test");
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;

    /// The module's provenance and the groups of `lines`' accesses (`tops`: the functions
    /// called with their callers' frame top), every line free to group through sums.
    fn roles_of(lines: &[Line<'_>], tops: &FxHashSet<String>) -> (ModuleSpaces, HashMap<(usize, usize), Role>) {
        let bodies = Bodies::scan(lines);
        let defs = ModuleDefs::new(lines, &bodies);
        let m = analyze(lines, &bodies, &defs, tops);
        let roles = group_accesses(lines, &bodies, &defs, &m, &Default::default(), &vec![None; lines.len()], &|_| true);
        (m, roles)
    }

    #[test]
    fn same_register_accesses_of_one_block_form_one_range_check_until_redefined() {
        // (%r1 defined twice: thread_ranges.rs proves nothing from it, so its constant offsets stay
        // checks, which is what these grouping tests are about.)
        let body = ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .f32 %f<9>;\n\
                    .shared .align 4 .b8 a[128];\n\
                    mov.u32 %r1, a;\nadd.s32 %r1, %r1, 0;\nadd.s32 %r2, %r1, %r9;\n\
                    ld.shared.f32 %f1, [%r2];\nld.shared.f32 %f2, [%r2+4];\nld.shared.f32 %f3, [%r2+8];\n\
                    add.s32 %r2, %r1, %r8;\nld.shared.f32 %f4, [%r2];\n\
                    @%p1 ld.shared.f32 %f5, [%r1+4];\n\
                    bar.sync 0;\nld.shared.f32 %f6, [%r1];\nld.shared.f32 %f7, [%r1+124];\n}\n";
        let lines = Line::read_all(body.split_inclusive('\n'));
        let (_, roles) = roles_of(&lines, &Default::default());
        let at = |needle: &str| lines.iter().position(|l| l.raw.contains(needle)).unwrap();
        match roles.get(&(at("[%r2];"), 0)) {
            Some(Role::Leader(members)) => {
                assert_eq!(members.iter().map(|mb| mb.check.offset).collect::<Vec<_>>(), vec![0, 4, 8]);
                // The merged range is [0, 12): one past the 128-byte array only at offset 120+.
                let (sites, label) = ([0, 1, 2], 7);
                let (inline, stub) = emit_group(members, &sites, "\t", label);
                assert!(inline.contains("setp.gt.u32 %gsq0, %gso0, 116;"), "{inline}");
                assert_eq!(stub.matches("bra.uni $gasan_fail_space;").count(), 3, "{stub}");
            }
            o => panic!("{o:?}"),
        }
        assert!(matches!(roles.get(&(at("[%r2+4]"), 0)), Some(Role::Covered)));
        assert!(matches!(roles.get(&(at("[%r2+8]"), 0)), Some(Role::Covered)));
        // Redefined %r2: a group of its own (one access: no role, a plain check).
        assert!(!roles.contains_key(&(at("%f4"), 0)));
        // Guarded: never grouped. After the barrier: a new block.
        assert!(!roles.contains_key(&(at("%f5"), 0)));
        assert!(matches!(roles.get(&(at("%f6"), 0)), Some(Role::Leader(v)) if v.len() == 2));
        assert!(matches!(roles.get(&(at("%f7"), 0)), Some(Role::Covered)));
    }

    #[test]
    fn accesses_through_a_register_plus_a_constant_group_with_its_root_until_either_is_written() {
        // Triton's pipelined copies: each stage's destination is the buffer's register plus a
        // constant (%r2, %r3). (%r1 defined twice: thread_ranges.rs proves nothing from it.)
        let body = ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .f32 %f<9>;\n\
                    .shared .align 4 .b8 a[4096];\n\
                    mov.u32 %r1, a;\nadd.s32 %r1, %r1, %r9;\n\
                    st.shared.f32 [%r1+8], %f1;\nadd.s32 %r2, %r1, 2048;\nst.shared.f32 [%r2+4], %f2;\n\
                    add.s32 %r3, %r2, 16;\nst.shared.f32 [%r3], %f3;\n\
                    add.s32 %r1, %r1, %r8;\nst.shared.f32 [%r2], %f4;\nst.shared.f32 [%r3+4], %f5;\n\
                    add.s32 %r4, %r1, 64;\n$L1:\nst.shared.f32 [%r1], %f6;\nst.shared.f32 [%r4], %f7;\n\
                    bar.sync 0;\nadd.s32 %r5, %r1, 64;\nmov.u32 %r5, %r9;\nst.shared.f32 [%r1+4], %f8;\nst.shared.f32 [%r5], %f1;\n\
                    bar.sync 0;\nadd.u32 %r6, %r1, 0xFFFFFFF0;\nst.shared.f32 [%r1+16], %f2;\nst.shared.f32 [%r6], %f3;\n\
                    add.s32 %r7, %r1, 33554432;\nst.shared.f32 [%r7], %f4;\n}\n";
        let lines = Line::read_all(body.split_inclusive('\n'));
        let (_, roles) = roles_of(&lines, &Default::default());
        let at = |needle: &str| lines.iter().position(|l| l.raw.contains(needle)).unwrap();
        match roles.get(&(at("%f1;"), 0)) {
            Some(Role::Leader(members)) => {
                // All three through %r1: offsets 8, 2048 + 4, 2048 + 16.
                assert_eq!(members.iter().map(|mb| mb.check.offset).collect::<Vec<_>>(), vec![8, 2052, 2064]);
                assert!(members.iter().all(|mb| mb.check.base == Base::Window("%r1".into(), 32)), "{members:?}");
                let (inline, stub) = emit_group(members, &[0, 1, 2], "\t", 4);
                assert!(inline.contains("sub.s32 %gso0, %r1, %gso1;"), "{inline}");
                // The stub's recheck is through %r1 too: %r2 and %r3 may not hold their values
                // yet at the leader, where it runs.
                assert!(!stub.contains("%r2") && !stub.contains("%r3"), "{stub}");
                // Rechecked in order, each failing member reported at once: the first one is.
                let record = |k: usize| format!("mov.b64 %gss, {};", packed_site(&members[k].check, k as u32));
                assert!(stub.find(&record(0)).expect("site 0") < stub.find(&record(2)).expect("site 2"), "{stub}");
            }
            o => panic!("{o:?}"),
        }
        assert!(matches!(roles.get(&(at("%f2;"), 0)), Some(Role::Covered)));
        assert!(matches!(roles.get(&(at("%f3;"), 0)), Some(Role::Covered)));
        // %r1 written: %r2 and %r3 are their own registers again, and not one group.
        assert!(!roles.contains_key(&(at("%f4;"), 0)) && !roles.contains_key(&(at("%f5;"), 0)));
        // A label: control may arrive with %r4 from elsewhere.
        assert!(!roles.contains_key(&(at("%f6;"), 0)) && !roles.contains_key(&(at("%f7;"), 0)));
        // %r5 overwritten after its sum.
        assert!(!roles.contains_key(&(at("%f8;"), 0)));
        // A 32-bit sum wraps: %r6 is %r1 - 16, grouped at offset -16 with the access at +16; one
        // 32 MiB away is not grouped.
        match roles.get(&(at("[%r1+16]"), 0)) {
            Some(Role::Leader(members)) => assert_eq!(members.iter().map(|mb| mb.check.offset).collect::<Vec<_>>(), vec![16, -16]),
            o => panic!("{o:?}"),
        }
        assert!(matches!(roles.get(&(at("[%r6]"), 0)), Some(Role::Covered)));
        assert!(!roles.contains_key(&(at("[%r7]"), 0)));
    }

    #[test]
    fn a_called_functions_accesses_through_a_parameter_form_one_past_top_check_of_their_highest_end() {
        // f's reads through the pointer its caller passed (param-derived: bad when their end passes
        // the callers' top) are checked together, by the highest end; a read through a loaded
        // pointer (outside f's own frame: not one interval) keeps its own check.
        let body = ".func (.param .b32 r) f(\n.param .b64 f_p\n, .param .b64 __gasan_top)\n{\n.local .align 4 .b8 __local_depot0[16];\n\
                    .reg .b64 %SPL;\n.reg .b64 %rd<9>;\n.reg .f32 %f<9>;\n\
                    mov.u64 %SPL, __local_depot0;\nld.param.u64 %rd1, [f_p];\ncvta.to.local.u64 %rd2, %rd1;\n\
                    ld.local.f32 %f1, [%rd2];\nld.local.f32 %f2, [%rd2+28];\nld.local.f32 %f3, [%rd2+4];\n\
                    ld.local.u64 %rd3, [%rd2+8];\nld.local.f32 %f4, [%rd3];\nld.local.f32 %f5, [%rd3+4];\nret;\n}\n";
        let lines = Line::read_all(body.split_inclusive('\n'));
        let tops: FxHashSet<String> = ["f".to_string()].into_iter().collect();
        let (m, roles) = roles_of(&lines, &tops);
        let at = |needle: &str| lines.iter().position(|l| l.raw.contains(needle)).unwrap();
        match roles.get(&(at("%f1"), 0)) {
            Some(Role::Leader(members)) => {
                assert_eq!(members.iter().map(|mb| mb.check.offset).collect::<Vec<_>>(), vec![0, 28, 4, 8]);
                assert!(members.iter().all(|mb| mb.check.space == MemorySpace::LocalPastTop));
                let (inline, stub) = emit_group(members, &[0, 1, 2, 3], "\t", 3);
                // [0, 32) from %rd2: bad when %rd2 + 31 reaches the top, in 32 bits.
                assert!(inline.contains("cvt.u32.u64 %gso0, %rd2;") && inline.contains("sub.s32 %gso0, %gso0, %gso1;"), "{inline}");
                assert!(inline.contains("setp.ge.s32 %gsq0, %gso0, -31;"), "{inline}");
                assert_eq!(stub.matches("bra.uni $gasan_fail_space;").count(), 4, "{stub}");
            }
            o => panic!("{o:?}"),
        }
        for covered in ["%f2", "%f3", "%rd3, [%rd2+8]"] {
            assert!(matches!(roles.get(&(at(covered), 0)), Some(Role::Covered)), "{covered}");
        }
        // Through a pointer loaded from memory: dead-frame checks, never grouped.
        assert!(!roles.contains_key(&(at("%f4"), 0)) && !roles.contains_key(&(at("%f5"), 0)));
        let f = &m.functions["f"];
        let reg_bits = |_: &str| Some(64);
        let ins = super::super::access::split_instr("ld.local.f32 %f4, [%rd3]").unwrap();
        let c = plan(&ins, &m, f, &reg_bits).expect("a dead-frame check");
        assert_eq!(c.space, MemorySpace::LocalDeadFrame);
        let body = check_body_lines(&c, None);
        // The own-frame allowance in 32 bits too.
        assert!(body.iter().any(|l| l == "mov.u32 %gso2, __local_depot0;"), "{body:?}");
        assert!(body.iter().any(|l| l == "setp.gt.u32 %gsq2, %gso1, 12;"), "{body:?}");
    }

    #[test]
    fn a_check_made_on_every_path_before_an_access_stands_for_its_check_until_its_register_is_written() {
        // (%r1 defined twice: thread_ranges.rs proves nothing from it, so its constant offsets stay
        // checks, which is what these grouping tests are about.)
        let body = ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .f32 %f<9>;\n.reg .pred %p<4>;\n\
                    .shared .align 4 .b8 a[128];\n\
                    mov.u32 %r1, a;\nadd.s32 %r1, %r1, 0;\nadd.s32 %r2, %r1, %r9;\nadd.s32 %r4, %r1, %r8;\n\
                    st.shared.f32 [%r2], %f1;\nbar.sync 0;\n@%p1 bra $L1;\nld.shared.f32 %f2, [%r2+-4];\n\
                    $L1:\nbar.sync 0;\nld.shared.f32 %f3, [%r2];\n\
                    @%p2 bra $L2;\nst.shared.f32 [%r1+8], %f3;\n$L2:\nld.shared.f32 %f4, [%r1+8];\n\
                    $L3:\nld.shared.f32 %f5, [%r2+0];\nadd.s32 %r2, %r2, 4;\n@%p3 bra $L3;\nld.shared.f32 %f6, [%r2];\n\
                    @%p1 ld.shared.f32 %f7, [%r4];\nld.shared.f32 %f8, [%r4];\nret;\n}\n";
        let lines = Line::read_all(body.split_inclusive('\n'));
        let (_, roles) = roles_of(&lines, &Default::default());
        let available = |needle: &str| {
            let i = lines.iter().position(|l| l.raw.contains(needle)).unwrap_or_else(|| panic!("{needle}"));
            matches!(roles.get(&(i, 0)), Some(Role::Available))
        };
        // The store's check proves s[%r2]'s 4 bytes on both paths to the load after the join
        // (a barrier in between changes nothing: shared bounds do not move).
        assert!(available("%f3, [%r2]"));
        for (needle, why) in [
            ("[%r2], %f1", "the first check"),
            ("%f2, [%r2+-4]", "another range"),
            ("[%r1+8], %f3", "first check of %r1+8"),
            ("%f4, [%r1+8]", "checked on one of the two paths only"),
            ("%f5, [%r2+0]", "a loop head: the back edge brings %r2 written"),
            ("%f6, [%r2]", "after the write of %r2"),
            ("%f8, [%r4]", "the earlier check of %r4 was guarded"),
        ] {
            assert!(!available(needle), "{needle}: {why}");
        }
    }

    /// One statement of a generated body (the property test below).
    #[derive(Clone, Debug)]
    enum Gen {
        /// `ld.shared.f32` through `%r<reg>` at `off`, guarded by `%p1` or not.
        Load(u8, i8, bool),
        /// `%r<reg>` written (another index into the array).
        Write(u8),
        Barrier,
        Label(u8),
        /// `@%p1 bra $L<n>` (or unguarded).
        Branch(u8, bool),
    }

    fn gen() -> impl proptest::strategy::Strategy<Value = Gen> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (1u8..4, prop::sample::select(vec![-4i8, 0, 4, 8]), any::<bool>()).prop_map(|(r, o, g)| Gen::Load(r, o, g)),
            2 => (1u8..4).prop_map(Gen::Write),
            1 => Just(Gen::Barrier),
            2 => (0u8..4).prop_map(Gen::Label),
            2 => (0u8..4, prop::bool::weighted(0.8)).prop_map(|(l, g)| Gen::Branch(l, g)),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Every shared check the planner drops (`Role::Available`, and a proven leader's members)
        /// is, on every path the body can take to it, preceded by a check that ran on the same
        /// register, not written since, over a range holding the access: an oracle that walks the
        /// body's paths (both ways at each guarded branch, a bounded number of steps) and records
        /// the checks that ran, independent of the planner's dataflow.
        #[test]
        fn a_dropped_shared_check_is_made_earlier_on_every_path(items in proptest::collection::vec(gen(), 1..24)) {
            // Labels are unique: keep each one's first place only.
            let mut seen = [false; 4];
            let items: Vec<Gen> = items.into_iter().filter(|g| match g { Gen::Label(l) => !std::mem::replace(&mut seen[*l as usize], true), _ => true }).collect();
            let mut body = String::from(".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n.reg .f32 %f<40>;\n.reg .pred %p<4>;\n.shared .align 4 .b8 a[256];\nmov.u32 %r0, a;\n");
            for r in 1..4 {
                body.push_str(&format!("add.s32 %r{r}, %r0, %r9;\n"));
            }
            let first_line = body.lines().count();
            for g in &items {
                body.push_str(&match g {
                    Gen::Load(r, o, guard) => format!("{}ld.shared.f32 %f1, [%r{r}+{o}];\n", if *guard { "@%p1 " } else { "" }),
                    Gen::Write(r) => format!("add.s32 %r{r}, %r0, %r8;\n"),
                    Gen::Barrier => "bar.sync 0;\n".to_string(),
                    Gen::Label(l) => format!("$L{l}:\n"),
                    Gen::Branch(l, guard) if seen[*l as usize] => format!("{}bra $L{l};\n", if *guard { "@%p1 " } else { "" }),
                    Gen::Branch(..) => "mov.u32 %r10, 0;\n".to_string(),
                });
            }
            body.push_str("ret;\n}\n");
            let lines = Line::read_all(body.split_inclusive('\n'));
            let (_, roles) = roles_of(&lines, &Default::default());
            // Line index of each item (items are one per line, after the set-up lines).
            let at = |k: usize| first_line + k;
            let label_at: std::collections::HashMap<u8, usize> = items.iter().enumerate().filter_map(|(k, g)| match g { Gen::Label(l) => Some((*l, k)), _ => None }).collect();
            let range = |k: usize| -> Option<(u8, i64, i64)> {
                let Gen::Load(r, o, _) = items[k] else { return None };
                let (lo, hi) = match roles.get(&(at(k), 0)) {
                    Some(Role::Leader(members)) => (members.iter().map(|mb| mb.check.offset).min().unwrap(), members.iter().map(|mb| mb.check.offset + i64::from(mb.check.width)).max().unwrap()),
                    _ => (i64::from(o), i64::from(o) + 4),
                };
                Some((r, lo, hi))
            };
            // Depth-first over paths: (next item, checks that ran since their register's last
            // write as (register, lo, hi), steps left).
            type Ran = Vec<(u8, i64, i64)>;
            let mut stack: Vec<(usize, Ran, u32)> = vec![(0, Vec::new(), 64)];
            let mut paths = 0;
            while let Some((mut k, mut ran, mut steps)) = stack.pop() {
                paths += 1;
                if paths > 4000 {
                    break;
                }
                while k < items.len() && steps > 0 {
                    steps -= 1;
                    match &items[k] {
                        Gen::Load(r, o, guard) => {
                            let (lo, hi) = (i64::from(*o), i64::from(*o) + 4);
                            match roles.get(&(at(k), 0)) {
                                Some(Role::Available) => {
                                    proptest::prop_assert!(ran.iter().any(|&(rr, l, h)| rr == *r && l <= lo && hi <= h), "item {k} ({:?}) dropped, but on a path only {ran:?} ran\n{body}", items[k]);
                                }
                                Some(Role::Covered) => {}
                                _ if !*guard => ran.push(range(k).unwrap()),
                                _ => {}
                            }
                        }
                        Gen::Write(r) => ran.retain(|&(rr, _, _)| rr != *r),
                        Gen::Branch(l, guard) if label_at.contains_key(l) => {
                            let to = label_at[l];
                            if *guard {
                                stack.push((to, ran.clone(), steps));
                            } else {
                                k = to;
                                continue;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
            }
        }
    }
}
