//! Backend for gasan's patched nvidia-uvm (kmod-patch/): the ioctls of
//! `kmod-patch/include/uvm_gasan_ioctl.h`, whose Rust side is bindgen's output ([`abi`], layout
//! asserted at compile time; `tests/kmod_abi.rs` keeps it current).
//!
//! The ioctls act on a UVM VA space, i.e. on an open `/dev/nvidia-uvm` file: for the process's own
//! CUDA memory that is the descriptor libcuda opened ([`process_uvm_fd`]). [`KmodBackend`] keeps
//! the CUDA VMM for physical memory and 2 MiB mappings and adds, through the patch, protections at
//! 64 KiB / 4 KiB, aliases at GPU-only addresses and sparse shadow.
//!
//! Nothing is sent to a module that is not the patched one: [`KmodDevice::open`] first reads the
//! module's `gasan_abi` parameter in sysfs (a stock nvidia-uvm has none, and gets no gasan ioctl at
//! all), then sends `UVM_GASAN_IDENTIFY` (no state, answered before `UVM_INITIALIZE`) and requires
//! its magic and ABI version; only then is any other command sent. The commands are `_IOWR`-encoded
//! under gasan's own type byte, so no plain-numbered nvidia-uvm command (upstream's or a fork's)
//! shares a number with them.

use crate::backend::{Backend, ChunkHandle, Prot, Stream};
use crate::vmm::VmmBackend;
use crate::UvmError;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

#[allow(non_camel_case_types, non_snake_case, dead_code, clippy::all)]
pub mod abi {
    include!("kmod_abi.rs");
}
use abi::*;

pub use abi::UVM_GASAN_ABI_VERSION;

/// Where the patched module shows its ABI version (a module parameter, read-only).
pub const SYSFS_ABI: &str = "/sys/module/nvidia_uvm/parameters/gasan_abi";

const IOC_TYPE: u8 = UVM_GASAN_IOC_TYPE as u8;
nix::ioctl_readwrite!(ioctl_identify, IOC_TYPE, UVM_GASAN_NR_IDENTIFY, UVM_GASAN_IDENTIFY_PARAMS);
nix::ioctl_readwrite!(ioctl_query, IOC_TYPE, UVM_GASAN_NR_QUERY, UVM_GASAN_QUERY_PARAMS);
nix::ioctl_readwrite!(ioctl_reserve_pool, IOC_TYPE, UVM_GASAN_NR_RESERVE_POOL, UVM_GASAN_RESERVE_POOL_PARAMS);
nix::ioctl_readwrite!(ioctl_map_alias, IOC_TYPE, UVM_GASAN_NR_MAP_ALIAS, UVM_GASAN_MAP_ALIAS_PARAMS);
nix::ioctl_readwrite!(ioctl_unmap_alias, IOC_TYPE, UVM_GASAN_NR_UNMAP_ALIAS, UVM_GASAN_UNMAP_ALIAS_PARAMS);
nix::ioctl_readwrite!(ioctl_set_protection, IOC_TYPE, UVM_GASAN_NR_SET_PROTECTION, UVM_GASAN_SET_PROTECTION_PARAMS);
nix::ioctl_readwrite!(ioctl_map_sparse_zero, IOC_TYPE, UVM_GASAN_NR_MAP_SPARSE_ZERO, UVM_GASAN_MAP_SPARSE_ZERO_PARAMS);
nix::ioctl_readwrite!(ioctl_subscribe_faults, IOC_TYPE, UVM_GASAN_NR_SUBSCRIBE_FAULTS, UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS);

/// The request number of gasan command `nr` with a parameter block of `size` bytes (the real
/// commands use their struct's size; the self-test sends other sizes on purpose).
pub fn request_code(nr: u32, size: usize) -> nix::sys::ioctl::ioctl_num_type {
    nix::request_code_readwrite!(IOC_TYPE, nr, size) as nix::sys::ioctl::ioctl_num_type
}

/// The process's `/dev/nvidia-uvm` descriptor (libcuda keeps one per process), if it has one.
pub fn process_uvm_fd() -> Option<RawFd> {
    for e in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        if std::fs::read_link(e.path()).ok()?.as_os_str() == "/dev/nvidia-uvm" {
            return e.file_name().to_str()?.parse().ok();
        }
    }
    None
}

/// What the module reported for `UVM_GASAN_QUERY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub abi_version: u32,
    pub caps: u32,
    /// Highest GPU VA (exclusive) usable for aliases; above 2^47 means GPU-only aliases work.
    pub max_va: u64,
}

impl Capabilities {
    /// Finest protection granularity the module offers.
    pub fn guard_page(&self) -> Option<u64> {
        if self.caps & UVM_GASAN_CAP_PAGE_4K != 0 {
            Some(4096)
        } else if self.caps & UVM_GASAN_CAP_PAGE_64K != 0 {
            Some(64 << 10)
        } else {
            None
        }
    }
}

/// One fatal GPU fault in the pool, as read from the subscription fd.
pub type FaultEvent = UVM_GASAN_FAULT_EVENT;

/// The gasan ioctls on one UVM VA space (a `/dev/nvidia-uvm` file this object does not own).
#[derive(Debug)]
pub struct KmodDevice {
    fd: RawFd,
    /// Set when the device opened its own file (probing without CUDA).
    _own: Option<OwnedFd>,
}

/// An nvidia-uvm ioctl's outcome: the system call's error, or the `rmStatus` it returned.
pub(crate) fn status(call: &'static str, r: nix::Result<i32>, rm_status: u32) -> Result<(), UvmError> {
    match r {
        Err(e) => Err(UvmError::Os { call, errno: e as i32 }),
        Ok(_) if rm_status != 0 => Err(UvmError::Kmod { call, status: rm_status }),
        Ok(_) => Ok(()),
    }
}

/// Decides from the sysfs parameter's content (None: absent) whether gasan ioctls may be sent.
pub fn sysfs_gate(content: Option<&str>) -> Result<u32, UvmError> {
    let Some(text) = content else {
        return Err(UvmError::Unavailable(format!("nvidia-uvm is not the gasan-patched module (no {SYSFS_ABI}); no gasan ioctl was sent")));
    };
    match text.trim().parse::<u32>() {
        Ok(v) if v == UVM_GASAN_ABI_VERSION => Ok(v),
        Ok(v) => Err(UvmError::Unavailable(format!("the gasan-patched nvidia-uvm speaks ABI {v}, this build {UVM_GASAN_ABI_VERSION}; no gasan ioctl was sent"))),
        Err(_) => Err(UvmError::Unavailable(format!("{SYSFS_ABI} holds {text:?}; no gasan ioctl was sent"))),
    }
}

/// Checks `UVM_GASAN_IDENTIFY`'s answer.
pub fn check_identity(r: nix::Result<i32>, p: &UVM_GASAN_IDENTIFY_PARAMS) -> Result<(), UvmError> {
    if let Err(e) = r {
        return Err(UvmError::Unavailable(format!("nvidia-uvm does not answer UVM_GASAN_IDENTIFY ({e}): not the gasan-patched module (kmod-patch/)")));
    }
    if p.rmStatus != 0 || p.magic != UVM_GASAN_MAGIC {
        return Err(UvmError::Unavailable(format!("UVM_GASAN_IDENTIFY answered status {:#x}, magic {:#x}: not gasan's nvidia-uvm", p.rmStatus, p.magic)));
    }
    if p.abiVersion != UVM_GASAN_ABI_VERSION {
        return Err(UvmError::Unavailable(format!("gasan kmod ABI {} (this build speaks {UVM_GASAN_ABI_VERSION})", p.abiVersion)));
    }
    Ok(())
}

impl KmodDevice {
    /// The device for the process's CUDA VA space, or for a fresh `/dev/nvidia-uvm` file when the
    /// process has none (enough for `UVM_GASAN_IDENTIFY`; the other commands need an initialized
    /// VA space). Fails, having sent nothing, unless sysfs shows the patched module, and fails
    /// unless `UVM_GASAN_IDENTIFY` (the first and only command sent so far) answers gasan's magic
    /// and this build's ABI version.
    pub fn open() -> Result<KmodDevice, UvmError> {
        sysfs_gate(std::fs::read_to_string(SYSFS_ABI).ok().as_deref())?;
        let dev = Self::open_unchecked()?;
        dev.identify()?;
        Ok(dev)
    }

    /// A fresh, uninitialized `/dev/nvidia-uvm` file of this process's own (not libcuda's), after
    /// the same checks as [`KmodDevice::open`].
    pub fn open_own() -> Result<KmodDevice, UvmError> {
        sysfs_gate(std::fs::read_to_string(SYSFS_ABI).ok().as_deref())?;
        let dev = Self::open_file()?;
        dev.identify()?;
        Ok(dev)
    }

    fn open_unchecked() -> Result<KmodDevice, UvmError> {
        if let Some(fd) = process_uvm_fd() {
            return Ok(KmodDevice { fd, _own: None });
        }
        Self::open_file()
    }

    fn open_file() -> Result<KmodDevice, UvmError> {
        let f = std::fs::OpenOptions::new().read(true).write(true).open("/dev/nvidia-uvm").map_err(|e| UvmError::Unavailable(format!("cannot open /dev/nvidia-uvm: {e}")))?;
        let own: OwnedFd = f.into();
        Ok(KmodDevice { fd: own.as_raw_fd(), _own: Some(own) })
    }

    /// `UVM_GASAN_IDENTIFY`: the module's magic and ABI version (changes nothing).
    pub fn identify(&self) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_IDENTIFY_PARAMS::default();
        // SAFETY: `p` is the ioctl's parameter block, laid out as the kernel expects (bindgen).
        let r = unsafe { ioctl_identify(self.fd, &mut p) };
        check_identity(r, &p)
    }

    /// `UVM_GASAN_QUERY`: what this VA space's GPUs support.
    pub fn query(&self) -> Result<Capabilities, UvmError> {
        let mut p = UVM_GASAN_QUERY_PARAMS::default();
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_query(self.fd, &mut p) };
        status("UVM_GASAN_QUERY", r, p.rmStatus)?;
        Ok(Capabilities { abi_version: p.abiVersion, caps: p.caps, max_va: p.maxVa })
    }

    pub fn reserve_pool(&self, base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_RESERVE_POOL_PARAMS { base, length, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_reserve_pool(self.fd, &mut p) };
        status("UVM_GASAN_RESERVE_POOL", r, p.rmStatus)
    }

    pub fn map_alias(&self, src_base: u64, length: u64, alias_base: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: src_base, length, aliasBase: alias_base, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_map_alias(self.fd, &mut p) };
        status("UVM_GASAN_MAP_ALIAS", r, p.rmStatus)
    }

    pub fn unmap_alias(&self, alias_base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: alias_base, length, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_unmap_alias(self.fd, &mut p) };
        status("UVM_GASAN_UNMAP_ALIAS", r, p.rmStatus)
    }

    pub fn set_protection(&self, base: u64, length: u64, page_size: u32, prot: Prot) -> Result<(), UvmError> {
        let prot = match prot {
            Prot::None => UVM_GASAN_PROT_NONE,
            Prot::ReadOnly => UVM_GASAN_PROT_RO,
            Prot::ReadWrite => UVM_GASAN_PROT_RW,
        };
        let mut p = UVM_GASAN_SET_PROTECTION_PARAMS { base, length, pageSize: page_size, prot, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_set_protection(self.fd, &mut p) };
        status("UVM_GASAN_SET_PROTECTION", r, p.rmStatus)
    }

    pub fn map_sparse_zero(&self, base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base, length, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_map_sparse_zero(self.fd, &mut p) };
        status("UVM_GASAN_MAP_SPARSE_ZERO", r, p.rmStatus)
    }

    /// A pollable fd delivering the pool's fatal faults ([`read_fault_events`]).
    pub fn subscribe_faults(&self, nonblock: bool) -> Result<OwnedFd, UvmError> {
        let flags = if nonblock { UVM_GASAN_SUBSCRIBE_NONBLOCK } else { 0 };
        let mut p = UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { flags, ..Default::default() };
        // SAFETY: as in `identify`.
        let r = unsafe { ioctl_subscribe_faults(self.fd, &mut p) };
        status("UVM_GASAN_SUBSCRIBE_FAULTS", r, p.rmStatus)?;
        // SAFETY: the kernel just created this descriptor for us.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(p.eventFd as RawFd) })
    }

    /// Sends one call of the self-test's table as it is (padding and all) and returns the
    /// `rmStatus` it got, or the errno. A subscription it opens is closed again.
    pub fn send(&self, call: &crate::kmod_check::Call) -> Result<u32, nix::errno::Errno> {
        use crate::kmod_check::Call::*;
        // SAFETY: in every arm the ioctl gets a pointer to a local copy (`mut p`) of the command's
        // parameter block, laid out as the kernel expects (bindgen), which it may read and write;
        // `self.fd` is an open nvidia-uvm file. The event fd closed in the SubscribeFaults arm was
        // just created by the kernel for this call, and nothing else owns it.
        let (r, st) = unsafe {
            match *call {
                Identify(mut p) => (ioctl_identify(self.fd, &mut p), p.rmStatus),
                Query(mut p) => (ioctl_query(self.fd, &mut p), p.rmStatus),
                ReservePool(mut p) => (ioctl_reserve_pool(self.fd, &mut p), p.rmStatus),
                MapAlias(mut p) => (ioctl_map_alias(self.fd, &mut p), p.rmStatus),
                UnmapAlias(mut p) => (ioctl_unmap_alias(self.fd, &mut p), p.rmStatus),
                SetProtection(mut p) => (ioctl_set_protection(self.fd, &mut p), p.rmStatus),
                MapSparseZero(mut p) => (ioctl_map_sparse_zero(self.fd, &mut p), p.rmStatus),
                SubscribeFaults(mut p) => {
                    let r = ioctl_subscribe_faults(self.fd, &mut p);
                    if r.is_ok() && p.rmStatus == 0 {
                        libc::close(p.eventFd as RawFd);
                    }
                    (r, p.rmStatus)
                }
            }
        };
        r.map(|_| st)
    }

    /// Issues gasan command `nr` with a raw buffer whose length is encoded as the parameter size
    /// (the self-test's wrong-size cases). `buf` may be any address: the kernel must fail cleanly.
    ///
    /// # Safety
    /// `buf` must be null, unmapped, or point to `size` bytes the kernel may write.
    pub unsafe fn send_raw(&self, nr: u32, size: usize, buf: *mut u8) -> Result<i32, nix::errno::Errno> {
        // SAFETY: the caller vouches for `buf`.
        let r = unsafe { libc::ioctl(self.fd, request_code(nr, size), buf) };
        nix::errno::Errno::result(r)
    }

    /// The descriptor the commands go to.
    pub fn raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// Decodes whole fault records from bytes read from the subscription fd (a trailing partial
/// record is ignored).
pub fn parse_fault_events(bytes: &[u8]) -> Vec<FaultEvent> {
    bytes
        .chunks_exact(std::mem::size_of::<FaultEvent>())
        // SAFETY: each chunk holds exactly one record in the kernel's layout (bindgen's struct).
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<FaultEvent>()) })
        .collect()
}

/// Reads the fault records available now (the fd should be non-blocking or polled first).
pub fn read_fault_events(fd: &OwnedFd) -> Result<Vec<FaultEvent>, UvmError> {
    let mut buf = vec![0u8; 64 * std::mem::size_of::<FaultEvent>()];
    match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
        Ok(n) => Ok(parse_fault_events(&buf[..n])),
        Err(nix::errno::Errno::EAGAIN) => Ok(Vec::new()),
        Err(e) => Err(UvmError::Os { call: "read(gasan fault fd)", errno: e as i32 }),
    }
}

/// Checks for the patched module without a CUDA context (sysfs, then `UVM_GASAN_IDENTIFY` on a
/// file of its own); returns the ABI version.
pub fn probe() -> Result<u32, UvmError> {
    if !std::path::Path::new("/dev/nvidia-uvm").exists() {
        return Err(UvmError::Unavailable("no /dev/nvidia-uvm".into()));
    }
    KmodDevice::open_own()?;
    Ok(UVM_GASAN_ABI_VERSION)
}

/// CUDA VMM for physical chunks and 2 MiB mappings, plus the patch for what the VMM cannot do:
/// protections below 2 MiB inside the pool, and the pool registered with the module so its faults
/// are reported.
pub struct KmodBackend {
    vmm: VmmBackend,
    dev: KmodDevice,
    caps: Capabilities,
}

impl KmodBackend {
    /// Wraps `vmm` if the patched module answers; otherwise returns `vmm` back with the reason,
    /// so the caller keeps using it (the fallback).
    #[allow(clippy::result_large_err)] // the VMM comes back by value so the caller keeps using it
    pub fn probe(vmm: VmmBackend) -> Result<KmodBackend, (VmmBackend, UvmError)> {
        // `open` sends UVM_GASAN_IDENTIFY first (after the sysfs check), nothing else before it.
        let dev = match KmodDevice::open() {
            Ok(d) => d,
            Err(e) => return Err((vmm, e)),
        };
        match dev.query() {
            Ok(caps) => Ok(KmodBackend { vmm, dev, caps }),
            Err(e) => Err((vmm, e)),
        }
    }

    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }
}

impl Backend for KmodBackend {
    fn name(&self) -> &'static str {
        "kmod"
    }
    fn granularity(&self) -> u64 {
        self.vmm.granularity()
    }
    fn guard_granularity(&self) -> u64 {
        self.caps.guard_page().unwrap_or_else(|| self.vmm.granularity())
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        let va = self.vmm.reserve(size, hint)?;
        // The first reservation is the pool; later ones (aliases) are not registered as pools.
        match self.dev.reserve_pool(va, size) {
            Ok(()) | Err(UvmError::Kmod { status: NV_ERR_STATE_IN_USE, .. }) => Ok(va),
            Err(e) => {
                let _ = self.vmm.free_va(va, size);
                Err(e)
            }
        }
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        self.vmm.free_va(va, size)
    }
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.vmm.create_chunk()
    }
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.vmm.create_host_chunk()
    }
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), UvmError> {
        self.vmm.copy(dst, src, len)
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        self.vmm.release_chunk(h)
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.vmm.map(va, h, prot)
    }
    fn map_host(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.vmm.map_host(va, h, prot)
    }
    fn create_wide_chunk(&self, slots: u64) -> Result<ChunkHandle, UvmError> {
        self.vmm.create_wide_chunk(slots)
    }
    fn map_wide(&self, va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError> {
        self.vmm.map_wide(va, h, slots, prot)
    }
    fn map_run(&self, va: u64, count: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.vmm.map_run(va, count, h, prot)
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.vmm.unmap(va, len)
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        let g = self.vmm.granularity();
        if va.is_multiple_of(g) && len.is_multiple_of(g) {
            return self.vmm.protect(va, len, prot);
        }
        let page = if va.is_multiple_of(64 << 10) && len.is_multiple_of(64 << 10) && self.caps.caps & UVM_GASAN_CAP_PAGE_64K != 0 { 64 << 10 } else { 4096 };
        self.dev.set_protection(va, len, page as u32, prot)
    }
    fn write(&self, va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError> {
        self.vmm.write(va, data, stream)
    }
    fn fill(&self, va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError> {
        self.vmm.fill(va, len, byte, stream)
    }
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        self.vmm.read(va, out)
    }
    fn wait_writes(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.vmm.wait_writes(va, len)
    }
    fn device(&self) -> i32 {
        self.vmm.device()
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        self.vmm.set_peer_access(va, len, peer, prot)
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        self.vmm.access(va, device)
    }
    fn export_chunk(&self, h: ChunkHandle) -> Result<std::os::fd::OwnedFd, UvmError> {
        self.vmm.export_chunk(h)
    }
    fn import_chunk(&self, fd: std::os::fd::OwnedFd) -> Result<ChunkHandle, UvmError> {
        self.vmm.import_chunk(fd)
    }
}

/// `NV_ERR_STATE_IN_USE` (nvstatuscodes.h): the pool is already reserved.
pub const NV_ERR_STATE_IN_USE: u32 = UVM_GASAN_ST_STATE_IN_USE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_records_decode_whole_records_only() {
        let mut b = Vec::new();
        for (a, t) in [(0x7000_0000_1000u64, 2u32), (0x1_0000_0000_0000, 1)] {
            b.extend_from_slice(&a.to_ne_bytes());
            b.extend_from_slice(&5u64.to_ne_bytes());
            b.extend_from_slice(&t.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
        }
        b.extend_from_slice(&[1, 2, 3]); // partial record
        let v = parse_fault_events(&b);
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].address, v[0].accessType), (0x7000_0000_1000, 2));
        assert_eq!(v[1].address, 0x1_0000_0000_0000);
    }

    #[test]
    fn guard_page_prefers_the_finest_supported() {
        let c = |caps| Capabilities { abi_version: 1, caps, max_va: 0 };
        assert_eq!(c(UVM_GASAN_CAP_PAGE_4K | UVM_GASAN_CAP_PAGE_64K).guard_page(), Some(4096));
        assert_eq!(c(UVM_GASAN_CAP_PAGE_64K).guard_page(), Some(65536));
        assert_eq!(c(0).guard_page(), None);
    }

    #[test]
    fn commands_are_iowr_encoded_far_from_plain_numbers() {
        // x86_64 / aarch64 encoding: dir 3 (read|write) << 30, size << 16, type << 8, nr.
        assert_eq!(request_code(UVM_GASAN_NR_IDENTIFY, 24) as u64, 0xc018_6701);
        assert_eq!(request_code(UVM_GASAN_NR_SUBSCRIBE_FAULTS, 16) as u64, 0xc010_6708);
        for nr in UVM_GASAN_NR_IDENTIFY..UVM_GASAN_NR_COUNT {
            // nvidia-uvm's own commands are plain numbers below 1024 (tests from 200 up).
            assert!(request_code(nr, 8) as u64 >= 1 << 30);
        }
        assert_ne!(request_code(UVM_GASAN_NR_QUERY, 24), request_code(UVM_GASAN_NR_QUERY, 32));
    }

    #[test]
    fn nothing_is_sent_unless_sysfs_shows_this_abi() {
        assert!(matches!(sysfs_gate(None), Err(UvmError::Unavailable(_))));
        assert!(matches!(sysfs_gate(Some("1\n")), Err(UvmError::Unavailable(_))));
        assert!(matches!(sysfs_gate(Some("x")), Err(UvmError::Unavailable(_))));
        assert_eq!(sysfs_gate(Some(&format!("{UVM_GASAN_ABI_VERSION}\n"))).unwrap(), UVM_GASAN_ABI_VERSION);
    }

    #[test]
    fn identity_needs_magic_and_version() {
        let good = UVM_GASAN_IDENTIFY_PARAMS { magic: UVM_GASAN_MAGIC, abiVersion: UVM_GASAN_ABI_VERSION, nrCount: UVM_GASAN_NR_COUNT, ..Default::default() };
        assert!(check_identity(Ok(0), &good).is_ok());
        assert!(check_identity(Err(nix::errno::Errno::EINVAL), &good).is_err());
        assert!(check_identity(Ok(0), &UVM_GASAN_IDENTIFY_PARAMS { magic: 0, ..good }).is_err());
        assert!(check_identity(Ok(0), &UVM_GASAN_IDENTIFY_PARAMS { abiVersion: 1, ..good }).is_err());
        assert!(check_identity(Ok(0), &UVM_GASAN_IDENTIFY_PARAMS { rmStatus: 0x1f, ..good }).is_err());
        assert_eq!(&UVM_GASAN_MAGIC.to_le_bytes(), b"GASANUVM");
    }

    #[test]
    fn probe_without_the_module_says_why() {
        // CI machines have no nvidia-uvm; GPU machines run the stock module. Either way the probe
        // fails with a reason, never a crash.
        match probe() {
            Err(UvmError::Unavailable(why)) => assert!(!why.is_empty()),
            other => {
                assert!(std::path::Path::new("/dev/nvidia-uvm").exists(), "{other:?}");
            }
        }
    }
}
