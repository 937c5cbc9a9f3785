//! Runs of masked accesses checked without branches (halt mode with optimization; issue 39).
//!
//! Triton writes a tile's loads and stores as one scalar access per element, each under its own
//! lane mask (`@%p5 ld.global.b16 { %rs5 }, [ %rd74 + 0 ];`), 64 or 128 in a row with only the
//! moves that set the masked-off value between them. A check with a branch before each access cuts
//! that straight line into as many basic blocks: ptxas then schedules each piece on its own, every
//! address computed above the run stays live across all the branches, and the unhinted `tl.dot`
//! matmul spilled 16x more than native (jit/FORMS.md, "Cost seen").
//!
//! A run is checked without a branch inside it instead. Each member's check, right before it,
//! tests its shadow byte under the member's own guard and takes the access's guard over: the
//! access runs under `guard && !bad`, so a bad access is never made (a masked-off lane neither
//! loads a shadow byte nor counts as bad). The first bad member of the run records its address
//! and site, and one branch after the run's last access reports it. What a suppressed load left
//! in its registers is read, before that branch, only by the run's moves and later members'
//! checks, which have no effect outside the thread (no memory operand lies between members), and
//! the report ends the kernel.
//!
//! Where every member's address register and guard already hold their values at the run's first
//! member (nothing in the run writes them), the members' shadow bytes are loaded and tested before
//! the run instead ([`RunPlan::loaded_ahead`]; emit.rs `run_prefetch`), their verdicts kept as bits
//! of a mask and the first bad member's address and site recorded there, so that a member is two
//! instructions (its bit and its guard; emit.rs `run_member_tested`): with kernel-parameter fast paths (bounds.rs), the members' address tests go first and
//! one branch skips every load when all of them pass, so no load is left inside the run. A run of atomics with acquire-release order (Triton's `tl.atomic_add`)
//! otherwise waits for each atomic's round trip before the next member's shadow load, and the
//! next atomic for that load: twice the atomics' own time (benches/jit/pair.py, histogram).
//!
//! Members are plain single checks (prefetch.rs's candidates) with a guard, and guarded atomics,
//! lines of one statement; a member whose address or guard is computed from the run's own loads
//! starts a new run; between two members only lines without a memory operand, a label, a branch, a
//! barrier or any other statement that ends a check's window ([`Line::kills_checks`]), and
//! nothing but `.loc` of the directives.

use super::access::AddrBase;
use super::defs::{constant_add, Defs, ModuleDefs};
use super::prefetch::Candidate;
use super::{Line, LineMap, LineSet};

/// Fewest members of a run (one alone keeps its ordinary check and its branch).
pub(super) const MIN_RUN: usize = 2;

/// The runs of a part of a module.
#[derive(Default)]
pub(super) struct RunPlan {
    /// Member line → the run's first member line (which names the run's registers).
    pub members: LineMap<usize>,
    /// The line after a run's last member (the run's branch goes before it) → the run's first line.
    pub ends: LineMap<usize>,
    /// A run's first line → its members (in line order), for the runs where no line writes a
    /// register a later member's check reads: their shadow bytes may be loaded before the run.
    pub loaded_ahead: LineMap<Vec<usize>>,
    /// A member of a run in `loaded_ahead` → its address as a register and a constant
    /// ([`span_base`]): members with one register are tested as one span before the run.
    pub span_bases: LineMap<(String, i64)>,
}

/// The runs among `candidates` (plain single checks and guarded atomics, in line order);
/// `excluded`: lines that get a check of another kind (coalesce.rs's hoisting points).
pub(super) fn plan(lines: &[Line<'_>], defs: &ModuleDefs<'_, '_>, candidates: &[Candidate], excluded: &LineSet) -> RunPlan {
    let mut out = RunPlan::default();
    let mut run: Vec<usize> = Vec::new();
    // The registers whose values come from the run's own accesses (their destinations, and what
    // the lines between compute from them).
    let mut from_run: Vec<&str> = Vec::new();
    for c in candidates.iter().filter(|c| c.guarded && !excluded.contains(&c.line)) {
        if let Some(&last) = run.last() {
            if quiet_between(lines, last, c.line) {
                from_run.extend(lines[last].dests());
                for l in &lines[last + 1..c.line] {
                    if l.stmts().iter().filter_map(|st| st.instr.as_ref()).any(|ins| ins.registers_read().any(|r| from_run.contains(&r))) {
                        from_run.extend(l.dests());
                    }
                }
                // A member whose address or guard comes from the run's own loads (a histogram's
                // atomics after its index loads) starts a run of its own: its check waits for
                // those loads anyway, and the run before it stays one whose bytes can load first.
                if reads(&lines[c.line]).is_none_or(|read| read.iter().any(|r| from_run.contains(&r.as_str()))) {
                    finish(&mut out, &mut run);
                    from_run.clear();
                }
            } else {
                finish(&mut out, &mut run);
                from_run.clear();
            }
        }
        run.push(c.line);
    }
    finish(&mut out, &mut run);
    for members in out.loaded_ahead.values_mut() {
        if !registers_hold_from_start(lines, members) {
            members.clear();
        }
    }
    out.loaded_ahead.retain(|_, m| !m.is_empty());
    for (&first, members) in &out.loaded_ahead {
        let Some(body) = defs.bodies().holding(first) else { continue };
        let d = defs.of(body);
        for &m in members {
            if let Some(base) = span_base(&lines[m], &d) {
                out.span_bases.insert(m, base);
            }
        }
    }
    out
}

/// How many `add` definitions [`span_base`] follows back.
const SPAN_DEPTH: usize = 4;

/// A member's address as a register and a constant, following back the registers' one unguarded
/// definitions of the form `add.s64 %r, %b, imm` (Triton computes a tile's addresses as one
/// pointer plus the lanes' offsets: `%rd2 = %rd1 + 512`, ...). Each register on the way has one
/// definition, so it holds the value that definition gave it wherever it is read.
fn span_base(line: &Line<'_>, d: &Defs<'_, '_>) -> Option<(String, i64)> {
    let (_, a) = line.first_stmt()?.checked()?;
    let AddrBase::Reg(r) = &a.base else { return None };
    let (mut reg, mut offset) = (r.as_str(), a.offset);
    for _ in 0..SPAN_DEPTH {
        let Some((_, base, add, 64)) = d.only_writer(reg).and_then(constant_add) else { break };
        if d.only_writer(base).is_none() {
            break;
        }
        offset = offset.checked_add(add)?;
        reg = base;
    }
    Some((reg.to_string(), offset))
}

fn finish(out: &mut RunPlan, run: &mut Vec<usize>) {
    if run.len() >= MIN_RUN {
        let first = run[0];
        out.members.extend(run.iter().map(|&l| (l, first)));
        out.ends.insert(run[run.len() - 1] + 1, first);
        out.loaded_ahead.insert(first, std::mem::take(run));
    }
    run.clear();
}

/// The registers a member's check reads: its address register and its guard's predicate.
fn reads(line: &Line<'_>) -> Option<Vec<String>> {
    let (ins, a) = line.first_stmt()?.checked()?;
    let AddrBase::Reg(r) = &a.base else { return None };
    let mut read = vec![r.clone()];
    read.extend(ins.guard.map(|g| g.trim_start_matches('!').to_string()));
    Some(read)
}

/// Whether each member's address register and guard hold, at the run's first member, the values
/// the member reads: no line of the run before it (members included) writes them.
fn registers_hold_from_start(lines: &[Line<'_>], members: &[usize]) -> bool {
    let first = members[0];
    members.iter().all(|&m| reads(&lines[m]).is_some_and(|read| lines[first..m].iter().all(|l| l.dests().all(|d| !read.iter().any(|r| r == d)))))
}

/// Whether the lines strictly between members `a` and `b` leave the run one straight line with no
/// effect outside the thread.
fn quiet_between(lines: &[Line<'_>], a: usize, b: usize) -> bool {
    lines[a + 1..b].iter().all(|l| {
        if l.is_blank() {
            return !l.block_comment_marker();
        }
        if let Some(directive) = l.directive() {
            return directive == ".loc";
        }
        // One complete statement without a memory operand.
        l.is_lone_statement() && !l.brackets && !l.braces && !l.slash && !l.kills_checks()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<Line<'_>> {
        text.split_inclusive('\n').map(Line::read).collect()
    }

    /// [`plan`] of lines outside any body (no register definitions).
    fn plan_of(l: &[Line<'_>], candidates: &[Candidate], excluded: &LineSet) -> RunPlan {
        let bodies = super::super::bodies::Bodies::scan(l);
        plan(l, &ModuleDefs::new(l, &bodies), candidates, excluded)
    }

    #[test]
    fn a_members_span_base_follows_single_adds_of_constants() {
        let src = ".visible .entry k()\n{\n\tld.param.u64 %rd1, [p];\n\tadd.s64 %rd2, %rd1, 512;\n\tadd.s64 %rd3, %rd2, 0x10;\n\t@%p1 ld.global.b32 {%r1}, [ %rd3 + 4 ];\n\tmov.u64 %rd4, %rd1;\n\tadd.s64 %rd4, %rd4, 8;\n\t@%p2 ld.global.b32 {%r2}, [ %rd4 + 0 ];\n\tadd.s64 %rd5, %rd1, %rd2;\n\t@%p3 ld.global.b32 {%r3}, [ %rd5 + 0 ];\n\tadd.s32 %r9, %r8, 4;\n}\n";
        let l = lines(src);
        let bodies = super::super::bodies::Bodies::scan(&l);
        let defs = ModuleDefs::new(&l, &bodies);
        let d = defs.of(bodies.nth(0));
        assert_eq!(span_base(&l[5], &d), Some(("%rd1".to_string(), 532)), "through two adds of constants");
        assert_eq!(span_base(&l[8], &d), Some(("%rd4".to_string(), 0)), "a register defined twice is not followed");
        assert_eq!(span_base(&l[10], &d), Some(("%rd5".to_string(), 0)), "an add of two registers is not followed");
        assert_eq!(span_base(&l[11], &d), None, "no access");
    }

    fn cand(line: usize, guarded: bool) -> Candidate {
        Candidate { line, base: String::new(), guarded, loc: None }
    }

    #[test]
    fn masked_loads_with_moves_between_form_one_run() {
        let src = "\tmov.u16 %rs1, %rs2;\n\t@%p1 ld.global.b16 { %rs1 }, [ %rd1 + 0 ];\n\tmov.u16 %rs3, %rs2;\n\t.loc 1 5 3\n\t@%p2 ld.global.b16 { %rs3 }, [ %rd2 + 0 ];\n\t@!%p3 ld.global.b16 { %rs4 }, [ %rd3 + 0 ];\n\tadd.s32 %r1, %r2, 1;";
        let l = lines(src);
        let p = plan_of(&l, &[cand(1, true), cand(4, true), cand(5, true)], &LineSet::default());
        assert_eq!(p.members.len(), 3);
        assert!(p.members.values().all(|&f| f == 1));
        assert_eq!(p.ends.get(&6), Some(&1), "the branch goes after the last member");
    }

    #[test]
    fn a_barrier_a_label_a_shared_access_or_an_unguarded_access_ends_a_run() {
        for between in ["bar.sync 0;", "$L__BB0_2:", "st.shared.b16 [%r4], %rs1;", "@%p9 bra $L__BB0_3;", "call foo, (%r1);", "{", ".reg .b32 %r9;"] {
            let src = format!("\t@%p1 ld.global.b16 {{ %rs1 }}, [ %rd1 + 0 ];\n\t{between}\n\t@%p2 ld.global.b16 {{ %rs3 }}, [ %rd2 + 0 ];");
            let l = lines(&src);
            let p = plan_of(&l, &[cand(0, true), cand(2, true)], &LineSet::default());
            assert!(p.members.is_empty(), "{between}: not one run");
        }
        let src = "\t@%p1 ld.global.b16 { %rs1 }, [ %rd1 + 0 ];\n\tld.global.b16 %rs3, [%rd2];";
        let l = lines(src);
        assert!(plan_of(&l, &[cand(0, true), cand(1, false)], &LineSet::default()).members.is_empty(), "an unguarded access is no member");
    }

    #[test]
    fn a_member_addressed_by_the_runs_own_loads_starts_a_run_whose_bytes_load_ahead() {
        // Two index loads, then two atomics at addresses computed from the loaded indices: two
        // runs, each of whose members' registers hold from its start.
        let src = "\t@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];\n\t@%p2 ld.global.b32 { %r2 }, [ %rd2 + 0 ];\n\tmad.wide.s32 %rd9, %r1, 4, %rd8;\n\tmad.wide.s32 %rd10, %r2, 4, %rd8;\n\t@%p1 atom.global.add.u32 %r3, [ %rd9 + 0 ], 1;\n\t@%p2 atom.global.add.u32 %r4, [ %rd10 + 0 ], 1;";
        let l = lines(src);
        let p = plan_of(&l, &[cand(0, true), cand(1, true), cand(4, true), cand(5, true)], &LineSet::default());
        assert_eq!(p.members.get(&4), Some(&4), "the first atomic starts a run");
        assert_eq!(p.members.get(&1), Some(&0));
        assert_eq!(p.loaded_ahead.get(&0), Some(&vec![0, 1]));
        assert_eq!(p.loaded_ahead.get(&4), Some(&vec![4, 5]));
        // An address computed inside the run from a register loaded before it keeps one run, whose
        // bytes cannot load ahead (the second address is not yet computed at its start).
        let src = "\t@%p1 ld.global.f32 %f2, [%rd8];\n\tadd.s64 %rd10, %rd4, %rd9;\n\t@%p1 ld.global.f32 %f3, [%rd10];";
        let l = lines(src);
        let p = plan_of(&l, &[cand(0, true), cand(2, true)], &LineSet::default());
        assert_eq!(p.members.len(), 2);
        assert!(p.loaded_ahead.is_empty());
    }

    #[test]
    fn excluded_lines_split_runs() {
        let src = "\t@%p1 st.global.b32 [ %rd1 + 0 ], { %r1 };\n\t@%p2 st.global.b32 [ %rd2 + 0 ], { %r2 };\n\t@%p3 st.global.b32 [ %rd3 + 0 ], { %r3 };";
        let l = lines(src);
        let p = plan_of(&l, &[cand(0, true), cand(1, true), cand(2, true)], &[2].into_iter().collect());
        assert_eq!(p.members.keys().copied().collect::<LineSet>(), [0, 1].into_iter().collect());
        assert_eq!(p.ends.get(&2), Some(&0));
    }
}
