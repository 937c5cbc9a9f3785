//! A module's `.shared` and `.local` variable declarations, read once: spaces.rs bounds accesses
//! by them, frames.rs finds each function's frame (`__local_depotN`) among them.

use super::access::{parse_int, type_size};
use crate::abi::MemorySpace;

/// A `.shared` or `.local` variable declared in the module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ptx) struct SpaceVar {
    pub(in crate::ptx) space: MemorySpace,
    /// `None`: dynamic shared memory (`extern .shared ... name[]`), sized by the launch.
    pub(in crate::ptx) size: Option<u64>,
}

/// A declaration `.shared .align 4 .b8 name[256];`, `.extern .shared .align 16 .b8 name[];`,
/// `.local .align 8 .b8 __local_depot0[64];`, `.shared .u32 x;` → (name, variable).
pub(in crate::ptx) fn space_declaration(t: &str) -> Option<(String, SpaceVar)> {
    let t = t.trim().trim_end_matches(';').trim();
    let mut words = t.split_whitespace().peekable();
    let mut extern_ = false;
    let mut space = None;
    let mut elem = None;
    let mut rest = None;
    while let Some(w) = words.next() {
        match w {
            ".extern" => extern_ = true,
            ".weak" | ".visible" => {}
            ".shared" | ".shared::cta" => space = Some(MemorySpace::Shared),
            ".local" => space = Some(MemorySpace::Local),
            ".align" => {
                words.next();
            }
            _ if w.starts_with('.') => elem = Some(type_size(&w[1..])?),
            _ => {
                // The declarator: everything left (`name[4][8]`, possibly with spaces, or `= {...}`).
                // The name is one word: what follows it on the line is dimensions or nothing
                // (`__local_depot .` is no declaration of `__local_depot.`).
                let name_len = w.find('[').unwrap_or(w.len());
                let mut s = w.to_string();
                for more in words.by_ref() {
                    s.push_str(more);
                }
                rest = Some((s, name_len));
                break;
            }
        }
    }
    let (space, elem, (decl, name_len)) = (space?, elem?, rest?);
    if decl.contains('=') {
        return None; // shared/local variables have no initializers; not understood otherwise
    }
    let name_end = decl.find('[').unwrap_or(decl.len());
    if name_end != name_len {
        return None;
    }
    let name = &decl[..name_end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.') {
        return None;
    }
    let mut size = Some(u64::from(elem));
    let mut dims = &decl[name_end..];
    while let Some(inner) = dims.strip_prefix('[') {
        let close = inner.find(']')?;
        let n = &inner[..close];
        if n.is_empty() {
            size = None;
        } else {
            let n = u64::try_from(parse_int(n)?).ok()?;
            size = size.and_then(|s| s.checked_mul(n));
        }
        dims = &inner[close + 1..];
    }
    if !dims.is_empty() {
        return None;
    }
    // `[]` is dynamic shared memory only when extern; a `.local`/non-extern `[]` is not understood.
    if size.is_none() && !(extern_ && space == MemorySpace::Shared) {
        return None;
    }
    Some((name.to_string(), SpaceVar { space, size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one reader of shared/local declarations: what spaces.rs bounds accesses by and where
    /// frames.rs finds a function's frame.
    #[test]
    fn declarations_are_read_with_their_space_and_size() {
        let read = |t: &str| space_declaration(t).map(|(n, v)| (n, v.space, v.size));
        assert_eq!(read(".local .align 8 .b8 \t__local_depot99[16];"), Some(("__local_depot99".into(), MemorySpace::Local, Some(16))));
        assert_eq!(read(".shared .align 4 .f32 tile[4][8]"), Some(("tile".into(), MemorySpace::Shared, Some(128))));
        assert_eq!(read(".extern .shared .align 16 .b8 dyn[]"), Some(("dyn".into(), MemorySpace::Shared, None)));
        assert_eq!(read(".shared .u32 x;"), Some(("x".into(), MemorySpace::Shared, Some(4))));
        // A name split by a space, an initializer, a local array of no size, no space at all.
        for t in [".local .align 8 .b8 __local_depot .[16]", ".shared .u32 x = 1", ".local .b8 __local_depot0[]", ".global .b8 g[4]"] {
            assert_eq!(read(t), None, "{t}");
        }
    }
}
