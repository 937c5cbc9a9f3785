//! The program's modules found in its loaded files and prepared from the cache ahead of their
//! loads, on real nvcc output: a shared library built by the pinned nvcc (static cudart, as nvcc
//! links by default) is loaded into this process, which has no GPU and no libcuda, so the driver's
//! answers are absent and the compute capability is given (90).
//!
//! Needs the pinned toolchain: `GASAN_CUDA_ROOT` (scripts/test.sh sets it); skipped (with a
//! message) without it. One test per process: the options are read once, from the environment.

mod common;

use gasan_runtime::{modules, prefetch};
use std::ffi::{c_void, CString};

const SRC: &str = r#"
__global__ void scale(float* a, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= s; }
__global__ void shift(float* a, const float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i + 1 < n) a[i] = b[i + 1]; }
extern "C" void touch() {}
"#;

#[test]
fn a_loaded_librarys_module_is_found_and_prepared_from_the_cache_once_cached() {
    let Some(common::CudaLib { root, dir: d, lib }) = common::cuda_lib("a_loaded_librarys_module_is_found_and_prepared_from_the_cache_once_cached", "prefetch-test", SRC) else { return };

    // Before anything reads the options (this test is alone in its process).
    std::env::set_var("GASAN_OPTIONS", format!("cache_dir={}:ptxas={}", d.join("cache").display(), root.join("bin/ptxas").display()));

    // Nothing in this test binary itself.
    assert!(prefetch::loaded_fatbins().is_empty());
    let name = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library nvcc built; its constructors register its fatbin with its own
    // static cudart, which calls no driver until a CUDA call (none is made).
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen libk.so");

    let found = prefetch::loaded_fatbins();
    assert_eq!(found.len(), 1, "one module in libk.so: {found:?}");
    let f = found[0];
    // SAFETY: loaded_fatbins names `f.len` readable bytes of the loaded library.
    let fatbin = unsafe { std::slice::from_raw_parts(f.addr as *const u8, f.len) };
    assert_eq!(&fatbin[..4], &gasan_instrument::container::FATBIN_MAGIC.to_le_bytes());
    let image = f.addr as *const c_void;
    let lookup = |cc| modules::CacheLookup::for_this_process(cc).expect("a lookup: cache directory and ptxas given");
    // Listing pins the library: with the test's own handle closed it stays loaded where it was
    // (the background thread reads it after listing, and its addresses key the preparations).
    // SAFETY: closing the handle this test opened; nothing of the library is in use.
    assert_eq!(unsafe { libc::dlclose(h) }, 0);
    assert_eq!(prefetch::loaded_fatbins(), found, "the listed library stays loaded at its address");

    // Cold: nothing is instrumented or compiled ahead.
    // SAFETY: as above, `f.len` bytes for the life of the process.
    assert!(unsafe { modules::prepare_cached(image, f.len, &lookup(90)) }.is_none());
    assert!(!d.join("cache").exists() || std::fs::read_dir(d.join("cache")).unwrap().count() == 0, "a cold lookup writes nothing");

    // The loader's path: instrumented, compiled by ptxas and cached.
    // SAFETY: the library's fatbin is a module image as the loaders take it.
    let now = unsafe { modules::prepare_now(image, 90, &Ok(Vec::new())) }.unwrap_or_else(|_| panic!("prepare_now refused the module"));
    let (cubin, _, _) = now.cubin.as_ref().expect("a cubin compiled with the pinned ptxas");

    // Warm: the same checked module and cubin, from the cache alone.
    // SAFETY: as above.
    let ahead = unsafe { modules::prepare_cached(image, f.len, &lookup(90)) }.expect("prepared from the cache");
    assert_eq!(ahead.checked.key, now.checked.key);
    assert_eq!(ahead.checked.target, "sm_90");
    let read = &ahead.cubin.as_ref().unwrap().0;
    assert_eq!(read.cubin(), cubin.cubin());
    // Read into the fatbin loaders take, in place: what build_elf_fatbin makes of the cubin, and
    // a fatbin whose one entry is it.
    assert_eq!(read.fatbin(), gasan_instrument::container::build_elf_fatbin(cubin.cubin(), 90, false).as_slice());
    let fb = gasan_instrument::container::Fatbin::parse(read.fatbin()).expect("a fatbin");
    assert_eq!(fb.entries.len(), 1);
    assert!(fb.entries[0].raw.starts_with(cubin.cubin()));
    // The device remembered in the cache, as the set-up thread writes it, gives the early
    // preparation the lookup of this process's set-up: the same entries, without a CUDA call.
    let this = lookup(90);
    let record = prefetch::DeviceRecord::of(&this);
    record.write(this.cache()).unwrap();
    assert_eq!(prefetch::DeviceRecord::read(this.cache()), Some(record.clone()));
    let opts = modules::options();
    let early = modules::CacheLookup::speculative(opts, this.cache().clone(), record.cc, record.aligned_pool, record.driver.clone(), |k| std::env::var_os(k)).expect("a speculative lookup");
    assert_eq!(early, this);
    // SAFETY: as above.
    let speculated = unsafe { modules::prepare_cached(image, f.len, &early) }.expect("prepared from the cache for the remembered device");
    assert_eq!(speculated.checked.key, now.checked.key);
    assert_eq!(speculated.cubin.as_ref().unwrap().0.cubin(), cubin.cubin());
    // Remembered wrongly (another pool layout): another lookup, which the set-up drops.
    let wrong = modules::CacheLookup::speculative(opts, this.cache().clone(), record.cc, !record.aligned_pool, record.driver.clone(), |k| std::env::var_os(k)).unwrap();
    assert_ne!(wrong, this);
    // Another GPU's key is another cubin: not in the cache.
    // SAFETY: as above.
    assert!(unsafe { modules::prepare_cached(image, f.len, &lookup(89)) }.is_none());
    // A length cut short of the fatbin is refused, not read past.
    // SAFETY: fewer bytes than are readable.
    assert!(unsafe { modules::prepare_cached(image, 64, &lookup(90)) }.is_none());
    let _ = std::fs::remove_dir_all(&d);
}
