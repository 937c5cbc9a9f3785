//! Use after return in a kernel without a frame of its own (issue 37, defect 4): a pointer into
//! a returned `__noinline__` callee's local array, used by a kernel whose own arrays nvcc removed
//! (no `__local_depot`), got no check: the kernel's check tests an untraced local address against
//! the kernel's frame, and there was none. In a frameless kernel no local memory is live, so every
//! untraced local address is a returned callee's frame: it is checked, and always bad.

mod common;
use common::*;
use gasan_instrument::abi::MemorySpace;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

const FRAMELESS: &str = include_str!("data/frameless_kernel_uar.ptx");

fn local_sites(r: &gasan_instrument::ptx::Instrumented) -> Vec<(MemorySpace, String)> {
    r.sites.sites.iter().filter_map(|s| s.space.as_ref()).map(|s| (s.space, s.variable.clone())).collect()
}

#[test]
fn a_frameless_kernel_checks_its_local_addresses_as_dead_frames() {
    let dir = scratch("frameless-kernel");
    for (n, opts) in [
        InstrumentOptions::default(),
        InstrumentOptions { recover: true, optimize: false, ..Default::default() },
        InstrumentOptions { scale: gasan_instrument::shadow::Scale::S7, ..Default::default() },
    ]
    .into_iter()
    .enumerate()
    {
        let r = instrument_ptx(FRAMELESS, &opts).unwrap();
        let sites = local_sites(&r);
        assert!(sites.contains(&(MemorySpace::LocalDeadFrame, "__gasan_returned_frames".to_string())), "{opts:?}: {sites:?}");
        // Generic addresses outside the local window (global memory) are not its business.
        let kernel = &r.ptx[r.ptx.find(".visible .entry _Z1kPii").unwrap()..];
        assert!(kernel.contains("isspacep.local"), "{opts:?}");
        assemble(&dir, &format!("k{n}"), &r.ptx);
    }
}

/// The clean twin: the same kernel with a frame of its own is checked against that frame.
#[test]
fn a_kernel_with_a_frame_checks_against_it() {
    let own = FRAMELESS
        .replace("\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<10>;\n", "\t.local .align 4 .b8 __local_depot1[32];\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<10>;\n")
        .replace("\tld.param.u32 %r1, [_Z1kPii_param_1];\n", "\tld.param.u32 %r1, [_Z1kPii_param_1];\n\tmov.u64 %rd9, __local_depot1;\n\tst.local.u32 [%rd9], %r1;\n");
    assert_ne!(own, FRAMELESS);
    let r = instrument_ptx(&own, &InstrumentOptions::default()).unwrap();
    let sites = local_sites(&r);
    assert!(sites.contains(&(MemorySpace::LocalOutOfScope, "__local_depot1".to_string())), "{sites:?}");
    assert!(!sites.iter().any(|(_, v)| v == "__gasan_returned_frames"), "{sites:?}");
}

/// A module with a named local variable (not a frame) the kernel may reach untraced: no
/// frameless check (it could be live).
#[test]
fn a_named_local_variable_keeps_the_frameless_check_off() {
    let named = FRAMELESS.replace(".func  (.param .b64 func_retval0) _Z4leaki(", ".local .align 4 .b8 scratch[16];\n.func  (.param .b64 func_retval0) _Z4leaki(");
    let r = instrument_ptx(&named, &InstrumentOptions::default()).unwrap();
    assert!(!local_sites(&r).iter().any(|(_, v)| v == "__gasan_returned_frames"), "{:?}", local_sites(&r));
}
