//! What a launch costs gasan's hook on the CPU while a library's control block waits for a
//! context that is not current (docs/design.md, "Contexts": a library is written in each context
//! when it is current at a launch, and stays pending until every context seen has it), against
//! the same launches with nothing pending. No GPU: the runtime runs on the host-memory libcuda
//! stand-in of the tests (tests/fixtures/launch_fake_libcuda.c, built here with gcc), whose
//! `cuLaunchKernel` does nothing, so the numbers are the hook's own work.
//!
//!     cargo run --release -p gasan-runtime --example launch_cost [LAUNCHES]
//!
//! Prints ns per launch for each case. A micro-benchmark to read, not a test.

use gasan_runtime::device::LoadedHandle;
use std::ffi::c_void;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

type Launch = unsafe extern "C" fn(*mut c_void, u32, u32, u32, u32, u32, u32, u32, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> i32;

const CHILD: &str = "GASAN_LAUNCH_COST_CHILD";

fn main() {
    let launches: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    if std::env::var_os(CHILD).is_none() {
        // Build the stand-in driver and run this program again with it on the library path.
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let dir = std::env::temp_dir().join(format!("gasan-launch-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libcuda.so.1");
        let out = Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-I", src.to_str().unwrap(), "-o", lib.to_str().unwrap(), src.join("launch_fake_libcuda.c").to_str().unwrap(), "-ldl"])
            .output()
            .expect("gcc");
        assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
        let status = Command::new(std::env::current_exe().unwrap())
            .arg(launches.to_string())
            .env(CHILD, "1")
            .env("LD_LIBRARY_PATH", &dir)
            .env("GASAN_OPTIONS", "verbosity=0")
            .env_remove("LD_PRELOAD")
            .status()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::process::exit(status.code().unwrap_or(1));
    }
    let s = gasan_runtime::state::state();
    let launch: Launch = {
        let (_, addr) = gasan_runtime::hooks::table().into_iter().find(|(n, _)| *n == "cuLaunchKernel").expect("the hook");
        // SAFETY: the table's entry for cuLaunchKernel is the hook of that prototype.
        unsafe { std::mem::transmute::<usize, Launch>(addr) }
    };
    let (null, no_args) = (std::ptr::null_mut(), std::ptr::null_mut());
    let time = |what: &str| {
        for _ in 0..launches / 10 {
            // SAFETY: the stand-in's cuLaunchKernel ignores its arguments.
            unsafe { launch(null, 1, 1, 1, 32, 1, 1, 0, null, no_args, no_args) };
        }
        let t = Instant::now();
        for _ in 0..launches {
            // SAFETY: as above.
            unsafe { launch(null, 1, 1, 1, 32, 1, 1, 0, null, no_args, no_args) };
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(launches);
        println!("{what}: {ns:.1} ns per launch ({launches} launches)");
    };
    assert!(s.device().is_some(), "the runtime did not set its pool up on the stand-in driver");
    time("nothing pending");
    // A library loaded in the current context, and a second context seen (never current): the
    // library's block stays pending, waiting for that context.
    let library = 0x1000 as cudarc::driver::sys::CUlibrary;
    s.control.set(s, LoadedHandle::Library(library), 1);
    // SAFETY: the stand-in's exported byte; only its address is used, as a context handle.
    let other = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fake_other_context".as_ptr()) };
    assert!(!other.is_null(), "the stand-in driver is not loaded");
    s.control.context_seen(other.cast());
    assert!(s.control.any_pending(), "the library is not pending");
    time("a library pending in a context that is not current");
}
