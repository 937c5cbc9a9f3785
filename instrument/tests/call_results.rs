//! A register a `call` returns in (`call (%r1), f, (...)`, a function declared with a `.reg`
//! result) is defined by the call. Until REVISION 72 only bounds.rs counted such a result as a
//! definition (ptx/ir/defs.rs, one index, now decides it for every pass): the shared/local
//! provenance took the register for the variable its other definition named, and checked an
//! access through the callee's pointer against that variable (a false report when the callee
//! returns a pointer into another one), and the thread-index ranges took its other definition
//! for its one value and proved an access the callee's value may send anywhere (its check
//! dropped). Now the register's provenance is unknown: the access is counted, not checked
//! (`sl-found` without `sl-check`), as any access through a pointer a call returned.

use gasan_instrument::ptx::{instrument_ptx, FunctionStats, InstrumentOptions};

/// A kernel `k` that sets `%r1` by `set`, then runs `between`, then loads from `[%r1]`; `f`
/// returns the address of `s` in a register.
fn module(set: &str, between: &str) -> String {
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.shared .align 4 .b8 s[64];\n\
         .func (.reg .b32 rv) f()\n{{\n\tmov.u32 rv, s;\n\tret;\n}}\n\
         .visible .entry k(.param .u32 n)\n{{\n\t.reg .b32 %r<8>;\n\t.shared .align 4 .b8 t[4096];\n\
         \tld.param.u32 %r4, [n];\n{set}{between}\tld.shared.u32 %r3, [%r1];\n\tret;\n}}\n"
    )
}

/// `k`'s shared/local accesses: (found, checked, eliminated), under two option sets that agree.
fn load_counts(ptx: &str) -> (u32, u32, u32) {
    let counts = |opts: &InstrumentOptions| {
        let FunctionStats { space_found, space_checked, space_eliminated, .. } = instrument_ptx(ptx, opts).unwrap().stats.functions["k"];
        (space_found, space_checked, space_eliminated)
    };
    let c = counts(&InstrumentOptions::default());
    assert_eq!(c, counts(&InstrumentOptions { param_bounds: false, hoist_loops: false, ..Default::default() }));
    c
}

#[test]
fn a_register_a_call_returns_in_is_defined_by_the_call() {
    // Into `t` at a thread-independent index: checked against `t`; after the call, `%r1` is `s`
    // (no more a pointer into `t`, whose check would report it).
    let into_t = "\tmov.u32 %r5, t;\n\tadd.s32 %r1, %r5, %r4;\n";
    assert_eq!(load_counts(&module(into_t, "")), (1, 1, 0));
    assert_eq!(load_counts(&module(into_t, "\tcall (%r1), f, ();\n")), (1, 0, 0));
    // `s` itself: in bounds for every thread, proven; after the call, nothing is proven.
    let s = "\tmov.u32 %r1, s;\n";
    assert_eq!(load_counts(&module(s, "")), (1, 0, 1));
    assert_eq!(load_counts(&module(s, "\tcall (%r1), f, ();\n")), (1, 0, 0));
}
