//! Every label on a line of its own, decided once before any pass reads the module.
//!
//! PTX lets a label share its line with the statement it names (`L: ld.global.f32 %f1, [%rd2];`,
//! as inline asm can write it). Every pass of the rewriter takes a label for a line of code
//! ending in `:`: read as one statement, such a line was an instruction of opcode `L:` (counted
//! unknown, its access left unchecked), and no pass saw a block begin there. The module is
//! therefore read with each such label moved to a line of its own (same indent), and the
//! statement after it on the next; the lines after it keep their input line numbers through
//! [`LabelLines::input_line`] (sites and errors name the input's lines).
//!
//! The same holds for a function body's opening brace with statements after it on the header's
//! line (`.entry k(.param .u64 p) { .reg .b64 %rd<4>;`): the header parser reads a header line
//! up to its brace, so such a function was found by no pass and its accesses went unchecked. The
//! brace ends its line and the statements after it go to the next.

/// The module's text with its labels on lines of their own, and where each line came from.
pub(in crate::ptx) struct LabelLines {
    pub text: String,
    /// Line index of the text -> line index of the input.
    input_of: Vec<usize>,
}

impl LabelLines {
    /// `None` when no label shares its line with code (nvcc's output: the text is read as it is).
    pub(in crate::ptx) fn split(ptx: &str) -> Option<Self> {
        // A cheap test first: a `:` followed on its line by more code, at all. Only the lines
        // holding a `:` are looked at (a label's line holds one; most lines hold none), each
        // found from its `:` with `memchr` rather than by cutting the text into lines; likewise
        // the lines holding a `{` for a body's brace (a header's line holds one, and a `{` is
        // rarer than a byte of `.entry`, which a substring search compares at every position).
        if !lines_with(ptx, b':').any(|l| label_len(l).is_some()) && !lines_with(ptx, b'{').any(|l| body_brace_len(l).is_some()) {
            return None;
        }
        let mut text = String::with_capacity(ptx.len() + 64);
        let mut input_of = Vec::new();
        for (n, line) in ptx.split_inclusive('\n').enumerate() {
            let indent = &line[..line.len() - line.trim_start().len()];
            let mut rest = line;
            // The first `len` bytes of the code to a line of their own, the rest kept.
            let mut cut = |rest: &mut &str, len: usize| {
                let code = rest.trim_start();
                text.push_str(indent);
                text.push_str(&code[..len]);
                text.push('\n');
                input_of.push(n);
                *rest = code[len..].trim_start_matches([' ', '\t']);
            };
            // The body's brace first (a header line holds no label), then each label in turn.
            if let Some(len) = body_brace_len(rest) {
                cut(&mut rest, len);
            }
            while let Some(len) = label_len(rest) {
                cut(&mut rest, len);
            }
            if !std::ptr::eq(rest, line) {
                text.push_str(indent);
            }
            text.push_str(rest);
            input_of.push(n);
        }
        Some(LabelLines { text, input_of })
    }

    /// The input's line index of line `i` of [`Self::text`].
    pub(in crate::ptx) fn input_line(&self, i: usize) -> usize {
        self.input_of.get(i).copied().unwrap_or_else(|| i + self.input_of.last().map_or(0, |&l| l + 1).saturating_sub(self.input_of.len()))
    }
}

/// The lines of `text` (as `split_inclusive('\n')` cuts them) that hold byte `b`, each once.
fn lines_with(text: &str, b: u8) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    // (The end of the last line given: a line holding several is given once.)
    let mut done = 0;
    memchr::memchr_iter(b, bytes).filter_map(move |c| {
        if c < done {
            return None;
        }
        let start = memchr::memrchr(b'\n', &bytes[..c]).map_or(0, |nl| nl + 1);
        let end = memchr::memchr(b'\n', &bytes[c..]).map_or(bytes.len(), |nl| c + nl + 1);
        done = end;
        Some(&text[start..end])
    })
}

/// The line of `text` around each `.entry` and `.func` in it (a line holding both is given twice:
/// only asked whether any of them is one). (What [`LabelLines::split`] asked before the lines
/// holding a `{`.)
#[cfg(test)]
fn header_lines(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    [".entry", ".func"].into_iter().flat_map(move |kind| memchr::memmem::find_iter(bytes, kind.as_bytes())).map(move |at| {
        let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |nl| nl + 1);
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |nl| at + nl + 1);
        &text[start..end]
    })
}

/// The length (of `line` after its leading whitespace) up to and including a function body's
/// opening brace when statements follow it on the line: the line holds `.entry` or `.func` and
/// a `{` followed by code (not only whitespace or a comment), and the body stays open after it.
fn body_brace_len(line: &str) -> Option<usize> {
    let code = line.trim_start();
    let words = super::line::strip_comment(code);
    if !(words.contains(".entry") || words.contains(".func")) {
        return None;
    }
    let brace = memchr::memchr(b'{', words.as_bytes())?;
    let after = words[brace + 1..].trim();
    // A body that also closes on the line (`.entry m() { ret; }`) is left as written.
    let (opens, closes) = super::line::count_braces(words);
    (!after.is_empty() && opens > closes).then_some(brace + 1)
}

/// The length of the label (`name:`) that `line` starts with (after whitespace) when code
/// follows it on the line (not only whitespace or a comment).
fn label_len(line: &str) -> Option<usize> {
    let code = line.trim_start();
    let b = code.as_bytes();
    // PTX identifiers: [a-zA-Z][a-zA-Z0-9_$]* or [_$%][a-zA-Z0-9_$]+.
    let first = *b.first()?;
    if !(first.is_ascii_alphabetic() || matches!(first, b'_' | b'$' | b'%')) {
        return None;
    }
    let name = 1 + b[1..].iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$')).count();
    if b.get(name) != Some(&b':') {
        return None;
    }
    let after = code[name + 1..].trim_start();
    (!after.is_empty() && !after.starts_with("//") && !after.starts_with(':')).then_some(name + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_sharing_its_line_gets_a_line_of_its_own() {
        let l = LabelLines::split("a\n\tL: ld.global.f32 %f1, [%rd2]; // c\n\tret;\n").expect("split");
        assert_eq!(l.text, "a\n\tL:\n\tld.global.f32 %f1, [%rd2]; // c\n\tret;\n");
        assert_eq!((0..4).map(|i| l.input_line(i)).collect::<Vec<_>>(), [0, 1, 1, 2]);
        let two = LabelLines::split("  A: B:bra A;").expect("split");
        assert_eq!(two.text, "  A:\n  B:\n  bra A;");
    }

    #[test]
    fn a_body_brace_with_statements_after_it_ends_its_line() {
        let l = LabelLines::split(".entry k(.param .u64 p) { .reg .b64 %r; // c\n\tret;\n}\n").expect("split");
        assert_eq!(l.text, ".entry k(.param .u64 p) {\n.reg .b64 %r; // c\n\tret;\n}\n");
        assert_eq!((0..4).map(|i| l.input_line(i)).collect::<Vec<_>>(), [0, 0, 1, 2]);
        for t in [".entry k()\n{\n\tret;\n}\n", ".entry k() {\n", ".entry k() { // c\n", ".entry m() { ret; }\n", ".extern .func f(.param .b64 p);\n", "\t{ .reg .pred p; setp.ne.b32 p, %r1, 0; }\n"] {
            assert!(LabelLines::split(t).is_none(), "{t:?}");
        }
    }

    #[test]
    fn lines_with_a_colon_are_the_lines_that_hold_one() {
        for t in ["", "a\n", "L:\n", "a\nL: x\nb::c:\n\nd:", ":\n:", "x\n\n:\n"] {
            let want: Vec<&str> = t.split_inclusive('\n').filter(|l| l.contains(':')).collect();
            assert_eq!(lines_with(t, b':').collect::<Vec<_>>(), want, "{t:?}");
        }
    }

    proptest::proptest! {
        /// A body's brace with code after it is on a line holding a `{` exactly where it is on
        /// a line holding `.entry` or `.func`.
        #[test]
        fn a_body_brace_is_found_on_the_lines_holding_a_brace(text in "(\\.entry|\\.func|[ {};a-z()\n/]|//){0,30}") {
            proptest::prop_assert_eq!(lines_with(&text, b'{').any(|l| body_brace_len(l).is_some()), header_lines(&text).any(|l| body_brace_len(l).is_some()));
        }
    }

    #[test]
    fn labels_alone_and_other_colons_are_left() {
        for t in ["$L__BB0_1:\n", "\tL: // comment\n", "\tld.global.f32 %f1, [%rd2];\n", ".loc 1 2 3\n", "\t@%p1 bra L;\n", "x::y\n", "::\n"] {
            assert!(LabelLines::split(t).is_none(), "{t:?}");
        }
    }
}
