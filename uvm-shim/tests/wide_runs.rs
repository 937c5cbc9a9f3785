//! Wide runs (device commits of several chunks backed by one handle per power-of-two piece) on the
//! Host backend wrapped in the CUDA VMM's mapping rules: a mapping is unmapped, and its access set,
//! only whole, and a handle may be mapped at one pool address at a time (its windows' views
//! aside). Random operation sequences (commits, partial and whole releases, detached
//! retirements, aliases, protections, migrations, exports, peers) keep the pool's invariant (a
//! wide run is mapped, unmapped, retired and cached only whole) and the bytes of every chunk.

use gasan_uvm::{Backend, ChunkHandle, HostBackend, Memory, Pool, PoolConfig, Prot, Stream, UvmError};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const G: u64 = 64 << 10;

/// The Host backend held to the CUDA VMM's rules, with a memory budget and call counts.
struct VmmRules {
    host: HostBackend,
    /// Mapping start → (bytes, handle).
    maps: Mutex<BTreeMap<u64, (u64, ChunkHandle)>>,
    /// Handle → bytes, for those not released.
    live: Mutex<HashMap<ChunkHandle, u64>>,
    /// Most bytes of live handles (creating more fails as out of memory).
    budget: AtomicU64,
    broken: Mutex<Vec<String>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl VmmRules {
    fn new() -> Self {
        Self { host: HostBackend::new(G), maps: Mutex::default(), live: Mutex::default(), budget: AtomicU64::new(u64::MAX), broken: Mutex::default(), calls: Mutex::default() }
    }
    fn count(&self, call: &'static str) {
        *self.calls.lock().unwrap().entry(call).or_default() += 1;
    }
    fn live_bytes(&self) -> u64 {
        self.live.lock().unwrap().values().sum()
    }
    fn refuse(&self, why: String) -> UvmError {
        self.broken.lock().unwrap().push(why.clone());
        UvmError::Unavailable(why)
    }
    /// No mapping is cut by `[va, va+len)`'s ends; with `covered`, every byte is mapped.
    fn whole(&self, call: &str, va: u64, len: u64, covered: bool) -> Result<(), UvmError> {
        let maps = self.maps.lock().unwrap();
        let mut at = va;
        for (&s, &(l, _)) in maps.range(..va + len).filter(|(&s, &(l, _))| s + l > va) {
            if s < va || s + l > va + len {
                return Err(self.refuse(format!("{call} of {va:#x}+{len:#x} cuts the mapping {s:#x}+{l:#x}")));
            }
            if covered && s != at {
                return Err(self.refuse(format!("{call} of {va:#x}+{len:#x}: {at:#x} unmapped")));
            }
            at = s + l;
        }
        if covered && at != va + len {
            return Err(self.refuse(format!("{call} of {va:#x}+{len:#x}: {at:#x} unmapped")));
        }
        Ok(())
    }
    fn mapped(&self, va: u64, len: u64, h: ChunkHandle) -> Result<(), UvmError> {
        let mut maps = self.maps.lock().unwrap();
        if maps.range(..va + len).any(|(&s, &(l, _))| s + l > va) {
            drop(maps);
            return Err(self.refuse(format!("map over mapped {va:#x}+{len:#x}")));
        }
        maps.insert(va, (len, h));
        Ok(())
    }
    fn created(&self, h: ChunkHandle, bytes: u64) {
        self.live.lock().unwrap().insert(h, bytes);
    }
    fn afford(&self, bytes: u64) -> Result<(), UvmError> {
        if self.live_bytes() + bytes > self.budget.load(Ordering::Relaxed) {
            return Err(UvmError::Cuda { call: "cuMemCreate", code: 2 });
        }
        Ok(())
    }
}

impl Backend for VmmRules {
    fn name(&self) -> &'static str {
        "vmm-rules"
    }
    fn granularity(&self) -> u64 {
        G
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        self.host.reserve(size, hint)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        self.host.free_va(va, size)
    }
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.count("create_chunk");
        self.afford(G)?;
        let h = self.host.create_chunk()?;
        self.created(h, G);
        Ok(h)
    }
    fn create_host_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.create_chunk()
    }
    fn create_wide_chunk(&self, slots: u64) -> Result<ChunkHandle, UvmError> {
        self.count("create_wide_chunk");
        self.afford(slots * G)?;
        let h = self.host.create_wide_chunk(slots)?;
        self.created(h, slots * G);
        Ok(h)
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        self.count("release_chunk");
        self.live.lock().unwrap().remove(&h);
        self.host.release_chunk(h)
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        self.count("map");
        self.mapped(va, G, h)?;
        self.host.map(va, h, prot)
    }
    fn map_wide(&self, va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError> {
        self.count("map");
        self.mapped(va, slots * G, h)?;
        self.host.map_wide(va, h, slots, prot)
    }
    fn unmap(&self, va: u64, len: u64) -> Result<(), UvmError> {
        self.count("unmap");
        self.whole("unmap", va, len, false)?;
        let mut maps = self.maps.lock().unwrap();
        let gone: Vec<u64> = maps.range(va..va + len).map(|(&s, _)| s).collect();
        for s in &gone {
            maps.remove(s);
        }
        drop(maps);
        self.host.unmap(va, len)
    }
    fn protect(&self, va: u64, len: u64, prot: Prot) -> Result<(), UvmError> {
        self.count("set_access");
        self.whole("protect", va, len, true)?;
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
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), UvmError> {
        self.host.copy(dst, src, len)
    }
    fn set_peer_access(&self, va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError> {
        self.count("set_access");
        self.whole("set_peer_access", va, len, true)?;
        self.host.set_peer_access(va, len, peer, prot)
    }
    fn access(&self, va: u64, device: i32) -> Result<Prot, UvmError> {
        self.host.access(va, device)
    }
    fn export_chunk(&self, h: ChunkHandle) -> Result<OwnedFd, UvmError> {
        if self.live.lock().unwrap().get(&h) != Some(&G) {
            return Err(self.refuse(format!("export of handle {h}, not one chunk long")));
        }
        self.host.export_chunk(h)
    }
}

/// Shares the wrapper with the test, which reads its books while the pool owns it.
struct Shared(Arc<VmmRules>);

macro_rules! delegate {
    ($($f:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {
        $(fn $f(&self, $($a: $t),*) -> $r { self.0.$f($($a),*) })*
    };
}

impl Backend for Shared {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    delegate! {
        granularity() -> u64;
        reserve(size: u64, hint: u64) -> Result<u64, UvmError>;
        free_va(va: u64, size: u64) -> Result<(), UvmError>;
        create_chunk() -> Result<ChunkHandle, UvmError>;
        create_host_chunk() -> Result<ChunkHandle, UvmError>;
        create_wide_chunk(slots: u64) -> Result<ChunkHandle, UvmError>;
        release_chunk(h: ChunkHandle) -> Result<(), UvmError>;
        map(va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError>;
        map_wide(va: u64, h: ChunkHandle, slots: u64, prot: Prot) -> Result<(), UvmError>;
        unmap(va: u64, len: u64) -> Result<(), UvmError>;
        protect(va: u64, len: u64, prot: Prot) -> Result<(), UvmError>;
        write(va: u64, data: &[u8], stream: Stream) -> Result<(), UvmError>;
        fill(va: u64, len: u64, byte: u8, stream: Stream) -> Result<(), UvmError>;
        read(va: u64, out: &mut [u8]) -> Result<(), UvmError>;
        copy(dst: u64, src: u64, len: u64) -> Result<(), UvmError>;
        set_peer_access(va: u64, len: u64, peer: i32, prot: Prot) -> Result<(), UvmError>;
        access(va: u64, device: i32) -> Result<Prot, UvmError>;
        export_chunk(h: ChunkHandle) -> Result<OwnedFd, UvmError>;
    }
}

fn pool(tags: u64) -> (Pool, Arc<VmmRules>) {
    let rules = Arc::new(VmmRules::new());
    let p = Pool::new(Box::new(Shared(rules.clone())), &PoolConfig { size: 1 << 30, shift: 8, hints: vec![], max_size: 0, tags }).unwrap();
    (p, rules)
}

/// Every wide run is committed whole, its chunks in the same windows, and every handle mapped in
/// the pool is mapped at one canonical address only (its windows' views of it).
fn check_runs(p: &Pool, rules: &VmmRules) -> Result<(), TestCaseError> {
    let broken = rules.broken.lock().unwrap().clone();
    prop_assert!(broken.is_empty(), "VMM rules broken: {:?}", broken);
    let base = p.base();
    for c in 0..64 {
        let va = base + c * G;
        if let Some((s, len)) = p.wide_run(va) {
            prop_assert!(len >= 2 * G && len.is_power_of_two(), "run of {:#x} bytes", len);
            for k in (s..s + len).step_by(G as usize) {
                prop_assert_eq!(p.wide_run(k), Some((s, len)));
                prop_assert_eq!(p.committed_windows(k), p.committed_windows(s));
            }
        }
    }
    let mut seen: HashMap<ChunkHandle, u64> = HashMap::new();
    for (&va, &(_, h)) in rules.maps.lock().unwrap().range(base..base + p.size()) {
        let c = p.canonical(va);
        let first = *seen.entry(h).or_insert(c);
        prop_assert_eq!(first, c, "handle {} mapped at two pool addresses", h);
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Op {
    Commit(u64, u64, u64),
    Decommit(u64, u64),
    Retire(u64, u64),
    RetireDetached(u64, u64),
    Write(u64, u8),
    Alias(u64, u64),
    Protect(u64, u64),
    Migrate(u64, u64),
    Export(u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let chunk = 0u64..24;
    prop_oneof![
        4 => (chunk.clone(), 1u64..12, 1u64..4).prop_map(|(c, n, t)| Op::Commit(c, n, t)),
        1 => (chunk.clone(), 1u64..10).prop_map(|(c, n)| Op::Decommit(c, n)),
        1 => (chunk.clone(), 1u64..10).prop_map(|(c, n)| Op::Retire(c, n)),
        1 => (chunk.clone(), 1u64..10).prop_map(|(c, n)| Op::RetireDetached(c, n)),
        3 => (chunk.clone(), any::<u8>()).prop_map(|(c, v)| Op::Write(c, v)),
        1 => (chunk.clone(), 1u64..9).prop_map(|(c, n)| Op::Alias(c, n)),
        1 => (chunk.clone(), 1u64..9).prop_map(|(c, n)| Op::Protect(c, n)),
        1 => (chunk.clone(), 1u64..9).prop_map(|(c, n)| Op::Migrate(c, n)),
        1 => (chunk, 1u64..9).prop_map(|(c, n)| Op::Export(c, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random sequences over two tag windows, one peer granted or not, with a small run cache:
    /// the results are the model's (wide runs change no outcome), the bytes written survive every
    /// split, and no operation ever cuts a mapping.
    #[test]
    fn wide_runs_stay_whole_and_keep_their_bytes(ops in prop::collection::vec(op(), 1..40), peer in any::<bool>(), cache_chunks in 0u64..24) {
        let (mut p, rules) = pool(2);
        p.set_run_cache_limit(cache_chunks * G);
        if peer {
            p.grant_peer_access(1).unwrap();
        }
        let base = p.base();
        let ws = p.window_size();
        // Chunk → windows committed for; chunks retired (for every window); chunk → byte at +100.
        let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
        let mut retired = std::collections::BTreeSet::new();
        let mut bytes: HashMap<u64, u8> = HashMap::new();
        let at = |c: u64, tags: u64| base + c * G + u64::from(tags.trailing_zeros()) * ws;
        for o in ops {
            match o {
                Op::Commit(c, n, tags) => {
                    let ok = (c..c + n).all(|i| !committed.contains_key(&i) && !retired.contains(&i));
                    let r = p.commit_tagged(base + c * G, n * G, tags);
                    prop_assert_eq!(r.is_ok(), ok, "commit {} {}: {:?}", c, n, r);
                    if ok {
                        committed.extend((c..c + n).map(|i| (i, tags)));
                    }
                }
                Op::Decommit(c, n) => {
                    let ok = (c..c + n).all(|i| committed.contains_key(&i));
                    let r = p.decommit(base + c * G, n * G);
                    prop_assert_eq!(r.is_ok(), ok, "decommit {} {}: {:?}", c, n, r);
                    if ok {
                        for i in c..c + n {
                            committed.remove(&i);
                            bytes.remove(&i);
                        }
                    }
                }
                Op::Retire(c, n) | Op::RetireDetached(c, n) => {
                    let ok = (c..c + n).all(|i| !retired.contains(&i));
                    let r = match o {
                        Op::Retire(..) => p.retire(base + c * G, n * G),
                        _ => p.retire_detached(base + c * G, n * G, u64::MAX).map(|d| {
                            let (back, r) = d.unmap();
                            r.unwrap();
                            p.take_back(back);
                        }),
                    };
                    prop_assert_eq!(r.is_ok(), ok, "retire {} {}: {:?}", c, n, r);
                    if ok {
                        for i in c..c + n {
                            committed.remove(&i);
                            bytes.remove(&i);
                            retired.insert(i);
                        }
                    }
                }
                Op::Write(c, v) => {
                    if let Some(&tags) = committed.get(&c) {
                        p.backend().write(at(c, tags) + 100, &[v], Stream::SYNC).unwrap();
                        bytes.insert(c, v);
                    }
                }
                Op::Alias(c, n) => {
                    let ok = (c..c + n).all(|i| committed.contains_key(&i));
                    let r = p.alias(base + c * G, n * G);
                    prop_assert_eq!(r.is_ok(), ok, "alias {} {}: {:?}", c, n, r);
                    if let Ok(a) = r {
                        for i in 0..n {
                            let mut b = [0u8];
                            p.backend().read(a + i * G + 100, &mut b).unwrap();
                            prop_assert_eq!(b[0], bytes.get(&(c + i)).copied().unwrap_or(0), "alias of chunk {}", c + i);
                        }
                        p.unalias(a).unwrap();
                    }
                }
                Op::Protect(c, n) => {
                    // One window's view of chunks all committed for the same windows.
                    let Some(&tags) = committed.get(&c) else { continue };
                    if !(c..c + n).all(|i| committed.get(&i) == Some(&tags)) {
                        continue;
                    }
                    p.protect(at(c, tags), n * G, Prot::ReadOnly).unwrap();
                    p.protect(at(c, tags), n * G, Prot::ReadWrite).unwrap();
                }
                Op::Migrate(c, n) => {
                    let ok = (c..c + n).all(|i| committed.contains_key(&i));
                    let r = p.migrate(base + c * G, n * G, Memory::Host).and_then(|_| p.migrate(base + c * G, n * G, Memory::Device));
                    prop_assert_eq!(r.is_ok(), ok, "migrate {} {}: {:?}", c, n, r);
                }
                Op::Export(c, n) => {
                    let ok = (c..c + n).all(|i| committed.contains_key(&i));
                    let r = p.export(base + c * G, n * G);
                    prop_assert_eq!(r.is_ok(), ok, "export {} {}: {:?}", c, n, r.err());
                }
            }
            for (&c, &v) in &bytes {
                let mut b = [0u8];
                p.backend().read(at(c, committed[&c]) + 100, &mut b).unwrap();
                prop_assert_eq!(b[0], v, "byte of chunk {}", c);
            }
            for c in 0..40 {
                prop_assert_eq!(p.committed_windows(base + c * G), committed.get(&c).copied());
                prop_assert_eq!(p.is_retired(base + c * G), retired.contains(&c));
            }
            prop_assert!(p.cached_run_bytes() <= cache_chunks * G);
            check_runs(&p, &rules)?;
        }
    }
}

#[test]
fn a_freed_run_serves_the_next_block_of_its_size() {
    let (mut p, rules) = pool(1);
    let b = p.base();
    p.commit(b, 8 * G).unwrap();
    assert_eq!(p.wide_run(b + 3 * G), Some((b, 8 * G)));
    let c = p.counters();
    assert_eq!((c.runs_created, c.chunks_created), (1, 1), "one run; one chunk, the shadow's");
    p.retire(b, 8 * G).unwrap();
    assert_eq!(p.cached_run_bytes(), 8 * G);
    p.commit(b + 16 * G, 8 * G).unwrap();
    let c = p.counters();
    assert_eq!((c.runs_created, c.runs_from_cache, c.runs_split), (1, 1, 0));
    // A 13-chunk block: pieces of 8, 4 and 1.
    p.commit(b + 32 * G, 13 * G).unwrap();
    assert_eq!(p.wide_run(b + 32 * G), Some((b + 32 * G, 8 * G)));
    assert_eq!(p.wide_run(b + 40 * G), Some((b + 40 * G, 4 * G)));
    assert_eq!(p.wide_run(b + 44 * G), None);
    assert!(rules.broken.lock().unwrap().is_empty());
}

#[test]
fn detached_retirement_of_a_run_unmaps_it_whole() {
    let (mut p, rules) = pool(1);
    let b = p.base();
    p.commit(b, 4 * G).unwrap();
    let d = p.retire_detached(b, 4 * G, 1).unwrap();
    assert_eq!(d.len(), 4);
    let before = rules.calls.lock().unwrap().get("unmap").copied().unwrap_or(0);
    let (back, r) = d.unmap();
    r.unwrap();
    assert_eq!(rules.calls.lock().unwrap()["unmap"] - before, 1, "one unmap for the run");
    p.take_back(back);
    p.commit(b + 8 * G, 4 * G).unwrap();
    assert_eq!(p.counters().runs_from_cache, 1);
    assert!(rules.broken.lock().unwrap().is_empty());
}

#[test]
fn the_run_cache_is_bounded_and_gives_way_under_pressure() {
    let (mut p, rules) = pool(1);
    let b = p.base();
    p.set_run_cache_limit(10 * G);
    for (i, n) in [8u64, 4, 2, 8].into_iter().enumerate() {
        let va = b + 16 * G * i as u64;
        p.commit(va, n * G).unwrap();
        p.retire(va, n * G).unwrap();
        assert!(p.cached_run_bytes() <= 10 * G);
    }
    // The 4 did not fit; the second 8 came from the cache and went back.
    assert_eq!(p.cached_run_bytes(), 10 * G);
    assert_eq!(p.counters().runs_released, 1);
    // Memory for two chunks more than is held now: the third needs the cached runs' memory.
    rules.budget.store(rules.live_bytes() + 2 * G, Ordering::Relaxed);
    let va = b + 100 * G;
    p.commit(va, G).unwrap();
    p.commit(va + 2 * G, G).unwrap();
    p.commit(va + 4 * G, G).unwrap();
    assert_eq!(p.cached_run_bytes(), 0, "released under pressure");
    assert_eq!(p.counters().runs_released, 3);
    // Two chunks cached, memory for one more: a run that cannot be had is mapped chunk by chunk.
    p.decommit(va, G).unwrap();
    p.decommit(va + 2 * G, G).unwrap();
    rules.budget.store(rules.live_bytes() + G, Ordering::Relaxed);
    p.commit(va + 8 * G, 2 * G).unwrap();
    assert_eq!(p.wide_run(va + 8 * G), None);
    p.commit(va + 12 * G, 2 * G).expect_err("memory for one chunk");
    assert!(!p.is_committed(va + 12 * G) && !p.is_committed(va + 13 * G));
    assert!(rules.broken.lock().unwrap().is_empty());
}

#[test]
fn wide_commits_off_maps_chunk_by_chunk() {
    let (mut p, rules) = pool(1);
    p.set_wide_commits(false);
    let b = p.base();
    let maps = rules.calls.lock().unwrap()["map"];
    p.commit(b, 8 * G).unwrap();
    assert_eq!(p.wide_run(b), None);
    assert_eq!(rules.calls.lock().unwrap()["map"] - maps, 9, "8 chunks and the shadow's");
    p.set_wide_commits(true);
    let maps = rules.calls.lock().unwrap()["map"];
    p.commit(b + 16 * G, 8 * G).unwrap();
    assert_eq!(rules.calls.lock().unwrap()["map"] - maps, 1);
}

/// Chunk `k` of the idle-shadow test: clusters of chunks in six shadow chunks (256 pool chunks
/// each at scale 8), so that releases leave shadow chunks idle and commits find them again.
fn spread(k: u64) -> u64 {
    (k / 4) * 256 + (k % 4) * 3
}

#[derive(Clone, Debug)]
enum ShadowOp {
    Commit(u64, u64, u64),
    Poison(u64, u8),
    Decommit(u64, u64),
    Retire(u64, u64),
    /// The allocator's free: the shadow zeroed by the caller, then retired without a shadow write,
    /// whole (`false`) or detached (`true`).
    RetireZeroed(u64, u64, bool),
}

fn shadow_op() -> impl Strategy<Value = ShadowOp> {
    let k = 0u64..24;
    prop_oneof![
        4 => (k.clone(), 1u64..4, 1u64..4).prop_map(|(k, n, t)| ShadowOp::Commit(k, n, t)),
        3 => (k.clone(), 1u8..=255).prop_map(|(k, v)| ShadowOp::Poison(k, v)),
        1 => (k.clone(), 1u64..4).prop_map(|(k, n)| ShadowOp::Decommit(k, n)),
        1 => (k.clone(), 1u64..4).prop_map(|(k, n)| ShadowOp::Retire(k, n)),
        2 => (k, 1u64..4, any::<bool>()).prop_map(|(k, n, d)| ShadowOp::RetireZeroed(k, n, d)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Shadow chunks kept backed after their last chunk goes (idle) still say what every granule
    /// they describe is: a committed chunk's shadow what was written through its windows, every
    /// other granule (never committed, decommitted, retired, or seen through another window) 0.
    /// No mapping is cut, and at most the limit of them stay idle.
    #[test]
    fn idle_shadow_reads_what_it_describes(ops in prop::collection::vec(shadow_op(), 1..40), limit in 0usize..4, peer in any::<bool>()) {
        let (mut p, rules) = pool(2);
        p.set_idle_shadow_limit(limit).unwrap();
        if peer {
            p.grant_peer_access(1).unwrap();
        }
        let (base, ws) = (p.base(), p.window_size());
        let view = |c: u64, t: u64| base + c * G + t * ws;
        // Chunk → windows committed for; chunks retired; (chunk, window) → its first 8 shadow bytes.
        let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
        let mut retired = std::collections::BTreeSet::new();
        let mut shadow: HashMap<(u64, u64), u8> = HashMap::new();
        let range = |k: u64, n: u64| (spread(k)..spread(k) + n).collect::<Vec<u64>>();
        for o in ops {
            match o {
                ShadowOp::Commit(k, n, tags) => {
                    let cs = range(k, n);
                    let ok = cs.iter().all(|i| !committed.contains_key(i) && !retired.contains(i));
                    let r = p.commit_tagged(base + spread(k) * G, n * G, tags);
                    prop_assert_eq!(r.is_ok(), ok, "commit {:?}: {:?}", cs, r);
                    if ok {
                        committed.extend(cs.iter().map(|&i| (i, tags)));
                    }
                }
                ShadowOp::Poison(k, v) => {
                    let c = spread(k);
                    if let Some(&tags) = committed.get(&c) {
                        let t = u64::from(tags.trailing_zeros());
                        p.write_shadow(view(c, t), &[v; 8], Stream::SYNC).unwrap();
                        shadow.insert((c, t), v);
                    }
                }
                ShadowOp::Decommit(k, n) | ShadowOp::Retire(k, n) | ShadowOp::RetireZeroed(k, n, _) => {
                    let cs = range(k, n);
                    let (va, len) = (base + spread(k) * G, n * G);
                    let decommit = matches!(o, ShadowOp::Decommit(..));
                    let ok = if decommit { cs.iter().all(|i| committed.contains_key(i)) } else { cs.iter().all(|i| !retired.contains(i)) };
                    let r = match o {
                        ShadowOp::Decommit(..) => p.decommit(va, len),
                        ShadowOp::Retire(..) => p.retire(va, len),
                        ShadowOp::RetireZeroed(_, _, detached) => {
                            if ok {
                                for &c in &cs {
                                    for t in (0..2).filter(|t| committed.get(&c).is_some_and(|m| m >> t & 1 == 1)) {
                                        p.fill_shadow(view(c, t), G >> 8, 0, Stream::SYNC).unwrap();
                                    }
                                }
                            }
                            if detached {
                                p.retire_detached(va, len, u64::MAX).map(|d| {
                                    let (back, r) = d.unmap();
                                    r.unwrap();
                                    p.take_back(back);
                                })
                            } else {
                                p.retire_tagged_zeroed(va, len, u64::MAX)
                            }
                        }
                        _ => unreachable!(),
                    };
                    prop_assert_eq!(r.is_ok(), ok, "{:?}: {:?}", o, r);
                    if ok {
                        for &c in &cs {
                            committed.remove(&c);
                            shadow.retain(|&(s, _), _| s != c);
                            if !decommit {
                                retired.insert(c);
                            }
                        }
                    }
                }
            }
            prop_assert!(p.idle_shadow_chunks() <= limit, "{} idle shadow chunks, limit {}", p.idle_shadow_chunks(), limit);
            for k in 0..24 {
                for c in range(k, 4) {
                    for t in 0..2 {
                        let mut got = [0u8; 8];
                        p.read_shadow(view(c, t), &mut got).unwrap();
                        let want = shadow.get(&(c, t)).copied().unwrap_or(0);
                        prop_assert_eq!(got, [want; 8], "shadow of chunk {} in window {}", c, t);
                    }
                }
            }
            prop_assert!(rules.broken.lock().unwrap().is_empty(), "{:?}", rules.broken.lock().unwrap());
        }
    }
}

/// A churn of large blocks, each committed after the last one's retirement at the next VA in the
/// same shadow chunk, maps and unmaps only the block's run once the shadow chunk is backed: the
/// idle shadow chunk serves the next block. Without idle shadow, three maps and unmaps a block.
#[test]
fn a_churn_of_blocks_keeps_its_shadow_chunk_backed() {
    for (limit, per_block) in [(0, 3), (1, 1)] {
        let (mut p, rules) = pool(1);
        p.set_idle_shadow_limit(limit).unwrap();
        let b = p.base();
        let calls = |k: &str| rules.calls.lock().unwrap().get(k).copied().unwrap_or(0);
        // Shadow chunk 0 describes 256 pool chunks: 16 blocks of 4 chunks, a gap of 4 after each.
        let mut block = |i: u64| {
            p.commit(b + i * 8 * G, 4 * G).unwrap();
            p.retire_tagged_zeroed(b + i * 8 * G, 4 * G, 1).unwrap();
        };
        block(0);
        block(1);
        let (maps, unmaps) = (calls("map"), calls("unmap"));
        for i in 2..16 {
            block(i);
        }
        assert_eq!((calls("map") - maps, calls("unmap") - unmaps), (14 * per_block, 14 * per_block), "idle limit {limit}");
        assert!(rules.broken.lock().unwrap().is_empty());
    }
}
