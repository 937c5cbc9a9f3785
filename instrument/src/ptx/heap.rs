//! In-kernel `malloc`/`free` through gasan's checked device heap (layout and rationale:
//! [`crate::device_heap`]).
//!
//! nvcc 13 compiles `malloc`, `new` and `new[]` to calls of the extern `malloc`, `free`, `delete`
//! and `delete[]` to calls of `free`, and `__nv_aligned_device_malloc` to
//! `__cuda_syscall_aligned_malloc`, each declared once at module scope and called from `callseq`
//! blocks that spread one call over several lines:
//!
//! ```text
//! .extern .func  (.param .b64 func_retval0) malloc
//! (
//!         .param .b64 malloc_param_0
//! )
//! ;
//!         call.uni (retval0),
//!         malloc,
//!         (
//!         param0
//!         );
//! ```
//!
//! The rewrite renames the callee of those declarations and calls to gasan's functions, turns the
//! `.extern` declarations into prototypes of the functions appended at the module's end, and gives
//! every `free` call one more argument, its site id (so that a bad free names its kernel and source
//! line). Lines keep their number, so site lines stay those of the input. A module that declares
//! none of the three is not touched ([`HeapPlan::of`] returns `None`).
//!
//! This file plans the edits ([`HeapPlan`]) and the walk applies them; the functions appended are
//! written by heap_functions.rs.

use super::ir::line::{Line, LineMap};
use super::ir::stmt::Statements;
use std::fmt::Write as _;

/// A heap entry point of the driver that checked PTX replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Callee {
    Malloc,
    Free,
    AlignedMalloc,
}

impl Callee {
    const ALL: [Callee; 3] = [Callee::Malloc, Callee::Free, Callee::AlignedMalloc];
    /// The driver's name.
    pub(super) fn driver_name(self) -> &'static str {
        match self {
            Callee::Malloc => "malloc",
            Callee::Free => "free",
            Callee::AlignedMalloc => "__cuda_syscall_aligned_malloc",
        }
    }
    /// gasan's replacement.
    pub(super) fn checked_name(self) -> &'static str {
        match self {
            Callee::Malloc => "__gasan_malloc",
            Callee::Free => "__gasan_free",
            Callee::AlignedMalloc => "__gasan_aligned_malloc",
        }
    }
    fn of_token(tok: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.driver_name() == tok)
    }
}

/// The heap callees that `code` names as whole identifiers, with where: (byte, callee), in order.
fn callees_named(code: &str) -> impl Iterator<Item = (usize, Callee)> + '_ {
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.');
    let bytes = code.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if !is_ident(bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            i += bytes[i..].iter().take_while(|&&b| is_ident(b)).count();
            if let Some(c) = Callee::of_token(&code[start..i]) {
                return Some((start, c));
            }
        }
        None
    })
}

/// What goes in at an edit: text, or the site id of a `free` call (known when the walk reaches
/// the call's last line).
#[derive(Debug)]
enum Insert {
    Text(&'static str),
    /// A `free` call's site, by its index in [`HeapPlan::free_calls`].
    Site(usize),
}

/// One edit of a line: `replace` bytes from byte `at` give way to `insert`.
#[derive(Debug)]
struct Edit {
    at: usize,
    replace: usize,
    insert: Insert,
}

/// The module's heap statements and their edits, planned from the IR's statements
/// ([`Statements`]): the callee of each `.extern` declaration and `call` naming a driver heap
/// function renamed to gasan's, the declarations made prototypes of the functions appended at the
/// module's end, and every `free` call given its site id. Lines keep their number.
///
/// A heap statement ends at its `;` (scope braces inside it do not end it) and begins at a line's
/// start or after a `;`, with scope braces before it skipped; `call` inside a function body, a
/// `.extern` declaration outside one. The walk ([`HeapWalk`]) holds the lines of one that spans
/// lines until its last, and writes them together, so that text the walk adds after a line (a
/// body's declarations) never lands inside it.
#[derive(Debug, Default)]
pub(super) struct HeapPlan {
    /// Edits by line, in byte order.
    edits: LineMap<Vec<Edit>>,
    /// Held stretches of lines: first line -> last line (`usize::MAX`: the module ends first).
    holds: LineMap<usize>,
    /// The last line of each `free` call that gets a site id, in order.
    free_calls: Vec<usize>,
    /// Callees whose declarations were rewritten: their replacements are appended.
    declared: Vec<Callee>,
}

/// A statement as the heap rewrite reads it: the [`Statements`] up to a `;` (scope braces do
/// not end it).
struct Run<'a> {
    /// Its code: (line, text, the text's first byte in the line), in order.
    code: Vec<(usize, &'a str, usize)>,
    /// The line of its `;` (`None`: the module ends first).
    end: Option<usize>,
}

impl<'a> Run<'a> {
    fn all(lines: &[Line<'a>], stmts: &Statements) -> Vec<Run<'a>> {
        let mut runs = Vec::new();
        let mut code = Vec::new();
        for s in &stmts.list {
            code.extend(stmts.segments_of(s).iter().map(|(l, r)| (*l, &lines[*l].stripped()[r.clone()], r.start)));
            if s.terminator == Some(b';') || s.terminator.is_none() {
                runs.push(Run { code: std::mem::take(&mut code), end: (s.terminator == Some(b';')).then_some(s.end.0) });
            }
        }
        if !code.is_empty() {
            runs.push(Run { code, end: None });
        }
        runs.retain(|r| !r.code.is_empty());
        runs
    }

    /// Where a statement of the heap rewrite may begin in it: its start, and the start of each
    /// line it goes on to.
    fn starts(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.code.len()).filter(|&j| j == 0 || self.code[j].0 != self.code[j - 1].0)
    }
}

/// The text of `code` (of its first line only, with `first_line`): its pieces joined by a space,
/// trimmed, written in `buf` (one buffer for the plan, not three allocations a question: the
/// plan asks this of every statement of the module).
fn text<'b>(code: &[(usize, &str, usize)], first_line: bool, buf: &'b mut String) -> &'b str {
    buf.clear();
    let line = code.first().map_or(0, |c| c.0);
    for (k, c) in code.iter().take_while(|c| !first_line || c.0 == line).enumerate() {
        if k > 0 {
            buf.push(' ');
        }
        buf.push_str(c.1);
    }
    buf.trim()
}

/// The walk's place in applying a [`HeapPlan`].
#[derive(Debug, Default)]
pub(super) struct HeapWalk {
    /// The held stretch being read: (first line, last line).
    held: Option<(usize, usize)>,
    /// Site ids of the `free` calls reached.
    sites: Vec<u32>,
}

impl HeapWalk {
    /// Whether the walk is inside a held stretch begun on an earlier line: the line belongs to a
    /// heap statement and is written with it.
    pub(super) fn held(&self) -> bool {
        self.held.is_some()
    }
}

impl HeapPlan {
    /// The plan of a module that declares a driver heap function; `None` for any other (it is
    /// not touched). `in_function(i)`: line `i` lies in a function body, after its opening line.
    pub(super) fn of(src: &str, lines: &[Line<'_>], in_function: impl Fn(usize) -> bool) -> Option<Self> {
        // (`memmem`: a whole-module search, several times faster than `str::contains`.)
        memchr::memmem::find(src.as_bytes(), b".extern")?;
        if !Callee::ALL.iter().any(|c| memchr::memmem::find(src.as_bytes(), c.driver_name().as_bytes()).is_some()) {
            return None;
        }
        let runs = Run::all(lines, &Statements::of(lines));
        let mut buf = String::new();
        // (A declaration anywhere.)
        let declares = runs.iter().any(|r| {
            r.starts().any(|j| {
                let rest = &r.code[j..];
                text(rest, false, &mut buf).starts_with(".extern") && rest.iter().any(|s| s.1.contains(".func")) && rest.iter().any(|s| callees_named(s.1).next().is_some())
            })
        });
        if !declares {
            return None;
        }
        let mut plan = HeapPlan::default();
        for r in &runs {
            // A statement begins at its run's start or, where the one begun before is none of
            // the heap rewrite's, at the next line's start: that one was let go at its line's end.
            let Some(j) = r.starts().find(|&j| starts_heap_statement(text(&r.code[j..], true, &mut buf), in_function(r.code[j].0))) else { continue };
            let code = &r.code[j..];
            let start = code[0].0;
            let end = r.end.unwrap_or(usize::MAX);
            if end != start {
                plan.holds.insert(start, end);
            }
            if r.end.is_none() || !starts_heap_statement(text(code, false, &mut buf), in_function(end)) {
                continue;
            }
            let is_decl = !in_function(end);
            if is_decl && !code.iter().any(|s| s.1.contains(".func")) {
                continue;
            }
            let renames: Vec<(usize, usize, Callee)> = code.iter().flat_map(|&(line, text, from)| callees_named(text).map(move |(b, c)| (line, from + b, c))).collect();
            let Some(&(_, _, callee)) = renames.first() else { continue };
            let mut edits: Vec<(usize, Edit)> = renames.iter().map(|&(line, at, c)| (line, Edit { at, replace: c.driver_name().len(), insert: Insert::Text(c.checked_name()) })).collect();
            // The statement's last `)`, where a `free` gets its site.
            let last_paren = code.iter().rev().find_map(|&(line, text, from)| text.rfind(')').map(|p| (line, from + p)));
            if is_decl {
                let extern_at = code.iter().find_map(|&(line, text, from)| text.find(".extern").map(|p| (line, from + p)));
                if let Some((line, at)) = extern_at {
                    edits.push((line, Edit { at, replace: ".extern".len(), insert: Insert::Text("") }));
                }
                if callee == Callee::Free {
                    // The replacement takes the call's site id as well.
                    let Some((line, at)) = last_paren else { continue };
                    edits.push((line, Edit { at, replace: 0, insert: Insert::Text(", .param .b32 __gasan_free_site") }));
                }
                if !plan.declared.contains(&callee) {
                    plan.declared.push(callee);
                }
            } else if callee == Callee::Free {
                let Some((line, at)) = last_paren else { continue };
                edits.push((line, Edit { at, replace: 0, insert: Insert::Site(plan.free_calls.len()) }));
                plan.free_calls.push(end);
            }
            for (line, e) in edits {
                plan.edits.entry(line).or_default().push(e);
            }
        }
        for e in plan.edits.values_mut() {
            e.sort_by_key(|e| e.at);
        }
        Some(plan)
    }

    /// Whether a held stretch begins at line `i` (its line is no access line of its own).
    pub(super) fn holds_from(&self, i: usize) -> bool {
        self.holds.contains_key(&i)
    }

    /// The text the walk writes for line `i` (read as no access line): the line with its edits,
    /// nothing while it is held, or the held stretch that ends on it. `site` gives a `free` call
    /// ending on the line its site id.
    pub(super) fn line(&self, w: &mut HeapWalk, lines: &[Line<'_>], i: usize, mut site: impl FnMut() -> u32) -> String {
        // (A call on a line the walk wrote as an access line, an earlier one, gets none.)
        while let Some(&end) = self.free_calls.get(w.sites.len()).filter(|&&end| end <= i) {
            w.sites.push(if end == i { site() } else { u32::MAX });
        }
        if let Some(&end) = self.holds.get(&i) {
            let from = w.held.map_or(i, |(from, _)| from);
            w.held = Some((from, end));
        }
        match w.held {
            Some((from, end)) if end == i => {
                w.held = None;
                (from..=i).map(|l| self.edited(w, lines, l)).collect()
            }
            Some(_) => String::new(),
            None => self.edited(w, lines, i),
        }
    }

    /// The held lines of a statement the module never finished (no `;` before its end),
    /// unchanged: held lines must not be lost.
    pub(super) fn flush(&self, w: &mut HeapWalk, lines: &[Line<'_>]) -> String {
        match w.held.take() {
            Some((from, _)) => (from..lines.len()).map(|l| self.edited(w, lines, l)).collect(),
            None => String::new(),
        }
    }

    /// Line `i` with its edits.
    fn edited(&self, w: &HeapWalk, lines: &[Line<'_>], i: usize) -> String {
        let raw = lines[i].raw;
        let Some(edits) = self.edits.get(&i) else { return raw.to_string() };
        let mut out = String::with_capacity(raw.len() + 64);
        let mut at = 0;
        for e in edits {
            out.push_str(&raw[at..e.at]);
            match e.insert {
                Insert::Text(t) => out.push_str(t),
                Insert::Site(k) => {
                    let _ = write!(out, ", {}", w.sites.get(k).copied().unwrap_or(u32::MAX));
                }
            }
            at = e.at + e.replace;
        }
        out.push_str(&raw[at..]);
        out
    }

    /// Callees whose declarations were rewritten ([`super::heap_functions::definitions`]
    /// appends their replacements).
    pub(super) fn declared(&self) -> &[Callee] {
        &self.declared
    }
}

/// Does `text` (a statement's text) begin one the heap rewrite reads: a `call` in a function, an
/// `.extern` declaration at module scope (of a function when `.func` follows: [`HeapPlan::of`])?
fn starts_heap_statement(text: &str, in_function: bool) -> bool {
    if in_function {
        let t = text.strip_prefix('@').map_or(text, |g| g.split_once(char::is_whitespace).map_or("", |(_, r)| r.trim_start()));
        t.starts_with("call") && t[4..].starts_with(|c: char| c == '.' || c.is_whitespace())
    } else {
        text.starts_with(".extern")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk's text of `text`'s lines (all in a function when `in_function`), `free` sites
    /// numbered from `first_site`.
    fn walk(text: &str, in_function: bool, first_site: u32) -> (String, Vec<Callee>) {
        let lines: Vec<Line<'_>> = Line::read_all(text.split_inclusive('\n'));
        // A module that declares one, so that a plan is made at all.
        let decl: Vec<Line<'_>> = Line::read_all([".extern .func free (.param .b64 p);\n"]);
        let all: Vec<Line<'_>> = if in_function { decl.into_iter().chain(lines.iter().cloned()).collect() } else { lines.clone() };
        let skip = all.len() - lines.len();
        let plan = HeapPlan::of(&format!(".extern free\n{text}"), &all, |i| in_function && i >= skip).expect("a plan");
        let (mut w, mut next) = (HeapWalk::default(), first_site);
        let mut out: String = (0..all.len()).map(|i| plan.line(&mut w, &all, i, || (next, next += 1).0)).collect();
        out += &plan.flush(&mut w, &all);
        (out.split_inclusive('\n').skip(skip).collect(), plan.declared)
    }

    #[test]
    fn a_line_ending_one_heap_statement_and_holding_another_rewrites_each() {
        // The fuzz find of issue 37 (fuzz/seeds/ptx_rewrite/heap_decls_share_a_line.ptx).
        let (out, declared) = walk(".extern .func (.param .b64 r) malloc (.param .b64 p\n);.extern .func free (.param .b64 p);\n", false, 7);
        assert_eq!(out, " .func (.param .b64 r) __gasan_malloc (.param .b64 p\n); .func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);\n");
        assert_eq!(declared, [Callee::Malloc, Callee::Free]);
        // Calls: each gets its own site, in order, the one spanning lines written whole.
        let (out, _) = walk("\tcall free, (p); call free,\n(q);\n", true, 7);
        assert_eq!(out, "\tcall __gasan_free, (p, 7); call __gasan_free,\n(q, 8);\n");
        // Comments, guards and scope braces: renamed in code only.
        let (out, _) = walk("\t{ @%p1 call.uni free, // free\n\t(%rd1); } // free\n", true, 3);
        assert_eq!(out, "\t{ @%p1 call.uni __gasan_free, // free\n\t(%rd1, 3); } // free\n");
        // A statement the module never finishes is written as it is, at the end.
        let (out, declared) = walk(".extern .func (.param .b64 r) malloc\n(.param .b64 p)\n.extern .func g\n", false, 9);
        assert_eq!(out, ".extern .func (.param .b64 r) malloc\n(.param .b64 p)\n.extern .func g\n");
        assert!(declared.is_empty());
    }

    #[test]
    fn a_call_after_a_header_on_lines_of_their_own_is_read() {
        // The header's statement ends at its body's brace; the `call` starts a line of its own.
        let lines = Line::read_all([".extern .func free (.param .b64 p);\n", ".func g()\n", "{\n", "\tcall free, (%rd1);\n", "}\n"]);
        let plan = HeapPlan::of(".extern free", &lines, |i| (3..=4).contains(&i)).expect("a plan");
        let mut w = HeapWalk::default();
        let out: String = (0..lines.len()).map(|i| plan.line(&mut w, &lines, i, || 5)).collect();
        assert_eq!(out, " .func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);\n.func g()\n{\n\tcall __gasan_free, (%rd1, 5);\n}\n");
    }

    #[test]
    fn a_call_on_a_line_the_walk_writes_itself_leaves_later_sites_alone() {
        // Line 1 holds an access besides its call: the walk writes it as an access line and never
        // asks the plan for it; the call on line 2 still gets its site.
        let lines = Line::read_all([".extern .func free (.param .b64 p);\n", "\tld.global.u32 %r1, [%rd1]; call free, (%rd1);\n", "\tcall free, (%rd2);\n"]);
        let plan = HeapPlan::of(".extern free", &lines, |i| i > 0).expect("a plan");
        let (mut w, mut next) = (HeapWalk::default(), 4);
        let mut site = || (next, next += 1).0;
        assert_eq!(plan.line(&mut w, &lines, 0, &mut site), " .func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);\n");
        assert_eq!(plan.line(&mut w, &lines, 2, &mut site), "\tcall __gasan_free, (%rd2, 4);\n");
    }

    #[test]
    fn modules_without_a_heap_declaration_get_no_plan() {
        for text in [".extern .func (.param .b32 r) vprintf (.param .b64 f, .param .b64 a);\n", ".func f()\n{\n\tcall free, (%rd1);\n}\n", ".extern .global .b8 free[1];\n"] {
            let lines = Line::read_all(text.split_inclusive('\n'));
            assert!(HeapPlan::of(text, &lines, |_| false).is_none(), "{text:?}");
        }
    }
}
