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
//! none of the three is not touched ([`HeapCalls::for_module`] returns `None`).
//!
//! Without a heap (heap symbol 0: no runtime, or one that could not reserve the region) the
//! functions call the driver's own `malloc`/`free`, so the module behaves as the original.

use super::emit::{publish_for, record_body_lines, FenceScope, Publish};
use super::{strip_comment, Header, MARKER};
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

/// `s` with every whole-identifier occurrence of a [`Callee`]'s driver name outside comments
/// replaced by its checked name; and the callees found.
fn rename_callees(s: &str) -> (String, Vec<Callee>) {
    let mut out = String::with_capacity(s.len() + 16);
    let mut found = Vec::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '%' || c == '.';
    let mut rest = s;
    while !rest.is_empty() {
        let start = rest.find(|c: char| is_ident(c) || c == '/').unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        // Comments are copied as written (an unterminated one runs to the end).
        let comment_end = if rest.starts_with("//") {
            Some(rest.find('\n').unwrap_or(rest.len()))
        } else if let Some(body) = rest.strip_prefix("/*") {
            Some(body.find("*/").map_or(rest.len(), |e| e + 4))
        } else if rest.starts_with('/') {
            Some(1)
        } else {
            None
        };
        if let Some(end) = comment_end {
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let tok = &rest[..end];
        match Callee::of_token(tok) {
            Some(c) => {
                out.push_str(c.checked_name());
                found.push(c);
            }
            None => out.push_str(tok),
        }
        rest = &rest[end..];
    }
    (out, found)
}

/// The statements (module-scope declarations, `call`s) of a module that name the driver's heap
/// functions, rewritten as they complete.
pub(super) struct HeapCalls {
    /// Lines of the statement being read (a declaration or call spans several).
    pending: Vec<String>,
    /// The text of the statements before it on its first line, rewritten: emitted with it, so
    /// that the line stays whole (text the walk adds after a line, such as a body's declarations,
    /// never lands inside it).
    before_pending: String,
    /// Callees whose declarations were rewritten: their replacements are appended.
    declared: Vec<Callee>,
}

impl HeapCalls {
    /// `Some` when the module declares a driver heap function.
    pub(super) fn for_module(src: &str) -> Option<Self> {
        // (`memmem`: a whole-module search, several times faster than `str::contains`.)
        memchr::memmem::find(src.as_bytes(), b".extern")?;
        // A declaration starts a line; the text before it since the last `;` may hold directives
        // that end without one (`.version`, `.target`, `.address_size` before the first).
        let declares = src.split(';').any(|stmt| {
            let code: Vec<&str> = stmt.lines().map(|l| strip_comment(l).trim_start()).collect();
            let Some(start) = code.iter().position(|l| l.starts_with(".extern")) else { return false };
            let t = code[start..].join(" ");
            t.contains(".func") && !rename_callees(&t).1.is_empty()
        });
        declares.then(|| HeapCalls { pending: Vec::new(), before_pending: String::new(), declared: Vec::new() })
    }

    /// The lines of a statement the input never finished (no `;` before its end), unchanged: held
    /// lines must not be lost.
    pub(super) fn flush(&mut self) -> String {
        std::mem::take(&mut self.before_pending) + &std::mem::take(&mut self.pending).concat()
    }

    /// Holds a line that passes through unread (a block comment's) when it falls inside the
    /// statement being collected, so that it keeps its place; false when none is.
    pub(super) fn hold(&mut self, line: &str) -> bool {
        if self.collecting() {
            self.pending.push(line.to_string());
        }
        self.collecting()
    }

    /// Is a statement being collected?
    pub(super) fn collecting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Feeds one input line. Returns the text to emit in its place: the line itself, nothing (it
    /// is held as part of an unfinished heap statement) or its statements with the heap ones
    /// rewritten. A line may end one statement and begin others (`);.extern .func free (...);`):
    /// it is read statement by statement, each cut at its `;` outside comments, so each heap
    /// statement is rewritten on its own. `site` gives a new site id for a `free` call.
    pub(super) fn feed(&mut self, line: &str, in_function: bool, mut site: impl FnMut() -> u32) -> String {
        if !self.collecting() && !line.contains(';') && !starts_heap_statement(line, in_function) {
            return line.to_string();
        }
        let text = std::mem::take(&mut self.pending).concat() + line;
        let mut out = std::mem::take(&mut self.before_pending);
        let mut rest = text.as_str();
        while let Some(end) = statement_end(rest) {
            let (stmt, after) = rest.split_at(end);
            if starts_heap_statement(stmt, in_function) {
                out.push_str(&self.rewrite(stmt, !in_function, &mut site));
            } else {
                out.push_str(stmt);
            }
            rest = after;
        }
        // What follows the last `;`: the start of a heap statement is held until its end.
        if starts_heap_statement(rest, in_function) {
            self.pending.push(rest.to_string());
            self.before_pending = out;
            return String::new();
        }
        out.push_str(rest);
        out
    }

    /// One complete heap statement (a call, or with `is_decl` an `.extern` declaration, ending at
    /// its `;`), rewritten when it names a driver heap function.
    fn rewrite(&mut self, stmt: &str, is_decl: bool, site: &mut impl FnMut() -> u32) -> String {
        if is_decl && !strip_comments(stmt).contains(".func") {
            return stmt.to_string();
        }
        let (renamed, found) = rename_callees(stmt);
        let Some(&callee) = found.first() else { return stmt.to_string() };
        if is_decl {
            let mut proto = renamed.replacen(".extern", "", 1);
            if callee == Callee::Free {
                // The replacement takes the call's site id as well.
                let param = format!(", .param .b32 {}_site)", callee.checked_name());
                match insert_before_last_paren(&proto, || param) {
                    Some(p) => proto = p,
                    None => return stmt.to_string(),
                }
            }
            if !self.declared.contains(&callee) {
                self.declared.push(callee);
            }
            return proto;
        }
        if callee == Callee::Free {
            return insert_before_last_paren(&renamed, || format!(", {})", site())).unwrap_or_else(|| stmt.to_string());
        }
        renamed
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

/// Does `text` (the start of a statement, comments and scope braces allowed before it) begin a
/// statement the heap rewrite reads: a `call` in a function, an `.extern` declaration at module
/// scope (of a function when `.func` follows: [`HeapCalls::rewrite`])?
fn starts_heap_statement(text: &str, in_function: bool) -> bool {
    let code = first_code(text);
    if in_function {
        let t = code.strip_prefix('@').map_or(code, |g| g.split_once(char::is_whitespace).map_or("", |(_, r)| r.trim_start()));
        t.starts_with("call") && t[4..].starts_with(|c: char| c == '.' || c.is_whitespace())
    } else {
        code.starts_with(".extern")
    }
}

/// `text` from its first code character: whitespace, comments and scope braces skipped.
fn first_code(mut text: &str) -> &str {
    loop {
        text = text.trim_start_matches(|c: char| c.is_whitespace() || c == '{' || c == '}');
        if text.starts_with("//") {
            text = text.find('\n').map_or("", |e| &text[e..]);
        } else if let Some(body) = text.strip_prefix("/*") {
            text = body.find("*/").map_or("", |e| &body[e + 2..]);
        } else {
            return text;
        }
    }
}

/// `text` without its comments (each replaced by a space).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(p) = rest.find('/') {
        out.push_str(&rest[..p]);
        let from = &rest[p..];
        rest = if from.starts_with("//") {
            out.push(' ');
            from.find('\n').map_or("", |e| &from[e..])
        } else if let Some(body) = from.strip_prefix("/*") {
            out.push(' ');
            body.find("*/").map_or("", |e| &body[e + 2..])
        } else {
            out.push('/');
            &from[1..]
        };
    }
    out.push_str(rest);
    out
}

/// The byte offset just past the first `;` of `text` outside comments (`//` to the end of its
/// line, `/* */`), or `None` when the statement does not end in `text`.
fn statement_end(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b';' => return Some(i + 1),
            b'/' if b.get(i + 1) == Some(&b'/') => i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |e| i + e),
            b'/' if b.get(i + 1) == Some(&b'*') => i = memchr::memmem::find(&b[i + 2..], b"*/").map_or(b.len(), |e| i + 2 + e + 2),
            _ => i += 1,
        }
    }
    None
}

/// `s` with its last `)` before its last `;` replaced by `with()`; `with` runs only when there is
/// such a paren (a `free` site id is taken only for a call that gets it).
fn insert_before_last_paren(s: &str, with: impl FnOnce() -> String) -> Option<String> {
    let semi = s.rfind(';')?;
    let paren = s[..semi].rfind(')')?;
    Some(format!("{}{}{}", &s[..paren], with(), &s[paren + 1..]))
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

    #[test]
    fn statements_end_at_a_semicolon_outside_comments() {
        assert_eq!(statement_end("call free, (p); // x"), Some(15));
        assert_eq!(statement_end("call free, // a; b\n(p);"), Some(23));
        assert_eq!(statement_end("call /* ; */ free, (p);"), Some(23));
        assert_eq!(statement_end(".extern .func free /* ;"), None);
        assert_eq!(statement_end(");.extern"), Some(2));
    }

    #[test]
    fn a_line_ending_one_heap_statement_and_holding_another_rewrites_each() {
        let mut h = HeapCalls { pending: Vec::new(), before_pending: String::new(), declared: Vec::new() };
        assert_eq!(h.feed(".extern .func (.param .b64 r) malloc (.param .b64 p\n", false, || 7), "");
        let out = h.feed(");.extern .func free (.param .b64 p);\n", false, || 7);
        assert_eq!(out, " .func (.param .b64 r) __gasan_malloc (.param .b64 p\n); .func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);\n");
        assert_eq!(h.declared, [Callee::Malloc, Callee::Free]);
        // A line that ends a statement and begins one is held whole, its first part rewritten.
        assert_eq!(h.feed("\tcall free, (p); call free,\n", true, || 7), "");
        assert_eq!(h.feed("(q);\n", true, || 8), "\tcall __gasan_free, (p, 7); call __gasan_free,\n(q, 8);\n");
        assert_eq!(h.feed(".extern .func g\n", false, || 9), "");
        assert_eq!(h.flush(), ".extern .func g\n", "the unfinished declaration is held");
    }
}
