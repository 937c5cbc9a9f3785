//! Host API copies and sets: the device ranges they touch checked before the call.

use super::*;

/// Checks `[addr, addr+len)` of a host API call before it runs: pool memory against its
/// allocations, managed and pinned host memory (`cuMemHostAlloc`) and NCCL's `ncclMemAlloc`
/// memory against their tracked sizes (registered host memory is not: ranges past it are
/// ordinary pageable memory); a range starting in `ncclMemFree`'d memory is a use after free.
pub(super) fn check_range(call: &str, addr: Dptr, len: usize, write: bool) -> bool {
    let s = state();
    let Some(first) = s.device() else { return true };
    // The pool holding `addr`, whichever GPU's (several GPUs: a peer copy's source may be another
    // GPU's); the first's answers for addresses in none.
    let d = s.runtime_owning(addr).unwrap_or(first);
    let mut checked = d.alloc.check_range(addr, len as u64);
    if checked.is_ok() {
        let overflow = s.foreign.find(addr).and_then(|r| match r.kind {
            ForeignKind::Managed | ForeignKind::HostAlloc | ForeignKind::NcclMem => crate::side_table::range_overflow(&r, addr, len as u64, d.alloc.scale()),
            ForeignKind::NcclMemFreed if len > 0 => crate::side_table::freed_use(&r, addr, d.alloc.scale()),
            _ => None,
        });
        if let Some(desc) = overflow {
            checked = Err(crate::allocator::RangeError { addr, len: len as u64, bad: desc.addr, desc });
        }
    }
    match checked {
        Ok(()) => true,
        Err(e) => {
            s.errors.host_error(Report::Api { call: call.to_string(), addr, len: len as u64, write, desc: e.desc, stack: HostStack::capture(s.opts.malloc_context_size) });
            false
        }
    }
}

/// Checks the device sides of a 2D / 3D copy descriptor before the call.
fn check_copy<T: CopyDescriptor>(call: &str, p: In<T>) -> bool {
    let Some(p) = p.get() else {
        return true; // the driver answers CUDA_ERROR_INVALID_VALUE itself
    };
    let (src, dst) = p.spans();
    src.is_none_or(|s| check_range(call, s.addr, s.len as usize, false)) && dst.is_none_or(|d| check_range(call, d.addr, d.len as usize, true))
}

/// Checks every copy of a batch (each side may be host or device memory; only pool memory is checked).
fn check_batch(call: &str, dsts: *const Dptr, srcs: *const Dptr, sizes: *const usize, count: usize) -> bool {
    if dsts.is_null() || srcs.is_null() || sizes.is_null() {
        return true; // the driver answers CUDA_ERROR_INVALID_VALUE itself
    }
    // SAFETY: the caller passes `count` entries in each array, as the API requires.
    let (d, s, n) = unsafe { (std::slice::from_raw_parts(dsts, count), std::slice::from_raw_parts(srcs, count), std::slice::from_raw_parts(sizes, count)) };
    (0..count).all(|i| check_range(call, s[i], n[i], false) && check_range(call, d[i], n[i], true))
}

/// Checks a pitched 2D memset (`width_bytes` per row, `h` rows).
fn check_set2d(call: &str, dst: Dptr, pitch: usize, width_bytes: usize, h: usize) -> bool {
    box_span(dst, 0, 0, 0, pitch as u64, 0, width_bytes as u64, h as u64, 1).is_none_or(|s| check_range(call, s.addr, s.len as usize, true))
}

hooks! {
    real;
    cuMemcpyBatchAsync_v2 | cuMemcpyBatchAsync_v2_ptsz (dsts: *mut Dptr, srcs: *mut Dptr, sizes: *mut usize, count: usize, attrs: *mut CUmemcpyAttributes, idx: *mut usize, nattrs: usize, stream: CUstream) {
        if !check_batch("cuMemcpyBatchAsync", dsts, srcs, sizes, count) { return INVALID; }
        real(dsts, srcs, sizes, count, attrs, idx, nattrs, stream)
    }
    // ---- host copies and sets: ranges checked before the call ----

    cuMemcpyHtoD_v2 | cuMemcpyHtoD_v2_ptds (dst: Dptr, src: *const c_void, n: usize) { if !check_range("cuMemcpyHtoD", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyDtoH_v2 | cuMemcpyDtoH_v2_ptds (dst: *mut c_void, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoH", src, n, false) { return INVALID; } after_sync(real(dst, src, n)) }
    // Copies between GPUs: each side checked against the pool that holds it.
    cuMemcpyPeer | cuMemcpyPeer_ptds (dst: Dptr, dst_ctx: CUcontext, src: Dptr, src_ctx: CUcontext, n: usize) { if !check_range("cuMemcpyPeer", src, n, false) || !check_range("cuMemcpyPeer", dst, n, true) { return INVALID; } after_sync(real(dst, dst_ctx, src, src_ctx, n)) }
    cuMemcpyPeerAsync | cuMemcpyPeerAsync_ptsz (dst: Dptr, dst_ctx: CUcontext, src: Dptr, src_ctx: CUcontext, n: usize, stream: CUstream) { if !check_range("cuMemcpyPeerAsync", src, n, false) || !check_range("cuMemcpyPeerAsync", dst, n, true) { return INVALID; } real(dst, dst_ctx, src, src_ctx, n, stream) }
    cuMemcpy3DPeer | cuMemcpy3DPeer_ptds (p: In<Memcpy3D>) { if !check_copy("cuMemcpy3DPeer", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy3DPeerAsync | cuMemcpy3DPeerAsync_ptsz (p: In<Memcpy3D>, stream: CUstream) { if !check_copy("cuMemcpy3DPeerAsync", p) { return INVALID; } real(p, stream) }
    cuMemcpyDtoD_v2 | cuMemcpyDtoD_v2_ptds (dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpyDtoD", src, n, false) || !check_range("cuMemcpyDtoD", dst, n, true) { return INVALID; } real(dst, src, n) }
    cuMemcpy | cuMemcpy_ptds (dst: Dptr, src: Dptr, n: usize) { if !check_range("cuMemcpy", src, n, false) || !check_range("cuMemcpy", dst, n, true) { return INVALID; } after_sync(real(dst, src, n)) }
    cuMemcpyAsync | cuMemcpyAsync_ptsz (dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyAsync", src, n, false) || !check_range("cuMemcpyAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyHtoDAsync_v2 | cuMemcpyHtoDAsync_v2_ptsz (dst: Dptr, src: *const c_void, n: usize, stream: CUstream) { if !check_range("cuMemcpyHtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoHAsync_v2 | cuMemcpyDtoHAsync_v2_ptsz (dst: *mut c_void, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoHAsync", src, n, false) { return INVALID; } real(dst, src, n, stream) }
    cuMemcpyDtoDAsync_v2 | cuMemcpyDtoDAsync_v2_ptsz (dst: Dptr, src: Dptr, n: usize, stream: CUstream) { if !check_range("cuMemcpyDtoDAsync", src, n, false) || !check_range("cuMemcpyDtoDAsync", dst, n, true) { return INVALID; } real(dst, src, n, stream) }
    cuMemsetD8_v2 | cuMemsetD8_v2_ptds (dst: Dptr, v: u8, n: usize) { if !check_range("cuMemsetD8", dst, n, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD16_v2 | cuMemsetD16_v2_ptds (dst: Dptr, v: u16, n: usize) { if !check_range("cuMemsetD16", dst, n * 2, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD32_v2 | cuMemsetD32_v2_ptds (dst: Dptr, v: u32, n: usize) { if !check_range("cuMemsetD32", dst, n * 4, true) { return INVALID; } real(dst, v, n) }
    cuMemsetD8Async | cuMemsetD8Async_ptsz (dst: Dptr, v: u8, n: usize, stream: CUstream) { if !check_range("cuMemsetD8Async", dst, n, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD16Async | cuMemsetD16Async_ptsz (dst: Dptr, v: u16, n: usize, stream: CUstream) { if !check_range("cuMemsetD16Async", dst, n * 2, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemsetD32Async | cuMemsetD32Async_ptsz (dst: Dptr, v: u32, n: usize, stream: CUstream) { if !check_range("cuMemsetD32Async", dst, n * 4, true) { return INVALID; } real(dst, v, n, stream) }
    cuMemcpy2D_v2 | cuMemcpy2D_v2_ptds (p: In<Memcpy2D>) { if !check_copy("cuMemcpy2D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2DUnaligned_v2 | cuMemcpy2DUnaligned_v2_ptds (p: In<Memcpy2D>) { if !check_copy("cuMemcpy2DUnaligned", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy2DAsync_v2 | cuMemcpy2DAsync_v2_ptsz (p: In<Memcpy2D>, stream: CUstream) { if !check_copy("cuMemcpy2DAsync", p) { return INVALID; } real(p, stream) }
    cuMemcpy3D_v2 | cuMemcpy3D_v2_ptds (p: In<Memcpy3D>) { if !check_copy("cuMemcpy3D", p) { return INVALID; } after_sync(real(p)) }
    cuMemcpy3DAsync_v2 | cuMemcpy3DAsync_v2_ptsz (p: In<Memcpy3D>, stream: CUstream) { if !check_copy("cuMemcpy3DAsync", p) { return INVALID; } real(p, stream) }
    cuMemsetD2D8_v2 | cuMemsetD2D8_v2_ptds (dst: Dptr, pitch: usize, v: u8, w: usize, h: usize) { if !check_set2d("cuMemsetD2D8", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D8Async | cuMemsetD2D8Async_ptsz (dst: Dptr, pitch: usize, v: u8, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D8Async", dst, pitch, w, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D16_v2 | cuMemsetD2D16_v2_ptds (dst: Dptr, pitch: usize, v: u16, w: usize, h: usize) { if !check_set2d("cuMemsetD2D16", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D16Async | cuMemsetD2D16Async_ptsz (dst: Dptr, pitch: usize, v: u16, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D16Async", dst, pitch, w * 2, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
    cuMemsetD2D32_v2 | cuMemsetD2D32_v2_ptds (dst: Dptr, pitch: usize, v: u32, w: usize, h: usize) { if !check_set2d("cuMemsetD2D32", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h) }
    cuMemsetD2D32Async | cuMemsetD2D32Async_ptsz (dst: Dptr, pitch: usize, v: u32, w: usize, h: usize, stream: CUstream) { if !check_set2d("cuMemsetD2D32Async", dst, pitch, w * 4, h) { return INVALID; } real(dst, pitch, v, w, h, stream) }
}
