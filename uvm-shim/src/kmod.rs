//! Backend for gasan's patched nvidia-uvm (kmod-patch/): the ioctls of
//! `kmod-patch/include/uvm_gasan_ioctl.h`, whose Rust side is bindgen's output ([`abi`], layout
//! asserted at compile time; `tests/kmod_abi.rs` keeps it current).
//!
//! The ioctls act on a UVM VA space, i.e. on an open `/dev/nvidia-uvm` file: for the process's own
//! CUDA memory that is the descriptor libcuda opened ([`process_uvm_fd`]). [`KmodBackend`] keeps
//! the CUDA VMM for physical memory and 2 MiB mappings and adds, through the patch, protections at
//! 64 KiB / 4 KiB, aliases at GPU-only addresses and sparse shadow; [`KmodBackend::probe`] fails
//! (and the pool stays on the VMM) when the module does not answer `UVM_GASAN_QUERY`.

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

// nvidia-uvm numbers its ioctls plainly (no _IOWR encoding), hence the "bad" variants.
nix::ioctl_readwrite_bad!(ioctl_query, UVM_GASAN_QUERY, UVM_GASAN_QUERY_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_reserve_pool, UVM_GASAN_RESERVE_POOL, UVM_GASAN_RESERVE_POOL_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_map_alias, UVM_GASAN_MAP_ALIAS, UVM_GASAN_MAP_ALIAS_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_unmap_alias, UVM_GASAN_UNMAP_ALIAS, UVM_GASAN_UNMAP_ALIAS_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_set_protection, UVM_GASAN_SET_PROTECTION, UVM_GASAN_SET_PROTECTION_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_map_sparse_zero, UVM_GASAN_MAP_SPARSE_ZERO, UVM_GASAN_MAP_SPARSE_ZERO_PARAMS);
nix::ioctl_readwrite_bad!(ioctl_subscribe_faults, UVM_GASAN_SUBSCRIBE_FAULTS, UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS);

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

impl KmodDevice {
    /// The device for the process's CUDA VA space, or for a fresh `/dev/nvidia-uvm` file when the
    /// process has none (enough for the version query).
    pub fn open() -> Result<KmodDevice, UvmError> {
        if let Some(fd) = process_uvm_fd() {
            return Ok(KmodDevice { fd, _own: None });
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/nvidia-uvm")
            .map_err(|e| UvmError::Unavailable(format!("cannot open /dev/nvidia-uvm: {e}")))?;
        let own: OwnedFd = f.into();
        Ok(KmodDevice { fd: own.as_raw_fd(), _own: Some(own) })
    }

    /// `UVM_GASAN_QUERY`; `Unavailable` on a stock module (which rejects the unknown ioctl).
    pub fn query(&self) -> Result<Capabilities, UvmError> {
        let mut p = UVM_GASAN_QUERY_PARAMS::default();
        // SAFETY: `p` is the ioctl's parameter block, laid out as the kernel expects (bindgen).
        let r = unsafe { ioctl_query(self.fd, &mut p) };
        if let Err(e) = r {
            return Err(UvmError::Unavailable(format!(
                "nvidia-uvm does not answer UVM_GASAN_QUERY ({e}): not the gasan-patched module (kmod-patch/)"
            )));
        }
        status("UVM_GASAN_QUERY", r, p.rmStatus)?;
        if p.abiVersion != UVM_GASAN_ABI_VERSION {
            return Err(UvmError::Unavailable(format!("gasan kmod ABI {} (this build speaks {UVM_GASAN_ABI_VERSION})", p.abiVersion)));
        }
        Ok(Capabilities { abi_version: p.abiVersion, caps: p.caps, max_va: p.maxVa })
    }

    pub fn reserve_pool(&self, base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_RESERVE_POOL_PARAMS { base, length, ..Default::default() };
        // SAFETY: as in `query`.
        let r = unsafe { ioctl_reserve_pool(self.fd, &mut p) };
        status("UVM_GASAN_RESERVE_POOL", r, p.rmStatus)
    }

    pub fn map_alias(&self, src_base: u64, length: u64, alias_base: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: src_base, length, aliasBase: alias_base, ..Default::default() };
        // SAFETY: as in `query`.
        let r = unsafe { ioctl_map_alias(self.fd, &mut p) };
        status("UVM_GASAN_MAP_ALIAS", r, p.rmStatus)
    }

    pub fn unmap_alias(&self, alias_base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: alias_base, length, ..Default::default() };
        // SAFETY: as in `query`.
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
        // SAFETY: as in `query`.
        let r = unsafe { ioctl_set_protection(self.fd, &mut p) };
        status("UVM_GASAN_SET_PROTECTION", r, p.rmStatus)
    }

    pub fn map_sparse_zero(&self, base: u64, length: u64) -> Result<(), UvmError> {
        let mut p = UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base, length, ..Default::default() };
        // SAFETY: as in `query`.
        let r = unsafe { ioctl_map_sparse_zero(self.fd, &mut p) };
        status("UVM_GASAN_MAP_SPARSE_ZERO", r, p.rmStatus)
    }

    /// A pollable fd delivering the pool's fatal faults ([`read_fault_events`]).
    pub fn subscribe_faults(&self) -> Result<OwnedFd, UvmError> {
        let mut p = UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS::default();
        // SAFETY: as in `query`.
        let r = unsafe { ioctl_subscribe_faults(self.fd, &mut p) };
        status("UVM_GASAN_SUBSCRIBE_FAULTS", r, p.rmStatus)?;
        // SAFETY: the kernel just created this descriptor for us.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(p.eventFd as RawFd) })
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

/// Checks for the patched module without a CUDA context.
pub fn probe() -> Result<Capabilities, UvmError> {
    if !std::path::Path::new("/dev/nvidia-uvm").exists() {
        return Err(UvmError::Unavailable("no /dev/nvidia-uvm".into()));
    }
    KmodDevice::open()?.query()
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
    pub fn probe(vmm: VmmBackend) -> Result<KmodBackend, (VmmBackend, UvmError)> {
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
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        self.vmm.release_chunk(h)
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.vmm.map(va, h, prot)
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.vmm.unmap(va, len)
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        let g = self.vmm.granularity();
        if va % g == 0 && len % g == 0 {
            return self.vmm.protect(va, len, prot);
        }
        let page = if va % (64 << 10) == 0 && len % (64 << 10) == 0 && self.caps.caps & UVM_GASAN_CAP_PAGE_64K != 0 { 64 << 10 } else { 4096 };
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
    fn grant_peer(&self, va: u64, len: u64, peer: i32) -> Result<(), UvmError> {
        self.vmm.grant_peer(va, len, peer)
    }
}

/// `NV_ERR_STATE_IN_USE` (nvstatuscodes.h): the pool is already reserved.
pub const NV_ERR_STATE_IN_USE: u32 = 0x63;

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
