//! Backend for the patched nvidia-uvm (kmod-patch/). Probes `/dev/nvidia-uvm` for the gasan version
//! ioctl; without the patched module the pool uses the CUDA VMM backend.

use crate::UvmError;

/// Probes for the patched module. Today no patched module answers on any machine we run on, so this
/// reports why it is unavailable.
pub fn probe() -> Result<(), UvmError> {
    if !std::path::Path::new("/dev/nvidia-uvm").exists() {
        return Err(UvmError::Unavailable("no /dev/nvidia-uvm".into()));
    }
    Err(UvmError::Unavailable("nvidia-uvm does not answer the gasan version ioctl (stock module)".into()))
}
