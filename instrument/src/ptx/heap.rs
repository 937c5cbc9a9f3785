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
//! Without a heap (heap symbol 0: no runtime, or one that could not reserve the region) the
//! functions call the driver's own `malloc`/`free`, so the module behaves as the original.

use super::emit::{publish_for, record_body_lines, FenceScope, Publish};
use super::ir::line::Line;
use super::ir::stmt::Statements;
use super::{Header, LineMap, MARKER};
use crate::abi::{ctl_offset, free_error, AccessKind, CONTROL_BLOCK_SYMBOL, FLAG_RECOVER};
use crate::device_heap::{block_offset, heap_offset, heap_symbol, BLOCK_FREED, BLOCK_LIVE};
use crate::shadow::Scale;
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
    fn driver_name(self) -> &'static str {
        match self {
            Callee::Malloc => "malloc",
            Callee::Free => "free",
            Callee::AlignedMalloc => "__cuda_syscall_aligned_malloc",
        }
    }
    /// gasan's replacement.
    fn checked_name(self) -> &'static str {
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

/// Name of the shared allocation routine the `malloc` replacements call.
const HEAP_ALLOC: &str = "__gasan_heap_alloc";

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
            code.extend(s.segments.iter().map(|(l, r)| (*l, &lines[*l].stripped()[r.clone()], r.start)));
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

/// The text of `code` (of its first line only, with `first_line`), trimmed.
fn text(code: &[(usize, &str, usize)], first_line: bool) -> String {
    let line = code.first().map_or(0, |c| c.0);
    let parts: Vec<&str> = code.iter().take_while(|c| !first_line || c.0 == line).map(|c| c.1).collect();
    parts.join(" ").trim().to_string()
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
        // (A declaration anywhere.)
        let declares = runs.iter().any(|r| {
            r.starts().any(|j| {
                let rest = &r.code[j..];
                text(rest, false).starts_with(".extern") && rest.iter().any(|s| s.1.contains(".func")) && rest.iter().any(|s| callees_named(s.1).next().is_some())
            })
        });
        if !declares {
            return None;
        }
        let mut plan = HeapPlan::default();
        for r in &runs {
            // A statement begins at its run's start or, where the one begun before is none of
            // the heap rewrite's, at the next line's start: that one was let go at its line's end.
            let Some(j) = r.starts().find(|&j| starts_heap_statement(&text(&r.code[j..], true), in_function(r.code[j].0))) else { continue };
            let code = &r.code[j..];
            let start = code[0].0;
            let end = r.end.unwrap_or(usize::MAX);
            if end != start {
                plan.holds.insert(start, end);
            }
            if r.end.is_none() || !starts_heap_statement(&text(code, false), in_function(end)) {
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

    /// The replacement functions (appended after the module's last line), or "" when none.
    pub(super) fn definitions(&self, scale: Scale, header: &Header) -> String {
        let mut d = self.declared.clone();
        d.sort();
        if d.is_empty() {
            return String::new();
        }
        let heap = heap_symbol(CONTROL_BLOCK_SYMBOL);
        let mut s = String::new();
        let _ = writeln!(s, "{MARKER} gasan checked device heap (instrument/src/device_heap.rs)");
        let _ = writeln!(s, ".weak .const .align 8 .b8 {heap}[8]; {MARKER}");
        for c in &d {
            let decl = match c {
                Callee::Malloc => ".extern .func (.param .b64 gasan_r) malloc (.param .b64 gasan_size);",
                Callee::Free => ".extern .func free (.param .b64 gasan_ptr);",
                Callee::AlignedMalloc => ".extern .func (.param .b64 gasan_r) __cuda_syscall_aligned_malloc (.param .b64 gasan_size, .param .b64 gasan_align);",
            };
            let _ = writeln!(s, "{decl} {MARKER}");
        }
        if d.iter().any(|c| *c != Callee::Free) {
            emit_lines(&mut s, &heap_alloc(scale, publish_for(header)));
        }
        for c in &d {
            let body = match c {
                Callee::Malloc => malloc_wrapper(&heap, Callee::Malloc),
                Callee::AlignedMalloc => malloc_wrapper(&heap, Callee::AlignedMalloc),
                Callee::Free => heap_free(scale, &heap, publish_for(header)),
            };
            emit_lines(&mut s, &body);
        }
        s
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

fn emit_lines(out: &mut String, lines: &[String]) {
    for l in lines {
        let _ = writeln!(out, "{l} {MARKER}");
    }
}

/// `malloc`/`aligned_malloc`: the driver's function when there is no checked heap, else the heap.
fn malloc_wrapper(heap: &str, c: Callee) -> Vec<String> {
    let aligned = c == Callee::AlignedMalloc;
    let name = c.checked_name();
    let params = if aligned { ".param .b64 gasan_size, .param .b64 gasan_align" } else { ".param .b64 gasan_size" };
    let mut v = vec![
        format!(".func (.param .b64 gasan_ret) {name}({params})"),
        "{".into(),
        ".reg .b64 %ha<4>;".into(),
        ".reg .pred %hp<1>;".into(),
        "ld.param.u64 %ha0, [gasan_size];".into(),
        // nvcc's malloc returns 16-byte aligned memory; the heap's blocks are granule-aligned.
        if aligned { "ld.param.u64 %ha1, [gasan_align];".into() } else { "mov.u64 %ha1, 16;".into() },
        format!("ld.const.u64 %ha2, [{heap}];"),
        "setp.ne.u64 %hp0, %ha2, 0;".into(),
        "@%hp0 bra $gasan_checked_heap;".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        ".param .b64 gasan_p1;".into(),
        ".param .b64 gasan_r0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
    ];
    if aligned {
        v.push("st.param.b64 [gasan_p1], %ha1;".into());
        v.push(format!("call.uni (gasan_r0), {}, (gasan_p0, gasan_p1);", c.driver_name()));
    } else {
        v.push(format!("call.uni (gasan_r0), {}, (gasan_p0);", c.driver_name()));
    }
    v.extend([
        "ld.param.b64 %ha3, [gasan_r0];".into(),
        "}".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "$gasan_checked_heap:".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        ".param .b64 gasan_p1;".into(),
        ".param .b64 gasan_p2;".into(),
        ".param .b64 gasan_r0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
        "st.param.b64 [gasan_p1], %ha1;".into(),
        "st.param.b64 [gasan_p2], %ha2;".into(),
        format!("call.uni (gasan_r0), {HEAP_ALLOC}, (gasan_p0, gasan_p1, gasan_p2);"),
        "ld.param.b64 %ha3, [gasan_r0];".into(),
        "}".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
}

/// Shadow byte of a granule with `%ha21` (≤ granule) accessible bytes into `%hr0`, the
/// [`Scale::encode`] arithmetic.
fn encode_granule(scale: Scale, v: &mut Vec<String>) {
    v.push("cvt.u32.u64 %hr0, %ha21;".into());
    if scale == Scale::S8 {
        // k > 3 -> k - 1; 0..=3 stay (3 bytes are encoded as 4: the documented blind spot).
        v.push(format!("setp.gt.u32 %hp2, %hr0, {};", crate::shadow::S8_UNENCODABLE));
        v.push("@%hp2 sub.u32 %hr0, %hr0, 1;".into());
    }
}

/// Writes the coordinates of the calling thread at `[%ha14 + at]` (ctaid) and `[%ha14 + at + 12]`.
fn store_thread(v: &mut Vec<String>, ctaid_at: usize, tid_at: usize) {
    for (i, d) in ["x", "y", "z"].iter().enumerate() {
        v.push(format!("mov.u32 %hr1, %ctaid.{d};"));
        v.push(format!("st.global.u32 [%ha14+{}], %hr1;", ctaid_at + 4 * i));
        v.push(format!("mov.u32 %hr1, %tid.{d};"));
        v.push(format!("st.global.u32 [%ha14+{}], %hr1;", tid_at + 4 * i));
    }
}

/// `__gasan_heap_alloc(size, align, heap header)`: a block from the arena, or 0.
fn heap_alloc(scale: Scale, publish: Publish) -> Vec<String> {
    let g = scale.granule();
    let shift = scale.shift();
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut v: Vec<String> = vec![
        format!(".func (.param .b64 gasan_ret) {HEAP_ALLOC}(.param .b64 gasan_size, .param .b64 gasan_align, .param .b64 gasan_heap)"),
        "{".into(),
        ".reg .b64 %ha<24>;".into(),
        ".reg .b32 %hr<4>;".into(),
        ".reg .pred %hp<4>;".into(),
        "ld.param.u64 %ha0, [gasan_size];".into(),
        "ld.param.u64 %ha1, [gasan_align];".into(),
        "ld.param.u64 %ha2, [gasan_heap];".into(),
        "mov.u64 %ha3, 0;".into(),
        // The alignment must be a power of two (as the driver's aligned malloc requires).
        "sub.u64 %ha4, %ha1, 1;".into(),
        "and.b64 %ha4, %ha4, %ha1;".into(),
        "setp.ne.u64 %hp0, %ha4, 0;".into(),
        "setp.eq.u64 %hp1, %ha1, 0;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        format!("ld.global.u64 %ha5, [%ha2+{}];", heap_offset::ARENA_SIZE),
        // Requests larger than the arena fail before any arithmetic could wrap.
        "setp.gt.u64 %hp0, %ha0, %ha5;".into(),
        "setp.gt.u64 %hp1, %ha1, %ha5;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        // a = max(align, g); body = roundup(max(size, 1), g); cost = body + a (HeapLayout::block_cost)
        format!("max.u64 %ha6, %ha1, {g};"),
        "max.u64 %ha7, %ha0, 1;".into(),
        format!("add.u64 %ha7, %ha7, {};", g - 1),
        format!("and.b64 %ha7, %ha7, {};", !(g - 1) as i64),
        "add.u64 %ha8, %ha7, %ha6;".into(),
        format!("atom.global.add.u64 %ha9, [%ha2+{}], %ha8;", heap_offset::NEXT),
        "add.u64 %ha10, %ha9, %ha8;".into(),
        "setp.gt.u64 %hp0, %ha10, %ha5;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        // start = roundup(arena + old + g, a); its header granule just before it.
        format!("ld.global.u64 %ha11, [%ha2+{}];", heap_offset::ARENA_BASE),
        "add.u64 %ha12, %ha11, %ha9;".into(),
        format!("add.u64 %ha12, %ha12, {g};"),
        "sub.u64 %ha13, %ha6, 1;".into(),
        "add.u64 %ha12, %ha12, %ha13;".into(),
        "not.b64 %ha13, %ha13;".into(),
        "and.b64 %ha12, %ha12, %ha13;".into(),
        format!("sub.u64 %ha14, %ha12, {g};"),
        // Table slot old >> (shift + 1): each block costs two granules or more (device_heap.rs).
        format!("shr.u64 %ha15, %ha9, {};", shift + 1),
        format!("ld.global.u64 %ha16, [%ha2+{}];", heap_offset::TABLE),
        "shl.b64 %ha17, %ha15, 4;".into(),
        "add.u64 %ha16, %ha16, %ha17;".into(),
        "st.global.v2.u64 [%ha16], {%ha12, %ha0};".into(),
        "cvt.u32.u64 %hr1, %ha15;".into(),
        format!("st.global.u32 [%ha14+{}], %hr1;", block_offset::INDEX),
        format!("st.global.u64 [%ha14+{}], %ha0;", block_offset::SIZE),
    ];
    store_thread(&mut v, block_offset::ALLOC_CTAID, block_offset::ALLOC_TID);
    v.extend([
        format!("st.global.u32 [%ha14+{}], {BLOCK_LIVE};", block_offset::STATE),
        // Shadow of the block: granule i gets encode(min(size - i*g, g)).
        format!("ld.const.u64 %ha18, [{ctl}+{}];", ctl_offset::POOL_BASE),
        format!("ld.const.u64 %ha19, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
        "sub.u64 %ha20, %ha12, %ha18;".into(),
        format!("shr.u64 %ha20, %ha20, {shift};"),
        "add.u64 %ha20, %ha20, %ha19;".into(),
        "mov.u64 %ha22, 0;".into(),
        "$gasan_heap_shadow:".into(),
        "max.u64 %ha21, %ha0, %ha22;".into(),
        "sub.u64 %ha21, %ha21, %ha22;".into(),
        format!("min.u64 %ha21, %ha21, {g};"),
    ]);
    encode_granule(scale, &mut v);
    v.extend([
        "st.global.u8 [%ha20], %hr0;".into(),
        "add.u64 %ha20, %ha20, 1;".into(),
        format!("add.u64 %ha22, %ha22, {g};"),
        "setp.lt.u64 %hp2, %ha22, %ha7;".into(),
        "@%hp2 bra $gasan_heap_shadow;".into(),
        // The header, table entry and shadow are visible before the pointer can be passed on
        // (a release fence where the target has one: an sc fence would keep the calling
        // kernel's atomics from reducing, emit.rs `Publish`).
        publish.release_fence(FenceScope::Gpu).into(),
        "mov.u64 %ha3, %ha12;".into(),
        "$gasan_heap_ret:".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
}

/// `__gasan_free(ptr, site)`: poisons a live block (never reused); reports anything else.
fn heap_free(scale: Scale, heap: &str, publish: Publish) -> Vec<String> {
    let g = scale.granule();
    let shift = scale.shift();
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut v: Vec<String> = vec![
        ".func __gasan_free(.param .b64 gasan_ptr, .param .b32 gasan_site)".into(),
        "{".into(),
        ".reg .b64 %ha<24>;".into(),
        ".reg .b32 %hr<12>;".into(),
        ".reg .pred %hp<4>;".into(),
        "ld.param.u64 %ha0, [gasan_ptr];".into(),
        format!("ld.const.u64 %ha2, [{heap}];"),
        "setp.ne.u64 %hp0, %ha2, 0;".into(),
        "@%hp0 bra $gasan_checked_heap;".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
        "call.uni free, (gasan_p0);".into(),
        "}".into(),
        "ret;".into(),
        "$gasan_checked_heap:".into(),
        // free(NULL) does nothing.
        "setp.eq.u64 %hp0, %ha0, 0;".into(),
        "@%hp0 ret;".into(),
        format!("mov.u32 %hr9, {};", free_error::INVALID_FREE),
        format!("ld.global.u64 %ha5, [%ha2+{}];", heap_offset::ARENA_BASE),
        format!("ld.global.u64 %ha6, [%ha2+{}];", heap_offset::ARENA_SIZE),
        // A block start lies in the arena past its header granule and is granule-aligned.
        "sub.u64 %ha7, %ha0, %ha5;".into(),
        format!("setp.lt.u64 %hp0, %ha7, {g};"),
        "setp.ge.u64 %hp1, %ha7, %ha6;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        format!("and.b64 %ha8, %ha0, {};", g - 1),
        "setp.ne.u64 %hp1, %ha8, 0;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        // ... and its header's table entry names it (user bytes never pass for a header).
        format!("sub.u64 %ha14, %ha0, {g};"),
        format!("ld.global.u32 %hr3, [%ha14+{}];", block_offset::INDEX),
        "cvt.u64.u32 %ha11, %hr3;".into(),
        format!("ld.global.u64 %ha10, [%ha2+{}];", heap_offset::TABLE_CAPACITY),
        "setp.ge.u64 %hp0, %ha11, %ha10;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        format!("ld.global.u64 %ha12, [%ha2+{}];", heap_offset::TABLE),
        "shl.b64 %ha11, %ha11, 4;".into(),
        "add.u64 %ha12, %ha12, %ha11;".into(),
        "ld.global.u64 %ha13, [%ha12];".into(),
        "setp.ne.u64 %hp0, %ha13, %ha0;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        // Exactly one of two racing frees changes the state.
        format!("atom.global.cas.b32 %hr4, [%ha14+{}], {BLOCK_LIVE}, {BLOCK_FREED};", block_offset::STATE),
        format!("setp.eq.u32 %hp0, %hr4, {BLOCK_LIVE};"),
        "@%hp0 bra $gasan_free_ok;".into(),
        format!("setp.eq.u32 %hp0, %hr4, {BLOCK_FREED};"),
        format!("@%hp0 mov.u32 %hr9, {};", free_error::DOUBLE_FREE),
        "bra.uni $gasan_free_bad;".into(),
        "$gasan_free_ok:".into(),
    ];
    store_thread(&mut v, block_offset::FREE_CTAID, block_offset::FREE_TID);
    v.extend([
        // Poison the block's granules (the memory is never handed out again: quarantine).
        format!("ld.global.u64 %ha15, [%ha14+{}];", block_offset::SIZE),
        "max.u64 %ha15, %ha15, 1;".into(),
        format!("ld.const.u64 %ha18, [{ctl}+{}];", ctl_offset::POOL_BASE),
        format!("ld.const.u64 %ha19, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
        "sub.u64 %ha20, %ha0, %ha18;".into(),
        format!("shr.u64 %ha20, %ha20, {shift};"),
        "add.u64 %ha20, %ha20, %ha19;".into(),
        "mov.u64 %ha22, 0;".into(),
        "$gasan_free_shadow:".into(),
        "st.global.u8 [%ha20], 0;".into(),
        "add.u64 %ha20, %ha20, 1;".into(),
        format!("add.u64 %ha22, %ha22, {g};"),
        "setp.lt.u64 %hp2, %ha22, %ha15;".into(),
        "@%hp2 bra $gasan_free_shadow;".into(),
        // The poison is visible before anything the thread does after the free.
        publish.release_fence(FenceScope::Gpu).into(),
        "ret;".into(),
        "$gasan_free_bad:".into(),
        "{".into(),
        ".reg .b64 %ra<3>;".into(),
        ".reg .b32 %rr<11>;".into(),
        ".reg .pred %rp<2>;".into(),
        "mov.b64 %ra0, %ha0;".into(),
        "mov.u32 %rr0, 0;".into(),
        format!("mov.u32 %rr1, {};", AccessKind::Free as u8),
        "ld.param.u32 %rr2, [gasan_site];".into(),
        "mov.u32 %rr3, %hr9;".into(),
    ]);
    v.extend(record_body_lines(publish, "_free"));
    v.extend([
        // Halt mode stops the kernel like a bad access; recover mode leaves the memory alone.
        format!("ld.const.u64 %ra1, [{ctl}+{}];", ctl_offset::FLAGS),
        format!("and.b64 %ra1, %ra1, {FLAG_RECOVER};"),
        "setp.eq.u64 %rp0, %ra1, 0;".into(),
        "@%rp0 trap;".into(),
        "}".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
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
