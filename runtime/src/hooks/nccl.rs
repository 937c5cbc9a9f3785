//! NCCL (issue 40 item 4): the user buffers of NCCL's collectives (and their NCCL 2.30 `*Config`
//! variants), point-to-point and one-sided calls and buffer registrations are range-checked on the
//! host before NCCL gets them, as the host API copies are
//! ([`super::copies::check_range`]): each buffer's span (its element count × the datatype's size,
//! times the communicator's rank count where NCCL's contract says so) against the pool allocation
//! it starts in. A span past the allocation's end is a `heap-buffer-overflow`, a freed allocation a
//! `heap-use-after-free`, reported as a host call named after the NCCL function and the buffer
//! (`ncclAllReduce (recvbuff)`); with `halt_on_error=0` the call is not forwarded and answers
//! `ncclInvalidArgument`, as NCCL answers its own argument checks (a copy with a bad range is not
//! forwarded either). NCCL's own memory (`ncclMemAlloc`: VMM memory NCCL maps with cuMem*
//! outside the pool) is recorded when NCCL hands it out ([`ForeignKind::NcclMem`]): gasan knows
//! it, never takes it for a wild address, and checks spans in it against the size the program
//! asked for (host calls; kernels too with `outside_checks=1`). At `ncclMemFree` it becomes
//! freed memory ([`ForeignKind::NcclMemFreed`], the last [`FREED_KEPT`] frees): a host call that
//! uses it after is a heap-use-after-free. Buffers elsewhere outside the pool (memory gasan did not allocate) pass
//! unchecked. The exit summary (`verbosity=1`) counts both. NCCL's own kernels are precompiled
//! SASS: what they do inside the spans is not checked per access.
//!
//! How calls get here: the wrappers are exported under NCCL's names (programs and libraries linked
//! with libnccl, such as libtorch_cuda, bind to them), and [`super::library`] answers `dlsym` on a
//! handle of libnccl with them. The wrappers reach NCCL's functions as [`Library::real`] finds them,
//! which includes the `libnccl.so.2` already loaded, found by its soname: a library opened `RTLD_LOCAL`
//! (PyTorch's libtorch_cuda, opened by Python, loads libnccl that way) is in no scope `RTLD_NEXT`
//! searches.

use crate::library::Library;
use crate::side_table::ForeignKind;
use crate::state::{log, state};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// `ncclResult_t`.
type NcclResult = c_int;
/// `ncclComm_t`, `cudaStream_t`, `ncclWindow_t` (opaque pointers).
type Comm = *mut c_void;
type Stream = *mut c_void;

const NCCL_INTERNAL_ERROR: NcclResult = 3;
const NCCL_INVALID_ARGUMENT: NcclResult = 4;
const NCCL_SUCCESS: NcclResult = 0;
/// `ncclUint8`: a registration's size is in bytes.
const NCCL_UINT8: c_int = 1;

/// The soname of the NCCL 2 library (the `nvidia-nccl-cu*` wheels' and NVIDIA's packages').
const SONAME: &CStr = c"libnccl.so.2";

/// Bytes per element of an `ncclDataType_t` (nccl.h, NCCL 2.30); `None` for a value NCCL 2.30 does
/// not define (NCCL refuses it itself).
pub fn element_size(datatype: c_int) -> Option<u64> {
    Some(match datatype {
        0 | 1 | 10 | 11 => 1, // ncclInt8, ncclUint8, ncclFloat8e4m3, ncclFloat8e5m2
        6 | 9 => 2,           // ncclFloat16, ncclBfloat16
        2 | 3 | 7 => 4,       // ncclInt32, ncclUint32, ncclFloat32
        4 | 5 | 8 => 8,       // ncclInt64, ncclUint64, ncclFloat64
        _ => return None,
    })
}

/// What an NCCL call does with its buffers; roots are ranks of the communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    AllReduce,
    /// `count` is the receive count; the send buffer holds one per rank.
    ReduceScatter,
    /// `count` is the send count; the receive buffer holds one per rank.
    AllGather,
    /// `count` elements to and from each rank.
    AlltoAll,
    /// `recvbuff` is written on the root only (and may be null elsewhere).
    Reduce {
        root: i32,
    },
    /// `sendbuff` is read on the root only.
    Broadcast {
        root: i32,
    },
    /// The deprecated in-place broadcast: one buffer, read on the root, written elsewhere.
    Bcast {
        root: i32,
    },
    /// The root receives `count` elements from each rank.
    Gather {
        root: i32,
    },
    /// The root sends `count` elements to each rank.
    Scatter {
        root: i32,
    },
    Send,
    Recv,
    /// `ncclPutSignal`: its local buffer is read (the peer's window is the peer's memory).
    Put,
    /// `ncclCommRegister` / `ncclCommWindowRegister`: `count` bytes that NCCL and the peers may
    /// read and write.
    Register,
}

impl Op {
    /// Whether the spans depend on the communicator's rank count or this rank.
    fn needs_shape(self) -> bool {
        !matches!(self, Op::AllReduce | Op::Send | Op::Recv | Op::Put | Op::Register)
    }
}

/// The communicator as the spans need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub nranks: u64,
    pub rank: i32,
}

/// One buffer of a call: the span NCCL reads (`write` false) or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The parameter's name in nccl.h.
    pub role: &'static str,
    pub addr: u64,
    pub len: u64,
    pub write: bool,
}

/// The spans of the buffers an NCCL call touches on this rank (nccl.h's contract for each call),
/// null or empty ones left out. Lengths saturate, so an absurd count is reported, never wrapped.
pub fn buffers(op: Op, send: u64, recv: u64, count: u64, elem: u64, shape: Shape) -> Vec<Buffer> {
    let one = count.saturating_mul(elem);
    let per_rank = one.saturating_mul(shape.nranks);
    let is_root = |root: i32| shape.rank == root;
    let s = |len| Buffer { role: "sendbuff", addr: send, len, write: false };
    let r = |len| Buffer { role: "recvbuff", addr: recv, len, write: true };
    let v = match op {
        Op::AllReduce => vec![s(one), r(one)],
        Op::ReduceScatter => vec![s(per_rank), r(one)],
        Op::AllGather => vec![s(one), r(per_rank)],
        Op::AlltoAll => vec![s(per_rank), r(per_rank)],
        Op::Reduce { root } if is_root(root) => vec![s(one), r(one)],
        Op::Reduce { .. } => vec![s(one)],
        Op::Broadcast { root } if is_root(root) => vec![s(one), r(one)],
        Op::Broadcast { .. } => vec![r(one)],
        Op::Bcast { root } => vec![Buffer { role: "buff", addr: send, len: one, write: !is_root(root) }],
        Op::Gather { root } if is_root(root) => vec![s(one), r(per_rank)],
        Op::Gather { .. } => vec![s(one)],
        Op::Scatter { root } if is_root(root) => vec![s(per_rank), r(one)],
        Op::Scatter { .. } => vec![r(one)],
        Op::Send => vec![s(one)],
        Op::Recv => vec![r(one)],
        Op::Put => vec![Buffer { role: "localbuff", addr: send, len: one, write: false }],
        Op::Register => vec![Buffer { role: "buff", addr: send, len: one, write: true }],
    };
    v.into_iter().filter(|b| b.addr != 0 && b.len != 0).collect()
}

/// One call as the program made it.
struct Call {
    op: Op,
    send: u64,
    recv: u64,
    count: u64,
    datatype: c_int,
    comm: Comm,
}

impl Call {
    fn new(op: Op, send: *const c_void, recv: *const c_void, count: usize, datatype: c_int, comm: Comm) -> Call {
        Call { op, send: send as u64, recv: recv as u64, count: count as u64, datatype, comm }
    }
}

/// What the exit summary counts.
struct Tally {
    calls: AtomicU64,
    in_pool: AtomicU64,
    /// Buffers in `ncclMemAlloc`'s memory.
    in_nccl_mem: AtomicU64,
    outside: AtomicU64,
    unchecked_calls: AtomicU64,
    /// `ncclMemAlloc` allocations recorded, and those `ncclMemFree` forgot.
    mem_allocs: AtomicU64,
    mem_frees: AtomicU64,
}

static TALLY: Tally = Tally {
    calls: AtomicU64::new(0),
    in_pool: AtomicU64::new(0),
    in_nccl_mem: AtomicU64::new(0),
    outside: AtomicU64::new(0),
    unchecked_calls: AtomicU64::new(0),
    mem_allocs: AtomicU64::new(0),
    mem_frees: AtomicU64::new(0),
};

extern "C" fn summary_at_exit() {
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    log(1, || {
        format!(
            "NCCL: {} calls; {} buffers checked against gasan's pool, {} against ncclMemAlloc's bounds, {} elsewhere passed unchecked (memory gasan did not allocate); {} calls not checked (a datatype or communicator gasan could not read); ncclMemAlloc: {} allocations outside the pool, known to gasan, {} freed",
            n(&TALLY.calls),
            n(&TALLY.in_pool),
            n(&TALLY.in_nccl_mem),
            n(&TALLY.outside),
            n(&TALLY.unchecked_calls),
            n(&TALLY.mem_allocs),
            n(&TALLY.mem_frees)
        )
    });
}

/// Arranges the summary at exit (once).
fn summary_once() {
    static SUMMARY: Once = Once::new();
    // SAFETY: registering a plain extern "C" function.
    SUMMARY.call_once(|| unsafe {
        libc::atexit(summary_at_exit);
    });
}

/// Checks a call's buffers; false when one is bad (reported; with `halt_on_error=1` the process
/// has ended).
fn check(name: &'static str, call: Call) -> bool {
    summary_once();
    TALLY.calls.fetch_add(1, Ordering::Relaxed);
    let unchecked = |why: &str| {
        TALLY.unchecked_calls.fetch_add(1, Ordering::Relaxed);
        log(2, || format!("{name}: not checked ({why})"));
        true
    };
    let Some(elem) = element_size(call.datatype) else {
        return unchecked(&format!("datatype {}", call.datatype));
    };
    let shape = if call.op.needs_shape() {
        match comm_shape(call.comm) {
            Some(s) => s,
            None => return unchecked("ncclCommCount or ncclCommUserRank failed"),
        }
    } else {
        Shape { nranks: 1, rank: 0 }
    };
    let s = state();
    for b in buffers(call.op, call.send, call.recv, call.count, elem, shape) {
        log(2, || format!("{name}: {} [{:#x}, +{})", b.role, b.addr, b.len));
        let tally = if s.runtime_owning(b.addr).is_some() {
            &TALLY.in_pool
        } else if s.foreign.find(b.addr).is_some_and(|r| r.kind == ForeignKind::NcclMem) {
            &TALLY.in_nccl_mem
        } else {
            &TALLY.outside
        };
        tally.fetch_add(1, Ordering::Relaxed);
        if !super::copies::check_range(&format!("{name} ({})", b.role), b.addr, b.len as usize, b.write) {
            return false;
        }
    }
    true
}

/// Runs gasan's check of a call; a panic in it is reported and the call forwarded.
fn ours(name: &str, f: impl FnOnce() -> bool) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("==gasan== internal error in {name}; the call goes to NCCL unchecked");
        true
    })
}

/// Declares each wrapper, exported under NCCL's name: its buffers checked, then NCCL's function of
/// the same name called with the program's arguments. `Wrapped::NAME as usize` is the wrapper's
/// index in [`table`]. The wrappers after `@by_hand` are written by hand (NCCL's allocator).
macro_rules! wrappers {
    ($( $name:ident ( $($a:ident : $t:ty),* ) => $call:expr; )* @by_hand $($own:ident),*;) => {
        /// The wrapped functions, in the order of [`table`].
        #[allow(non_camel_case_types, clippy::enum_variant_names)]
        #[derive(Clone, Copy)]
        enum Wrapped { $($name,)* $($own),* }
        $(
            /// # Safety
            /// nccl.h's contract for the function of this name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> NcclResult {
                // SAFETY: the prototype is this function's own, which is nccl.h's for its name.
                let Some(real) = (unsafe { real_as::<unsafe extern "C" fn($($t),*) -> NcclResult>(Wrapped::$name as usize) }) else { return NCCL_INTERNAL_ERROR };
                if !ours(stringify!($name), || check(stringify!($name), $call)) {
                    return NCCL_INVALID_ARGUMENT;
                }
                // SAFETY: the program's arguments, under the function's contract (this function's).
                unsafe { real($($a),*) }
            }
        )*
        fn table() -> &'static [(&'static str, usize)] {
            static T: OnceLock<Vec<(&str, usize)>> = OnceLock::new();
            T.get_or_init(|| vec![$((stringify!($name), $name as *const () as usize),)* $((stringify!($own), $own as *const () as usize)),*])
        }
    };
}

wrappers! {
    ncclAllReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream) => Call::new(Op::AllReduce, send, recv, count, datatype, comm);
    ncclReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: Comm, stream: Stream) => Call::new(Op::Reduce { root }, send, recv, count, datatype, comm);
    ncclBroadcast(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) => Call::new(Op::Broadcast { root }, send, recv, count, datatype, comm);
    ncclBcast(buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) => Call::new(Op::Bcast { root }, buff, std::ptr::null(), count, datatype, comm);
    ncclReduceScatter(send: *const c_void, recv: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream) => Call::new(Op::ReduceScatter, send, recv, recvcount, datatype, comm);
    ncclAllGather(send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int, comm: Comm, stream: Stream) => Call::new(Op::AllGather, send, recv, sendcount, datatype, comm);
    ncclAlltoAll(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, comm: Comm, stream: Stream) => Call::new(Op::AlltoAll, send, recv, count, datatype, comm);
    ncclGather(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) => Call::new(Op::Gather { root }, send, recv, count, datatype, comm);
    ncclScatter(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream) => Call::new(Op::Scatter { root }, send, recv, count, datatype, comm);
    ncclSend(send: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream) => Call::new(Op::Send, send, std::ptr::null(), count, datatype, comm);
    ncclRecv(recv: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm, stream: Stream) => Call::new(Op::Recv, std::ptr::null(), recv, count, datatype, comm);
    // NCCL 2.30's per-call-configuration variants: the plain call's buffers, a config pointer after.
    ncclAllReduceConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::AllReduce, send, recv, count, datatype, comm);
    ncclReduceConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int, root: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::Reduce { root }, send, recv, count, datatype, comm);
    ncclBroadcastConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::Broadcast { root }, send, recv, count, datatype, comm);
    ncclReduceScatterConfig(send: *const c_void, recv: *mut c_void, recvcount: usize, datatype: c_int, op: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::ReduceScatter, send, recv, recvcount, datatype, comm);
    ncclAllGatherConfig(send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::AllGather, send, recv, sendcount, datatype, comm);
    ncclAlltoAllConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::AlltoAll, send, recv, count, datatype, comm);
    ncclGatherConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::Gather { root }, send, recv, count, datatype, comm);
    ncclScatterConfig(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm, stream: Stream, config: *const c_void) => Call::new(Op::Scatter { root }, send, recv, count, datatype, comm);
    ncclPutSignal(local: *const c_void, count: usize, datatype: c_int, peer: c_int, peer_win: *mut c_void, peer_win_offset: usize, sig_idx: c_int, ctx: c_int, flags: u32, comm: Comm, stream: Stream) => Call::new(Op::Put, local, std::ptr::null(), count, datatype, comm);
    ncclCommRegister(comm: Comm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) => Call::new(Op::Register, buff, std::ptr::null(), size, NCCL_UINT8, comm);
    ncclCommWindowRegister(comm: Comm, buff: *mut c_void, size: usize, win: *mut *mut c_void, flags: c_int) => Call::new(Op::Register, buff, std::ptr::null(), size, NCCL_UINT8, comm);
    @by_hand ncclMemAlloc, ncclMemFree;
}

/// NCCL's `ncclMemAlloc`: on success the memory (`size` bytes at `*ptr`) is recorded as NCCL's
/// ([`ForeignKind::NcclMem`]), unless it is the pool's (NCCL without cuMem support falls back to
/// `cudaMalloc`, which the pool serves and checks).
///
/// # Safety
/// nccl.h's contract for `ncclMemAlloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    // SAFETY: nccl.h's prototype of ncclMemAlloc, this function's own.
    let Some(real) = (unsafe { real_as::<unsafe extern "C" fn(*mut *mut c_void, usize) -> NcclResult>(Wrapped::ncclMemAlloc as usize) }) else { return NCCL_INTERNAL_ERROR };
    // SAFETY: the program's arguments, under the function's contract.
    let r = unsafe { real(ptr, size) };
    if r == NCCL_SUCCESS && !ptr.is_null() {
        // SAFETY: NCCL succeeded, so it wrote the allocation's address to the program's `ptr`.
        let p = unsafe { *ptr } as u64;
        ours("ncclMemAlloc", || {
            summary_once();
            let s = state();
            if p != 0 && size != 0 && s.runtime_owning(p).is_none() {
                s.foreign.record(p, size as u64, ForeignKind::NcclMem, || s.outside_table(), s.opts.malloc_context_size);
                TALLY.mem_allocs.fetch_add(1, Ordering::Relaxed);
                log(2, || format!("ncclMemAlloc: {size} bytes at {p:#x}, NCCL's memory outside the pool"));
            }
            true
        });
    }
    r
}

/// NCCL's `ncclMemFree`: on success the memory is forgotten.
///
/// # Safety
/// nccl.h's contract for `ncclMemFree`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    // SAFETY: nccl.h's prototype of ncclMemFree, this function's own.
    let Some(real) = (unsafe { real_as::<unsafe extern "C" fn(*mut c_void) -> NcclResult>(Wrapped::ncclMemFree as usize) }) else { return NCCL_INTERNAL_ERROR };
    // SAFETY: the program's argument, under the function's contract.
    let r = unsafe { real(ptr) };
    if r == NCCL_SUCCESS {
        ours("ncclMemFree", || {
            let s = state();
            let start = ptr as u64;
            if s.foreign.find(start).is_some_and(|f| f.kind == ForeignKind::NcclMem && f.start == start) {
                // Gone for kernels (the outside table's range marked freed), kept for host calls.
                if let Some(t) = s.outside_table() {
                    t.remove(start, crate::allocator::HostStack::capture(s.opts.malloc_context_size));
                }
                s.foreign.retire_freed(start, FREED_KEPT);
                TALLY.mem_frees.fetch_add(1, Ordering::Relaxed);
            }
            true
        });
    }
    r
}

/// How many `ncclMemFree`'d ranges are remembered for use-after-free reports of host calls.
pub const FREED_KEPT: usize = 1024;

/// NCCL, as the wrappers reach it (also when loaded `RTLD_LOCAL` by another library, by soname).
pub(crate) static NCCL: Library = Library::with_soname(table, SONAME);

mod sys {
    use super::{c_int, Comm, NcclResult, NCCL};
    crate::library::exports! { NCCL -> NcclResult;
        ncclCommCount(comm: Comm, count: *mut c_int);
        ncclCommUserRank(comm: Comm, rank: *mut c_int);
    }
}

/// NCCL's function `i` of [`table`] as type `F`.
///
/// # Safety
/// `F` is the C prototype in nccl.h of the function `i` of [`table`].
unsafe fn real_as<F: Copy>(i: usize) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: a non-null address of NCCL's function `i`, whose prototype `F` is by this function's
    // contract.
    NCCL.real(i).map(|p| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
}

type QueryFn = unsafe extern "C" fn(Comm, *mut c_int) -> NcclResult;

/// NCCL's `ncclCommCount` and `ncclCommUserRank`, looked up once per process (every collective
/// that needs the communicator's shape asks them).
fn comm_queries() -> Option<(QueryFn, QueryFn)> {
    static FOUND: OnceLock<Option<(QueryFn, QueryFn)>> = OnceLock::new();
    *FOUND.get_or_init(|| Some((sys::ncclCommCount.get()?, sys::ncclCommUserRank.get()?)))
}

/// The communicator's rank count and this rank.
fn comm_shape(comm: Comm) -> Option<Shape> {
    let (count, rank) = comm_queries()?;
    let query = |f: QueryFn| -> Option<c_int> {
        let mut v: c_int = 0;
        // SAFETY: the program's communicator (NCCL checks it), `v` a valid out-pointer.
        (unsafe { f(comm, &mut v) } == NCCL_SUCCESS).then_some(v)
    };
    Some(Shape { nranks: u64::try_from(query(count)?).ok()?, rank: query(rank)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOUR: Shape = Shape { nranks: 4, rank: 1 };

    fn lens(v: &[Buffer]) -> Vec<(&'static str, u64, bool)> {
        v.iter().map(|b| (b.role, b.len, b.write)).collect()
    }

    #[test]
    fn spans_follow_ncclh_per_call() {
        let (s, r) = (0x1000, 0x2000);
        assert_eq!(lens(&buffers(Op::AllReduce, s, r, 10, 4, FOUR)), [("sendbuff", 40, false), ("recvbuff", 40, true)]);
        assert_eq!(lens(&buffers(Op::AllGather, s, r, 10, 4, FOUR)), [("sendbuff", 40, false), ("recvbuff", 160, true)]);
        assert_eq!(lens(&buffers(Op::ReduceScatter, s, r, 10, 4, FOUR)), [("sendbuff", 160, false), ("recvbuff", 40, true)]);
        assert_eq!(lens(&buffers(Op::AlltoAll, s, r, 10, 2, FOUR)), [("sendbuff", 80, false), ("recvbuff", 80, true)]);
        // Roots: rank 1 is the root or not.
        assert_eq!(lens(&buffers(Op::Reduce { root: 1 }, s, r, 10, 8, FOUR)), [("sendbuff", 80, false), ("recvbuff", 80, true)]);
        assert_eq!(lens(&buffers(Op::Reduce { root: 0 }, s, r, 10, 8, FOUR)), [("sendbuff", 80, false)]);
        assert_eq!(lens(&buffers(Op::Broadcast { root: 0 }, s, r, 10, 1, FOUR)), [("recvbuff", 10, true)]);
        assert_eq!(lens(&buffers(Op::Broadcast { root: 1 }, s, r, 10, 1, FOUR)), [("sendbuff", 10, false), ("recvbuff", 10, true)]);
        assert_eq!(lens(&buffers(Op::Bcast { root: 1 }, s, 0, 10, 1, FOUR)), [("buff", 10, false)]);
        assert_eq!(lens(&buffers(Op::Bcast { root: 2 }, s, 0, 10, 1, FOUR)), [("buff", 10, true)]);
        assert_eq!(lens(&buffers(Op::Gather { root: 1 }, s, r, 10, 4, FOUR)), [("sendbuff", 40, false), ("recvbuff", 160, true)]);
        assert_eq!(lens(&buffers(Op::Gather { root: 3 }, s, r, 10, 4, FOUR)), [("sendbuff", 40, false)]);
        assert_eq!(lens(&buffers(Op::Scatter { root: 1 }, s, r, 10, 4, FOUR)), [("sendbuff", 160, false), ("recvbuff", 40, true)]);
        assert_eq!(lens(&buffers(Op::Scatter { root: 0 }, s, r, 10, 4, FOUR)), [("recvbuff", 40, true)]);
        assert_eq!(lens(&buffers(Op::Send, s, 0, 3, 8, FOUR)), [("sendbuff", 24, false)]);
        assert_eq!(lens(&buffers(Op::Recv, 0, r, 3, 8, FOUR)), [("recvbuff", 24, true)]);
        assert_eq!(lens(&buffers(Op::Put, s, 0, 3, 8, FOUR)), [("localbuff", 24, false)]);
        assert_eq!(lens(&buffers(Op::Register, s, 0, 4096, 1, FOUR)), [("buff", 4096, true)]);
    }

    #[test]
    fn null_and_empty_buffers_are_left_out_and_lengths_saturate() {
        // A non-root's null recvbuff for ncclReduce, a zero count.
        assert!(buffers(Op::AllReduce, 0, 0, 10, 4, FOUR).is_empty());
        assert!(buffers(Op::AllReduce, 0x1000, 0x2000, 0, 4, FOUR).is_empty());
        let b = buffers(Op::AllGather, 0x1000, 0x2000, u64::MAX / 2, 4, FOUR);
        assert_eq!(b[1].len, u64::MAX);
    }

    #[test]
    fn every_datatype_of_nccl_2_30_has_its_size() {
        let sizes: Vec<Option<u64>> = (0..13).map(element_size).collect();
        assert_eq!(sizes, [Some(1), Some(1), Some(4), Some(4), Some(8), Some(8), Some(2), Some(4), Some(8), Some(2), Some(1), Some(1), None]);
        assert_eq!(element_size(-1), None);
    }

    #[test]
    fn the_table_names_each_wrapper_once_in_enum_order() {
        let t = table();
        assert_eq!(t[Wrapped::ncclAllReduce as usize].0, "ncclAllReduce");
        assert_eq!(t[Wrapped::ncclCommWindowRegister as usize].0, "ncclCommWindowRegister");
        assert_eq!(t[Wrapped::ncclMemFree as usize].0, "ncclMemFree");
        assert_eq!(t.len(), Wrapped::ncclMemFree as usize + 1);
        let mut names: Vec<&str> = t.iter().map(|(n, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), t.len());
    }
}
