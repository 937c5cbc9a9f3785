//! Faulting addresses of GPU faults that no check saw: the nvidia-uvm tools queue lives in
//! gasan-uvm (with the other nvidia-uvm ioctls); the runtime uses it through these names.

pub use gasan_uvm::tools::{FatalFault, FaultQueue, FaultQueueError};
