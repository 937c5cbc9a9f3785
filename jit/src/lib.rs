//! gasan-jit: checks for kernels that frameworks compile at run time (Triton, torch.compile's
//! Inductor, JAX/XLA), which reach the driver as cubins the runtime cannot instrument.
//!
//! The frameworks run ptxas themselves; `gasan-ptxas` (package `gasan-ptxas`, jit/ptxas) stands
//! in for it, checks the PTX it is handed, and marks the checked module so the runtime recognises
//! its cubin at load. This library holds what the front end and the runtime share, with no
//! dependency on the runtime:
//! * [`marker`]: the variables a checked cubin carries: its marker (revision, options, key) and
//!   its site table and parameter tags;
//! * [`args`]: what a ptxas command line asks for;
//! * [`real`]: which real ptxas to run;
//! * [`nvrtc`]: what an NVRTC compile's options ask for (the runtime's NVRTC interposer);
//! * [`check_module`] and [`version_answer`]: the front end's two jobs;
//! * [`recognise`]: what the runtime makes of a cubin a framework loads.

#![forbid(unsafe_code)]

pub mod args;
pub mod marker;
pub mod nvrtc;
pub mod real;

use gasan_instrument::abi::{CONTROL_BLOCK_SYMBOL, SLOW_PATH_SYMBOL};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, Instrumented, PtxError, REVISION};
use gasan_instrument::shadow::Scale;
pub use marker::{find_in_cubin, linked_tables_in_cubin, tables_in_cubin, LinkedInput, Marker, Tables, MARKER_SYMBOL, TABLES_SYMBOL};

/// A checked module: the text to assemble (the rewriter's output with the marker and the tables
/// appended), the rewriter's result, and the marker.
pub struct CheckedModule {
    pub text: String,
    pub instrumented: Instrumented,
    pub marker: Marker,
}

/// Checks `ptx` with `opts` (under the runtime's code options `code_key`) and appends the marker
/// and the module's site table and parameter tags ([`marker::Tables`]).
pub fn check_module(ptx: &str, opts: &InstrumentOptions, code_key: &str) -> Result<CheckedModule, PtxError> {
    let marker = Marker::new(marker::module_key(ptx, opts, code_key), opts);
    let instrumented = instrument_ptx(ptx, opts)?;
    let mut text = String::with_capacity(instrumented.ptx.len() + 512);
    text.push_str(&instrumented.ptx);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&marker.ptx_declaration());
    text.push_str(&Tables { sites: instrumented.sites.clone(), param_tags: instrumented.param_tags.clone() }.ptx_declaration());
    Ok(CheckedModule { text, instrumented, marker })
}

/// Renames the module-level gasan symbols of checked PTX (its control block and slow path) for
/// input `n` of a link of several checked inputs ([`marker::link_suffix`]), so each input keeps
/// its own (both are `.weak`: unrenamed, the linker would merge them); returns the text and the
/// control block's name.
pub fn rename_for_link(checked: &str, n: usize) -> (String, String) {
    let suffix = marker::link_suffix(n);
    let ctl = format!("{CONTROL_BLOCK_SYMBOL}{suffix}");
    let renamed = checked.replace(CONTROL_BLOCK_SYMBOL, &ctl).replace(SLOW_PATH_SYMBOL, &format!("{SLOW_PATH_SYMBOL}{suffix}"));
    (renamed, ctl)
}

/// Checks input `n` of a link whose PTX inputs are all checked into one cubin: input 0 as
/// [`check_module`] does (the marker and [`TABLES_SYMBOL`]); a further input with its control
/// block and slow path renamed ([`rename_for_link`]) and its tables as
/// [`marker::linked_tables_symbol`]`(n)`, without a marker (the cubin has one, input 0's).
pub fn check_link_input(ptx: &str, opts: &InstrumentOptions, code_key: &str, n: usize) -> Result<CheckedModule, PtxError> {
    if n == 0 {
        return check_module(ptx, opts, code_key);
    }
    let marker = Marker::new(marker::module_key(ptx, opts, code_key), opts);
    let instrumented = instrument_ptx(ptx, opts)?;
    let (mut text, _) = rename_for_link(&instrumented.ptx, n);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&Tables { sites: instrumented.sites.clone(), param_tags: instrumented.param_tags.clone() }.ptx_declaration_as(&marker::linked_tables_symbol(n)));
    Ok(CheckedModule { text, instrumented, marker })
}

/// The front end's answer to `--version`: the real ptxas's answer unchanged (Triton reads the
/// CUDA release from its first `release N.N`, XLA the version from its first `VN.N.N`), then one
/// line naming gasan, `REVISION`, the checks' options and the marker's format. Triton's cache key
/// holds the whole answer (`backend.hash()`), so checked and native cubins never share an entry,
/// and a change of any of these compiles again.
pub fn version_answer(real: &str, opts: &InstrumentOptions) -> String {
    let mut s = real.to_string();
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&format!("gasan ptxas front end: gasan {}, checks REVISION {REVISION}, options {:#06x}, marker format {}\n", env!("CARGO_PKG_VERSION"), marker::encode_options(opts), marker::FORMAT));
    s
}

/// What a cubin a framework loads is, for the runtime (jit/README.md, "What the runtime must do").
#[derive(Debug, PartialEq, Eq)]
pub enum Recognition {
    /// No marker: native SASS (or a cubin the runtime compiled from its own checked PTX).
    Native,
    /// Checked by the front end with checks this process runs: register `tables.sites`, keep
    /// `tables.param_tags` for launches, write the control block; the same for each further
    /// checked input of a link (`linked`: each with its own control block).
    Checked { marker: Marker, tables: Tables, linked: Vec<LinkedInput> },
    /// Checked by another gasan build or with other options: load it without writing its control
    /// block (all zeros: every check passes), and say why.
    Foreign { marker: Marker, why: String },
    /// A marker or tables that do not read: load it unchanged, and say so.
    Damaged(marker::MarkerError),
}

/// What this process's checks are: a cubin's must match them to run against its shadow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub scale: Scale,
    /// `!halt_on_error`: the compiled stubs report and go on instead of trapping.
    pub recover: bool,
}

/// Reads a cubin's marker and tables and decides what the runtime does with it.
pub fn recognise(elf: &[u8], expected: Expected) -> Recognition {
    let marker = match find_in_cubin(elf) {
        Ok(None) => return Recognition::Native,
        Ok(Some(m)) => m,
        Err(e) => return Recognition::Damaged(e),
    };
    let foreign = |why: String| Recognition::Foreign { marker, why };
    if marker.revision != REVISION {
        return foreign(format!("checked by gasan REVISION {}, this is REVISION {REVISION}", marker.revision));
    }
    let Some(o) = marker.instrument_options() else {
        return foreign(format!("options word {:#x} has bits this gasan does not know", marker.options));
    };
    if o.scale != expected.scale {
        return foreign(format!("checked for shadow_scale={}, this process runs {}", o.scale.shift(), expected.scale.shift()));
    }
    if o.recover != expected.recover {
        return foreign(format!("checked with halt_on_error={}, this process runs {}", u8::from(!o.recover), u8::from(!expected.recover)));
    }
    if o.aligned_pool {
        return foreign("checked in the aligned-pool form, which only the runtime may choose".into());
    }
    let linked = match linked_tables_in_cubin(elf) {
        Ok(l) => l,
        Err(e) => return Recognition::Damaged(e),
    };
    match tables_in_cubin(elf) {
        Ok(Some(tables)) => Recognition::Checked { marker, tables, linked },
        Ok(None) => Recognition::Damaged(marker::MarkerError::Tables(format!("{MARKER_SYMBOL} without {TABLES_SYMBOL}"))),
        Err(e) => Recognition::Damaged(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "ptxas: NVIDIA (R) Ptx optimizing assembler\nCopyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:55:12_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";

    #[test]
    fn the_version_answer_keeps_the_real_one_and_differs_by_options() {
        let o = InstrumentOptions::default();
        let a = version_answer(REAL, &o);
        assert!(a.starts_with(REAL));
        assert_ne!(a, REAL);
        // What Triton's and XLA's parsers find first is the real release and version.
        let first_release = a.lines().find_map(|l| l.split_once("release ")).map(|(_, r)| r.split(',').next().unwrap().to_string());
        assert_eq!(first_release.as_deref(), Some("13.0"));
        assert_eq!(a.matches("release").count(), 1);
        assert_eq!(a.matches(", V").count(), 1);
        assert_ne!(a, version_answer(REAL, &InstrumentOptions { recover: true, ..o }));
    }

    #[test]
    fn a_checked_module_ends_with_its_marker() {
        let ptx =
            ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n.reg .b32 %r<2>;\nld.param.u64 %rd1, [p];\nld.global.u32 %r1, [%rd1];\nret;\n}\n";
        let o = InstrumentOptions::default();
        let c = check_module(ptx, &o, "k").unwrap();
        assert!(c.text.starts_with(&c.instrumented.ptx));
        assert!(c.text.contains(&c.marker.ptx_declaration()));
        assert!(c.text.trim_end().ends_with(Tables { sites: c.instrumented.sites.clone(), param_tags: c.instrumented.param_tags.clone() }.ptx_declaration().trim_end()));
        assert_eq!(c.marker.key, marker::module_key(ptx, &o, "k"));
        assert_eq!(c.marker.instrument_options(), Some(o));
        assert_eq!(c.instrumented.stats.total().checked, 1);
        // Checking the checked text again is refused (the rewriter sees its control block).
        assert_eq!(check_module(&c.text, &o, "k").err(), Some(PtxError::AlreadyInstrumented));
        assert!(check_module("not ptx", &o, "k").is_err());
    }

    #[test]
    fn renaming_gives_each_input_its_own_symbols() {
        let checked = format!(".weak .const .align 8 .b8 {CONTROL_BLOCK_SYMBOL}[64];\n.weak .func {SLOW_PATH_SYMBOL}(...)\nld.const.u64 %r, [{CONTROL_BLOCK_SYMBOL}+8];\ncall {SLOW_PATH_SYMBOL};\n");
        let (a, ca) = rename_for_link(&checked, 0);
        let (b, cb) = rename_for_link(&checked, 1);
        assert_eq!((ca.as_str(), cb.as_str()), ("__gasan_ctl_l0", "__gasan_ctl_l1"));
        assert_eq!(a.matches("__gasan_ctl_l0").count(), 2);
        assert_eq!(a.matches("__gasan_report_l0").count(), 2);
        assert!(!b.contains("_l0") && b.matches("__gasan_ctl_l1[").count() == 1);
        // No original name survives (the linker would merge it across inputs).
        for t in [&a, &b] {
            assert!(!t.replace(&ca, "").replace(&cb, "").contains(CONTROL_BLOCK_SYMBOL), "{t}");
        }
    }

    #[test]
    fn a_further_link_input_has_its_own_symbols_and_no_marker() {
        let ptx =
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k2(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n.reg .b32 %r<2>;\nld.param.u64 %rd1, [p];\nld.global.u32 %r1, [%rd1];\nret;\n}\n";
        let o = InstrumentOptions::default();
        assert_eq!(check_link_input(ptx, &o, "k", 0).unwrap().text, check_module(ptx, &o, "k").unwrap().text);
        let c = check_link_input(ptx, &o, "k", 2).unwrap();
        assert!(!c.text.contains(&format!("{MARKER_SYMBOL}[")), "no marker of its own");
        assert!(c.text.contains(&format!("{TABLES_SYMBOL}_l2[")) && !c.text.contains(&format!("{TABLES_SYMBOL}[")));
        assert!(c.text.contains("__gasan_ctl_l2") && !c.text.replace("__gasan_ctl_l2", "").contains(CONTROL_BLOCK_SYMBOL));
        assert!(c.text.contains("__gasan_report_l2") && !c.text.replace("__gasan_report_l2", "").contains(SLOW_PATH_SYMBOL));
        assert_eq!(c.instrumented.stats.total().checked, 1);
    }
}
