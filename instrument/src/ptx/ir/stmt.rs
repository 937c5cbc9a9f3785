//! What a statement does to the flow of control and to the checks before it, decided once: the
//! label a line is, what ends a basic block ([`ends_block`]), what no earlier check survives
//! ([`kills_checks`]), and whether a label is entered by falling through ([`falls_through_to`]).

use super::access;
use super::line::Line;

/// Whether control reaches the label on line `label_line` by falling through from the statement
/// before it: that statement is complete (`;`, a label, a scope brace) and not an unconditional
/// jump (`bra`, `brx`, `ret`, `exit`, `trap` without a guard). Loop versioning (loops.rs) and
/// loop pipelining (prefetch.rs) both need a loop entered this way, besides its own back edge.
pub(in crate::ptx) fn falls_through_to(lines: &[Line<'_>], label_line: usize) -> bool {
    let Some(before) = lines[..label_line].iter().rev().find(|l| !l.code.is_empty()) else {
        return false;
    };
    let code = before.code;
    if !(code.ends_with(';') || code.ends_with(':') || code.ends_with('}') || code.ends_with('{')) {
        return false;
    }
    // The line's last statement is the one control leaves it by.
    let last = before.stmts().last().and_then(|s| s.instr.as_ref());
    !last.is_some_and(|i| i.guard.is_none() && i.opcode.op.jumps_away())
}

/// Statements after which no earlier check can be assumed to still hold for the same register, or
/// that end a basic block: labels, branches, calls, returns, barriers and fences.
pub(in crate::ptx) fn kills_checks(t: &str) -> bool {
    let t = access::trim(t);
    if t.ends_with(':') || t.starts_with('{') || t.starts_with('}') {
        return true;
    }
    let (text, _) = opcode_and_rest(t);
    // The names of `Op::transfers_control` and of the barriers, fences, atomics and reductions
    // (matched as text: asked of every line, and these fourteen are fewer to compare than all the
    // names `Op::from_name` knows).
    let name = text.bytes().position(|b| b == b'.').map_or(text, |p| &text[..p]);
    matches!(name, "bra" | "brx" | "call" | "ret" | "exit" | "trap" | "brkpt" | "bar" | "barrier" | "fence" | "membar" | "atom" | "red" | "mbarrier") || text.starts_with("cp.async.wait")
}

/// The opcode of a statement (after any `@p` guard) and the text after it, without allocating.
pub(in crate::ptx) fn opcode_and_rest(t: &str) -> (&str, &str) {
    let mut t = access::trim_start(t);
    if t.starts_with('@') {
        t = access::trim_start(split_at_whitespace(t).map_or("", |(_, r)| r));
    }
    match split_at_whitespace(t) {
        Some((op, rest)) => (op, rest),
        None => (t.trim_end_matches(';'), ""),
    }
}

/// `t.split_once(char::is_whitespace)`, byte by byte while the text is ASCII (statements almost
/// always are): a `char` searcher decodes every character first.
pub(in crate::ptx) fn split_at_whitespace(t: &str) -> Option<(&str, &str)> {
    for (i, &b) in t.as_bytes().iter().enumerate() {
        if b >= 0x80 {
            // The first non-ASCII byte starts a character: the general search from there.
            let (j, c) = t[i..].char_indices().find(|(_, c)| c.is_whitespace())?;
            return Some((&t[..i + j], &t[i + j + c.len_utf8()..]));
        }
        if matches!(b, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r') {
            return Some((&t[..i], &t[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod fall_through_tests {
    use super::falls_through_to;

    /// A loop label is entered by falling through unless an unguarded jump (or an unfinished
    /// statement) comes before it; comments and blank lines in between do not count.
    #[test]
    fn labels_are_entered_by_falling_through_unless_a_jump_precedes_them() {
        for (before, falls) in [
            ("\tadd.s32 %r1, %r1, 1;", true),
            ("\t@%p1 bra $L__BB0_9;", true),
            ("\tbra.uni $L__BB0_9;", false),
            // A line of several statements is left by its last one.
            ("\tadd.s32 %r1, %r1, 1; bra.uni $L__BB0_9;", false),
            ("\tadd.s32 %r1, %r1, 1; @%p1 bra $L__BB0_9;", true),
            ("\tbra $L__BB0_9;", false),
            ("\tbrx.idx %r2, $L_targets;", false),
            ("\tret;", false),
            ("\texit;", false),
            ("\ttrap;", false),
            ("$L__BB0_1:", true),
            ("{", true),
            ("}", true),
            ("\tcall.uni (retval0),", false),
        ] {
            let lines = [before, "\t// a comment", "", "$L__BB0_2:"];
            assert_eq!(falls_through_to(&super::Line::read_all(lines), 3), falls, "{before:?}");
        }
        assert!(!falls_through_to(&super::Line::read_all(["$L__BB0_2:"]), 0), "nothing before the label");
    }
}

#[cfg(test)]
mod split_tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn whitespace_split_is_split_once(t in "[ a-z\t\u{b}\u{85}\u{a0}\u{3000}é.;]{0,12}") {
            prop_assert_eq!(super::split_at_whitespace(&t), t.split_once(char::is_whitespace));
        }
    }
}
