//! How a line of checked PTX is written: the leaf of emission, which every writer of PTX text
//! uses (emit.rs' checks and report blocks, outside.rs' verdict, and the plans that still write
//! text of their own: bounds.rs' entry lookups, loops.rs' range tests, spaces.rs' checks). It
//! imports nothing of `ptx/`: a line is [`Piece`]s, text and numbers.

use crate::abi::{ctl_offset, CONTROL_BLOCK_SYMBOL};
use crate::shadow::Scale;

/// Marker comment on every line the rewriter adds (lets tests strip them and compare).
pub const MARKER: &str = "//gasan";

/// Function-level registers of halt mode: the address being checked, and the failing site packed
/// as `site | width << 32 | kind << 56`, read by the function's shared report block.
pub(super) const LAST_ADDR: &str = "%gsx";
pub(super) const LAST_SITE: &str = "%gss";

/// What an emitted line is put together from ([`ln!`]): text, or an integer in decimal (as
/// `Display` writes it). Checks are written piece by piece, not with `format!`: formatting a line
/// cost more than everything else about writing it (about 25 k instructions a check), and a
/// module's checks are most of its output.
pub(super) trait Piece {
    fn put(&self, out: &mut String);
}

impl Piece for str {
    #[inline]
    fn put(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl Piece for String {
    #[inline]
    fn put(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl Piece for std::borrow::Cow<'_, str> {
    fn put(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl<T: Piece + ?Sized> Piece for &T {
    #[inline]
    fn put(&self, out: &mut String) {
        (**self).put(out);
    }
}

macro_rules! decimal_pieces {
    ($($t:ty),*) => {
        $(impl Piece for $t {
            fn put(&self, out: &mut String) {
                out.push_str(itoa::Buffer::new().format(*self));
            }
        })*
    };
}
decimal_pieces!(u8, u32, u64, i32, i64, usize);

/// Emitted lines appended to a buffer: each is the indent, its text and (unless [`Lines::unmarked`])
/// the marker comment.
pub(super) struct Lines<'o> {
    out: &'o mut String,
    indent: &'o str,
    marked: bool,
}

impl<'o> Lines<'o> {
    pub fn new(out: &'o mut String, indent: &'o str) -> Self {
        Lines { out, indent, marked: true }
    }

    /// Lines without the marker (the body of a function gasan defines whole).
    pub fn unmarked(out: &'o mut String, indent: &'o str) -> Self {
        Lines { out, indent, marked: false }
    }

    /// A line of fixed text.
    #[inline]
    pub fn text(&mut self, line: &str) {
        self.line(|out| out.push_str(line));
    }

    /// Lines of fixed text.
    pub fn texts(&mut self, lines: &[&str]) {
        for l in lines {
            self.text(l);
        }
    }

    /// A statement of the input as it was: indented, not marked.
    pub fn verbatim(&mut self, line: &str) {
        push_indented(self.out, self.indent, line);
    }

    /// A line ([`ln!`]): the indent, what `pieces` writes, the end.
    #[inline]
    pub fn line(&mut self, pieces: impl FnOnce(&mut String)) {
        self.out.push_str(self.indent);
        pieces(self.out);
        self.end();
    }

    /// (One copy of a constant string, not three pushes: every line the rewriter adds ends
    /// here.)
    #[inline]
    fn end(&mut self) {
        const MARKED_END: &str = {
            assert!(matches!(MARKER.as_bytes(), b"//gasan"));
            " //gasan\n"
        };
        self.out.push_str(if self.marked { MARKED_END } else { "\n" });
    }
}

/// `ln!(lines; piece, piece, ...)`: one line made of [`Piece`]s, in order, through `lines.line`
/// ([`Lines::line`], or a writer's own `line` that takes the same closure).
macro_rules! ln {
    ($lines:expr; $($piece:expr),+ $(,)?) => {
        $lines.line(|out: &mut String| { $( $crate::ptx::lines::Piece::put(&$piece, out); )+ })
    };
}
pub(super) use ln;

/// `.0` followed by `.1` in decimal, written where it is emitted: a register or label named
/// many times that needs no `String` of its own ([`numbered`] makes one when one is needed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Numbered<'p, T>(pub &'p str, pub T);

impl<T: Piece> Piece for Numbered<'_, T> {
    fn put(&self, out: &mut String) {
        out.push_str(self.0);
        self.1.put(out);
    }
}

/// `prefix` followed by `n` in decimal: a numbered register or label, as a `String`.
pub(super) fn numbered(prefix: &str, n: impl Piece) -> String {
    let mut name = String::with_capacity(prefix.len() + 8);
    Numbered(prefix, n).put(&mut name);
    name
}

/// The cold paths' in-pool test (the checks' own is [`probe_load`]'s): `pred` = `addr` is in the
/// pool, leaving its pool offset in `regs.0` (`regs.1` is clobbered).
pub(super) fn pool_test(l: &mut Lines<'_>, addr: &str, regs: (&str, &str), pred: &str) {
    let (off, size) = regs;
    ln!(l; "ld.const.u64 ", off, ", [", CONTROL_BLOCK_SYMBOL, "+", ctl_offset::POOL_BASE, "];");
    ln!(l; "sub.s64 ", off, ", ", addr, ", ", off, ";");
    ln!(l; "ld.const.u64 ", size, ", [", CONTROL_BLOCK_SYMBOL, "+", ctl_offset::POOL_SIZE, "];");
    ln!(l; "setp.lt.u64 ", pred, ", ", off, ", ", size, ";");
}

/// The encoding test ([`Scale::fast_test`]) of shadow byte `shadow` for an access of `width` bytes
/// starting at offset `at` (a `.b32` register, overwritten) of its granule: `bad` = the access is
/// bad. Every check and the loop range test's sweep (loops.rs) make it this way.
pub(super) fn encoding_test(out: &mut Lines<'_>, scale: Scale, width: u32, shadow: &str, at: &str, bad: &str) {
    encoding_limit(out, scale, width, at);
    encoding_compare(out, shadow, at, bad);
}

/// The comparison ending every encoding test: `bad` = shadow byte `shadow` is at most `limit`
/// ([`encoding_limit`]).
pub(super) fn encoding_compare(out: &mut Lines<'_>, shadow: &str, limit: &str, bad: &str) {
    ln!(out; "setp.le.u32 ", bad, ", ", shadow, ", ", limit, ";");
}

/// [`encoding_test`] without its comparison: `at` (a granule offset) becomes the largest bad
/// shadow byte ([`crate::shadow::FastTest::limit`]).
pub(super) fn encoding_limit(out: &mut Lines<'_>, scale: Scale, width: u32, at: &str) {
    let t = scale.fast_test(width);
    if t.addend != 0 {
        ln!(out; "add.u32 ", at, ", ", at, ", ", t.addend, ";");
    }
    if t.at_least_one {
        ln!(out; "max.u32 ", at, ", ", at, ", 1;");
    }
    if t.clamp {
        // min(at, max(at - 1, 2)) (FastTest::clamp), in a scope of its own for the temporary.
        out.texts(&["{", ".reg .b32 %gsc;"]);
        ln!(out; "add.u32 %gsc, ", at, ", -1;");
        ln!(out; "max.u32 %gsc, %gsc, ", crate::shadow::S8_UNENCODABLE - 1, ";");
        ln!(out; "min.u32 ", at, ", ", at, ", %gsc;");
        out.text("}");
    }
}

/// `indent`, `text` and a newline, appended (statements are written this way by the thousand:
/// `format!` cost several times the copying).
pub(super) fn push_indented(out: &mut String, indent: &str, text: &str) {
    out.reserve(indent.len() + text.len() + 1);
    out.push_str(indent);
    out.push_str(text);
    out.push('\n');
}

/// [`push_indented`] into a new string.
pub(super) fn indented(indent: &str, text: &str) -> String {
    let mut out = String::new();
    push_indented(&mut out, indent, text);
    out
}
