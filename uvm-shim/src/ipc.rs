//! Sharing a pool allocation with another process, what `cudaIpcGetMemHandle` /
//! `cudaIpcOpenMemHandle` do for `cudaMalloc` memory (pool memory is VMM memory, which they do not
//! export). The exporter hands out a 64-byte [`IpcHandle`] (the size of `cudaIpcMemHandle_t`, so it
//! travels wherever the program sends its handles) naming the export; the importer sends it to the
//! exporter's Unix socket and receives one file descriptor per chunk (`SCM_RIGHTS`), maps them in
//! its own pool ([`crate::Pool::commit_imported`]) and, from the handle, the allocation's bounds
//! inside them, so that its accesses are checked like its own allocations'. A file descriptor keeps
//! its memory alive, so either process may end (or be killed) while the other maps it.

use crate::UvmError;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of an [`IpcHandle`]: `sizeof(cudaIpcMemHandle_t)`.
pub const IPC_HANDLE_SIZE: usize = 64;
const MAGIC: [u8; 8] = *b"GASANIPC";
const VERSION: u16 = 1;
/// File descriptors per message (the kernel's `SCM_MAX_FD` is 253).
const FDS_PER_MESSAGE: usize = 250;
/// How long either side waits for the other before giving up on a transfer.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

/// What an importer needs: where to ask (the exporter's pid names its socket), what to ask for
/// (export number and its secret), and what it gets: `chunks` chunks of `2^gran_log2` bytes of
/// device `device`, of which `[offset, offset + size)` is the allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcHandle {
    pub pid: u32,
    pub device: u32,
    pub id: u64,
    /// Random per export, so that a handle cannot be forged from another one.
    pub secret: u64,
    pub chunks: u32,
    pub gran_log2: u8,
    pub offset: u64,
    pub size: u64,
}

impl IpcHandle {
    /// Bytes of the exported chunks.
    pub fn len(&self) -> u64 {
        u64::from(self.chunks) << self.gran_log2
    }
    pub fn is_empty(&self) -> bool {
        self.chunks == 0
    }

    /// The wire form, little-endian: magic `GASANIPC` [0,8), version [8,10), `gran_log2` [10],
    /// zero [11], `pid` [12,16), `device` [16,20), `chunks` [20,24), `id` [24,32), `secret`
    /// [32,40), `offset` [40,48), `size` [48,56), zero [56,64).
    pub fn to_bytes(&self) -> [u8; IPC_HANDLE_SIZE] {
        let mut b = [0u8; IPC_HANDLE_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10] = self.gran_log2;
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..20].copy_from_slice(&self.device.to_le_bytes());
        b[20..24].copy_from_slice(&self.chunks.to_le_bytes());
        b[24..32].copy_from_slice(&self.id.to_le_bytes());
        b[32..40].copy_from_slice(&self.secret.to_le_bytes());
        b[40..48].copy_from_slice(&self.offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    /// Parses and checks a handle: anything but one [`Self::to_bytes`] could have written is
    /// refused (a legacy `cudaIpcMemHandle_t` of driver memory, say, has no magic).
    pub fn from_bytes(b: &[u8; IPC_HANDLE_SIZE]) -> Result<Self, UvmError> {
        let bad = |why: &str| Err(UvmError::BadIpcHandle(why.into()));
        if b[0..8] != MAGIC {
            return bad("no gasan magic");
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(UvmError::BadIpcHandle(format!("version {version}, this gasan reads {VERSION}")));
        }
        if b[11] != 0 || b[56..64].iter().any(|&x| x != 0) {
            return bad("reserved bytes set");
        }
        let h = IpcHandle { pid: u32_at(12), device: u32_at(16), id: u64_at(24), secret: u64_at(32), chunks: u32_at(20), gran_log2: b[10], offset: u64_at(40), size: u64_at(48) };
        if !(12..=40).contains(&h.gran_log2) || h.chunks == 0 || h.size == 0 || h.pid == 0 {
            return bad("empty or impossible export");
        }
        if h.offset.checked_add(h.size).is_none_or(|end| end > h.len()) {
            return bad("allocation outside its chunks");
        }
        Ok(h)
    }
}

/// The abstract Unix socket name an exporting process answers on.
pub fn socket_name(pid: u32) -> String {
    format!("gasan-ipc.{pid}")
}

struct Export {
    secret: u64,
    fds: Vec<OwnedFd>,
}

#[derive(Default)]
struct Shared {
    exports: Mutex<HashMap<u64, Export>>,
    next_id: AtomicU64,
    stop: AtomicBool,
}

/// A process's exports and the thread that hands them to importers.
pub struct Exporter {
    shared: Arc<Shared>,
    pid: u32,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn io(call: &'static str) -> impl FnOnce(std::io::Error) -> UvmError {
    move |e| UvmError::Os { call, errno: e.raw_os_error().unwrap_or(libc::EIO) }
}

fn errno(call: &'static str) -> impl FnOnce(nix::errno::Errno) -> UvmError {
    move |e| UvmError::Os { call, errno: e as i32 }
}

fn random_u64() -> Result<u64, UvmError> {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return Err(UvmError::Os { call: "getrandom", errno: nix::errno::Errno::last() as i32 });
    }
    Ok(u64::from_le_bytes(b))
}

impl Exporter {
    /// Listens on this process's socket ([`socket_name`]), answering importers from a thread of
    /// its own. One per process.
    pub fn start() -> Result<Self, UvmError> {
        let pid = std::process::id();
        let addr = SocketAddr::from_abstract_name(socket_name(pid)).map_err(io("socket address"))?;
        let listener = UnixListener::bind_addr(&addr).map_err(io("bind"))?;
        let shared = Arc::new(Shared { next_id: AtomicU64::new(1), ..Default::default() });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gasan-ipc".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::Acquire) {
                        break;
                    }
                    // An importer that vanishes or misbehaves loses its answer, nothing else.
                    if let Ok(c) = conn {
                        let _ = serve(&s, c);
                    }
                }
            })
            .map_err(io("spawn"))?;
        Ok(Self { shared, pid, thread: Some(thread) })
    }

    /// Offers `fds` (a pool allocation's chunks, [`crate::Pool::export`], of `gran` bytes each) of
    /// device `device`, whose bytes `[offset, offset + size)` are the allocation.
    pub fn export(&self, fds: Vec<OwnedFd>, device: u32, gran: u64, offset: u64, size: u64) -> Result<IpcHandle, UvmError> {
        if !gran.is_power_of_two() {
            return Err(UvmError::BadConfig(format!("chunk size {gran:#x}")));
        }
        let chunks = u32::try_from(fds.len()).map_err(|_| UvmError::BadConfig("too many chunks".into()))?;
        let h = IpcHandle { pid: self.pid, device, id: self.shared.next_id.fetch_add(1, Ordering::Relaxed), secret: random_u64()?, chunks, gran_log2: gran.trailing_zeros() as u8, offset, size };
        // The same checks an importer makes.
        IpcHandle::from_bytes(&h.to_bytes())?;
        self.shared.exports.lock().unwrap_or_else(|p| p.into_inner()).insert(h.id, Export { secret: h.secret, fds });
        Ok(h)
    }

    /// Stops offering `h` (its allocation is freed): later imports fail; processes that imported
    /// it keep their mapping. False if it was not offered.
    pub fn withdraw(&self, h: &IpcHandle) -> bool {
        let mut e = self.shared.exports.lock().unwrap_or_else(|p| p.into_inner());
        match e.get(&h.id) {
            Some(x) if x.secret == h.secret && h.pid == self.pid => e.remove(&h.id).is_some(),
            _ => false,
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wakes the accept loop, which then sees the flag; if even that fails the thread is left
        // blocked in accept, holding nothing but the listener.
        let woke = SocketAddr::from_abstract_name(socket_name(self.pid)).and_then(|a| UnixStream::connect_addr(&a)).is_ok();
        if let Some(t) = self.thread.take().filter(|_| woke) {
            let _ = t.join();
        }
    }
}

/// Reply header: status ([`REPLY_OK`] or [`REPLY_UNKNOWN`]) and the number of descriptors that follow.
const REPLY_OK: u32 = 0;
const REPLY_UNKNOWN: u32 = 1;

/// Answers one importer: a handle in, its descriptors out, in messages of [`FDS_PER_MESSAGE`].
fn serve(shared: &Shared, mut c: UnixStream) -> Result<(), UvmError> {
    c.set_read_timeout(Some(TRANSFER_TIMEOUT)).map_err(io("setsockopt"))?;
    c.set_write_timeout(Some(TRANSFER_TIMEOUT)).map_err(io("setsockopt"))?;
    let mut req = [0u8; IPC_HANDLE_SIZE];
    c.read_exact(&mut req).map_err(io("read"))?;
    // Duplicates, taken under the lock and sent without it.
    let fds: Option<Vec<OwnedFd>> = IpcHandle::from_bytes(&req).ok().and_then(|h| {
        let e = shared.exports.lock().unwrap_or_else(|p| p.into_inner());
        let x = e.get(&h.id).filter(|x| x.secret == h.secret && x.fds.len() == h.chunks as usize)?;
        x.fds.iter().map(|f| f.try_clone().ok()).collect()
    });
    let Some(fds) = fds else {
        return c.write_all(&[REPLY_UNKNOWN.to_le_bytes(), 0u32.to_le_bytes()].concat()).map_err(io("write"));
    };
    c.write_all(&[REPLY_OK.to_le_bytes(), (fds.len() as u32).to_le_bytes()].concat()).map_err(io("write"))?;
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let raw: Vec<RawFd> = batch.iter().map(AsRawFd::as_raw_fd).collect();
        let n = (raw.len() as u32).to_le_bytes();
        // MSG_NOSIGNAL: an importer that died makes this fail (EPIPE) instead of killing us.
        sendmsg::<()>(c.as_raw_fd(), &[IoSlice::new(&n)], &[ControlMessage::ScmRights(&raw)], MsgFlags::MSG_NOSIGNAL, None).map_err(errno("sendmsg"))?;
    }
    Ok(())
}

/// Asks the process that exported `h` for its chunks: one descriptor per chunk, in address order.
/// Fails with [`UvmError::BadIpcHandle`] when the exporter no longer offers it (withdrawn, or the
/// process is gone).
pub fn import(h: &IpcHandle) -> Result<Vec<OwnedFd>, UvmError> {
    let addr = SocketAddr::from_abstract_name(socket_name(h.pid)).map_err(io("socket address"))?;
    let mut c = UnixStream::connect_addr(&addr).map_err(|_| UvmError::BadIpcHandle(format!("process {} does not answer gasan IPC (exited?)", h.pid)))?;
    c.set_read_timeout(Some(TRANSFER_TIMEOUT)).map_err(io("setsockopt"))?;
    c.set_write_timeout(Some(TRANSFER_TIMEOUT)).map_err(io("setsockopt"))?;
    c.write_all(&h.to_bytes()).map_err(io("write"))?;
    let mut head = [0u8; 8];
    c.read_exact(&mut head).map_err(io("read"))?;
    let (status, count) = (u32::from_le_bytes(head[0..4].try_into().expect("4")), u32::from_le_bytes(head[4..8].try_into().expect("4")));
    if status != REPLY_OK {
        return Err(UvmError::BadIpcHandle(format!("process {} does not offer export {} (freed?)", h.pid, h.id)));
    }
    if count != h.chunks {
        return Err(UvmError::BadIpcHandle(format!("{count} chunks sent for an export of {}", h.chunks)));
    }
    let mut fds = Vec::with_capacity(count as usize);
    while fds.len() < count as usize {
        let mut n = [0u8; 4];
        let mut iov = [IoSliceMut::new(&mut n)];
        let mut space = nix::cmsg_space!([RawFd; FDS_PER_MESSAGE]);
        let msg = recvmsg::<()>(c.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).map_err(errno("recvmsg"))?;
        let got = msg.bytes;
        for cm in msg.cmsgs().map_err(errno("recvmsg"))? {
            if let ControlMessageOwned::ScmRights(raw) = cm {
                // SAFETY: the kernel just installed these descriptors in this process for this
                // message; nothing else owns them.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        if got == 0 {
            return Err(UvmError::BadIpcHandle(format!("process {} hung up after {} of {count} chunks", h.pid, fds.len())));
        }
    }
    if fds.len() != count as usize {
        return Err(UvmError::BadIpcHandle(format!("{} chunks received for an export of {count}", fds.len())));
    }
    Ok(fds)
}
