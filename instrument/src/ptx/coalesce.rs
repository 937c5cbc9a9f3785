//! Range coalescing (halt mode with optimization): accesses in one basic block through the same
//! address register and guard, with offsets spanning less than the minimum redzone (256 bytes), are
//! covered by checking the lowest and the highest of them at the first one. Both ends addressable
//! means the bytes between are too: two live blocks are always at least one redzone apart, and a
//! freed block is poisoned end to end. The hoisted checks keep the sites of the accesses they stand
//! for, so reports still name the right line, width and direction (only earlier in time).

use super::access::{AddrBase, Width};
use super::defs::ModuleDefs;
use super::{release_excess, Line, LineMap, LineSet};
use crate::abi::AccessKind;
use rustc_hash::FxHashMap as HashMap;

/// Smallest redzone the allocator ever places between two blocks.
pub(super) const MIN_REDZONE: i64 = 256;

#[derive(Default)]
pub(super) struct Plan {
    /// Lines whose check is covered by one hoisted to an earlier line.
    pub covered: LineSet,
    /// Covered lines whose own check was hoisted (they count as checked, the others as eliminated).
    pub hoisted_lines: LineSet,
    /// Line → lines whose checks are emitted before it (with that line's `.loc`).
    pub hoist: LineMap<Vec<(usize, Option<super::Loc>)>>,
    /// Runs of masked accesses checked without branches (masked_runs.rs).
    pub runs: super::masked_runs::RunPlan,
    /// Shadow prefetches by anchor line (prefetch.rs), for the accesses not covered here or in
    /// a run.
    pub prefetch: super::prefetch::PrefetchPlan,
}

struct Entry {
    line: usize,
    offset: i64,
    width: u32,
    loc: Option<(u32, u32, u32)>,
}

/// The coalescing plan of the lines of `range`, the whole module or a range beginning and ending
/// outside bodies (the lines keep their module numbering): the plans of a module's bodies, made
/// in parts. `defs`: the module's bodies and their register definitions; `covered`: accesses
/// already covered by a loop range test (loops.rs; they count as checked, as hoisted ones do;
/// the lines the loop versioning wrote, `Line::generated`, hold no access to check); `locs`: the
/// source location at each line; `runs`: plan masked_runs.rs's runs (not with outside checks,
/// whose failed checks may resume); `batches`: batch checks (prefetch.rs).
#[allow(clippy::too_many_arguments)]
pub(super) fn plan_range<'l, 'a>(
    lines: &'l [Line<'a>],
    range: std::ops::Range<usize>,
    defs: &ModuleDefs<'_, 'a>,
    branches: &super::branches::Branches<'_>,
    covered: &LineSet,
    locs: &[Option<super::Loc>],
    runs: bool,
    batches: bool,
) -> Plan {
    let bodies = defs.bodies();
    let mut plan = Plan::default();
    let mut groups: Groups<'l> = Groups::default();
    // Lines holding a check (each will branch), and the plain single checks among them with their
    // address register: the candidates for a shadow prefetch.
    let mut check_lines = LineSet::default();
    let mut candidates: Vec<super::prefetch::Candidate> = Vec::new();
    // Guarded atomics on lines of their own: members of masked runs only (an atomic ends every
    // other kind of group: masked_runs.rs).
    let mut atomics: Vec<super::prefetch::Candidate> = Vec::new();
    // The bodies opening at or before the line (`Bodies::interior` of each line in order,
    // without a search a line).
    let mut opened = bodies.iter().take_while(|b| b.open < range.start).count();
    // The last code line left a statement open (no `;`, brace or label colon at its end).
    let mut statement_open = false;
    for (i, line) in lines.iter().enumerate().take(range.end).skip(range.start) {
        while opened < bodies.len() && bodies.nth(opened).open <= i {
            opened += 1;
        }
        let interior = opened.checked_sub(1).is_some_and(|k| bodies.nth(k).open < i && i < bodies.nth(k).close);
        debug_assert_eq!(interior, bodies.interior(i));
        // Only lines strictly inside a body are grouped; any other ends the groups open.
        if !interior {
            finish_all(&mut groups, &mut plan);
            continue;
        }
        // A line continuing a statement left open above (a `call` spread over lines) is part of
        // it, not an access: the rewriter's walk passes it over as such (heap.rs holds a heap
        // call's lines whole), so a group led from it would have its checks never emitted.
        let continues = statement_open;
        if !line.is_blank() && line.directive().is_none() {
            statement_open = !line.ends_statement();
        }
        if continues && line.brackets {
            finish_all(&mut groups, &mut plan);
            continue;
        }
        if line.directive() == Some(".loc") {
            continue;
        }
        let loc = locs[i];
        // Only a line with an address operand can start or extend a group; with no group open,
        // nothing else needs looking at (this pass runs over every line of every module).
        if groups.is_empty() && !line.brackets {
            continue;
        }
        if line.is_blank() {
            continue;
        }
        let has_address = line.brackets && !covered.contains(&i) && !line.generated;
        if line.code_opens_block_comment() || line.kills_checks() || matches!(line.directive(), Some(".entry" | ".func")) {
            finish_all(&mut groups, &mut plan);
            if has_address && runs && line.is_lone_statement() {
                if let Some((ins, a)) = line.first_stmt().and_then(|st| st.checked()) {
                    if let (Some((r, _)), AccessKind::Atomic, Some(_)) = (single_check(a), a.kind, ins.guard) {
                        atomics.push(super::prefetch::Candidate { line: i, base: r.to_string(), guarded: true, loc });
                    }
                }
            }
            continue;
        }
        if line.directive().is_some() {
            continue; // other directives (.reg, .file, .pragma, ...)
        }
        // One statement and nothing else (Line::is_lone_statement): empty statements
        // (`;;ld ...;`) make a line of several, as the rewriter's own statement split sees it, so
        // it never joins a group or a batch; nor does a statement left open (the walk checks
        // only complete ones).
        let single = line.is_lone_statement();
        if has_address && single {
            // The line's one statement (Line::stmts splits it as `body.trim()`).
            if let Some((ins, a)) = line.first_stmt().and_then(|st| st.checked()) {
                check_lines.insert(i);
                if let (Some((r, w)), true) = (single_check(a), a.kind != AccessKind::Atomic) {
                    let key = (r, ins.guard.unwrap_or(""));
                    groups.push(key, Entry { line: i, offset: a.offset, width: w, loc });
                    candidates.push(super::prefetch::Candidate { line: i, base: r.to_string(), guarded: ins.guard.is_some(), loc });
                }
            }
        } else if has_address && !single && line.stmts().iter().any(|st| st.checked_access().is_some()) {
            check_lines.insert(i);
        }
        // Groups whose address or guard register a statement redefines end before it takes effect.
        // (Loop versioning's lines, `Line::generated`, write only gasan's own registers, which
        // no group's address or guard names: their statements are not read.)
        if line.generated {
            continue;
        }
        for st in line.stmts() {
            if groups.is_empty() {
                break;
            }
            // Each destination looked up in the register index (the statement's destinations are
            // parsed once, with it: a lookup costs less than testing the text for each open
            // group's registers, as this did up to eight groups).
            for d in st.dests() {
                let Some(keys) = groups.by_register.remove(d) else { continue };
                for k in keys {
                    if let Some(g) = groups.remove(&k) {
                        finish(g, &mut plan);
                    }
                }
            }
        }
    }
    finish_all(&mut groups, &mut plan);
    plan.covered.extend(covered);
    plan.hoisted_lines.extend(covered);
    candidates.retain(|c| !plan.covered.contains(&c.line));
    if runs {
        let hoist_points: LineSet = plan.hoist.keys().copied().collect();
        let mut members = candidates.clone();
        members.append(&mut atomics);
        members.sort_by_key(|c| c.line);
        plan.runs = super::masked_runs::plan(lines, defs, &members, &hoist_points);
        candidates.retain(|c| !plan.runs.members.contains_key(&c.line));
    }
    plan.prefetch = super::prefetch::plan(lines, defs, branches, &check_lines, &candidates, batches);
    plan
}

/// The open groups of the current basic block, by (address register, guard), and the groups each
/// register (address or guard, without `!`) ends when redefined.
/// Registers and guards are borrowed from the lines' parses: a key a checked access, cloned
/// into each map, cost four allocations.
#[derive(Default)]
struct Groups<'s> {
    open: HashMap<(&'s str, &'s str), Vec<Entry>>,
    /// May still list a group that ended through its other register, or one started again with
    /// the same key (which names this register too): ending it is right either way.
    by_register: HashMap<&'s str, Vec<(&'s str, &'s str)>>,
}

impl<'s> Groups<'s> {
    fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
    fn push(&mut self, key: (&'s str, &'s str), e: Entry) {
        match self.open.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut g) => g.get_mut().push(e),
            std::collections::hash_map::Entry::Vacant(g) => {
                let (base, guard) = *g.key();
                let guard = guard.trim_start_matches('!');
                for reg in std::iter::once(base).chain((!guard.is_empty()).then_some(guard)) {
                    self.by_register.entry(reg).or_default().push(*g.key());
                }
                g.insert(vec![e]);
            }
        }
    }
    fn remove(&mut self, key: &(&'s str, &'s str)) -> Option<Vec<Entry>> {
        self.open.remove(key)
    }
}

fn finish_all(groups: &mut Groups, plan: &mut Plan) {
    // Emptying a map costs its capacity even when it is empty, and blocks end on most lines.
    if groups.open.is_empty() && groups.by_register.is_empty() {
        return;
    }
    for (_, g) in groups.open.drain() {
        finish(g, plan);
    }
    groups.by_register.clear();
    release_excess(&mut groups.open);
    release_excess(&mut groups.by_register);
}

fn finish(g: Vec<Entry>, plan: &mut Plan) {
    if g.len() < 2 {
        return;
    }
    // In i128: offsets are whatever the input wrote, up to the ends of i64.
    let end = |e: &Entry| i128::from(e.offset) + i128::from(e.width);
    // The lowest start and the highest end, each from the first access where it has them: its
    // own check covers that end, so nothing is hoisted for it (a load and a store of one address
    // are one check).
    let first = &g[0];
    let lo = g.iter().filter(|e| e.offset < first.offset).min_by_key(|e| e.offset).unwrap_or(first);
    let hi = g.iter().filter(|e| end(e) > end(first)).max_by_key(|e| end(e)).unwrap_or(first);
    if end(hi) - i128::from(lo.offset) >= i128::from(MIN_REDZONE) {
        return;
    }
    let first = first.line;
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

/// The address register and width of a plain single check (what groups, prefetches and masked
/// runs take): an address in a register, a fixed width, no bulk copy, no nonzero-size guard.
fn single_check(a: &super::access::Access) -> Option<(&str, u32)> {
    match (&a.base, &a.width, a.bulk, &a.guard_nonzero) {
        (AddrBase::Reg(r), Width::Fixed(w), false, None) => Some((r.as_str(), *w)),
        _ => None,
    }
}
