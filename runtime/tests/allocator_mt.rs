//! The allocator under many host threads, on the host pool backend (real mmap/memfd) with injected
//! chunk-creation and mapping failures: blocks never overlap or lose their guard gaps, cursors never
//! move backwards, a failed commit leaves nothing behind, and only out-of-memory is ever reported,
//! checked by `Allocator::check_invariants` during and after every run.

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AllocError, Allocator, SMALL_MAX};
use gasan_runtime::options::Options;
use gasan_uvm::{Backend, ChunkHandle, HostBackend, Pool, PoolConfig, Prot, Stream, UvmError};
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Which backend calls fail: call number `n` (counted over all threads) fails iff
/// `splitmix64(seed ^ n) % 1000 < per_mille`, while enabled.
struct Faults {
    enabled: AtomicBool,
    seed: u64,
    per_mille: u64,
    calls: AtomicU64,
    injected: AtomicU64,
}

impl Faults {
    fn new(seed: u64, per_mille: u64) -> Arc<Self> {
        Arc::new(Faults { enabled: AtomicBool::new(false), seed, per_mille, calls: AtomicU64::new(0), injected: AtomicU64::new(0) })
    }

    fn fail(&self, call: &'static str) -> Result<(), UvmError> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(());
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if splitmix64(self.seed ^ n) % 1000 < self.per_mille {
            self.injected.fetch_add(1, Ordering::Relaxed);
            // What the driver answers when device memory runs out.
            return Err(UvmError::Cuda { call, code: 2 });
        }
        Ok(())
    }
}

/// The host backend with [`Faults`] in front of chunk creation and of read-write mappings (fresh
/// memory). Read-only mappings are the shared zero chunk being put back by a rollback, which the
/// pool assumes cannot fail, and unmapping never fails on the GPU either.
struct FlakyBackend {
    host: HostBackend,
    faults: Arc<Faults>,
}

impl Backend for FlakyBackend {
    fn name(&self) -> &'static str {
        "flaky-host"
    }
    fn granularity(&self) -> u64 {
        self.host.granularity()
    }
    fn guard_granularity(&self) -> u64 {
        self.host.guard_granularity()
    }
    fn reserve(&self, size: u64, hint: u64) -> Result<u64, UvmError> {
        self.host.reserve(size, hint)
    }
    fn free_va(&self, va: u64, size: u64) -> Result<(), UvmError> {
        self.host.free_va(va, size)
    }
    fn create_chunk(&self) -> Result<ChunkHandle, UvmError> {
        self.faults.fail("cuMemCreate (injected)")?;
        self.host.create_chunk()
    }
    fn release_chunk(&self, h: ChunkHandle) -> Result<(), UvmError> {
        self.host.release_chunk(h)
    }
    fn map(&self, va: u64, h: ChunkHandle, prot: Prot) -> Result<(), UvmError> {
        if prot == Prot::ReadWrite {
            self.faults.fail("cuMemMap (injected)")?;
        }
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
}

fn flaky_allocator(pool_size: u64, scale: Scale, quarantine_mb: u64, tags: u64, faults: &Arc<Faults>) -> Allocator {
    let backend = FlakyBackend { host: HostBackend::new(2 << 20), faults: faults.clone() };
    let cfg = PoolConfig { size: pool_size, shift: scale.shift(), hints: vec![], max_size: 0, tags };
    let pool = Pool::new(Box::new(backend), &cfg).unwrap();
    let opts = Options { shadow_scale: scale, quarantine_size_mb: quarantine_mb, malloc_context_size: 2, ..Options::default() };
    Allocator::new(pool, &opts)
}

fn check(a: &Allocator, when: &str) {
    if let Err(v) = a.check_invariants() {
        panic!("{when}: {v}");
    }
}

/// A size drawn from the storm's mix: mostly small, some up to the small limit, 6 in 100 large
/// (one to five chunks).
fn storm_size(r: u64) -> u64 {
    match r % 100 {
        0..=74 => 1 + (r >> 8) % 4096,
        75..=93 => 1 + (r >> 8) % SMALL_MAX,
        _ => SMALL_MAX + 1 + (r >> 8) % (8 << 20),
    }
}

/// Per-thread word written at both ends of a live block and checked when it is freed: a block
/// another thread also got would have lost it.
fn tag(thread: u64, block: u64) -> u64 {
    splitmix64((thread << 32) ^ block) | 1
}

fn tag_addrs(p: u64, size: u64) -> [u64; 2] {
    let last = (p + size.saturating_sub(8)) & !7;
    [p, last]
}

struct StormReport {
    allocs: u64,
    out_of_memory: u64,
    injected: u64,
    elapsed: Duration,
}

/// `threads` threads each make `ops` allocations (keeping at most 8 live, freeing one at random,
/// one in eight of the frees stream-ordered), with `per_mille` of the backend's chunk creations
/// and fresh mappings failing. The invariants are checked by a watcher every 100 ms (or nine times as
/// long as a check takes) while it runs, after it, and after allocating every size class again with failures off.
fn storm(threads: u64, ops: u64, per_mille: u64, seed: u64) -> StormReport {
    let faults = Faults::new(seed, per_mille);
    let alloc = flaky_allocator(2 << 40, Scale::S8, 8, 4, &faults);
    faults.enabled.store(true, Ordering::Relaxed);
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let out_of_memory = AtomicU64::new(0);
    let running = AtomicBool::new(true);
    let began = Instant::now();
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let (mut checks, mut pause) = (0, Duration::from_millis(100));
            while running.load(Ordering::Relaxed) {
                std::thread::sleep(pause);
                let began = Instant::now();
                if let Err(v) = alloc.check_invariants() {
                    problems.lock().unwrap().push(format!("during the storm: {v}"));
                    break;
                }
                checks += 1;
                // A check holds the lock for all of it: keep the workers running at least 9/10 of the time.
                pause = pause.max(began.elapsed() * 9);
            }
            checks
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (alloc, problems, out_of_memory) = (&alloc, &problems, &out_of_memory);
                s.spawn(move || {
                    let mut rng = splitmix64(seed ^ (t + 1) << 40);
                    let mut next = || {
                        rng = splitmix64(rng);
                        rng
                    };
                    let mut live: Vec<(u64, u64, u64)> = Vec::new();
                    let free = |(p, size, tag_value): (u64, u64, u64), ordered: bool| {
                        for at in tag_addrs(p, size).into_iter().filter(|_| size >= 8) {
                            // SAFETY: `p` is a live block of `size` bytes this thread owns, committed
                            // read-write by the host backend; `at` is an aligned word inside it.
                            let found = unsafe { std::ptr::read_volatile(at as *const u64) };
                            if found != tag_value {
                                problems.lock().unwrap().push(format!("thread {t}: block {p:#x}+{size} word at {at:#x} reads {found:#x}, wrote {tag_value:#x}"));
                            }
                        }
                        if let Err(e) = alloc.free(p, ordered.then_some(Stream::SYNC)) {
                            problems.lock().unwrap().push(format!("thread {t}: free {p:#x}: {e:?}"));
                        }
                    };
                    for i in 0..ops {
                        while live.len() >= 8 || (!live.is_empty() && next() % 2 == 0) {
                            let victim = live.swap_remove((next() % live.len() as u64) as usize);
                            free(victim, next() % 8 == 0);
                        }
                        let size = storm_size(next());
                        match alloc.alloc(size, None) {
                            Ok(p) => {
                                let tag_value = tag(t, i);
                                for at in tag_addrs(p, size).into_iter().filter(|_| size >= 8) {
                                    // SAFETY: `p` is a live block of `size` bytes just handed to this thread, committed
                                    // read-write by the host backend; `at` is an aligned word inside it.
                                    unsafe { std::ptr::write_volatile(at as *mut u64, tag_value) };
                                }
                                live.push((p, size, tag_value));
                            }
                            Err(AllocError::OutOfMemory) => {
                                out_of_memory.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => problems.lock().unwrap().push(format!("thread {t}: alloc({size}) #{i}: {e}")),
                        }
                    }
                    for b in live.drain(..) {
                        free(b, false);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        running.store(false, Ordering::Relaxed);
        let checks = watcher.join().unwrap();
        assert!(checks > 0 || began.elapsed() < Duration::from_millis(200), "the watcher never checked");
    });
    let elapsed = began.elapsed();
    faults.enabled.store(false, Ordering::Relaxed);
    let mut problems = problems.into_inner().unwrap();
    if let Err(v) = alloc.check_invariants() {
        problems.push(format!("after the storm: {v}"));
    }
    if !problems.is_empty() {
        // Invariant violations first, then lost tags, then failed calls, each kind in time order.
        let kind = |p: &String| {
            if p.contains("invariant") {
                0
            } else if p.contains("reads") {
                1
            } else {
                2
            }
        };
        let count = |k| problems.iter().filter(|p| kind(p) == k).count();
        let (broken, lost, failed) = (count(0), count(1), count(2));
        problems.sort_by_key(kind);
        panic!(
            "storm (seed {seed:#x}): {broken} invariant checks failed, {lost} tags lost, {failed} calls failed other than out of memory; first:\n{}",
            problems.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    // Nothing is stuck: with failures off, every size class allocates, sits in place, and frees.
    let sizes = [1, 4096, SMALL_MAX, SMALL_MAX + 1, 5 << 20, 12 << 20];
    let blocks: Vec<u64> = sizes.iter().map(|&n| alloc.alloc(n, None).unwrap_or_else(|e| panic!("alloc({n}) after the storm: {e}"))).collect();
    check(&alloc, "after allocating every size class following the storm");
    for p in blocks {
        alloc.free(p, None).unwrap();
    }
    alloc.drain_quarantine();
    check(&alloc, "after the final frees");
    // Only the current slab is still mapped: every failed commit and every free gave its memory back.
    assert!(alloc.mapped_bytes() <= 2 << 20, "{} bytes still mapped", alloc.mapped_bytes());
    StormReport { allocs: threads * ops, out_of_memory: out_of_memory.into_inner(), injected: faults.injected.load(Ordering::Relaxed), elapsed }
}

fn report(name: &str, r: &StormReport) {
    eprintln!("{name}: {} allocations, {} out of memory, {} injected backend failures, {:.2?}", r.allocs, r.out_of_memory, r.injected, r.elapsed);
}

/// The run: 64 threads × 10 000 allocations, 1 in 5 chunk creations and fresh mappings
/// failing. A debug build runs 64 threads × 1 000 to stay quick; the release build, which
/// `scripts/test.sh` runs, makes the full count.
#[test]
fn sixty_four_threads_with_failing_commits_keep_the_invariants() {
    let ops = if cfg!(debug_assertions) { 1_000 } else { 10_000 };
    let r = storm(64, ops, 200, 0x6a5a_0012);
    report("64 threads, 20% failures", &r);
    assert!(r.injected > 0 && r.out_of_memory > 0, "no failure was injected or reported");
    // Each allocation needs at most a few backend calls to fail twice in a row to fail: most succeed.
    assert!(r.out_of_memory * 4 < r.allocs, "{} of {} allocations failed", r.out_of_memory, r.allocs);
}

/// The reproduction: 16 threads, half of the chunk creations and fresh mappings failing.
#[test]
fn sixteen_threads_with_half_the_commits_failing_keep_the_invariants() {
    let ops = if cfg!(debug_assertions) { 2_000 } else { 4_000 };
    for seed in [1u64, 2, 3] {
        let r = storm(16, ops, 500, seed);
        report(&format!("16 threads, 50% failures, seed {seed}"), &r);
        assert!(r.injected > 0 && r.out_of_memory > 0, "no failure was injected or reported");
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64),
    /// Frees the live block at this index (modulo the count), stream-ordered or not.
    Free(usize, bool),
    /// Turns failure injection on or off.
    Failing(bool),
    DrainQuarantine,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![1u64..4096, 1u64..=SMALL_MAX, SMALL_MAX + 1..9 << 20].prop_map(Op::Alloc),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, o)| Op::Free(i, o)),
        1 => any::<bool>().prop_map(Op::Failing),
        1 => Just(Op::DrainQuarantine),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any sequence of allocations, frees (plain and stream-ordered), quarantine drains and spells
    /// of failing commits keeps every invariant after every step; only out-of-memory is reported.
    #[test]
    fn every_operation_sequence_keeps_the_invariants(ops in prop::collection::vec(op(), 1..60), s7 in any::<bool>(), seed in any::<u64>(), tags_log in 0u32..=2) {
        let faults = Faults::new(seed, 400);
        let a = flaky_allocator(64 << 30, if s7 { Scale::S7 } else { Scale::S8 }, 4, 1 << tags_log, &faults);
        let mut live: Vec<u64> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Alloc(n) => match a.alloc(n, None) {
                    Ok(p) => live.push(p),
                    Err(AllocError::OutOfMemory) => prop_assert!(faults.enabled.load(Ordering::Relaxed), "out of memory without failures"),
                    Err(e) => prop_assert!(false, "step {}: alloc({}): {}", step, n, e),
                },
                Op::Free(i, ordered) if !live.is_empty() => {
                    let p = live.swap_remove(i % live.len());
                    prop_assert!(a.free(p, ordered.then_some(Stream::SYNC)).is_ok());
                }
                Op::Free(..) => {}
                Op::Failing(on) => faults.enabled.store(on, Ordering::Relaxed),
                Op::DrainQuarantine => a.drain_quarantine(),
            }
            if let Err(v) = a.check_invariants() {
                prop_assert!(false, "step {} ({:?}): {}", step, op, v);
            }
        }
    }
}
