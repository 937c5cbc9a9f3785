//! Synchronization (the error ring drained) and stream capture into graphs.

use super::*;

/// Ends a stream capture's count when the driver ended the capture (also when it was invalidated).
fn capture_ended(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS || r == cudarc::driver::sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED as CuResult {
        crate::arg_bounds::on_capture(false);
    }
    r
}

fn capture_began(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS {
        crate::arg_bounds::on_capture(true);
    }
    r
}

hooks! {
    real;
    // ---- synchronization: the error ring is drained here ----

    // The checked device heap is sized by this limit (device_heap.rs).
    cuCtxSetLimit(limit: i32, value: usize) {
        let r = real(limit, value);
        if r == CUDA_SUCCESS && limit == crate::device_heap::CU_LIMIT_MALLOC_HEAP_SIZE {
            if let Some(d) = state().devices.first() { crate::control::malloc_heap_limit_set(d, value as u64); }
        }
        r
    }
    cuCtxSynchronize() { after_sync(real()) }
    // CUDA 13's cuCtxSynchronize (what cuGetProcAddress returns for version 13000) takes the context.
    cuCtxSynchronize_v2(ctx: CUcontext) { after_sync(real(ctx)) }
    cuStreamQuery | cuStreamQuery_ptsz (stream: CUstream) { after_sync(real(stream)) }
    cuEventQuery(event: CUevent) { after_sync(real(event)) }
    cuStreamSynchronize | cuStreamSynchronize_ptsz (stream: CUstream) { after_sync(real(stream)) }
    cuEventSynchronize(event: CUevent) { after_sync(real(event)) }
    cuStreamBeginCapture_v2 | cuStreamBeginCapture_v2_ptsz (stream: CUstream, mode: i32) { capture_began(real(stream, mode)) }
    cuStreamBeginCaptureToGraph | cuStreamBeginCaptureToGraph_ptsz (stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, data: *const CUgraphEdgeData, n: usize, mode: i32) { capture_began(real(stream, graph, deps, data, n, mode)) }
    cuStreamEndCapture | cuStreamEndCapture_ptsz (stream: CUstream, graph: *mut CUgraph) { capture_ended(real(stream, graph)) }
}
