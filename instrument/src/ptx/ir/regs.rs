//! The types of a function's registers, from its `.reg` declarations ([`RegTypes::declare_line`],
//! the one rule every pass reads them by), and the width of a type ([`type_bits`]).

use super::line::Line;
use rustc_hash::FxHashMap as HashMap;

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
    const COMMON: [&'static str; 22] =
        ["pred", "b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "u128", "s128"];

    fn new(ty: &str) -> Self {
        match Self::COMMON.iter().find(|c| **c == ty) {
            Some(c) => RegType::Common(c),
            None => RegType::Other(ty.into()),
        }
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

    /// Declares what the line declares, when it is a `.reg` line: every pass reads a function's
    /// register types this way, line by line in order, so a register's type at a line is the last
    /// declaration of it above. (A `.reg` inside a scope opened on its line, one-line inline asm,
    /// is not read: its registers live only in that scope.)
    pub(in crate::ptx) fn declare_line(&mut self, line: &Line<'_>) {
        if line.code.starts_with(".reg") {
            for decl in line.reg_declarations() {
                self.declare(decl);
            }
        }
    }

    fn declare(&mut self, decl: &str) {
        // `.reg .b32 %r<5>` or `.reg .pred %p, %q`
        let Some((_, rest)) = decl.trim_start().split_once(char::is_whitespace) else { return }; // .reg
        let rest = rest.trim_start();
        let (ty, names) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if ty.is_empty() {
            return;
        }
        let ty = RegType::new(ty.trim_start_matches('.'));
        for name in names.split(',') {
            // (Whitespace inside a name, `%r  <5>`, becomes one space, as it always has.)
            let name: std::borrow::Cow<'_, str> = match name.trim() {
                n if n.bytes().any(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r')) || !n.is_ascii() && n.contains(char::is_whitespace) => {
                    n.split_whitespace().collect::<Vec<_>>().join(" ").into()
                }
                n => n.into(),
            };
            let name = name.as_ref();
            if let Some(p) = memchr::memchr(b'<', name.as_bytes()) {
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

pub(in crate::ptx) fn type_bits(ty: &str) -> Option<u32> {
    // The digits after the first character (ASCII: found by bytes, sliced, not collected).
    let rest = ty.chars().next().map_or("", |c| &ty[c.len_utf8()..]);
    let digits = &rest[..rest.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len())];
    match ty {
        "pred" => None,
        _ => digits.parse().ok().filter(|b| [8, 16, 32, 64, 128].contains(b)),
    }
}
