//! `gasan-uvm kmod-selftest`: checks a loaded gasan-patched nvidia-uvm (kmod-patch/) for kernel
//! developers. Every command with valid parameters and with each field malformed in turn (the
//! table of `gasan_uvm::kmod_check`, whose statuses CI checks against the kernel's C checks);
//! wrong sizes, unknown numbers and bad pointers; each mapping kind read by a GPU kernel (alias at a
//! GPU-only address, 64 KiB and 4 KiB guards, read-only, sparse shadow) and a real guard fault
//! delivered as a fault event; a child process that exits with live mappings; the GPU unregistered
//! (primary context reset) with parked mappings and registered again.
//!
//! Skips (exit status 77) with the reason when /dev/nvidia-uvm or the patched module is absent.

use super::{cuda_context, entry_point, Table};
use gasan_uvm::kmod::abi::*;
use gasan_uvm::kmod::{KmodDevice, SYSFS_ABI};
use gasan_uvm::kmod_check::{self, Call, Limits};
use gasan_uvm::{KmodBackend, Pool, PoolConfig, Prot, Stream, VmmBackend};
use nix::errno::Errno;
use std::ffi::c_void;

/// The outcome of the whole run.
pub enum Outcome {
    Passed,
    Failed,
    Skipped(String),
}

/// A GPU kernel that copies `n` (<= 256) bytes from `src` to `dst`, one byte per thread: every
/// mapping is checked by the GPU itself, not only by driver copies.
const PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64
.visible .entry gasan_copy(.param .u64 src, .param .u64 dst, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p, %r2, %r1;
    @%p bra DONE;
    cvt.u64.u32 %rd3, %r2;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.u8 %r3, [%rd4];
    st.global.u8 [%rd5], %r3;
DONE:
    ret;
}
\0";

type LoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> i32;
type GetFunction = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const i8) -> i32;
type Launch = unsafe extern "C" fn(*mut c_void, u32, u32, u32, u32, u32, u32, u32, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> i32;
type Sync = unsafe extern "C" fn() -> i32;
type DevGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
type Reset = unsafe extern "C" fn(i32) -> i32;

/// The copy kernel, loaded in the current context.
struct Gpu {
    func: *mut c_void,
    launch: Launch,
    sync: Sync,
}

impl Gpu {
    fn load(resolve: &gasan_uvm::Resolver) -> Result<Gpu, String> {
        let f = |n: &std::ffi::CStr| entry_point(resolve, n);
        // SAFETY: driver entry points with their documented signatures; PTX is NUL-terminated.
        unsafe {
            let load: LoadData = std::mem::transmute(f(c"cuModuleLoadData")?);
            let get: GetFunction = std::mem::transmute(f(c"cuModuleGetFunction")?);
            let launch: Launch = std::mem::transmute(f(c"cuLaunchKernel")?);
            let sync: Sync = std::mem::transmute(f(c"cuCtxSynchronize")?);
            let mut module = std::ptr::null_mut();
            let r = load(&mut module, PTX.as_ptr().cast());
            if r != 0 {
                return Err(format!("cuModuleLoadData: {r}"));
            }
            let mut func = std::ptr::null_mut();
            let r = get(&mut func, module, c"gasan_copy".as_ptr());
            if r != 0 {
                return Err(format!("cuModuleGetFunction: {r}"));
            }
            Ok(Gpu { func, launch, sync })
        }
    }

    /// Runs the copy on the GPU and waits; the CUDA error code on failure (a fault kills the
    /// context: 700, illegal address).
    fn copy(&self, src: u64, dst: u64, n: u32) -> Result<(), i32> {
        let (mut s, mut d, mut n) = (src, dst, n.min(256));
        let mut args: [*mut c_void; 3] = [(&mut s as *mut u64).cast(), (&mut d as *mut u64).cast(), (&mut n as *mut u32).cast()];
        // SAFETY: the kernel's three parameters, by address, as cuLaunchKernel expects.
        let r = unsafe { (self.launch)(self.func, 1, 1, 1, 256, 1, 1, 0, std::ptr::null_mut(), args.as_mut_ptr(), std::ptr::null_mut()) };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: no arguments.
        match unsafe { (self.sync)() } {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

fn expect_status(t: &mut Table, name: &str, got: Result<u32, Errno>, want: u32) {
    t.row(
        name,
        match got {
            Ok(s) if s == want => Ok(format!("status {s:#x}")),
            Ok(s) => Err(format!("status {s:#x}, expected {want:#x}")),
            Err(e) => Err(format!("errno {e}, expected status {want:#x}")),
        },
    );
}

fn expect_errno(t: &mut Table, name: &str, got: Result<i32, Errno>, want: Errno) {
    t.row(
        name,
        match got {
            Err(e) if e == want => Ok(format!("{e}")),
            Err(e) => Err(format!("{e}, expected {want}")),
            Ok(_) => Err(format!("accepted, expected {want}")),
        },
    );
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Wrong sizes, unknown numbers, bad pointers, commands before UVM_INITIALIZE: on a file of our own.
fn raw_rows(t: &mut Table) -> Result<(), String> {
    let own = KmodDevice::open_own().map_err(|e| e.to_string())?;
    t.row("UVM_GASAN_IDENTIFY before UVM_INITIALIZE", Ok(format!("magic {UVM_GASAN_MAGIC:#x}, ABI {UVM_GASAN_ABI_VERSION}")));
    expect_status(t, "UVM_GASAN_QUERY before UVM_INITIALIZE", own.send(&Call::Query(Default::default())), UVM_GASAN_ST_ILLEGAL_ACTION);
    let sizes = [24usize, 24, 24, 32, 24, 32, 24, 16];
    let mut buf = [0u8; 64];
    for nr in UVM_GASAN_NR_IDENTIFY..UVM_GASAN_NR_COUNT {
        let real = sizes[(nr - 1) as usize];
        for size in [real - 8, real + 8] {
            // SAFETY: buf holds 64 >= size bytes.
            let r = unsafe { own.send_raw(nr, size, buf.as_mut_ptr()) };
            expect_errno(t, &format!("command {nr} with a {size}-byte struct"), r, Errno::EINVAL);
        }
    }
    for nr in [0, UVM_GASAN_NR_COUNT, 0xff] {
        // SAFETY: buf holds 64 >= 24 bytes.
        let r = unsafe { own.send_raw(nr, 24, buf.as_mut_ptr()) };
        expect_errno(t, &format!("unknown command {nr}"), r, Errno::ENOTTY);
    }
    // SAFETY: the kernel must refuse the unmapped address itself.
    let r = unsafe { own.send_raw(UVM_GASAN_NR_IDENTIFY, 24, 8 as *mut u8) };
    expect_errno(t, "UVM_GASAN_IDENTIFY at an unmapped address", r, Errno::EFAULT);
    Ok(())
}

/// Run in a child: sets up every kind of mapping and exits without tearing anything down.
pub fn exit_with_live_mappings() -> ! {
    let r = (|| -> Result<(), String> {
        let resolve = gasan_uvm::default_resolver().map_err(|e| e.to_string())?;
        cuda_context(&resolve)?;
        let vmm = VmmBackend::new(0, gasan_uvm::DriverFns::resolve(&resolve).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        let k = KmodBackend::probe(vmm).map_err(|(_, e)| e.to_string())?;
        let mut pool = Pool::new(Box::new(k), &PoolConfig { size: 1 << 34, shift: 8, ..Default::default() }).map_err(|e| e.to_string())?;
        let g = pool.granularity();
        let b0 = pool.base() + 4 * g;
        pool.commit(b0, 2 * g).map_err(|e| e.to_string())?;
        let dev = KmodDevice::open().map_err(|e| e.to_string())?;
        dev.set_protection(b0 + (64 << 10), 64 << 10, 64 << 10, Prot::None).map_err(|e| e.to_string())?;
        dev.set_protection(b0 + g + 4096, 4096, 4096, Prot::None).map_err(|e| e.to_string())?;
        let _ = pool.alias(b0, g).map_err(|e| e.to_string())?;
        let _fd = dev.subscribe_faults(true).map_err(|e| e.to_string())?;
        std::process::exit(0)
    })();
    eprintln!("child: {}", r.err().unwrap_or_default());
    std::process::exit(3)
}

pub fn run() -> Result<Outcome, String> {
    if !std::path::Path::new("/dev/nvidia-uvm").exists() {
        return Ok(Outcome::Skipped("no /dev/nvidia-uvm (no NVIDIA driver loaded)".into()));
    }
    match std::fs::read_to_string(SYSFS_ABI) {
        Err(_) => return Ok(Outcome::Skipped(format!("the loaded nvidia-uvm is not the gasan-patched module (no {SYSFS_ABI}); see kmod-patch/README.md"))),
        Ok(v) if v.trim() != UVM_GASAN_ABI_VERSION.to_string() => return Ok(Outcome::Skipped(format!("the loaded gasan nvidia-uvm speaks ABI {}, this build {UVM_GASAN_ABI_VERSION}", v.trim()))),
        Ok(_) => {}
    }
    let mut t = Table { rows: vec![] };
    if let Err(e) = raw_rows(&mut t) {
        t.row("open a /dev/nvidia-uvm file and identify the module", Err(e));
    }

    // A child process that exits with live mappings of every kind (the module must tear them down).
    t.row(
        "process exit with live mappings (child)",
        (|| {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let st = std::process::Command::new(exe).args(["kmod-selftest", "--exit-with-live-mappings"]).status().map_err(|e| e.to_string())?;
            if st.success() {
                Ok("child exited with guards parked, an alias and a subscription live; check `dmesg` for nvidia-uvm errors".into())
            } else {
                Err(format!("child: {st}"))
            }
        })(),
    );

    let resolve = gasan_uvm::default_resolver().map_err(|e| e.to_string())?;
    cuda_context(&resolve)?;
    let dev = KmodDevice::open().map_err(|e| e.to_string())?;
    let caps = dev.query().map_err(|e| e.to_string())?;
    t.row("UVM_GASAN_QUERY", Ok(format!("caps {:#x}, alias VA below {:#x}", caps.caps, caps.max_va)));
    for k in kmod_check::no_pool_cases(0x7f00_0000_0000) {
        expect_status(&mut t, &format!("{} {} refused", k.call.name(), k.what), dev.send(&k.call), k.expect);
    }

    let vmm = VmmBackend::new(0, gasan_uvm::DriverFns::resolve(&resolve).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let kmod = KmodBackend::probe(vmm).map_err(|(_, e)| e.to_string())?;
    let mut pool = Pool::new(Box::new(kmod), &PoolConfig { size: 1 << 34, shift: 8, ..Default::default() }).map_err(|e| format!("pool: {e}"))?;
    t.row("UVM_GASAN_RESERVE_POOL (by the kmod backend)", Ok(format!("pool {:#x} + {} GiB", pool.base(), pool.size() >> 30)));
    let lim = Limits { pool_base: pool.base(), pool_length: pool.size(), max_va: caps.max_va };
    for k in kmod_check::malformed_cases(&lim) {
        expect_status(&mut t, &format!("{} {} refused", k.call.name(), k.what), dev.send(&k.call), k.expect);
    }

    let g = pool.granularity();
    let b0 = pool.base() + 4 * g;
    pool.commit(b0, 4 * g).map_err(|e| e.to_string())?;
    let pattern: Vec<u8> = (0..g as u32).map(|i| (i * 13 + 5) as u8).collect();
    pool.backend().write(b0, &pattern, Stream::SYNC).map_err(|e| e.to_string())?;
    let scratch = b0 + 3 * g;
    let gpu = Gpu::load(&resolve)?;
    // The GPU copies 256 bytes at `src` to scratch; returns them.
    let gpu_read = |pool: &Pool, src: u64| -> Result<Vec<u8>, String> {
        gpu.copy(src, scratch, 256).map_err(|e| format!("GPU kernel failed: CUDA error {e}"))?;
        let mut back = vec![0u8; 256];
        pool.backend().read(scratch, &mut back).map_err(|e| e.to_string())?;
        Ok(back)
    };
    let at = |va: u64| &pattern[(va - b0) as usize..(va - b0) as usize + 256];

    t.row("GPU kernel reads the pool", gpu_read(&pool, b0).and_then(|b| if b == at(b0) { Ok("256 bytes".into()) } else { Err("mismatch".into()) }));
    t.row(
        "alias at a GPU-only address, read by a GPU kernel",
        (|| {
            if caps.max_va <= 1 << 47 {
                return Err(format!("no GPU-only VA (max {:#x})", caps.max_va));
            }
            let alias = (1u64 << 47) + (b0 - pool.base());
            dev.map_alias(b0, g, alias).map_err(|e| e.to_string())?;
            let r = gpu_read(&pool, alias + 4096);
            dev.unmap_alias(alias, g).map_err(|e| e.to_string())?;
            if r? == at(b0 + 4096) {
                Ok(format!("alias {alias:#x}"))
            } else {
                Err("alias bytes differ".into())
            }
        })(),
    );
    for (what, page) in [("64 KiB", 64u64 << 10), ("4 KiB", 4096)] {
        t.row(
            &format!("{what} guard: neighbours read by a GPU kernel, lifted again"),
            (|| {
                let guard = b0 + 4 * page.max(64 << 10);
                dev.set_protection(guard, page, page as u32, Prot::None).map_err(|e| e.to_string())?;
                let left = gpu_read(&pool, guard - 256)?;
                let right = gpu_read(&pool, guard + page)?;
                dev.set_protection(guard, page, page as u32, Prot::ReadWrite).map_err(|e| e.to_string())?;
                let inside = gpu_read(&pool, guard)?;
                if left == at(guard - 256) && right == at(guard + page) && inside == at(guard) {
                    Ok(format!("guard {guard:#x}"))
                } else {
                    Err("bytes differ".into())
                }
            })(),
        );
    }
    t.row(
        "read-only 64 KiB: read by a GPU kernel, back to read-write",
        (|| {
            let va = b0 + g / 2;
            dev.set_protection(va, 64 << 10, 64 << 10, Prot::ReadOnly).map_err(|e| e.to_string())?;
            let r = gpu_read(&pool, va)?;
            dev.set_protection(va, 64 << 10, 64 << 10, Prot::ReadWrite).map_err(|e| e.to_string())?;
            if r == at(va) {
                Ok("read works".into())
            } else {
                Err("bytes differ".into())
            }
        })(),
    );
    t.row(
        "read-write refused for a chunk mapped read-only",
        (|| {
            let va = b0 + g;
            pool.protect(va, g, Prot::ReadOnly).map_err(|e| e.to_string())?;
            let r = dev.set_protection(va, 64 << 10, 64 << 10, Prot::ReadWrite);
            pool.protect(va, g, Prot::ReadWrite).map_err(|e| e.to_string())?;
            match r {
                Err(gasan_uvm::UvmError::Kmod { status: UVM_GASAN_ST_INVALID_ACCESS_TYPE, .. }) => Ok("INVALID_ACCESS_TYPE".into()),
                other => Err(format!("{other:?} (expected INVALID_ACCESS_TYPE: the driver's read-only mapping must stay read-only)")),
            }
        })(),
    );
    t.row(
        "sparse shadow range read by a GPU kernel is zero",
        (|| {
            let base = (pool.base() + pool.size() + (1 << 30)).next_multiple_of(1 << 30);
            dev.map_sparse_zero(base, g).map_err(|e| e.to_string())?;
            let r = gpu_read(&pool, base)?;
            if r.iter().all(|&b| b == 0) {
                Ok(format!("{base:#x}"))
            } else {
                Err("not zero".into())
            }
        })(),
    );
    t.row(
        "subscription withdrawn when its parameters cannot be copied back",
        (|| {
            // SAFETY: an anonymous read-only page; the kernel reads it and must fail to write it.
            let page = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
            if page == libc::MAP_FAILED {
                return Err("mmap".into());
            }
            let before = open_fds();
            // SAFETY: the page is ours; it becomes read-only after the zero parameters are in place.
            let r = unsafe {
                libc::mprotect(page, 4096, libc::PROT_READ);
                dev.send_raw(UVM_GASAN_NR_SUBSCRIBE_FAULTS, 16, page.cast())
            };
            let after = open_fds();
            // SAFETY: unmapping our own page.
            unsafe { libc::munmap(page, 4096) };
            if r != Err(Errno::EFAULT) {
                return Err(format!("{r:?}, expected EFAULT"));
            }
            if after != before {
                return Err(format!("{} descriptors leaked", after as i64 - before as i64));
            }
            Ok("EFAULT, no descriptor left, subscribing works again (next row)".into())
        })(),
    );
    let fault_fd = dev.subscribe_faults(true);
    t.row("UVM_GASAN_SUBSCRIBE_FAULTS", fault_fd.as_ref().map(|_| "non-blocking fd".into()).map_err(|e| e.to_string()));
    expect_status(&mut t, "UVM_GASAN_SUBSCRIBE_FAULTS a second time refused", dev.send(&Call::SubscribeFaults(Default::default())), UVM_GASAN_ST_STATE_IN_USE);

    // Last on this context: a real fault on a 4 KiB guard (kills the context), seen as an event.
    let guard = b0 + 2 * g + 4096 * 5;
    t.row(
        "4 KiB guard fault by a GPU kernel arrives as a fault event",
        (|| {
            let fd = fault_fd.as_ref().map_err(|e| e.to_string())?;
            dev.set_protection(guard, 4096, 4096, Prot::None).map_err(|e| e.to_string())?;
            let r = gpu.copy(guard + 64, scratch, 1);
            if r.is_ok() {
                return Err("the read of the guard did not fault".into());
            }
            let mut pfd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(fd), events: libc::POLLIN, revents: 0 };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut pfd, 1, 2000) };
            let ev = gasan_uvm::kmod::read_fault_events(fd).map_err(|e| e.to_string())?;
            match ev.iter().find(|e| e.address >= guard && e.address < guard + 4096) {
                Some(e) => Ok(format!("CUDA error {}, event at {:#x} access type {}", r.unwrap_err(), e.address, e.accessType)),
                None => Err(format!("no event in the guard page ({} events: {:x?})", ev.len(), ev.iter().map(|e| e.address).collect::<Vec<_>>())),
            }
        })(),
    );

    // The GPU leaves the VA space with the guard still parked (the pieces must go with it), then
    // comes back. The pool's driver objects died with the context: never tear them down.
    std::mem::forget(pool);
    t.row(
        "GPU unregistered with parked guards, registered again",
        (|| {
            let f = |n: &std::ffi::CStr| resolve(n);
            // SAFETY: driver entry points with their documented signatures.
            unsafe {
                let get: DevGet = std::mem::transmute(f(c"cuDeviceGet"));
                let reset: Reset = std::mem::transmute(f(c"cuDevicePrimaryCtxReset"));
                let mut d = 0;
                get(&mut d, 0);
                let r = reset(d);
                if r != 0 {
                    return Err(format!("cuDevicePrimaryCtxReset: {r}"));
                }
            }
            cuda_context(&resolve)?;
            let dev2 = KmodDevice::open().map_err(|e| e.to_string())?;
            let c = dev2.query().map_err(|e| e.to_string())?;
            let vmm = VmmBackend::new(0, gasan_uvm::DriverFns::resolve(&resolve).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            let k = KmodBackend::probe(vmm).map_err(|(_, e)| e.to_string())?;
            let mut p2 = Pool::new(Box::new(k), &PoolConfig { size: 1 << 34, shift: 8, ..Default::default() }).map_err(|e| e.to_string())?;
            let gpu2 = Gpu::load(&resolve)?;
            let b = p2.base() + 4 * p2.granularity();
            p2.commit(b, p2.granularity()).map_err(|e| e.to_string())?;
            p2.backend().write(b, &pattern[..256], Stream::SYNC).map_err(|e| e.to_string())?;
            dev2.set_protection(b + 4096, 4096, 4096, Prot::None).map_err(|e| e.to_string())?;
            gpu2.copy(b, b + 8192, 256).map_err(|e| format!("GPU kernel: {e}"))?;
            let mut back = vec![0u8; 256];
            p2.backend().read(b + 8192, &mut back).map_err(|e| e.to_string())?;
            if back != pattern[..256] {
                return Err("bytes differ after re-registering".into());
            }
            Ok(format!("caps {:#x} after reset; new pool {:#x} maps, guards and runs kernels; check `dmesg`", c.caps, p2.base()))
        })(),
    );

    println!("gasan-uvm kmod-selftest (gasan nvidia-uvm ABI {UVM_GASAN_ABI_VERSION})");
    let mut all = true;
    for (n, ok, d) in &t.rows {
        all &= ok;
        println!("{:<72} {:<5} {}", n, if *ok { "PASS" } else { "FAIL" }, d);
    }
    println!("{}", if all { "kmod-selftest: all passed" } else { "kmod-selftest: FAILED" });
    Ok(if all { Outcome::Passed } else { Outcome::Failed })
}
