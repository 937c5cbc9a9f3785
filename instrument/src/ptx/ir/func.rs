//! A function's header, read by one parser ([`FnHeader::parse`]): `[.visible|.weak|.extern|.common]
//! .entry|.func [(returns)] name(params) [performance directives]`, its name, kind, linkage and
//! parameters. Where the bodies are (bodies.rs) names each body by it, the kernel-parameter bounds
//! (bounds.rs) read a kernel's parameters from it, the frame-top pass (frames.rs) reads each
//! header and prototype with it, and the shared/local provenance (spaces.rs) tells a function's own
//! parameters from a call's by it.

use super::access::{ascii_whitespace, find_whitespace, rfind_whitespace, trim, trim_end, trim_start};
use super::bodies::Body;
use super::line::{comma_pieces, Line};

/// One parameter (or return value) a header declares: `.param .align 8 .b8 name[16]`,
/// `.param .u64 .ptr .align 1 name`, `.reg .b32 name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct Param<'t> {
    /// `.param` or `.reg`.
    pub space: &'t str,
    /// The words between the space and the name (type, alignment, attributes), as written.
    pub attrs: &'t str,
    /// The name, without its dimensions.
    pub name: &'t str,
    /// Declared with dimensions (`name[16]`).
    pub array: bool,
}

impl Param<'_> {
    /// A scalar 64-bit integer, plain or declared a generic or global pointer (`.param .u64 p`,
    /// `.param .u64 .ptr .global .align 1 p`: Triton declares every pointer so): what a pointer
    /// argument a launch may tag can be. The attribute only tells ptxas what the program's reads
    /// may assume of the value, and a tagged parameter's every read is replaced by the pointer
    /// without its tag (bounds.rs), whose space and alignment are the argument's own. Pointers
    /// declared into other spaces are left alone.
    pub fn scalar64(&self) -> bool {
        let mut words = self.attrs.split_whitespace();
        if self.array || !matches!(words.next(), Some(".u64" | ".s64" | ".b64")) {
            return false;
        }
        match (words.next(), words.next(), words.next(), words.next(), words.next()) {
            (None, ..) => true,
            (Some(".ptr"), None, ..) | (Some(".ptr"), Some(".global"), None, ..) => true,
            (Some(".ptr"), Some(".align"), Some(n), None, _) | (Some(".ptr"), Some(".global"), Some(".align"), Some(n), None) => n.parse::<u32>().is_ok(),
            _ => false,
        }
    }

    /// Declared a pointer (`.ptr`, with or without a space and an alignment).
    pub fn declared_pointer(&self) -> bool {
        self.attrs.split_whitespace().any(|w| w == ".ptr")
    }
}

/// A function's header or prototype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct FnHeader<'t> {
    pub name: &'t str,
    /// A kernel (`.entry`), not a device function (`.func`).
    pub entry: bool,
    /// Declared `.visible`, `.weak`, `.extern` or `.common`.
    pub linkage: bool,
    /// The parameter list's declarations (empty without a list).
    pub params: Vec<Param<'t>>,
    /// The parameter list, when it is the text's last parenthesis (only whitespace after its
    /// `)`, so a parameter can be added before it): whether it is empty.
    pub params_last: Option<bool>,
}

/// The byte index of the `)` matching the `(` at `open` in `s`.
pub(in crate::ptx) fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    // (Bytes: parentheses are ASCII, and no byte of a longer character is one.)
    let b = s.as_bytes();
    for k in memchr::memchr2_iter(b'(', b')', &b[open..]) {
        if b[open + k] == b'(' {
            depth += 1;
        } else {
            depth -= 1;
            if depth == 0 {
                return Some(open + k);
            }
        }
    }
    None
}

/// The declarations of a parameter list's text (between its parentheses), comma separated.
fn params(list: &str) -> Vec<Param<'_>> {
    let mut out = Vec::new();
    for piece in comma_pieces(list) {
        // (`str::trim`, `split_once` and `rfind` of `char::is_whitespace`, byte by byte where the
        // text is ASCII: access.rs' trims and [`find_whitespace`], and [`rfind_whitespace`].)
        let piece = trim(piece);
        let Some((space, rest)) = find_whitespace(piece).map(|p| (&piece[..p], &piece[p + char_len(piece, p)..])).filter(|(w, _)| matches!(*w, ".param" | ".reg")) else { continue };
        // The name is the last word; the attributes, the words between.
        let rest = trim_start(rest);
        let (attrs, last) = match rfind_whitespace(rest) {
            Some(p) => (trim_end(&rest[..p]), &rest[p + 1..]),
            None => ("", rest),
        };
        if last.is_empty() {
            continue;
        }
        // (`memchr`: `str::find` of a `char` cost more than the rest of a parameter.)
        let (name, array) = match memchr::memchr(b'[', last.as_bytes()) {
            Some(p) => (&last[..p], true),
            None => (last, false),
        };
        out.push(Param { space, attrs, name, array });
    }
    out
}

/// The length of the character at byte `p` of `s`.
fn char_len(s: &str, p: usize) -> usize {
    s[p..].chars().next().map_or(0, char::len_utf8)
}

/// The words of `s` (split at whitespace) up to the first that does not begin with `.`:
/// `s.split_whitespace().take_while(|w| w.starts_with('.'))`, split byte by byte where `s` is
/// ASCII (the `char` splitter cost most of finding a header's name, and every body's header is
/// read by the body scan and the parameter analysis).
fn leading_directives(s: &str) -> impl Iterator<Item = &str> {
    let ascii = s.is_ascii().then(|| {
        let b = s.as_bytes();
        let mut at = 0;
        std::iter::from_fn(move || {
            while at < b.len() && ascii_whitespace(b[at]) {
                at += 1;
            }
            let start = at;
            while at < b.len() && !ascii_whitespace(b[at]) {
                at += 1;
            }
            (start < at).then(|| &s[start..at])
        })
    });
    let chars = (!s.is_ascii()).then(|| s.split_whitespace());
    ascii.into_iter().flatten().chain(chars.into_iter().flatten()).take_while(|w| w.starts_with('.'))
}

/// Where a header's name is: `(entry, linkage, name's start, name's end)`.
fn locate(text: &str) -> Option<(bool, bool, usize, usize)> {
    let first_paren = memchr::memchr(b'(', text.as_bytes()).unwrap_or(text.len());
    let (mut entry, mut func, mut linkage, mut last) = (false, false, false, None);
    for d in leading_directives(&text[..first_paren]) {
        entry |= d == ".entry";
        func |= d == ".func";
        linkage |= matches!(d, ".visible" | ".weak" | ".extern" | ".common");
        last = Some(d);
    }
    if !entry && !func {
        return None;
    }
    let last = last?;
    // (`text.find(last)`: its first occurrence, found at a `.`, as every directive begins.)
    let (hay, needle) = (text.as_bytes(), last.as_bytes());
    let mut at = memchr::memchr_iter(b'.', hay).find(|&i| hay[i..].starts_with(needle))? + last.len();
    at += text[at..].len() - trim_start(&text[at..]).len();
    if text[at..].starts_with('(') {
        // The return list.
        at = matching_paren(text, at)? + 1;
        at += text[at..].len() - trim_start(&text[at..]).len();
    }
    let len = text[at..].bytes().position(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$')).unwrap_or(text.len() - at);
    (len > 0).then_some((entry, linkage, at, at + len))
}

impl<'t> FnHeader<'t> {
    /// The header a statement's text is (its lines joined, up to its `{` or `;`), if it is one.
    pub fn parse(text: &'t str) -> Option<FnHeader<'t>> {
        let (entry, linkage, start, end) = locate(text)?;
        let after = &text[end..];
        let open = end + (after.len() - trim_start(after).len());
        let list = text[open..].starts_with('(').then(|| matching_paren(text, open).map(|close| (open, close))).flatten();
        Some(FnHeader {
            name: &text[start..end],
            entry,
            linkage,
            params: list.map_or_else(Vec::new, |(open, close)| params(&text[open + 1..close])),
            params_last: list.and_then(|(open, close)| text[close + 1..].trim().is_empty().then(|| text[open + 1..close].trim().is_empty())),
        })
    }

    /// The name a header's first line declares (`.visible .entry k(`, `.func (.param .b32 r)
    /// f(`), and whether it is a kernel's, when the line is no prototype (ending `;`): what names
    /// the body that follows.
    pub fn name_on_line(line: &str) -> Option<(&str, bool)> {
        if line.trim_end().ends_with(';') {
            return None;
        }
        let (entry, _, start, end) = locate(line)?;
        Some((&line[start..end], entry))
    }

    /// The header text of body `b`: its lines' code from the header's first line to the body's
    /// `{`, joined by spaces.
    pub fn text_of(lines: &[Line<'_>], b: &Body) -> String {
        // (Sized first: grown line by line, a header was reallocated several times.)
        let header = lines.get(b.header..=b.open.min(lines.len().saturating_sub(1))).unwrap_or_default();
        let mut text = String::with_capacity(header.iter().map(|l| l.code.len() + 1).sum());
        for (i, line) in lines.iter().enumerate().take(b.open + 1).skip(b.header) {
            let code = if i == b.open { line.code.split('{').next().unwrap_or("") } else { line.code };
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(code);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A header's leading directives split byte by byte are `split_whitespace`'s.
        #[test]
        fn leading_directives_are_the_char_split(s in "[ \t\x0b\x0c\r\n\u{85}\u{a0}é.a-z_]{0,30}") {
            let by_chars: Vec<&str> = s.split_whitespace().take_while(|w| w.starts_with('.')).collect();
            prop_assert_eq!(leading_directives(&s).collect::<Vec<_>>(), by_chars);
        }
    }

    /// `params` as it read with `str`'s searches (before the byte-by-byte ones).
    fn params_by_chars(list: &str) -> Vec<Param<'_>> {
        let mut out = Vec::new();
        for piece in list.split(',') {
            let piece = piece.trim();
            let Some((space, rest)) = piece.split_once(char::is_whitespace).filter(|(w, _)| matches!(*w, ".param" | ".reg")) else { continue };
            let rest = rest.trim_start();
            let (attrs, last) = match rest.rfind(char::is_whitespace) {
                Some(p) => (rest[..p].trim_end(), &rest[p + 1..]),
                None => ("", rest),
            };
            if last.is_empty() {
                continue;
            }
            let (name, array) = match last.find('[') {
                Some(p) => (&last[..p], true),
                None => (last, false),
            };
            out.push(Param { space, attrs, name, array });
        }
        out
    }

    proptest! {
        #[test]
        fn params_read_byte_by_byte_as_by_chars(list in "(\\.param|\\.reg|\\.u64|p|\\[|8|\\]| |\t|\u{b}|,|é){0,16}") {
            prop_assert_eq!(params(&list), params_by_chars(&list));
        }
    }

    #[test]
    fn headers_and_prototypes() {
        let h = FnHeader::parse(".visible .entry _Z1kPfi( .param .u64 _Z1kPfi_param_0, .param .u32 _Z1kPfi_param_1 ) .maxntid 256, 1, 1").unwrap();
        assert_eq!((h.name, h.entry, h.linkage, h.params_last), ("_Z1kPfi", true, true, None));
        assert_eq!(h.params.iter().map(|p| (p.name, p.scalar64())).collect::<Vec<_>>(), [("_Z1kPfi_param_0", true), ("_Z1kPfi_param_1", false)]);
        let h = FnHeader::parse(".func (.param .b64 func_retval0) f(.param .align 8 .b8 f_param_0[16], .param .u64 .ptr .align 1 f_param_1)").unwrap();
        assert_eq!((h.name, h.entry, h.linkage, h.params_last), ("f", false, false, Some(false)));
        assert_eq!(h.params[0], Param { space: ".param", attrs: ".align 8 .b8", name: "f_param_0", array: true });
        assert!(!h.params[0].scalar64() && h.params[1].scalar64(), "an array is no scalar; a generic pointer is one");
        let attrs = |a: &str| Param { space: ".param", attrs: a, name: "p", array: false }.scalar64();
        for a in [".u64", ".b64", ".s64", ".u64 .ptr", ".u64 .ptr .global", ".u64 .ptr .align 16", ".u64 .ptr .global .align 1"] {
            assert!(attrs(a), "{a}");
        }
        for a in [".u32", ".b8", ".align 8 .b8", ".u64 .ptr .shared .align 16", ".u64 .ptr .const", ".u64 .ptr .global .align", ".u64 .ptr .global .align 1 .x", ".u64 .global"] {
            assert!(!attrs(a), "{a}");
        }
        let h = FnHeader::parse(".extern .func (.param .b64 r) malloc (.param .b64 p )").unwrap();
        assert_eq!((h.name, h.linkage, h.params.len(), h.params_last), ("malloc", true, 1, Some(false)));
        assert_eq!(FnHeader::parse(".func g()").unwrap().params_last, Some(true));
        assert_eq!(FnHeader::parse(".func g").unwrap().params_last, None);
        assert_eq!(FnHeader::parse(".func (.reg .b32 r) h (.reg .b32 a)").unwrap().params[0].space, ".reg");
        assert!(FnHeader::parse(".global .u32 x").is_none() && FnHeader::parse("call f, (a)").is_none() && FnHeader::parse(".func (").is_none());
    }

    #[test]
    fn names_on_a_headers_first_line() {
        assert_eq!(FnHeader::name_on_line(".visible .entry k("), Some(("k", true)));
        assert_eq!(FnHeader::name_on_line(".func (.param .b32 func_retval0) $f_1("), Some(("$f_1", false)));
        assert_eq!(FnHeader::name_on_line(".extern .func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);"), None, "a prototype");
        assert_eq!(FnHeader::name_on_line(".visible .entry"), None, "the name on the next line");
        assert_eq!(FnHeader::name_on_line(".entryk(.param .u64 p)"), None, "one directive, `.entryk`");
    }

    #[test]
    fn a_bodys_header_text() {
        let text = ".version 8.0\n.visible .entry k(\n.param .u64 k_param_0\n)\n.maxntid 64, 1, 1\n{ // body\nret;\n}\n";
        let lines = Line::read_all(text.split_inclusive('\n'));
        let bodies = super::super::bodies::Bodies::scan(&lines);
        let b = bodies.nth(0);
        assert_eq!(b.header, 1);
        let t = FnHeader::text_of(&lines, b);
        assert_eq!(t, ".visible .entry k( .param .u64 k_param_0 ) .maxntid 64, 1, 1 ");
        let h = FnHeader::parse(&t).unwrap();
        assert_eq!((h.name, h.entry, h.params.len()), ("k", true, 1));
    }
}
