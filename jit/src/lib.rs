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

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, Instrumented, PtxError, REVISION};
use gasan_instrument::shadow::Scale;
pub use marker::{find_in_cubin, tables_in_cubin, Marker, Tables, MARKER_SYMBOL, TABLES_SYMBOL};

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
    /// `tables.param_tags` for launches, write the control block.
    Checked { marker: Marker, tables: Tables },
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
    match tables_in_cubin(elf) {
        Ok(Some(tables)) => Recognition::Checked { marker, tables },
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
}
