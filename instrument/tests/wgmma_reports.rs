//! Halt mode in a kernel that uses `wgmma`: Triton's pipelined f16 matmul (jit/triton/kernels.py
//! `matmul` with the alignment hints PyTorch's tensors get, compiled by Triton 3.6.0 for sm_90a:
//! tests/data/triton_matmul_hinted.ptx) issues its tiles' copies and checks while a `wgmma` group
//! is in flight. With the checks' branches to report blocks that never come back, ptxas serialized
//! its `wgmma` (C7518, REVISION 87); reporting through predicated calls it does not.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::ffi::OsStr;

/// ptxas's `-v` report of `ptx`, which must assemble for sm_90a.
fn ptxas_report(dir: &std::path::Path, name: &str, ptx: &str) -> String {
    let f = dir.join(format!("{name}.ptx"));
    std::fs::write(&f, ptx).unwrap();
    let out = run_tool("ptxas", &[OsStr::new("-arch=sm_90a"), OsStr::new("-v"), f.as_os_str(), OsStr::new("-o"), dir.join(format!("{name}.cubin")).as_os_str()]);
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_pipelined_wgmma_matmul_keeps_its_wgmma_unserialized() {
    let dir = scratch("wgmma-reports");
    let native = include_str!("data/triton_matmul_hinted.ptx");
    assert!(!ptxas_report(&dir, "native", native).contains("C7518"));
    for (name, opts) in [("default", InstrumentOptions::default()), ("scale7", InstrumentOptions { scale: gasan_instrument::shadow::Scale::S7, ..Default::default() })] {
        let checked = instrument_ptx(native, &opts).unwrap().ptx;
        assert!(checked.contains("call __gasan_halt_global") && checked.contains("call __gasan_halt_space"), "{name}: reports through calls");
        let report = ptxas_report(&dir, name, &checked);
        assert!(!report.contains("C7518"), "{name}: ptxas serialized the checked kernel's wgmma:\n{report}");
    }
}
