//! CUDA VMM backend: cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess, called through
//! function pointers resolved from the real libcuda by handle (the runtime interposes the exported
//! symbols, so calling them by name would recurse).

use crate::backend::{Backend, ChunkHandle, Prot, Stream};
use crate::UvmError;
use cudarc::driver::sys as cu;
use std::ffi::{c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Resolves a driver entry point by its base name (`"cuMemCreate"`), as `cuGetProcAddress` does:
/// how a standalone tool (`gasan-uvm`) builds its [`DriverFns`]; the runtime builds them from its
/// own table of the driver's entry points instead.
pub type Resolver = Box<dyn Fn(&CStr) -> *mut c_void + Send + Sync>;

/// Driver results stay integers: a driver may answer codes cudarc's enum lacks.
type CuResult = i32;
const CUDA_SUCCESS: CuResult = cu::CUresult::CUDA_SUCCESS as CuResult;
const CUDA_ERROR_NOT_READY: CuResult = cu::CUresult::CUDA_ERROR_NOT_READY as CuResult;
type Dptr = cu::CUdeviceptr;

/// Declares the driver functions the backend calls, once each: `field = export(types)` gives
/// [`DriverFns`]`::field`, the entry point of CUDA 13.0's version of the base name `field`
/// (`export`, its exact symbol), and checks at compile time that `types` are cuda.h's parameters
/// of `export` (cudarc's bindgen prototype of it).
macro_rules! vmm_api {
    ($($field:ident = $export:ident($($t:ty),*);)*) => {
        /// The driver functions the VMM backend calls, as function pointers: whoever creates a
        /// [`VmmBackend`] hands them in (the runtime from its one table of the real driver's entry
        /// points, a standalone tool from `cuGetProcAddress`). Each field is CUDA 13.0's version
        /// of its base name (`cuMemcpyDtoH` is `cuMemcpyDtoH_v2`); the parameter types are
        /// cuda.h's, checked against cudarc's prototypes at compile time.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct DriverFns {
            $(#[doc = concat!("`", stringify!($export), "`")] pub $field: unsafe extern "C" fn($($t),*) -> CuResult,)*
        }

        $(const _: unsafe fn($($t),*) -> cu::CUresult = cu::$export;)*

        impl DriverFns {
            /// The exact driver export each field is (`"cuMemcpyDtoH_v2"` for `cuMemcpyDtoH`).
            pub const EXPORTS: &[(&str, &str)] = &[$((stringify!($field), stringify!($export)),)*];

            /// Every entry point through `resolve` (base names, as `cuGetProcAddress` takes
            /// them), or the first one the driver lacks.
            pub fn resolve(resolve: &Resolver) -> Result<DriverFns, UvmError> {
                Ok(DriverFns {
                    $($field: {
                        let p = resolve(&std::ffi::CString::new(stringify!($field)).expect("a name without NUL"));
                        if p.is_null() {
                            return Err(UvmError::Unavailable(format!("driver entry point {} missing", stringify!($field))));
                        }
                        type F = unsafe extern "C" fn($($t),*) -> CuResult;
                        // SAFETY: `p` is the driver's entry point for this base name at CUDA 13.0
                        // (`export`), whose parameters are `F`'s (checked against cudarc above)
                        // and whose CUresult is a 32-bit integer.
                        unsafe { std::mem::transmute::<*mut c_void, F>(p) }
                    },)*
                })
            }
        }
    };
}

vmm_api! {
    cuMemAddressReserve = cuMemAddressReserve(*mut Dptr, usize, usize, Dptr, std::ffi::c_ulonglong);
    cuMemAddressFree = cuMemAddressFree(Dptr, usize);
    cuMemCreate = cuMemCreate(*mut cu::CUmemGenericAllocationHandle, usize, *const cu::CUmemAllocationProp, std::ffi::c_ulonglong);
    cuMemRelease = cuMemRelease(cu::CUmemGenericAllocationHandle);
    cuMemMap = cuMemMap(Dptr, usize, usize, cu::CUmemGenericAllocationHandle, std::ffi::c_ulonglong);
    cuMemUnmap = cuMemUnmap(Dptr, usize);
    cuMemSetAccess = cuMemSetAccess(Dptr, usize, *const cu::CUmemAccessDesc, usize);
    cuMemGetAllocationGranularity = cuMemGetAllocationGranularity(*mut usize, *const cu::CUmemAllocationProp, cu::CUmemAllocationGranularity_flags);
    cuMemcpyHtoDAsync = cuMemcpyHtoDAsync_v2(Dptr, *const c_void, usize, cu::CUstream);
    cuMemcpyDtoH = cuMemcpyDtoH_v2(*mut c_void, Dptr, usize);
    cuMemcpyDtoDAsync = cuMemcpyDtoDAsync_v2(Dptr, Dptr, usize, cu::CUstream);
    cuMemsetD8Async = cuMemsetD8Async(Dptr, std::ffi::c_uchar, usize, cu::CUstream);
    cuEventCreate = cuEventCreate(*mut cu::CUevent, std::ffi::c_uint);
    cuEventRecord = cuEventRecord(cu::CUevent, cu::CUstream);
    cuEventQuery = cuEventQuery(cu::CUevent);
    cuEventSynchronize = cuEventSynchronize(cu::CUevent);
    cuStreamCreate = cuStreamCreate(*mut cu::CUstream, std::ffi::c_uint);
    cuStreamSynchronize = cuStreamSynchronize(cu::CUstream);
    cuDeviceGet = cuDeviceGet(*mut cu::CUdevice, std::ffi::c_int);
    cuDeviceGetAttribute = cuDeviceGetAttribute(*mut std::ffi::c_int, cu::CUdevice_attribute, cu::CUdevice);
    cuMemExportToShareableHandle = cuMemExportToShareableHandle(*mut c_void, cu::CUmemGenericAllocationHandle, cu::CUmemAllocationHandleType, std::ffi::c_ulonglong);
    cuMemImportFromShareableHandle = cuMemImportFromShareableHandle(*mut cu::CUmemGenericAllocationHandle, *mut c_void, cu::CUmemAllocationHandleType);
    cuMemGetAccess = cuMemGetAccess(*mut std::ffi::c_ulonglong, *const cu::CUmemLocation, Dptr);
}

const POSIX_FD: u32 = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
const FABRIC: u32 = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC.0;
const CUDA_ERROR_OUT_OF_MEMORY: CuResult = cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY as CuResult;

/// The handle types pool chunks are created with, best first: POSIX file descriptor (what NCCL
/// and PyTorch export device memory as on one node) and, where the device has it, fabric (across
/// nodes over NVLink, which also needs an IMEX channel, so `cuMemCreate` may refuse it); then the
/// file descriptor alone; then none (exports refused), for drivers or sandboxes that refuse both.
fn handle_type_ladder(fabric_supported: bool) -> Vec<u32> {
    let mut v = Vec::with_capacity(3);
    if fabric_supported {
        v.push(POSIX_FD | FABRIC);
    }
    v.extend([POSIX_FD, 0]);
    v
}

/// A queued device write of `[lo, hi)` and the event recorded right after it on its stream.
struct QueuedWrite {
    lo: u64,
    hi: u64,
    done: cu::CUevent,
}

/// Writes issued but maybe not yet run, and spare events to record the next ones with.
#[derive(Default)]
struct WriteLog {
    queued: Vec<QueuedWrite>,
    spare: Vec<cu::CUevent>,
}

/// Queued writes kept before the completed ones are pruned (bounds the list and the events).
const WRITE_LOG_PRUNE_AT: usize = 64;

/// Default resolver: `dlopen("libcuda.so.1")` and its `cuGetProcAddress_v2` (CUDA 13.0 ABI).
pub fn default_resolver() -> Result<Resolver, UvmError> {
    // SAFETY: plain dlopen/dlsym of the CUDA driver library.
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(UvmError::Unavailable("libcuda.so.1 not found".into()));
    }
    // SAFETY: `h` is the live (never closed) handle dlopen just returned, and the name is a C
    // string literal.
    let gpa = unsafe { libc::dlsym(h, c"cuGetProcAddress_v2".as_ptr()) };
    if gpa.is_null() {
        return Err(UvmError::Unavailable("libcuda.so.1 has no cuGetProcAddress_v2".into()));
    }
    type Gpa = unsafe extern "C" fn(*const libc::c_char, *mut *mut c_void, i32, u64, *mut i32) -> CuResult;
    // SAFETY: cuGetProcAddress_v2 has this signature since CUDA 12.0.
    let gpa: Gpa = unsafe { std::mem::transmute(gpa) };
    let h = h as usize;
    Ok(Box::new(move |name: &CStr| {
        let _ = h;
        let mut p = std::ptr::null_mut();
        let mut status = 0;
        // SAFETY: valid out-pointers.
        let r = unsafe { gpa(name.as_ptr(), &mut p, 13000, 0, &mut status) };
        if r == CUDA_SUCCESS {
            p
        } else {
            std::ptr::null_mut()
        }
    }))
}

/// Checks a CUresult.
fn ck(call: &'static str, r: CuResult) -> Result<(), UvmError> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(UvmError::Cuda { call, code: r })
    }
}

pub struct VmmBackend {
    api: DriverFns,
    device: i32,
    gran: u64,
    writes: Mutex<WriteLog>,
    /// gasan's own non-blocking stream for [`Stream::SYNC`] writes (created at first use).
    own_stream: Mutex<Option<usize>>,
    /// The handle types device chunks are created with (`requestedHandleTypes`): the first of
    /// [`handle_type_ladder`] `cuMemCreate` accepted, stepped down when it refuses one.
    handle_types: AtomicU32,
    /// The rest of the ladder below `handle_types`.
    ladder: Vec<u32>,
}

// SAFETY: the raw CUevent handles in `writes` are only used under its mutex; CUDA events may be
// recorded, queried and synchronized from any thread of the process.
unsafe impl Send for VmmBackend {}
// SAFETY: the raw CUevent handles in `writes` (the only field that is not Sync by itself) are
// reached through `&VmmBackend` only under its mutex, one thread at a time, and CUDA events may be
// used from any thread of the process.
unsafe impl Sync for VmmBackend {}

impl VmmBackend {
    /// Needs a current CUDA context on `device`; `api` are the real driver's entry points.
    pub fn new(device: i32, api: DriverFns) -> Result<Self, UvmError> {
        let mut dev: cu::CUdevice = 0;
        // SAFETY: valid out-pointer.
        ck("cuDeviceGet", unsafe { (api.cuDeviceGet)(&mut dev, device) })?;
        let mut fabric = 0;
        // SAFETY: valid out-pointer, a device handle just returned. A driver that does not know
        // the attribute answers an error: no fabric.
        let fabric_supported = unsafe { (api.cuDeviceGetAttribute)(&mut fabric, cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev) } == CUDA_SUCCESS && fabric != 0;
        let mut ladder = handle_type_ladder(fabric_supported);
        let first = ladder.remove(0);
        let mut b = Self { api, device, gran: 0, writes: Mutex::new(WriteLog::default()), own_stream: Mutex::new(None), handle_types: AtomicU32::new(first), ladder };
        let prop = b.prop();
        let mut g = 0usize;
        // SAFETY: valid pointers.
        ck("cuMemGetAllocationGranularity", unsafe { (b.api.cuMemGetAllocationGranularity)(&mut g, &prop, cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM) })?;
        b.gran = g as u64;
        Ok(b)
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    /// The handle types device chunks are created with now (`CU_MEM_HANDLE_TYPE_*` bits).
    pub fn handle_types(&self) -> u32 {
        self.handle_types.load(Ordering::Relaxed)
    }

    /// `cuMemCreate` of a device chunk of `size` bytes, exportable as [`Self::handle_types`] says;
    /// a refusal of those types (anything but running out of memory) steps down the ladder.
    fn create_exportable(&self, size: u64) -> Result<ChunkHandle, UvmError> {
        loop {
            let types = self.handle_types();
            let mut prop = self.prop();
            prop.requestedHandleTypes = cu::CUmemAllocationHandleType(types);
            let mut h = 0u64;
            // SAFETY: valid pointers.
            let r = unsafe { (self.api.cuMemCreate)(&mut h, size as usize, &prop, 0) };
            if r == CUDA_SUCCESS {
                return Ok(h);
            }
            let lower = self.ladder.iter().copied().find(|&t| t & !types == 0 && t != types);
            match lower {
                Some(t) if r != CUDA_ERROR_OUT_OF_MEMORY => {
                    // Another thread may have stepped down already; either way, lower.
                    let _ = self.handle_types.compare_exchange(types, t, Ordering::Relaxed, Ordering::Relaxed);
                }
                _ => return Err(UvmError::Cuda { call: "cuMemCreate", code: r }),
            }
        }
    }

    fn location(device: i32) -> cu::CUmemLocation {
        cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device }
    }

    fn prop(&self) -> cu::CUmemAllocationProp {
        // SAFETY: an all-zero CUmemAllocationProp is valid (no handle types, no flags).
        let mut p: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        p.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = self.device;
        p
    }

    /// Runs `issue` (an async write) on gasan's own non-blocking stream and waits for it. This is
    /// what [`Stream::SYNC`] means: done when the call returns, ordered before whatever the program
    /// issues next on any stream (the legacy default stream would not order it before work on the
    /// program's non-blocking streams, and would wait for the program's own work).
    fn on_own_stream(&self, call: &'static str, issue: impl FnOnce(cu::CUstream) -> CuResult) -> Result<(), UvmError> {
        let mut own = self.own_stream.lock().unwrap_or_else(|p| p.into_inner());
        let s = match *own {
            Some(s) => s as cu::CUstream,
            None => {
                let mut s: cu::CUstream = std::ptr::null_mut();
                // SAFETY: valid out-pointer; CU_STREAM_NON_BLOCKING (1).
                ck("cuStreamCreate", unsafe { (self.api.cuStreamCreate)(&mut s, 1) })?;
                *own = Some(s as usize);
                s
            }
        };
        ck(call, issue(s))?;
        // SAFETY: our own stream.
        ck("cuStreamSynchronize", unsafe { (self.api.cuStreamSynchronize)(s) })
    }

    /// Remembers that `[va, va+len)` was just written on `stream` (an event recorded after it),
    /// for [`Backend::wait_writes`]. Completed entries are pruned once the log grows.
    fn log_write(&self, va: u64, len: u64, stream: Stream) -> Result<(), UvmError> {
        let mut log = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        if log.queued.len() >= WRITE_LOG_PRUNE_AT {
            let api = &self.api;
            let WriteLog { queued, spare } = &mut *log;
            queued.retain(|w| {
                // SAFETY: an event this backend created.
                let finished = unsafe { (api.cuEventQuery)(w.done) } != CUDA_ERROR_NOT_READY;
                if finished {
                    spare.push(w.done);
                }
                !finished
            });
        }
        let done = match log.spare.pop() {
            Some(e) => e,
            None => {
                let mut e: cu::CUevent = std::ptr::null_mut();
                // SAFETY: valid out-pointer; CU_EVENT_DISABLE_TIMING (2) makes recording cheap.
                ck("cuEventCreate", unsafe { (self.api.cuEventCreate)(&mut e, 2) })?;
                e
            }
        };
        let s = stream.0 as cu::CUstream;
        // SAFETY: our event, the caller's stream (the one the write was just issued on).
        if let Err(e) = ck("cuEventRecord", unsafe { (self.api.cuEventRecord)(done, s) }) {
            log.spare.push(done);
            return Err(e);
        }
        log.queued.push(QueuedWrite { lo: va, hi: va + len, done });
        Ok(())
    }

    /// Maps chunk `h` at `va`, then sets its access with `set_access`, unmapping it again when that
    /// fails.
    fn map_with(&self, va: u64, h: ChunkHandle, set_access: impl FnOnce() -> Result<(), UvmError>) -> Result<(), UvmError> {
        // SAFETY: mapping our chunk into our reservation.
        ck("cuMemMap", unsafe { (self.api.cuMemMap)(va, self.gran as usize, 0, h, 0) })?;
        if let Err(e) = set_access() {
            // SAFETY: undo the map above.
            unsafe { (self.api.cuMemUnmap)(va, self.gran as usize) };
            return Err(e);
        }
        Ok(())
    }

    fn access_desc(&self, prot: Prot) -> cu::CUmemAccessDesc {
        cu::CUmemAccessDesc {
            location: Self::location(self.device),
            flags: match prot {
                Prot::ReadWrite => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                Prot::ReadOnly => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
                Prot::None => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
            },
        }
    }
}

impl Backend for VmmBackend {
    fn name(&self) -> &'static str {
        "vmm"
    }
    fn granularity(&self) -> u64 {
        self.gran
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        let mut p: Dptr = 0;
        // SAFETY: valid out-pointer.
        ck("cuMemAddressReserve", unsafe { (self.api.cuMemAddressReserve)(&mut p, size as usize, self.gran as usize, hint, 0) })?;
        Ok(p)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        // SAFETY: releasing our reservation.
        ck("cuMemAddressFree", unsafe { (self.api.cuMemAddressFree)(va, size as usize) })
    }
    /// Pool chunks are exportable ([`Self::handle_types`]), as NCCL creates its own buffers: an
    /// exported allocation is then mapped by importers with `cuMemImportFromShareableHandle`.
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.create_exportable(self.gran)
    }
    fn create_wide_chunk(&self, slots: u64) -> Result<ChunkHandle, UvmError> {
        let prop = self.prop();
        let mut h = 0u64;
        // SAFETY: valid pointers.
        ck("cuMemCreate", unsafe { (self.api.cuMemCreate)(&mut h, (self.gran * slots) as usize, &prop, 0) })?;
        Ok(h)
    }
    fn map_wide(&self, va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError> {
        let len = self.gran * slots;
        // SAFETY: mapping our wide chunk, whole, into our reservation.
        ck("cuMemMap", unsafe { (self.api.cuMemMap)(va, len as usize, 0, h, 0) })?;
        if let Err(e) = self.protect(va, len, prot) {
            // SAFETY: undo the map above.
            unsafe { (self.api.cuMemUnmap)(va, len as usize) };
            return Err(e);
        }
        Ok(())
    }
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), UvmError> {
        // SAFETY: both are mapped device VA of ours (pool or scratch chunk); gasan's own stream,
        // waited for before returning.
        self.on_own_stream("cuMemcpyDtoDAsync", |s| unsafe { (self.api.cuMemcpyDtoDAsync)(dst, src, len as usize, s) })
    }
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        let mut prop = self.prop();
        // Pinned host memory, on no particular NUMA node (the id is ignored for this type).
        prop.location = cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, id: 0 };
        let mut h = 0u64;
        // SAFETY: valid pointers.
        ck("cuMemCreate", unsafe { (self.api.cuMemCreate)(&mut h, self.gran as usize, &prop, 0) })?;
        Ok(h)
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        // SAFETY: a handle we created.
        ck("cuMemRelease", unsafe { (self.api.cuMemRelease)(h) })
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.map_with(va, h, || self.protect(va, self.gran, prot))
    }
    fn map_host(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        // The CPU gets the same rights at the same address (without its descriptor the driver
        // maps host memory for the GPU only).
        let cpu = cu::CUmemAccessDesc { location: cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, id: 0 }, flags: self.access_desc(prot).flags };
        let d = [self.access_desc(prot), cpu];
        // SAFETY: two valid descriptors for the range just mapped.
        self.map_with(va, h, || ck("cuMemSetAccess", unsafe { (self.api.cuMemSetAccess)(va, self.gran as usize, d.as_ptr(), 2) }))
    }
    fn map_run(&self, va: u64, count: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        for i in 0..count {
            // SAFETY: mapping our chunk into our reservation.
            let r = ck("cuMemMap", unsafe { (self.api.cuMemMap)(va + i * self.gran, self.gran as usize, 0, h, 0) });
            if let Err(e) = r {
                // SAFETY: undo the maps above (each was one whole mapping).
                (0..i).for_each(|j| unsafe {
                    (self.api.cuMemUnmap)(va + j * self.gran, self.gran as usize);
                });
                return Err(e);
            }
        }
        // One access change over the whole run (cuMemSetAccess accepts a range of several
        // mappings): 2048 calls fewer for a 1 TiB pool's shadow.
        if let Err(e) = self.protect(va, count * self.gran, prot) {
            // SAFETY: undo the maps above.
            (0..count).for_each(|j| unsafe {
                (self.api.cuMemUnmap)(va + j * self.gran, self.gran as usize);
            });
            return Err(e);
        }
        Ok(())
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        // SAFETY: unmapping our mapping.
        ck("cuMemUnmap", unsafe { (self.api.cuMemUnmap)(va, len as usize) })
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        let d = self.access_desc(prot);
        // SAFETY: valid descriptor.
        ck("cuMemSetAccess", unsafe { (self.api.cuMemSetAccess)(va, len as usize, &d, 1) })
    }
    fn write(&self, va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError> {
        if stream == Stream::SYNC {
            // SAFETY: the destination is device VA of the pool, which no Rust object aliases; the
            // host source `data` is valid for reads of data.len() bytes for the whole call, and an
            // async copy from pageable memory is staged by the driver before the call returns, so
            // the borrow need not outlive it; `s` is gasan's own stream.
            return self.on_own_stream("cuMemcpyHtoDAsync", |s| unsafe { (self.api.cuMemcpyHtoDAsync)(va, data.as_ptr().cast(), data.len(), s) });
        }
        // SAFETY: as above for `data` (staged before the call returns); `stream` is the program's
        // stream the write is ordered on, a CUstream handle passed through from its driver call.
        ck("cuMemcpyHtoDAsync", unsafe { (self.api.cuMemcpyHtoDAsync)(va, data.as_ptr().cast(), data.len(), stream.0 as cu::CUstream) })?;
        self.log_write(va, data.len() as u64, stream)
    }
    fn fill(&self, va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError> {
        if stream == Stream::SYNC {
            // SAFETY: a memset of device memory only, with no host pointer: `[va, va+len)` is
            // device VA of the pool (reserved with cuMemAddressReserve), which no Rust object
            // aliases; `s` is gasan's own stream.
            return self.on_own_stream("cuMemsetD8Async", |s| unsafe { (self.api.cuMemsetD8Async)(va, byte, len as usize, s) });
        }
        // SAFETY: as above; `stream` is the program's stream the write is ordered on, a CUstream
        // handle passed through from its driver call.
        ck("cuMemsetD8Async", unsafe { (self.api.cuMemsetD8Async)(va, byte, len as usize, stream.0 as cu::CUstream) })?;
        self.log_write(va, len, stream)
    }
    fn wait_writes(&self, va: u64, len: u64) -> Result<(), UvmError> {
        let mut log = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        let WriteLog { queued, spare } = &mut *log;
        let mut result = Ok(());
        queued.retain(|w| {
            if w.hi <= va || w.lo >= va + len {
                return true;
            }
            // SAFETY: an event this backend created and recorded.
            let r = ck("cuEventSynchronize", unsafe { (self.api.cuEventSynchronize)(w.done) });
            if r.is_err() && result.is_ok() {
                result = r;
            }
            spare.push(w.done);
            false
        });
        result
    }
    fn device(&self) -> i32 {
        self.device
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        let mut d = self.access_desc(prot);
        d.location.id = peer;
        // SAFETY: valid descriptor for a range of our mappings.
        ck("cuMemSetAccess", unsafe { (self.api.cuMemSetAccess)(va, len as usize, &d, 1) })
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        let mut flags: std::ffi::c_ulonglong = 0;
        let loc = Self::location(device);
        // SAFETY: valid out-pointer and location.
        ck("cuMemGetAccess", unsafe { (self.api.cuMemGetAccess)(&mut flags, &loc, va) })?;
        Ok(match flags as u32 {
            f if f == cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32 => Prot::ReadWrite,
            f if f == cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ as u32 => Prot::ReadOnly,
            _ => Prot::None,
        })
    }
    fn export_chunk(&self, h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        if self.handle_types() & POSIX_FD == 0 {
            return Err(UvmError::Unavailable("the driver refused exportable chunks (requestedHandleTypes POSIX_FD)".into()));
        }
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for the POSIX_FD type the shareable handle is an int, which `fd` is.
        ck("cuMemExportToShareableHandle", unsafe { (self.api.cuMemExportToShareableHandle)((&mut fd as *mut std::ffi::c_int).cast(), h, cu::CUmemAllocationHandleType(POSIX_FD), 0) })?;
        // SAFETY: the driver just opened this descriptor for us; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    fn import_chunk(&self, fd: OwnedFd) -> Result<ChunkHandle, UvmError> {
        let mut h = 0u64;
        // SAFETY: for POSIX_FD the OS handle is the descriptor's value passed as a pointer; the
        // driver takes its own reference, so `fd` is closed when dropped here (as NCCL does).
        ck("cuMemImportFromShareableHandle", unsafe { (self.api.cuMemImportFromShareableHandle)(&mut h, fd.as_raw_fd() as usize as *mut c_void, cu::CUmemAllocationHandleType(POSIX_FD)) })?;
        Ok(h)
    }
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        // SAFETY: host destination valid for out.len().
        ck("cuMemcpyDtoH", unsafe { (self.api.cuMemcpyDtoH)(out.as_mut_ptr().cast(), va, out.len()) })
    }
}
