//! A stream-ordered allocation made on a thread that never made a context current (PyTorch's
//! cudaMallocAsync backend allocates so), as the process's first use of the GPU, end to end on the
//! CPU: the preloaded runtime on a host-memory stand-in libcuda whose contexts are current per
//! thread (tests/fixtures/thread_ctx_fake_libcuda.c). The allocation must come from gasan's pool
//! (set up then, in the stream's context), so that a host call past its end is an overflow and one
//! after its stream-ordered free (on that thread too) a use after free. (On the H100, 2026-12-05,
//! drvapp's thread_overflow went unreported: the pool was never set up for such a call, which went
//! to the driver unchecked.)

mod common;
use common::{gcc, runtime_or_skip};
use std::path::Path;
use std::process::Command;

#[test]
fn the_first_allocation_from_a_thread_without_a_context_is_the_pools() {
    let Some(runtime) = runtime_or_skip() else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("thread-ctx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = |f: &str| src.join(f).to_str().unwrap().to_string();
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-I", src.to_str().unwrap(), "-Wl,-soname,libcuda.so.1", "-o", &d("libcuda.so.1"), &s("thread_ctx_fake_libcuda.c"), "-ldl"]);
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    gcc(&["-o", &d("thread_ctx_app"), &s("thread_ctx_app.c"), &format!("-L{}", dir.display()), "-lcuda", "-lpthread"]);
    let run = |preload: Option<&Path>| {
        let mut c = Command::new(dir.join("thread_ctx_app"));
        c.env("LD_LIBRARY_PATH", &dir).env("GASAN_OPTIONS", "halt_on_error=0:report_format=json");
        if let Some(p) = preload {
            c.env("LD_PRELOAD", p);
        }
        let out = c.output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // Natively (the stand-in's own allocation): every call succeeds, nothing is reported.
    let (o, e) = run(None);
    assert!(o.contains("alloc rc=0 context=0") && o.contains("set past the end rc=0") && o.contains("set after free rc=0"), "{o}\n{e}");
    let (o, e) = run(Some(&runtime));
    for w in ["alloc rc=0 context=0", "set in bounds rc=0", "free rc=0"] {
        assert!(o.contains(w), "want `{w}` in\n{o}\n{e}");
    }
    assert!(!o.contains("set past the end rc=0") && !o.contains("set after free rc=0"), "the bad sets went to the driver:\n{o}\n{e}");
    let reports: Vec<serde_json::Value> = e.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = reports.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds, ["heap-buffer-overflow", "heap-use-after-free"], "{e}");
    assert!(!e.contains("WARNING"), "{e}");
}
