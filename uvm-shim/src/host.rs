//! Host simulation with real MMU semantics: PROT_NONE reservations, memfd chunks mapped
//! MAP_SHARED|MAP_FIXED (aliases share bytes), mprotect for protections. Each backend stands for
//! one device; what its peers may access is modelled with the CUDA VMM's rules (a new mapping
//! grants no peer anything) in a table, since all simulated devices share one host MMU. Chunks
//! export as their memfd, which another process maps after receiving it over a Unix socket.

use crate::backend::{Backend, ChunkHandle, Prot, Stream};
use crate::UvmError;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

pub struct HostBackend {
    gran: u64,
    device: i32,
    chunks: Mutex<Vec<Option<OwnedFd>>>,
    /// Device → the rights it has over this backend's mappings (the own device's are what
    /// `mprotect` was given; peers' only what [`Backend::set_peer_access`] granted).
    access: Mutex<HashMap<i32, Ranges>>,
}

/// Disjoint ranges of VA with the rights over each: start → (end, rights).
#[derive(Default)]
struct Ranges(BTreeMap<u64, (u64, Prot)>);

impl Ranges {
    /// Gives `[lo, hi)` the rights `p` (`None` here: forgets the range, as an unmap does).
    fn set(&mut self, lo: u64, hi: u64, p: Option<Prot>) {
        let hit: Vec<(u64, (u64, Prot))> = self.0.range(..hi).rev().take_while(|(_, &(e, _))| e > lo).map(|(&s, &v)| (s, v)).collect();
        for (s, (e, q)) in hit {
            self.0.remove(&s);
            if s < lo {
                self.0.insert(s, (lo, q));
            }
            if e > hi {
                self.0.insert(hi, (e, q));
            }
        }
        if let Some(p) = p {
            self.0.insert(lo, (hi, p));
        }
    }
    fn get(&self, va: u64) -> Option<Prot> {
        self.0.range(..=va).next_back().filter(|(_, &(e, _))| va < e).map(|(_, &(_, p))| p)
    }
    /// Is every byte of `[lo, hi)` in some range?
    fn covers(&self, lo: u64, hi: u64) -> bool {
        let mut at = lo;
        while at < hi {
            match self.0.range(..=at).next_back() {
                Some((_, &(e, _))) if e > at => at = e,
                _ => return false,
            }
        }
        true
    }
}

fn os(call: &'static str) -> impl FnOnce(nix::errno::Errno) -> UvmError {
    move |e| UvmError::Os { call, errno: e as i32 }
}

fn prot_flags(p: Prot) -> libc::c_int {
    match p {
        Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        Prot::ReadOnly => libc::PROT_READ,
        Prot::None => libc::PROT_NONE,
    }
}

/// Runs `f` in a forked child; true if the child died of SIGSEGV/SIGBUS: the host backend's way
/// to show that a range is unmapped or protected (selftest and tests).
pub fn faults_in_child(f: impl FnOnce()) -> bool {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: the child only touches memory and exits.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            f();
            // SAFETY: _exit is async-signal-safe, so the child of a fork may call it; it ends the
            // child without running the parent's atexit handlers or flushing its stdio buffers.
            unsafe { libc::_exit(0) };
        }
        Ok(ForkResult::Parent { child }) => matches!(waitpid(child, None), Ok(WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGSEGV | nix::sys::signal::Signal::SIGBUS, _))),
        Err(_) => false,
    }
}

impl HostBackend {
    /// `gran` must be a power of two and a multiple of the page size.
    pub fn new(gran: u64) -> Self {
        Self::for_device(gran, 0)
    }

    /// A backend standing for device `device` (several of them simulate a multi-GPU process).
    pub fn for_device(gran: u64, device: i32) -> Self {
        assert!(gran.is_power_of_two() && gran >= 4096);
        Self { gran, device, chunks: Mutex::new(Vec::new()), access: Mutex::new(HashMap::new()) }
    }

    /// Records a new mapping of `[va, va+len)`: the own device has `prot`, no peer anything.
    fn mapped(&self, va: u64, len: u64, prot: Prot) {
        let mut a = self.access.lock().unwrap_or_else(|p| p.into_inner());
        for (&d, r) in a.iter_mut() {
            r.set(va, va + len, (d == self.device).then_some(prot));
        }
        a.entry(self.device).or_default().set(va, va + len, Some(prot));
    }

    fn fd_of(&self, h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        let c = self.chunks.lock().unwrap();
        let fd = c.get(h as usize).and_then(Option::as_ref).ok_or(UvmError::BadHandle(h))?;
        fd.try_clone().map_err(|e| UvmError::Os { call: "dup", errno: e.raw_os_error().unwrap_or(0) })
    }

    fn raw_mmap(addr: u64, len: u64, prot: libc::c_int, flags: libc::c_int, fd: libc::c_int) -> Result<u64, UvmError> {
        // SAFETY: mapping fresh or reserved-by-us address space; callers pass ranges they own.
        let p = unsafe { libc::mmap(addr as *mut _, len as usize, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(UvmError::Os { call: "mmap", errno: nix::errno::Errno::last() as i32 });
        }
        Ok(p as u64)
    }
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }
    fn granularity(&self) -> u64 {
        self.gran
    }
    /// mprotect works per host page, like the patched module's 4 KiB GPU pages.
    fn guard_granularity(&self) -> u64 {
        4096
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if hint != 0 {
            if let Ok(p) = Self::raw_mmap(hint, size, libc::PROT_NONE, flags | libc::MAP_FIXED_NOREPLACE, -1) {
                if p == hint {
                    return Ok(p);
                }
                // Old kernels ignore MAP_FIXED_NOREPLACE and treat it as a hint.
                // SAFETY: unmapping what we just mapped.
                unsafe { libc::munmap(p as *mut _, size as usize) };
            }
        }
        // Over-reserve to align to the granularity, then trim.
        let p = Self::raw_mmap(0, size + self.gran, libc::PROT_NONE, flags, -1)?;
        let aligned = (p + self.gran - 1) & !(self.gran - 1);
        // SAFETY: trimming the unaligned head and tail of our own reservation.
        unsafe {
            if aligned > p {
                libc::munmap(p as *mut _, (aligned - p) as usize);
            }
            let tail = p + size + self.gran - (aligned + size);
            if tail > 0 {
                libc::munmap((aligned + size) as *mut _, tail as usize);
            }
        }
        Ok(aligned)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        // SAFETY: releasing a reservation we made.
        if unsafe { libc::munmap(va as *mut _, size as usize) } != 0 {
            return Err(UvmError::Os { call: "munmap", errno: nix::errno::Errno::last() as i32 });
        }
        Ok(())
    }
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        let fd = nix::sys::memfd::memfd_create(c"gasan-chunk", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).map_err(os("memfd_create"))?;
        nix::unistd::ftruncate(&fd, self.gran as i64).map_err(os("ftruncate"))?;
        let mut c = self.chunks.lock().unwrap();
        c.push(Some(fd));
        Ok((c.len() - 1) as u64)
    }
    /// The simulated pool is host memory already: a host chunk is a chunk like any other.
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.create_chunk()
    }
    fn create_wide_chunk(&self, slots: u64) -> Result<ChunkHandle, UvmError> {
        let fd = nix::sys::memfd::memfd_create(c"gasan-wide-chunk", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).map_err(os("memfd_create"))?;
        nix::unistd::ftruncate(&fd, (self.gran * slots) as i64).map_err(os("ftruncate"))?;
        let mut c = self.chunks.lock().unwrap();
        c.push(Some(fd));
        Ok((c.len() - 1) as u64)
    }
    fn map_wide(&self, va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError> {
        let c = self.chunks.lock().unwrap();
        let fd = c.get(h as usize).and_then(Option::as_ref).ok_or(UvmError::BadHandle(h))?;
        let p = Self::raw_mmap(va, self.gran * slots, prot_flags(prot), libc::MAP_SHARED | libc::MAP_FIXED, fd.as_raw_fd())?;
        debug_assert_eq!(p, va);
        drop(c);
        self.mapped(va, self.gran * slots, prot);
        Ok(())
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        let mut c = self.chunks.lock().unwrap();
        match c.get_mut(h as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(UvmError::BadHandle(h)),
        }
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        let c = self.chunks.lock().unwrap();
        let fd = c.get(h as usize).and_then(Option::as_ref).ok_or(UvmError::BadHandle(h))?;
        let p = Self::raw_mmap(va, self.gran, prot_flags(prot), libc::MAP_SHARED | libc::MAP_FIXED, fd.as_raw_fd())?;
        debug_assert_eq!(p, va);
        drop(c);
        self.mapped(va, self.gran, prot);
        Ok(())
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        // Replace with a PROT_NONE anonymous mapping: the VA stays reserved.
        Self::raw_mmap(va, len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED, -1)?;
        for r in self.access.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            r.set(va, va + len, None);
        }
        Ok(())
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        // SAFETY: changing protections of our own mapped range.
        if unsafe { libc::mprotect(va as *mut _, len as usize, prot_flags(prot)) } != 0 {
            return Err(UvmError::Os { call: "mprotect", errno: nix::errno::Errno::last() as i32 });
        }
        self.access.lock().unwrap_or_else(|p| p.into_inner()).entry(self.device).or_default().set(va, va + len, Some(prot));
        Ok(())
    }
    fn write(&self, va: u64, data: &[u8], _: Stream) -> Result<(), UvmError> {
        // SAFETY: the pool only writes shadow ranges it has mapped read-write.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), va as *mut u8, data.len()) };
        Ok(())
    }
    fn fill(&self, va: u64, len: u64, byte: u8, _: Stream) -> Result<(), UvmError> {
        // SAFETY: as for write.
        unsafe { std::ptr::write_bytes(va as *mut u8, byte, len as usize) };
        Ok(())
    }
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), UvmError> {
        // SAFETY: both ranges are mapped pool or scratch memory (the pool copies only those), which
        // no Rust object aliases; they are distinct mappings, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len as usize) };
        Ok(())
    }
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        // SAFETY: the pool only reads mapped ranges.
        unsafe { std::ptr::copy_nonoverlapping(va as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn device(&self) -> i32 {
        self.device
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        let mut a = self.access.lock().unwrap_or_else(|p| p.into_inner());
        // As cuMemSetAccess: every byte must be mapped.
        if !a.get(&self.device).is_some_and(|r| r.covers(va, va + len)) {
            return Err(UvmError::NotCommitted(va));
        }
        if peer != self.device {
            a.entry(peer).or_default().set(va, va + len, Some(prot));
        }
        Ok(())
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        let a = self.access.lock().unwrap_or_else(|p| p.into_inner());
        if a.get(&self.device).and_then(|r| r.get(va)).is_none() {
            return Err(UvmError::NotCommitted(va));
        }
        Ok(a.get(&device).and_then(|r| r.get(va)).unwrap_or(Prot::None))
    }
    /// The chunk's memfd (a duplicate): mapping it shares the bytes.
    fn export_chunk(&self, h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        self.fd_of(h)
    }
    fn import_chunk(&self, fd: OwnedFd) -> Result<ChunkHandle, UvmError> {
        let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(os("fstat"))?;
        if st.st_size as u64 != self.gran {
            return Err(UvmError::BadConfig(format!("imported chunk of {:#x} bytes, the pool's are {:#x}", st.st_size, self.gran)));
        }
        let mut c = self.chunks.lock().unwrap();
        c.push(Some(fd));
        Ok((c.len() - 1) as u64)
    }
}
