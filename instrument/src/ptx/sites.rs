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
