//! The labels and branches of a module's function bodies, found once per line list and read by
//! loop versioning (loops.rs: which loops to version) and check placement (prefetch.rs: which
//! loops to pipeline, whether a line lies in a loop). The two had each found back edges their own
//! way; labels are now also scoped to their function, as PTX scopes them (a branch never reaches a
//! label of another function that happens to share its name).

use super::bodies::Bodies;
use super::line::{find_byte, Line};
use super::opcode::Op;
use super::stmt::falls_through_to;
use rustc_hash::FxHashMap as HashMap;

/// A branch back to a label earlier in its body: the end of a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct BackEdge {
    pub label_line: usize,
    pub branch_line: usize,
}

#[derive(Default)]
pub(in crate::ptx) struct Branches<'a> {
    /// How often a label is named by branches (`bra`, `brx.idx` targets via `.branchtargets`),
    /// keyed by its body's opening line and its name.
    refs: HashMap<(usize, &'a str), usize>,
    /// In branch-line order.
    back_edges: Vec<BackEdge>,
    /// The lines inside some loop (label line to back-edge line, both included), as disjoint
    /// intervals in line order: one binary search per question, however many loops there are.
    loops: Vec<(usize, usize)>,
}

impl<'a> Branches<'a> {
    /// Lines strictly inside a body only (the planners place nothing elsewhere). A label is a line
    /// of code ending in `:`; the latest one of a name counts (PTX forbids repeating it).
    pub fn scan(lines: &[Line<'a>], bodies: &Bodies) -> Self {
        Self::scan_with(lines, bodies, |_| false, |_| {})
    }

    /// [`Branches::scan`], and the lines it found to be a label or a line naming a branch (its
    /// "loud" lines, in the order read): the others of the bodies' insides are the lines
    /// [`Branches::scan_skipping`] can pass over when the same text is read again
    /// ([`quiet_lines`] maps them, where loops were versioned). (Only the few loud lines are
    /// written down: a flag written for every line cost the modules that version no loop, most.)
    pub fn scan_noting_loud(lines: &[Line<'a>], bodies: &Bodies) -> (Self, Vec<usize>) {
        // (Sized for a loud line in eight, more than most modules hold: not grown by copying.)
        let mut loud = Vec::with_capacity(lines.len() / 8);
        let b = Self::scan_with(lines, bodies, |_| false, |k| loud.push(k));
        (b, loud)
    }

    /// [`Branches::scan`] of lines of which those where `quiet(k)` is known to be neither a label
    /// nor a line naming a branch (the same text [`Branches::scan_noting_quiet`] found so: loop
    /// versioning's lines moved from the input) are not read again. The scan passes over such a
    /// line without changing anything, so skipping it finds the same branches.
    pub fn scan_skipping(lines: &[Line<'a>], bodies: &Bodies, quiet: impl Fn(usize) -> bool) -> Self {
        Self::scan_with(lines, bodies, quiet, |_| {})
    }

    fn scan_with(lines: &[Line<'a>], bodies: &Bodies, skip: impl Fn(usize) -> bool, mut found_loud: impl FnMut(usize)) -> Self {
        let mut b = Branches::default();
        for body in bodies.iter() {
            let mut labels: HashMap<&'a str, usize> = HashMap::default();
            let end = body.close.min(lines.len());
            for (k, line) in lines.iter().enumerate().take(end).skip(body.open + 1) {
                if skip(k) {
                    continue;
                }
                let code = line.code;
                if let Some(name) = line.label() {
                    labels.insert(name, k);
                    found_loud(k);
                    continue;
                }
                // Only labels and branches matter: this runs over every line.
                if !names_branch(code) {
                    continue;
                }
                found_loud(k);
                // Each statement of the line (Line::stmts): a `bra` names its target, other
                // statements (`brx.idx`, `.branchtargets` lists) are read word by word.
                let mut count = |t: &'a str| {
                    let t = t.trim();
                    if !t.is_empty() && !t.starts_with('%') && !t.starts_with('.') {
                        *b.refs.entry((body.open, t)).or_default() += 1;
                    }
                };
                for st in line.stmts() {
                    match &st.instr {
                        Some(ins) if ins.opcode.op == Op::Bra => {
                            if let Some(&l) = ins.operands.first().and_then(|t| labels.get(t)) {
                                b.back_edges.push(BackEdge { label_line: l, branch_line: k });
                            }
                            ins.operands.iter().for_each(|&t| count(t));
                        }
                        _ => st.text.split(|c: char| c == ',' || c.is_whitespace()).for_each(&mut count),
                    }
                }
            }
        }
        // Merge the spans (nested and overlapping loops) into disjoint intervals.
        let mut spans: Vec<(usize, usize)> = b.back_edges.iter().map(|e| (e.label_line, e.branch_line)).collect();
        spans.sort_unstable();
        for (l, e) in spans {
            match b.loops.last_mut() {
                Some(last) if l <= last.1 => last.1 = last.1.max(e),
                _ => b.loops.push((l, e)),
            }
        }
        b
    }

    pub fn back_edges(&self) -> &[BackEdge] {
        &self.back_edges
    }

    /// How many branches of the body holding line `at` name `label`.
    pub fn refs(&self, bodies: &Bodies, at: usize, label: &str) -> usize {
        let Some(body) = bodies.holding(at) else { return 0 };
        self.refs.get(&(body.open, label)).copied().unwrap_or(0)
    }

    /// Whether any line of `range` is in a loop ([`Branches::in_loop`] of each, in one search).
    pub fn any_in_loop(&self, range: std::ops::Range<usize>) -> bool {
        // The intervals are disjoint and in order: of those starting before the range's end, the
        // last ends last.
        let Some(last) = range.end.checked_sub(1).filter(|&l| l >= range.start) else { return false };
        let after = self.loops.partition_point(|&(l, _)| l <= last);
        after > 0 && self.loops[after - 1].1 >= range.start
    }

    pub fn in_loop(&self, line: usize) -> bool {
        // The last interval starting at or before `line` is the only one that can hold it.
        let after = self.loops.partition_point(|&(l, _)| l <= line);
        after > 0 && line <= self.loops[after - 1].1
    }
}

/// A loop of one basic block as both loop versioning (loops.rs) and loop pipelining (prefetch.rs)
/// read it: a label entered by falling through from the statement before it, and a back edge
/// `bra LABEL` (naming nothing else) alone on its line. What lies between is each pass's own
/// question (versioning walks one statement a line symbolically; pipelining moves code inside
/// its check window), as is what it needs of the two facts here.
#[derive(Clone, Copy, Debug)]
pub(in crate::ptx) struct SingleBlockLoop<'a> {
    pub label: &'a str,
    /// The back edge has a guard (`@%p bra`): the loop can end there.
    pub guarded: bool,
    /// Branches other than the back edge that name the label (each enters the loop without
    /// passing the code before its label).
    pub other_entries: usize,
}

impl Branches<'_> {
    /// The loop from the label on line `label_line` to the back edge on line `back_edge`, when
    /// it is a [`SingleBlockLoop`].
    pub fn single_block_loop<'l>(&self, lines: &[Line<'l>], bodies: &Bodies, label_line: usize, back_edge: usize) -> Option<SingleBlockLoop<'l>> {
        let label = lines[label_line].label()?;
        let edge = lines[back_edge].sole_instr()?;
        if edge.opcode.op != Op::Bra || edge.operands.as_slice() != [label] || !falls_through_to(lines, label_line) {
            return None;
        }
        let other_entries = self.refs(bodies, label_line, label).saturating_sub(1);
        Some(SingleBlockLoop { label, guarded: edge.guard.is_some(), other_entries })
    }
}

/// Does `code` hold "bra" or "brx" (`bra`, `brx.idx`, `.branchtargets`)? One pass over its `b`s:
/// most lines hold several (`.b32`), few a branch.
fn names_branch(code: &str) -> bool {
    // (Each `b` found with the line-length search, [`find_byte`]: `memchr`'s iterator cost more
    // than the search on a line.)
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(p) = find_byte(b'b', &bytes[from..]) {
        let i = from + p;
        if bytes.get(i + 1) == Some(&b'r') && matches!(bytes.get(i + 2), Some(b'a' | b'x')) {
            return true;
        }
        from = i + 1;
    }
    false
}

/// Which of `len` lines [`Branches::scan_noting_loud`] found to be neither a label nor a line
/// naming a branch, from its loud lines: `true` for the lines strictly inside a body (those the
/// scan reads, below a body's closing line and the lines' end) that are not loud, `false` for the
/// rest (lines outside the bodies' insides are not read).
pub(in crate::ptx) fn quiet_lines(loud: &[usize], bodies: &Bodies, len: usize) -> Vec<bool> {
    let mut quiet = vec![false; len];
    for body in bodies.iter() {
        let end = body.close.min(len);
        if body.open + 1 < end {
            quiet[body.open + 1..end].fill(true);
        }
    }
    for &k in loud {
        quiet[k] = false;
    }
    quiet
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_text(text: &str) -> (Vec<BackEdge>, Vec<bool>, Vec<usize>) {
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        let b = Branches::scan(&lines, &bodies);
        let in_loop = (0..lines.len()).map(|i| b.in_loop(i)).collect();
        let refs = (0..lines.len()).map(|i| lines[i].label().map_or(0, |l| b.refs(&bodies, i, l))).collect();
        (b.back_edges().to_vec(), in_loop, refs)
    }

    proptest::proptest! {
        /// The quiet lines mapped from the scan's loud ones are those it reads (strictly inside a
        /// body) that are neither a label nor a line naming a branch, as a flag written for each
        /// line read found them.
        #[test]
        fn quiet_lines_are_the_lines_read_that_are_neither_label_nor_branch(picks in proptest::collection::vec(0usize..12, 0..40)) {
            const PIECES: [&str; 12] = [".entry f()\n", "{\n", "}\n", "$L1:\n", "@%p1 bra $L1;\n", "bra.uni $L2;\n", "add.s32 %r1, %r1, 1;\n", "ret;\n", "\n", "$L2:\n", "// bra\n", "brx.idx %r1, $T;\n"];
            let text: String = picks.iter().map(|&k| PIECES[k]).collect();
            let lines = Line::read_all(text.split_inclusive('\n'));
            let bodies = Bodies::scan(&lines);
            let mut noted = vec![false; lines.len()];
            let flagged = Branches::scan_with(&lines, &bodies, |_| false, |_| {});
            let (found, loud) = Branches::scan_noting_loud(&lines, &bodies);
            for body in bodies.iter() {
                for k in body.open + 1..body.close.min(lines.len()) {
                    noted[k] = lines[k].label().is_none() && !names_branch(lines[k].code);
                }
            }
            proptest::prop_assert_eq!(quiet_lines(&loud, &bodies, lines.len()), noted);
            proptest::prop_assert_eq!(found.back_edges(), flagged.back_edges());
        }

        /// A line names a branch where `br` and `a` or `x` follow one another in it.
        #[test]
        fn names_branch_is_a_substring_test(code in "[bra x.;é]{0,40}") {
            proptest::prop_assert_eq!(names_branch(&code), code.contains("bra") || code.contains("brx"));
        }
    }

    #[test]
    fn loops_are_back_edges_to_earlier_labels_of_the_same_body() {
        let text = ".entry f()\n{\n$L1:\nadd.s32 %r1, %r1, 1;\n@%p1 bra $L1;\nbra $L2;\n$L2:\nret;\n}\n\
                    .entry g()\n{\nbra $L1;\n$L1:\n@%p1 bra.uni $L1;\nret;\n}\n";
        let (edges, in_loop, refs) = scan_text(text);
        // f: $L1 (line 2) ← line 4; the forward branch to $L2 is no loop. g: its branch to $L1 at
        // line 11 goes forward to its own $L1 (line 12), not back to f's; line 13 loops.
        assert_eq!(edges, [BackEdge { label_line: 2, branch_line: 4 }, BackEdge { label_line: 12, branch_line: 13 }]);
        let looping: Vec<usize> = (0..in_loop.len()).filter(|&i| in_loop[i]).collect();
        assert_eq!(looping, [2, 3, 4, 12, 13]);
        // f's $L1 is named once, f's $L2 once, g's $L1 twice.
        assert_eq!((refs[2], refs[6], refs[12]), (1, 1, 2));
    }

    /// The single-block loops of a body: the label's entry, the back edge's form and the other
    /// branches to the label decide it, each asked the same way by versioning and pipelining.
    #[test]
    fn single_block_loops_are_a_label_entered_by_falling_through_and_its_back_edge() {
        let text = ".entry f()\n{\nmov.u32 %r1, 0;\n$L1:\nadd.s32 %r1, %r1, 1;\n@%p1 bra $L1;\n\
                    mov.u32 %r3, 0;\n$L2:\nadd.s32 %r1, %r1, 1;\nbra.uni $L2;\n\
                    bra.uni $L3;\n$L3:\nadd.s32 %r1, %r1, 1;\n@%p1 bra $L3;\n\
                    mov.u32 %r2, 0;\n$L4:\nadd.s32 %r1, %r1, 1; @%p1 bra $L4;\n\
                    @%p2 bra $L5;\n$L5:\nadd.s32 %r1, %r1, 1;\n@%p1 bra $L5;\nret;\n}\n";
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = Bodies::scan(&lines);
        let b = Branches::scan(&lines, &bodies);
        let loops: Vec<_> = b.back_edges().iter().map(|e| b.single_block_loop(&lines, &bodies, e.label_line, e.branch_line).map(|l| (l.label, l.guarded, l.other_entries))).collect();
        assert_eq!(
            loops,
            [
                // Entered by falling through, a guarded back edge alone on its line.
                Some(("$L1", true, 0)),
                // An unguarded back edge (a loop only a trap or an exit could leave).
                Some(("$L2", false, 0)),
                // Entered only by the jump before it: no loop of one block entered from above.
                None,
                // The back edge shares its line: not alone on it.
                None,
                // Also entered by a branch from above.
                Some(("$L5", true, 1)),
            ]
        );
    }

    #[test]
    fn branch_names_are_found_among_other_words() {
        for (code, names) in [
            ("@%p1 bra.uni $L1;", true),
            ("brx.idx %r1, ts;", true),
            ("ts: .branchtargets $L1;", true),
            ("brev.b32 %r1, %r2;", false),
            ("add.b32 %r1, %r2, 1;", false),
            ("br", false),
            ("mov.b32 %r1, %r2; bra $L;", true),
        ] {
            assert_eq!(names_branch(code), names, "{code}");
        }
    }

    #[test]
    fn branch_tables_count_as_references() {
        let text = ".entry f()\n{\n$L1:\nts: .branchtargets $L1, $L2;\n$L2:\nbrx.idx %r1, ts;\nret;\n}\n";
        let (edges, _, refs) = scan_text(text);
        assert!(edges.is_empty());
        assert_eq!((refs[2], refs[4]), (1, 1));
    }
}
