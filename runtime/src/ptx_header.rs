//! Which PTX modules gasan checks, by their `.version` and `.target` lines.
//!
//! gasan's instrumenter reads PTX up to the ISA of the pinned toolkit (PTX ISA 9.0, CUDA 13.0) and
//! checks modules for every target that toolkit's `ptxas` knows (including the arch-specific `a`
//! and family `f` variants, e.g. `sm_100a`, `sm_120f`): the checks it adds are plain PTX that every
//! one of those targets runs. A module of a newer PTX ISA, or for a target that toolkit does not
//! know, may hold instructions or state spaces the instrumenter has never seen, so it is not
//! checked: it is loaded as it is, with a one-line warning that names the line (see
//! `modules::note_skip`), never silently.

/// The newest PTX ISA the instrumenter reads (CUDA 13.0's).
pub const NEWEST_VERSION: (u16, u16) = (9, 0);

/// The compute capabilities of `sm_<cc>` targets known to the pinned toolkit, and the older ones
/// that modules built by older toolkits still name (the driver JITs those).
pub const KNOWN_TARGETS: &[u32] = &[20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121];

/// Why a module with these header lines (its `.version` and `.target` lines, as the instrumenter
/// keeps them) is not checked, or `Ok` when it is.
pub fn supported(header: &str) -> Result<(), String> {
    let h = gasan_instrument::ptx::PtxHeader::parse(header);
    let line = |want: &str| if want == ".version" { h.version } else { h.target };
    if let Some(v) = line(".version") {
        let parsed = v.split_once('.').and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
        match parsed {
            None => return Err(format!("PTX '.version {v}' is not a version number")),
            Some(got) if got > NEWEST_VERSION => {
                return Err(format!("PTX '.version {v}' is newer than the PTX ISA {}.{} gasan reads", NEWEST_VERSION.0, NEWEST_VERSION.1));
            }
            Some(_) => {}
        }
    }
    if let Some(t) = line(".target") {
        // `.target sm_90, texmode_independent, debug`: the architecture is the first item.
        let arch = t.split(',').next().unwrap_or("").trim();
        if !known_target(arch) {
            return Err(format!("PTX '.target {arch}' is not a target gasan knows (sm_20 .. sm_121, with 'a' or 'f' where CUDA 13.0 has them)"));
        }
    }
    Ok(())
}

/// `sm_<cc>` with `cc` in [`KNOWN_TARGETS`], optionally `sm_<cc>a` (9.0 and later) or `sm_<cc>f`
/// (10.0 and later).
fn known_target(arch: &str) -> bool {
    let Some(rest) = arch.strip_prefix("sm_") else { return false };
    let (digits, suffix) = match rest.strip_suffix(['a', 'f']) {
        Some(d) => (d, rest.chars().last()),
        None => (rest, None),
    };
    let Ok(cc) = digits.parse::<u32>() else { return false };
    if digits.starts_with('0') || !KNOWN_TARGETS.contains(&cc) {
        return false;
    }
    match suffix {
        None => true,
        Some('a') => cc >= 90,
        Some(_) => cc >= 100,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolkit_targets_are_checked_and_unknown_ones_are_refused_by_name() {
        for ok in [
            ".version 8.0\n.target sm_90\n",
            ".version 9.0\n.target sm_100a\n",
            ".version 8.8\n.target sm_120\n",
            ".version 8.7\n.target sm_120f, debug\n",
            ".version 6.0\n.target sm_52\n",
            ".version 8.0\n.target sm_90a\n",
        ] {
            assert_eq!(supported(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (".version 9.9\n.target sm_90\n", "'.version 9.9' is newer than the PTX ISA 9.0"),
            (".version 10.0\n.target sm_90\n", "'.version 10.0'"),
            (".version 8.0\n.target sm_130\n", "'.target sm_130'"),
            (".version 8.0\n.target sm_80a\n", "'.target sm_80a'"),
            (".version 8.0\n.target sm_90f\n", "'.target sm_90f'"),
            (".version 8.0\n.target sm_090\n", "'.target sm_090'"),
            (".version 8.0\n.target compute_90\n", "'.target compute_90'"),
            (".version x.y\n.target sm_90\n", "'.version x.y' is not a version number"),
        ] {
            let e = supported(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
