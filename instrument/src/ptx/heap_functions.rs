//! The device heap functions checked PTX appends when it renames the driver's (heap.rs plans the
//! renaming): `__gasan_malloc`, `__gasan_aligned_malloc` and `__gasan_free` over gasan's checked
//! device heap (layout and rationale: [`crate::device_heap`]).
//!
//! Without a heap (heap symbol 0: no runtime, or one that could not reserve the region) the
//! functions call the driver's own `malloc`/`free`, so the module behaves as the original.

use super::emit::{publish_for, record_body_lines, FenceScope, Publish};
use super::heap::Callee;
use super::ir::header::Header;
use super::lines::MARKER;
use crate::abi::{ctl_offset, free_error, AccessKind, CONTROL_BLOCK_SYMBOL, FLAG_RECOVER};
use crate::device_heap::{block_offset, heap_offset, heap_symbol, BLOCK_FREED, BLOCK_LIVE};
use crate::shadow::Scale;
use std::fmt::Write as _;

/// Name of the shared allocation routine the `malloc` replacements call.
const HEAP_ALLOC: &str = "__gasan_heap_alloc";

/// The replacement functions (appended after the module's last line), or "" when none.
pub(super) fn definitions(declared: &[Callee], scale: Scale, header: &Header) -> String {
    let mut d = declared.to_vec();
    d.sort();
    if d.is_empty() {
        return String::new();
    }
    let heap = heap_symbol(CONTROL_BLOCK_SYMBOL);
    let mut s = String::new();
    let _ = writeln!(s, "{MARKER} gasan checked device heap (instrument/src/device_heap.rs)");
    let _ = writeln!(s, ".weak .const .align 8 .b8 {heap}[8]; {MARKER}");
    for c in &d {
        let decl = match c {
            Callee::Malloc => ".extern .func (.param .b64 gasan_r) malloc (.param .b64 gasan_size);",
            Callee::Free => ".extern .func free (.param .b64 gasan_ptr);",
            Callee::AlignedMalloc => ".extern .func (.param .b64 gasan_r) __cuda_syscall_aligned_malloc (.param .b64 gasan_size, .param .b64 gasan_align);",
        };
        let _ = writeln!(s, "{decl} {MARKER}");
    }
    if d.iter().any(|c| *c != Callee::Free) {
        emit_lines(&mut s, &heap_alloc(scale, publish_for(header)));
    }
    for c in &d {
        let body = match c {
            Callee::Malloc => malloc_wrapper(&heap, Callee::Malloc),
            Callee::AlignedMalloc => malloc_wrapper(&heap, Callee::AlignedMalloc),
            Callee::Free => heap_free(scale, &heap, publish_for(header)),
        };
        emit_lines(&mut s, &body);
    }
    s
}

fn emit_lines(out: &mut String, lines: &[String]) {
    for l in lines {
        let _ = writeln!(out, "{l} {MARKER}");
    }
}

/// `malloc`/`aligned_malloc`: the driver's function when there is no checked heap, else the heap.
fn malloc_wrapper(heap: &str, c: Callee) -> Vec<String> {
    let aligned = c == Callee::AlignedMalloc;
    let name = c.checked_name();
    let params = if aligned { ".param .b64 gasan_size, .param .b64 gasan_align" } else { ".param .b64 gasan_size" };
    let mut v = vec![
        format!(".func (.param .b64 gasan_ret) {name}({params})"),
        "{".into(),
        ".reg .b64 %ha<4>;".into(),
        ".reg .pred %hp<1>;".into(),
        "ld.param.u64 %ha0, [gasan_size];".into(),
        // nvcc's malloc returns 16-byte aligned memory; the heap's blocks are granule-aligned.
        if aligned { "ld.param.u64 %ha1, [gasan_align];".into() } else { "mov.u64 %ha1, 16;".into() },
        format!("ld.const.u64 %ha2, [{heap}];"),
        "setp.ne.u64 %hp0, %ha2, 0;".into(),
        "@%hp0 bra $gasan_checked_heap;".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        ".param .b64 gasan_p1;".into(),
        ".param .b64 gasan_r0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
    ];
    if aligned {
        v.push("st.param.b64 [gasan_p1], %ha1;".into());
        v.push(format!("call.uni (gasan_r0), {}, (gasan_p0, gasan_p1);", c.driver_name()));
    } else {
        v.push(format!("call.uni (gasan_r0), {}, (gasan_p0);", c.driver_name()));
    }
    v.extend([
        "ld.param.b64 %ha3, [gasan_r0];".into(),
        "}".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "$gasan_checked_heap:".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        ".param .b64 gasan_p1;".into(),
        ".param .b64 gasan_p2;".into(),
        ".param .b64 gasan_r0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
        "st.param.b64 [gasan_p1], %ha1;".into(),
        "st.param.b64 [gasan_p2], %ha2;".into(),
        format!("call.uni (gasan_r0), {HEAP_ALLOC}, (gasan_p0, gasan_p1, gasan_p2);"),
        "ld.param.b64 %ha3, [gasan_r0];".into(),
        "}".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
}

/// Shadow byte of a granule with `%ha21` (≤ granule) accessible bytes into `%hr0`, the
/// [`Scale::encode`] arithmetic.
fn encode_granule(scale: Scale, v: &mut Vec<String>) {
    v.push("cvt.u32.u64 %hr0, %ha21;".into());
    if scale == Scale::S8 {
        // k > 3 -> k - 1; 0..=3 stay (3 bytes are encoded as 4: the documented blind spot).
        v.push(format!("setp.gt.u32 %hp2, %hr0, {};", crate::shadow::S8_UNENCODABLE));
        v.push("@%hp2 sub.u32 %hr0, %hr0, 1;".into());
    }
}

/// Writes the coordinates of the calling thread at `[%ha14 + at]` (ctaid) and `[%ha14 + at + 12]`.
fn store_thread(v: &mut Vec<String>, ctaid_at: usize, tid_at: usize) {
    for (i, d) in ["x", "y", "z"].iter().enumerate() {
        v.push(format!("mov.u32 %hr1, %ctaid.{d};"));
        v.push(format!("st.global.u32 [%ha14+{}], %hr1;", ctaid_at + 4 * i));
        v.push(format!("mov.u32 %hr1, %tid.{d};"));
        v.push(format!("st.global.u32 [%ha14+{}], %hr1;", tid_at + 4 * i));
    }
}

/// `__gasan_heap_alloc(size, align, heap header)`: a block from the arena, or 0.
fn heap_alloc(scale: Scale, publish: Publish) -> Vec<String> {
    let g = scale.granule();
    let shift = scale.shift();
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut v: Vec<String> = vec![
        format!(".func (.param .b64 gasan_ret) {HEAP_ALLOC}(.param .b64 gasan_size, .param .b64 gasan_align, .param .b64 gasan_heap)"),
        "{".into(),
        ".reg .b64 %ha<24>;".into(),
        ".reg .b32 %hr<4>;".into(),
        ".reg .pred %hp<4>;".into(),
        "ld.param.u64 %ha0, [gasan_size];".into(),
        "ld.param.u64 %ha1, [gasan_align];".into(),
        "ld.param.u64 %ha2, [gasan_heap];".into(),
        "mov.u64 %ha3, 0;".into(),
        // The alignment must be a power of two (as the driver's aligned malloc requires).
        "sub.u64 %ha4, %ha1, 1;".into(),
        "and.b64 %ha4, %ha4, %ha1;".into(),
        "setp.ne.u64 %hp0, %ha4, 0;".into(),
        "setp.eq.u64 %hp1, %ha1, 0;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        format!("ld.global.u64 %ha5, [%ha2+{}];", heap_offset::ARENA_SIZE),
        // Requests larger than the arena fail before any arithmetic could wrap.
        "setp.gt.u64 %hp0, %ha0, %ha5;".into(),
        "setp.gt.u64 %hp1, %ha1, %ha5;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        // a = max(align, g); body = roundup(max(size, 1), g); cost = body + a (HeapLayout::block_cost)
        format!("max.u64 %ha6, %ha1, {g};"),
        "max.u64 %ha7, %ha0, 1;".into(),
        format!("add.u64 %ha7, %ha7, {};", g - 1),
        format!("and.b64 %ha7, %ha7, {};", !(g - 1) as i64),
        "add.u64 %ha8, %ha7, %ha6;".into(),
        format!("atom.global.add.u64 %ha9, [%ha2+{}], %ha8;", heap_offset::NEXT),
        "add.u64 %ha10, %ha9, %ha8;".into(),
        "setp.gt.u64 %hp0, %ha10, %ha5;".into(),
        "@%hp0 bra $gasan_heap_ret;".into(),
        // start = roundup(arena + old + g, a); its header granule just before it.
        format!("ld.global.u64 %ha11, [%ha2+{}];", heap_offset::ARENA_BASE),
        "add.u64 %ha12, %ha11, %ha9;".into(),
        format!("add.u64 %ha12, %ha12, {g};"),
        "sub.u64 %ha13, %ha6, 1;".into(),
        "add.u64 %ha12, %ha12, %ha13;".into(),
        "not.b64 %ha13, %ha13;".into(),
        "and.b64 %ha12, %ha12, %ha13;".into(),
        format!("sub.u64 %ha14, %ha12, {g};"),
        // Table slot old >> (shift + 1): each block costs two granules or more (device_heap.rs).
        format!("shr.u64 %ha15, %ha9, {};", shift + 1),
        format!("ld.global.u64 %ha16, [%ha2+{}];", heap_offset::TABLE),
        "shl.b64 %ha17, %ha15, 4;".into(),
        "add.u64 %ha16, %ha16, %ha17;".into(),
        "st.global.v2.u64 [%ha16], {%ha12, %ha0};".into(),
        "cvt.u32.u64 %hr1, %ha15;".into(),
        format!("st.global.u32 [%ha14+{}], %hr1;", block_offset::INDEX),
        format!("st.global.u64 [%ha14+{}], %ha0;", block_offset::SIZE),
    ];
    store_thread(&mut v, block_offset::ALLOC_CTAID, block_offset::ALLOC_TID);
    v.extend([
        format!("st.global.u32 [%ha14+{}], {BLOCK_LIVE};", block_offset::STATE),
        // Shadow of the block: granule i gets encode(min(size - i*g, g)).
        format!("ld.const.u64 %ha18, [{ctl}+{}];", ctl_offset::POOL_BASE),
        format!("ld.const.u64 %ha19, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
        "sub.u64 %ha20, %ha12, %ha18;".into(),
        format!("shr.u64 %ha20, %ha20, {shift};"),
        "add.u64 %ha20, %ha20, %ha19;".into(),
        "mov.u64 %ha22, 0;".into(),
        "$gasan_heap_shadow:".into(),
        "max.u64 %ha21, %ha0, %ha22;".into(),
        "sub.u64 %ha21, %ha21, %ha22;".into(),
        format!("min.u64 %ha21, %ha21, {g};"),
    ]);
    encode_granule(scale, &mut v);
    v.extend([
        "st.global.u8 [%ha20], %hr0;".into(),
        "add.u64 %ha20, %ha20, 1;".into(),
        format!("add.u64 %ha22, %ha22, {g};"),
        "setp.lt.u64 %hp2, %ha22, %ha7;".into(),
        "@%hp2 bra $gasan_heap_shadow;".into(),
        // The header, table entry and shadow are visible before the pointer can be passed on
        // (a release fence where the target has one: an sc fence would keep the calling
        // kernel's atomics from reducing, emit.rs `Publish`).
        publish.release_fence(FenceScope::Gpu).into(),
        "mov.u64 %ha3, %ha12;".into(),
        "$gasan_heap_ret:".into(),
        "st.param.b64 [gasan_ret], %ha3;".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
}

/// `__gasan_free(ptr, site)`: poisons a live block (never reused); reports anything else.
fn heap_free(scale: Scale, heap: &str, publish: Publish) -> Vec<String> {
    let g = scale.granule();
    let shift = scale.shift();
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut v: Vec<String> = vec![
        ".func __gasan_free(.param .b64 gasan_ptr, .param .b32 gasan_site)".into(),
        "{".into(),
        ".reg .b64 %ha<24>;".into(),
        ".reg .b32 %hr<12>;".into(),
        ".reg .pred %hp<4>;".into(),
        "ld.param.u64 %ha0, [gasan_ptr];".into(),
        format!("ld.const.u64 %ha2, [{heap}];"),
        "setp.ne.u64 %hp0, %ha2, 0;".into(),
        "@%hp0 bra $gasan_checked_heap;".into(),
        "{".into(),
        ".param .b64 gasan_p0;".into(),
        "st.param.b64 [gasan_p0], %ha0;".into(),
        "call.uni free, (gasan_p0);".into(),
        "}".into(),
        "ret;".into(),
        "$gasan_checked_heap:".into(),
        // free(NULL) does nothing.
        "setp.eq.u64 %hp0, %ha0, 0;".into(),
        "@%hp0 ret;".into(),
        format!("mov.u32 %hr9, {};", free_error::INVALID_FREE),
        format!("ld.global.u64 %ha5, [%ha2+{}];", heap_offset::ARENA_BASE),
        format!("ld.global.u64 %ha6, [%ha2+{}];", heap_offset::ARENA_SIZE),
        // A block start lies in the arena past its header granule and is granule-aligned.
        "sub.u64 %ha7, %ha0, %ha5;".into(),
        format!("setp.lt.u64 %hp0, %ha7, {g};"),
        "setp.ge.u64 %hp1, %ha7, %ha6;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        format!("and.b64 %ha8, %ha0, {};", g - 1),
        "setp.ne.u64 %hp1, %ha8, 0;".into(),
        "or.pred %hp0, %hp0, %hp1;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        // ... and its header's table entry names it (user bytes never pass for a header).
        format!("sub.u64 %ha14, %ha0, {g};"),
        format!("ld.global.u32 %hr3, [%ha14+{}];", block_offset::INDEX),
        "cvt.u64.u32 %ha11, %hr3;".into(),
        format!("ld.global.u64 %ha10, [%ha2+{}];", heap_offset::TABLE_CAPACITY),
        "setp.ge.u64 %hp0, %ha11, %ha10;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        format!("ld.global.u64 %ha12, [%ha2+{}];", heap_offset::TABLE),
        "shl.b64 %ha11, %ha11, 4;".into(),
        "add.u64 %ha12, %ha12, %ha11;".into(),
        "ld.global.u64 %ha13, [%ha12];".into(),
        "setp.ne.u64 %hp0, %ha13, %ha0;".into(),
        "@%hp0 bra $gasan_free_bad;".into(),
        // Exactly one of two racing frees changes the state.
        format!("atom.global.cas.b32 %hr4, [%ha14+{}], {BLOCK_LIVE}, {BLOCK_FREED};", block_offset::STATE),
        format!("setp.eq.u32 %hp0, %hr4, {BLOCK_LIVE};"),
        "@%hp0 bra $gasan_free_ok;".into(),
        format!("setp.eq.u32 %hp0, %hr4, {BLOCK_FREED};"),
        format!("@%hp0 mov.u32 %hr9, {};", free_error::DOUBLE_FREE),
        "bra.uni $gasan_free_bad;".into(),
        "$gasan_free_ok:".into(),
    ];
    store_thread(&mut v, block_offset::FREE_CTAID, block_offset::FREE_TID);
    v.extend([
        // Poison the block's granules (the memory is never handed out again: quarantine).
        format!("ld.global.u64 %ha15, [%ha14+{}];", block_offset::SIZE),
        "max.u64 %ha15, %ha15, 1;".into(),
        format!("ld.const.u64 %ha18, [{ctl}+{}];", ctl_offset::POOL_BASE),
        format!("ld.const.u64 %ha19, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
        "sub.u64 %ha20, %ha0, %ha18;".into(),
        format!("shr.u64 %ha20, %ha20, {shift};"),
        "add.u64 %ha20, %ha20, %ha19;".into(),
        "mov.u64 %ha22, 0;".into(),
        "$gasan_free_shadow:".into(),
        "st.global.u8 [%ha20], 0;".into(),
        "add.u64 %ha20, %ha20, 1;".into(),
        format!("add.u64 %ha22, %ha22, {g};"),
        "setp.lt.u64 %hp2, %ha22, %ha15;".into(),
        "@%hp2 bra $gasan_free_shadow;".into(),
        // The poison is visible before anything the thread does after the free.
        publish.release_fence(FenceScope::Gpu).into(),
        "ret;".into(),
        "$gasan_free_bad:".into(),
        "{".into(),
        ".reg .b64 %ra<3>;".into(),
        ".reg .b32 %rr<11>;".into(),
        ".reg .pred %rp<2>;".into(),
        "mov.b64 %ra0, %ha0;".into(),
        "mov.u32 %rr0, 0;".into(),
        format!("mov.u32 %rr1, {};", AccessKind::Free as u8),
        "ld.param.u32 %rr2, [gasan_site];".into(),
        "mov.u32 %rr3, %hr9;".into(),
    ]);
    v.extend(record_body_lines(publish, "_free"));
    v.extend([
        // Halt mode stops the kernel like a bad access; recover mode leaves the memory alone.
        format!("ld.const.u64 %ra1, [{ctl}+{}];", ctl_offset::FLAGS),
        format!("and.b64 %ra1, %ra1, {FLAG_RECOVER};"),
        "setp.eq.u64 %rp0, %ra1, 0;".into(),
        "@%rp0 trap;".into(),
        "}".into(),
        "ret;".into(),
        "}".into(),
    ]);
    v
}
