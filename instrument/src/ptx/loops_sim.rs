//! Soundness of loop versioning, by execution: a small interpreter for the PTX that nvcc emits in
//! loops and that the range tests are made of runs each versioned loop of real nvcc output
//! (tests/data/loops.ptx) from random entry states, against an extent table and a shadow
//! describing one allocation placed around the bytes the loop really touches (or a shadow alone:
//! a block in a shared slab has no extent entry, and the range test sweeps its shadow). Whenever
//! the range test passes, every access it covers must lie inside that allocation; when the
//! allocation holds them all with room to spare, the test should pass.

use super::loops::{version, Versioned};

use super::access::split_instr;
use super::{strip_comment, DeclaredRegs, Line, RegTypes};
use crate::abi::ctl_offset;
use crate::shadow::Scale;
use proptest::prelude::*;
use std::collections::HashMap;

const POOL_BASE: u64 = 0x1000_0000_0000;
const POOL_SIZE: u64 = 1 << 40;
const TABLE: u64 = 0x7000_0000_0000;
const SHIFT: u32 = 21;
const SHADOW: u64 = 0x6000_0000_0000;
const SCALE: Scale = Scale::S8;
/// Where the module's zero extent entry (bounds.rs) lives.
const NO_EXTENT: u64 = 0x7fff_0000_0000;
/// Iterations simulated at most.
const CAP: u64 = 600;

/// A live block: its first byte, the end of its last byte, and whether it is in a shared slab.
#[derive(Clone, Copy, Debug)]
struct Block {
    start: u64,
    end: u64,
    slab: bool,
}

#[derive(Default)]
struct Machine {
    regs: HashMap<String, u64>,
    preds: HashMap<String, bool>,
    /// The live blocks the shadow describes; the extent table describes those not in a shared
    /// slab (a slab block's extent entries are zero).
    blocks: Vec<Block>,
    /// Global accesses: (statement index, address, width).
    accesses: Vec<(usize, u64, u64)>,
    /// Shared-memory accesses (a copy's destination too): (statement index, address, width).
    shared: Vec<(usize, u64, u64)>,
    /// `.param` space: call arguments and results, by name.
    params: HashMap<String, u64>,
    /// Shadow bytes loaded (what the fast paths exist to avoid), each as the number of global
    /// accesses made before it.
    shadow_loads: Vec<usize>,
    /// The control block's outside fields and the table they name ([`crate::abi::outside`]);
    /// `None`: none (an outside shadow byte that passes).
    outside: Option<OutsideTable>,
}

/// An outside-range table in the machine's memory.
#[derive(Clone, Debug)]
struct OutsideTable {
    shadow: u64,
    at: u64,
    bytes: Vec<u8>,
}

fn bits_of(ty: &str) -> u32 {
    match &ty[1..] {
        "8" => 8,
        "16" => 16,
        "32" => 32,
        "64" => 64,
        _ => 64,
    }
}

fn mask(v: u64, bits: u32) -> u64 {
    if bits == 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

fn sext(v: u64, bits: u32) -> i64 {
    if bits == 64 {
        v as i64
    } else {
        ((v << (64 - bits)) as i64) >> (64 - bits)
    }
}

fn parse_imm(op: &str) -> Option<u64> {
    super::access::parse_int(op).map(|v| v as u64)
}

enum Flow {
    Next,
    Branch(String),
    /// `call (ret), func, (args)`: the result's and the arguments' `.param` names.
    Call(String, Vec<String>),
    Ret,
}

impl Machine {
    fn val(&self, op: &str) -> u64 {
        if let Some(v) = parse_imm(op) {
            return v;
        }
        if op == super::bounds::NO_EXTENT_SYMBOL {
            return NO_EXTENT;
        }
        if op.starts_with("0f") || op.starts_with("0d") {
            return 0;
        }
        if op.starts_with("%tid") || op.starts_with("%ctaid") {
            // (1 unless a test runs a particular thread.)
            return self.regs.get(op).copied().unwrap_or(1);
        }
        if op.starts_with("%ntid") || op.starts_with("%nctaid") {
            return 8;
        }
        *self.regs.get(op).unwrap_or_else(|| panic!("register {op} read before written"))
    }

    fn pred(&self, p: &str) -> bool {
        match p {
            "0" => return false,
            "1" => return true,
            _ => {}
        }
        match p.strip_prefix('!') {
            Some(q) => !self.preds[q],
            None => self.preds[p],
        }
    }

    fn address(&self, op: &str) -> u64 {
        // (Triton writes `[ %rd1 + 0 ]`.)
        let inner = op.trim_start_matches('[').trim_end_matches(']').trim();
        let (reg, off) = match inner.find('+') {
            Some(p) => (inner[..p].trim(), parse_imm(inner[p + 1..].trim()).expect("offset")),
            None => (inner, 0),
        };
        if reg == crate::abi::CONTROL_BLOCK_SYMBOL {
            return off;
        }
        self.val(reg).wrapping_add(off)
    }

    /// The shadow byte of the granule at `g`: the allocation's bytes in it, encoded as the
    /// allocator writes them (a granule the allocation starts inside of reads poisoned: the
    /// allocator's blocks start on granule boundaries, so this only makes the model stricter).
    fn shadow_byte(&self, g: u64) -> u8 {
        // Blocks start on granules and end before the next one's granule (redzones between).
        let accessible = self.blocks.iter().find(|b| g >= b.start && g < b.end).map_or(0, |b| (b.end - g).min(SCALE.granule()));
        // A count the encoding cannot express reads as the largest one below it (the allocator
        // grows such sizes by one instead): the blind spot is the encoding's, not the range test's.
        let s = SCALE.encode(accessible);
        if SCALE.accessible(s) > accessible {
            SCALE.encode(accessible - 1)
        } else {
            s
        }
    }

    fn set(&mut self, d: &str, v: u64) {
        self.regs.insert(d.to_string(), v);
    }

    fn exec(&mut self, idx: usize, stmt: &str) -> Flow {
        // (A label inside a loop body that no branch names: nothing to run.)
        if stmt.ends_with(':') {
            return Flow::Next;
        }
        let ins = split_instr(stmt).unwrap_or_else(|| panic!("cannot split {stmt}"));
        if let Some(g) = ins.guard {
            if !self.pred(g) {
                return Flow::Next;
            }
        }
        let parts: Vec<&str> = ins.opcode.parts().collect();
        let ty = *parts.last().unwrap();
        let o = &ins.operands;
        let float = ty.starts_with('f');
        match parts[0] {
            "bra" => return Flow::Branch(o[0].to_string()),
            "ret" => return Flow::Ret,
            // One lane: the warp's active lanes are this one, and a vote over them is its own
            // predicate (range tests' `vote.sync.all.pred`).
            "activemask" => self.set(o[0], 1),
            "vote" => {
                assert!(parts.get(1) == Some(&"sync") && parts.get(2) == Some(&"all") && ty == "pred", "vote form {stmt}");
                let v = self.pred(o[1]);
                self.preds.insert(o[0].to_string(), v);
            }
            "call" => {
                // `(ret), func, (a, b, c)`: the names inside the two parenthesized lists.
                let groups: Vec<Vec<String>> = stmt.split('(').skip(1).map(|g| g.split(')').next().unwrap().split(',').map(|x| x.trim().to_string()).collect()).collect();
                assert!(stmt.contains(crate::abi::RANGE_SWEEP_SYMBOL) || stmt.contains(super::outside::PASS_SYMBOL), "call of {stmt}");
                return Flow::Call(groups[0][0].clone(), groups[1].clone());
            }
            "st" if parts.contains(&"param") => {
                let v = self.val(o[1]);
                self.params.insert(o[0].trim_matches(|c| c == '[' || c == ']').to_string(), v);
            }
            "ld" if parts.contains(&"param") => {
                let v = self.params.get(o[1].trim_matches(|c| c == '[' || c == ']')).copied().unwrap_or(0x5eed);
                self.set(o[0], v);
            }
            "not" if ty == "pred" => {
                let r = !self.pred(o[1]);
                self.preds.insert(o[0].to_string(), r);
            }
            "ld" if parts.contains(&"const") => {
                let off = self.address(o[1]) as usize;
                // (The aligned pool's probe reads the high words of the base and the size.)
                let (off, high) = if ty == "u32" && off % 8 == 4 { (off - 4, true) } else { (off, false) };
                let v = match off {
                    x if x == ctl_offset::POOL_BASE => POOL_BASE,
                    x if x == ctl_offset::POOL_SIZE => POOL_SIZE,
                    x if x == ctl_offset::EXTENT_TABLE => TABLE,
                    x if x == ctl_offset::EXTENT_SHIFT => u64::from(SHIFT),
                    x if x == ctl_offset::SHADOW_BASE => SHADOW,
                    x if x == ctl_offset::OUTSIDE_SHADOW => self.outside.as_ref().map_or(crate::abi::outside::NO_RANGES, |t| t.shadow),
                    x if x == ctl_offset::OUTSIDE_RANGES => self.outside.as_ref().map_or(0, |t| t.at),
                    _ => panic!("control block offset {off}"),
                };
                self.set(o[0], if high { v >> 32 } else { v });
            }
            "ld" | "atom" | "st" | "red" => {
                let (addr_op, dests) = if matches!(parts[0], "st" | "red") { (o[0], "") } else { (o[1], o[0]) };
                let addr = self.address(addr_op);
                if let Some(t) = self.outside.as_ref().filter(|t| parts.contains(&"global") && (t.at..t.at + t.bytes.len() as u64).contains(&addr)) {
                    // The outside table: little-endian words.
                    let words: Vec<u64> = (0..2).map(|k| (addr - t.at) as usize + 8 * k).map(|at| t.bytes.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))).collect();
                    for (k, d) in dests.trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim).enumerate() {
                        self.set(d, words[k]);
                    }
                    return Flow::Next;
                }
                if parts.contains(&"global") && addr == NO_EXTENT {
                    for d in dests.trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim) {
                        self.set(d, 0);
                    }
                    return Flow::Next;
                }
                if parts.contains(&"global") && (TABLE..TABLE + (POOL_SIZE >> SHIFT) * 16).contains(&addr) {
                    // The extent table: one allocation.
                    let block = (addr - TABLE) / 16;
                    let (b0, b1) = (POOL_BASE + (block << SHIFT), POOL_BASE + ((block + 1) << SHIFT));
                    // The entry of the one extent-table block overlapping this 2^SHIFT region
                    // (none when two do: the allocator never places them so).
                    let mut hits = self.blocks.iter().filter(|b| !b.slab && b.start < b1 && b0 < b.end);
                    let (s, e) = match (hits.next(), hits.next()) {
                        (Some(b), None) => (b.start, b.end),
                        _ => (0, 0),
                    };
                    let regs: Vec<&str> = dests.trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim).collect();
                    self.set(regs[0], s);
                    self.set(regs[1], e);
                    return Flow::Next;
                }
                if parts.contains(&"global") && (SHADOW..SHADOW + (POOL_SIZE >> SCALE.shift())).contains(&addr) {
                    let byte = self.shadow_byte(POOL_BASE + ((addr - SHADOW) << SCALE.shift()));
                    self.set(dests, u64::from(byte));
                    self.shadow_loads.push(self.accesses.len());
                    return Flow::Next;
                }
                let vec = parts.iter().find_map(|p| p.strip_prefix('v')).and_then(|n| n.parse::<u64>().ok()).unwrap_or(1);
                if parts.contains(&"global") || !parts.iter().any(|p| matches!(*p, "shared" | "local" | "param" | "const")) {
                    self.accesses.push((idx, addr, vec * u64::from(bits_of(ty)) / 8));
                } else if parts.contains(&"shared") {
                    self.shared.push((idx, addr, vec * u64::from(bits_of(ty)) / 8));
                }
                // Loaded values depend on the address (gathers then depend on them too).
                for (k, d) in dests.trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim).filter(|d| d.starts_with('%')).enumerate() {
                    self.set(d, loaded_value(addr.wrapping_add(k as u64)));
                }
            }
            "setp" => {
                let cmp = parts[1];
                let bits = bits_of(ty);
                let (a, b) = (self.val(o[1]), self.val(o[2]));
                let r = if float {
                    false
                } else {
                    let signed = ty.starts_with('s');
                    let (x, y) = (sext(a, bits), sext(b, bits));
                    let (ux, uy) = (mask(a, bits), mask(b, bits));
                    match (cmp, signed) {
                        ("eq", _) => ux == uy,
                        ("ne", _) => ux != uy,
                        ("lt", true) => x < y,
                        ("le", true) => x <= y,
                        ("gt", true) => x > y,
                        ("ge", true) => x >= y,
                        ("lt" | "lo", false) => ux < uy,
                        ("le" | "ls", false) => ux <= uy,
                        ("gt" | "hi", false) => ux > uy,
                        ("ge" | "hs", false) => ux >= uy,
                        _ => panic!("setp {cmp}"),
                    }
                };
                let r = match parts.get(2) {
                    Some(&"and") => r && self.pred(o[3]),
                    Some(&"or") => r || self.pred(o[3]),
                    _ => r,
                };
                let dests: Vec<&str> = o[0].split('|').collect();
                self.preds.insert(dests[0].to_string(), r);
                if let Some(q) = dests.get(1) {
                    self.preds.insert(q.to_string(), !r);
                }
            }
            "mov" if ty == "pred" => {
                let r = self.pred(o[1]);
                self.preds.insert(o[0].to_string(), r);
            }
            "mov" if o[0].starts_with('{') => {
                // A 64-bit value split into its 32-bit halves (low first).
                let v = self.val(o[1]);
                let halves: Vec<&str> = o[0].trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim).collect();
                self.set(halves[0], v & 0xffff_ffff);
                self.set(halves[1], v >> 32);
            }
            "and" if ty == "pred" => {
                let r = self.pred(o[1]) && self.pred(o[2]);
                self.preds.insert(o[0].to_string(), r);
            }
            "or" if ty == "pred" => {
                let r = self.pred(o[1]) || self.pred(o[2]);
                self.preds.insert(o[0].to_string(), r);
            }
            // `cp.async.cg.shared.global [dst], [src], cp-size, src-size`: the global bytes are
            // read where the source size is not 0 (a zero size fills the shared bytes with zeros).
            "cp" if o.len() >= 3 && parts.contains(&"global") => {
                let (src, size) = (self.address(o[1]), self.val(o[2]));
                let src_size = o.get(3).map_or(size, |s| self.val(s));
                if src_size != 0 {
                    self.accesses.push((idx, src, src_size.min(size)));
                }
                // The shared destination is written whole (zeros past the source size). (Where the
                // test gave its address register no value, no shared access is looked at.)
                let dst = o[0].trim_start_matches('[').split(['+', ']']).next().unwrap_or("").trim();
                if self.regs.contains_key(dst) {
                    self.shared.push((idx, self.address(o[0]), size));
                }
            }
            "cp" | "bar" | "barrier" | "membar" | "fence" | "prefetch" => {}
            _ if float || parts[0] == "fma" || (parts[0] == "cvt" && parts.iter().skip(1).any(|p| p.starts_with('f'))) => {
                for d in o[0].trim_matches(|c| c == '{' || c == '}').split(',').map(str::trim) {
                    self.set(d, 0);
                }
            }
            head => {
                let v = self.int_op(head, &parts, o);
                self.set(o[0], v);
            }
        }
        Flow::Next
    }

    fn int_op(&self, head: &str, parts: &[&str], o: &[&str]) -> u64 {
        let ty = *parts.last().unwrap();
        let bits = bits_of(ty);
        let signed = ty.starts_with('s');
        let a = || self.val(o[1]);
        let b = || self.val(o[2]);
        let wide = parts.get(1) == Some(&"wide");
        let ext = |v: u64| if signed { sext(v, bits) as u64 } else { mask(v, bits) };
        let out_bits = if wide { 64 } else { bits };
        let r = match head {
            "mov" => a(),
            "add" => a().wrapping_add(b()),
            "sub" => a().wrapping_sub(b()),
            "mul" if wide => ext(a()).wrapping_mul(ext(b())),
            "mul" => a().wrapping_mul(b()),
            "mad" if wide => ext(a()).wrapping_mul(ext(b())).wrapping_add(self.val(o[3])),
            "mad" => a().wrapping_mul(b()).wrapping_add(self.val(o[3])),
            "shl" => a().wrapping_shl(b() as u32),
            "shr" if signed => (sext(a(), bits) >> (b() as u32).min(63)) as u64,
            "shr" => mask(a(), bits).wrapping_shr(b() as u32),
            "and" => a() & b(),
            "or" => a() | b(),
            "xor" => a() ^ b(),
            "not" => !a(),
            "neg" => a().wrapping_neg(),
            "abs" => sext(a(), bits).unsigned_abs(),
            "min" if signed => sext(a(), bits).min(sext(b(), bits)) as u64,
            "max" if signed => sext(a(), bits).max(sext(b(), bits)) as u64,
            "min" => mask(a(), bits).min(mask(b(), bits)),
            "max" => mask(a(), bits).max(mask(b(), bits)),
            "div" if signed => sext(a(), bits).wrapping_div(sext(b(), bits).max(1)) as u64,
            "div" => mask(a(), bits) / mask(b(), bits).max(1),
            "rem" if signed => sext(a(), bits).wrapping_rem(sext(b(), bits).max(1)) as u64,
            "rem" => mask(a(), bits) % mask(b(), bits).max(1),
            "bfe" => (mask(a(), bits) >> b().min(63)) & ((1u64 << self.val(o[3]).min(63)) - 1),
            "selp" => {
                if self.pred(o[3]) {
                    a()
                } else {
                    b()
                }
            }
            "cvta" => a(),
            "cvt" => {
                let (dt, st) = (parts[1], parts[2]);
                let sb = bits_of(st);
                let v = if st.starts_with('s') { sext(a(), sb) as u64 } else { mask(a(), sb) };
                return mask(v, bits_of(dt));
            }
            _ => panic!("interpreter: {head} ({})", parts.join(".")),
        };
        mask(r, out_bits)
    }
}

/// One versioned loop of a module: its range test, and the original loop's statements.
#[derive(Clone)]
struct Case {
    test: Vec<String>,
    /// The fast copy's statements, and its label.
    fast: Vec<(String, usize)>,
    fast_label: String,
    /// Original loop: (statement, line index in the versioned module).
    body: Vec<(String, usize)>,
    label: String,
    /// Line indices (versioned module) of the original loop's accesses whose checks the fast
    /// copy drops.
    covered_lines: Vec<usize>,
    regs: RegTypes,
}

fn cases(v: &Versioned<'_>) -> Vec<Case> {
    let lines: Vec<&str> = v.lines.iter().map(|l| l.as_ref()).collect();
    let mut out = Vec::new();
    let parsed = Line::read_all(lines.iter().copied());
    let mut regs = DeclaredRegs::default();
    let mut k = 0;
    while k < lines.len() {
        let t = strip_comment(lines[k]).trim();
        if t == "{" && v.inserted.contains(&k) {
            // The test, to its own closing brace (a call's `.param` block nests inside it).
            let mut test = Vec::new();
            let (mut j, mut depth) = (k + 1, 0);
            loop {
                let s = strip_comment(lines[j]).trim();
                match s {
                    "{" => depth += 1,
                    "}" if depth == 0 => break,
                    "}" => depth -= 1,
                    _ if s.starts_with(".reg") || s.starts_with(".param") => {}
                    _ => test.push(s.trim_end_matches(';').to_string()),
                }
                j += 1;
            }
            // The original loop's label: the target of the test's first failure branch.
            let label = test.iter().find(|b| b.starts_with("@!") && (b.contains(" bra ") || b.contains(" bra.uni "))).and_then(|b| b.rsplit(' ').next()).unwrap().to_string();
            let fast_label = strip_comment(lines[j + 1]).trim().trim_end_matches(':').to_string();
            let fast: Vec<(String, usize)> = (j + 2..lines.len())
                .take_while(|&i| !lines[i].contains("_done;"))
                .map(|i| (strip_comment(lines[i]).trim().trim_end_matches(';').to_string(), i))
                .filter(|(s, _)| !(s.is_empty() || s.starts_with('.')))
                .collect();
            // Covered accesses of the fast copy, by their origin.
            let covered: Vec<usize> = (j..lines.len()).take_while(|&i| !lines[i].contains("_done;")).filter(|i| v.covered.contains(i)).map(|i| v.origin[i]).collect();
            let start = (j..lines.len()).find(|&i| strip_comment(lines[i]).trim() == format!("{label}:")).unwrap();
            let mut body = Vec::new();
            let mut covered_lines = Vec::new();
            let mut i = start + 1;
            loop {
                let s = strip_comment(lines[i]).trim();
                if !(s.is_empty() || s.starts_with('.')) {
                    body.push((s.trim_end_matches(';').to_string(), i));
                    if covered.contains(&v.origin[i]) {
                        covered_lines.push(i);
                    }
                }
                if s.contains("bra") && s.trim_end_matches(';').ends_with(label.as_str()) {
                    break;
                }
                i += 1;
            }
            out.push(Case { test, fast, fast_label, body, label, covered_lines, regs: regs.at(&parsed, k).clone() });
            k = i;
        }
        if t.contains(".entry") {
            regs = DeclaredRegs::of_body(k);
        }
        k += 1;
    }
    out
}

/// Registers a statement list reads before writing them.
fn inputs(stmts: &[&str]) -> Vec<String> {
    let mut written = std::collections::HashSet::new();
    let mut out = Vec::new();
    for s in stmts {
        let Some(ins) = split_instr(s) else { continue };
        let head = ins.opcode.parts().next().unwrap();
        let has_dest = !matches!(head, "st" | "red" | "bra" | "bar" | "prefetch");
        let (dests, srcs) = if has_dest && !ins.operands.is_empty() { (&ins.operands[..1], &ins.operands[1..]) } else { (&ins.operands[..0], &ins.operands[..]) };
        for op in srcs.iter().chain(ins.guard.iter()) {
            for r in op.split(|c: char| !(c.is_ascii_alphanumeric() || c == '%' || c == '_' || c == '.')).filter(|r| r.starts_with('%') && !r.contains('.') && !r.starts_with("%gsh")) {
                if !written.contains(r) && !out.iter().any(|x| x == r) {
                    out.push(r.to_string());
                }
            }
        }
        for d in dests {
            for r in d.split(['{', '}', ',', '|']).map(str::trim).filter(|r| r.starts_with('%')) {
                written.insert(r.to_string());
            }
        }
    }
    out
}

/// Runs the original loop from `entry`: its accesses, and whether it ended within [`CAP`].
fn run_loop(case: &Case, entry: &Machine) -> (Vec<(usize, u64, u64)>, bool) {
    let (m, ended) = run_body(&case.body, &case.label, entry);
    (m.accesses, ended)
}

/// Runs a loop body (ending at its back edge to `label`) from `entry`.
fn run_body(body: &[(String, usize)], label: &str, entry: &Machine) -> (Machine, bool) {
    let mut m = Machine { regs: entry.regs.clone(), preds: entry.preds.clone(), ..Default::default() };
    for _ in 0..CAP {
        let mut again = false;
        for (s, line) in body {
            match m.exec(*line, s) {
                Flow::Next => {}
                Flow::Branch(l) => {
                    assert_eq!(l, label, "only the back edge branches");
                    again = true;
                }
                Flow::Call(..) | Flow::Ret => panic!("a loop body calls or returns: {s}"),
            }
        }
        if !again {
            return (m, true);
        }
    }
    (m, false)
}

/// The versioned loops of a module.
fn versioned_cases(src: &str) -> Vec<Case> {
    let lines = super::Line::read_all(src.split_inclusive('\n'));
    let bodies = super::bodies::Bodies::scan(&lines);
    cases(&version(&lines, &bodies, &super::branches::Branches::scan(&lines, &bodies), SCALE, true).expect("the module has versionable loops"))
}

/// The versioned loops of tests/data/loops.ptx (nvcc's) and tests/data/loops_triton.ptx
/// (Triton's forms), versioned once for all tests.
fn all_cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| {
        let mut all = versioned_cases(include_str!("../../tests/data/loops.ptx"));
        all.extend(triton_cases().iter().cloned());
        // (`behind` is tested on its own: its test passes only when the whole span fits, which
        // the pass rate of `ranges_that_fit_pass_the_test` is not about.)
        all.extend(clipped_cases()[..1].iter().cloned());
        all
    })
}

/// The versioned loops of tests/data/loops_triton.ptx, in its order.
fn triton_cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| versioned_cases(include_str!("../../tests/data/loops_triton.ptx")))
}

/// The versioned loops of tests/data/loops_clipped.ptx: `ahead`, then `behind`.
fn clipped_cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| versioned_cases(include_str!("../../tests/data/loops_clipped.ptx")))
}

/// The entry of a loop of loops_clipped.ptx: base pointer `%rd2` deep in the pool, count `%r1`,
/// bound `%r2`, counter `%r3` from 0.
fn clipped_entry(case: &Case, n: u32, valid: u32) -> Machine {
    let mut m = entry_state(case, &[0]);
    m.set("%rd2", POOL_BASE + (1 << 38));
    m.set("%r1", u64::from(n));
    m.set("%r2", u64::from(valid));
    m.set("%r3", 0);
    m.set("%r6", 0);
    m
}

/// The lowest and the end of the highest byte of the accesses on `lines`.
fn span(accesses: &[(usize, u64, u64)], lines: &[usize]) -> Option<(u64, u64, usize)> {
    let covered: Vec<(u64, u64)> = accesses.iter().filter(|a| lines.contains(&a.0)).map(|a| (a.1, a.2)).collect();
    let lo = covered.iter().map(|a| a.0).min()?;
    let hi = covered.iter().map(|a| a.0.saturating_add(a.1)).max()?;
    Some((lo, hi, covered.len()))
}

/// Entry values: 32-bit registers small integers, 64-bit ones either small integers or addresses
/// in the pool (the loops mix counters, bounds and pointers); `spread`: each pointer in its own
/// 4 GiB region, so that each range of the loop walks its own block.
fn entry_state(case: &Case, seed: &[u64]) -> Machine {
    entry_state_spread(case, seed, false)
}

fn entry_state_spread(case: &Case, seed: &[u64], spread: bool) -> Machine {
    let stmts: Vec<&str> = case.test.iter().chain(case.body.iter().map(|(s, _)| s)).map(String::as_str).collect();
    let mut m = Machine::default();
    for (k, r) in inputs(&stmts).into_iter().enumerate() {
        let x = seed[k % seed.len()].rotate_left(k as u32 * 7);
        let ty = case.regs.type_of(&r).unwrap_or("b64").to_string();
        if ty == "pred" {
            m.preds.insert(r, x & 1 == 1);
            continue;
        }
        let small = (x % 97) as i64 - 20;
        let region = if spread { (k as u64 + 1) << 32 } else { 0 };
        let v = if ty.ends_with("64") && !x.is_multiple_of(3) { POOL_BASE + (1 << 30) + region + ((x >> 8) % 512) * 4 } else { small as u64 };
        m.set(&r, mask(v, super::type_bits(&ty).unwrap_or(64)));
    }
    m
}

/// Runs the range test (its sweeps loop): whether it falls through to the fast copy.
fn range_test(case: &Case, entry: &Machine, alloc: (u64, u64), slab: bool) -> bool {
    range_test_blocks(case, entry, vec![Block { start: alloc.0, end: alloc.1, slab }])
}

/// [`range_test`] against several live blocks.
fn range_test_blocks(case: &Case, entry: &Machine, blocks: Vec<Block>) -> bool {
    let mut m = Machine { regs: entry.regs.clone(), preds: entry.preds.clone(), blocks, ..Default::default() };
    let labels: HashMap<&str, usize> = case.test.iter().enumerate().filter_map(|(i, s)| s.strip_suffix(':').map(|l| (l, i))).collect();
    let (mut pc, mut steps) = (0, 0u64);
    while pc < case.test.len() {
        steps += 1;
        assert!(steps < 10_000_000, "range test of {} does not end", case.label);
        let s = &case.test[pc];
        if s.ends_with(':') {
            pc += 1;
            continue;
        }
        match m.exec(usize::MAX, s) {
            Flow::Next => pc += 1,
            Flow::Branch(l) if l == case.label => return false,
            Flow::Branch(l) => pc = *labels.get(l.as_str()).unwrap_or_else(|| panic!("range test branches to {l}")),
            Flow::Call(ret, args) => {
                let ok = sweep_call(&m, &args);
                m.params.insert(ret, ok);
                pc += 1;
            }
            Flow::Ret => panic!("ret in a range test"),
        }
    }
    true
}

/// The statements of a `.func`'s body as the rewriter emits it (comments, declarations and
/// braces left out).
fn func_body(f: &str) -> Vec<String> {
    let open = f.find('{').unwrap();
    f[open + 1..f.rfind('}').unwrap()]
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").trim().trim_end_matches(';').to_string())
        .filter(|l| !(l.is_empty() || l.starts_with(".reg") || l == "{" || l == "}"))
        .collect()
}

/// Runs a called function's `body` on machine `m` (set up with the caller's memory), its
/// `formals` bound to the caller's `args`: the value of its result parameter `ret`.
fn run_function(body: &[String], mut m: Machine, caller: &Machine, formals: &[&str], args: &[String], ret: &str) -> u64 {
    for (formal, actual) in formals.iter().zip(args) {
        m.params.insert(formal.to_string(), caller.params[actual.as_str()]);
    }
    let labels: HashMap<&str, usize> = body.iter().enumerate().filter_map(|(i, s)| s.strip_suffix(':').map(|l| (l, i))).collect();
    let (mut pc, mut steps) = (0, 0u64);
    loop {
        steps += 1;
        assert!(steps < 10_000_000, "{ret}: the function does not end");
        let s = &body[pc];
        if s.ends_with(':') {
            pc += 1;
            continue;
        }
        match m.exec(usize::MAX, s) {
            Flow::Next => pc += 1,
            Flow::Branch(l) => pc = labels[l.as_str()],
            Flow::Ret => return m.params[ret],
            Flow::Call(..) => panic!("{ret}: a call in a called function"),
        }
        assert!(pc < body.len(), "{ret}: the function runs off its end");
    }
}

/// Runs the sweep `.func` the range test calls (its PTX, as the rewriter emits it) with the
/// caller's arguments, against the caller's allocation: its result.
fn sweep_call(caller: &Machine, args: &[String]) -> u64 {
    static BODY: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let body = BODY.get_or_init(|| func_body(&super::loops::sweep_function(SCALE)));
    run_function(body, Machine { blocks: caller.blocks.clone(), ..Default::default() }, caller, &["gasan_lo", "gasan_hi", "gasan_n"], args, "gasan_ok")
}

/// Runs the outside verdict's list scan (outside.rs, its PTX as the rewriter emits it) with the
/// caller's arguments, against the caller's outside table: its result.
fn outside_pass_call(caller: &Machine, args: &[String]) -> u64 {
    static BODY: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let body = BODY.get_or_init(|| {
        let mut f = String::new();
        super::outside::pass_function(&mut f);
        func_body(&f)
    });
    run_function(body, Machine { outside: caller.outside.clone(), ..Default::default() }, caller, &["o_addr", "o_width", "o_table"], args, "o_r")
}

/// `v` rounded down / up to a shadow granule.
/// The value a global load at `addr` reads (a hash of the address, below 1024).
fn loaded_value(addr: u64) -> u64 {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) & 0x3ff
}

fn granule_down(v: u64) -> u64 {
    v & !(SCALE.granule() - 1)
}
fn granule_up(v: u64) -> u64 {
    granule_down(v + SCALE.granule() - 1)
}

#[test]
fn the_test_module_has_each_loop_shape_versioned() {
    let cases = all_cases();
    assert!(cases.len() >= 12, "{} versioned loops", cases.len());
    assert!(cases.iter().all(|c| !c.covered_lines.is_empty()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn a_passing_range_test_covers_every_access_of_the_loop(seed in proptest::collection::vec(any::<u64>(), 8), shrink in 0u64..3, slack in 0u64..64, slab in any::<bool>()) {
        for case in all_cases() {
            let entry = entry_state(case, &seed);
            let (accesses, ended) = run_loop(case, &entry);
            let Some((lo, hi, _)) = span(&accesses, &case.covered_lines) else { continue };
            if !(POOL_BASE..POOL_BASE + POOL_SIZE).contains(&lo) || hi > POOL_BASE + POOL_SIZE || hi - lo > 1 << 34 {
                continue;
            }
            // An allocation missing `shrink` bytes at one end (0: exactly the touched bytes),
            // or one with slack around them. A slab block (no extent entry) starts on a granule,
            // as the allocator places it.
            let alloc = match (shrink, slab) {
                (0, false) => (lo - slack, hi + slack),
                (1, false) => (lo + 1, hi + slack),
                (_, false) => (lo - slack, hi - 1),
                (0, true) => (granule_down(lo - slack), hi + slack),
                (1, true) => (granule_up(lo + 1), hi + slack),
                (_, true) => (granule_down(lo - slack), hi - 1),
            };
            if range_test(case, &entry, alloc, slab) {
                prop_assert!(ended, "range test passed for a loop running past {CAP} iterations ({})", case.label);
                prop_assert!(shrink == 0, "range test passed with the allocation one byte short ({}, slab {slab}): {:#x}..{:#x} touched, {:#x}..{:#x} allocated", case.label, lo, hi, alloc.0, alloc.1);
            }
        }
    }
}

#[test]
fn triton_loops_are_versioned_with_every_access_covered() {
    // Masked loads in register-list braces, source-size-masked copies and 32-bit index sums
    // widened by `mad.wide` (tests/data/loops_triton.ptx) are all range-tested, with labels
    // only the debug sections name inside the loop.
    let cases = triton_cases();
    assert_eq!(cases.len(), 2, "both loops of loops_triton.ptx versioned");
    for case in cases {
        let accesses: Vec<usize> = case.body.iter().filter(|(s, _)| s.contains(".global")).map(|(_, l)| *l).collect();
        assert_eq!(case.covered_lines, accesses, "{}: every global access covered", case.label);
    }
    // The labels no branch names stay in the original loop only (a label is defined once).
    let labels = |stmts: &mut dyn Iterator<Item = &String>| stmts.filter(|s| s.starts_with("$L__tmp")).count();
    assert_eq!(labels(&mut cases[0].body.iter().map(|(s, _)| s)), 2);
    assert_eq!(labels(&mut cases[0].fast.iter().map(|(s, _)| s)), 0);
}

/// A Triton loop's entry: its base pointer (`%rd1`) deep inside the pool, so that an index sum
/// that wraps still lands in it; 32-bit index offset `%r1`, count `%r2`, stride `%r5`, counter
/// `%r3` from 0.
fn triton_entry(case: &Case, off: u32, n: u32, stride: i32) -> Machine {
    let mut m = entry_state(case, &[0]);
    m.set("%rd1", POOL_BASE + (1 << 38));
    m.set("%r1", u64::from(off));
    m.set("%r2", u64::from(n));
    m.set("%r5", u64::from(stride as u32));
    m.set("%r3", 0);
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// A 32-bit index sum near a wrap point: the range test passes against the block its first and
    /// last iterations touch only if every iteration touches that block (a sum that wraps on the
    /// way jumps 2^32 elements and must send the loop to its checked original); and, where nothing
    /// wraps, a block holding every access passes it.
    #[test]
    fn a_32_bit_index_that_wraps_never_passes_the_range_test(
        k in 0usize..2,
        near in prop_oneof![Just(0i64), Just(1i64 << 31), Just(1i64 << 32)],
        back in -40i64..40,
        n in 1u32..40,
        stride in -3i32..4,
    ) {
        let case = &triton_cases()[k];
        let off = (near - back) as u32;
        let entry = triton_entry(case, off, n, stride);
        let (accesses, ended) = run_loop(case, &entry);
        prop_assert!(ended);
        let covered: Vec<(u64, u64)> = accesses.iter().filter(|a| case.covered_lines.contains(&a.0)).map(|a| (a.1, a.2)).collect();
        prop_assert_eq!(covered.len(), n as usize, "one access per iteration");
        let (first, last) = (covered[0], covered[covered.len() - 1]);
        let claimed = (first.0.min(last.0), (first.0 + first.1).max(last.0 + last.1));
        let touched = span(&accesses, &case.covered_lines).unwrap();
        let inside = covered.iter().all(|a| a.0 >= claimed.0 && a.0 + a.1 <= claimed.1);
        if range_test(case, &entry, claimed, false) {
            prop_assert!(inside, "{}: off {off:#x} n {n} stride {stride}: the test passed for {:#x?} but the loop touched {:#x?}", case.label, claimed, (touched.0, touched.1));
        }
        // (rows_masked steps its index by 1, strided_tiles by the stride.)
        let step = if k == 0 { 1 } else { i64::from(stride) };
        let wraps = (0..i64::from(n)).any(|i| {
            let x = i64::from(off as i32) + i * step;
            x != i64::from(x as i32)
        });
        if !wraps && off < 1 << 31 {
            prop_assert!(range_test(case, &entry, (touched.0, touched.1), false), "{}: off {off:#x} n {n} stride {stride}: no wrap, and the test failed", case.label);
        }
    }
}

#[test]
fn the_fast_copy_computes_what_the_loop_computes() {
    // Same entry state: the same registers at the exit and the same accesses (the fast copy may
    // issue covered loads earlier in an iteration, never different ones).
    let mut compared = 0;
    for seed in 0..48u64 {
        let seed: Vec<u64> = (0..8).map(|k| seed.wrapping_mul(0xD6E8_FEB8_6659_FD93).rotate_left(k * 11) ^ k as u64).collect();
        for case in all_cases() {
            let entry = entry_state(case, &seed);
            let (slow, ended) = run_body(&case.body, &case.label, &entry);
            if !ended {
                continue;
            }
            let (fast, fast_ended) = run_body(&case.fast, &case.fast_label, &entry);
            assert!(fast_ended, "{}", case.fast_label);
            let regs = |m: &Machine| {
                let mut v: Vec<(String, u64)> = m.regs.iter().map(|(k, v)| (k.clone(), *v)).collect();
                v.sort();
                v
            };
            assert_eq!(regs(&slow), regs(&fast), "{}", case.fast_label);
            let accesses = |m: &Machine| {
                let mut v: Vec<(u64, u64)> = m.accesses.iter().map(|a| (a.1, a.2)).collect();
                v.sort();
                v
            };
            assert_eq!(accesses(&slow), accesses(&fast), "{}", case.fast_label);
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared}");
}

#[test]
fn ranges_that_fit_pass_the_test() {
    // Fixed entry states with ordinary values: the test passes for most loops when the allocation
    // is exactly what they touch.
    let (mut passed, mut total, mut slab_passed, mut slab_total) = (0, 0, 0, 0);
    for seed in 0..64u64 {
        let seed: Vec<u64> = (0..8).map(|k| seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(k * 9) ^ k as u64).collect();
        for case in all_cases() {
            let entry = entry_state(case, &seed);
            let (accesses, ended) = run_loop(case, &entry);
            let Some((lo, hi, n)) = span(&accesses, &case.covered_lines) else { continue };
            if !ended || n < 2 {
                continue;
            }
            if !(POOL_BASE..POOL_BASE + POOL_SIZE).contains(&lo) || hi - lo > 1 << 30 {
                continue;
            }
            total += 1;
            passed += usize::from(range_test(case, &entry, (lo, hi), false));
            // The same block in a shared slab: where every range of the loop walks by a small
            // constant step (each gets a sweep: as many as extent lookups), the sweep passes it
            // unless the range spans more granules than the loop has iterations.
            let lookups = case.test.iter().filter(|t| t.contains("ld.global.v2.u64")).count();
            let sweeps = case.test.iter().filter(|t| t.contains(crate::abi::RANGE_SWEEP_SYMBOL)).count();
            let granules = (granule_up(hi) - granule_down(lo)) >> SCALE.shift();
            if lookups == sweeps && granules <= n as u64 {
                slab_total += 1;
                slab_passed += usize::from(range_test(case, &entry, (granule_down(lo), hi), true));
            }
        }
    }
    assert!(total > 50, "only {total} ordinary runs");
    assert!(passed * 10 >= total * 9, "{passed} of {total} fitting runs passed the range test");
    assert!(slab_total > 50, "only {slab_total} ordinary runs over few granules");
    assert!(slab_passed * 10 >= slab_total * 9, "{slab_passed} of {slab_total} fitting slab blocks passed the range test");
}

/// The bytes `[lo, hi)` the loop's `accesses` (line, address, width) touch in the tensor at
/// `base`: each test tensor has 16 GiB of the pool to itself.
fn touched(accesses: &[(usize, u64, u64)], base: u64) -> (u64, u64) {
    let mine = accesses.iter().filter(|x| (x.1 >> 34) == (base >> 34));
    (mine.clone().map(|x| x.1).min().expect("an access"), mine.map(|x| x.1 + x.2).max().expect("an access"))
}

/// A loop in the forms of Triton's attention and matmul reading their tiles: rows of one tensor
/// at constant offsets from each other (`a` at `off + k*stride` and `+ 64`, each row its own
/// address register off the parameter; `+ 128` off a row pointer computed before the loop), and
/// a row of another tensor (`b`).
const TWO_TENSORS: &str = "
.version 8.7
.target sm_90a
.address_size 64
.visible .entry two_tensors(
	.param .u64 two_tensors_param_0,
	.param .u64 two_tensors_param_1,
	.param .u32 two_tensors_param_2,
	.param .u32 two_tensors_param_3,
	.param .u32 two_tensors_param_4
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<8>;
	.reg .f32 	%f<6>;

	ld.param.u64 	%rd1, [two_tensors_param_0];
	ld.param.u64 	%rd2, [two_tensors_param_1];
	ld.param.u32 	%r1, [two_tensors_param_2];
	ld.param.u32 	%r2, [two_tensors_param_3];
	ld.param.u32 	%r5, [two_tensors_param_4];
	add.s32 	%r8, %r1, 128;
	mad.wide.s32 	%rd6, %r8, 4, %rd1;
	mov.u32 	%r3, 0;
	mov.u32 	%r6, 0;
$L__BB0_1:
	add.s32 	%r4, %r1, %r3;
	mad.wide.s32 	%rd3, %r4, 4, %rd1;
	ld.global.f32 	%f1, [%rd3];
	add.s32 	%r7, %r4, 64;
	mad.wide.s32 	%rd5, %r7, 4, %rd1;
	ld.global.f32 	%f2, [%rd5];
	mul.wide.s32 	%rd7, %r3, 4;
	add.s64 	%rd8, %rd6, %rd7;
	ld.global.f32 	%f4, [%rd8];
	add.f32 	%f5, %f1, %f2;
	add.f32 	%f3, %f5, %f4;
	mad.wide.s32 	%rd4, %r4, 4, %rd2;
	st.global.f32 	[%rd4], %f3;
	add.s32 	%r3, %r3, %r5;
	add.s32 	%r6, %r6, 1;
	setp.lt.s32 	%p2, %r6, %r2;
	@%p2 bra 	$L__BB0_1;
	ret;
}
";

#[test]
fn rows_off_one_pointer_share_a_lookup_and_other_pointers_keep_theirs() {
    // `a`'s three rows are looked up as one range (their union), `b`'s alone: two lookups. With
    // each tensor its own block, exactly what the loop touches in it, the test passes (the
    // union of ranges off different pointers would span both blocks and fail it); with either
    // block one byte short at either end it fails.
    let cases = versioned_cases(TWO_TENSORS);
    let case = &cases[0];
    assert_eq!(case.covered_lines.len(), 4);
    assert_eq!(case.test.iter().filter(|t| t.contains("ld.global.v2.u64")).count(), 2, "one lookup for a's rows, one for b's");
    let (a, b) = (POOL_BASE + (1 << 34), POOL_BASE + (2 << 34));
    for (off, n, stride) in [(0u32, 1u32, 7i32), (1000, 5, 33), (3, 40, 100), (2000, 17, 9), (64, 9, 1)] {
        let mut entry = entry_state(case, &[0]);
        let row = a + (u64::from(off) + 128) * 4;
        for (reg, v) in [("%rd1", a), ("%rd2", b), ("%rd6", row), ("%r1", u64::from(off)), ("%r2", u64::from(n)), ("%r5", u64::from(stride as u32)), ("%r3", 0), ("%r6", 0)] {
            entry.set(reg, v);
        }
        let (accesses, ended) = run_loop(case, &entry);
        assert!(ended && accesses.len() == 4 * n as usize);
        let spans = [touched(&accesses, a), touched(&accesses, b)];
        let blocks = |short: Option<(usize, bool)>| -> Vec<Block> {
            let shorten = |i: usize, (lo, hi): (u64, u64)| match short {
                Some((j, true)) if j == i => (lo + 1, hi),
                Some((j, false)) if j == i => (lo, hi - 1),
                _ => (lo, hi),
            };
            spans.iter().enumerate().map(|(i, &s)| shorten(i, s)).map(|(start, end)| Block { start, end, slab: false }).collect()
        };
        assert!(range_test_blocks(case, &entry, blocks(None)), "off {off} n {n} stride {stride}: {spans:#x?}");
        for j in 0..2 {
            for at_start in [true, false] {
                assert!(!range_test_blocks(case, &entry, blocks(Some((j, at_start)))), "off {off} n {n} stride {stride}: block {j} short at its {}", if at_start { "start" } else { "end" });
            }
        }
    }
}

/// Two tensors' columns walked as nvcc walks them: each a pointer advanced by a stride computed
/// before the loop, its rows that pointer plus the stride, once and twice (`add.s64` of the
/// previous row and the stride). The stride is the one invariant both tensors' rows add.
const TWO_COLUMNS: &str = "
.version 8.7
.target sm_90a
.address_size 64
.visible .entry two_columns(
	.param .u64 two_columns_param_0,
	.param .u64 two_columns_param_1,
	.param .u32 two_columns_param_2,
	.param .u32 two_columns_param_3
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<12>;
	.reg .f32 	%f<8>;

	ld.param.u64 	%rd1, [two_columns_param_0];
	ld.param.u64 	%rd2, [two_columns_param_1];
	ld.param.u32 	%r1, [two_columns_param_2];
	ld.param.u32 	%r2, [two_columns_param_3];
	mul.wide.s32 	%rd5, %r2, 4;
	mov.u32 	%r3, 0;
$L__BB0_1:
	add.s64 	%rd6, %rd1, %rd5;
	add.s64 	%rd7, %rd6, %rd5;
	ld.global.f32 	%f1, [%rd7];
	add.s64 	%rd8, %rd2, %rd5;
	add.s64 	%rd9, %rd8, %rd5;
	ld.global.f32 	%f2, [%rd9];
	add.f32 	%f3, %f1, %f2;
	st.global.f32 	[%rd9], %f3;
	add.s64 	%rd1, %rd7, %rd5;
	add.s64 	%rd2, %rd9, %rd5;
	add.s32 	%r3, %r3, 1;
	setp.lt.s32 	%p2, %r3, %r1;
	@%p2 bra 	$L__BB0_1;
	ret;
}
";

#[test]
fn rows_off_a_shared_stride_are_not_taken_for_one_pointer() {
    // Both tensors' rows add the same invariant (the stride), which is no pointer: each tensor
    // keeps a lookup of its own, and with a block per tensor, exactly what the loop touches in
    // it, the test passes.
    let cases = versioned_cases(TWO_COLUMNS);
    let case = &cases[0];
    let (a, b) = (POOL_BASE + (1 << 34), POOL_BASE + (2 << 34));
    for (n, stride) in [(1u32, 3u32), (4, 16), (9, 100)] {
        let mut entry = entry_state(case, &[0]);
        for (reg, v) in [("%rd1", a), ("%rd2", b), ("%rd5", u64::from(stride) * 4), ("%r1", u64::from(n)), ("%r2", u64::from(stride)), ("%r3", 0)] {
            entry.set(reg, v);
        }
        let (accesses, ended) = run_loop(case, &entry);
        assert!(ended && accesses.len() == 3 * n as usize);
        let blocks: Vec<Block> = [a, b]
            .iter()
            .map(|&base| {
                let (start, end) = touched(&accesses, base);
                Block { start, end, slab: false }
            })
            .collect();
        assert!(range_test_blocks(case, &entry, blocks), "n {n} stride {stride}: the two tensors' rows were looked up as one range");
    }
}

#[test]
fn mixed_loops_sweep_their_slab_ranges() {
    // Loops whose ranges walk different blocks, some by a small constant step (swept when their
    // extent lookup fails) and some not (gemm_row: a row of A and a column of B). With each block
    // in a shared slab or not, the test never passes when a block misses one byte its range
    // touches, and it passes with the blocks of sweepable ranges in slabs.
    let count = |c: &Case, what: &str| c.test.iter().filter(|t| t.contains(what)).count();
    let mixed: Vec<&Case> = all_cases().iter().filter(|c| (1..count(c, "ld.global.v2.u64")).contains(&count(c, crate::abi::RANGE_SWEEP_SYMBOL))).collect();
    assert!(!mixed.is_empty(), "no loop of loops.ptx mixes sweepable ranges with others");
    let (mut runs, mut slab_passes) = (0, 0);
    // Many seeds: few entry states give every pointer an address and the column a small stride.
    for seed in 0..512u64 {
        let seed: Vec<u64> = (0..8).map(|k| seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(k * 7) ^ k as u64).collect();
        for case in &mixed {
            let entry = entry_state_spread(case, &seed, true);
            let (accesses, ended) = run_loop(case, &entry);
            if !ended {
                continue;
            }
            // The covered accesses by statement, statements whose spans overlap merged: one
            // block per range.
            // (A run touching bytes outside the pool is skipped, as one whose blocks would be.)
            let covered: Vec<(usize, u64, u64)> = accesses.iter().copied().filter(|a| case.covered_lines.contains(&a.0)).collect();
            if covered.iter().any(|&(_, a, w)| a < POOL_BASE || a >= POOL_BASE + POOL_SIZE - w) {
                continue;
            }
            let mut by_line: std::collections::BTreeMap<usize, (u64, u64, usize)> = Default::default();
            for (line, a, w) in covered {
                let g = by_line.entry(line).or_insert((u64::MAX, 0, 0));
                *g = (g.0.min(a), g.1.max(a + w), g.2 + 1);
            }
            let mut groups: Vec<(u64, u64, usize)> = by_line.into_values().collect();
            groups.sort_unstable();
            let mut merged: Vec<(u64, u64, usize)> = Vec::new();
            for g in groups {
                match merged.last_mut() {
                    // Overlapping, or too close for a redzone and a granule-aligned start.
                    Some(m) if g.0 < granule_up(m.1) + SCALE.granule() => *m = (m.0, m.1.max(g.1), m.2.min(g.2)),
                    _ => merged.push(g),
                }
            }
            let spans: Vec<(u64, u64)> = merged.iter().map(|g| (g.0, g.1)).collect();
            if spans.len() < 2 || merged.iter().any(|g| g.2 < 2) || spans.iter().any(|&(lo, hi)| lo < POOL_BASE || hi > POOL_BASE + POOL_SIZE) {
                continue;
            }
            runs += 1;
            let mut slab_passed = false;
            for slabs in 0..1u32 << spans.len() {
                // Block `i` exactly its range's bytes, or one byte short at its start or end.
                let blocks = |short: Option<(usize, bool)>| -> Vec<Block> {
                    spans
                        .iter()
                        .enumerate()
                        .map(|(i, &(lo, hi))| {
                            let slab = slabs >> i & 1 == 1;
                            let (start, end) = match short {
                                Some((j, true)) if j == i => (lo + 1, hi),
                                Some((j, false)) if j == i => (lo, hi - 1),
                                _ => (lo, hi),
                            };
                            // Slab blocks start on a granule, as the allocator places them.
                            let start = if !slab {
                                start
                            } else if start == lo {
                                granule_down(start)
                            } else {
                                granule_up(start)
                            };
                            Block { start, end, slab }
                        })
                        .collect()
                };
                if slabs != 0 && range_test_blocks(case, &entry, blocks(None)) {
                    slab_passed = true;
                }
                for j in 0..spans.len() {
                    for at_start in [true, false] {
                        assert!(
                            !range_test_blocks(case, &entry, blocks(Some((j, at_start)))),
                            "{}: range test passed with block {j} one byte short ({}), blocks {:?}, ranges {spans:#x?}",
                            case.label,
                            if at_start { "start" } else { "end" },
                            blocks(Some((j, at_start)))
                        );
                    }
                }
            }
            slab_passes += usize::from(slab_passed);
        }
    }
    assert!(runs > 20, "only {runs} runs of mixed loops over separate blocks");
    assert!(slab_passes * 10 >= runs * 9, "{slab_passes} of {runs} runs of mixed loops passed with a sweepable range's block in a slab");
}

/// A loop of Triton's staged form (loops.rs, `SharedTest`): each iteration copies 16 global bytes
/// (or stores a loaded word) into one of `c + 1` shared buffers of `1 << shift` bytes in dynamic
/// shared memory, picked by a stage counter that wraps from `entry`, at an offset swizzled from
/// the thread's index, plus `off`.
#[derive(Clone, Debug)]
struct Staged {
    c: i64,
    entry: i64,
    shift: u32,
    /// 0: `tid & m1`; 1, 2: `((tid << a) & m1) xor / or ((tid << b) & m2)`; 3: `bfe(tid, a, b + 1) << 4`;
    /// 4: `((tid << a) + tid) | 0` (bits that overlap: a carry can set any bit up to the sum's).
    swizzle: u8,
    m1: i64,
    m2: i64,
    a: u32,
    b: u32,
    off: i64,
    copy: bool,
}

/// Where the simulated block's dynamic shared memory starts.
const SMEM: u64 = 0x400;

impl Staged {
    /// The statements before the loop that compute its inputs from the thread's index.
    fn preamble(&self) -> Vec<String> {
        let mut p = vec!["mov.u32 %r1, %tid.x".to_string()];
        match self.swizzle {
            0 => p.push(format!("and.b32 %r2, %r1, {}", self.m1)),
            1 | 2 => p.extend([
                format!("shl.b32 %r11, %r1, {}", self.a),
                format!("and.b32 %r12, %r11, {}", self.m1),
                format!("shl.b32 %r13, %r1, {}", self.b),
                format!("and.b32 %r14, %r13, {}", self.m2),
                format!("{}.b32 %r2, %r12, %r14", if self.swizzle == 1 { "xor" } else { "or" }),
            ]),
            3 => p.extend([format!("bfe.u32 %r15, %r1, {}, {}", self.a, self.b + 1), "shl.b32 %r2, %r15, 4".to_string()]),
            _ => p.extend([format!("shl.b32 %r11, %r1, {}", self.a), "add.s32 %r12, %r11, %r1".to_string(), "or.b32 %r2, %r12, 0".to_string()]),
        }
        p.extend(["mov.b32 %r3, smem".to_string(), format!("mov.b32 %r4, {}", self.entry), "mov.b32 %r5, 0".to_string()]);
        p
    }

    fn module(&self) -> String {
        let access = if self.copy { format!("cp.async.cg.shared.global [%r10+{}], [%rd1], 16, 16;", self.off) } else { format!("ld.global.u32 %r6, [%rd1];\nst.shared.u32 [%r10+{}], %r6;", self.off) };
        let pre: String = self.preamble().iter().map(|s| format!("{s};\n")).collect();
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.extern .shared .align 16 .b8 smem[];\n.visible .entry k(.param .u64 p, .param .u32 n)\n{{\n.reg .pred %p<4>;\n.reg .b32 %r<24>;\n.reg .b64 %rd<4>;\nld.param.u64 %rd1, [p];\nld.param.u32 %r20, [n];\n{pre}$L__BB0_1:\nadd.s32 %r7, %r4, 1;\nsetp.gt.s32 %p1, %r7, {};\nselp.b32 %r4, 0, %r7, %p1;\nshl.b32 %r8, %r4, {};\nadd.s32 %r9, %r3, %r8;\nadd.s32 %r10, %r9, %r2;\n{access}\nadd.s64 %rd1, %rd1, 16;\nadd.s32 %r5, %r5, 1;\nsetp.lt.s32 %p2, %r5, %r20;\n@%p2 bra $L__BB0_1;\nret;\n}}\n",
            self.c, self.shift
        )
    }

    /// The highest end the analysis can claim: the counter's highest buffer, the swizzle's
    /// possible bits, the offset and the width.
    fn end_bound(&self) -> i64 {
        let ones = |m: i64| if m <= 0 { 0 } else { (1i64 << (64 - (m as u64).leading_zeros())) - 1 };
        let tid_bits = |shift: u32| 1023i64 << shift;
        let swizzle = match self.swizzle {
            0 => self.m1,
            1 | 2 => (tid_bits(self.a) & self.m1) | (tid_bits(self.b) & self.m2),
            3 => (ones(1023) >> self.a & ((1 << (self.b + 1)) - 1)) << 4,
            _ => ones((1023 << self.a) + 1023),
        };
        (self.c << self.shift) + swizzle + self.off + if self.copy { 16 } else { 4 }
    }
}

fn staged() -> impl Strategy<Value = Staged> {
    (0i64..4, -3i64..6, 4u32..13, 0u8..5, 0i64..4096, 0i64..4096, 0u32..6, 0u32..6, -8i64..64, any::<bool>()).prop_map(|(c, entry, shift, swizzle, m1, m2, a, b, off, copy)| Staged {
        c,
        entry: entry.min(c + 2),
        shift,
        swizzle,
        m1,
        m2,
        a,
        b,
        off: off * 16,
        copy,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    /// Wherever the range test passes, the shared accesses whose checks the fast copy drops stay
    /// inside dynamic shared memory for the thread and every iteration; where the counter starts
    /// in its range and the launch's size holds the claimed end, it passes.
    #[test]
    fn staged_shared_accesses_the_range_test_covers_stay_inside_dynamic_shared_memory(st in staged(), tids in proptest::collection::vec(0u64..1024, 3), n in 1u64..10, slack in -64i64..64, below in proptest::option::of(0i64..100)) {
        let text = st.module();
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = super::bodies::Bodies::scan(&lines);
        let v = version(&lines, &bodies, &super::branches::Branches::scan(&lines, &bodies), SCALE, true).expect("the loop is versioned");
        let case = &cases(&v)[0];
        let covered: Vec<usize> = case.fast.iter().map(|(_, l)| *l).filter(|l| v.space_covered.contains(l)).collect();
        // Every generated form is one the analysis reads: only a negative offset leaves the
        // access checked.
        prop_assert_eq!(covered.is_empty(), st.off < 0, "{:?}", st);
        let bound = st.end_bound();
        let global = Block { start: POOL_BASE + (1 << 30), end: POOL_BASE + (1 << 30) + 16 * n, slab: false };
        for tid in tids.into_iter().chain([0, 1023]) {
            // The launch's size: about the claimed end, or anywhere below it.
            let dsz = below.map_or(bound + slack, |pct| bound * pct / 100).clamp(0, 1 << 20) as u64;
            let mut entry = Machine::default();
            entry.set("%tid.x", tid);
            entry.set("smem", SMEM);
            entry.set("%dynamic_smem_size", dsz);
            entry.set("%rd1", global.start);
            entry.set("%r20", n);
            for s in st.preamble() {
                entry.exec(usize::MAX, &s);
            }
            let passed = range_test_blocks(case, &entry, vec![global]);
            if passed {
                let (m, ended) = run_body(&case.fast, &case.fast_label, &entry);
                prop_assert!(ended);
                for &(line, addr, w) in m.shared.iter().filter(|a| covered.contains(&a.0)) {
                    let at = addr.wrapping_sub(SMEM) as i64;
                    prop_assert!(at >= 0 && at + w as i64 <= dsz as i64, "{:?} tid {}: the fast copy's line {} writes at {} (+{}) in {} bytes", st, tid, line, at, w, dsz);
                }
            }
            if !covered.is_empty() && (0..=st.c).contains(&st.entry) && dsz as i64 >= bound {
                prop_assert!(passed, "{:?} tid {}: the test failed with the counter in range and {} bytes for an end of {}", st, tid, dsz, bound);
            }
        }
    }
}

#[test]
fn a_counter_read_before_its_loop_bounds_nothing() {
    // `%r21` is computed from the counter's earlier value (3, past its range 0..=2) before the
    // loop: the stores through it keep their checks. Without that read they are covered.
    let covered = |text: &str| {
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = super::bodies::Bodies::scan(&lines);
        version(&lines, &bodies, &super::branches::Branches::scan(&lines, &bodies), SCALE, true).expect("versioned").space_covered.len()
    };
    let st = Staged { c: 2, entry: 1, shift: 12, swizzle: 0, m1: 127, m2: 0, a: 0, b: 0, off: 0, copy: false };
    let plain = st.module();
    assert_eq!(covered(&plain), 1);
    let early = plain.replace("mov.b32 %r4, 1;", "mov.b32 %r4, 3;\nshl.b32 %r21, %r4, 12;\nmov.b32 %r4, 1;").replace("add.s32 %r10, %r9, %r2;", "add.s32 %r16, %r9, %r2;\nadd.s32 %r10, %r16, %r21;");
    assert_ne!(early, plain);
    assert_eq!(covered(&early), 0);
}

/// Shared checks by execution: the planner's check of a real statement (its width, lanes and
/// bounds), run by the interpreter from a chosen address and lane, is bad exactly when a lane that
/// supplies an address reaches outside the variable.
mod space_checks {
    use super::super::access::split_instr;
    use super::{Flow, Machine};
    use crate::ptx::bodies::Bodies;
    use crate::ptx::spaces::{analyze, check_body_lines, plan};
    use crate::ptx::Line;
    use proptest::prelude::*;

    const BASE: u64 = 0x400;

    /// The module's one kernel: a 1024-byte shared tile `t`, `%r2` = `t` + `%r9`, `%r3` = 24.
    const MODULE: &str = ".visible .entry k(\n.param .u32 p\n)\n{\n.reg .b32 %r<20>;\n\
        .shared .align 16 .b8 t[1024];\nmov.u32 %r1, t;\nadd.s32 %r2, %r1, %r9;\nmov.u32 %r3, 24;\n}\n";

    /// `%gsq0` after the check of `stmt` for an address `offset` bytes from `t`, in lane `lane`,
    /// with `%r5` = 100 (a bulk copy's size).
    fn bad(stmt: &str, offset: i64, lane: u64) -> bool {
        let lines = Line::read_all(MODULE.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        let m = analyze(&lines, &bodies, &super::super::defs::ModuleDefs::new(&lines, &bodies), &Default::default());
        let f = &m.functions["k"];
        let c = plan(&split_instr(stmt).unwrap(), &m, f, &|_| Some(32)).unwrap_or_else(|| panic!("no check for {stmt}"));
        let mut machine = Machine::default();
        for (r, v) in [("t", BASE), ("%r2", BASE.wrapping_add(offset as u64) & 0xffff_ffff), ("%laneid", lane), ("%r5", 100)] {
            machine.regs.insert(r.to_string(), v);
        }
        for line in check_body_lines(&c, None) {
            for s in line.split(';').map(str::trim).filter(|s| !s.is_empty() && !s.starts_with('.')) {
                assert!(matches!(machine.exec(0, s), Flow::Next), "{s}");
            }
        }
        machine.pred("%gsq0")
    }

    fn outside(offset: i64, width: i64) -> bool {
        offset < 0 || offset + width > 1024
    }

    proptest! {
        #[test]
        fn copies_matrix_rows_and_tiles_are_bad_exactly_outside_the_variable(offset in -2048i64..2048, lane in 0u64..32) {
            let frag = "{%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}";
            prop_assert_eq!(bad("cp.async.cg.shared.global [%r2], [%rd1], 16, 16", offset, lane), outside(offset, 16));
            prop_assert_eq!(bad("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r2]", offset, lane), outside(offset, 16));
            prop_assert_eq!(bad("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r10, %r11}, [%r2]", offset, lane), lane < 16 && outside(offset, 16));
            prop_assert_eq!(bad("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%r2], {%r10}", offset, lane), lane < 8 && outside(offset, 16));
            // 16x16 halves, rows 24 elements apart: 15 x 48 + 32 bytes.
            prop_assert_eq!(bad(&format!("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {frag}, [%r2], %r3"), offset, lane), outside(offset, 15 * 48 + 32));
            prop_assert_eq!(bad(&format!("wmma.store.d.sync.aligned.col.m16n16k16.shared.f32 [%r2], {frag}, 16"), offset, lane), outside(offset, 1024));
            prop_assert_eq!(bad("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1], %r5, [%r4]", offset, lane), outside(offset, 100));
            prop_assert_eq!(bad("cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r2], 256", offset, lane), outside(offset, 256));
        }
    }
}

/// Kernel-parameter bounds (bounds.rs), by execution: a straight-line kernel whose input pointer
/// points into a large block (or a shared-slab block, which has no extent entry) reads three
/// words at offsets from its parameters and stores one through its output pointer; the checked
/// kernel must report exactly when some access leaves its block, whether the fast path or the
/// shadow decided — with bounds on and off, in halt and recover mode and with the aligned pool's
/// probe.
fn run_checked_kernel(opts: super::InstrumentOptions, params: &[(&str, u64)], blocks: Vec<Block>) -> bool {
    run_checked(POINTER_KERNEL, opts, params, blocks)
}

/// [`run_checked_kernel`]'s kernel: 64-bit word offsets, scaled by `shl`.
const POINTER_KERNEL: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_out, .param .u64 k_in, .param .u64 k_d0, .param .u64 k_d1, .param .u64 k_d2, .param .u64 k_d3)\n{\n\t.reg .b64 %rd<20>;\n\t.reg .f32 %f<4>;\n\tld.param.u64 %rd1, [k_in];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.param.u64 %rd3, [k_out];\n\tcvta.to.global.u64 %rd4, %rd3;\n\tld.param.u64 %rd5, [k_d0];\n\tld.param.u64 %rd6, [k_d1];\n\tld.param.u64 %rd7, [k_d2];\n\tld.param.u64 %rd8, [k_d3];\n\tshl.b64 %rd13, %rd5, 2;\n\tshl.b64 %rd14, %rd6, 2;\n\tshl.b64 %rd15, %rd7, 2;\n\tshl.b64 %rd16, %rd8, 2;\n\tadd.s64 %rd9, %rd2, %rd13;\n\tld.global.f32 %f1, [%rd9];\n\tadd.s64 %rd10, %rd2, %rd14;\n\tld.global.f32 %f2, [%rd10];\n\tadd.s64 %rd11, %rd2, %rd15;\n\tld.global.f32 %f3, [%rd11];\n\tadd.s64 %rd12, %rd4, %rd16;\n\tst.global.f32 [%rd12], %f1;\n\tret;\n}\n";

/// Whether kernel `k` of `src`, checked with `opts` and run with `params` against `blocks`,
/// reports.
fn run_checked(src: &str, opts: super::InstrumentOptions, params: &[(&str, u64)], blocks: Vec<Block>) -> bool {
    run_checked_outside(src, opts, params, blocks, None)
}

/// [`run_checked`] with an outside-range table.
fn run_checked_outside(src: &str, opts: super::InstrumentOptions, params: &[(&str, u64)], blocks: Vec<Block>, outside: Option<OutsideTable>) -> bool {
    run_traced(src, opts, params, blocks, outside).0
}

/// [`run_checked_outside`], and the machine as it stopped (its accesses, the report registers).
fn run_traced(src: &str, opts: super::InstrumentOptions, params: &[(&str, u64)], blocks: Vec<Block>, outside: Option<OutsideTable>) -> (bool, Machine) {
    run_traced_on(src, opts, params, Machine { blocks, outside, ..Machine::default() })
}

/// [`run_traced`] on machine `m` (its blocks, outside table and registers set up by the caller).
fn run_traced_on(src: &str, opts: super::InstrumentOptions, params: &[(&str, u64)], m: Machine) -> (bool, Machine) {
    run_traced_through(src, opts, params, m, false)
}

/// [`run_traced_on`]; `through_stubs`: a failed check's branch runs its stub to the report block
/// (which leaves the report registers as the report block reads them), else it reports at once.
fn run_traced_through(src: &str, opts: super::InstrumentOptions, params: &[(&str, u64)], mut m: Machine, through_stubs: bool) -> (bool, Machine) {
    let ptx = super::instrument_ptx(src, &opts).expect("instruments").ptx;
    let lines = super::Line::read_all(ptx.split_inclusive('\n'));
    let body = super::bodies::Bodies::scan(&lines).iter().find(|b| b.name == "k").expect("the kernel").clone();
    let mut stmts: Vec<String> = Vec::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    for line in &lines[body.open + 1..body.close] {
        for st in line.stmts() {
            let t = st.text.trim();
            if let Some(l) = t.strip_suffix(':') {
                labels.insert(l.to_string(), stmts.len());
            } else if !t.is_empty() && !t.starts_with(['.', '{', '}']) {
                stmts.push(t.to_string());
            }
        }
    }
    for (name, v) in params {
        m.params.insert(name.to_string(), *v);
    }
    let mut pc = 0;
    while pc < stmts.len() {
        if stmts[pc] == "trap" {
            return (true, m);
        }
        // (`wgmma` computes nothing a check reads.)
        if stmts[pc].starts_with("wgmma") {
            pc += 1;
            continue;
        }
        // Recover mode reports through a guarded call (and goes on); halt mode, in a function
        // that uses `wgmma`, through a guarded call that does not come back.
        if stmts[pc].contains("__gasan_report") || stmts[pc].contains("__gasan_halt") {
            let guard = split_instr(&stmts[pc]).and_then(|i| i.guard).map(str::to_string);
            if guard.is_none_or(|g| m.pred(&g)) {
                return (true, m);
            }
            pc += 1;
            continue;
        }
        match m.exec(pc, &stmts[pc]) {
            Flow::Next => pc += 1,
            // A failed check goes to a report block (a batch's recheck is reached only when one
            // of its exact tests failed). With outside checks, to its stub, whose verdict may
            // send it back: only the shared report blocks report.
            Flow::Branch(l) if l == super::emit::SHARED_FAIL || l == super::spaces::SPACE_FAIL => return (true, m),
            Flow::Branch(l) if !through_stubs && !opts.outside_checks && (l.starts_with("$gasan_fail") || l.starts_with("$gasan_batch")) => return (true, m),
            Flow::Branch(l) => pc = *labels.get(l.as_str()).unwrap_or_else(|| panic!("branch to {l}")),
            Flow::Ret => return (false, m),
            Flow::Call(ret, args) => {
                // (The callee by name: a versioned loop's range test calls the sweep.)
                let result = if stmts[pc].contains(crate::abi::RANGE_SWEEP_SYMBOL) { sweep_call(&m, &args) } else { outside_pass_call(&m, &args) };
                m.params.insert(ret, result);
                pc += 1;
            }
        }
    }
    (false, m)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn parameter_bounds_report_exactly_the_accesses_that_leave_their_block(
        in_len in 4u64..(3 << 20), at in 0u64..64, ks in proptest::collection::vec(-6i64..6, 3), tail in proptest::collection::vec(any::<bool>(), 3), out_k in -4i64..4, slab in any::<bool>(),
    ) {
        // The input block (large, or a slab block), its pointer `at` words in; each read either
        // near the pointer or near the block's end; the output block elsewhere.
        let a = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + in_len, slab };
        let b = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + (1 << 20), slab: false };
        let p_in = a.start + 4 * at.min(in_len / 4);
        // Word offsets from the pointer (the kernel scales them by 4, as nvcc's code does).
        let words: Vec<i64> = ks.iter().zip(&tail).map(|(&k, &t)| if t { ((a.end - p_in) / 4) as i64 + k } else { k }).collect();
        let reads: Vec<u64> = words.iter().map(|&w| p_in.wrapping_add_signed(4 * w)).collect();
        let store_words = ((b.end - b.start) / 4) as i64 + out_k - 1;
        let store = b.start.wrapping_add_signed(4 * store_words);
        let inside = |x: u64, blk: &Block| x >= blk.start && x + 4 <= blk.end;
        let expect = !(reads.iter().all(|&r| inside(r, &a)) && inside(store, &b));
        let params = [("k_in", p_in), ("k_out", b.start), ("k_d0", words[0] as u64), ("k_d1", words[1] as u64), ("k_d2", words[2] as u64), ("k_d3", store_words as u64)];
        // Launches that tag the pointers with their blocks' whole granules (as the runtime does:
        // crate::abi::param_tag) and launches that do not must check alike.
        // (All listed pointers or none, as crate::abi::param_tag requires of launches.)
        let tag = |p: u64, blk: &Block| crate::abi::param_tag::encode(p, granule_down(blk.end).max(p));
        let mut tagged = params;
        if let (Some(t_in), Some(t_out)) = (tag(p_in, &a), tag(b.start, &b)) {
            tagged[0].1 = t_in;
            tagged[1].1 = t_out;
        }
        for param_bounds in [true, false] {
            let opts = super::InstrumentOptions { param_bounds, ..Default::default() };
            prop_assert_eq!(run_checked_kernel(opts, &params, vec![a, b]), expect, "param_bounds={} reads={:x?} store={:x} a={:x?}", param_bounds, reads, store, a);
        }
        // Halt mode, recover mode and the aligned pool's probe alike.
        for opts in [super::InstrumentOptions::default(), super::InstrumentOptions { recover: true, ..Default::default() }, super::InstrumentOptions { aligned_pool: true, ..Default::default() }] {
            prop_assert_eq!(run_checked_kernel(opts, &tagged, vec![a, b]), expect, "tagged {:x?} reads={:x?} store={:x} a={:x?} recover={} aligned={}", tagged, reads, store, a, opts.recover, opts.aligned_pool);
        }
    }
}

/// A kernel indexing its pointers with 32-bit indices, as nvcc's code for `p[i]` does (bounds.rs's
/// index tests): `k_in + E·i` (`mul.wide`, then `add`) read at three byte offsets, `k_out + E·j`
/// (`mad.wide`) stored to; `E = 2^shift`, accesses `width` bytes wide, indices widened signed or
/// not.
fn index_kernel(shift: u32, signed: bool, width: u32, offsets: &[i64]) -> String {
    let (ty, reg) = match width {
        1 => ("u8", "%r"),
        2 => ("u16", "%r"),
        4 => ("u32", "%r"),
        _ => ("u64", "%rd1"),
    };
    let s = if signed { "s" } else { "u" };
    let e = 1u32 << shift;
    let mut body = format!(
        "\tld.param.u64 %rd1, [k_in];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.param.u64 %rd3, [k_out];\n\tcvta.to.global.u64 %rd4, %rd3;\n\tld.param.u32 %r1, [k_i];\n\tld.param.u32 %r2, [k_j];\n\tmul.wide.{s}32 %rd5, %r1, {e};\n\tadd.s64 %rd6, %rd2, %rd5;\n"
    );
    for (n, off) in offsets.iter().enumerate() {
        body.push_str(&format!("\tld.global.{ty} {reg}{}, [%rd6+{off}];\n", n + 4));
    }
    body.push_str(&format!("\tmad.wide.{s}32 %rd7, %r2, {e}, %rd4;\n\tst.global.{ty} [%rd7], {reg}4;\n"));
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_in, .param .u64 k_out, .param .u32 k_i, .param .u32 k_j)\n{{\n\t.reg .b64 %rd<20>;\n\t.reg .b32 %r<20>;\n{body}\tret;\n}}\n")
}

#[test]
fn index_kernels_take_index_tests_where_their_conditions_hold() {
    // (index tests, address tests) of the checked kernel's fast paths.
    let tests = |src: &str| {
        let ptx = super::instrument_ptx(src, &super::InstrumentOptions::default()).unwrap().ptx;
        (ptx.matches("setp.ge.u32 %gsp0, ").count(), ptx.matches("setp.ge.or.u64 %gsp0, %gsa0, %gsbh").count())
    };
    // Signed 4-byte elements at whole-element offsets: every fast path tests the index; the
    // limit is decoded once per parameter and element size.
    let (index, address) = tests(&index_kernel(2, true, 4, &[-4, 0, 8]));
    assert!(address == 0 && index >= 3, "{index}, {address}");
    let ptx = super::instrument_ptx(&index_kernel(2, true, 4, &[-4, 0, 8]), &super::InstrumentOptions::default()).unwrap().ptx;
    assert_eq!(ptx.matches("cvt.u32.u64 %gsbi").count(), 2, "{ptx}");
    // Not a whole element (offset 2), wider than an element, a positive offset of a zero-extended
    // index: those accesses test their address.
    for (shift, signed, offsets) in [(2, true, [2, -4, 8]), (1, true, [0, -4, 8]), (2, false, [-4, 0, 8])] {
        let (index, address) = tests(&index_kernel(shift, signed, 4, &offsets));
        assert!(address > 0, "{shift} {signed} {offsets:?}: {index}, {address}");
    }
    let (index, address) = tests(&index_kernel(2, false, 4, &[-4, 0, -8]));
    assert!(address == 0 && index >= 3, "{index}, {address}");
    // The index written twice: no index test through it.
    let twice = index_kernel(2, true, 4, &[0, 4, 8]).replace("\tld.param.u32 %r2, [k_j];\n", "\tld.param.u32 %r2, [k_j];\n\tadd.s32 %r1, %r1, 1;\n");
    let ptx = super::instrument_ptx(&twice, &super::InstrumentOptions::default()).unwrap().ptx;
    assert!(!ptx.contains("%gsi, %r1,") && !ptx.contains("setp.ge.u32 %gsp0, %r1,"), "{ptx}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn index_tests_report_exactly_the_accesses_that_leave_every_block(
        in_len in prop_oneof![4u64..(3 << 20), (1u64..48).prop_map(|u| u << 16)], out_len in prop_oneof![4u64..(1 << 20), (1u64..16).prop_map(|u| u << 16)],
        at in prop_oneof![Just(0u64), 0u64..64], shift in 0u32..4, width_shift in 0u32..4, signed in any::<bool>(),
        offsets in proptest::collection::vec(prop_oneof![Just(0i64), -24i64..24], 3), i_near in 0u8..3, i_k in -2i64..3, i_any in any::<u32>(), j_near in 0u8..3, j_k in -2i64..3, j_any in any::<u32>(),
    ) {
        let (e, width) = (1i64 << shift, 1u64 << width_shift);
        // Blocks as the allocator makes them: a size whose last granule the shadow cannot encode
        // grows by a byte (shadow.rs). (Else the model's shadow, one byte short, would report an
        // access to the last byte that `inside` takes for good: found with in_len 2,768,131.)
        let (in_len, out_len) = (SCALE.encodable_size(in_len), SCALE.encodable_size(out_len));
        // Accesses aligned to their width, as the GPU requires (a wider access than an element
        // takes an index that is a multiple of the width); offsets mostly whole elements (the
        // index test's case).
        let align = e.max(width as i64);
        let offsets: Vec<i64> = offsets.iter().map(|&o| if o % 3 == 0 { o } else { o * e }).map(|o| o - o.rem_euclid(width as i64)).collect();
        // (2^38 into the pool: every index lands in the pool, where the shadow decides.)
        let a = Block { start: POOL_BASE + (1 << 38), end: POOL_BASE + (1 << 38) + in_len, slab: false };
        let b = Block { start: POOL_BASE + (1 << 38) + (64 << 21), end: POOL_BASE + (1 << 38) + (64 << 21) + out_len, slab: false };
        let p_in = a.start + (at * align as u64).min(in_len) / align as u64 * align as u64;
        // An index near the pointer, near the block's end, or anything.
        let index = |near: u8, k: i64, any: u32, p: u64, blk: &Block| -> u32 {
            match near {
                0 => k as u32,
                1 => (((blk.end - p) as i64 / e) + k) as u32,
                _ => any,
            }
        };
        let aligned = |x: u32| x & !((align / e) as u32 - 1);
        let (i, j) = (aligned(index(i_near, i_k, i_any, p_in, &a)), aligned(index(j_near, j_k, j_any, b.start, &b)));
        let widen = |x: u32| if signed { i64::from(x as i32) } else { i64::from(x) };
        let reads: Vec<u64> = offsets.iter().map(|&o| p_in.wrapping_add_signed(widen(i) * e + o)).collect();
        let store = b.start.wrapping_add_signed(widen(j) * e);
        let inside = |x: u64| [a, b].iter().any(|blk| x >= blk.start && x.checked_add(width).is_some_and(|end| end <= blk.end));
        let expect = !(reads.iter().all(|&r| inside(r)) && inside(store));
        let src = index_kernel(shift, signed, width as u32, &offsets);
        let params = [("k_in", p_in), ("k_out", b.start), ("k_i", u64::from(i)), ("k_j", u64::from(j))];
        let tag = |p: u64, blk: &Block| crate::abi::param_tag::encode(p, granule_down(blk.end).max(p));
        let mut tagged = params;
        if let (Some(t_in), Some(t_out)) = (tag(p_in, &a), tag(b.start, &b)) {
            tagged[0].1 = t_in;
            tagged[1].1 = t_out;
        }
        let (recover, aligned) = (super::InstrumentOptions { recover: true, ..Default::default() }, super::InstrumentOptions { aligned_pool: true, ..Default::default() });
        for (opts, p) in [(super::InstrumentOptions::default(), &tagged), (super::InstrumentOptions::default(), &params), (super::InstrumentOptions { param_bounds: false, ..Default::default() }, &params), (recover, &tagged), (aligned, &tagged)] {
            prop_assert_eq!(run_checked(&src, opts, p, vec![a, b]), expect, "opts {:?} params {:x?} reads {:x?} store {:x} a {:x?} b {:x?}\n{}", opts, p, reads, store, a, b, src);
        }
    }
}

/// An outside table holding `entries`, published as the runtime publishes it.
fn outside_table(at: u64, entries: &[crate::abi::outside::Entry]) -> OutsideTable {
    use crate::abi::outside;
    let mut bytes = vec![0u8; outside::TABLE_SIZE];
    outside::publish(&mut bytes, entries);
    OutsideTable { shadow: outside::RANGES, at, bytes }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Outside checks (outside.rs), by execution: the pointer kernel reads and writes host memory
    /// outside the pool, around registered ranges and unregistered ones; checked with outside
    /// checks it must report exactly when abi::outside::must_report says some access must be,
    /// in halt and recover mode, with the aligned pool's probe, with batches and without
    /// optimisations. Without the table (or without outside checks) it never reports.
    #[test]
    fn outside_checks_report_exactly_what_the_verdict_rule_says(
        lens in proptest::collection::vec(1u64..600, 1..4), gone in proptest::collection::vec(any::<bool>(), 4), near_in in 0usize..4,
        ks in proptest::collection::vec(-8i64..8, 3), tail in proptest::collection::vec(any::<bool>(), 3), out_k in -3i64..3,
    ) {
        use crate::abi::outside::{must_report, Entry};
        // Ranges 64 KiB apart in host memory, some unregistered since; the kernel's input
        // pointer at the start of one, its output near the end of the first.
        let host = 0x5555_0000_0000u64;
        let ranges: Vec<(u64, u64, bool)> = lens.iter().enumerate().map(|(i, &l)| (host + (i as u64) * 0x10000, host + (i as u64) * 0x10000 + 4 * l, !gone[i])).collect();
        let entries: Vec<Entry> = ranges.iter().map(|&(s, e, live)| if live { Entry::live(s, e) } else { Entry::gone(s, e) }).collect();
        let (p_in, in_end, _) = ranges[near_in.min(ranges.len() - 1)];
        let words: Vec<i64> = ks.iter().zip(&tail).map(|(&k, &t)| if t { ((in_end - p_in) / 4) as i64 + k } else { k }).collect();
        let reads: Vec<u64> = words.iter().map(|&w| p_in.wrapping_add_signed(4 * w)).collect();
        let out = ranges[0].0;
        let store_words = ((ranges[0].1 - out) / 4) as i64 + out_k - 1;
        let store = out.wrapping_add_signed(4 * store_words);
        let expect = reads.iter().chain([&store]).any(|&a| must_report(&entries, a, 4));
        let params = [("k_in", p_in), ("k_out", out), ("k_d0", words[0] as u64), ("k_d1", words[1] as u64), ("k_d2", words[2] as u64), ("k_d3", store_words as u64)];
        let table = outside_table(0x7eee_0000_0000, &entries);
        let on = super::InstrumentOptions { outside_checks: true, ..Default::default() };
        for opts in [on, super::InstrumentOptions { recover: true, ..on }, super::InstrumentOptions { aligned_pool: true, ..on }, super::InstrumentOptions { optimize: false, param_bounds: false, ..on }] {
            prop_assert_eq!(run_checked_outside(POINTER_KERNEL, opts, &params, vec![], Some(table.clone())), expect, "reads {:x?} store {:x} ranges {:x?} recover={}", reads, store, ranges, opts.recover);
            prop_assert!(!run_checked_outside(POINTER_KERNEL, opts, &params, vec![], None), "no table: outside passes");
        }
        prop_assert!(!run_checked_outside(POINTER_KERNEL, super::InstrumentOptions::default(), &params, vec![], Some(table)), "outside checks off");
    }
}

/// Outside checks leave pool checks as they were: the pointer kernel's accesses in the pool
/// report exactly as without them, with a table that holds unrelated ranges.
#[test]
fn outside_checks_keep_pool_checks() {
    let a = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + 4000, slab: false };
    let b = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + 4000, slab: false };
    let table = outside_table(0x7eee_0000_0000, &[crate::abi::outside::Entry::live(0x5555_0000_0000, 0x5555_0000_1000)]);
    let on = super::InstrumentOptions { outside_checks: true, ..Default::default() };
    for (d0, expect) in [(0i64, false), (999, false), (1000, true), (-1, true)] {
        let params = [("k_in", a.start), ("k_out", b.start), ("k_d0", d0 as u64), ("k_d1", 1), ("k_d2", 2), ("k_d3", 3)];
        for opts in [on, super::InstrumentOptions { recover: true, ..on }, super::InstrumentOptions { aligned_pool: true, ..on }] {
            assert_eq!(run_checked_outside(POINTER_KERNEL, opts, &params, vec![a, b], Some(table.clone())), expect, "d0={d0} recover={}", opts.recover);
        }
    }
}

/// A Triton-shaped tile (masked_runs.rs): lane `k` of `lanes` loads element `off + k` of `k_x`
/// and stores it to element `off + k` of `k_out`, each access under its own mask `off + k < n`
/// (odd lanes through the negated compare, `@!%q`), one scalar access per element with the moves
/// that set the masked-off value between them, as Triton 3.6 writes `tl.load(x + offs, mask=m)`.
fn masked_tile_kernel(lanes: usize) -> String {
    let mut body = String::from("\tld.param.u64 %rd100, [k_x];\n\tld.param.u64 %rd101, [k_out];\n\tld.param.u32 %r100, [k_n];\n\tld.param.u32 %r101, [k_off];\n");
    let guard = |k: usize| if k.is_multiple_of(2) { format!("%p{k}") } else { format!("!%q{k}") };
    for k in 0..lanes {
        body.push_str(&format!("\tadd.s32 %r{k}, %r101, {k};\n"));
        if k.is_multiple_of(2) {
            body.push_str(&format!("\tsetp.lt.s32 %p{k}, %r{k}, %r100;\n"));
        } else {
            body.push_str(&format!("\tsetp.ge.s32 %q{k}, %r{k}, %r100;\n"));
        }
    }
    body.push_str("\tmul.wide.s32 %rd102, %r101, 4;\n\tadd.s64 %rd103, %rd100, %rd102;\n\tadd.s64 %rd104, %rd101, %rd102;\n");
    for k in 0..lanes {
        body.push_str(&format!("\tadd.s64 %rd{k}, %rd103, {};\n\tadd.s64 %rd{}, %rd104, {};\n", 4 * k, 50 + k, 4 * k));
    }
    for k in 0..lanes {
        body.push_str(&format!("\tmov.u32 %r{}, 0x0;\n\t@{} ld.global.b32 {{ %r{} }}, [ %rd{k} + 0 ];\n", 50 + k, guard(k), 50 + k));
    }
    for k in 0..lanes {
        body.push_str(&format!("\t@{} st.global.b32 [ %rd{} + 0 ], {{ %r{} }};\n", guard(k), 50 + k, 50 + k));
    }
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_x, .param .u64 k_out, .param .u32 k_n, .param .u32 k_off)\n{{\n\t.reg .pred %p<64>, %q<64>;\n\t.reg .b32 %r<200>;\n\t.reg .b64 %rd<200>;\n{body}\tret;\n}}\n")
}

/// [`masked_tile_kernel`] of `lanes` run with `n` and `off` against an input block of `len_x`
/// and an output block of `len_o` elements: the machine, whether it reported, and the address
/// of the first access (in program order) outside its block under a set mask, if any.
fn run_masked_tile(opts: super::InstrumentOptions, lanes: usize, (n, off): (u32, u32), (len_x, len_o): (u64, u64), slab: bool) -> (bool, Machine, Option<u64>, [Block; 2]) {
    run_masked_tile_tagged(opts, lanes, (n, off), (len_x, len_o), slab, false)
}

/// [`run_masked_tile`]; `tagged`: the pointers launched tagged with their blocks
/// (crate::abi::param_tag, as the runtime launches them).
fn run_masked_tile_tagged(opts: super::InstrumentOptions, lanes: usize, (n, off): (u32, u32), (len_x, len_o): (u64, u64), slab: bool, tagged: bool) -> (bool, Machine, Option<u64>, [Block; 2]) {
    let x = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + 4 * len_x, slab };
    let out = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + 4 * len_o, slab };
    let live = |k: u64| u64::from(off) + k < u64::from(n);
    let first_bad = (0..lanes as u64)
        .filter(|&k| live(k) && u64::from(off) + k >= len_x)
        .map(|k| x.start + 4 * (u64::from(off) + k))
        .chain((0..lanes as u64).filter(|&k| live(k) && u64::from(off) + k >= len_o).map(|k| out.start + 4 * (u64::from(off) + k)))
        .next();
    let tag = |blk: &Block| if tagged { crate::abi::param_tag::encode(blk.start, granule_down(blk.end)).expect("taggable") } else { blk.start };
    let params = [("k_x", tag(&x)), ("k_out", tag(&out)), ("k_n", u64::from(n)), ("k_off", u64::from(off))];
    let (reported, m) = run_traced(&masked_tile_kernel(lanes), opts, &params, vec![x, out], None);
    (reported, m, first_bad, [x, out])
}

#[test]
fn masked_tiles_are_checked_as_runs() {
    let ptx = super::instrument_ptx(&masked_tile_kernel(8), &super::InstrumentOptions::default()).expect("instruments").ptx;
    // One branch for the sixteen accesses, after the last; each access under its check's verdict.
    assert_eq!(ptx.matches(&format!("bra {};", super::emit::SHARED_FAIL)).count(), 1, "{ptx}");
    assert_eq!(ptx.matches("bra $gasan_fail_").count(), ptx.matches(&format!("bra {};", super::emit::SHARED_FAIL)).count(), "no check of its own branches: {ptx}");
    assert_eq!(ptx.matches(" ld.global.b32 {").count() + ptx.matches(" st.global.b32 [").count(), 16);
    assert_eq!(ptx.lines().filter(|l| l.trim_start().starts_with("@%gsg") && l.contains(".global.b32")).count(), 16, "{ptx}");
    // Tested before the run as one span per pointer (its least and greatest address).
    assert_eq!(ptx.matches("setp.lt.or.u64 %gsp0, %gsa1, %gsa0, %gsp0;").count(), 2, "{ptx}");
}

#[test]
fn a_masked_off_lane_past_the_end_is_not_reported() {
    // n = 20 elements, the tile's last lanes past them: masked off, never accessed.
    for (opts, slab) in [(super::InstrumentOptions::default(), false), (super::InstrumentOptions::default(), true), (super::InstrumentOptions { param_bounds: false, ..Default::default() }, false)] {
        let (reported, m, first_bad, [x, out]) = run_masked_tile(opts, 8, (20, 16), (20, 20), slab);
        assert_eq!(first_bad, None);
        assert!(!reported, "a masked-off lane reported (slab={slab})");
        assert_eq!(m.accesses.len(), 8, "the four live lanes' loads and stores");
        assert!(m.accesses.iter().all(|&(_, a, w)| (a >= x.start && a + w <= x.end) || (a >= out.start && a + w <= out.end)));
    }
}

#[test]
fn a_run_inside_its_parameters_blocks_loads_no_shadow_byte() {
    // Every lane live and inside blocks larger than a tag's unit. Launched with the pointers
    // tagged with their blocks (crate::abi::param_tag, as the runtime launches), each member's
    // address test passes and no member waits on a shadow load. Untagged, or in a module without
    // parameter bounds (which the runtime never tags), every member loads its byte. The accesses
    // and the verdict are the same.
    let len = 2 * crate::abi::param_tag::REACH_UNIT;
    let x = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + len, slab: false };
    let out = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + len, slab: false };
    let tag = |blk: &Block| crate::abi::param_tag::encode(blk.start, granule_down(blk.end)).expect("taggable");
    let kernel = masked_tile_kernel(8);
    for (param_bounds, tagged, loads) in [(true, true, 0), (true, false, 16), (false, false, 16)] {
        let opts = super::InstrumentOptions { param_bounds, ..Default::default() };
        let (px, po) = if tagged { (tag(&x), tag(&out)) } else { (x.start, out.start) };
        let params = [("k_x", px), ("k_out", po), ("k_n", len / 4), ("k_off", 64)];
        let (reported, m) = run_traced(&kernel, opts, &params, vec![x, out], None);
        assert!(!reported, "param_bounds={param_bounds} tagged={tagged}");
        assert_eq!(m.accesses.len(), 16);
        assert_eq!(m.shadow_loads.len(), loads, "param_bounds={param_bounds} tagged={tagged}");
    }
}

#[test]
fn an_overflow_by_the_last_access_of_a_run_is_caught_before_it_is_made() {
    // The output block one element short: only the run's last member (lane 7's store) is bad.
    let (reported, m, first_bad, [_, out]) = run_masked_tile(super::InstrumentOptions::default(), 8, (24, 16), (24, 23), false);
    assert_eq!(first_bad, Some(out.start + 4 * 23));
    assert!(reported, "the last member's overflow");
    assert_eq!(m.regs.get(super::lines::LAST_ADDR).copied(), first_bad, "the report names that access");
    assert!(m.accesses.iter().all(|&(_, a, _)| a != out.start + 4 * 23), "the bad store was not made");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn masked_runs_report_exactly_the_live_lanes_that_leave_their_block(
        n in 0u32..48, off in 0u32..40, len_x in 1u64..40, len_o in 1u64..40, slab in any::<bool>(), param_bounds in any::<bool>(),
    ) {
        let opts = super::InstrumentOptions { param_bounds, ..Default::default() };
        let (reported, m, first_bad, [x, out]) = run_masked_tile(opts, 8, (n, off), (len_x, len_o), slab);
        prop_assert_eq!(reported, first_bad.is_some(), "n={} off={} len_x={} len_o={}", n, off, len_x, len_o);
        // No access outside its block is ever made: a bad member's access is not.
        prop_assert!(m.accesses.iter().all(|&(_, a, w)| (a >= x.start && a + w <= x.end) || (a >= out.start && a + w <= out.end)), "an access outside: {:x?}", m.accesses);
        if reported {
            prop_assert_eq!(m.regs.get(super::lines::LAST_ADDR).copied(), first_bad, "the run's first bad access is the one reported");
        }
        // Recover mode (no runs) reports alike.
        let recover = super::InstrumentOptions { recover: true, ..opts };
        prop_assert_eq!(run_masked_tile(recover, 8, (n, off), (len_x, len_o), slab).0, first_bad.is_some());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// A tile's members are one pointer plus constants, so the run is tested as one span per
    /// pointer before it (masked_runs.rs `span_bases`): with the pointers tagged, tiles ending
    /// anywhere around their blocks' ends, some lanes masked off, report exactly the live lanes
    /// outside their blocks, the first of them; a tile inside both blocks loads no shadow byte.
    #[test]
    fn spans_of_tagged_tiles_report_exactly_the_live_lanes_outside(back in 0u32..12, extra_x in 0u64..40, extra_o in 0u64..40, masked in 0u32..10) {
        let unit = crate::abi::param_tag::REACH_UNIT / 4;
        let (len_x, len_o) = (2 * unit + extra_x, 2 * unit + extra_o);
        let off = len_x.min(len_o) as u32 - back;
        let n = off + 8 - masked.min(8);
        let (reported, m, first_bad, [x, out]) = run_masked_tile_tagged(super::InstrumentOptions::default(), 8, (n, off), (len_x, len_o), false, true);
        prop_assert_eq!(reported, first_bad.is_some(), "n={} off={} len_x={} len_o={}", n, off, len_x, len_o);
        if reported {
            prop_assert_eq!(m.regs.get(super::lines::LAST_ADDR).copied(), first_bad);
        }
        prop_assert!(m.accesses.iter().all(|&(_, a, w)| (a >= x.start && a + w <= x.end) || (a >= out.start && a + w <= out.end)), "an access outside: {:x?}", m.accesses);
        if u64::from(off) + 8 <= 2 * unit {
            prop_assert!(m.shadow_loads.is_empty(), "a tile inside both tags' reach loaded {} shadow bytes", m.shadow_loads.len());
        }
    }
}

/// A Triton histogram (`tl.atomic_add(bins + v, 1, mask=m & (v < n_bins))`, masked_runs.rs):
/// lane `k` of `lanes` loads index `v_k` (the loaded word's low 5 bits) from `k_idx` under
/// `k < n`, then adds to `bins[v_k]` with an acquire-release atomic under `k < n && v_k < n_bins`.
fn histogram_kernel(lanes: usize) -> String {
    let mut body = String::from("\tld.param.u64 %rd100, [k_idx];\n\tld.param.u64 %rd101, [k_bins];\n\tld.param.u32 %r100, [k_n];\n\tld.param.u32 %r101, [k_nbins];\n");
    for k in 0..lanes {
        body.push_str(&format!("\tmov.u32 %r{}, {k};\n\tsetp.lt.s32 %p{k}, %r{}, %r100;\n\tadd.s64 %rd{k}, %rd100, {};\n", 60 + k, 60 + k, 4 * k));
    }
    for k in 0..lanes {
        body.push_str(&format!("\tmov.u32 %r{k}, 0x0;\n\t@%p{k} ld.global.b32 {{ %r{k} }}, [ %rd{k} + 0 ];\n"));
    }
    for k in 0..lanes {
        body.push_str(&format!("\tand.b32 %r{k}, %r{k}, 31;\n\tsetp.lt.s32 %q{k}, %r{k}, %r101;\n\tand.pred %s{k}, %p{k}, %q{k};\n\tmad.wide.s32 %rd{}, %r{k}, 4, %rd101;\n", 20 + k));
    }
    body.push_str("\tmov.b32 %r99, 1;\n");
    for k in 0..lanes {
        body.push_str(&format!("\tmov.u32 %r{}, 0x0;\n\t@%s{k} atom.global.gpu.acq_rel.add.u32 %r{}, [ %rd{} + 0 ], %r99;\n", 30 + k, 30 + k, 20 + k));
    }
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_idx, .param .u64 k_bins, .param .u32 k_n, .param .u32 k_nbins)\n{{\n\t.reg .pred %p<16>, %q<16>, %s<16>;\n\t.reg .b32 %r<100>;\n\t.reg .b64 %rd<200>;\n{body}\tret;\n}}\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// By execution: the histogram reports exactly when a live lane's atomic leaves `bins` (a
    /// `bins` shorter than `n_bins`), and the atomics' shadow bytes are all loaded before the
    /// first atomic (their run's bytes load ahead of it: masked_runs.rs), so no atomic's order
    /// holds a later member's check back. The bad atomic is never made.
    #[test]
    fn histogram_atomics_report_exactly_the_live_lanes_past_the_bins(n in 0u32..6, n_bins in 0u32..33, len_b in 1u64..33, slab in any::<bool>()) {
        let lanes = 4;
        let idx = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + 4 * lanes as u64, slab: false };
        let bins = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + 4 * len_b, slab };
        let v = |k: u64| loaded_value(idx.start + 4 * k) & 31;
        let live = |k: u64| k < u64::from(n) && v(k) < u64::from(n_bins);
        let first_bad = (0..lanes as u64).find(|&k| live(k) && v(k) >= len_b).map(|k| bins.start + 4 * v(k));
        let params = [("k_idx", idx.start), ("k_bins", bins.start), ("k_n", u64::from(n)), ("k_nbins", u64::from(n_bins))];
        for opts in [super::InstrumentOptions::default(), super::InstrumentOptions { aligned_pool: true, ..Default::default() }] {
            let src = histogram_kernel(lanes);
            let sites = super::instrument_ptx(&src, &opts).expect("instruments").sites;
            let (reported, m) = run_traced(&src, opts, &params, vec![idx, bins], None);
            prop_assert_eq!(reported, first_bad.is_some(), "n={} n_bins={} len_b={} v={:?} aligned={}", n, n_bins, len_b, (0..lanes as u64).map(v).collect::<Vec<_>>(), opts.aligned_pool);
            if reported {
                prop_assert_eq!(m.regs.get(super::lines::LAST_ADDR).copied(), first_bad);
                // Its site is that atomic's (made where the run's bytes were tested, in member order).
                let k = (0..lanes as u64).find(|&k| live(k) && v(k) >= len_b).expect("a bad lane");
                let line = src.lines().position(|l| l.contains("atom.global") && l.contains(&format!("[ %rd{} + 0 ]", 20 + k))).expect("its line") + 1;
                let packed = m.regs.get(super::lines::LAST_SITE).copied().expect("a site");
                let site = sites.get(packed as u32).expect("a recorded site");
                prop_assert_eq!((site.ptx_line as usize, site.width, site.kind, packed >> 56), (line, 4, crate::abi::AccessKind::Atomic, crate::abi::AccessKind::Atomic as u64));
            }
            prop_assert!(m.accesses.iter().all(|&(_, a, w)| (a >= idx.start && a + w <= idx.end) || (a >= bins.start && a + w <= bins.end)), "an access outside: {:x?}", m.accesses);
            // Every shadow byte of an atomic is loaded before the first atomic is made.
            let loads_done = m.accesses.iter().filter(|&&(_, a, _)| a >= idx.start && a < idx.end).count();
            prop_assert!(m.shadow_loads.iter().all(|&made| made <= loads_done), "a shadow load after an atomic: {:?} (index loads {})", m.shadow_loads, loads_done);
        }
    }
}

/// A single-block loop of copies masked by their source size, as Triton pipelines a tile's loads
/// (`cp.async.cg.shared.global [dst], [src], 16, %size`, the size 0 past the mask): iteration `i`
/// of `n` copies 16 bytes from `k_in + 16 i` when `i < valid`. Loop versioning range-tests the
/// copies for their whole width (REVISION 83) over the iterations their mask holds in (REVISION
/// 87): a masked-off copy past the block no longer fails the test; an unmasked one does, and the
/// checked loop, where a masked-off copy is never checked, runs instead.
const MASKED_COPY_LOOP: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_in, .param .u32 k_n, .param .u32 k_valid)\n{\n\
\t.reg .b64 %rd<8>;\n\t.reg .b32 %r<8>;\n\t.reg .pred %p<3>;\n\t.shared .align 16 .b8 buf[16];\n\
\tld.param.u64 %rd1, [k_in];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.param.u32 %r1, [k_n];\n\tld.param.u32 %r2, [k_valid];\n\
\tmov.u32 %r3, 0;\n\tmov.u32 %r6, buf;\n$L__BB0_1:\n\tsetp.lt.u32 %p1, %r3, %r2;\n\tselp.b32 %r4, 16, 0, %p1;\n\
\tcp.async.cg.shared.global [%r6], [%rd2], 16, %r4;\n\tadd.s64 %rd2, %rd2, 16;\n\tadd.s32 %r3, %r3, 1;\n\
\tsetp.lt.u32 %p2, %r3, %r1;\n\t@%p2 bra $L__BB0_1;\n\tret;\n}\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// By execution: the loop above reports exactly when a copy that is not masked off reads past
    /// the block, whether the range test takes the fast loop or the checked one.
    #[test]
    fn masked_copy_loops_report_exactly_the_unmasked_copies_past_the_block(n in 1u32..40, valid in 0u32..48, blocks in 0u64..40, tail in 0u64..16) {
        let len = SCALE.encodable_size(blocks * 16 + tail).max(1);
        let a = Block { start: POOL_BASE + (1 << 38), end: POOL_BASE + (1 << 38) + len, slab: false };
        let copied = n.min(valid) as u64;
        let expect = copied * 16 > len;
        for opts in [super::InstrumentOptions::default(), super::InstrumentOptions { hoist_loops: false, ..Default::default() }, super::InstrumentOptions { param_bounds: false, ..Default::default() }] {
            // (The shared tile at offset 0 of the shared window.)
            let mut m = Machine { blocks: vec![a], ..Machine::default() };
            m.regs.insert("buf".to_string(), 0);
            let (reported, m) = run_traced_on(MASKED_COPY_LOOP, opts, &[("k_in", a.start), ("k_n", u64::from(n)), ("k_valid", u64::from(valid))], m);
            prop_assert_eq!(reported, expect, "{:?} n {} valid {} len {}", opts, n, valid, len);
            if !reported {
                // Every copy that is not masked off was made, and no other.
                prop_assert_eq!(m.accesses.len() as u64, copied, "{:?}", opts);
            }
        }
    }
}

#[test]
fn clipped_loops_are_versioned_with_every_access_covered() {
    let cases = clipped_cases();
    assert_eq!(cases.len(), 2, "both loops of loops_clipped.ptx versioned");
    for case in cases {
        let accesses: Vec<usize> = case.body.iter().filter(|(s, _)| s.contains(".global")).map(|(_, l)| *l).collect();
        assert_eq!(case.covered_lines, accesses, "{}: every global access covered", case.label);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// A loop prefetching two iterations ahead under a mask (Triton's pipelined tiles): its range
    /// test spans only the iterations the mask holds in, so a block holding exactly the bytes the
    /// loop really touches takes the fast copy, and one a byte short does not. (Spanning every
    /// iteration, the masked-off prefetches past the block sent every such loop to its checked
    /// original.) A comparison that holds in the last iterations instead is not clipped: its
    /// test passes only when the whole span fits.
    #[test]
    fn masked_prefetches_are_range_tested_over_the_iterations_they_touch(n in 1u32..40, valid in 0u32..48, short in any::<bool>()) {
        let ahead = &clipped_cases()[0];
        let entry = clipped_entry(ahead, n, valid);
        let (accesses, ended) = run_loop(ahead, &entry);
        prop_assert!(ended);
        if let Some((lo, hi, _)) = span(&accesses, &ahead.covered_lines) {
            prop_assert_eq!(range_test(ahead, &entry, (lo, hi - u64::from(short)), false), !short, "n {} valid {}", n, valid);
        }
        let behind = &clipped_cases()[1];
        let entry = clipped_entry(behind, n, valid);
        let (accesses, _) = run_loop(behind, &entry);
        if let Some((lo, hi, _)) = span(&accesses, &behind.covered_lines) {
            let whole = POOL_BASE + (1 << 38) + 16 * u64::from(n - 1) + 4;
            prop_assert_eq!(range_test(behind, &entry, (lo, hi), false), lo == POOL_BASE + (1 << 38) && hi == whole, "n {} valid {}", n, valid);
        }
    }
}

/// A kernel reading one word of a 256-byte shared tile at offset `k_off` (a space check).
const SHARED_WORD_KERNEL: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u32 k_off)\n{\n\t.reg .b32 %r<8>;\n\t.reg .f32 %f<2>;\n\t.shared .align 4 .b8 t[256];\n\tld.param.u32 %r1, [k_off];\n\tmov.u32 %r2, t;\n\tadd.s32 %r3, %r2, %r1;\n\tld.shared.f32 %f1, [%r3];\n\tret;\n}\n";

/// `src` with a `wgmma.mma_async` and a wait that leaves its group in flight before its first
/// parameter load (their operands are not read here): a function that keeps `wgmma` in flight.
fn with_wgmma(src: &str) -> String {
    let at = src.find("\tld.param").expect("a parameter load");
    format!(
        "{}\twgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%f0, %f1}}, 0, 0, 1, 1, 1, 0, 0;\n\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 1;\n{}",
        &src[..at],
        &src[at..]
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// In a function that uses `wgmma`, halt mode's stubs report through a call and rejoin their
    /// check rather than jumping to the report block (ptxas serializes `wgmma` past branches that
    /// never come back: jit/FORMS.md). By execution, the call reports exactly when the jump
    /// would, with the same address and packed site in the report registers.
    #[test]
    fn wgmma_functions_report_through_calls_exactly_as_through_branches(words in proptest::collection::vec(-8i64..8, 4), in_len in 16u64..4096, off in 0u64..300) {
        let a = Block { start: POOL_BASE + (4 << 21), end: POOL_BASE + (4 << 21) + in_len, slab: false };
        let b = Block { start: POOL_BASE + (64 << 21), end: POOL_BASE + (64 << 21) + 64, slab: false };
        let params = [("k_in", a.start), ("k_out", b.start), ("k_d0", (words[0] + 2) as u64), ("k_d1", ((in_len / 4) as i64 + words[1]) as u64), ("k_d2", (words[2] + 4) as u64), ("k_d3", (14 + words[3]) as u64)];
        let twin = with_wgmma(POINTER_KERNEL);
        for opts in [super::InstrumentOptions::default(), super::InstrumentOptions { param_bounds: false, ..Default::default() }, super::InstrumentOptions { optimize: false, ..Default::default() }] {
            let checked = super::instrument_ptx(&twin, &opts).unwrap().ptx;
            prop_assert!(checked.contains("call __gasan_halt_global"), "{}", checked);
            // No jump to a report block is left: every stub calls its function and rejoins.
            prop_assert!(!checked.contains("bra $gasan_fail_shared;") && !checked.contains("bra.uni $gasan_fail_shared;"), "{}", checked);
            prop_assert!(checked.contains("$gasan_rejoin_"), "{}", checked);
            let run = |src: &str| run_traced_through(src, opts, &params, Machine { blocks: vec![a, b], ..Machine::default() }, true);
            let (plain, pm) = run(POINTER_KERNEL);
            let (called, cm) = run(&twin);
            prop_assert_eq!(plain, called, "{:?}", opts);
            if plain {
                prop_assert_eq!((pm.val("%gsx"), pm.val("%gss")), (cm.val("%gsx"), cm.val("%gss")), "{:?}", opts);
            }
        }
        let twin = with_wgmma(SHARED_WORD_KERNEL);
        let checked = super::instrument_ptx(&twin, &Default::default()).unwrap().ptx;
        prop_assert!(checked.contains("call __gasan_halt_space"), "{}", checked);
        let run = |src: &str| {
            let mut m = Machine::default();
            m.regs.insert("t".to_string(), 0x400);
            run_traced_through(src, Default::default(), &[("k_off", off)], m, true)
        };
        let (plain, pm) = run(SHARED_WORD_KERNEL);
        let (called, cm) = run(&twin);
        prop_assert_eq!(plain, off + 4 > 256);
        prop_assert_eq!(called, plain);
        if plain {
            prop_assert_eq!((pm.val("%gsx"), pm.val("%gss")), (cm.val("%gsx"), cm.val("%gss")));
        }
    }
}

/// A loop whose fast copy mixes a range-tested access with a run of masked accesses that stay
/// checked (gathers: their addresses are loaded, not affine): iteration `i` of `n` loads
/// `idx = x[i]`, then, when `i < valid`, `y[idx]` and `y[idx ^ 1]` under that mask (two address
/// registers, so no range group joins them: they form a run).
const GATHER_LOOP: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_x, .param .u64 k_y, .param .u32 k_n, .param .u32 k_valid)\n{\n\
\t.reg .b64 %rd<12>;\n\t.reg .b32 %r<8>;\n\t.reg .pred %p<3>;\n\t.reg .f32 %f<4>;\n\
\tld.param.u64 %rd1, [k_x];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.param.u64 %rd3, [k_y];\n\tcvta.to.global.u64 %rd4, %rd3;\n\
\tld.param.u32 %r1, [k_n];\n\tld.param.u32 %r2, [k_valid];\n\tmov.u32 %r3, 0;\n\tmov.f32 %f1, 0f00000000;\n$L__BB0_1:\n\
\tmul.wide.u32 %rd5, %r3, 4;\n\tadd.s64 %rd6, %rd2, %rd5;\n\tld.global.u32 %r4, [%rd6];\n\tsetp.lt.u32 %p1, %r3, %r2;\n\
\tmul.wide.u32 %rd7, %r4, 4;\n\tadd.s64 %rd8, %rd4, %rd7;\n\tmov.f32 %f2, 0f00000000;\n\t@%p1 ld.global.f32 %f2, [%rd8];\n\
\txor.b32 %r5, %r4, 1;\n\tmul.wide.u32 %rd9, %r5, 4;\n\tadd.s64 %rd10, %rd4, %rd9;\n\tmov.f32 %f3, 0f00000000;\n\t@%p1 ld.global.f32 %f3, [%rd10];\n\tadd.f32 %f1, %f1, %f2;\n\tadd.f32 %f1, %f1, %f3;\n\
\tadd.s32 %r3, %r3, 1;\n\tsetp.lt.u32 %p2, %r3, %r1;\n\t@%p2 bra $L__BB0_1;\n\tret;\n}\n";

#[test]
fn the_gather_loop_versions_with_its_masked_gathers_checked_as_a_run() {
    let r = super::instrument_ptx(GATHER_LOOP, &super::InstrumentOptions::default()).unwrap();
    let fast = &r.ptx[r.ptx.find("$gasan_loop0:").expect("versioned")..r.ptx.find("bra $gasan_loop0_done;").unwrap()];
    assert!(!fast.contains("ld.global.u32 %r4, [%rd6];\n\t{"), "the affine load has no check of its own in the fast copy");
    assert_eq!(fast.matches("@%gsg").count(), 2, "both gathers run under their run's verdict in the fast copy:\n{fast}");
    assert_eq!(r.stats.total().copy_checked, 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// By execution: the gather loop reports exactly when an access the program makes (every
    /// `x[i]`, and the gathers whose lane is not masked off) leaves its block, whether the range
    /// test takes the fast copy (the gathers checked there as a run) or the checked loop.
    #[test]
    fn loops_mixing_range_tests_and_masked_runs_report_exactly_the_bad_accesses(n in 1u32..24, valid in 0u32..30, x_len in 1u64..120, y_len in 1u64..4200) {
        let x = Block { start: POOL_BASE + (1 << 38), end: POOL_BASE + (1 << 38) + SCALE.encodable_size(x_len).max(1), slab: false };
        let y = Block { start: POOL_BASE + (1 << 39), end: POOL_BASE + (1 << 39) + SCALE.encodable_size(y_len).max(1), slab: false };
        let inside = |b: &Block, a: u64, w: u64| a >= b.start && a + w <= b.end;
        // The machine's loaded value for a load at `a` (Machine::exec), as the index.
        let loaded = |a: u64| (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) & 0x3ff;
        let expect = (0..u64::from(n)).any(|i| {
            let xa = x.start + 4 * i;
            let (ya, yb) = (y.start + 4 * loaded(xa), y.start + 4 * (loaded(xa) ^ 1));
            !inside(&x, xa, 4) || (i < u64::from(valid) && !(inside(&y, ya, 4) && inside(&y, yb, 4)))
        });
        for opts in [super::InstrumentOptions::default(), super::InstrumentOptions { hoist_loops: false, ..Default::default() }, super::InstrumentOptions { param_bounds: false, ..Default::default() }] {
            let m = Machine { blocks: vec![x, y], ..Machine::default() };
            let (reported, m) = run_traced_on(GATHER_LOOP, opts, &[("k_x", x.start), ("k_y", y.start), ("k_n", u64::from(n)), ("k_valid", u64::from(valid))], m);
            prop_assert_eq!(reported, expect, "{:?} n {} valid {} x {} y {}", opts, n, valid, x.end - x.start, y.end - y.start);
            // No access outside its block is ever made.
            prop_assert!(m.accesses.iter().all(|&(_, a, w)| inside(&x, a, w) || inside(&y, a, w)), "{:?}: an access outside: {:x?}", opts, m.accesses);
        }
    }
}
