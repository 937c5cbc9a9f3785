//! What the runtime holds for one GPU ([`DeviceRuntime`]: its pool's allocator, error ring, fault
//! queue, device heap, outside table and the modules pointed at its heap), the handles of loaded
//! checked modules, and how the owners above reach the process's devices ([`DeviceSource`], which
//! the state implements) without naming the state.

use crate::allocator::Allocator;
use crate::devices::Devices;
use crate::ring::Ring;
use std::sync::Mutex;

/// A loaded checked module: the driver's handle for it.
#[derive(Clone, Copy, Debug)]
pub enum LoadedHandle {
    Module(cudarc::driver::sys::CUmodule),
    Library(cudarc::driver::sys::CUlibrary),
}

// SAFETY: driver handles are opaque references to process-wide driver objects, which the driver
// accepts from any thread; gasan never dereferences them, only passes them back to the driver.
unsafe impl Send for LoadedHandle {}
// SAFETY: as for Send: a shared handle is only ever copied and passed to the driver.
unsafe impl Sync for LoadedHandle {}

pub struct DeviceRuntime {
    pub alloc: Allocator,
    pub ring: Mutex<Ring>,
    pub device: i32,
    /// More than one GPU is visible: allocations must check which GPU is current (read once, at
    /// pool creation, so single-GPU programs pay nothing per allocation), and each GPU gets its
    /// own runtime at its first use, its pool in the process's span ([`DeviceSource::device_for`]).
    pub multi_gpu: bool,
    /// This process's fatal GPU faults (nvidia-uvm tools queue), when it could be attached.
    pub faults: Mutex<Option<crate::faults::FaultQueue>>,
    /// The checked device heap, reserved when the first module calling in-kernel `malloc`/`free`
    /// gets its control block (`Err`: reserving failed once; such modules use the driver's heap).
    pub device_heap: Mutex<Option<Result<crate::device_heap::HeapRegion, ()>>>,
    /// The table of outside ranges kernels check against (`outside_checks=1`; `None`: off, or
    /// it could not be allocated).
    pub outside: Option<crate::outside::OutsideTable>,
    /// Modules whose heap symbol holds the heap's address (rewritten if the heap is replaced).
    pub(crate) heap_modules: Mutex<Vec<(LoadedHandle, u64, String)>>,
}

/// The process's devices as the owners that act on them see them: each set up at its first use.
pub trait DeviceSource {
    /// The first device used, set up now for the current context's GPU when none was.
    fn device(&self) -> Option<&DeviceRuntime>;
    /// Device `dev`'s runtime, set up at its first use (`None` when it cannot be).
    fn device_for(&self, dev: i32) -> Option<&DeviceRuntime>;
    /// The devices set up so far.
    fn devices(&self) -> &Devices<DeviceRuntime>;
}

/// Device of the current context, if there is one.
pub fn current_device() -> Option<i32> {
    crate::driver::result::ctx_get_device().ok().filter(|&d| d >= 0)
}

/// Compute capability (e.g. 90) of `device`.
pub fn compute_capability(device: i32) -> Option<u32> {
    use crate::driver::result::device_get_attribute;
    use cudarc::driver::sys::CUdevice_attribute::{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR};
    let maj = device_get_attribute(MAJOR, device).ok()?;
    let min = device_get_attribute(MINOR, device).ok()?;
    Some((maj * 10 + min) as u32)
}
