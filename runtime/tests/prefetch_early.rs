//! The early preparation end to end, without a GPU: a library built by the pinned nvcc is loaded,
//! its module is made and cached as a loader would (prepare_now), the device this process's set-up
//! would find is remembered in the cache, and then, as in a new process: the early thread prepares
//! the module for the remembered device before any set-up, the set-up (`prefetch::start`, given
//! the compute capability a GPU would report) finds the same lookup, takes the early result over,
//! and the module's loader gets it. This process has no libcuda, so nothing is loaded into a
//! driver (no context to load into).
//!
//! Needs the pinned toolchain: `GASAN_CUDA_ROOT` (scripts/test.sh sets it); skipped (with a
//! message) without it. One test per process: the options are read once, and the early and
//! set-up preparations are each started once.

mod common;

use gasan_runtime::{modules, prefetch};
use std::ffi::{c_void, CString};

const SRC: &str = r#"
__global__ void scale(float* a, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= s; }
extern "C" void touch() {}
"#;

#[test]
fn a_module_prepared_before_set_up_is_taken_over_and_handed_to_its_loader() {
    let Some(common::CudaLib { root, dir: d, lib }) = common::cuda_lib("a_module_prepared_before_set_up_is_taken_over_and_handed_to_its_loader", "prefetch-early-test", SRC) else { return };
    // Before anything reads the options (this test is alone in its process).
    std::env::set_var("GASAN_OPTIONS", format!("verbosity=1:cache_dir={}:ptxas={}", d.join("cache").display(), root.join("bin/ptxas").display()));
    let name = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library nvcc built; its constructors register its fatbin with its own
    // static cudart, which calls no driver until a CUDA call (none is made).
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen libk.so");
    let found = prefetch::loaded_fatbins();
    assert_eq!(found.len(), 1, "one module in libk.so: {found:?}");
    let image = found[0].addr as *const c_void;

    // An earlier run: the module made and cached by its loader, the device remembered.
    // SAFETY: the library's fatbin is a module image as the loaders take it.
    let now = unsafe { modules::prepare_now(image, 90, &Ok(Vec::new())) }.unwrap_or_else(|_| panic!("prepare_now refused the module"));
    assert!(now.cubin.is_some(), "a cubin compiled with the pinned ptxas");
    let this = modules::CacheLookup::for_this_process(90).expect("a lookup");
    prefetch::DeviceRecord::of(&this).write(this.cache()).unwrap();

    // This run: the early preparation, as the runtime starts it when loaded (listing the loaded
    // library instead of the program, which has no fatbin).
    let opts = gasan_runtime::modules::options();
    // SAFETY: loaded_fatbins pins the library it lists: its fatbin stays readable.
    unsafe { prefetch::start_early_listing(opts, prefetch::loaded_fatbins) };
    // A loader that comes before a thread has listed its module prepares it itself (it never
    // waits for a list): here, as in a program, the threads' work comes before the first load.
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The set-up: its lookup is the remembered one, so the early result is taken over (waiting
    // for it if the early thread is still at it).
    prefetch::start(90);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: as above.
    let taken = unsafe { prefetch::take(image) }.expect("the loader gets the module prepared ahead");
    assert_eq!(taken.checked.key, now.checked.key);
    assert_eq!(taken.checked.arch, 90);
    assert_eq!(taken.cubin.as_ref().unwrap().0.cubin(), now.cubin.as_ref().unwrap().0.cubin());
    // Taken once: a second load of the same module prepares it itself.
    // SAFETY: as above.
    assert!(unsafe { prefetch::take(image) }.is_none());
    // The record stays the one written (the set-up found the same device).
    assert_eq!(prefetch::DeviceRecord::read(this.cache()), Some(prefetch::DeviceRecord::of(&this)));
    let _ = std::fs::remove_dir_all(&d);
}
