//! Range coalescing (halt mode with optimization): accesses in one basic block through the same
//! address register and guard, with offsets spanning less than the minimum redzone (256 bytes), are
//! covered by checking the lowest and the highest of them at the first one. Both ends addressable
//! means the bytes between are too: two live blocks are always at least one redzone apart, and a
//! freed block is poisoned end to end. The hoisted checks keep the sites of the accesses they stand
//! for, so reports still name the right line, width and direction (only earlier in time).

use super::access::{classify, split_instr, AddrBase, Classified, Width};
use super::{dest_regs, ends_basic_block, parse_loc, strip_comment, LineMap, LineSet};
use crate::abi::AccessKind;
use std::collections::HashMap;

/// Smallest redzone the allocator ever places between two blocks.
pub(super) const MIN_REDZONE: i64 = 256;

#[derive(Default)]
pub(super) struct Plan {
    /// Lines whose check is covered by one hoisted to an earlier line.
    pub covered: LineSet,
    /// Covered lines whose own check was hoisted (they count as checked, the others as eliminated).
    pub hoisted_lines: LineSet,
    /// Line → lines whose checks are emitted before it (with that line's `.loc`).
    pub hoist: LineMap<Vec<(usize, Option<(u32, u32, u32)>)>>,
    /// Shadow prefetches by anchor line (prefetch.rs), for the accesses not covered here.
    pub prefetch: super::prefetch::PrefetchPlan,
}

struct Entry {
    line: usize,
    offset: i64,
    width: u32,
    loc: Option<(u32, u32, u32)>,
}

/// `covered`: accesses already covered by a loop range test (loops.rs; they count as checked, as
/// hoisted ones do); `inserted`: lines the loop versioning wrote (its own loads are not accesses to
/// check).
pub(super) fn plan(lines: &[&str], covered: &LineSet, inserted: &LineSet) -> Plan {
    let mut plan = Plan::default();
    let mut groups: HashMap<(String, String), Vec<Entry>> = HashMap::new();
    let mut loc_text: Option<&str> = None;
    // Lines holding a check (each will branch), and the plain single checks among them with their
    // address register: the candidates for a shadow prefetch.
    let mut check_lines = LineSet::default();
    let mut candidates: Vec<super::prefetch::Candidate> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let raw = line.trim_start();
        if let Some(rest) = raw.strip_prefix(".loc") {
            loc_text = Some(strip_comment(rest)); // parsed only for the accesses that join a group
            continue;
        }
        // Only a line with an address operand can start or extend a group; with no group open,
        // nothing else needs looking at (this pass runs over every line of every module).
        if groups.is_empty() && !raw.contains('[') {
            continue;
        }
        let code = strip_comment(line).trim();
        if code.is_empty() {
            continue;
        }
        let has_address = code.contains('[') && !covered.contains(&i) && !inserted.contains(&i);
        if code.contains("/*") || ends_basic_block(code) || code.starts_with(".entry") || code.starts_with(".func") {
            finish_all(&mut groups, &mut plan);
            continue;
        }
        if code.starts_with('.') {
            continue; // other directives (.reg, .file, .pragma, ...)
        }
        let mut stmts = code.split(';').map(str::trim).filter(|s| !s.is_empty());
        let first = stmts.next();
        let single = stmts.next().is_none();
        if let (true, true, Some(stmt)) = (has_address, single, first) {
            if let Some(ins) = split_instr(stmt) {
                if let Classified::Check(a) = classify(&ins, true) {
                    check_lines.insert(i);
                    if let (AddrBase::Reg(r), Width::Fixed(w), false, None, true) =
                        (&a.base, &a.width, a.bulk, &a.guard_nonzero, a.kind != AccessKind::Atomic)
                    {
                        let key = (r.clone(), ins.guard.unwrap_or("").to_string());
                        let loc = loc_text.and_then(parse_loc);
                        groups.entry(key).or_default().push(Entry { line: i, offset: a.offset, width: *w, loc });
                        candidates.push(super::prefetch::Candidate { line: i, base: r.clone(), guarded: ins.guard.is_some(), loc });
                    }
                }
            }
        } else if has_address && !single && code.split(';').filter_map(split_instr).any(|ins| matches!(classify(&ins, true), Classified::Check(_))) {
            check_lines.insert(i);
        }
        // Groups whose address or guard register a statement redefines end before it takes effect.
        for s in code.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            // Parse destinations only where a group's register is named at all (a substring test
            // is far cheaper, and most lines name none).
            if !groups.keys().any(|(base, guard)| s.contains(base.as_str()) || (!guard.is_empty() && s.contains(guard.trim_start_matches('!')))) {
                continue;
            }
            let d = dest_regs(s);
            if d.is_empty() {
                continue;
            }
            let ended: Vec<(String, String)> = groups
                .keys()
                .filter(|(base, guard)| d.iter().any(|x| *x == base || *x == guard.trim_start_matches('!')))
                .cloned()
                .collect();
            for k in ended {
                if let Some(g) = groups.remove(&k) {
                    finish(g, &mut plan);
                }
            }
        }
    }
    finish_all(&mut groups, &mut plan);
    plan.covered.extend(covered);
    plan.hoisted_lines.extend(covered);
    candidates.retain(|c| !plan.covered.contains(&c.line));
    plan.prefetch = super::prefetch::plan(lines, &check_lines, &candidates);
    plan
}

fn finish_all(groups: &mut HashMap<(String, String), Vec<Entry>>, plan: &mut Plan) {
    for (_, g) in groups.drain() {
        finish(g, plan);
    }
}

fn finish(g: Vec<Entry>, plan: &mut Plan) {
    if g.len() < 2 {
        return;
    }
    let lo = g.iter().min_by_key(|e| e.offset).unwrap();
    let hi = g.iter().max_by_key(|e| e.offset + i64::from(e.width)).unwrap();
    if hi.offset + i64::from(hi.width) - lo.offset >= MIN_REDZONE {
        return;
    }
    let first = g[0].line;
    let mut hoisted = Vec::new();
    for e in [lo, hi] {
        if e.line != first && !hoisted.iter().any(|(l, _)| *l == e.line) {
            hoisted.push((e.line, e.loc));
        }
    }
    for e in &g[1..] {
        plan.covered.insert(e.line);
    }
    for (l, _) in &hoisted {
        plan.hoisted_lines.insert(*l);
    }
    if !hoisted.is_empty() {
        plan.hoist.insert(first, hoisted);
    }
}
