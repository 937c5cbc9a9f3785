//! What the ptxas front end needs to keep a checked kernel at its native twin's blocks per SM
//! (gasan-jit's `occupancy`): each kernel's thread bound, read from its header, and the checked
//! text with `.minnctapersm N` added to chosen kernels, which makes ptxas fit the kernel's
//! registers to N blocks of that bound on one SM (it ignores `-maxrregcount` where a kernel
//! declares `.reqntid`, as Triton's and XLA's kernels do).

use super::bodies::{Bodies, Scanner};
use super::func::FnHeader;
use super::line::Line;

/// A kernel's launch bounds as its header declares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelBounds {
    pub name: String,
    /// The most threads a block may have (`.reqntid` or `.maxntid`); `None`: not bounded, so the
    /// registers a block needs are not known when it is compiled.
    pub threads: Option<u32>,
    /// The header sets registers or blocks per SM itself (`.maxnreg`, `.minnctapersm`).
    pub occupancy_set: bool,
}

/// The lines of `ptx` and its bodies.
fn read(ptx: &str) -> (Vec<Line<'_>>, Bodies) {
    let mut scanner = Scanner::default();
    let lines = Line::read_text_scanning(ptx, &mut scanner);
    (lines, scanner.finish())
}

/// Every kernel (`.entry` with a body) of `ptx`, in text order.
pub fn kernel_bounds(ptx: &str) -> Vec<KernelBounds> {
    let (lines, bodies) = read(ptx);
    bodies
        .iter()
        .filter(|b| b.entry)
        .filter_map(|b| {
            let text = FnHeader::text_of(&lines, b);
            let h = FnHeader::parse(&text)?;
            Some(KernelBounds { name: b.name.clone(), threads: h.threads, occupancy_set: h.occupancy_set })
        })
        .collect()
}

/// `ptx` with `.minnctapersm N` before the body of each kernel `wanted` names with `N`. A kernel
/// that sets its occupancy itself, or has no thread bound (ptxas needs one to apply the
/// directive), is left as it is; so is every other byte.
pub fn with_min_blocks(ptx: &str, wanted: &[(String, u32)]) -> String {
    let (lines, bodies) = read(ptx);
    let mut at = std::collections::HashMap::new();
    for b in bodies.iter().filter(|b| b.entry) {
        let Some((_, n)) = wanted.iter().find(|(name, _)| *name == b.name) else { continue };
        let text = FnHeader::text_of(&lines, b);
        if FnHeader::parse(&text).is_some_and(|h| h.threads.is_some() && !h.occupancy_set) {
            at.insert(b.open, *n);
        }
    }
    let mut out = String::with_capacity(ptx.len() + 24 * at.len());
    for (i, line) in lines.iter().enumerate() {
        let raw = line.raw;
        // The body's `{` is the first of its line: what comes before it on the line is header.
        match (at.get(&i), raw.find('{')) {
            (Some(n), Some(p)) if raw[..p].trim().is_empty() => {
                out.push_str(&format!(".minnctapersm {n}\n"));
                out.push_str(raw);
            }
            (Some(n), Some(p)) => {
                out.push_str(&raw[..p]);
                out.push_str(&format!(" .minnctapersm {n} "));
                out.push_str(&raw[p..]);
            }
            _ => out.push_str(raw),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TWO: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry a(\n.param .u64 a_p\n)\n.reqntid 128, 1, 1\n{\nret;\n}\n.visible .entry b(.param .u64 b_p) .maxntid 256 {\nret;\n}\n.entry c() .reqntid 64 .maxnreg 32\n{\nret;\n}\n.entry d()\n{\nret;\n}\n.func f()\n{\nret;\n}\n";

    #[test]
    fn bounds_of_each_kernel() {
        let k = kernel_bounds(TWO);
        let got: Vec<_> = k.iter().map(|k| (k.name.as_str(), k.threads, k.occupancy_set)).collect();
        assert_eq!(got, [("a", Some(128), false), ("b", Some(256), false), ("c", Some(64), true), ("d", None, false)]);
    }

    #[test]
    fn the_directive_goes_to_the_named_kernels_it_can_apply_to() {
        let wanted: Vec<(String, u32)> = ["a", "b", "c", "d", "f"].iter().map(|n| (n.to_string(), 4)).collect();
        let out = with_min_blocks(TWO, &wanted);
        assert!(out.contains(".reqntid 128, 1, 1\n.minnctapersm 4\n{\n"), "{out}");
        assert!(out.contains(".maxntid 256  .minnctapersm 4 {\n"), "{out}");
        assert_eq!(out.matches(".minnctapersm").count(), 2, "c sets its own, d has no bound, f is no kernel");
        let got: Vec<_> = kernel_bounds(&out).into_iter().map(|k| (k.name, k.occupancy_set)).collect();
        assert_eq!(got, [("a".into(), true), ("b".into(), true), ("c".into(), true), ("d".into(), false)]);
        assert_eq!(with_min_blocks(TWO, &[]), TWO);
    }

    proptest! {
        /// Only the directives are added: taking them out gives the input back, and the kernels'
        /// names and thread bounds are as they were.
        #[test]
        fn nothing_but_the_directive_changes(mask in proptest::collection::vec(any::<bool>(), 4), n in 1u32..32, nl in "(\n|\r\n)") {
            let text = TWO.replace('\n', &nl);
            let wanted: Vec<(String, u32)> = ["a", "b", "c", "d"].iter().zip(&mask).filter(|(_, m)| **m).map(|(k, _)| (k.to_string(), n)).collect();
            let out = with_min_blocks(&text, &wanted);
            let back = out.replace(&format!(".minnctapersm {n}\n"), "").replace(&format!(" .minnctapersm {n} "), "");
            prop_assert_eq!(&back, &text);
            let before: Vec<_> = kernel_bounds(&text).into_iter().map(|k| (k.name, k.threads)).collect();
            let after: Vec<_> = kernel_bounds(&out).into_iter().map(|k| (k.name, k.threads)).collect();
            prop_assert_eq!(before, after);
        }
    }
}
