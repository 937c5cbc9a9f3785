//! Shadow prefetch planning (halt mode with optimization). ptxas does not move a load above a
//! branch, so in a basic block with several checks each shadow load waits behind the previous
//! check's branch, and the checks' latencies add up. Instead the shadow byte of a later access is
//! loaded at the earliest point of its block where its address can be known:
//!
//! * right after the last write of its address register, when a check lies between that write and
//!   the access; or
//! * earlier still, by recomputing a short chain of address arithmetic (`add`, `mul.wide`, `cvta`,
//!   ...) whose inputs are final sooner, into temporaries (ptxas merges the copy with the original).
//!
//! Only plain statements inside one basic block are considered: no labels, branches, braces,
//! declarations, block comments or statements continued over lines lie between the anchor and
//! the access, so the registers read at the anchor hold the values the access will use.

use super::access::split_instr;
use super::{dest_regs, ends_basic_block, strip_comment};
use std::collections::{HashMap, HashSet};

/// How far back a prefetch may go (bounds the scan in long unrolled blocks).
const WINDOW: usize = 256;
/// Longest address-arithmetic chain recomputed for one prefetch.
const MAX_CHAIN: usize = 10;

/// One prefetch: the access line, and the lines of arithmetic to recompute first (in order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Prefetch {
    pub access: usize,
    pub chain: Vec<usize>,
}

/// Anchor line (emit before it) → prefetches.
pub(super) type PrefetchPlan = HashMap<usize, Vec<Prefetch>>;

/// Plans prefetches for `candidates` (access line, address register): plain single checks.
pub(super) fn plan(lines: &[&str], check_lines: &HashSet<usize>, candidates: &[(usize, String)]) -> PrefetchPlan {
    let mut out = PrefetchPlan::new();
    for (j, base) in candidates {
        if let Some((anchor, chain)) = place(lines, *j, base, check_lines) {
            out.entry(anchor).or_default().push(Prefetch { access: *j, chain });
        }
    }
    out
}

/// The first line of `j`'s basic block, or `None` when the block holds something a prefetch must
/// not be moved across or into (block comments, a statement continued over lines at the start).
fn block_start(lines: &[&str], j: usize) -> Option<usize> {
    let lo = j.saturating_sub(WINDOW);
    let mut start = lo;
    for k in (lo..j).rev() {
        let line = lines[k];
        if line.contains("/*") || line.contains("*/") {
            return None;
        }
        let code = strip_comment(line).trim();
        if code.is_empty() {
            continue;
        }
        // Declarations start a region too: nothing declared after them may be used above them.
        if ends_basic_block(code) || code.starts_with(".reg") || code.starts_with(".local") || code.starts_with(".shared") {
            start = k + 1;
            break;
        }
    }
    // The start must begin a statement: the code line before it ends one.
    let before = lines[..start].iter().rev().map(|l| strip_comment(l).trim()).find(|c| !c.is_empty());
    match before {
        Some(c) if !(c.ends_with(';') || c.ends_with(':') || c.ends_with('{') || c.ends_with('}') || c.starts_with('.')) => None,
        _ => Some(start),
    }
}

/// Last line in `[start, before)` that writes `reg`.
fn last_write(lines: &[&str], reg: &str, start: usize, before: usize) -> Option<usize> {
    (start..before).rev().find(|&k| {
        let code = strip_comment(lines[k]);
        code.contains(reg) && code.split(';').any(|st| dest_regs(st).contains(&reg))
    })
}

/// The register operands a recomputable arithmetic statement reads, or `None` when it is not one
/// (guarded, several statements, or an opcode outside the address-arithmetic set).
fn arithmetic_inputs(line: &str) -> Option<Vec<&str>> {
    let code = strip_comment(line).trim();
    let stmt = code.strip_suffix(';')?;
    if stmt.contains(';') {
        return None;
    }
    let ins = split_instr(stmt)?;
    if ins.guard.is_some() {
        return None;
    }
    let op = ins.opcode;
    let ok = ["add.s64", "add.u64", "sub.s64", "sub.u64", "add.s32", "add.u32", "sub.s32", "sub.u32", "shl.b64", "shl.b32"]
        .contains(&op)
        || op.starts_with("mul.wide.")
        || op.starts_with("mul.lo.")
        || op.starts_with("mad.wide.")
        || op.starts_with("mad.lo.")
        || op == "cvta.to.global.u64"
        || matches!(op, "mov.u64" | "mov.b64" | "mov.u32" | "mov.b32" | "mov.s32" | "mov.s64")
        || matches!(op, "cvt.u64.u32" | "cvt.s64.s32" | "cvt.u64.s32" | "cvt.s64.u32");
    if !ok || ins.operands.len() < 2 {
        return None;
    }
    let mut inputs = Vec::new();
    for o in &ins.operands[1..] {
        if o.starts_with('%') {
            // Special registers (%tid.x, %ctaid.y, ...) hold the same value everywhere.
            if !o.contains('.') {
                inputs.push(*o);
            }
        } else if o.parse::<i64>().is_err() && !o.starts_with("0x") && !o.starts_with("-0x") {
            return None; // symbols, vectors, anything else
        }
    }
    Some(inputs)
}

/// Earliest line (within `[start, before)`) at which `reg`'s value at `before` can be had, and the
/// arithmetic lines to recompute on the way (`budget` bounds their number).
fn earliest(lines: &[&str], reg: &str, start: usize, before: usize, budget: &mut usize, chain: &mut Vec<usize>) -> usize {
    let Some(k) = last_write(lines, reg, start, before) else { return start };
    if *budget == 0 {
        return k + 1;
    }
    let Some(inputs) = arithmetic_inputs(lines[k]) else { return k + 1 };
    *budget -= 1;
    let mut at = start;
    let mut sub = Vec::new();
    for input in inputs {
        at = at.max(earliest(lines, input, start, k, budget, &mut sub));
    }
    // Inputs redefined between the anchor and `k` would change the value: the recursion anchors
    // each input after its last write before `k`, and `at` is the latest of those.
    for l in sub.into_iter().chain([k]) {
        if !chain.contains(&l) {
            chain.push(l);
        }
    }
    at
}

/// Anchor and recompute chain for the access at `j` through `base`, if a prefetch gains anything.
fn place(lines: &[&str], j: usize, base: &str, check_lines: &HashSet<usize>) -> Option<(usize, Vec<usize>)> {
    let start = block_start(lines, j)?;
    let checks_in = |from: usize| (from..j).any(|k| check_lines.contains(&k));
    let plain = last_write(lines, base, start, j).map_or(start, |k| k + 1);
    if checks_in(plain) {
        return Some((plain, Vec::new()));
    }
    let mut budget = MAX_CHAIN;
    let mut chain = Vec::new();
    let at = earliest(lines, base, start, j, &mut budget, &mut chain);
    if chain.is_empty() || !checks_in(at) {
        return None;
    }
    chain.sort_unstable();
    // Recomputed lines must all lie after the anchor (they read values final there).
    if chain.iter().any(|&l| l < at) {
        return None;
    }
    Some((at, chain))
}
