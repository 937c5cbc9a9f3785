//! The pool on the Host backend (real mmap/memfd/mprotect) over random operation sequences, checked
//! against a model: live commitments never overlap, retired VA is never reissued, aliases share
//! bytes, shadow of retired or never-committed VA reads zero, bad requests change nothing.

use gasan_uvm::host::faults_in_child;
use gasan_uvm::{HostBackend, Pool, PoolConfig, Prot, Stream, UvmError};
use proptest::prelude::*;
use std::collections::BTreeSet;

const G: u64 = 64 << 10;

fn pool(shift: u32) -> Pool {
    Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: 1 << 30, shift, hints: vec![], max_size: 0, tags: 1 }).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Commit(u64, u64),
    Decommit(u64, u64),
    Retire(u64, u64),
    Write(u64, u8),
    Alias(u64),
    Misaligned(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let chunk = 0u64..16;
    prop_oneof![
        (chunk.clone(), 1u64..4).prop_map(|(c, n)| Op::Commit(c, n)),
        (chunk.clone(), 1u64..4).prop_map(|(c, n)| Op::Decommit(c, n)),
        (chunk.clone(), 1u64..3).prop_map(|(c, n)| Op::Retire(c, n)),
        (chunk.clone(), any::<u8>()).prop_map(|(c, v)| Op::Write(c, v)),
        chunk.clone().prop_map(Op::Alias),
        (1u64..G).prop_map(Op::Misaligned),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_sequences_keep_the_invariants(ops in prop::collection::vec(op(), 1..40), shift in 7u32..=8) {
        let mut p = pool(shift);
        let base = p.base();
        let mut committed: BTreeSet<u64> = BTreeSet::new();
        let mut retired: BTreeSet<u64> = BTreeSet::new();
        for o in ops {
            match o {
                Op::Commit(c, n) => {
                    let ok_model = (c..c + n).all(|i| !committed.contains(&i) && !retired.contains(&i));
                    let r = p.commit(base + c * G, n * G);
                    prop_assert_eq!(r.is_ok(), ok_model, "commit {} {}: {:?}", c, n, r);
                    if ok_model {
                        committed.extend(c..c + n);
                        let mut s = vec![1u8; 4];
                        p.read_shadow(base + c * G, &mut s).unwrap();
                        prop_assert!(s.iter().all(|&b| b == 0), "fresh shadow must be inaccessible");
                    }
                }
                Op::Decommit(c, n) => {
                    let ok_model = (c..c + n).all(|i| committed.contains(&i));
                    prop_assert_eq!(p.decommit(base + c * G, n * G).is_ok(), ok_model);
                    if ok_model {
                        for i in c..c + n { committed.remove(&i); }
                    }
                }
                Op::Retire(c, n) => {
                    let ok_model = (c..c + n).all(|i| !retired.contains(&i));
                    prop_assert_eq!(p.retire(base + c * G, n * G).is_ok(), ok_model);
                    if ok_model {
                        for i in c..c + n { committed.remove(&i); retired.insert(i); }
                        let mut s = vec![7u8; 8];
                        p.read_shadow(base + c * G, &mut s).unwrap();
                        prop_assert!(s.iter().all(|&b| b == 0), "shadow of retired VA");
                    }
                }
                Op::Write(c, v) => {
                    if committed.contains(&c) {
                        let va = base + c * G + 100;
                        p.backend().write(va, &[v; 16], Stream::SYNC).unwrap();
                        let mut back = [0u8; 16];
                        p.backend().read(va, &mut back).unwrap();
                        prop_assert_eq!(back, [v; 16]);
                        p.write_shadow(base + c * G, &[v], Stream::SYNC).unwrap();
                    } else {
                        prop_assert!(p.write_shadow(base + c * G, &[v], Stream::SYNC).is_err());
                    }
                }
                Op::Alias(c) => {
                    let r = p.alias(base + c * G, G);
                    prop_assert_eq!(r.is_ok(), committed.contains(&c));
                    if let Ok(a) = r {
                        p.backend().write(a + 8, b"alias", Stream::SYNC).unwrap();
                        let mut back = [0u8; 5];
                        p.backend().read(base + c * G + 8, &mut back).unwrap();
                        prop_assert_eq!(&back, b"alias");
                        p.unalias(a).unwrap();
                    }
                }
                Op::Misaligned(off) => {
                    let before = p.counters();
                    let r = p.commit(base + off, G);
                    let misaligned = matches!(r, Err(UvmError::Misaligned { .. }));
                    prop_assert!(misaligned, "misaligned commit accepted");
                    prop_assert_eq!(p.counters(), before);
                }
            }
            for c in 0..64 {
                prop_assert_eq!(p.is_committed(base + c * G), committed.contains(&c));
                prop_assert_eq!(p.is_retired(base + c * G), retired.contains(&c));
            }
        }
    }
}

#[test]
fn protections_hold() {
    let mut p = pool(8);
    let va = p.base();
    p.commit(va, 2 * G).unwrap();
    // SAFETY: probing a committed chunk (host memory) inside a forked child; a fault or the
    // write touches only the child.
    assert!(!faults_in_child(|| unsafe { std::ptr::write_volatile(va as *mut u8, 1) }));
    p.protect(va, G, Prot::ReadOnly).unwrap();
    // SAFETY: probing the chunk, now read-only, inside a forked child; the fault ends only the
    // child.
    assert!(faults_in_child(|| unsafe { std::ptr::write_volatile(va as *mut u8, 1) }));
    // SAFETY: reading the read-only chunk inside a forked child; a fault touches only the child.
    assert!(!faults_in_child(|| unsafe {
        std::ptr::read_volatile(va as *const u8);
    }));
    p.protect(va, G, Prot::None).unwrap();
    // SAFETY: probing a PROT_NONE chunk inside a forked child; the fault ends only the child.
    assert!(faults_in_child(|| unsafe {
        std::ptr::read_volatile(va as *const u8);
    }));
    p.retire(va + G, G).unwrap();
    // SAFETY: probing retired VA (reserved PROT_NONE) inside a forked child; the fault ends only
    // the child.
    assert!(faults_in_child(|| unsafe {
        std::ptr::read_volatile((va + G) as *const u8);
    }));
    // SAFETY: probing never-committed pool VA (reserved PROT_NONE) inside a forked child; the
    // fault ends only the child.
    assert!(faults_in_child(|| unsafe {
        std::ptr::read_volatile((va + 10 * G) as *const u8);
    }));
}

/// A host backend whose `map` fails once, after a number of successful calls.
struct Flaky {
    inner: HostBackend,
    maps_left: std::sync::atomic::AtomicI64,
}
impl gasan_uvm::Backend for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }
    fn reserve(&self, s: u64, h: u64) -> Result<u64, UvmError> {
        self.inner.reserve(s, h)
    }
    fn free_va(&self, v: u64, s: u64) -> Result<(), UvmError> {
        self.inner.free_va(v, s)
    }
    fn create_chunk(&self) -> Result<u64, UvmError> {
        self.inner.create_chunk()
    }
    fn release_chunk(&self, h: u64) -> Result<(), UvmError> {
        self.inner.release_chunk(h)
    }
    fn map(&self, va: u64, h: u64, p: Prot) -> Result<(), UvmError> {
        if self.maps_left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(UvmError::Cuda { call: "cuMemMap", code: 2 });
        }
        self.inner.map(va, h, p)
    }
    fn unmap(&self, va: u64, l: u64) -> Result<(), UvmError> {
        self.inner.unmap(va, l)
    }
    fn protect(&self, va: u64, l: u64, p: Prot) -> Result<(), UvmError> {
        self.inner.protect(va, l, p)
    }
    fn write(&self, va: u64, d: &[u8], s: Stream) -> Result<(), UvmError> {
        self.inner.write(va, d, s)
    }
    fn fill(&self, va: u64, l: u64, b: u8, s: Stream) -> Result<(), UvmError> {
        self.inner.fill(va, l, b, s)
    }
    fn read(&self, va: u64, o: &mut [u8]) -> Result<(), UvmError> {
        self.inner.read(va, o)
    }
}

#[test]
fn a_failed_plan_is_rolled_back() {
    // Pool setup maps the zero chunk over the whole shadow and extent table; the map after `extra`
    // more fails.
    let setup_maps = ((1u64 << 30) >> 8).div_ceil(G) + gasan_uvm::plan::extent_table_size(1 << 30, G) / G;
    for extra in 0..4 {
        let b = Flaky { inner: HostBackend::new(G), maps_left: std::sync::atomic::AtomicI64::new((setup_maps + extra) as i64) };
        let mut p = Pool::new(Box::new(b), &PoolConfig { size: 1 << 30, shift: 8, hints: vec![], max_size: 0, tags: 1 }).unwrap();
        let base = p.base();
        let before = p.counters().committed_bytes;
        let r = p.commit(base, 4 * G);
        assert!(r.is_err(), "extra={extra}: the injected map failure must surface");
        assert_eq!(p.counters().committed_bytes, before);
        for c in 0..4 {
            assert!(!p.is_committed(base + c * G), "extra={extra}: chunk {c} left committed");
        }
        let mut s = [9u8; 4];
        p.read_shadow(base, &mut s).unwrap();
        assert_eq!(s, [0; 4], "shadow not restored");
    }
}

/// The host backend, except that it refuses every peer grant (revokes pass) after the first `allowed`.
struct RefusingPeers {
    host: HostBackend,
    allowed: std::sync::atomic::AtomicU32,
}

impl gasan_uvm::Backend for RefusingPeers {
    fn name(&self) -> &'static str {
        "refusing-peers"
    }
    fn granularity(&self) -> u64 {
        self.host.granularity()
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        self.host.reserve(size, hint)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        self.host.free_va(va, size)
    }
    fn create_chunk(&self) -> Result<gasan_uvm::ChunkHandle, UvmError> {
        self.host.create_chunk()
    }
    fn release_chunk(&self, h: gasan_uvm::ChunkHandle) -> Result<(), UvmError> {
        self.host.release_chunk(h)
    }
    fn map(&self, va: u64, h: gasan_uvm::ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.host.map(va, h, prot)
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.host.unmap(va, len)
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        self.host.protect(va, len, prot)
    }
    fn write(&self, va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError> {
        self.host.write(va, data, stream)
    }
    fn fill(&self, va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError> {
        self.host.fill(va, len, byte, stream)
    }
    fn read(&self, va: u64, out: &mut [u8]) -> Result<(), UvmError> {
        self.host.read(va, out)
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        self.host.access(va, device)
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        use std::sync::atomic::Ordering;
        if prot != Prot::None && self.allowed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err() {
            return Err(UvmError::Unavailable("refused".into()));
        }
        self.host.set_peer_access(va, len, peer, prot)
    }
}

#[test]
fn a_refused_peer_grant_is_undone() {
    // Refused at the first call (the committed chunk) and at the last (the extent table).
    for allowed in [0, 2] {
        let b = RefusingPeers { host: HostBackend::new(G), allowed: allowed.into() };
        let mut p = Pool::new(Box::new(b), &PoolConfig { size: 1 << 30, shift: 8, hints: vec![], max_size: 0, tags: 1 }).unwrap();
        p.commit(p.base(), G).unwrap();
        assert!(matches!(p.grant_peer_access(1), Err(UvmError::Unavailable(_))), "allowed {allowed}");
        assert!(p.peers().is_empty());
        let mut out = [0u8; 4];
        assert!(matches!(p.read_as(1, p.base(), &mut out), Err(UvmError::NoAccess { device: 1, .. })), "allowed {allowed}: the peer was left with access");
        // Later commits map no peer's access and still work.
        p.commit(p.base() + G, G).unwrap();
        assert!(matches!(p.read_as(1, p.base() + G, &mut out), Err(UvmError::NoAccess { .. })));
        p.read_as(0, p.base() + G, &mut out).unwrap();
    }
}

#[test]
fn guard_pages_finer_than_a_chunk() {
    // The host backend protects per 4 KiB page, as the patched nvidia-uvm does on the GPU: a guard
    // page in the middle of a committed chunk faults while its neighbours stay usable.
    let mut p = pool(8);
    let va = p.base();
    p.commit(va, G).unwrap();
    let guard = va + 5 * 4096;
    p.protect(guard, 4096, Prot::None).unwrap();
    // SAFETY: probing the guard page (PROT_NONE) inside a forked child; the fault ends only the
    // child.
    assert!(faults_in_child(|| unsafe {
        std::ptr::read_volatile(guard as *const u8);
    }));
    // SAFETY: writing the committed (read-write) page before the guard inside a forked child; a
    // fault or the write touches only the child.
    assert!(!faults_in_child(|| unsafe { std::ptr::write_volatile((guard - 1) as *mut u8, 1) }));
    // SAFETY: writing the committed (read-write) page after the guard inside a forked child; a
    // fault or the write touches only the child.
    assert!(!faults_in_child(|| unsafe { std::ptr::write_volatile((guard + 4096) as *mut u8, 1) }));
    // Finer than the backend's page, outside the pool, or on uncommitted chunks: refused.
    assert!(matches!(p.protect(guard + 8, 4096, Prot::None), Err(UvmError::Misaligned { .. })));
    assert!(matches!(p.protect(va + G, 4096, Prot::None), Err(UvmError::NotCommitted(_))));
    assert!(matches!(p.protect(p.base() + p.size(), 4096, Prot::None), Err(UvmError::OutsidePool { .. })));
    p.protect(guard, 4096, Prot::ReadWrite).unwrap();
    // SAFETY: probing the page, read-write again, inside a forked child; a fault ends only the
    // child.
    assert!(!faults_in_child(|| unsafe {
        std::ptr::read_volatile(guard as *const u8);
    }));
}

proptest! {
    #[test]
    fn canonical_maps_aliases_back_to_their_source(off in 0u64..(2 * G), pick in 0usize..3) {
        let mut p = pool(8);
        let src = p.base() + [0, 4, 9][pick] * G;
        p.commit(src, 2 * G).unwrap();
        let a = p.alias(src, 2 * G).unwrap();
        prop_assert_eq!(p.canonical(a + off), src + off);
        prop_assert_eq!(p.canonical(src + off), src + off);
        prop_assert_eq!(p.canonical(a + 2 * G), a + 2 * G);
        p.unalias(a).unwrap();
        prop_assert_eq!(p.canonical(a + off), a + off);
    }
}

#[test]
fn default_sizes_respect_the_size_limit() {
    // Real mmap reservations: with a 64 GiB limit the first default sizes (1 TiB ... 256 GiB) are
    // skipped, and the largest one allowed is taken.
    let cfg = PoolConfig { shift: 7, hints: vec![], max_size: 1 << 36, ..Default::default() };
    let p = Pool::new(Box::new(HostBackend::new(G)), &cfg).unwrap();
    assert_eq!(p.size(), 1 << 36);
}

/// The shadow starts as wide zero mappings (one per `WIDE_ZERO_SLOTS` chunks); committing pool
/// memory behind any slot splits its run first. Every shadow slot can be backed, written, read
/// and released again, and shadow elsewhere keeps reading zero throughout.
#[test]
fn wide_zero_runs_split_for_any_shadow_slot() {
    let mut p = pool(8);
    let per_slot = G << 8; // pool bytes one shadow chunk describes
    let slots = p.size() / per_slot;
    assert!(slots > 2 * gasan_uvm::pool::WIDE_ZERO_SLOTS, "the test needs wide runs");
    let mut zeros = vec![0u8; 64];
    for s in (1..slots).step_by(3) {
        let va = p.base() + s * per_slot + G;
        p.commit(va, G).unwrap();
        p.write_shadow(va, &[8, 8, 3], Stream::SYNC).unwrap();
        let mut got = [0u8; 3];
        p.read_shadow(va, &mut got).unwrap();
        assert_eq!(got, [8, 8, 3]);
        // The neighbouring slots (same former run) still read zero.
        for n in [s - 1, s + 1] {
            if n < slots {
                p.read_shadow(p.base() + n * per_slot, &mut zeros).unwrap();
                assert!(zeros.iter().all(|&b| b == 0), "slot {n} after backing {s}");
            }
        }
        p.retire(va, G).unwrap();
        p.read_shadow(va, &mut got).unwrap();
        assert_eq!(got, [0, 0, 0], "retired shadow of slot {s}");
    }
}

/// Host-memory chunks (managed allocations) and device chunks never stand in for each other: a
/// commit maps chunks of the memory it asked for, freed chunks go back to the cache of their kind,
/// and a kind's cache serves only that kind.
#[test]
fn host_and_device_chunks_keep_to_their_kind() {
    use gasan_uvm::Memory;
    let mut p = pool(8);
    let b = p.base();
    p.commit_tagged_in(b, 2 * G, 1, Memory::Host).unwrap();
    p.commit(b + 2 * G, G).unwrap();
    assert_eq!((p.memory_of(b), p.memory_of(b + G + 5), p.memory_of(b + 2 * G)), (Some(Memory::Host), Some(Memory::Host), Some(Memory::Device)));
    assert_eq!(p.memory_of(b + 3 * G), None, "not committed");
    // Host bytes are plain memory to the CPU (on the GPU: pinned host memory mapped for both).
    // SAFETY: committed, mapped read-write, no Rust object aliases pool memory.
    unsafe { std::ptr::write_volatile((b + 100) as *mut u32, 0xfeed) };
    p.decommit(b, 2 * G).unwrap();
    let from_cache = p.counters().chunks_from_cache;
    // A device commit must not take the two freed host chunks...
    p.commit(b + 4 * G, G).unwrap();
    assert_eq!(p.memory_of(b + 4 * G), Some(Memory::Device));
    assert_eq!(p.counters().chunks_from_cache, from_cache, "a device commit took a cached host chunk");
    // ...and a host commit takes them back instead of creating new ones.
    p.commit_tagged_in(b + 6 * G, 2 * G, 1, Memory::Host).unwrap();
    assert_eq!(p.counters().chunks_from_cache, from_cache + 2);
    assert_eq!(p.memory_of(b + 7 * G), Some(Memory::Host));
    // A decommit releases each kind to its own cache: the device chunk serves a device commit.
    p.decommit(b + 2 * G, G).unwrap();
    p.commit(b + 9 * G, G).unwrap();
    assert_eq!((p.memory_of(b + 9 * G), p.counters().chunks_from_cache), (Some(Memory::Device), from_cache + 3));
}

/// Migration moves a committed range between host and device chunks with its bytes, in every
/// window it is mapped through, and leaves other chunks alone.
#[test]
fn migration_keeps_the_bytes_and_the_windows() {
    use gasan_uvm::Memory;
    let mut p = Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: 1 << 30, shift: 8, hints: vec![], max_size: 0, tags: 4 }).unwrap();
    let (b, w) = (p.base(), p.window_size());
    p.commit_tagged_in(b, 2 * G, 0b0100, Memory::Host).unwrap();
    p.commit(b + 2 * G, G).unwrap();
    let seen = b + 2 * w; // window 2's view of the range
    for i in 0..2 * G / 8 {
        // SAFETY: committed read-write through window 2; nothing else aliases pool memory.
        unsafe { std::ptr::write_volatile((seen + 8 * i) as *mut u64, i ^ 0x5a5a) };
    }
    let read_all = || {
        (0..2 * G / 8).all(|i| {
            // SAFETY: committed and mapped through window 2 whenever this is called.
            unsafe { std::ptr::read_volatile((seen + 8 * i) as *const u64) == i ^ 0x5a5a }
        })
    };
    assert_eq!(p.migrate(b, 2 * G, Memory::Device).unwrap(), 2);
    assert_eq!((p.memory_of(b), p.memory_of(b + G), p.memory_of(b + 2 * G)), (Some(Memory::Device), Some(Memory::Device), Some(Memory::Device)));
    assert!(read_all(), "bytes lost moving to device chunks");
    assert_eq!(p.migrate(seen, 2 * G, Memory::Device).unwrap(), 0, "already there (a window's address names the same chunks)");
    assert_eq!(p.migrate(b, 2 * G, Memory::Host).unwrap(), 2);
    assert_eq!(p.memory_of(b + G), Some(Memory::Host));
    assert!(read_all(), "bytes lost moving back to host chunks");
    assert!(p.migrate(b + 4 * G, G, Memory::Device).is_err(), "not committed");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A retirement split in two (books now, unmaps later, chunks taken back) ends where the
    /// retirement in one piece ends: the same chunks committed and retired, the same counters,
    /// the same chunks reused by later commits, shadow reading zero. Between the halves the
    /// range is retired in the books but still mapped; after them it faults.
    #[test]
    fn a_detached_retirement_ends_as_a_whole_one(commits in prop::collection::vec((0u64..24, 1u64..4), 1..8), retires in prop::collection::vec((0u64..24, 1u64..4), 1..6), shift in 7u32..=8) {
        let (mut whole, mut split) = (pool(shift), pool(shift));
        // Two pools at two bases: chunk `c` of each is its base plus `c` chunks.
        let (bw, base) = (whole.base(), split.base());
        for &(c, n) in &commits {
            prop_assert_eq!(whole.commit(bw + c * G, n * G).is_ok(), split.commit(base + c * G, n * G).is_ok());
        }
        for &(c, n) in &retires {
            let len = n * G;
            let mapped: Vec<u64> = (c..c + n).map(|i| base + i * G).filter(|&v| split.is_committed(v)).collect();
            let a = whole.retire_tagged_zeroed(bw + c * G, len, 1);
            let b = split.retire_detached(base + c * G, len, 1);
            prop_assert_eq!(a.is_ok(), b.is_ok(), "{:?}", a);
            let Ok(d) = b else { continue };
            prop_assert_eq!(mapped.len(), d.len());
            for &v in &mapped {
                prop_assert!(split.is_retired(v) && !split.is_committed(v));
                // SAFETY: reading a chunk retired in the books but not yet unmapped (host
                // backend: still read-write) inside a forked child; a fault ends only the child.
                let faulted = faults_in_child(|| unsafe {
                    std::ptr::read_volatile(v as *const u8);
                });
                prop_assert!(!faulted, "still mapped between the halves");
            }
            let (chunks, r) = d.unmap();
            prop_assert!(r.is_ok());
            split.take_back(chunks);
            for &v in &mapped {
                // SAFETY: reading VA just unmapped (host backend: PROT_NONE) inside a forked
                // child; the fault ends only the child.
                let faulted = faults_in_child(|| unsafe {
                    std::ptr::read_volatile(v as *const u8);
                });
                prop_assert!(faulted, "unmapped after the second half");
            }
        }
        prop_assert_eq!(whole.counters(), split.counters());
        for c in 0..32 {
            prop_assert_eq!(whole.is_committed(bw + c * G), split.is_committed(base + c * G));
            prop_assert_eq!(whole.is_retired(bw + c * G), split.is_retired(base + c * G));
            let mut s = vec![9u8; 4];
            split.read_shadow(base + c * G, &mut s).unwrap();
            if split.is_retired(base + c * G) {
                prop_assert!(s.iter().all(|&b| b == 0));
            }
        }
        // Later commits take the same chunks from the cache.
        prop_assert_eq!(whole.commit(bw + 40 * G, 3 * G).is_ok(), split.commit(base + 40 * G, 3 * G).is_ok());
        prop_assert_eq!(whole.counters(), split.counters());
    }
}
