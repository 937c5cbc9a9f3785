//! Site table: what each check id means (kernel, PTX line, source location, kind, width).

use crate::abi::AccessKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A source location from `.loc` (resolved through `.file`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLoc {
    pub file_index: u32,
    pub file: String,
    pub line: u32,
    pub col: u32,
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// One checked access.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub id: u32,
    /// Mangled name of the function holding the access.
    pub kernel: String,
    pub kernel_demangled: String,
    /// 1-based line in the original PTX.
    pub ptx_line: u32,
    pub loc: Option<SourceLoc>,
    #[serde(with = "kind_serde")]
    pub kind: AccessKind,
    /// Access width in bytes (0: register-sized bulk range).
    pub width: u32,
    /// For a shared or local check: what it bounds (absent: a global/generic shadow check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<SpaceSite>,
}

/// What a shared- or local-memory check bounds: the variable named by the access's base (or the
/// function's frame), as the PTX declares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceSite {
    pub space: crate::abi::MemorySpace,
    /// The PTX name: a `.shared` variable, or the function's `__local_depotN`.
    pub variable: String,
    pub variable_demangled: String,
    /// Bytes of the variable or frame; `None` for dynamic shared memory (the launch's size).
    pub size: Option<u64>,
}

mod kind_serde {
    use crate::abi::AccessKind;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(k: &AccessKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match k {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Atomic => "atomic",
            AccessKind::Free => "free",
        })
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<AccessKind, D::Error> {
        match String::deserialize(d)?.as_str() {
            "read" => Ok(AccessKind::Read),
            "write" => Ok(AccessKind::Write),
            "atomic" => Ok(AccessKind::Atomic),
            "free" => Ok(AccessKind::Free),
            o => Err(serde::de::Error::custom(format!("bad access kind {o}"))),
        }
    }
}

/// All sites of one module, indexed by site id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteTable {
    pub sites: Vec<Site>,
    pub files: BTreeMap<u32, String>,
}

impl SiteTable {
    pub fn get(&self, id: u32) -> Option<&Site> {
        self.sites.get(id as usize)
    }
    pub fn len(&self) -> usize {
        self.sites.len()
    }
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("site table serializes")
    }
    pub fn from_json(s: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(s)
    }

    pub(super) fn push(&mut self, mut site: Site) -> u32 {
        let id = self.sites.len() as u32;
        site.id = id;
        self.sites.push(site);
        id
    }

    /// A `.file` directive's entry ([`super::Line::file_entry`]).
    pub(super) fn add_file(&mut self, idx: u32, name: &str) {
        self.files.insert(idx, name.to_string());
    }

    /// Fills every site's file name (nvcc may emit `.file` after the functions).
    pub(super) fn resolve_files(&mut self) {
        for s in &mut self.sites {
            if let Some(loc) = &mut s.loc {
                if let Some(f) = self.files.get(&loc.file_index) {
                    loc.file = f.clone();
                } else {
                    loc.file = format!("<file {}>", loc.file_index);
                }
            }
        }
    }
}

/// Demangles an Itanium C++ name; returns the input when it is not mangled.
pub fn demangle(name: &str) -> String {
    // (nvcc's kernel names are nearly all of a few plain shapes, read here in a few hundred
    // instructions; `cpp_demangle` spent some 15,000 on each, 5% of rewriting a module of 2,000
    // kernels.)
    if let Some(d) = demangle_plain(name) {
        return d;
    }
    demangle_full(name)
}

/// [`demangle`] by `cpp_demangle` alone.
fn demangle_full(name: &str) -> String {
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| {
            // (`Symbol::demangle` into a string sized first: grown from empty, it was reallocated
            // several times a name.)
            let mut out = String::with_capacity(2 * name.len() + 16);
            s.structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default()).ok().map(|()| out)
        })
        .unwrap_or_else(|| name.to_string())
}

/// [`demangle`] of a function name of the plain shapes nvcc writes for most kernels, as
/// `cpp_demangle` writes it; `None` for any other name (`demangle` then asks `cpp_demangle`). The
/// shapes: `_Z`, an unscoped name, optionally template arguments that are `int` literals or
/// types (then the return type), and the parameter types, each a builtin type, a class named
/// without scope, or a substitution (`S_`, `S0_`, ...), under pointers (`P`)
/// and `const` (`K`). Anything else (scopes `N...E`, template parameters `T_`, `std::`
/// abbreviations, other literals, references, function or array types, `volatile`, clone
/// suffixes) is left to `cpp_demangle`. A proptest holds it to `cpp_demangle` on names of these shapes and others.
fn demangle_plain(name: &str) -> Option<String> {
    let mut p = PlainParser { s: name.strip_prefix("_Z")?.as_bytes(), at: 0, subs: Vec::new() };
    let ident = p.source_name()?;
    let mut out = String::with_capacity(2 * name.len() + 16);
    if p.eat(b'I') {
        // An unscoped template name is a substitution candidate before its arguments.
        p.subs.push(ident.to_string());
        let mut args = String::new();
        loop {
            if p.eat(b'E') {
                break;
            }
            if !args.is_empty() {
                args.push_str(", ");
            }
            if p.eat(b'L') {
                // An `int` literal, not negative: `Li100E`.
                if !p.eat(b'i') {
                    return None;
                }
                let digits = p.digits()?;
                if !p.eat(b'E') {
                    return None;
                }
                args.push_str(digits);
            } else {
                args.push_str(&p.ty()?);
            }
        }
        if args.is_empty() {
            return None;
        }
        out.push_str(&p.ty()?);
        out.push(' ');
        out.push_str(ident);
        out.push('<');
        out.push_str(&args);
        out.push('>');
    } else {
        out.push_str(ident);
    }
    out.push('(');
    if p.s[p.at..] == *b"v" {
        out.push(')');
        return Some(out);
    }
    let mut first = true;
    while p.at < p.s.len() {
        let t = p.ty()?;
        if t == "void" {
            return None;
        }
        if !first {
            out.push_str(", ");
        }
        out.push_str(&t);
        first = false;
    }
    if first {
        return None;
    }
    out.push(')');
    Some(out)
}

/// The reader of [`demangle_plain`]: the text after `_Z`, where it is, and the substitution
/// candidates so far, demangled.
struct PlainParser<'a> {
    s: &'a [u8],
    at: usize,
    subs: Vec<String>,
}

impl<'a> PlainParser<'a> {
    fn eat(&mut self, b: u8) -> bool {
        let here = self.s.get(self.at) == Some(&b);
        self.at += usize::from(here);
        here
    }

    /// Decimal digits, at least one, not starting with `0` unless it is the only one.
    fn digits(&mut self) -> Option<&'a str> {
        let start = self.at;
        while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let d = &self.s[start..self.at];
        if d.is_empty() || (d.len() > 1 && d[0] == b'0') {
            return None;
        }
        std::str::from_utf8(d).ok()
    }

    /// `<length><identifier>`: a plain identifier of ASCII letters, digits and `_`, not one of
    /// the names the ABI gives a meaning (`_GLOBAL_` anonymous namespaces).
    fn source_name(&mut self) -> Option<&'a str> {
        let len: usize = self.digits()?.parse().ok()?;
        let ident = self.s.get(self.at..self.at.checked_add(len)?)?;
        if ident.first().is_none_or(|b| b.is_ascii_digit()) || !ident.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') || ident.starts_with(b"_GLOBAL_") {
            return None;
        }
        self.at += len;
        std::str::from_utf8(ident).ok()
    }

    /// One type, demangled; substitution candidates are added as the ABI adds them (a compound
    /// type after the types inside it; builtin types and substitutions are none).
    fn ty(&mut self) -> Option<String> {
        let c = *self.s.get(self.at)?;
        self.at += 1;
        let t = match c {
            b'P' | b'K' => {
                let inner = self.ty()?;
                let t = if c == b'P' { inner + "*" } else { inner + " const" };
                self.subs.push(t.clone());
                return Some(t);
            }
            b'S' => {
                // `S_` is the first candidate, `S<base 36>_` the one after that number.
                let start = self.at;
                while self.s.get(self.at).is_some_and(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
                    self.at += 1;
                }
                let seq = &self.s[start..self.at];
                if !self.eat(b'_') {
                    return None;
                }
                let k = if seq.is_empty() { 0 } else { usize::from_str_radix(std::str::from_utf8(seq).ok()?, 36).ok()?.checked_add(1)? };
                return self.subs.get(k).cloned();
            }
            b'0'..=b'9' => {
                self.at -= 1;
                let name = self.source_name()?.to_string();
                self.subs.push(name.clone());
                return Some(name);
            }
            b'v' => "void",
            b'b' => "bool",
            b'c' => "char",
            b'a' => "signed char",
            b'h' => "unsigned char",
            b's' => "short",
            b't' => "unsigned short",
            b'i' => "int",
            b'j' => "unsigned int",
            b'l' => "long",
            b'm' => "unsigned long",
            b'x' => "long long",
            b'y' => "unsigned long long",
            b'f' => "float",
            b'd' => "double",
            _ => return None,
        };
        Some(t.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nvcc_kernel_names_take_the_plain_path_and_read_as_cpp_demangle_reads_them() {
        for name in [
            "_Z4kernILi100EEvPfPKfi",
            "_Z2axPKfS0_Pfi",
            "_Z10k_vec_readP6float4PKS_i",
            "_Z11k_wmma_gemmPK6__halfS1_Pfiii",
            "_Z4spmvPfPKiS1_PKfS3_i",
            "_Z5emptyv",
            "_Z9only_freePPi",
            "_Z5bytesPhPKhPKsPxi",
            "_Z4wideP10ulonglong2PKS_",
            "_Z16k_draw_keypointsPfmiiPK8Keypointi",
        ] {
            let plain = demangle_plain(name);
            assert!(plain.is_some(), "{name} takes the plain path");
            assert_eq!(plain.unwrap(), demangle_full(name), "{name}");
        }
        // Left to cpp_demangle: template parameters, scopes, names that are not mangled.
        for name in ["_Z9stencil1dIdLi3EEvPT_PKS0_i", "_ZN2ns1fEv", "matmul", "d", "_Z1fv.clone"] {
            assert_eq!(demangle_plain(name), None, "{name}");
        }
    }

    /// Names of the plain shapes (most of them read by the plain path, substitutions included)
    /// and near them.
    fn mangled() -> impl Strategy<Value = String> {
        prop_oneof![plain_shaped(), near_plain()]
    }

    /// Names of the plain shapes: `_Z`, a name, template arguments or not, parameters of builtin
    /// types, classes and substitutions under `P` and `K`.
    fn plain_shaped() -> impl Strategy<Value = String> {
        let ty = prop_oneof!["[bcahstijlmxyfd]", Just("6float4".to_string()), Just("6__half".to_string()), "S[0-3]?_"];
        let param = ("[PK]{0,3}", ty).prop_map(|(q, t)| q + &t);
        let targ = prop_oneof!["Li[1-9][0-9]{0,3}E", "L?i0E", "[ifd]", Just("P6float4".to_string())];
        ("[a-z_][a-z0-9_]{0,7}", proptest::option::of((proptest::collection::vec(targ, 1..3), "[PK]{0,2}[vif]")), proptest::collection::vec(param, 0..6)).prop_map(|(id, template, params)| {
            let mut s = format!("_Z{}{id}", id.len());
            if let Some((args, ret)) = template {
                s.push('I');
                s.extend(args);
                s.push('E');
                s.push_str(&ret);
            }
            if params.is_empty() {
                s.push('v');
            }
            s.extend(params);
            s
        })
    }

    /// Names near the plain shapes: builtin letters, qualifiers, classes, substitutions (in and
    /// out of range), template arguments, and stray bytes.
    fn near_plain() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[vbcahstijlmxyfdenowz]",
            "[PRKV]{1,3}[ifcv]",
            Just("P6float4".to_string()),
            Just("PK6__half".to_string()),
            Just("R8Keypoint".to_string()),
            "S[0-4]?_",
            "S[A-Z]_",
            "S[tas]",
            "T_",
            "L[ijbl]n?[0-9]{1,3}E",
            "[A-Z0-9_]",
        ];
        let ident = prop_oneof!["[a-z_][a-z0-9_]{0,7}", Just("_GLOBAL__N_1".to_string()), "[0-9][a-z]{0,3}"];
        let targs = proptest::collection::vec(prop_oneof!["Li[0-9]{1,4}E".prop_map(String::from), Just("Lin5E".to_string()), Just("f".to_string()), Just("P6float4".to_string())], 0..3);
        (ident, proptest::option::of(targs), "[vfPK]{0,2}[ivf]", proptest::collection::vec(piece, 0..6), any::<bool>()).prop_map(|(id, targs, ret, params, bad_len)| {
            let len = if bad_len { id.len() + 1 } else { id.len() };
            let mut s = format!("_Z{len}{id}");
            if let Some(t) = targs {
                s.push('I');
                s.extend(t);
                s.push('E');
                s.push_str(&ret);
            }
            s.extend(params);
            s
        })
    }

    proptest! {
        /// Whatever the plain path reads, it reads as `cpp_demangle` does.
        #[test]
        fn the_plain_path_reads_names_as_cpp_demangle_does(name in mangled()) {
            if let Some(plain) = demangle_plain(&name) {
                prop_assert_eq!(plain, demangle_full(&name), "{}", name);
            }
        }
    }
}
