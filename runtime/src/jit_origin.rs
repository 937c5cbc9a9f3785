//! Where the cubins a program loads came from, by framework, for the exit summary at
//! `verbosity=1` (issue 39 item 8): which were checked and which were not, and why.
//!
//! The runtime's NVRTC and nvJitLink wrappers ([`crate::hooks`]) note the marker key of each
//! checked cubin they hand out, and each compile or link they leave unchecked with its reason;
//! the loader ([`crate::modules`]) notes every cubin it is handed without PTX: marked by the
//! NVRTC or nvJitLink wrappers (by key), marked by gasan-ptxas (Triton, torch.compile, XLA: the
//! marker does not say which), or not marked (native SASS). Modules the runtime checks from PTX
//! are counted by the summary's `modules:` line as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

/// Who made a cubin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// The runtime's NVRTC wrapper (`nvrtcGetCUBIN`).
    Nvrtc,
    /// The runtime's nvJitLink wrapper (Numba-CUDA 0.16 and later, other nvJitLink users).
    NvJitLink,
    /// gasan-ptxas, run as ptxas by Triton (and torch.compile) or XLA.
    PtxasFrontEnd,
    /// Nobody gasan knows: a cubin without a marker.
    Unmarked,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Nvrtc => "NVRTC",
            Origin::NvJitLink => "nvJitLink (Numba-CUDA)",
            Origin::PtxasFrontEnd => "gasan-ptxas (Triton, torch.compile, XLA)",
            Origin::Unmarked => "cubins without a gasan marker",
        }
    }
}

#[derive(Default)]
struct Registry {
    /// Marker keys of the checked cubins the wrappers handed out.
    made: HashMap<[u8; 32], Origin>,
    /// (origin, checked, why) → how many.
    counts: BTreeMap<(Origin, bool, String), u64>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// A wrapper handed out a checked cubin whose marker key is `key`.
pub fn made(origin: Origin, key: [u8; 32]) {
    registry().made.insert(key, origin);
}

/// A wrapper left a compile or link unchecked, for `why`.
pub fn left_unchecked(origin: Origin, why: &str) {
    *registry().counts.entry((origin, false, why.to_string())).or_default() += 1;
}

/// The loader was handed cubin `elf` without PTX for this GPU; `checked`: whether it loads with
/// its checks on, else `why` not.
pub fn loaded(elf: Option<&[u8]>, checked: bool, why: &str) {
    let marker = elf.and_then(|e| gasan_jit::find_in_cubin(e).ok().flatten());
    let mut r = registry();
    let origin = match marker {
        Some(m) => r.made.get(&m.key).copied().unwrap_or(Origin::PtxasFrontEnd),
        None => Origin::Unmarked,
    };
    *r.counts.entry((origin, checked, if checked { String::new() } else { why.to_string() })).or_default() += 1;
}

/// The summary's lines (none when nothing was noted).
pub fn summary() -> Vec<String> {
    let r = registry();
    let mut by: BTreeMap<Origin, (u64, Vec<String>)> = BTreeMap::new();
    for ((origin, checked, why), n) in &r.counts {
        let e = by.entry(*origin).or_default();
        if *checked {
            e.0 += n;
        } else {
            e.1.push(format!("{n} {why}"));
        }
    }
    by.into_iter()
        .map(|(o, (checked, not))| {
            let mut line = format!("JIT-compiled modules from {}: {checked} checked", o.name());
            if !not.is_empty() {
                line.push_str(&format!("; not checked: {}", not.join("; ")));
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_per_origin_what_was_checked_and_why_not() {
        left_unchecked(Origin::Nvrtc, "compiled for compute_90 (PTX, checked when loaded)");
        left_unchecked(Origin::Nvrtc, "compiled for compute_90 (PTX, checked when loaded)");
        loaded(None, false, "no PTX for this GPU and no gasan marker (SASS only)");
        let s = summary();
        assert!(s.contains(&"JIT-compiled modules from NVRTC: 0 checked; not checked: 2 compiled for compute_90 (PTX, checked when loaded)".to_string()), "{s:?}");
        assert!(s.iter().any(|l| l.starts_with("JIT-compiled modules from cubins without a gasan marker: 0 checked; not checked: 1 no PTX")), "{s:?}");
    }
}
