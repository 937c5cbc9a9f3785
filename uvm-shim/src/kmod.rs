//! Backend for the patched nvidia-uvm (kmod-patch/). Today it only probes: the ioctl ABI is defined
//! in `kmod-patch/include/uvm_gasan_ioctl.h` and mirrored below, but the kernel side is not written
//! yet, so no module answers and the pool uses the CUDA VMM backend.

use crate::UvmError;

/// `UVM_GASAN_QUERY` (first gasan ioctl, after upstream's last regular number, 80).
pub const UVM_GASAN_QUERY: u32 = 81;
pub const UVM_GASAN_ABI_VERSION: u32 = 1;

/// Mirror of `UVM_GASAN_QUERY_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryParams {
    pub abi_version: u32,
    pub caps: u32,
    pub max_va: u64,
    pub rm_status: u32,
    pub pad0: u32,
}

/// Mirror of `UVM_GASAN_SET_PROTECTION_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SetProtectionParams {
    pub base: u64,
    pub length: u64,
    pub page_size: u32,
    pub prot: u32,
    pub rm_status: u32,
    pub pad0: u32,
}

/// Mirror of `UVM_GASAN_MAP_ALIAS_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MapAliasParams {
    pub src_base: u64,
    pub length: u64,
    pub alias_base: u64,
    pub rm_status: u32,
    pub pad0: u32,
}

// Same sizes as the `_Static_assert`s in uvm_gasan_ioctl.h.
const _: () = {
    assert!(std::mem::size_of::<QueryParams>() == 24);
    assert!(std::mem::size_of::<SetProtectionParams>() == 32);
    assert!(std::mem::size_of::<MapAliasParams>() == 32);
};

/// Probes for the patched module: `/dev/nvidia-uvm` must exist and answer `UVM_GASAN_QUERY` with
/// our ABI version. No released driver does; the ioctl is not issued until the kernel side exists
/// (an unknown ioctl on the stock module is harmless, but proves nothing we can use).
pub fn probe() -> Result<(), UvmError> {
    if !std::path::Path::new("/dev/nvidia-uvm").exists() {
        return Err(UvmError::Unavailable("no /dev/nvidia-uvm".into()));
    }
    Err(UvmError::Unavailable(format!(
        "the gasan nvidia-uvm patch (ioctl {UVM_GASAN_QUERY}, ABI {UVM_GASAN_ABI_VERSION}) is not implemented yet; using CUDA VMM"
    )))
}
