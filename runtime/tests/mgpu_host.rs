//! Pinned and managed memory in a process with two GPUs, end to end on the CPU: the preloaded
//! runtime on a two-GPU stand-in libcuda whose "device memory" is host memory and which models
//! each device's access rights as the CUDA VMM does (tests/fixtures/mgpu_fake_libcuda.c). Host
//! memory allocated while device 1 is current comes from device 1's pool (its slot of the span);
//! both GPUs may reach it while device 1's device memory stays device 1's; the CPU reads and
//! writes it; and with device 0 current its flags, a prefetch and its frees find the owner (a
//! second free is reported as a double free).

mod common;
use common::{gcc, runtime_or_skip};
use std::path::Path;
use std::process::Command;

#[test]
fn host_memory_of_device_1_is_every_gpus_and_its_owner_answers_on_device_0() {
    let Some(runtime) = runtime_or_skip() else {
        return;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mgpu-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = |f: &str| src.join(f).to_str().unwrap().to_string();
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-I", src.to_str().unwrap(), "-Wl,-soname,libcuda.so.1", "-o", &d("libcuda.so.1"), &s("mgpu_fake_libcuda.c"), "-ldl"]);
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    gcc(&["-o", &d("mgpu_host_app"), &s("mgpu_host_app.c"), &format!("-L{}", dir.display()), "-lcuda"]);
    let out = Command::new(dir.join("mgpu_host_app")).env("LD_LIBRARY_PATH", &dir).env("LD_PRELOAD", &runtime).env("GASAN_OPTIONS", "halt_on_error=0:report_format=json:verbosity=1").output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let want = [
        "alloc rc=0 0 0 0",
        // Each device's pool in its own slot; host memory from the current device's.
        "pools d0=0 d1=1 h1=1 m1=1 h0=0 (rc=0)",
        "cpu wrote h1=7 m1=9",
        // Host blocks are every GPU's; device memory is not granted to the other device.
        "readable h1 by0=1 by1=1 m1 by0=1 by1=1 h0 by1=1 d1 by0=0 d0 by1=0",
        // With device 0 current: device 1's pinned block's flags, a managed prefetch to device 1
        // (answered: the block stays in host memory), and the frees, found in device 1's pool.
        "flags rc=0 devicemap=1 prefetch rc=0",
        "free rc=0 0 again rc=1",
    ];
    for w in want {
        assert!(o.contains(w), "want `{w}` in\n{o}\n{e}");
    }
    assert!(!e.contains("cannot read"), "a host-access grant failed: {e}");
    let reports: Vec<serde_json::Value> = e.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 1, "{e}");
    assert_eq!(reports[0]["kind"].as_str(), Some("double-free"), "{}", reports[0]);
}
