//! Where the module's function bodies are, found once and used by every pass: the rewriter's
//! walk (which functions get checks and report blocks), the coalescing and prefetch planners (a
//! group or a batch never reaches past a body's end) and the shared/local analysis (what a
//! function's statements are). Each pass keeping its own notion of "inside a function" let them
//! disagree on malformed text: a planner counted a line after a closing brace as part of the body
//! the rewriter had already closed, and registered sites for checks never emitted.
//!
//! The rule (for real PTX simply "a header's first `{` opens its body, its matching `}` closes
//! it"): a `.entry`/`.func` header's first line (read by func.rs, as every pass reads headers) names the next body (a later header
//! replaces it); the first line opening a brace while no body is open opens it; it closes on the
//! line that brings the brace depth back to where it was before it opened. Lines in or opening
//! block comments count no braces. A body still open at the end runs to the end (the rewriter
//! reports the module unbalanced).

use super::func::FnHeader;
use super::line::{count_braces, find_byte, find_pair, Line};

/// One function body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct Body {
    pub name: String,
    /// A kernel (`.entry`), not a device function.
    pub entry: bool,
    /// The line its header starts on ([`FnHeader::text_of`]).
    pub header: usize,
    /// The line holding its opening brace.
    pub open: usize,
    /// The line holding its closing brace (`usize::MAX` when it never closes).
    pub close: usize,
}

/// The module's bodies in line order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::ptx) struct Bodies {
    list: Vec<Body>,
}

impl Bodies {
    pub fn scan(lines: &[Line<'_>]) -> Bodies {
        let mut s = Scanner::default();
        for (i, line) in lines.iter().enumerate() {
            s.line(i, line);
        }
        s.finish()
    }

    /// The same bodies after their lines moved (`to[i]`: where line `i` went).
    pub fn moved(self, to: &[usize]) -> Bodies {
        let at = |i: usize| if i == usize::MAX { i } else { to[i] };
        Bodies { list: self.list.into_iter().map(|b| Body { header: at(b.header), open: at(b.open), close: at(b.close), ..b }).collect() }
    }

    /// The bodies of positions `range` in the list.
    pub fn part(&self, range: std::ops::Range<usize>) -> Bodies {
        Bodies { list: self.list[range].to_vec() }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The body at position `k` of the list.
    pub fn nth(&self, k: usize) -> &Body {
        &self.list[k]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Body> {
        self.list.iter()
    }

    /// The body whose opening brace is on line `i`.
    #[inline]
    pub fn opening_at(&self, i: usize) -> Option<&Body> {
        let k = self.list.partition_point(|b| b.open < i);
        self.list.get(k).filter(|b| b.open == i)
    }

    /// The body holding line `i` (its opening and closing lines included).
    #[inline]
    pub fn holding(&self, i: usize) -> Option<&Body> {
        let k = self.list.partition_point(|b| b.open <= i);
        k.checked_sub(1).map(|k| &self.list[k]).filter(|b| i <= b.close)
    }

    /// Whether line `i` lies strictly inside a body: the only lines the planners group, batch or
    /// place code at (the opening and closing lines may hold other text around their braces).
    #[inline]
    pub fn interior(&self, i: usize) -> bool {
        self.holding(i).is_some_and(|b| b.open < i && i < b.close)
    }
}

/// [`Bodies::scan`] a line at a time: the rewriter scans each line as it reads it, while the
/// line is in cache (a second pass over the lines read them from memory again).
#[derive(Default)]
pub(in crate::ptx) struct Scanner {
    list: Vec<Body>,
    depth: i64,
    in_block_comment: bool,
    /// The last header seen: name, kernel, line.
    pending: Option<(String, bool, usize)>,
    open: Option<(String, bool, usize, usize, i64)>,
    /// Stopped at a line that left the brace depth below zero: later lines are not looked at.
    stopped: bool,
}

impl Scanner {
    /// Takes line `i` (lines come in order from 0).
    pub fn line(&mut self, i: usize, line: &Line<'_>) {
        if self.stopped {
            return;
        }
        if self.in_block_comment {
            self.in_block_comment = find_pair(line.raw, b'*', b'/').is_none();
            return;
        }
        // (`/*` is in `stripped` only where it is in `code`, which is `stripped` trimmed.)
        let comment_opens = if line.slash { find_pair(line.stripped(), b'/', b'*') } else { None };
        if let Some(p) = comment_opens {
            self.in_block_comment = find_pair(&line.stripped()[p..], b'*', b'/').is_none();
            return;
        }
        let t = line.code;
        if t.starts_with('.') && find_byte(b'(', t.as_bytes()).is_some() {
            if let Some((name, entry)) = FnHeader::name_on_line(t) {
                self.pending = Some((name.to_string(), entry, i));
            }
        }
        let (opens, closes) = if line.braces { count_braces(t) } else { (0, 0) };
        if self.open.is_none() && opens > 0 {
            if let Some((name, entry, header)) = self.pending.take() {
                self.open = Some((name, entry, header, i, self.depth));
            }
        }
        self.depth += i64::from(opens - closes);
        if let Some((_, _, _, _, at)) = &self.open {
            if closes > 0 && self.depth <= *at {
                let (name, entry, header, start, _) = self.open.take().expect("just matched");
                self.list.push(Body { name, entry, header, open: start, close: i });
            }
        }
        if self.depth < 0 {
            self.stopped = true; // unbalanced: the rewriter stops with an error at this line
        }
    }

    /// The bodies of the lines taken.
    pub fn finish(mut self) -> Bodies {
        if let Some((name, entry, header, start, _)) = self.open.take() {
            self.list.push(Body { name, entry, header, open: start, close: usize::MAX });
        }
        Bodies { list: self.list }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan(text: &str) -> Bodies {
        Bodies::scan(&Line::read_all(text.split_inclusive('\n')))
    }

    #[test]
    fn real_ptx_bodies() {
        let b = scan(".visible .entry k(\n.param .u64 a\n)\n{\n.reg .b32 %r<2>;\n{\nmov.u32 %r1, 0;\n}\nret;\n}\n.func f()\n{\nret;\n}\n");
        let v: Vec<_> = b.iter().map(|b| (b.name.as_str(), b.entry, b.open, b.close)).collect();
        assert_eq!(v, [("k", true, 3, 9), ("f", false, 11, 13)]);
        assert!(b.interior(4) && b.interior(7) && !b.interior(3) && !b.interior(9) && !b.interior(10));
        assert_eq!(b.holding(9).map(|b| b.name.as_str()), Some("k"));
        assert_eq!(b.opening_at(11).map(|b| b.name.as_str()), Some("f"));
        assert!(b.opening_at(12).is_none() && b.holding(10).is_none());
    }

    #[test]
    fn a_brace_after_text_closes_the_body_and_a_nested_header_does_not_open_one() {
        // The fuzz input of fuzz_regressions.rs in small: `mu}` closes k's body; what follows is
        // module scope, and the header inside the body named nothing.
        let b = scan(".entry k()\n{\n.entry g()\nld.global.u32 %r1, [%rd1];\nmu}\nld.global.u32 %r2, [%rd1];\n}\n");
        let v: Vec<_> = b.iter().map(|b| (b.name.as_str(), b.open, b.close)).collect();
        assert_eq!(v, [("k", 1, 4)]);
        assert!(!b.interior(5));
    }

    #[test]
    fn block_comments_count_no_braces() {
        let b = scan(".func f()\n/* { */\n{\n/*\n}\n*/\nret;\n}\n");
        let v: Vec<_> = b.iter().map(|b| (b.open, b.close)).collect();
        assert_eq!(v, [(2, 7)]);
    }

    proptest! {
        /// Bodies are disjoint and in order, each opens on a line with `{` and closes on one with
        /// `}` at or after it, and `holding`/`interior` agree with them on every line.
        #[test]
        fn bodies_are_ordered_disjoint_and_lookups_agree(lines in proptest::collection::vec(prop_oneof![
            Just(".entry k(.param .u64 a)"), Just(".func (.param .b32 r) f(.param .b32 a)"), Just("{"), Just("}"),
            Just("ret; }"), Just("{ ret;"), Just("{ ret; }"), Just("ld.global.u32 %r1, [%rd1];"), Just("/* {"), Just("} */"), Just("mov.b64 {%r1, %r2}, %rd1;"),
        ], 0..40)) {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let b = scan(&text);
            let list: Vec<&Body> = b.iter().collect();
            for w in list.windows(2) {
                prop_assert!(w[0].close < w[1].open);
            }
            for body in &list {
                prop_assert!(body.open <= body.close);
                prop_assert!(lines[body.open].contains('{'), "opens on a line without a brace: {:?}", body);
                prop_assert!(body.close == usize::MAX || lines[body.close].contains('}'), "closes on a line without a brace: {:?}", body);
            }
            for i in 0..lines.len() {
                let by_list = list.iter().find(|x| x.open <= i && i <= x.close);
                prop_assert_eq!(b.holding(i), by_list.copied());
                prop_assert_eq!(b.interior(i), by_list.is_some_and(|x| x.open < i && i < x.close));
                prop_assert_eq!(b.opening_at(i), list.iter().find(|x| x.open == i).copied());
            }
        }
    }
}
