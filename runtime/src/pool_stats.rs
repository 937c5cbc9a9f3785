//! What the driver's memory pools would say of the stream-ordered allocations gasan serves.
//!
//! `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` come from gasan's pool, so the driver's pools
//! stay empty and their attributes (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`, ...) read 0. PyTorch's
//! cudaMallocAsync backend (what `framework_pools=1` sets) reads its memory statistics
//! (`torch.cuda.memory_allocated()`, `memory_reserved()`, their peaks) from those attributes.
//! These counters give the answers instead: per device, the bytes of live stream-ordered
//! allocations and their peak. gasan's blocks are not carved from a reservation, so "reserved"
//! reads the same as "used". Any pool of a device answers the device's totals: gasan serves
//! every pool from one allocator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub current: u64,
    pub high: u64,
}

#[derive(Default)]
struct Device {
    live: HashMap<u64, u64>,
    usage: Usage,
}

/// Per device: the live stream-ordered allocations (address -> size) and their usage.
#[derive(Default)]
pub struct StreamOrderedStats {
    devices: Mutex<HashMap<i32, Device>>,
    /// Live stream-ordered allocations on every device: a free in a program that makes none
    /// (every `cudaFree` passes here) takes no lock.
    live: AtomicUsize,
}

impl StreamOrderedStats {
    /// A stream-ordered allocation of `size` bytes at `ptr` on `device`.
    pub fn allocated(&self, device: i32, ptr: u64, size: u64) {
        let mut m = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        let d = m.entry(device).or_default();
        match d.live.insert(ptr, size) {
            Some(old) => d.usage.current -= old,
            None => {
                self.live.fetch_add(1, Ordering::Relaxed);
            }
        }
        d.usage.current += size;
        d.usage.high = d.usage.high.max(d.usage.current);
    }

    /// The block at `ptr` was freed (by any call): it no longer counts if it was stream-ordered.
    pub fn freed(&self, device: i32, ptr: u64) {
        // (Counted under the lock: a block is freed after its allocation returned.)
        if self.live.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut m = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = m.get_mut(&device) {
            if let Some(size) = d.live.remove(&ptr) {
                d.usage.current -= size;
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    pub fn usage(&self, device: i32) -> Usage {
        self.devices.lock().unwrap_or_else(|e| e.into_inner()).get(&device).map_or_else(Usage::default, |d| d.usage)
    }

    /// The peak starts again from the current usage (`cuMemPoolSetAttribute` of a `*_HIGH`
    /// attribute to 0, `torch.cuda.reset_peak_memory_stats()`).
    pub fn reset_high(&self, device: i32) {
        if let Some(d) = self.devices.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&device) {
            d.usage.high = d.usage.current;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model: current is the sum of live sizes, high the largest current seen since
        /// the last reset; frees of unknown blocks and other devices change nothing.
        #[test]
        fn usage_agrees_with_a_model(ops in prop::collection::vec((0u8..4, 0u64..8, 1u64..1000), 1..60)) {
            let s = StreamOrderedStats::default();
            let mut live: std::collections::HashMap<u64, u64> = Default::default();
            let mut high = 0;
            for (op, ptr, size) in ops {
                match op {
                    0 | 1 => {
                        s.allocated(0, ptr, size);
                        live.insert(ptr, size);
                    }
                    2 => {
                        s.freed(0, ptr);
                        s.freed(1, ptr);
                        live.remove(&ptr);
                    }
                    _ => {
                        s.reset_high(0);
                        high = live.values().sum();
                    }
                }
                let current: u64 = live.values().sum();
                high = high.max(current);
                prop_assert_eq!(s.usage(0), Usage { current, high });
            }
            prop_assert_eq!(s.usage(1), Usage::default());
        }
    }
}
