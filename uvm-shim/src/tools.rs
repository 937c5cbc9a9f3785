//! Faulting addresses of GPU faults that no check saw, from nvidia-uvm's tools event queue.
//!
//! A fault in uninstrumented code (or on an unmapped guard gap) kills the context with error 700;
//! the driver API never says where. nvidia-uvm records every fatal GPU fault of a VA space as a
//! `UvmEventTypeFatalFault` in the event queues of tools attached to that VA space. Attaching needs
//! no privilege, only the process's own `/dev/nvidia-uvm` file descriptor (the one libcuda opened),
//! so the runtime subscribes to its own fatal faults and reads the address after the error.
//! Layouts are nvidia-uvm's version-1 tools queue (`uvm_types.h`, `uvm_ioctl.h`; stable across
//! the 5xx drivers).

use std::os::fd::{AsRawFd, OwnedFd};

/// `UVM_TOOLS_INIT_EVENT_TRACKER` and `UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS` (plain numbers on Linux).
const UVM_TOOLS_INIT_EVENT_TRACKER: u32 = 56;
const UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS: u32 = 58;
const QUEUE_VERSION_V1: u32 = 1;
const EVENT_TYPE_FATAL_FAULT: u8 = 6;
/// Entries in the queue (a power of two); each is 64 bytes, so the queue is one 4 KiB page.
const QUEUE_ENTRIES: usize = 64;
const ENTRY_SIZE: usize = 64;
const PAGE: usize = 4096;

#[repr(C)]
struct InitEventTrackerParams {
    queue_buffer: u64,
    queue_buffer_size: u64,
    control_buffer: u64,
    processor: [u8; 16],
    all_processors: u32,
    uvm_fd: u32,
    rm_status: u32,
    requested_version: u32,
    granted_version: u32,
    _pad: u32,
}
const _: () = assert!(std::mem::size_of::<InitEventTrackerParams>() == 64);

#[repr(C)]
struct EnableEventsParams {
    event_type_flags: u64,
    rm_status: u32,
    _pad: u32,
}

// nvidia-uvm numbers its ioctls plainly (no _IOWR encoding), hence the "bad" variants.
nix::ioctl_readwrite_bad!(ioctl_init_event_tracker, UVM_TOOLS_INIT_EVENT_TRACKER, InitEventTrackerParams);
nix::ioctl_readwrite_bad!(ioctl_enable_events, UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS, EnableEventsParams);

/// `UvmToolsEventControlData_V1`: get/put cursors, then drop counters per event type.
#[repr(C)]
struct ControlData {
    get_ahead: u32,
    get_behind: u32,
    put_ahead: u32,
    put_behind: u32,
    dropped: [u64; 64],
}
const _: () = assert!(std::mem::size_of::<ControlData>() == 528);

/// nvidia-uvm's `UvmEventFatalFaultInfo` (uvm_types.h), the layout of a fatal-fault queue entry;
/// [`FatalFault::from_entry`] reads its fields at these offsets.
#[repr(C)]
struct FatalFaultEntry {
    event_type: u8,
    fault_type: u8,
    access_type: u8,
    processor_index: u8,
    reason: u8,
    _pad: [u8; 3],
    address: u64,
    time_stamp: u64,
}
const _: () = assert!(std::mem::size_of::<FatalFaultEntry>() == 24 && std::mem::offset_of!(FatalFaultEntry, address) == 8);

/// One fatal GPU fault as nvidia-uvm recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatalFault {
    pub address: u64,
    /// `UvmEventFaultType`: 0 invalid-PDE, 1 invalid-PTE, 2 write to read-only, 3 atomic, ...
    pub fault_type: u8,
    /// `UvmEventMemoryAccessType`: 0 invalid, 1 read, 2 write, 3 atomic, 4 prefetch.
    pub access_type: u8,
    pub processor_index: u8,
    /// `UvmEventFatalReason`.
    pub reason: u8,
    pub timestamp: u64,
}

impl FatalFault {
    pub fn access_word(&self) -> &'static str {
        match self.access_type {
            1 => "READ",
            2 => "WRITE",
            3 => "ATOMIC",
            4 => "PREFETCH",
            _ => "ACCESS",
        }
    }

    /// Parses a 64-byte queue entry; `None` for other event types.
    pub fn from_entry(e: &[u8]) -> Option<FatalFault> {
        use std::mem::offset_of;
        type E = FatalFaultEntry;
        if e.len() < std::mem::size_of::<E>() || e[offset_of!(E, event_type)] != EVENT_TYPE_FATAL_FAULT {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().expect("8 bytes, inside the length checked above"));
        Some(FatalFault {
            fault_type: e[offset_of!(E, fault_type)],
            access_type: e[offset_of!(E, access_type)],
            processor_index: e[offset_of!(E, processor_index)],
            reason: e[offset_of!(E, reason)],
            address: u64_at(offset_of!(E, address)),
            timestamp: u64_at(offset_of!(E, time_stamp)),
        })
    }
}

/// Why the queue could not be attached (the runtime then reports faults without an address).
#[derive(Debug, thiserror::Error)]
pub enum FaultQueueError {
    #[error("no /dev/nvidia-uvm descriptor in this process (libcuda has not opened it)")]
    NoUvmFd,
    #[error("cannot open /dev/nvidia-uvm-tools: {0}")]
    OpenTools(std::io::Error),
    #[error("mmap for the event queue failed: {0}")]
    Map(std::io::Error),
    #[error("{0}")]
    Ioctl(crate::UvmError),
}

/// A subscription to this process's fatal GPU faults.
pub struct FaultQueue {
    /// Declared before the pages: dropped (the subscription closed) before they are unmapped.
    tools: OwnedFd,
    queue: *mut u8,
    control: *mut ControlData,
    /// The queue's and the control data's pages (anonymous, page-aligned), which nvidia-uvm
    /// writes while the subscription is open; `queue` and `control` point into them.
    _pages: [memmap2::MmapMut; 2],
}

// SAFETY: the buffers are owned by this object and only read under `&mut self` or with volatile
// reads of kernel-written cursors.
unsafe impl Send for FaultQueue {}

fn map_page() -> Result<memmap2::MmapMut, FaultQueueError> {
    memmap2::MmapMut::map_anon(PAGE).map_err(FaultQueueError::Map)
}

impl FaultQueue {
    /// Attaches to the process's UVM VA space; call after the first context exists.
    pub fn attach() -> Result<FaultQueue, FaultQueueError> {
        let uvm_fd = crate::kmod::process_uvm_fd().ok_or(FaultQueueError::NoUvmFd)?;
        let tools = std::fs::OpenOptions::new().read(true).write(true).open("/dev/nvidia-uvm-tools").map_err(FaultQueueError::OpenTools)?;
        let tools: OwnedFd = tools.into();
        let (mut queue_page, mut control_page) = (map_page()?, map_page()?);
        let (queue, control) = (queue_page.as_mut_ptr(), control_page.as_mut_ptr());
        let q = FaultQueue { tools, queue, control: control.cast(), _pages: [queue_page, control_page] };
        let mut init = InitEventTrackerParams {
            queue_buffer: queue as u64,
            queue_buffer_size: QUEUE_ENTRIES as u64,
            control_buffer: control as u64,
            processor: [0; 16],
            all_processors: 0,
            uvm_fd: uvm_fd as u32,
            rm_status: 0,
            requested_version: QUEUE_VERSION_V1,
            granted_version: 0,
            _pad: 0,
        };
        let fd = q.tools.as_raw_fd();
        // SAFETY: the parameter blocks are laid out as nvidia-uvm expects (sizes asserted above).
        let r = unsafe { ioctl_init_event_tracker(fd, &mut init) };
        crate::kmod::status("UVM_TOOLS_INIT_EVENT_TRACKER", r, init.rm_status).map_err(FaultQueueError::Ioctl)?;
        let mut en = EnableEventsParams { event_type_flags: 1 << EVENT_TYPE_FATAL_FAULT, rm_status: 0, _pad: 0 };
        // SAFETY: `en` is a live EnableEventsParams, the layout nvidia-uvm expects for this
        // command, and `fd` is the tools descriptor the tracker was just initialized on.
        let r = unsafe { ioctl_enable_events(fd, &mut en) };
        crate::kmod::status("UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS", r, en.rm_status).map_err(FaultQueueError::Ioctl)?;
        Ok(q)
    }

    /// Takes every fatal fault recorded since the last call.
    pub fn drain(&mut self) -> Vec<FatalFault> {
        let mut out = Vec::new();
        // SAFETY: `control` is our page; the kernel advances put_behind after writing entries.
        unsafe {
            let put = std::ptr::read_volatile(&(*self.control).put_behind);
            let mut get = std::ptr::read_volatile(&(*self.control).get_ahead);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            while get != put {
                let idx = get as usize % QUEUE_ENTRIES;
                let entry = std::slice::from_raw_parts(self.queue.add(idx * ENTRY_SIZE), ENTRY_SIZE);
                out.extend(FatalFault::from_entry(entry));
                get = (get + 1) % QUEUE_ENTRIES as u32;
            }
            std::ptr::write_volatile(&mut (*self.control).get_ahead, get);
            std::ptr::write_volatile(&mut (*self.control).get_behind, get);
        }
        out
    }

    /// Waits up to `ms` for at least one fatal fault (the fault is serviced asynchronously to the
    /// error the driver API returns).
    pub fn wait_drain(&mut self, ms: u64) -> Vec<FatalFault> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        loop {
            let v = self.drain();
            if !v.is_empty() || std::time::Instant::now() >= deadline {
                return v;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fatal_fault_entries_and_skips_others() {
        let mut e = [0u8; 64];
        e[0] = EVENT_TYPE_FATAL_FAULT;
        e[1] = 1;
        e[2] = 2;
        e[4] = 3;
        e[8..16].copy_from_slice(&0x7f12_3456_7890u64.to_le_bytes());
        e[16..24].copy_from_slice(&99u64.to_le_bytes());
        let f = FatalFault::from_entry(&e).unwrap();
        assert_eq!((f.address, f.fault_type, f.access_type, f.reason, f.timestamp), (0x7f12_3456_7890, 1, 2, 3, 99));
        assert_eq!(f.access_word(), "WRITE");
        e[0] = 5;
        assert_eq!(FatalFault::from_entry(&e), None);
    }

    #[test]
    fn attach_without_a_gpu_names_the_reason() {
        // On a machine without nvidia-uvm (CI) attaching fails with a typed, readable error.
        if std::path::Path::new("/dev/nvidia-uvm").exists() {
            eprintln!("skipped: this machine has nvidia-uvm");
            return;
        }
        let e = FaultQueue::attach().err().expect("no nvidia-uvm here");
        assert!(matches!(e, FaultQueueError::NoUvmFd), "{e}");
    }
}
