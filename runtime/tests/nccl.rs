//! NCCL interposed (runtime/src/hooks/nccl.rs, issue 40 item 4), without a GPU:
//! - the spans of NCCL's calls checked against the allocator on the host pool backend: an
//!   all-reduce one element past its receive buffer, an all-gather whose receive buffer holds one
//!   element too few per rank, a buffer already freed, each described as the report names it;
//! - a stand-in libnccl.so.2 (tests/fixtures/nccl_fake.c) called the three ways programs reach
//!   NCCL (linked; `dlopen` + `dlsym` on the handle; through a library opened `RTLD_LOCAL` that
//!   links libnccl, as PyTorch's libtorch_cuda does) with the runtime preloaded: each call reaches
//!   gasan's wrapper and then NCCL with the program's own arguments, and the exit summary counts
//!   the buffers outside gasan's pool (no GPU here, so all of them) and the calls it could not check;
//! - the runtime's own pool, set up by the preloaded runtime on a stand-in libcuda whose device
//!   memory is host memory (tests/fixtures/nccl_fake_libcuda.c): the program's cuMemAlloc'd buffers
//!   handed to the stand-in libnccl with an over-long count (also through NCCL 2.30's
//!   `ncclAllReduceConfig`), freed, or one element short per rank are reported naming the call
//!   and never reach NCCL (the process stops, or with `halt_on_error=0` the call answers
//!   ncclInvalidArgument); the clean call reaches it; NCCL's own memory (`ncclMemAlloc`, mapped
//!   by the stand-in with the stand-in driver's cuMem*) is known, counted, and its bounds checked
//!   by NCCL's calls and host copies; and what
//!   NCCL's buffer registration asks of a pool buffer (address range, pointer attributes,
//!   allocation handle) answers for the allocation, while the stand-in driver answers the chunk.

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, Allocator, HostStack};
use gasan_runtime::hooks::nccl::{buffers, element_size, Buffer, Op, Shape};
use gasan_runtime::options::Options;
use gasan_runtime::report::{describe, Report};
use gasan_uvm::{HostBackend, Pool, PoolConfig};
mod common;
use common::{gcc, runtime_or_skip};
use std::path::{Path, PathBuf};
use std::process::Command;

fn allocator() -> Allocator {
    let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 64 << 30, shift: Scale::S8.shift(), hints: vec![], max_size: 0, tags: 1 }).unwrap();
    Allocator::new(pool, &Options { quarantine_size_mb: 64, ..Options::default() })
}

/// The report of the first bad buffer of a call, as the wrapper makes it (None: all in bounds).
fn first_bad(a: &Allocator, call: &str, bufs: &[Buffer]) -> Option<Report> {
    bufs.iter().find_map(|b| {
        a.check_range(b.addr, b.len).err().map(|e| Report::Api { call: format!("{call} ({})", b.role), addr: b.addr, len: b.len, write: b.write, desc: e.desc, stack: HostStack::default() })
    })
}

const ONE_RANK: Shape = Shape { nranks: 1, rank: 0 };

#[test]
fn an_allreduce_one_element_past_its_receive_buffer_is_a_heap_buffer_overflow() {
    let a = allocator();
    let n = 1000u64;
    let f32 = element_size(7).unwrap();
    let send = a.alloc((n + 1) * f32, None).unwrap();
    let recv = a.alloc(n * f32, None).unwrap();
    assert!(first_bad(&a, "ncclAllReduce", &buffers(Op::AllReduce, send, recv, n, f32, ONE_RANK)).is_none(), "the clean call");
    let r = first_bad(&a, "ncclAllReduce", &buffers(Op::AllReduce, send, recv, n + 1, f32, ONE_RANK)).expect("reported");
    let d = describe(&r);
    assert_eq!(d.kind, "heap-buffer-overflow");
    assert_eq!(d.summary, "heap-buffer-overflow in ncclAllReduce (recvbuff)");
    assert_eq!(d.fields["access"], "write");
    assert_eq!(d.fields["size"], (n + 1) * f32);
    assert_eq!(d.fields["bad_address"], format!("{:#x}", recv + n * f32));
    assert!(d.body.contains(&format!("is located 0 bytes after {}-byte region", n * f32)), "{}", d.body);
    let Report::Api { desc, .. } = &r else { unreachable!() };
    assert!(matches!(desc.kind, AddrKind::OverflowRight { distance: 0 }), "{:?}", desc.kind);
}

#[test]
fn per_rank_spans_catch_a_receive_buffer_one_element_short_per_communicator() {
    let a = allocator();
    let four = Shape { nranks: 4, rank: 2 };
    let (count, f64) = (256u64, element_size(8).unwrap());
    let send = a.alloc(count * f64, None).unwrap();
    let recv_ok = a.alloc(4 * count * f64, None).unwrap();
    let recv_short = a.alloc((4 * count - 1) * f64, None).unwrap();
    assert!(first_bad(&a, "ncclAllGather", &buffers(Op::AllGather, send, recv_ok, count, f64, four)).is_none());
    let r = first_bad(&a, "ncclAllGather", &buffers(Op::AllGather, send, recv_short, count, f64, four)).expect("reported");
    assert_eq!(describe(&r).summary, "heap-buffer-overflow in ncclAllGather (recvbuff)");
    // Reduce-scatter's send buffer is the per-rank one: the same short buffer as its input.
    let r = first_bad(&a, "ncclReduceScatter", &buffers(Op::ReduceScatter, recv_short, send, count, f64, four)).expect("reported");
    let d = describe(&r);
    assert_eq!((d.summary.as_str(), &d.fields["access"]), ("heap-buffer-overflow in ncclReduceScatter (sendbuff)", &serde_json::json!("read")));
    // On one rank the same counts fit.
    assert!(first_bad(&a, "ncclAllGather", &buffers(Op::AllGather, send, recv_short, count, f64, ONE_RANK)).is_none());
}

#[test]
fn a_freed_buffer_is_a_use_after_free_and_memory_outside_the_pool_is_not_judged() {
    let a = allocator();
    let buf = a.alloc(4096, None).unwrap();
    a.free(buf, None).unwrap();
    let r = first_bad(&a, "ncclBroadcast", &buffers(Op::Broadcast { root: 0 }, buf, buf, 1024, 4, ONE_RANK)).expect("reported");
    let d = describe(&r);
    assert_eq!(d.kind, "heap-use-after-free");
    assert_eq!(d.summary, "heap-use-after-free in ncclBroadcast (sendbuff)");
    // NCCL's own ncclMemAlloc memory (a VMM mapping outside the pool): passes, whatever its length.
    let (base, size, _) = a.control_fields();
    let outside = base + size + (1 << 30);
    assert!(!a.owns(outside));
    assert!(first_bad(&a, "ncclAllReduce", &buffers(Op::AllReduce, outside, outside, u64::MAX / 8, 4, ONE_RANK)).is_none());
}

// ---- the stand-in libnccl under the preloaded runtime ----

struct Built {
    dir: PathBuf,
    app: PathBuf,
    linked: PathBuf,
    pool_app: PathBuf,
}

fn build() -> Built {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nccl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = |f: &str| src.join(f).to_str().unwrap().to_string();
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", &d("libnccl.so.2"), &s("nccl_fake.c")]);
    std::os::unix::fs::symlink("libnccl.so.2", dir.join("libnccl.so")).unwrap();
    let l = format!("-L{}", dir.display());
    gcc(&["-shared", "-fPIC", "-o", &d("libnccl_user.so"), &s("nccl_user.c"), &l, "-lnccl"]);
    gcc(&["-o", &d("nccl_app"), &s("nccl_app.c"), "-ldl"]);
    gcc(&["-DLINKED", "-o", &d("nccl_app_linked"), &s("nccl_app.c"), &l, "-lnccl"]);
    // The host-memory driver lives in a directory of its own: only the pool program loads it.
    let cuda = dir.join("cuda");
    std::fs::create_dir_all(&cuda).unwrap();
    let c = |f: &str| cuda.join(f).to_str().unwrap().to_string();
    gcc(&["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", &c("libcuda.so.1"), &s("nccl_fake_libcuda.c"), "-ldl"]);
    std::os::unix::fs::symlink("libcuda.so.1", cuda.join("libcuda.so")).unwrap();
    gcc(&["-o", &d("nccl_pool_app"), &s("nccl_pool_app.c"), &format!("-L{}", cuda.display()), &l, "-lcuda", "-lnccl"]);
    Built { app: dir.join("nccl_app"), linked: dir.join("nccl_app_linked"), pool_app: dir.join("nccl_pool_app"), dir }
}

fn built() -> &'static Built {
    static B: std::sync::OnceLock<Built> = std::sync::OnceLock::new();
    B.get_or_init(build)
}

/// Runs the program in `mode`, with the runtime preloaded at `verbosity=1` when `gasan`;
/// returns (stdout, stderr).
fn run(b: &Built, runtime: &Path, mode: &str, gasan: bool) -> (String, String) {
    let mut c = Command::new(if mode == "linked" { &b.linked } else { &b.app });
    match mode {
        "handle" => c.args([mode, b.dir.join("libnccl.so.2").to_str().unwrap()]),
        "dependency" => c.args([mode, b.dir.join("libnccl_user.so").to_str().unwrap()]),
        _ => c.arg(mode),
    };
    c.env("LD_LIBRARY_PATH", &b.dir).env_remove("LD_PRELOAD").env_remove("GASAN_OPTIONS");
    if gasan {
        c.env("LD_PRELOAD", runtime).env("GASAN_OPTIONS", "verbosity=1");
    }
    let out = c.output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{mode} gasan={gasan}: {o}\n{e}");
    (o, e)
}

#[test]
fn every_way_of_reaching_nccl_reaches_gasans_wrapper_and_then_nccl_unchanged() {
    let Some(runtime) = runtime_or_skip() else { return };
    let b = built();
    let (s, r) = ("0x10000", "0x20000");
    // What NCCL got, in order; `before` calls came first (the dependency's own).
    let want = |before: u32| {
        let c = |k: u32| k + before;
        [
            format!("allreduce rc=0 calls={} last=ncclAllReduce send={s} recv={r} count=10 datatype=7", c(1)),
            format!("allgather rc=0 calls={} last=ncclAllGather send={s} recv={r} count=10 datatype=7", c(2)),
            format!("unknown_datatype rc=0 calls={} last=ncclAllReduce send={s} recv={r} count=10 datatype=99", c(3)),
            format!("broken_comm rc=0 calls={} last=ncclAllGather send={s} recv={r} count=10 datatype=7", c(4)),
            format!("send rc=0 calls={} last=ncclSend send={s} recv=(nil) count=5 datatype=8", c(5)),
            format!("recv rc=0 calls={} last=ncclRecv send=(nil) recv={r} count=5 datatype=8", c(6)),
            format!("register rc=0 calls={} last=ncclCommRegister send={s} recv=(nil) count=4096 datatype=-1", c(7)),
            "handle_ok=1".to_string(),
            format!("memalloc rc=0 calls={} ok=1", c(8)),
            format!("allreduce_in_nccl_mem rc=0 calls={} last=ncclAllReduce", c(9)),
            format!("memfree rc=0 calls={}", c(10)),
        ]
    };
    for mode in ["linked", "handle", "dependency"] {
        let (native, _) = run(b, &runtime, mode, false);
        assert!(native.contains("wrapped=0"), "{mode}: without gasan the program gets NCCL's own function: {native}");
        let (out, err) = run(b, &runtime, mode, true);
        assert!(out.contains("wrapped=1"), "{mode}: not gasan's wrapper: {out}");
        for w in want(u32::from(mode == "dependency")) {
            assert!(out.contains(&w), "{mode}: NCCL did not get the program's call: want `{w}` in\n{out}");
            assert!(native.contains(&w), "{mode}: the stand-in answers differently without gasan: `{w}` in\n{native}");
        }
        let calls = if mode == "dependency" { 9 } else { 8 };
        // Buffers outside the pool: 2 + 2 (the all-reduce and all-gather), 1 + 1 (send, recv), 1
        // (the registration), and the dependency's all-reduce's 2; the all-reduce in
        // ncclMemAlloc's memory has 2 there (no GPU here, so no pool).
        let outside = if mode == "dependency" { 9 } else { 7 };
        let summary = format!("==gasan== NCCL: {calls} calls; 0 buffers checked against gasan's pool, 2 against ncclMemAlloc's bounds, {outside} elsewhere passed unchecked");
        assert!(err.contains(&summary), "{mode}: want `{summary}` in\n{err}");
        assert!(err.contains("2 calls not checked (a datatype or communicator gasan could not read); ncclMemAlloc: 1 allocations outside the pool, known to gasan, 1 freed"), "{mode}: {err}");
        assert!(err.contains("0 NCCL (ncclMemAlloc) allocations live"), "{mode}: {err}");
        if mode == "dependency" {
            assert!(out.contains(&format!("user_allreduce rc=0 calls=1 last=ncclAllReduce send={s} recv={r} count=10 datatype=7")), "{out}");
            // As without gasan: libnccl opened RTLD_LOCAL is not found through RTLD_DEFAULT.
            assert!(out.contains("default_finds_allgather=0") && native.contains("default_finds_allgather=0"), "{out}");
        }
    }
}

/// Runs the pool program in `mode` under the runtime with `options`: (exit code, stdout, stderr).
fn run_pool(b: &Built, runtime: &Path, mode: &str, options: &str) -> (i32, String, String) {
    let path = format!("{}:{}", b.dir.join("cuda").display(), b.dir.display());
    let out = Command::new(&b.pool_app).arg(mode).env("LD_LIBRARY_PATH", path).env("LD_PRELOAD", runtime).env("GASAN_OPTIONS", options).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The JSON reports in an output.
fn json_reports(err: &str) -> Vec<serde_json::Value> {
    err.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[test]
fn bad_buffers_from_gasans_pool_are_reported_and_never_reach_nccl() {
    let Some(runtime) = runtime_or_skip() else { return };
    let b = built();
    // The clean call: both buffers checked in the pool, forwarded, nothing reported.
    let (rc, out, err) = run_pool(b, &runtime, "clean", "verbosity=1");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("clean rc=0 calls=1"), "{out}\n{err}");
    assert!(!err.contains("ERROR: GPUAddressSanitizer"), "{err}");
    assert!(err.contains("==gasan== NCCL: 1 calls; 2 buffers checked against gasan's pool, 0 against ncclMemAlloc's bounds, 0 elsewhere"), "the buffers are the pool's: {err}");
    // One element past the receive buffer: the process stops with the report (halt_on_error=1).
    let (rc, out, err) = run_pool(b, &runtime, "overflow", "");
    assert_eq!(rc, 1, "{out}\n{err}");
    assert!(!out.contains("overflow rc="), "the call returned: {out}");
    assert!(err.contains("WRITE of size 4004 at ") && err.contains(" by host call ncclAllReduce (recvbuff)"), "{err}");
    assert!(err.contains("is located 0 bytes after 4000-byte region"), "{err}");
    assert!(err.contains("SUMMARY: GPUAddressSanitizer: heap-buffer-overflow in ncclAllReduce (recvbuff)"), "{err}");
    // Recover mode: reported, not forwarded, answered ncclInvalidArgument.
    for (mode, kind, call, size) in [
        ("overflow", "heap-buffer-overflow", "ncclAllReduce (recvbuff)", 4004),
        ("freed", "heap-use-after-free", "ncclAllReduce (recvbuff)", 4000),
        ("allgather", "heap-buffer-overflow", "ncclAllGather (recvbuff)", 16000),
        ("config", "heap-buffer-overflow", "ncclAllReduceConfig (recvbuff)", 4004),
    ] {
        let (rc, out, err) = run_pool(b, &runtime, mode, "halt_on_error=0:report_format=json");
        // The program runs on; its exit status says errors were reported (exitcode=1).
        assert_eq!(rc, 1, "{mode}: {out}\n{err}");
        assert!(out.contains(&format!("{mode} rc=4 calls=0")), "{mode}: NCCL got the call or the error is not ncclInvalidArgument: {out}");
        let reps = json_reports(&err);
        assert_eq!(reps.len(), 1, "{mode}: {err}");
        let r = &reps[0];
        assert_eq!((r["kind"].as_str(), r["call"].as_str(), r["access"].as_str(), r["size"].as_u64()), (Some(kind), Some(call), Some("write"), Some(size)), "{mode}: {r}");
    }
}

#[test]
fn what_ncclcommregister_asks_of_a_pool_buffer_answers_for_its_allocation() {
    let Some(runtime) = runtime_or_skip() else { return };
    let (rc, out, err) = run_pool(built(), &runtime, "ranges", "");
    assert_eq!(rc, 0, "{out}\n{err}");
    // An address 100 bytes into the 4000-byte receive buffer: its allocation's range from both
    // queries, legacy IPC (gasan serves it), no VMM handle (NCCL then exports by legacy IPC, whose
    // bounds agree with the range; docs/design.md). The stand-in driver itself answers the 2 MiB
    // chunk, as the driver does for a VMM mapping.
    let pool = "pool address_range rc=0 base=+0 size=4000 attributes rc=0 start=+0 size=4000 legacy_ipc=1 attributes_v rc=0 start=+0 size=4000 legacy_ipc=1 retain rc=1";
    assert!(out.contains(pool), "want `{pool}` in\n{out}");
    // Memory outside the pool: the driver's answers, untouched.
    let outside = "outside address_range rc=0 base=+0 size=2097152 attributes rc=0 start=+0 size=2097152 legacy_ipc=0 attributes_v rc=0 start=+0 size=2097152 legacy_ipc=0 retain rc=0";
    assert!(out.contains(outside), "want `{outside}` in\n{out}");
}

#[test]
fn vmm_mappings_outside_the_pool_are_known_and_pass_unchecked() {
    let Some(runtime) = runtime_or_skip() else { return };
    // The program's own mappings (as NCCL's internal buffers, XLA's platform allocator): copies
    // into them pass unchecked and unreported; the one still mapped at exit is counted.
    let (rc, out, err) = run_pool(built(), &runtime, "vmm", "verbosity=1");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("map0 rc=0 copy rc=0") && out.contains("map1 rc=0 copy rc=0") && out.contains("unmap rc=0"), "{out}\n{err}");
    assert!(!err.contains("ERROR: GPUAddressSanitizer"), "{err}");
    assert!(err.contains("; 1 cuMemMap mappings outside the pool (known, not checked)"), "{err}");
}

#[test]
fn ncclmemalloc_memory_is_known_and_its_bounds_are_checked() {
    let Some(runtime) = runtime_or_skip() else { return };
    let b = built();
    // Two ncclMemAlloc'd buffers of 4000 bytes (VMM memory outside the pool): an all-reduce into
    // the first and a memset of all of it are in bounds (not wild, not reported), and NCCL gets
    // the call; the first is freed, the second still live at exit.
    let (rc, out, err) = run_pool(b, &runtime, "ncclmem", "verbosity=1");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("memset rc=0") && out.contains("memfree rc=0") && out.contains("ncclmem rc=0 calls=4"), "{out}\n{err}");
    assert!(!err.contains("ERROR: GPUAddressSanitizer"), "{err}");
    let nccl = "==gasan== NCCL: 1 calls; 1 buffers checked against gasan's pool, 1 against ncclMemAlloc's bounds, 0 elsewhere passed unchecked";
    assert!(err.contains(nccl), "want `{nccl}` in\n{err}");
    assert!(err.contains("ncclMemAlloc: 2 allocations outside the pool, known to gasan, 1 freed"), "{err}");
    // NCCL mapped each with cuMemMap: its ncclMemAlloc record (the size asked) replaced the
    // mapping's, and the unmap at ncclMemFree left the freed record alone.
    assert!(err.contains("0 other-GPU, 1 NCCL (ncclMemAlloc) allocations live; 0 cuMemMap mappings outside the pool"), "{err}");
    // One element past it: reported against the size asked for, never forwarded.
    let (rc, out, err) = run_pool(b, &runtime, "ncclmem_overflow", "");
    assert_eq!(rc, 1, "{out}\n{err}");
    assert!(!out.contains("ncclmem_overflow rc="), "the call returned: {out}");
    assert!(err.contains("WRITE of size 4004 at ") && err.contains(" by host call ncclAllReduce (recvbuff)"), "{err}");
    assert!(err.contains("is located 0 bytes after 4000-byte region"), "{err}");
    assert!(err.contains("SUMMARY: GPUAddressSanitizer: heap-buffer-overflow in ncclAllReduce (recvbuff)"), "{err}");
    // After ncclMemFree: an all-reduce into the freed buffer is a use after free, never forwarded;
    // the clean twin (a new ncclMemAlloc used, the other buffer copied into) is silent.
    let (rc, out, err) = run_pool(b, &runtime, "ncclmem_again", "");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.contains("ncclmem_again rc=0 calls=5") && !err.contains("ERROR: GPUAddressSanitizer"), "{out}\n{err}");
    let (rc, out, err) = run_pool(b, &runtime, "ncclmem_freed", "halt_on_error=0:report_format=json");
    assert_eq!(rc, 1, "{out}\n{err}");
    assert!(out.contains("ncclmem_freed rc=4 calls=3"), "the call was forwarded or answered otherwise: {out}");
    let reps = json_reports(&err);
    assert_eq!(reps.len(), 1, "{err}");
    let r = &reps[0];
    assert_eq!((r["kind"].as_str(), r["call"].as_str(), r["access"].as_str(), r["size"].as_u64()), (Some("heap-use-after-free"), Some("ncclAllReduce (recvbuff)"), Some("write"), Some(4000)), "{r}");
    assert_eq!(r["location"]["space"].as_str(), Some("global"), "{r}");
    for (mode, call, rc_line) in [("ncclmem_overflow", "ncclAllReduce (recvbuff)", "ncclmem_overflow rc=4 calls=2"), ("ncclmem_copy", "cuMemcpyHtoD", "ncclmem_copy rc=1 calls=2")] {
        let (rc, out, err) = run_pool(b, &runtime, mode, "halt_on_error=0:report_format=json");
        assert_eq!(rc, 1, "{mode}: {out}\n{err}");
        assert!(out.contains(rc_line), "{mode}: the call was forwarded or answered otherwise: {out}");
        let reps = json_reports(&err);
        assert_eq!(reps.len(), 1, "{mode}: {err}");
        let r = &reps[0];
        assert_eq!((r["kind"].as_str(), r["call"].as_str(), r["access"].as_str(), r["size"].as_u64()), (Some("heap-buffer-overflow"), Some(call), Some("write"), Some(4004)), "{mode}: {r}");
        assert_eq!(r["location"]["space"].as_str(), Some("global"), "{mode}: NCCL's memory is device memory: {r}");
    }
}
