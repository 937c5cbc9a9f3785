//! gasan-uvm: pool selftest and mapping benchmarks for kernel and tools developers.

use clap::{Parser, Subcommand, ValueEnum};
use gasan_uvm::host::faults_in_child;
use gasan_uvm::ipc::{Exporter, IpcHandle};
use gasan_uvm::{Backend, BackendCall, CountedBackend, HostBackend, Pool, PoolConfig, Prot, Stream, UvmError, VmmBackend};
use std::ffi::c_void;
use std::process::ExitCode;
use std::time::Instant;

#[path = "gasan-uvm/kmod_selftest.rs"]
mod kmod_selftest;

#[derive(Parser)]
#[command(name = "gasan-uvm", version, about = "gasan GPU VA pool: selftest and benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum BackendKind {
    Vmm,
    Host,
    Kmod,
}

#[derive(Subcommand)]
enum Cmd {
    /// Exercise every pool operation and verify each mapping through the memory itself.
    Selftest {
        #[arg(long, value_enum, default_value = "host")]
        backend: BackendKind,
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(7..=8))]
        scale: u32,
        /// Pool size in GiB (default: as large as reservations allow).
        #[arg(long)]
        pool_gib: Option<u64>,
        /// Tag windows the pool is split into (a power of two; 1: none).
        #[arg(long, default_value_t = 4)]
        tags: u64,
    },
    /// Check a loaded gasan-patched nvidia-uvm (kmod-patch/README.md): every ioctl valid and
    /// malformed, each mapping kind through a GPU kernel, fault events, GPU reset, process exit.
    /// Exits 77 (skipped) when the patched module is not loaded.
    KmodSelftest {
        /// Internal: the child that exits with live mappings.
        #[arg(long, hide = true)]
        exit_with_live_mappings: bool,
    },
    /// Share a pool allocation with other processes (this program again): import over the
    /// exporter's socket, the same bytes on both sides, the allocation's bounds checked through
    /// the importer's shadow, an importer killed while it holds the import, a withdrawn export
    /// refused.
    IpcSelftest {
        #[arg(long, value_enum, default_value = "host")]
        backend: BackendKind,
        /// Internal: the importing process, driven by lines on stdin.
        #[arg(long, hide = true)]
        importer: bool,
    },
    /// Time commit / decommit / retire / alias per chunk and pool setup.
    Bench {
        #[arg(long, value_enum, default_value = "host")]
        backend: BackendKind,
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(7..=8))]
        scale: u32,
        #[arg(long, default_value_t = 64)]
        iters: u32,
        /// Tag windows the pool is split into (a power of two; 1: none).
        #[arg(long, default_value_t = 1)]
        tags: u64,
    },
    /// Time the commit and the retirement of whole blocks of 2, 16 and 64 MiB, each chunk its own
    /// physical handle or wide runs, with the backend calls each costs (issue 39).
    BenchBlocks {
        #[arg(long, value_enum, default_value = "host")]
        backend: BackendKind,
        #[arg(long, default_value_t = 64)]
        iters: u32,
    },
}

/// The driver entry point `name`, or an error naming it.
fn entry_point(resolve: &gasan_uvm::Resolver, name: &std::ffi::CStr) -> Result<*mut c_void, String> {
    let p = resolve(name);
    if p.is_null() {
        Err(format!("no {name:?}"))
    } else {
        Ok(p)
    }
}

/// Creates and makes current the primary context of device 0 (the runtime uses the app's context).
fn cuda_context(resolve: &gasan_uvm::Resolver) -> Result<(), String> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type DevGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Retain = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;
    type SetCur = unsafe extern "C" fn(*mut c_void) -> i32;
    let f = |n: &std::ffi::CStr| entry_point(resolve, n);
    // SAFETY: driver entry points with their documented signatures.
    unsafe {
        let init: Init = std::mem::transmute(f(c"cuInit")?);
        let get: DevGet = std::mem::transmute(f(c"cuDeviceGet")?);
        let retain: Retain = std::mem::transmute(f(c"cuDevicePrimaryCtxRetain")?);
        let set: SetCur = std::mem::transmute(f(c"cuCtxSetCurrent")?);
        let r = init(0);
        if r != 0 {
            return Err(format!("cuInit failed: {r}"));
        }
        let mut dev = 0;
        get(&mut dev, 0);
        let mut ctx = std::ptr::null_mut();
        let r = retain(&mut ctx, dev);
        if r != 0 {
            return Err(format!("cuDevicePrimaryCtxRetain failed: {r}"));
        }
        set(ctx);
    }
    Ok(())
}

fn make_backend(kind: BackendKind) -> Result<Box<dyn Backend>, String> {
    match kind {
        BackendKind::Host => Ok(Box::new(HostBackend::new(2 << 20))),
        BackendKind::Kmod => {
            let r = gasan_uvm::default_resolver().map_err(|e| e.to_string())?;
            cuda_context(&r)?;
            let vmm = VmmBackend::new(0, gasan_uvm::DriverFns::resolve(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            match gasan_uvm::KmodBackend::probe(vmm) {
                Ok(k) => {
                    let c = k.capabilities();
                    eprintln!("kmod: gasan nvidia-uvm ABI {}, caps {:#x}, alias VA below {:#x}", c.abi_version, c.caps, c.max_va);
                    Ok(Box::new(k))
                }
                Err((_vmm, e)) => Err(format!("kmod backend unavailable: {e} (gasan-run falls back to the CUDA VMM)")),
            }
        }
        BackendKind::Vmm => {
            let r = gasan_uvm::default_resolver().map_err(|e| e.to_string())?;
            cuda_context(&r)?;
            Ok(Box::new(VmmBackend::new(0, gasan_uvm::DriverFns::resolve(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?))
        }
    }
}

struct Table {
    rows: Vec<(String, bool, String)>,
}
impl Table {
    fn row(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(d) => self.rows.push((name.into(), true, d)),
            Err(d) => self.rows.push((name.into(), false, d)),
        }
    }
}

fn expect_err(r: Result<(), UvmError>, what: &str) -> Result<String, String> {
    match r {
        Err(e) => Ok(format!("refused: {e}")),
        Ok(()) => Err(format!("{what} was accepted")),
    }
}

fn selftest(kind: BackendKind, scale: u32, pool_gib: Option<u64>, tags: u64) -> Result<bool, String> {
    let backend = make_backend(kind)?;
    let host = kind == BackendKind::Host;
    let t0 = Instant::now();
    let mut pool = Pool::new(backend, &PoolConfig { size: pool_gib.map_or(0, |g| g << 30), shift: scale, tags, ..Default::default() }).map_err(|e| format!("pool setup: {e}"))?;
    let setup = t0.elapsed();
    let g = pool.granularity();
    let mut t = Table { rows: vec![] };
    t.rows.push((
        "pool + shadow setup".into(),
        true,
        format!("base {:#x} size {} GiB shadow {:#x} gran {} KiB in {:.1} ms", pool.base(), pool.size() >> 30, pool.shadow_base(), g >> 10, setup.as_secs_f64() * 1e3),
    ));
    let b0 = pool.base() + 4 * g;
    let mut sh = vec![1u8; 16];
    t.row(
        "shadow of never-committed VA reads 0",
        pool.read_shadow(b0, &mut sh).map_err(|e| e.to_string()).and_then(|_| if sh.iter().all(|&x| x == 0) { Ok("16 bytes = 0".into()) } else { Err(format!("{sh:?}")) }),
    );
    t.row("commit 2 chunks", pool.commit(b0, 2 * g).map(|_| "ok".into()).map_err(|e| e.to_string()));
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    t.row(
        "write/read committed memory",
        (|| {
            pool.backend().write(b0 + g - 2048, &pattern, Stream::SYNC).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; 4096];
            pool.backend().read(b0 + g - 2048, &mut back).map_err(|e| e.to_string())?;
            if back == pattern {
                Ok("4 KiB across the chunk boundary".into())
            } else {
                Err("mismatch".into())
            }
        })(),
    );
    t.row(
        "alias: write via alias, read via pool",
        (|| {
            let a = pool.alias(b0, 2 * g).map_err(|e| e.to_string())?;
            pool.backend().write(a + 100, b"gasan-alias", Stream::SYNC).map_err(|e| e.to_string())?;
            let mut back = [0u8; 11];
            pool.backend().read(b0 + 100, &mut back).map_err(|e| e.to_string())?;
            pool.unalias(a).map_err(|e| e.to_string())?;
            if &back == b"gasan-alias" {
                Ok(format!("alias at {a:#x}"))
            } else {
                Err(format!("{back:?}"))
            }
        })(),
    );
    t.row(
        "shadow of committed VA: zero, then writable",
        (|| {
            let mut s = vec![9u8; 64];
            pool.read_shadow(b0, &mut s).map_err(|e| e.to_string())?;
            if s.iter().any(|&x| x != 0) {
                return Err("fresh shadow not zero".into());
            }
            pool.write_shadow(b0, &[255u8; 64], Stream::SYNC).map_err(|e| e.to_string())?;
            pool.read_shadow(b0, &mut s).map_err(|e| e.to_string())?;
            if s.iter().all(|&x| x == 255) {
                Ok("64 bytes".into())
            } else {
                Err("write lost".into())
            }
        })(),
    );
    t.row(
        "extent table: set, read back, clear",
        (|| {
            let (table, shift) = pool.extent_table();
            let (start, end) = (b0 + 256, b0 + g + 1000);
            let entry = |pool: &Pool, i: u64| -> Result<(u64, u64), String> {
                let mut e = [(0, 0)];
                pool.read_extents(i, &mut e).map_err(|e| e.to_string())?;
                Ok(e[0])
            };
            let i = (b0 - pool.base()) >> shift;
            if entry(&pool, i)? != (0, 0) {
                return Err("fresh entry not zero".into());
            }
            pool.set_extent(start, end, Stream::SYNC).map_err(|e| e.to_string())?;
            let set = [entry(&pool, i)?, entry(&pool, i + 1)?, entry(&pool, i + 2)?];
            pool.clear_extent(start, end, Stream::SYNC).map_err(|e| e.to_string())?;
            let cleared = [entry(&pool, i)?, entry(&pool, i + 1)?];
            if set != [(start, end), (start, end), (0, 0)] || cleared != [(0, 0); 2] {
                return Err(format!("set {set:x?}, cleared {cleared:x?}"));
            }
            Ok(format!("table at {table:#x}, {} KiB blocks", (1u64 << shift) >> 10))
        })(),
    );
    t.row(
        "protect read-only: reads work",
        (|| {
            pool.protect(b0, g, Prot::ReadOnly).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; 16];
            pool.backend().read(b0 + g - 2048, &mut back).map_err(|e| e.to_string())?;
            if back[..] != pattern[..16] {
                return Err("read mismatch".into());
            }
            if host {
                let va = b0;
                // SAFETY: host backend: `va` is in a committed chunk, host memory now mapped
                // read-only; the write runs in a forked child, so its fault (or, were the
                // protection broken, the write itself) touches only the child's copy.
                if !faults_in_child(|| unsafe { std::ptr::write_volatile(va as *mut u8, 1) }) {
                    return Err("write to read-only memory did not fault".into());
                }
                pool.protect(b0, g, Prot::ReadWrite).map_err(|e| e.to_string())?;
                Ok("write faults (child process)".into())
            } else {
                pool.protect(b0, g, Prot::ReadWrite).map_err(|e| e.to_string())?;
                Ok("device write fault not provoked (would kill the context)".into())
            }
        })(),
    );
    let fine = pool.backend().guard_granularity();
    if fine < g {
        t.row(
            "guard page inside a chunk, neighbours usable",
            (|| {
                let guard = b0 + 4 * fine.max(64 << 10);
                pool.protect(guard, fine, Prot::None).map_err(|e| e.to_string())?;
                let mut back = vec![0u8; 16];
                pool.backend().read(guard - 16, &mut back).map_err(|e| format!("left neighbour: {e}"))?;
                pool.backend().read(guard + fine, &mut back).map_err(|e| format!("right neighbour: {e}"))?;
                let detail = if host {
                    // SAFETY: host backend: probing a guard page of a committed chunk (mapped
                    // PROT_NONE) inside a forked child; the fault ends only the child.
                    if !faults_in_child(|| unsafe {
                        {
                            std::ptr::read_volatile(guard as *const u8);
                        }
                    }) {
                        return Err("read of the guard page did not fault".into());
                    }
                    format!("{} KiB guard faults (child process)", fine >> 10)
                } else {
                    format!("{} KiB guard set; device fault not provoked (would kill the context)", fine >> 10)
                };
                pool.protect(guard, fine, Prot::ReadWrite).map_err(|e| e.to_string())?;
                pool.backend().read(guard, &mut back).map_err(|e| format!("guard after re-enable: {e}"))?;
                Ok(detail)
            })(),
        );
    }
    if kind == BackendKind::Kmod {
        kmod_rows(&mut t, &mut pool, b0, &pattern);
    }
    if pool.windows() > 1 {
        tag_rows(&mut t, &mut pool, b0 + 16 * g, scale, host);
    }
    t.row(
        "decommit, recommit from chunk cache",
        (|| {
            let before = pool.counters().chunks_from_cache;
            pool.decommit(b0 + g, g).map_err(|e| e.to_string())?;
            pool.commit(b0 + g, g).map_err(|e| e.to_string())?;
            if pool.counters().chunks_from_cache > before {
                Ok("chunk reused".into())
            } else {
                Err("cache not used".into())
            }
        })(),
    );
    t.row(
        "retire: VA never reissued, shadow reads 0",
        (|| {
            pool.retire(b0, 2 * g).map_err(|e| e.to_string())?;
            if pool.commit(b0, g).is_ok() {
                return Err("retired VA committed again".into());
            }
            let mut s = vec![7u8; 64];
            pool.read_shadow(b0, &mut s).map_err(|e| e.to_string())?;
            if s.iter().any(|&x| x != 0) {
                return Err("shadow of retired VA not zero".into());
            }
            if host {
                let va = b0;
                // SAFETY: host backend: probing retired VA (reserved PROT_NONE) inside a forked
                // child; the fault ends only the child.
                if !faults_in_child(|| unsafe {
                    {
                        std::ptr::read_volatile(va as *const u8);
                    }
                }) {
                    return Err("read of retired VA did not fault".into());
                }
                Ok("read faults (child process)".into())
            } else {
                Ok("device read of retired VA not provoked (would kill the context)".into())
            }
        })(),
    );
    ipc_rows(&mut t, &mut pool, host);
    t.row("misaligned commit refused", expect_err(pool.commit(b0 + 4096 * 3, g), "misaligned commit"));
    t.row("commit outside pool refused", expect_err(pool.commit(pool.base() + pool.size(), g), "outside commit"));
    t.row("double retire refused", expect_err(pool.retire(b0, g), "double retire"));
    t.row("alias of uncommitted refused", expect_err(pool.alias(b0 + 8 * g, g).map(|_| ()), "alias of uncommitted"));

    println!("gasan-uvm selftest --backend {} --scale {scale}", pool.backend().name());
    println!("{:<46} {:<5} detail", "check", "ok");
    let mut all = true;
    for (n, ok, d) in &t.rows {
        all &= ok;
        println!("{:<46} {:<5} {}", n, if *ok { "PASS" } else { "FAIL" }, d);
    }
    println!("{}", if all { "selftest: all passed" } else { "selftest: FAILED" });
    Ok(all)
}

/// A chunk exported and mapped again through its file descriptor (another process would do the
/// same after receiving it), and a peer device's access granted and revoked (the host backend's
/// model of it; on the VMM, device 1 when there is one).
fn ipc_rows(t: &mut Table, pool: &mut Pool, host: bool) {
    let g = pool.granularity();
    let (src, dst) = (pool.base() + pool.window_size() - 8 * g, pool.base() + pool.window_size() - 4 * g);
    t.row(
        "chunk exported and imported (fd)",
        (|| {
            pool.commit(src, g).map_err(|e| e.to_string())?;
            pool.backend().write(src + 64, b"shared", Stream::SYNC).map_err(|e| e.to_string())?;
            let fds = pool.export(src, g).map_err(|e| format!("export: {e}"))?;
            pool.commit_imported(dst, 1, fds).map_err(|e| format!("import: {e}"))?;
            pool.backend().write(dst + 70, b"!", Stream::SYNC).map_err(|e| e.to_string())?;
            let mut b = [0u8; 7];
            pool.backend().read(src + 64, &mut b).map_err(|e| e.to_string())?;
            if &b != b"shared!" {
                return Err(format!("bytes through the import: {b:?}"));
            }
            Ok("one memory at both addresses".into())
        })(),
    );
    let peer = if host { pool.device() + 1 } else { 1 };
    t.row(
        "peer granted, then revoked",
        (|| {
            let mut b = [0u8; 6];
            match pool.read_as(peer, src + 64, &mut b) {
                Err(UvmError::NoAccess { .. }) => {}
                Err(e @ UvmError::Cuda { .. }) if !host => return Ok(format!("not provoked: {e} (one GPU)")),
                other => return Err(format!("before the grant: {other:?}")),
            }
            if let Err(e) = pool.grant_peer_access(peer) {
                return if host { Err(e.to_string()) } else { Ok(format!("not provoked: {e} (one GPU, or no peer access to device {peer})")) };
            }
            pool.read_as(peer, src + 64, &mut b).map_err(|e| format!("granted: {e}"))?;
            pool.revoke_peer_access(peer).map_err(|e| e.to_string())?;
            match pool.read_as(peer, src + 64, &mut b) {
                Err(UvmError::NoAccess { .. }) => Ok(format!("device {peer}: chunk and shadow readable only while granted")),
                other => Err(format!("after the revoke: {other:?}")),
            }
        })(),
    );
    let _ = pool.retire(dst, g);
    let _ = pool.retire(src, g);
}

/// One chunk seen through every tag window, and a pointer of the wrong tag found by the shadow.
fn tag_rows(t: &mut Table, pool: &mut Pool, va: u64, scale: u32, host: bool) {
    let (g, ws, w) = (pool.granularity(), pool.window_size(), pool.windows());
    let every = pool.tag_windows().all();
    let enc = full_granule_shadow(scale);
    t.row(
        &format!("one chunk through {w} tag windows"),
        (|| {
            pool.commit_tagged(va, g, every).map_err(|e| e.to_string())?;
            let text = b"written through window 1";
            pool.backend().write(va + ws + 300, text, Stream::SYNC).map_err(|e| e.to_string())?;
            for k in 0..w {
                let mut back = vec![0u8; text.len()];
                pool.backend().read(va + k * ws + 300, &mut back).map_err(|e| e.to_string())?;
                if back != text {
                    return Err(format!("window {k} reads other bytes"));
                }
            }
            pool.retire(va, g).map_err(|e| e.to_string())?;
            Ok(format!("windows {ws:#x} apart read the same bytes"))
        })(),
    );
    let va = va + g;
    t.row(
        "tag mismatch: other windows' shadow poisoned",
        (|| {
            // A block of tag 1: mapped and accessible through its window only.
            pool.commit_tagged(va, g, 0b10).map_err(|e| e.to_string())?;
            pool.fill_shadow(va + ws, 4, enc, Stream::SYNC).map_err(|e| e.to_string())?;
            let mut own = [0u8; 4];
            pool.read_shadow(va + ws, &mut own).map_err(|e| e.to_string())?;
            if own != [enc; 4] {
                return Err(format!("own window reads {own:?}"));
            }
            for k in (0..w).filter(|&k| k != 1) {
                let mut other = [9u8; 4];
                pool.read_shadow(va + k * ws, &mut other).map_err(|e| e.to_string())?;
                if other != [0; 4] {
                    return Err(format!("window {k} reads {other:?}"));
                }
            }
            if pool.fill_shadow(va, 4, enc, Stream::SYNC).is_ok() {
                return Err("window 0's shadow was writable for a block of tag 1".into());
            }
            let unmapped = if host {
                let other = va;
                // SAFETY: host backend: probing window 0 of a chunk committed for tag 1 only (VA
                // reserved PROT_NONE, no chunk mapped) inside a forked child; the fault ends only
                // the child.
                if !faults_in_child(|| unsafe {
                    {
                        std::ptr::read_volatile(other as *const u8);
                    }
                }) {
                    return Err("window 0 of a tag-1 chunk is mapped".into());
                }
                "; through window 0 a read faults (child process)"
            } else {
                "; window 0 unmapped (device fault not provoked: it would kill the context)"
            };
            pool.retire(va, g).map_err(|e| e.to_string())?;
            Ok(format!("tag 1 reads {enc:#x}, the {} other windows 0 (reported){unmapped}", w - 1))
        })(),
    );
}

/// Shadow byte of a fully accessible granule at `scale` (GASan-128: 128; GASan-256: 255).
fn full_granule_shadow(scale: u32) -> u8 {
    if scale == 7 {
        128
    } else {
        255
    }
}

/// The patched module's own ioctls, each checked through the GPU's memory (copies by the driver).
fn kmod_rows(t: &mut Table, pool: &mut Pool, b0: u64, pattern: &[u8]) {
    let dev = match gasan_uvm::kmod::KmodDevice::open() {
        Ok(d) => d,
        Err(e) => return t.row("kmod device", Err(e.to_string())),
    };
    let caps = dev.query();
    t.row("UVM_GASAN_QUERY", caps.map(|c| format!("ABI {}, caps {:#x}, alias VA below {:#x}", c.abi_version, c.caps, c.max_va)).map_err(|e| e.to_string()));
    let g = pool.granularity();
    t.row(
        "UVM_GASAN_MAP_ALIAS at a GPU-only address: read via alias",
        (|| {
            let c = dev.query().map_err(|e| e.to_string())?;
            if c.max_va <= 1 << 47 {
                return Err(format!("no GPU-only VA (max {:#x})", c.max_va));
            }
            let alias = (1u64 << 47) + (b0 - pool.base());
            dev.map_alias(b0, g, alias).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; pattern.len()];
            let r = pool.backend().read(alias + g - 2048, &mut back[..2048]);
            dev.unmap_alias(alias, g).map_err(|e| e.to_string())?;
            r.map_err(|e| e.to_string())?;
            if back[..2048] == pattern[..2048] {
                Ok(format!("alias {alias:#x} reads the pool's bytes"))
            } else {
                Err("alias bytes differ".into())
            }
        })(),
    );
    t.row(
        "UVM_GASAN_SET_PROTECTION 64 KiB none / rw",
        (|| {
            dev.set_protection(b0 + (64 << 10), 64 << 10, 64 << 10, Prot::None).map_err(|e| e.to_string())?;
            let mut x = [0u8; 16];
            pool.backend().read(b0, &mut x).map_err(|e| format!("neighbour unreadable: {e}"))?;
            dev.set_protection(b0 + (64 << 10), 64 << 10, 64 << 10, Prot::ReadWrite).map_err(|e| e.to_string())?;
            pool.backend().read(b0 + (64 << 10), &mut x).map_err(|e| format!("re-enabled page unreadable: {e}"))?;
            Ok("guard set and lifted; device fault not provoked (would kill the context)".into())
        })(),
    );
    t.row(
        "UVM_GASAN_MAP_SPARSE_ZERO reads zero",
        (|| {
            let base = pool.base() + pool.size() - 2 * g;
            dev.map_sparse_zero(base, g).map_err(|e| e.to_string())?;
            let mut x = vec![7u8; 256];
            pool.backend().read(base, &mut x).map_err(|e| e.to_string())?;
            if x.iter().all(|&b| b == 0) {
                Ok("256 bytes = 0".into())
            } else {
                Err("sparse range not zero".into())
            }
        })(),
    );
    t.row(
        "UVM_GASAN_SUBSCRIBE_FAULTS",
        (|| {
            let fd = dev.subscribe_faults(true).map_err(|e| e.to_string())?;
            let ev = gasan_uvm::kmod::read_fault_events(&fd).map_err(|e| e.to_string())?;
            Ok(format!("fd open, {} events queued (no fault provoked)", ev.len()))
        })(),
    );
    t.row("bad input refused by the module", {
        let refused = [
            dev.set_protection(b0 + 100, 4096, 4096, Prot::None).is_err(),
            dev.set_protection(b0, 4096, 8192, Prot::None).is_err(),
            dev.map_alias(b0, g, pool.base()).is_err(),
            dev.reserve_pool(pool.base(), g).is_err(),
        ];
        if refused.iter().all(|&r| r) {
            Ok("misaligned, bad page size, alias into the pool, second pool".into())
        } else {
            Err(format!("{refused:?}"))
        }
    });
}

fn bench(kind: BackendKind, scale: u32, iters: u32, tags: u64) -> Result<(), String> {
    let backend = make_backend(kind)?;
    let t0 = Instant::now();
    let mut pool = Pool::new(backend, &PoolConfig { shift: scale, tags, ..Default::default() }).map_err(|e| e.to_string())?;
    let setup = t0.elapsed().as_secs_f64();
    let g = pool.granularity();
    let e = |x: UvmError| x.to_string();
    let n = iters as u64;
    let base = pool.base() + (1 << 30);
    let time = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
    };
    let cold = time(&mut || (0..n).try_for_each(|i| pool.commit(base + i * g, g).map_err(e)))?;
    let decommit = time(&mut || (0..n).try_for_each(|i| pool.decommit(base + i * g, g).map_err(e)))?;
    let warm = time(&mut || (0..n).try_for_each(|i| pool.commit(base + i * g, g).map_err(e)))?;
    let alias = time(&mut || (0..n).try_for_each(|i| pool.alias(base + i * g, g).and_then(|a| pool.unalias(a)).map_err(e)))?;
    let shadow_w = time(&mut || (0..n).try_for_each(|i| pool.write_shadow(base + i * g, &[16u8; 32], Stream::SYNC).map_err(e)))?;
    let retire = time(&mut || (0..n).try_for_each(|i| pool.retire(base + i * g, g).map_err(e)))?;
    // With tags: a slab's chunk has real shadow in every window, a large block's in its own.
    let every = pool.tag_windows().all();
    let base2 = base + n * g;
    let slab = time(&mut || (0..n).try_for_each(|i| pool.commit_tagged(base2 + i * g, g, every).map_err(e)))?;
    let slab_retire = time(&mut || (0..n).try_for_each(|i| pool.retire(base2 + i * g, g).map_err(e)))?;
    println!("gasan-uvm bench --backend {} --scale {scale} --tags {} (per {} KiB chunk, {iters} iterations)", pool.backend().name(), pool.windows(), g >> 10);
    println!("{:<40} {:>12}", "operation", "µs");
    println!("{:<40} {:>12.1}", "commit cold (create + map + shadow)", cold);
    println!("{:<40} {:>12.1}", "decommit", decommit);
    println!("{:<40} {:>12.1}", "commit from cache", warm);
    println!("{:<40} {:>12.1}", "alias + unalias", alias);
    println!("{:<40} {:>12.1}", "shadow write (32 B)", shadow_w);
    println!("{:<40} {:>12.1}", "retire", retire);
    println!("{:<40} {:>12.1}", "commit, shadow in every window (slab)", slab);
    println!("{:<40} {:>12.1}", "retire of that", slab_retire);
    println!("{:<40} {:>12.1}", "pool + shadow setup (ms)", setup * 1e3);
    println!("{:<40} {:>12.3}", "shadow fan-out per GiB of pool (ms)", setup * 1e3 / (pool.size() >> 30) as f64);
    println!("pool size {} GiB", pool.size() >> 30);
    Ok(())
}

/// Commit + retirement of whole blocks (as the allocator does a large block's: `commit_tagged`,
/// then `retire_tagged_zeroed`, each block at new VA), each chunk its own handle against wide
/// runs: µs per block and backend calls per block, once the caches hold what a block needs (the
/// first block of each size is left out: it creates its handles).
fn bench_blocks(kind: BackendKind, iters: u32) -> Result<(), String> {
    let (backend, calls) = CountedBackend::new(make_backend(kind)?);
    let mut pool = Pool::new(Box::new(backend), &PoolConfig { tags: 1, ..Default::default() }).map_err(|e| e.to_string())?;
    let g = pool.granularity();
    let e = |x: UvmError| x.to_string();
    let snapshot = || calls.snapshot();
    let n = u64::from(iters.max(1));
    println!("gasan-uvm bench-blocks --backend {} (chunks of {} KiB, {n} blocks each after one to warm the caches)", pool.backend().name(), g >> 10);
    println!("{:>8} {:<7} {:>10} {:>10} {:>7} {:>7} {:>7} {:>7} {:>7}", "block", "handles", "commit µs", "retire µs", "create", "map", "access", "unmap", "release");
    let mut va = pool.base() + (1 << 30);
    for size in [2u64 << 20, 16 << 20, 64 << 20] {
        let len = size.div_ceil(g) * g;
        for wide in [false, true] {
            pool.set_wide_commits(wide);
            let mut block = |timed: bool| -> Result<(f64, f64), String> {
                // A gap as long as the block between blocks, as the allocator leaves.
                va += 2 * len;
                let t = Instant::now();
                pool.commit_tagged(va, len, 1).map_err(e)?;
                let c = t.elapsed().as_secs_f64();
                let t = Instant::now();
                pool.retire_tagged_zeroed(va, len, 1).map_err(e)?;
                Ok(if timed { (c, t.elapsed().as_secs_f64()) } else { (0.0, 0.0) })
            };
            block(false)?;
            let before = snapshot();
            let (mut commit, mut retire) = (0.0, 0.0);
            for _ in 0..n {
                let (c, r) = block(true)?;
                commit += c;
                retire += r;
            }
            let per = |c: BackendCall| (snapshot()[c as usize] - before[c as usize]) as f64 / n as f64;
            println!(
                "{:>6}Mi {:<7} {:>10.1} {:>10.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1}",
                size >> 20,
                if wide { "wide" } else { "chunks" },
                commit * 1e6 / n as f64,
                retire * 1e6 / n as f64,
                per(BackendCall::Create),
                per(BackendCall::Map),
                per(BackendCall::Access),
                per(BackendCall::Unmap),
                per(BackendCall::Release)
            );
        }
    }
    let c = pool.counters();
    println!("runs created {}, from the cache {}; chunks created {}, from the cache {}", c.runs_created, c.runs_from_cache, c.chunks_created, c.chunks_from_cache);
    Ok(())
}

const IPC_SCALE: gasan_instrument::shadow::Scale = gasan_instrument::shadow::Scale::S8;

fn ipc_pool(kind: BackendKind) -> Result<Pool, String> {
    Pool::new(make_backend(kind)?, &PoolConfig { shift: IPC_SCALE.shift(), tags: 1, ..Default::default() }).map_err(|e| format!("pool setup: {e}"))
}

/// The importing side of `ipc-selftest`: `import HEX BYTE` maps the export, answers
/// `ok FIRST LAST LAST_BYTE_PASSES BYTE_AFTER_FAILS`, then writes BYTE at its start and answers
/// `written`; `hold HEX` maps it, answers `holding` and waits to be killed. Errors answer `err`.
fn ipc_importer(kind: BackendKind) -> Result<(), String> {
    use std::io::{BufRead, Write};
    let mut pool = ipc_pool(kind)?;
    let g = pool.granularity();
    let mut next = pool.base() + 16 * g;
    let say = |l: String| {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{l}");
        let _ = o.flush();
    };
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let w: Vec<&str> = line.split_whitespace().collect();
        let Some(bytes) = w.get(1).and_then(|h| (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()).collect::<Option<Vec<u8>>>()) else {
            return Err(format!("bad command {line:?}"));
        };
        let h = IpcHandle::from_bytes(&bytes.try_into().map_err(|_| "a handle is 64 bytes".to_string())?).map_err(|e| e.to_string())?;
        let va = next;
        next += (u64::from(h.chunks) + 1) * g;
        let mapped = gasan_uvm::ipc::import(&h).and_then(|fds| pool.commit_imported(va, 1, fds)).and_then(|()| {
            let start = va + h.offset;
            let size = IPC_SCALE.encodable_size(h.size);
            pool.write_shadow(start, &IPC_SCALE.region_shadow(size, h.len() - h.offset), Stream::SYNC)?;
            let shadow_of = |a: u64| -> Result<bool, UvmError> {
                let mut s = [0u8];
                pool.read_shadow(a & !(IPC_SCALE.granule() - 1), &mut s)?;
                Ok(IPC_SCALE.is_bad(s[0], a, 1))
            };
            let last_ok = !shadow_of(start + h.size - 1)?;
            let past_bad = start + size >= va + h.len() || shadow_of(start + size)?;
            Ok((start, last_ok, past_bad))
        });
        match (w[0], mapped) {
            (_, Err(e)) => say(format!("err {e}")),
            ("hold", Ok(_)) => {
                say("holding".into());
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                }
            }
            ("import", Ok((start, last_ok, past_bad))) => {
                let (mut first, mut last) = ([0u8], [0u8]);
                pool.backend().read(start, &mut first).map_err(|e| e.to_string())?;
                pool.backend().read(start + h.size - 1, &mut last).map_err(|e| e.to_string())?;
                say(format!("ok {} {} {last_ok} {past_bad}", first[0], last[0]));
                let byte: u8 = w.get(2).and_then(|b| b.parse().ok()).ok_or("import needs a byte")?;
                pool.backend().write(start, &[byte], Stream::SYNC).map_err(|e| e.to_string())?;
                say("written".into());
            }
            (other, _) => return Err(format!("unknown command {other}")),
        }
    }
    Ok(())
}

/// A second process running [`ipc_importer`].
struct Importer {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Importer {
    fn spawn(kind: BackendKind) -> Result<Self, String> {
        use std::process::{Command, Stdio};
        let backend = match kind {
            BackendKind::Host => "host",
            BackendKind::Vmm => "vmm",
            BackendKind::Kmod => "kmod",
        };
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe).args(["ipc-selftest", "--backend", backend, "--importer"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
        let out = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Importer { child, out })
    }
    fn send(&mut self, line: &str) -> Result<(), String> {
        use std::io::Write;
        let i = self.child.stdin.as_mut().ok_or("no stdin")?;
        writeln!(i, "{line}").and_then(|_| i.flush()).map_err(|e| e.to_string())
    }
    fn answer(&mut self) -> Result<String, String> {
        use std::io::BufRead;
        let mut l = String::new();
        match self.out.read_line(&mut l) {
            Ok(0) => Err(format!("importer ended ({:?})", self.child.wait().ok())),
            Ok(_) => Ok(l.trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for Importer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ipc_selftest(kind: BackendKind) -> Result<bool, String> {
    let mut pool = ipc_pool(kind)?;
    let g = pool.granularity();
    let va = pool.base() + 16 * g;
    pool.commit(va, 2 * g).map_err(|e| e.to_string())?;
    let (offset, size) = (IPC_SCALE.granule(), 2 * g - IPC_SCALE.granule() - 1000);
    pool.backend().write(va + offset, &[0xa5], Stream::SYNC).map_err(|e| e.to_string())?;
    pool.backend().write(va + offset + size - 1, &[0x5a], Stream::SYNC).map_err(|e| e.to_string())?;
    let exporter = Exporter::start().map_err(|e| format!("exporter: {e}"))?;
    let fds = pool.export(va, 2 * g).map_err(|e| format!("export: {e}"))?;
    let h = exporter.export(fds, pool.device() as u32, g, offset, size).map_err(|e| e.to_string())?;
    let hex: String = h.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let mut t = Table { rows: vec![] };
    let mut first = Importer::spawn(kind)?;
    first.send(&format!("import {hex} 7"))?;
    let a = first.answer()?;
    t.row("import in a second process", if a.starts_with("ok 165 90 ") { Ok("the exporter's first and last bytes".into()) } else { Err(a.clone()) });
    t.row("importer's shadow from the handle's bounds", if a.ends_with(" true true") { Ok(format!("{size} bytes: the last passes, the one after is reported")) } else { Err(a) });
    t.row(
        "importer's write seen by the exporter",
        (|| {
            let w = first.answer()?;
            let mut b = [0u8];
            pool.backend().read(va + offset, &mut b).map_err(|e| e.to_string())?;
            if w == "written" && b[0] == 7 {
                Ok("one memory".into())
            } else {
                Err(format!("{w}, byte {}", b[0]))
            }
        })(),
    );
    t.row(
        "importer killed holding the import",
        (|| {
            let mut holder = Importer::spawn(kind)?;
            holder.send(&format!("hold {hex}"))?;
            let a = holder.answer()?;
            if a != "holding" {
                return Err(a);
            }
            holder.child.kill().map_err(|e| e.to_string())?;
            let _ = holder.child.wait();
            let mut next = Importer::spawn(kind)?;
            next.send(&format!("import {hex} 8"))?;
            let a = next.answer()?;
            if a.starts_with("ok 7 90 ") {
                Ok("the exporter still serves, the bytes are intact".into())
            } else {
                Err(a)
            }
        })(),
    );
    exporter.withdraw(&h);
    t.row(
        "withdrawn export refused",
        (|| {
            first.send(&format!("import {hex} 9"))?;
            let a = first.answer()?;
            if a.starts_with("err bad gasan IPC handle") {
                Ok(a)
            } else {
                Err(a)
            }
        })(),
    );
    println!("gasan-uvm ipc-selftest --backend {}", pool.backend().name());
    println!("{:<46} {:<5} detail", "check", "ok");
    let mut all = true;
    for (n, ok, d) in &t.rows {
        all &= ok;
        println!("{:<46} {:<5} {}", n, if *ok { "PASS" } else { "FAIL" }, d);
    }
    println!("{}", if all { "ipc-selftest: all passed" } else { "ipc-selftest: FAILED" });
    Ok(all)
}

fn main() -> ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Selftest { backend, scale, pool_gib, tags } => selftest(backend, scale, pool_gib, tags),
        Cmd::IpcSelftest { backend, importer: false } => ipc_selftest(backend),
        Cmd::IpcSelftest { backend, importer: true } => ipc_importer(backend).map(|_| true),
        Cmd::Bench { backend, scale, iters, tags } => bench(backend, scale, iters, tags).map(|_| true),
        Cmd::BenchBlocks { backend, iters } => bench_blocks(backend, iters).map(|_| true),
        Cmd::KmodSelftest { exit_with_live_mappings: true } => kmod_selftest::exit_with_live_mappings(),
        Cmd::KmodSelftest { exit_with_live_mappings: false } => match kmod_selftest::run() {
            Ok(kmod_selftest::Outcome::Skipped(why)) => {
                println!("kmod-selftest: SKIPPED: {why}");
                return ExitCode::from(77);
            }
            Ok(o) => Ok(matches!(o, kmod_selftest::Outcome::Passed)),
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gasan-uvm: error: {e}");
            ExitCode::from(2)
        }
    }
}
