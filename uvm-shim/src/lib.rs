//! gasan-uvm: the GPU virtual-address pool that holds every device allocation, with chunk, alias and
//! shadow mappings.
//!
//! API used by the runtime:
//! * [`Pool::new`]`(backend, &PoolConfig)`; [`Pool::base`], [`Pool::size`], [`Pool::shadow_base`],
//!   [`Pool::granularity`];
//! * [`Pool::commit`], [`Pool::decommit`], [`Pool::retire`], [`Pool::protect`], [`Pool::alias`];
//! * [`Pool::write_shadow`], [`Pool::fill_shadow`] (optionally ordered on a CUDA stream), [`Pool::read_shadow`];
//! * [`Pool::extent_table`], [`Pool::set_extent`], [`Pool::clear_extent`]: the per-block table of
//!   live large allocations that checked PTX range-tests hoisted loop accesses against;
//! * backends: [`VmmBackend::new`]`(device, fns)` (CUDA VMM through the real driver's entry
//!   points [`DriverFns`], which the caller hands in),
//!   [`HostBackend::new`]`(granularity)` (CPU simulation), [`KmodBackend::probe`]`(vmm)` (patched
//!   nvidia-uvm on top of the VMM, falling back to it), [`kmod::probe`];
//! * [`Pool::canonical`] maps alias addresses back to the pool addresses they mirror;
//! * [`tools::FaultQueue`]: the process's fatal GPU faults from nvidia-uvm's tools event queue;
//! * several GPUs: [`DeviceSpan::reserve`] (VA for every device's pool, [`plan::DeviceLayout`]),
//!   [`Pool::in_span`] (a device's pool, when the device is first used),
//!   [`Pool::grant_peer_access`] / [`Pool::revoke_peer_access`], [`Pool::read_as`];
//! * sharing allocations between processes: [`Pool::export`] → [`ipc::Exporter::export`] (a
//!   64-byte [`ipc::IpcHandle`]) → [`ipc::import`] → [`Pool::commit_imported`].
//!
//! [`plan`] holds all mapping arithmetic as pure functions.

pub mod backend;
pub mod counted;
pub mod devices;
pub mod host;
pub mod ipc;
pub mod kmod;
pub mod kmod_check;
pub mod plan;
pub mod pool;
pub mod tools;
pub mod vmm;

pub use backend::{Backend, ChunkHandle, Memory, Prot, Stream};
pub use counted::{BackendCall, CallCounts, CountedBackend};
pub use devices::DeviceSpan;
pub use host::HostBackend;
pub use kmod::KmodBackend;
pub use pool::{Detached, Pool, PoolConfig, PoolCounters, Unmapped};
pub use vmm::{default_resolver, DriverFns, Resolver, VmmBackend};

/// Errors of pool operations. A failed request changes nothing.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum UvmError {
    #[error("CUDA call {call} failed with error {code}")]
    Cuda { call: &'static str, code: i32 },
    #[error("system call {call} failed: errno {errno}")]
    Os { call: &'static str, errno: i32 },
    #[error("range {va:#x}+{len:#x} is not aligned to {gran:#x} (or empty, or wraps)")]
    Misaligned { va: u64, len: u64, gran: u64 },
    #[error("range {va:#x}+{len:#x} is outside the pool")]
    OutsidePool { va: u64, len: u64 },
    #[error("chunk {0:#x} is already committed")]
    AlreadyCommitted(u64),
    #[error("chunk {0:#x} is not committed")]
    NotCommitted(u64),
    #[error("chunk {0:#x} is retired")]
    Retired(u64),
    #[error("{0:#x} is not an alias")]
    NotAlias(u64),
    #[error("bad chunk handle {0}")]
    BadHandle(u64),
    #[error("no virtual address range could be reserved for the pool")]
    NoVa,
    #[error("{call} failed with NV_STATUS {status:#x}")]
    Kmod { call: &'static str, status: u32 },
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    #[error("bad pool configuration: {0}")]
    BadConfig(String),
    #[error("extent [{start:#x}, {end:#x}) is empty")]
    BadExtent { start: u64, end: u64 },
    #[error("device {device} may not access {va:#x}")]
    NoAccess { device: i32, va: u64 },
    #[error("chunk {0:#x} is part of a wide run the request does not cover whole")]
    PartOfRun(u64),
    #[error("bad gasan IPC handle: {0}")]
    BadIpcHandle(String),
}

impl UvmError {
    /// Whether the driver has shut down (`CUDA_ERROR_DEINITIALIZED`): the process is exiting and
    /// its driver state, the pool's memory with it, is already gone, so nothing is left to undo.
    pub fn driver_shut_down(&self) -> bool {
        matches!(self, UvmError::Cuda { code, .. } if *code == cudarc::driver::sys::CUresult::CUDA_ERROR_DEINITIALIZED as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::UvmError;

    #[test]
    fn driver_shut_down_is_only_cuda_error_deinitialized() {
        assert!(UvmError::Cuda { call: "cuMemUnmap", code: 4 }.driver_shut_down());
        assert!(!UvmError::Cuda { call: "cuMemUnmap", code: 2 }.driver_shut_down());
        assert!(!UvmError::Kmod { call: "unmap", status: 4 }.driver_shut_down());
    }
}
