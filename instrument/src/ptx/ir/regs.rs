//! The types of a function's registers, from its `.reg` declarations: which are declared above a
//! line of a body ([`DeclaredRegs`], the one rule every pass reads them by), and the width of a
//! type ([`type_bits`]).

use super::access::{find_whitespace, trim, trim_start};
use super::line::{comma_pieces, find_byte, find_pair, Line};
use rustc_hash::FxHashMap as HashMap;

/// The register types declared above each line of one body, read as a pass goes down the body:
/// the one place that says what "declared above this line" means. At line `i` they are those of
/// the `.reg` lines after the body's opening line, up to and including `i`, read in order, so a
/// register's type is that of its last declaration there. Scope braces:
/// - a `.reg` line inside a scope opened on a line of its own (multi-line inline asm) is read, and
///   its declarations stay read after the scope closes (a name it shadowed then reads as the
///   scope's type);
/// - a `.reg` inside a scope that opens on its line (`{ .reg .pred p; ... }`, one-line inline asm)
///   is not: the line starts with the brace, and its registers live only in that scope.
///
/// Lines inside a block comment (`/*` to `*/`, the line opening one included) declare nothing,
/// as the rewriting walk passes them through.
#[derive(Default, Clone)]
pub(in crate::ptx) struct DeclaredRegs {
    /// The next line to read.
    next: usize,
    /// The body's opening line (reading starts after it).
    open: usize,
    in_block_comment: bool,
    types: RegTypes,
}

impl DeclaredRegs {
    /// For the body whose opening brace is on line `open`: nothing read yet.
    pub(in crate::ptx) fn of_body(open: usize) -> Self {
        DeclaredRegs { next: open + 1, open, in_block_comment: false, types: RegTypes::default() }
    }

    /// The types declared above line `i` (that line included) of the body. Lines are read once
    /// as `i` grows; asked for a line above the last one read, the body is read again from its top.
    pub(in crate::ptx) fn at(&mut self, lines: &[Line<'_>], i: usize) -> &RegTypes {
        if i + 1 < self.next {
            *self = Self::of_body(self.open);
        }
        while self.next <= i && self.next < lines.len() {
            self.read(&lines[self.next]);
            self.next += 1;
        }
        &self.types
    }

    /// The opening line of the body whose types these are.
    pub(in crate::ptx) fn body_open(&self) -> usize {
        self.open
    }

    /// The types as of the last line [`DeclaredRegs::at`] read.
    pub(in crate::ptx) fn types(&self) -> &RegTypes {
        &self.types
    }

    fn read(&mut self, line: &Line<'_>) {
        if self.in_block_comment {
            self.in_block_comment = find_pair(line.raw, b'*', b'/').is_none();
            return;
        }
        let code = line.stripped();
        if let Some(p) = line.slash.then(|| find_pair(code, b'/', b'*')).flatten() {
            self.in_block_comment = find_pair(&code[p..], b'*', b'/').is_none();
            return;
        }
        // (A line the rewriter wrote declares only gasan's own registers, whose types no pass
        // asks: no input line names one. Loop versioning declares each temporary on a line of
        // its own, most of the `.reg` lines of a versioned module.)
        if !line.generated {
            self.types.declare_line(line);
        }
    }
}

/// Declared register types of the current function: `%r<5>` ranges and explicit names. (A
/// declaration's type is shared by the names it declares, not copied for each.) A function
/// declares a handful of ranges (`%p`, `%r`, `%rd`, `%f`, ...): they are kept in a short list
/// searched in order, indexed by a map only past [`RegTypes::LIST_PREFIXES`], with their names held
/// inline when short; the common types are static strings. No allocation for most declarations.
#[derive(Default, Clone)]
pub(in crate::ptx) struct RegTypes {
    prefixes: Vec<(ShortName, RegType)>,
    /// Position of each prefix in `prefixes`, once there are more than [`RegTypes::LIST_PREFIXES`].
    prefix_index: HashMap<String, usize>,
    names: HashMap<String, RegType>,
}

/// A register name or prefix, inline when it fits.
#[derive(Clone)]
enum ShortName {
    Inline { len: u8, bytes: [u8; 15] },
    Heap(Box<str>),
}

impl ShortName {
    fn new(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= 15 => {
                let mut bytes = [0; 15];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                ShortName::Inline { len, bytes }
            }
            _ => ShortName::Heap(s.into()),
        }
    }

    fn is(&self, s: &str) -> bool {
        match self {
            ShortName::Inline { len, bytes } => &bytes[..usize::from(*len)] == s.as_bytes(),
            ShortName::Heap(h) => **h == *s,
        }
    }
}

/// A declared register type (without its `.`): one of PTX's usual types, or any other text.
#[derive(Clone)]
enum RegType {
    Common(&'static str),
    Other(std::sync::Arc<str>),
}

impl RegType {
    #[cfg(test)]
    const COMMON: [&'static str; 22] =
        ["pred", "b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "u128", "s128"];

    fn new(ty: &str) -> Self {
        match Self::common(ty) {
            Some(c) => RegType::Common(c),
            None => RegType::Other(ty.into()),
        }
    }

    /// `ty` when it is one of [`RegType::COMMON`]. (A `match`: its arms compare with constants of
    /// known length, inlined, where a search of the list called `memcmp` for most names.)
    fn common(ty: &str) -> Option<&'static str> {
        macro_rules! one_of {
            ($($t:literal),*) => {
                match ty {
                    $($t => Some($t),)*
                    _ => None,
                }
            };
        }
        one_of!("pred", "b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "u128", "s128")
    }

    fn as_str(&self) -> &str {
        match self {
            RegType::Common(c) => c,
            RegType::Other(o) => o,
        }
    }
}

impl RegTypes {
    /// Most prefixes searched in a list; past them, a map indexes the list.
    const LIST_PREFIXES: usize = 16;

    /// Declares what the line declares, when it is a `.reg` line (read by [`DeclaredRegs`] only).
    fn declare_line(&mut self, line: &Line<'_>) {
        if line.code.starts_with(".reg") {
            // (Most `.reg` lines are one declaration: its text, without the pieces' iterator.)
            if let Some((decl, _)) = line.sole_piece() {
                self.declare(decl);
                return;
            }
            for decl in line.reg_declarations() {
                self.declare(decl);
            }
        }
    }

    fn declare(&mut self, decl: &str) {
        // `.reg .b32 %r<5>` or `.reg .pred %p, %q`
        let Some((ty, names)) = split_declaration(decl) else { return };
        let ty = RegType::new(ty.trim_start_matches('.'));
        for name in comma_pieces(names) {
            // (Whitespace inside a name, `%r  <5>`, becomes one space, as it always has.)
            let name: std::borrow::Cow<'_, str> = match trim(name) {
                n if n.bytes().any(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r')) || !n.is_ascii() && n.contains(char::is_whitespace) => {
                    n.split_whitespace().collect::<Vec<_>>().join(" ").into()
                }
                n => n.into(),
            };
            let name = name.as_ref();
            if let Some(p) = find_byte(b'<', name.as_bytes()) {
                self.set_prefix(&name[..p], ty.clone());
            } else if !name.is_empty() {
                self.names.insert(name.to_string(), ty.clone());
            }
        }
    }

    fn set_prefix(&mut self, prefix: &str, ty: RegType) {
        match self.prefix_at(prefix) {
            Some(k) => self.prefixes[k].1 = ty,
            None => {
                self.prefixes.push((ShortName::new(prefix), ty));
                if self.prefixes.len() > Self::LIST_PREFIXES {
                    if self.prefix_index.is_empty() {
                        for (k, (p, _)) in self.prefixes.iter().enumerate() {
                            let p = match p {
                                ShortName::Inline { len, bytes } => String::from_utf8_lossy(&bytes[..usize::from(*len)]).into_owned(),
                                ShortName::Heap(h) => h.to_string(),
                            };
                            self.prefix_index.insert(p, k);
                        }
                    } else {
                        self.prefix_index.insert(prefix.to_string(), self.prefixes.len() - 1);
                    }
                }
            }
        }
    }

    fn prefix_at(&self, prefix: &str) -> Option<usize> {
        if self.prefixes.len() > Self::LIST_PREFIXES {
            self.prefix_index.get(prefix).copied()
        } else {
            self.prefixes.iter().position(|(p, _)| p.is(prefix))
        }
    }

    pub(in crate::ptx) fn type_of(&self, reg: &str) -> Option<&str> {
        if let Some(t) = self.names.get(reg) {
            return Some(t.as_str());
        }
        let prefix = reg.trim_end_matches(|c: char| c.is_ascii_digit());
        self.prefix_at(prefix).map(|k| self.prefixes[k].1.as_str())
    }
}

/// A `.reg` declaration's type (with its `.`) and the names after it: `.reg .b32 %r<5>, %x` is
/// (`.b32`, `%r<5>, %x`). `None` without a type. (Split and trimmed byte by byte while the text
/// is ASCII, as `str::split_once(char::is_whitespace)` and `str::trim_start` split it: a body's
/// declarations are read by each pass that follows its registers, and the `char` searchers'
/// setup cost most of a declaration.)
fn split_declaration(decl: &str) -> Option<(&str, &str)> {
    // `s.split_once(char::is_whitespace)`.
    let split = |s| find_whitespace(s).map(|w| (&s[..w], &s[w + s[w..].chars().next().map_or(1, char::len_utf8)..]));
    let (_, rest) = split(trim_start(decl))?; // `.reg`
    let rest = trim_start(rest);
    let (ty, names) = split(rest).unwrap_or((rest, ""));
    (!ty.is_empty()).then_some((ty, names))
}

pub(in crate::ptx) fn type_bits(ty: &str) -> Option<u32> {
    // The digits after the first character (ASCII: found by bytes, sliced, not collected).
    let rest = ty.chars().next().map_or("", |c| &ty[c.len_utf8()..]);
    let digits = &rest[..rest.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len())];
    match ty {
        "pred" => None,
        _ => digits.parse().ok().filter(|b| [8, 16, 32, 64, 128].contains(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The type of `reg` declared above each line of the body opening on line 0 of `text`.
    fn types_at(text: &str, reg: &str) -> Vec<Option<String>> {
        let lines = Line::read_all(text.split_inclusive('\n'));
        let mut declared = DeclaredRegs::of_body(0);
        (0..lines.len()).map(|i| declared.at(&lines, i).type_of(reg).map(String::from)).collect()
    }

    fn ty(t: &str) -> Option<String> {
        Some(t.to_string())
    }

    #[test]
    fn a_register_has_the_type_of_its_last_declaration_on_or_above_the_line() {
        let text = "{\n.reg .b32 %r<4>;\nmov.u32 %r1, 0;\n.reg .b64 %r<2>;\nret;\n}\n";
        assert_eq!(types_at(text, "%r1"), [None, ty("b32"), ty("b32"), ty("b64"), ty("b64"), ty("b64")]);
        // Names, several on a line, and the opening line itself not read.
        let text = ".reg .f32 %x; {\n.reg .pred %p, %q;\n}\n";
        assert_eq!(types_at(text, "%q"), [None, ty("pred"), ty("pred")]);
        assert_eq!(types_at(text, "%x"), [None, None, None]);
    }

    #[test]
    fn scope_braces_a_scope_of_its_own_lines_is_read_and_a_one_line_scope_is_not() {
        let text = "{\n.reg .b32 %r<4>;\n{\n.reg .f32 %r<2>;\n}\nret;\n}\n";
        assert_eq!(types_at(text, "%r1")[2..], [ty("b32"), ty("f32"), ty("f32"), ty("f32"), ty("f32")]);
        let text = "{\n.reg .b32 %r<4>;\n{ .reg .f32 %r<2>; mov.f32 %r1, 0f00000000; }\nret;\n}\n";
        assert_eq!(types_at(text, "%r1")[2..], [ty("b32"), ty("b32"), ty("b32")]);
    }

    #[test]
    fn lines_in_a_block_comment_declare_nothing() {
        let text = "{\n/*\n.reg .b32 %r<4>;\n*/\n.reg .b64 %s; /* .reg .b32 %r<4>;\n*/ .reg .b32 %r<4>;\n.reg .b16 %r<4>;\n}\n";
        assert_eq!(types_at(text, "%r1"), [None, None, None, None, None, None, ty("b16"), ty("b16")]);
        assert_eq!(types_at(text, "%s"), vec![None::<String>; 8]);
    }

    /// The declaration's split as `char` searches make it (what [`split_declaration`] replaced).
    fn split_declaration_by_chars(decl: &str) -> Option<(&str, &str)> {
        let (_, rest) = decl.trim_start().split_once(char::is_whitespace)?;
        let rest = rest.trim_start();
        let (ty, names) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        (!ty.is_empty()).then_some((ty, names))
    }

    proptest! {
        /// The common types are found as a search of their list finds them.
        #[test]
        fn a_common_type_is_one_of_the_list(ty in "(pred|[busf](8|16|32|64|128)|bf16|f16x2|bf16x2|[a-z0-9]{0,6})") {
            prop_assert_eq!(RegType::common(&ty), RegType::COMMON.iter().find(|c| **c == ty).copied());
        }

        /// The byte-level split of a declaration is the `char` searches', ASCII or not.
        #[test]
        fn a_declaration_splits_as_the_char_searches_split_it(decl in "[ \t\x0b\x0c\r\n\u{85}\u{a0}\u{3000}é.a-z%<>0-9,]{0,24}") {
            prop_assert_eq!(split_declaration(&decl), split_declaration_by_chars(&decl));
        }

        /// Asked in any order, the cursor gives at each line what a fresh read of the body to
        /// that line gives.
        #[test]
        fn the_types_at_a_line_do_not_depend_on_the_lines_asked_before(lines in proptest::collection::vec(prop_oneof![
            Just(".reg .b32 %r<4>;"), Just(".reg .b64 %r<4>;"), Just(".reg .pred %p, %r1;"), Just("{"), Just("}"), Just("{ .reg .f32 %r<9>; }"),
            Just("/*"), Just("*/"), Just("/* .reg .u16 %r<2>; */"), Just("mov.u32 %r1, 0;"),
        ], 1..24), asks in proptest::collection::vec(0usize..24, 0..12)) {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let lines = Line::read_all(text.split_inclusive('\n'));
            let mut declared = DeclaredRegs::of_body(0);
            for i in asks.into_iter().map(|i| i % lines.len()) {
                let asked = declared.at(&lines, i).type_of("%r1").map(String::from);
                let fresh = DeclaredRegs::of_body(0).at(&lines, i).type_of("%r1").map(String::from);
                prop_assert_eq!(asked, fresh, "at line {}", i);
            }
        }
    }
}
