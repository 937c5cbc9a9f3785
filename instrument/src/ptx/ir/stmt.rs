//! What a statement does to the flow of control and to the checks before it, decided once: the
//! label a line is ([`label`]), where a statement ends ([`ends_statement`]), what ends a basic
//! block ([`ends_block`], [`falls_through`]), what no earlier check survives ([`kills_checks`]),
//! and whether a label is entered by falling through ([`falls_through_to`]).
//!
//! Two notions of "block", on purpose: [`ends_block`] is the control-flow graph's (control may
//! leave at the statement: a branch, a return, an exit, a trap), which the analyses that follow
//! values along paths read (spaces.rs' available checks, thread_ranges.rs' narrowing); and
//! [`kills_checks`] is the rewriter's elimination window, wider (also calls, barriers, fences,
//! atomics, reductions, labels and scope braces: after any of them no earlier check is taken to
//! still hold), which the passes that reuse or move checks read (the walk, coalesce.rs,
//! prefetch.rs).

use super::access::{self, Instr};
use super::line::{find_byte, find_pair, Line};

/// The label that a line of code is (`$L__BB0_3:` -> `$L__BB0_3`): code ending in `:` whose name
/// is one word. (labels.rs put every label on a line of its own before any pass reads the lines.)
pub(in crate::ptx) fn label(code: &str) -> Option<&str> {
    let name = access::trim(code.strip_suffix(':')?);
    (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(name)
}

/// Whether a line of code ends where a statement does: at a `;`, a label's `:` or a scope brace.
/// A line that does not is continued by the next (a `call` or a declaration spread over lines).
pub(in crate::ptx) fn ends_statement(code: &str) -> bool {
    code.ends_with([';', ':', '{', '}'])
}

/// Whether control may leave the straight line at the instruction: it ends a basic block of the
/// control-flow graph (`bra`, `brx`, `ret`, `exit`, `trap`, guarded or not; a `call` comes back).
pub(in crate::ptx) fn ends_block(ins: &Instr<'_>) -> bool {
    ins.opcode.op.jumps_away()
}

/// Whether the statement after the instruction may be reached from it by falling through: it is
/// no block end, or a guarded one.
pub(in crate::ptx) fn falls_through(ins: &Instr<'_>) -> bool {
    ins.guard.is_some() || !ends_block(ins)
}

/// Whether control reaches the label on line `label_line` by falling through from the statement
/// before it: that statement is complete (`;`, a label, a scope brace) and not an unconditional
/// jump (`bra`, `brx`, `ret`, `exit`, `trap` without a guard). Loop versioning (loops.rs) and
/// loop pipelining (prefetch.rs) both need a loop entered this way, besides its own back edge.
pub(in crate::ptx) fn falls_through_to(lines: &[Line<'_>], label_line: usize) -> bool {
    let Some(before) = lines[..label_line].iter().rev().find(|l| !l.code.is_empty()) else {
        return false;
    };
    if !ends_statement(before.code) {
        return false;
    }
    // The line's last statement is the one control leaves it by.
    let last = before.stmts().last().and_then(|s| s.instr.as_ref());
    last.is_none_or(falls_through)
}

/// Whether no earlier check can be assumed to still hold after `code`, a statement or a line of
/// them: one of its statements is a label, a scope brace, a branch, call, return, barrier, fence,
/// atomic or reduction. Every statement of a line counts, not only its first: `mov.u32 %r1, 0;
/// bar.sync 0;` (inline asm writes its statements on one line) ends the window as `bar.sync 0;`
/// on a line of its own does.
pub(in crate::ptx) fn kills_checks(code: &str) -> bool {
    let code = access::trim(code);
    if code.ends_with(':') {
        return true;
    }
    // (Most lines hold one statement: one `;`, found with `memchr`, at their end.)
    let mut rest = code;
    loop {
        let (stmt, after) = match find_byte(b';', rest.as_bytes()) {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, ""),
        };
        if statement_kills_checks(stmt) {
            return true;
        }
        if access::trim(after).is_empty() {
            return false;
        }
        rest = after;
    }
}

/// [`kills_checks`] of one statement (no `;` inside).
fn statement_kills_checks(t: &str) -> bool {
    let t = access::trim(t);
    if t.ends_with(':') || t.starts_with('{') || t.starts_with('}') {
        return true;
    }
    // An unguarded ASCII statement (most): its opcode's name is its text up to the first `.` or
    // whitespace, found in one pass (asked of every line once).
    let name = match t.bytes().position(|b| matches!(b, b'.' | b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r') || b >= 0x80) {
        _ if t.starts_with('@') => None,
        Some(p) if t.as_bytes()[p] < 0x80 => Some(&t[..p]),
        Some(_) => None,
        None => Some(t),
    };
    let Some(name) = name else {
        let (text, _) = opcode_and_rest(t);
        let name = text.bytes().position(|b| b == b'.').map_or(text, |p| &text[..p]);
        return kills_by_name(name) || text.starts_with("cp.async.wait");
    };
    // (`cp.async.wait` holds no whitespace: the statement starts with it where its opcode does.)
    kills_by_name(name) || (name == "cp" && t.starts_with("cp.async.wait"))
}

/// Whether an opcode named `name` (its text before the first `.`) ends the elimination window:
/// the names of `Op::transfers_control` and of the barriers, fences, atomics and reductions
/// (matched as text: asked of every line, and these fourteen are fewer to compare than all the
/// names `Op::from_name` knows).
fn kills_by_name(name: &str) -> bool {
    matches!(name, "bra" | "brx" | "call" | "ret" | "exit" | "trap" | "brkpt" | "bar" | "barrier" | "fence" | "membar" | "atom" | "red" | "mbarrier")
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

/// A place in the module's lines: (line index, byte in the line).
pub(in crate::ptx) type Pos = (usize, usize);

/// One statement of the module as written, which may span lines (a `call` or a declaration that
/// nvcc spreads over several): its text (the code of its lines joined by a space), where it
/// starts and where its terminator is, and where its last `)` is.
#[derive(Debug)]
pub(in crate::ptx) struct Spanning {
    /// Its text's place in [`Statements::texts`] ([`Statements::text`]).
    text: std::ops::Range<usize>,
    /// Its first character (a statement of no text: its terminator).
    pub start: Pos,
    /// Its terminator; for the statement the module ends inside, the end of its last line.
    pub end: Pos,
    /// `;`, `{` or `}`: `None` for the statement the module ends inside.
    pub terminator: Option<u8>,
    pub last_close: Option<Pos>,
    /// Brace depth before it.
    pub depth: i32,
    /// Its segments' place in [`Statements::segments`] ([`Statements::segments_of`]).
    segments: std::ops::Range<usize>,
}

/// Directives that end with their line, without a `;`: a line starting one (while no statement
/// is open) is no part of the statements.
const ENDS_WITH_ITS_LINE: &[&str] = &[".version", ".target", ".address_size", ".file", ".loc", ".pragma"];

/// Whether a line's code (trimmed: its first character is no whitespace) starts with one of
/// [`ENDS_WITH_ITS_LINE`]: its first word, `code.split_whitespace().next()`, is one. All begin
/// with `.`, so a line that does not (most of a body's) is told by its first byte, and the word of
/// one that does is found byte by byte ([`split_at_whitespace`]), not by a `char` search.
fn ends_with_its_line(code: &str) -> bool {
    code.starts_with('.') && ENDS_WITH_ITS_LINE.contains(&split_at_whitespace(code).map_or(code, |(word, _)| word))
}

/// The module's statements as written, across lines: the one reading of statements that span
/// lines (frames.rs, heap.rs). A statement ends at a `;`, or at a brace outside an initializer
/// (`= {1, 2}`): a header ends at its body's `{`; directives that end with their line and labels
/// (every label is on a line of its own: labels.rs) are left out while no statement is open.
/// Lines in or opening a block comment are no code (the rewriter passes them through, bodies.rs
/// counts no braces in them).
#[derive(Debug, Default)]
pub(in crate::ptx) struct Statements {
    /// In order, empty ones (`;;`) included; a last one the module ends inside has no
    /// terminator.
    pub list: Vec<Spanning>,
    /// Some line holds a block comment marker (`/*`, `*/`).
    pub block_comments: bool,
    /// Some line read as code holds a `"` (a string: only `.file` and `.section` have them).
    pub strings: bool,
    /// The statements' texts, one after another (the code of a statement's lines joined by a
    /// space, trimmed): one buffer, not a `String` a statement, as [`Statements::segments`] is
    /// one vector, not one a statement (their allocations were a fifth of reading statements).
    texts: String,
    /// The code each statement is made of: (line, byte range of the line), statement by
    /// statement, each's in order (its terminator and the comments between are not part of it).
    segments: Vec<(usize, std::ops::Range<usize>)>,
}

impl Statements {
    /// A statement's text (the code of its lines joined by a space, trimmed).
    pub(in crate::ptx) fn text(&self, s: &Spanning) -> &str {
        &self.texts[s.text.clone()]
    }

    /// The code a statement is made of: (line, byte range of the line), in order.
    pub(in crate::ptx) fn segments_of(&self, s: &Spanning) -> &[(usize, std::ops::Range<usize>)] {
        &self.segments[s.segments.clone()]
    }

    /// Ends a statement of text `text` whose segments are those pushed since `first_segment`.
    #[allow(clippy::too_many_arguments)]
    fn end_statement(&mut self, text: &str, first_segment: usize, start: Pos, end: Pos, terminator: Option<u8>, last_close: Option<Pos>, depth: i32) {
        let at = self.texts.len();
        self.texts.push_str(text);
        self.list.push(Spanning { text: at..self.texts.len(), start, end, terminator, last_close, depth, segments: first_segment..self.segments.len() });
    }

    pub(in crate::ptx) fn of(lines: &[Line<'_>]) -> Statements {
        // (Sized for a statement and a segment a line and the code's bytes, about what a module
        // holds: grown by doubling, their copies cost more than the one pass over the lines.)
        let mut s = Statements {
            list: Vec::with_capacity(lines.len()),
            texts: String::with_capacity(lines.iter().map(|l| l.code.len()).sum()),
            segments: Vec::with_capacity(lines.len()),
            ..Statements::default()
        };
        let (mut text, mut start, mut last_close, mut depth) = (String::new(), None::<Pos>, None::<Pos>, 0i32);
        let (mut init_depth, mut in_comment) = (0i32, false);
        let mut first_segment = 0;
        let mut last_code_line = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.block_comment_marker() {
                s.block_comments = true;
            }
            if in_comment {
                in_comment = find_pair(line.raw, b'*', b'/').is_none();
                continue;
            }
            let code = line.stripped();
            if line.slash {
                if let Some(p) = find_pair(code, b'/', b'*') {
                    in_comment = find_pair(&code[p..], b'*', b'/').is_none();
                    continue;
                }
            }
            let open = !access::trim(&text).is_empty();
            if !open && (ends_with_its_line(line.code) || label(line.code).is_some()) {
                continue;
            }
            if memchr::memchr(b'"', code.as_bytes()).is_some() {
                s.strings = true;
            }
            if !text.is_empty() {
                text.push(' ');
            }
            last_code_line = i;
            let mut from = 0;
            // The code in runs of ordinary text, each copied whole, between the bytes a statement
            // turns on (`;`, braces, `)`: ASCII, so never inside a longer character): the text
            // was copied a `char` at a time, the most of reading a module's statements.
            let bytes = code.as_bytes();
            let mut at = 0;
            while at < bytes.len() {
                let next = bytes[at..].iter().position(|&x| matches!(x, b';' | b'{' | b'}' | b')')).map_or(bytes.len(), |p| at + p);
                if next > at {
                    let run = &code[at..next];
                    if start.is_none() {
                        // (The run's first character that is not whitespace, as a `char` test
                        // sees it: a longer character may be a space.)
                        let first = match run.bytes().position(|x| !access::ascii_whitespace(x)) {
                            Some(p) if run.as_bytes()[p] < 0x80 => Some(p),
                            Some(p) => run[p..].char_indices().find(|(_, c)| !c.is_whitespace()).map(|(q, _)| p + q),
                            None => None,
                        };
                        start = first.map(|p| (i, at + p));
                    }
                    text.push_str(run);
                }
                if next == bytes.len() {
                    break;
                }
                let (b, c) = (next, char::from(bytes[next]));
                at = next + 1;
                // An initializer's braces (`= {1, 2}`, `= {{1, 2}, {3, 4}}`) are part of its
                // statement; a `;` ends it all the same (none is inside an initializer).
                if (c == '{' && (init_depth > 0 || access::trim_end(&text).ends_with('='))) || (c == '}' && init_depth > 0) {
                    init_depth += if c == '{' { 1 } else { -1 };
                    text.push(c);
                    continue;
                }
                if c == ')' {
                    if start.is_none() {
                        start = Some((i, b));
                    }
                    last_close = Some((i, b));
                    text.push(c);
                    continue;
                }
                // `;`, or a brace outside an initializer: the statement ends.
                init_depth = 0;
                if from < b {
                    s.segments.push((i, from..b));
                }
                from = b + 1;
                s.end_statement(access::trim(&text), first_segment, start.unwrap_or((i, b)), (i, b), Some(c as u8), last_close, depth);
                first_segment = s.segments.len();
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                text.clear();
                start = None;
                last_close = None;
            }
            if from < code.len() {
                s.segments.push((i, from..code.len()));
            }
        }
        if let (Some(start), false) = (start, access::trim(&text).is_empty()) {
            let end = (last_code_line, lines[last_code_line].stripped().len());
            s.end_statement(access::trim(&text), first_segment, start, end, None, last_close, depth);
        } else {
            // (Code after the last statement that makes none, whitespace: no statement's.)
            s.segments.truncate(first_segment);
        }
        s
    }

    /// The statements that end (all but one the module ends inside).
    pub(in crate::ptx) fn ended(&self) -> &[Spanning] {
        match self.list.last() {
            Some(last) if last.terminator.is_none() => &self.list[..self.list.len() - 1],
            _ => &self.list,
        }
    }
}

#[cfg(test)]
mod fall_through_tests {
    use super::{ends_block, falls_through, falls_through_to, label};

    #[test]
    fn a_label_is_one_word_and_a_colon() {
        for (code, name) in [("$L__BB0_3:", Some("$L__BB0_3")), ("$L1 :", Some("$L1")), (":", None), ("a b:", None), ("ret;", None), ("$L1: ret;", None)] {
            assert_eq!(label(code), name, "{code:?}");
        }
    }

    #[test]
    fn blocks_end_where_control_may_leave_and_fall_through_unless_it_must() {
        for (code, ends, falls) in [
            ("bra $L1", true, false),
            ("@%p1 bra.uni $L1", true, true),
            ("brx.idx %r1, ts", true, false),
            ("ret", true, false),
            ("@!%p1 exit", true, true),
            ("trap", true, false),
            ("call.uni f, (%rd1)", false, true),
            ("bar.sync 0", false, true),
            ("add.s32 %r1, %r1, 1", false, true),
        ] {
            let ins = super::super::access::split_instr(code).expect(code);
            assert_eq!((ends_block(&ins), falls_through(&ins)), (ends, falls), "{code}");
        }
    }

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
mod statements_tests {
    use super::{Line, Pos, Statements};

    /// [`Statements::of`] as it was before it copied runs of text whole: a `char` at a time.
    fn of_by_chars(lines: &[Line<'_>]) -> Statements {
        let mut s = Statements::default();
        let (mut text, mut start, mut last_close, mut depth) = (String::new(), None::<Pos>, None::<Pos>, 0i32);
        let (mut init_depth, mut in_comment) = (0i32, false);
        let mut segments: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let mut last_code_line = 0;
        // (Each statement's segments go to the shared list when it ends.)
        let end = |s: &mut Statements, text: &str, segments: &mut Vec<_>, start, end, terminator, last_close, depth| {
            let first = s.segments.len();
            s.segments.append(segments);
            s.end_statement(text, first, start, end, terminator, last_close, depth);
        };
        for (i, line) in lines.iter().enumerate() {
            if line.block_comment_marker() {
                s.block_comments = true;
            }
            if in_comment {
                in_comment = super::find_pair(line.raw, b'*', b'/').is_none();
                continue;
            }
            let code = line.stripped();
            if line.slash {
                if let Some(p) = super::find_pair(code, b'/', b'*') {
                    in_comment = super::find_pair(&code[p..], b'*', b'/').is_none();
                    continue;
                }
            }
            let open = !super::access::trim(&text).is_empty();
            if !open && (line.code.split_whitespace().next().is_some_and(|w| super::ENDS_WITH_ITS_LINE.contains(&w)) || super::label(line.code).is_some()) {
                continue;
            }
            if memchr::memchr(b'"', code.as_bytes()).is_some() {
                s.strings = true;
            }
            if !text.is_empty() {
                text.push(' ');
            }
            last_code_line = i;
            let mut from = 0;
            for (b, c) in code.char_indices() {
                // An initializer's braces (`= {1, 2}`, `= {{1, 2}, {3, 4}}`) are part of its
                // statement; a `;` ends it all the same (none is inside an initializer).
                if (c == '{' && (init_depth > 0 || super::access::trim_end(&text).ends_with('='))) || (c == '}' && init_depth > 0) {
                    init_depth += if c == '{' { 1 } else { -1 };
                    text.push(c);
                    continue;
                }
                match c {
                    ';' | '{' | '}' if init_depth == 0 || c == ';' => {
                        init_depth = 0;
                        let t = super::access::trim(&text);
                        if from < b {
                            segments.push((i, from..b));
                        }
                        from = b + 1;
                        end(&mut s, t, &mut segments, start.unwrap_or((i, b)), (i, b), Some(c as u8), last_close, depth);
                        depth += match c {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        text.clear();
                        start = None;
                        last_close = None;
                    }
                    _ => {
                        if start.is_none() && !c.is_whitespace() {
                            start = Some((i, b));
                        }
                        if c == ')' {
                            last_close = Some((i, b));
                        }
                        text.push(c);
                    }
                }
            }
            if from < code.len() {
                segments.push((i, from..code.len()));
            }
        }
        if let (Some(start), false) = (start, super::access::trim(&text).is_empty()) {
            let at = (last_code_line, lines[last_code_line].stripped().len());
            end(&mut s, super::access::trim(&text), &mut segments, start, at, None, last_close, depth);
        }
        s
    }

    proptest::proptest! {
        /// Statements read by runs of text are those read a `char` at a time, whitespace,
        /// initializers, comments and longer characters included.
        #[test]
        fn statements_are_read_as_char_by_char(text in "[ \t\x0b\u{85}\u{a0}\u{3000}é;{}()=a.,/*\n\"]{0,48}") {
            let lines = Line::read_all(text.split_inclusive('\n'));
            proptest::prop_assert_eq!(format!("{:?}", Statements::of(&lines)), format!("{:?}", of_by_chars(&lines)));
        }
    }

    fn of(text: &str) -> Vec<(String, Option<u8>, usize, usize)> {
        let lines = Line::read_all(text.split_inclusive('\n'));
        // (Its text keeps the lines' whitespace: compared here a space for each run of it.)
        let all = Statements::of(&lines);
        all.list.iter().map(|s| (all.text(s).split_whitespace().collect::<Vec<_>>().join(" "), s.terminator, s.start.0, s.end.0)).collect()
    }

    #[test]
    fn statements_span_lines_and_end_at_semicolons_and_braces() {
        let t = |s: &str| s.to_string();
        // A header ends at its body's brace, a call spread over lines at its `;`; directives that
        // end with their line and labels are left out.
        assert_eq!(
            of(".version 8.0\n.func f(\n.param .b64 p\n)\n{\n$L1:\n\tcall.uni\n\tg,\n\t(p\n\t);\n\t.loc 1 2 3\n}\n"),
            [(t(".func f( .param .b64 p )"), Some(b'{'), 1, 4), (t("call.uni g, (p )"), Some(b';'), 6, 9), (t(""), Some(b'}'), 11, 11)]
        );
        // An initializer's braces are its own; a brace after text that merely holds a `=` is no
        // initializer's, and a `;` ends a statement whatever came before (the fuzz input of issue
        // 37 step 5: a header `k(.param .u64 a=b)` read as an initializer swallowed the module's
        // later statements, a heap call and an access among them).
        assert_eq!(of(".global .u32 t[2] = {1, {2}};\n"), [(t(".global .u32 t[2] = {1, {2}}"), Some(b';'), 0, 0)]);
        assert_eq!(
            of(".entry k(.param .u64 a=b)\n{\n\tcall free, (%rd1);\n}\n"),
            [(t(".entry k(.param .u64 a=b)"), Some(b'{'), 0, 1), (t("call free, (%rd1)"), Some(b';'), 2, 2), (t(""), Some(b'}'), 3, 3)]
        );
        assert_eq!(of("x = {1;\ny;\n"), [(t("x = {1"), Some(b';'), 0, 0), (t("y"), Some(b';'), 1, 1)]);
        // Block comments are no code; the statement the module ends inside has no terminator.
        assert_eq!(of("/* a;\nb; */\n.extern .func g\n"), [(t(".extern .func g"), None, 2, 2)]);
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

        /// The one-pass opcode name agrees with the opcode read as the other passes read it
        /// ([`super::opcode_and_rest`]), guarded or not, ASCII or not.
        #[test]
        fn a_statement_kills_checks_by_its_opcode(t in "(@!?%p1[ \t])?(bra|brx|call|ret|exit|bar|barrier|red|atom|cp|ld|st|mbarrier|membar|é|\\{|\\})?(\\.async\\.wait|\\.uni|\\.u32|é|\\.)?[ \t\u{a0}\u{3000}a-z.%{}:@é]{0,10}") {
            let reference = |t: &str| {
                let t = super::access::trim(t);
                if t.ends_with(':') || t.starts_with('{') || t.starts_with('}') {
                    return true;
                }
                let (text, _) = super::opcode_and_rest(t);
                let name = text.bytes().position(|b| b == b'.').map_or(text, |p| &text[..p]);
                super::kills_by_name(name) || text.starts_with("cp.async.wait")
            };
            prop_assert_eq!(super::statement_kills_checks(&t), reference(&t), "{:?}", t);
        }
    }
}
