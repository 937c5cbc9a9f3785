//! The VA of every device's pool in a multi-GPU process: one reservation each for the pools, their
//! shadows and their extent tables, cut into equal slots ([`plan::DeviceLayout`]), so that every
//! device's pool is aligned for the cheap in-pool check and one control block can cover them all.
//! Pools take their slot with [`crate::Pool::in_span`] when their device is first used.

use crate::backend::Backend;
use crate::plan::{self, DeviceLayout};
use crate::pool::{PoolConfig, DEFAULT_SIZES};
use crate::UvmError;
use std::sync::{Arc, Mutex};

pub struct DeviceSpan {
    /// The backend that reserved the VA and frees it (any device's: reservations are not a
    /// device's under UVA).
    backend: Box<dyn Backend>,
    layout: DeviceLayout,
    /// Slots with a live pool.
    claimed: Mutex<Vec<bool>>,
}

impl DeviceSpan {
    /// Reserves slots for `devices` pools with `backend` (a backend of any of the devices; the VA
    /// is every device's). Per-device size: `cfg.size`, else the largest of [`DEFAULT_SIZES`]
    /// (up to `cfg.max_size`) for which the whole span can be reserved; at `cfg.hints`, else
    /// anywhere (then the pools lose the aligned check, as a lone pool placed anywhere does).
    pub fn reserve(backend: Box<dyn Backend>, devices: u32, cfg: &PoolConfig) -> Result<Arc<Self>, UvmError> {
        if !(7..=8).contains(&cfg.shift) {
            return Err(UvmError::BadConfig(format!("shadow scale {} (must be 7 or 8)", cfg.shift)));
        }
        let gran = backend.granularity();
        let sizes: Vec<u64> = if cfg.size != 0 { vec![cfg.size] } else { DEFAULT_SIZES.iter().copied().filter(|&s| cfg.max_size == 0 || s <= cfg.max_size).collect() };
        let mut last = UvmError::NoVa;
        for size in sizes {
            let size = plan::align_out(0, size, gran << cfg.shift).map(|r| r.1).ok_or(UvmError::BadConfig("pool size".into()))?;
            DeviceLayout::check(devices, size, cfg.shift, gran)?;
            let layout = DeviceLayout { devices, pool_base: 0, pool_size: size, shadow_base: 0, extent_base: 0, shift: cfg.shift, gran };
            let (_, span) = layout.span();
            let Some(pool_base) = cfg.hints.iter().chain(std::iter::once(&0)).find_map(|&h| backend.reserve(span, h).ok()) else { continue };
            let shadow_len = layout.shadow_size() * u64::from(devices);
            let shadow_base = match backend.reserve(shadow_len, 0) {
                Ok(v) => v,
                Err(e) => {
                    let _ = backend.free_va(pool_base, span);
                    last = e;
                    continue;
                }
            };
            let extent_len = layout.extent_size() * u64::from(devices);
            let extent_base = match backend.reserve(extent_len, 0) {
                Ok(v) => v,
                Err(e) => {
                    let _ = backend.free_va(shadow_base, shadow_len);
                    let _ = backend.free_va(pool_base, span);
                    last = e;
                    continue;
                }
            };
            let layout = DeviceLayout { pool_base, shadow_base, extent_base, ..layout };
            return Ok(Arc::new(Self { backend, layout, claimed: Mutex::new(vec![false; devices as usize]) }));
        }
        Err(last)
    }

    pub fn layout(&self) -> DeviceLayout {
        self.layout
    }

    /// Marks slot `device` as having a pool; refused when it has one or does not exist.
    pub(crate) fn claim(&self, device: u32) -> Result<(), UvmError> {
        let mut c = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        match c.get_mut(device as usize) {
            Some(taken) if !*taken => {
                *taken = true;
                Ok(())
            }
            Some(_) => Err(UvmError::BadConfig(format!("device slot {device} already has a pool"))),
            None => Err(UvmError::BadConfig(format!("device slot {device} of {}", self.layout.devices))),
        }
    }

    /// Slot `device`'s pool is gone (its mappings undone).
    pub(crate) fn release(&self, device: u32) {
        if let Some(c) = self.claimed.lock().unwrap_or_else(|p| p.into_inner()).get_mut(device as usize) {
            *c = false;
        }
    }
}

impl Drop for DeviceSpan {
    fn drop(&mut self) {
        let l = self.layout;
        let n = u64::from(l.devices);
        let (base, span) = l.span();
        let _ = self.backend.free_va(l.extent_base, l.extent_size() * n);
        let _ = self.backend.free_va(l.shadow_base, l.shadow_size() * n);
        let _ = self.backend.free_va(base, span);
    }
}
