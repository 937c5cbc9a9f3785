//! Launches (control blocks, bounds in arguments) and the kernel handles they name.

use super::*;

fn before_launch() {
    let s = state();
    if s.control.any_pending() {
        s.device();
        s.control.flush(&s.devices);
    }
}

/// A launch: pending control blocks written, then the driver called through `go` with the
/// argument array — with block bounds in the pointer arguments of a recorded checked kernel
/// (crate::arg_bounds), else the program's (an argument buffer in `extra`, the option off, a
/// kernel gasan did not see handed out).
fn launch(f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void, go: impl FnOnce(*mut *mut c_void) -> CuResult) -> CuResult {
    before_launch();
    let s = state();
    // Counted only for the summary that prints them (an atomic every thread shares, per launch).
    let count = s.opts.verbosity >= 1;
    if count {
        s.counters.launches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if !s.opts.arg_bounds || !extra.is_null() {
        return go(params);
    }
    // SAFETY: `params` is the launch's argument array for `f` (cuLaunchKernel's contract, which
    // the hook's caller follows), as with_bounds requires. (The pool is asked only for a checked
    // kernel's arguments: loading its module set the device runtime up.)
    unsafe {
        crate::arg_bounds::with_bounds(
            f.into(),
            params,
            |v| s.runtime_owning(v)?.alloc.accessible_granules(v),
            |array, tagged| {
                if tagged && count {
                    s.counters.launches_tagged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                go(array)
            },
        )
    }
}

/// Records the handle a getter just wrote to `out` (when it succeeded) for `owner`'s `name`.
fn record_function<T>(r: CuResult, out: Out<*mut T>, owner: crate::arg_bounds::Owner, name: CStrIn) -> CuResult
where
    crate::arg_bounds::Callable: From<*mut T>,
{
    if let (Some(h), Some(n)) = (out.written(r), name.get()) {
        crate::arg_bounds::on_function(owner, n, h.into());
    }
    r
}

/// A context the driver just created or retained (its call answered `r`) is one gasan has seen.
fn context_made(r: CuResult, out: Out<CUcontext>) -> CuResult {
    if let Some(ctx) = out.written(r) {
        state().control.context_seen(ctx);
    }
    r
}

/// Records, when the getter succeeded, that the handle it wrote to `out` names what `from` names
/// (`record`: crate::arg_bounds::on_kernel_function or on_library_module).
fn record_alias<T, F, H: From<*mut T>>(r: CuResult, out: Out<*mut T>, from: F, record: fn(F, H)) -> CuResult {
    if let Some(h) = out.written(r) {
        record(from, H::from(h));
    }
    r
}

hooks! {
    real;
    // ---- launches: control blocks of modules loaded before the pool existed; bounds in arguments ----

    cuLaunchKernel | cuLaunchKernel_ptsz (f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) {
        launch(f, params, extra, |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p, extra))
    }
    cuLaunchCooperativeKernel | cuLaunchCooperativeKernel_ptsz (f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void) {
        launch(f, params, std::ptr::null_mut(), |p| real(f, gx, gy, gz, bx, by, bz, shmem, stream, p))
    }
    cuLaunchKernelEx | cuLaunchKernelEx_ptsz (config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) { launch(f, params, extra, |p| real(config, f, p, extra)) }
    // ---- which kernels launches name (crate::arg_bounds) ----

    cuModuleGetFunction(out: Out<CUfunction>, module: CUmodule, name: CStrIn) { record_function(real(out, module, name), out, module.into(), name) }
    cuLibraryGetKernel(out: Out<CUkernel>, library: CUlibrary, name: CStrIn) { record_function(real(out, library, name), out, library.into(), name) }
    cuKernelGetFunction(out: Out<CUfunction>, kernel: CUkernel) { record_alias(real(out, kernel), out, kernel.into(), crate::arg_bounds::on_kernel_function) }
    cuLibraryGetModule(out: Out<CUmodule>, library: CUlibrary) { record_alias(real(out, library), out, library.into(), crate::arg_bounds::on_library_module) }
    cuModuleUnload(module: CUmodule) { crate::arg_bounds::on_unload(Some(module.into())); real(module) }
    cuLibraryUnload(library: CUlibrary) { crate::arg_bounds::on_unload(Some(library.into())); real(library) }
    cuCtxDestroy_v2(ctx: CUcontext) {
        crate::arg_bounds::on_unload(None);
        crate::prefetch::on_context_gone(Some(ctx));
        let r = real(ctx);
        if r == CUDA_SUCCESS { state().control.context_gone(ctx); }
        r
    }
    // ---- contexts appearing: libraries' control blocks are written in each (control.rs) ----
    cuCtxCreate_v4(out: Out<CUcontext>, params: *mut cudarc::driver::sys::CUctxCreateParams, flags: u32, dev: i32) { context_made(real(out, params, flags, dev), out) }
    // What cuGetProcAddress("cuCtxCreate") answers for CUDA 3.2 to 11.3 (_v2) and 11.4 to 12.4
    // (_v3), and what programs built with those headers link: contexts they create get the
    // libraries' control blocks as cuCtxCreate_v4's do. Checked against the prototypes copied
    // from cuda.h (hook_abi::legacy): cudarc has no binding of either.
    #[legacy] cuCtxCreate_v2(out: Out<CUcontext>, flags: u32, dev: i32) { context_made(real(out, flags, dev), out) }
    #[legacy] cuCtxCreate_v3(out: Out<CUcontext>, params: *mut cudarc::driver::sys::CUexecAffinityParam, count: i32, flags: u32, dev: i32) { context_made(real(out, params, count, flags, dev), out) }
    cuDevicePrimaryCtxRetain(out: Out<CUcontext>, dev: i32) { context_made(real(out, dev), out) }
    cuCtxSetCurrent(ctx: CUcontext) {
        let r = real(ctx);
        if r == CUDA_SUCCESS { state().control.context_seen(ctx); }
        r
    }
    cuCtxPushCurrent_v2(ctx: CUcontext) {
        let r = real(ctx);
        if r == CUDA_SUCCESS { state().control.context_seen(ctx); }
        r
    }
    cuDevicePrimaryCtxReset_v2(dev: i32) {
        crate::arg_bounds::on_unload(None);
        crate::prefetch::on_context_gone(None);
        let r = real(dev);
        if r == CUDA_SUCCESS { state().control.device_contexts_gone(dev); }
        r
    }
    cuDevicePrimaryCtxRelease_v2(dev: i32) {
        crate::arg_bounds::on_unload(None);
        let r = real(dev);
        // The context goes only with its last reference.
        if !crate::driver::result::device_primary_ctx_get_state(dev).is_ok_and(|(_, active)| active) {
            crate::prefetch::on_context_gone(None);
            state().control.device_contexts_gone(dev);
        }
        r
    }
}
