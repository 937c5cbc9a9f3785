//! The verdict on a failed check of an address outside the pool ([`crate::abi::outside`]).
//!
//! With `outside_checks` ([`super::InstrumentOptions::outside_checks`]) the out-of-pool shadow
//! byte of a check is the control block's ([`crate::abi::ControlBlock::outside_shadow`]); where
//! the runtime makes it fail, every out-of-pool check reaches its stub, which makes this verdict
//! before reporting: a pass goes back to the check's resume label. Its straight-line part (in the
//! pool? any table?) is inline in each stub: as one `.func` called from the stubs, ptxas kept
//! values across the call in more registers (24 -> 32 for stream_triad, 32 -> 40 for gemm_tiled;
//! instrument/results.md). The scan of the table's list is [`PASS_SYMBOL`], called: a loop inside
//! a stub that resumes is a loop on the kernel's path, around which ptxas must keep every
//! predicate live at the check, and with seven of them live (cub's
//! `DeviceRadixSortOnesweepKernel`) it refused the module: "Register allocation failed with
//! register count of '7'". The call is reached only when the runtime has outside ranges.
//!
//! Off by default: a stub that can return makes a reconvergence point after every check, which
//! ptxas brackets with a convergence barrier and around which it allocates registers differently
//! (measured in instrument/results.md), on the path every check takes.

use super::lines::{ln, Lines};
use crate::abi::{ctl_offset, outside, CONTROL_BLOCK_SYMBOL};

/// The scan of the active list of outside ranges: `(addr, width, table)` -> 1 when the access
/// passes ([`outside::must_report`] is false), 0 when it must be reported.
pub(super) const PASS_SYMBOL: &str = "__gasan_outside_pass";

/// The verdict on a failed check of `width` bytes at `addr` (a `.b64` register): a branch to
/// label `pass` when the address is outside the pool and [`outside::must_report`] passes it over
/// the active list of the control block's table; it falls through (to the report) otherwise. Its
/// own labels are `pass`'s with a prefix, so they are unique where `pass` is.
pub(super) fn verdict(b: &mut Lines<'_>, addr: &str, width: &dyn super::lines::Piece, pass: &str) {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let tag = &pass[1..];
    b.texts(&["{", ".reg .b64 %oa<8>;", ".reg .b32 %ow<2>;", ".reg .pred %op<2>;"]);
    ln!(b; "mov.u32 %ow0, ", width, ";");
    b.text("cvt.u64.u32 %oa7, %ow0;");
    super::lines::pool_test(b, addr, ("%oa1", "%oa2"), "%op0");
    ln!(b; "@%op0 bra $o_rep", tag, ";");
    ln!(b; "ld.const.u64 %oa1, [", ctl, "+", ctl_offset::OUTSIDE_RANGES, "];");
    b.texts(&["setp.eq.u64 %op0, %oa1, 0;"]);
    ln!(b; "@%op0 bra ", pass, ";");
    // The list's scan, called (no loop in the stub).
    b.texts(&["{", ".param .b64 o_p0;", ".param .b64 o_p1;", ".param .b64 o_p2;", ".param .b32 o_r;"]);
    ln!(b; "st.param.b64 [o_p0], ", addr, ";");
    b.texts(&["st.param.b64 [o_p1], %oa7;", "st.param.b64 [o_p2], %oa1;"]);
    ln!(b; "call.uni (o_r), ", PASS_SYMBOL, ", (o_p0, o_p1, o_p2);");
    b.texts(&["ld.param.b32 %ow1, [o_r];", "}", "setp.ne.u32 %op0, %ow1, 0;"]);
    ln!(b; "@%op0 bra ", pass, ";");
    ln!(b; "$o_rep", tag, ":");
    b.text("}");
}

/// The definition of [`PASS_SYMBOL`] (weak: every module with outside checks has one).
pub(super) fn pass_function(out: &mut String) {
    let mut b = Lines::new(out, "");
    ln!(b; ".weak .func (.param .b32 o_r) ", PASS_SYMBOL, "(.param .b64 o_addr, .param .b64 o_width, .param .b64 o_table)");
    b.texts(&["{", ".reg .b64 %oa<8>;", ".reg .b32 %ow<2>;", ".reg .pred %op<2>;"]);
    b.texts(&["ld.param.u64 %oa0, [o_addr];", "ld.param.u64 %oa7, [o_width];", "ld.param.u64 %oa1, [o_table];"]);
    // The active list and its count (plain loads: the host writes the table between kernels, or a
    // new list beside the active one during one; cached lines are the old list's).
    b.texts(&["ld.global.u64 %oa2, [%oa1];", "add.s64 %oa1, %oa1, %oa2;", "ld.global.u64 %oa2, [%oa1];"]);
    ln!(b; "min.u64 %oa2, %oa2, ", outside::CAPACITY, ";");
    ln!(b; "mul.lo.u64 %oa2, %oa2, ", outside::ENTRY_SIZE, ";");
    ln!(b; "add.s64 %oa1, %oa1, ", outside::LIST_HEADER, ";");
    b.text("add.s64 %oa2, %oa2, %oa1;");
    b.text("mov.u32 %ow1, 0;");
    b.text("$o_loop:");
    b.text("setp.ge.u64 %op0, %oa1, %oa2;");
    b.text("@%op0 bra $o_end;");
    b.texts(&["ld.global.v2.u64 {%oa3, %oa4}, [%oa1];", "ld.global.v2.u64 {%oa5, %oa6}, [%oa1+16];"]);
    ln!(b; "add.s64 %oa1, %oa1, ", outside::ENTRY_SIZE, ";");
    b.text("sub.s64 %oa3, %oa0, %oa3;");
    b.texts(&["setp.lt.u64 %op0, %oa3, %oa4;", "sub.s64 %oa4, %oa4, %oa3;", "setp.ge.and.u64 %op0, %oa4, %oa7, %op0;"]);
    b.text("@%op0 bra $o_pass;");
    b.text("sub.s64 %oa5, %oa0, %oa5;");
    b.texts(&["setp.lt.u64 %op1, %oa5, %oa6;", "@%op1 mov.u32 %ow1, 1;"]);
    b.text("bra.uni $o_loop;");
    b.text("$o_end:");
    b.text("setp.eq.u32 %op0, %ow1, 0;");
    b.text("@%op0 bra $o_pass;");
    b.texts(&["st.param.b32 [o_r], 0;", "ret;", "$o_pass:", "st.param.b32 [o_r], 1;", "ret;", "}"]);
}
