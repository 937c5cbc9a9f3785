//! The error ring: host memory registered with the device (`cuMemHostRegister`, device-mapped), so it
//! stays readable after a `trap` kills the context and even after the context is destroyed.

use crate::driver::{CuResult, CUDA_SUCCESS};
use crate::real_call;
use gasan_instrument::abi::{self, ErrorRecord, RingHeader};
use std::ffi::c_void;
use std::sync::atomic::{fence, Ordering};

pub const CAPACITY: u32 = 4096;

pub struct Ring {
    host: *mut u8,
    bytes: usize,
    pub device_ptr: u64,
    consumed: u32,
}

// SAFETY: the ring memory is process-global and only read through volatile accesses under the
// runtime's state lock.
unsafe impl Send for Ring {}

impl Ring {
    /// Allocates and registers the ring. Needs a current context.
    pub fn new() -> Result<Ring, CuResult> {
        let bytes = abi::ring_bytes(CAPACITY).next_multiple_of(4096);
        // SAFETY: anonymous mapping for the ring, never unmapped (the device may write until exit).
        let host = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if host == libc::MAP_FAILED {
            return Err(crate::driver::CUDA_ERROR_OUT_OF_MEMORY);
        }
        let hdr = RingHeader { head: 0, capacity: CAPACITY, reserved: [0; 14] };
        // SAFETY: the mapping is at least a header long.
        unsafe { std::ptr::write(host as *mut RingHeader, hdr) };
        // CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP
        let r = real_call!("cuMemHostRegister_v2"(*mut c_void, usize, u32)(host, bytes, 0x1 | 0x2));
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        let mut dptr = 0u64;
        let r = real_call!("cuMemHostGetDevicePointer_v2"(*mut u64, *mut c_void, u32)(&mut dptr, host, 0));
        if r != CUDA_SUCCESS {
            return Err(r);
        }
        Ok(Ring { host: host as *mut u8, bytes, device_ptr: dptr, consumed: 0 })
    }

    fn head(&self) -> u32 {
        // SAFETY: the header lives at the start of our mapping.
        unsafe { std::ptr::read_volatile(self.host as *const u32) }
    }

    /// Records written since the last call (complete ones only), plus how many were dropped
    /// because the ring was full.
    pub fn drain(&mut self) -> (Vec<ErrorRecord>, u32) {
        fence(Ordering::SeqCst);
        let head = self.head();
        let end = head.min(CAPACITY);
        let mut out = Vec::new();
        while self.consumed < end {
            let i = self.consumed;
            let off = abi::RING_RECORDS_OFFSET + i as usize * abi::ERROR_RECORD_SIZE;
            debug_assert!(off + abi::ERROR_RECORD_SIZE <= self.bytes);
            // SAFETY: in bounds of the mapping (capacity records after the header).
            let rec_ptr = unsafe { self.host.add(off) } as *const ErrorRecord;
            // The device writes `seq` last; wait briefly for a record still being written.
            let mut tries = 0;
            loop {
                // SAFETY: as above.
                let seq = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*rec_ptr).seq)) };
                if seq == i + 1 || tries > 1000 {
                    break;
                }
                tries += 1;
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
            // SAFETY: as above.
            let rec = unsafe { std::ptr::read_volatile(rec_ptr) };
            if rec.seq == i + 1 {
                out.push(rec);
            }
            self.consumed += 1;
        }
        (out, head.saturating_sub(CAPACITY))
    }
}
