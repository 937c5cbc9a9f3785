//! Contexts a program creates get the libraries' control blocks (runtime/src/control.rs,
//! `ControlBlocks::context_seen`), whichever creator made them: `cuCtxCreate_v4` (CUDA 12.5 and
//! later), and `cuCtxCreate_v3` / `_v2`, what `cuGetProcAddress("cuCtxCreate")` answers for the
//! CUDA versions before and what programs built with those headers link. Without a GPU: a small C
//! program creates contexts every way against a stand-in libcuda (tests/fixtures/ctx_fake_libcuda.c)
//! with libgasan_runtime.so preloaded; each creator must be gasan's hook, reach the driver's own
//! with the program's arguments, and gasan must register each new context once (it asks the
//! driver for the context's device, which the stand-in records), a failed create none.

mod common;
use common::{gcc, runtime_or_skip};
use std::path::Path;
use std::process::Command;

#[test]
fn every_context_creator_is_hooked_and_each_new_context_is_seen_once() {
    let Some(lib) = runtime_or_skip() else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("contexts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("libcuda.so.1");
    gcc(&["-shared", "-fPIC", "-o", fake.to_str().unwrap(), src.join("ctx_fake_libcuda.c").to_str().unwrap()]);
    let app = dir.join("ctx_app");
    gcc(&["-o", app.to_str().unwrap(), src.join("ctx_app.c").to_str().unwrap(), "-ldl"]);
    let run = |gasan: bool| {
        let mut c = Command::new(&app);
        c.env("LD_LIBRARY_PATH", &dir).env_remove("LD_PRELOAD").env_remove("GASAN_OPTIONS");
        if gasan {
            c.env("LD_PRELOAD", &lib).env("GASAN_OPTIONS", "verbosity=0");
        }
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "gasan={gasan}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let out = run(true);
    for v in ["v2", "v3", "v4"] {
        let want = format!("{v} gpa_rc=0 wrapped=1 rc=0 made=1");
        assert!(out.contains(&want), "cuCtxCreate_{v}: want `{want}` (gasan's hook, reaching the driver's with the program's arguments) in\n{out}");
    }
    assert!(out.contains("dlsym_v2 wrapped=1 again_rc=0 bad_rc=101"), "{out}");
    // Each context once, in creation order; the second create of the same context and the failed
    // one add nothing.
    assert!(out.contains("asked: v2 v3 v4 \n"), "gasan did not register each new context exactly once: {out}");

    // Without gasan the program gets the stand-in's own functions, and nobody asks.
    let native = run(false);
    assert!(native.contains("v2 gpa_rc=0 wrapped=0 rc=0 made=1") && native.contains("v3 gpa_rc=0 wrapped=0") && native.contains("dlsym_v2 wrapped=0"), "{native}");
    assert!(native.contains("asked: \n"), "{native}");
}
