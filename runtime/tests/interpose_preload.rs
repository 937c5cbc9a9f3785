//! End-to-end interposition without a GPU: a small C program does what cudart does (dlopen
//! libcuda.so.1, dlsym cuGetProcAddress_v2, fetch and call an entry point) against a stand-in
//! libcuda, with libgasan_runtime.so preloaded. The entry point it gets must be gasan's wrapper,
//! the wrapper must reach the real (stand-in) function, and RTLD_NEXT lookups must stay relative
//! to their caller despite gasan's dlsym.

mod common;
use common::{gcc, runtime_or_skip};
use std::path::Path;
use std::process::Command;

#[test]
fn cudart_style_lookup_gets_the_wrapper() {
    let Some(lib) = runtime_or_skip() else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("preload");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("libcuda.so.1");
    gcc(&["-shared", "-fPIC", "-o", fake.to_str().unwrap(), src.join("fake_libcuda.c").to_str().unwrap()]);
    let app = dir.join("app");
    gcc(&["-o", app.to_str().unwrap(), src.join("app.c").to_str().unwrap(), "-ldl"]);
    let out = Command::new(&app).env("LD_LIBRARY_PATH", &dir).env("LD_PRELOAD", &lib).env("GASAN_OPTIONS", "verbosity=0").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "app failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("gpa_rc=0"), "{stdout}");
    assert!(stdout.contains("wrapped=1"), "cuGetProcAddress did not return gasan's wrapper: {stdout}");
    assert!(stdout.contains("rc=0 fake_calls=1"), "wrapper did not reach the real function: {stdout}");
    assert!(stdout.contains("next_dlsym_is_ours=1"), "RTLD_NEXT resolved relative to the wrong object: {stdout}");
    assert!(stdout.contains("unknown=1"), "{stdout}");
    assert!(stdout.contains("tma_wrapped=1 tma_rc=0 tma_calls=1"), "dlsym(libcuda, cuTensorMapEncodeTiled), as Triton resolves it, must give gasan's hook, which reaches the driver's: {stdout}");

    // call_times=1: at exit, each call the program made through gasan, with its count, and the
    // driver's part of its time.
    let timed = Command::new(&app).env("LD_LIBRARY_PATH", &dir).env("LD_PRELOAD", &lib).env("GASAN_OPTIONS", "call_times=1").output().unwrap();
    let stderr = String::from_utf8_lossy(&timed.stderr);
    assert!(timed.status.success(), "{stderr}");
    assert!(stderr.contains("host time by call"), "{stderr}");
    for call in ["cuMemcpyHtoD_v2", "cuTensorMapEncodeTiled"] {
        let row = stderr.lines().find(|l| l.split_whitespace().nth(1) == Some(call)).unwrap_or_else(|| panic!("no row for {call}: {stderr}"));
        assert_eq!(row.split_whitespace().nth(2), Some("1"), "{call} was called once: {row}");
    }
    assert!(!String::from_utf8_lossy(&out.stderr).contains("host time by call"), "nothing is timed by default");

    // Without gasan the same program sees the stand-in's own function.
    let plain = Command::new(&app).env("LD_LIBRARY_PATH", &dir).output().unwrap();
    assert!(String::from_utf8_lossy(&plain.stdout).contains("wrapped=0"));
}

/// The runtime exports `sigaction` and `signal` (runtime/src/signals.rs, to keep its SIGSEGV
/// handler in front of the program's once managed memory is on the device). Before that, and for
/// every other signal, a program's handlers must be installed, read back and run exactly as
/// without it.
#[test]
fn signal_handlers_reach_libc_unchanged() {
    let Some(lib) = runtime_or_skip() else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("preload-signals");
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("signals");
    gcc(&["-o", app.to_str().unwrap(), src.join("signals.c").to_str().unwrap()]);
    let out = Command::new(&app).env("LD_PRELOAD", &lib).env("GASAN_OPTIONS", "verbosity=0").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "app failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("same=1 hits=11 prev_default=1 back=1"), "{stdout}");
    // The symbols are really gasan's in that process (else this test would prove nothing).
    let nm = Command::new("nm").args(["-D", "--defined-only", lib.to_str().unwrap()]).output().unwrap();
    let syms = String::from_utf8_lossy(&nm.stdout);
    assert!(syms.lines().any(|l| l.ends_with(" T sigaction")) && syms.lines().any(|l| l.ends_with(" T signal")), "not exported");
}
