//! What the runtime holds per device: one slot per device ordinal (up to
//! [`gasan_uvm::plan::MAX_DEVICES`]), each set up once, at the device's first use, and kept for
//! the process (a failed set-up is remembered, not retried: the device then runs unchecked).
//! The state holds a `Devices<DeviceRuntime>`; this file knows nothing of what a device holds.

use std::sync::{Mutex, OnceLock};

/// Device ordinals a process may have set up (the pool layout's limit).
pub const MAX_DEVICES: usize = gasan_uvm::plan::MAX_DEVICES as usize;

pub struct Devices<T> {
    slots: [OnceLock<Option<T>>; MAX_DEVICES],
    /// Held while one device is set up, so that a set-up runs once and sees the ones before it.
    setting_up: Mutex<()>,
    /// The first device set up (successfully or not): the one a single-pool process checks.
    first: OnceLock<i32>,
}

impl<T> Default for Devices<T> {
    fn default() -> Self {
        Devices { slots: std::array::from_fn(|_| OnceLock::new()), setting_up: Mutex::new(()), first: OnceLock::new() }
    }
}

impl<T> Devices<T> {
    fn slot(&self, device: i32) -> Option<&OnceLock<Option<T>>> {
        usize::try_from(device).ok().and_then(|d| self.slots.get(d))
    }

    /// Device `device`'s, when it was set up and the set-up succeeded.
    pub fn get(&self, device: i32) -> Option<&T> {
        self.slot(device)?.get()?.as_ref()
    }

    /// Whether `device`'s set-up ran (whatever it gave).
    pub fn is_set_up(&self, device: i32) -> bool {
        self.slot(device).is_some_and(|s| s.get().is_some())
    }

    /// The first device set up, when one was.
    pub fn first_device(&self) -> Option<i32> {
        self.first.get().copied()
    }

    /// The first device's, when it was set up and that succeeded.
    pub fn first(&self) -> Option<&T> {
        self.get(self.first_device()?)
    }

    /// Device `device`'s, set up with `set_up` if this is its first use (`None`: the ordinal is
    /// out of range, or its set-up failed now or before). `set_up` runs at most once per
    /// device, one at a time, and may read the devices set up before it.
    pub fn get_or_set_up(&self, device: i32, set_up: impl FnOnce() -> Option<T>) -> Option<&T> {
        let slot = self.slot(device)?;
        if let Some(v) = slot.get() {
            return v.as_ref();
        }
        let _one_at_a_time = self.setting_up.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = slot.get() {
            return v.as_ref();
        }
        let _ = slot.set(set_up());
        let _ = self.first.set(device);
        slot.get()?.as_ref()
    }

    /// The first device's, set up now for the device `device()` names when none was yet (a
    /// single-pool process: whichever device is used first is the one checked). The flag says
    /// whether this call ran the set-up.
    pub fn first_or_set_up(&self, device: impl FnOnce() -> Option<i32>, set_up: impl FnOnce(i32) -> Option<T>) -> (Option<&T>, bool) {
        if let Some(first) = self.first_device() {
            return (self.get(first), false);
        }
        let one_at_a_time = self.setting_up.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = self.first_device() {
            return (self.get(first), false);
        }
        let Some(slot) = device().and_then(|d| Some((d, self.slot(d)?))) else { return (None, false) };
        let (device, slot) = slot;
        let _ = slot.set(set_up(device));
        let _ = self.first.set(device);
        drop(one_at_a_time);
        (slot.get().and_then(Option::as_ref), true)
    }

    /// Every device set up successfully, by ordinal, with its ordinal.
    pub fn each(&self) -> impl Iterator<Item = (i32, &T)> {
        self.slots.iter().enumerate().filter_map(|(d, s)| Some((d as i32, s.get()?.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn each_device_is_set_up_once_and_failures_are_remembered() {
        let d: Devices<String> = Devices::default();
        assert!(d.first().is_none() && d.get(0).is_none());
        let runs = AtomicUsize::new(0);
        let set_up = |name: &str| {
            runs.fetch_add(1, Ordering::SeqCst);
            Some(name.to_string())
        };
        assert_eq!(d.get_or_set_up(1, || set_up("one")).map(String::as_str), Some("one"));
        assert_eq!(d.get_or_set_up(1, || set_up("again")).map(String::as_str), Some("one"));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(d.first_device(), Some(1), "the first device used, not ordinal 0");
        // A failed set-up is kept: the device stays unchecked rather than retried at every call.
        assert!(d.get_or_set_up(0, || None).is_none());
        assert!(d.is_set_up(0) && d.get(0).is_none());
        assert!(d.get_or_set_up(0, || set_up("late")).is_none());
        assert_eq!(d.first().map(String::as_str), Some("one"));
        assert_eq!(d.each().map(|(o, v)| (o, v.as_str())).collect::<Vec<_>>(), vec![(1, "one")]);
        // Ordinals the layout cannot hold.
        assert!(d.get_or_set_up(-1, || set_up("x")).is_none());
        assert!(d.get_or_set_up(MAX_DEVICES as i32, || set_up("x")).is_none());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn concurrent_first_uses_set_a_device_up_once() {
        let d: Devices<usize> = Devices::default();
        let runs = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for dev in 0..4 {
                        let v = d.get_or_set_up(dev, || Some(runs.fetch_add(1, Ordering::SeqCst)));
                        assert!(v.is_some());
                    }
                });
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        assert_eq!(d.each().count(), 4);
    }

    #[test]
    fn a_single_pool_process_checks_the_first_device_it_uses() {
        let d: Devices<&str> = Devices::default();
        assert_eq!(d.first_or_set_up(|| None, |_| Some("x")), (None, false), "no current device: nothing set up");
        assert_eq!(d.first_device(), None);
        assert_eq!(d.first_or_set_up(|| Some(2), |dev| (dev == 2).then_some("two")), (Some(&"two"), true));
        // Later calls get the first device's, whichever device is current.
        assert_eq!(d.first_or_set_up(|| Some(0), |_| Some("zero")), (Some(&"two"), false));
        assert!(!d.is_set_up(0));
        // A failed first set-up is the answer from then on.
        let failed: Devices<&str> = Devices::default();
        assert_eq!(failed.first_or_set_up(|| Some(0), |_| None), (None, true));
        assert_eq!(failed.first_or_set_up(|| Some(1), |_| Some("one")), (None, false));
    }
}
