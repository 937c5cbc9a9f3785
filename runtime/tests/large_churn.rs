//! A program that allocates and frees one large block after another (`alloc_cost`, a framework
//! without its caching allocator): the backend calls and pool counters per alloc/free pair, through
//! the real allocator on the Host pool backend, with the unmap thread and without, synchronous and
//! stream-ordered frees. A churn of same-size blocks must reuse the same few handles: no handle is
//! created per block, and no wide run is split (a device copy and a wait on the GPU).

use gasan_runtime::allocator::Allocator;
use gasan_runtime::options::Options;
use gasan_uvm::{BackendCall, CountedBackend, HostBackend, Pool, PoolConfig, PoolCounters, Stream};

const G: u64 = 2 << 20;

/// Per-pair backend calls and pool counters of `pairs` alloc/free pairs of `size` bytes, after
/// `warm` untimed ones.
struct Churn {
    /// Backend calls over the pairs, by [`BackendCall`] (in `BackendCall::ALL`'s order).
    calls: [u64; BackendCall::ALL.len()],
    counters: PoolCounters,
    pairs: u64,
}

impl std::fmt::Display for Churn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |c: BackendCall| self.calls[c as usize] as f64 / self.pairs as f64;
        let c = &self.counters;
        write!(
            f,
            "per pair: create {:.2} map {:.2} access {:.2} unmap {:.2} release {:.2} copy {:.2}; in all: runs created {} from cache {} split {} released {}, chunks created {} from cache {}",
            per(BackendCall::Create),
            per(BackendCall::Map),
            per(BackendCall::Access),
            per(BackendCall::Unmap),
            per(BackendCall::Release),
            per(BackendCall::Copy),
            c.runs_created,
            c.runs_from_cache,
            c.runs_split,
            c.runs_released,
            c.chunks_created,
            c.chunks_from_cache
        )
    }
}

fn churn(size: u64, stream: Option<Stream>, unmap_thread: bool, warm: u64, pairs: u64) -> Churn {
    let (backend, calls) = CountedBackend::new(Box::new(HostBackend::new(G)));
    let pool = Pool::new(Box::new(backend), &PoolConfig { size: 64 << 30, shift: 8, hints: vec![], max_size: 0, tags: 1 }).unwrap();
    let a = Allocator::new(pool, &Options { malloc_context_size: 1, unmap_thread, ..Options::default() });
    let pair = || {
        let p = a.alloc(size, stream).unwrap();
        a.free(p, stream).unwrap();
    };
    for _ in 0..warm {
        pair();
    }
    let (calls0, c0) = (calls.snapshot(), a.pool_counters());
    for _ in 0..pairs {
        pair();
    }
    a.settle_unmaps();
    let c1 = a.pool_counters();
    let calls1 = calls.snapshot();
    let calls = std::array::from_fn(|i| calls1[i] - calls0[i]);
    let counters = PoolCounters {
        chunks_created: c1.chunks_created - c0.chunks_created,
        chunks_from_cache: c1.chunks_from_cache - c0.chunks_from_cache,
        runs_created: c1.runs_created - c0.runs_created,
        runs_from_cache: c1.runs_from_cache - c0.runs_from_cache,
        runs_split: c1.runs_split - c0.runs_split,
        runs_released: c1.runs_released - c0.runs_released,
        ..c1
    };
    Churn { calls, counters, pairs }
}

/// Prints the table (`cargo test --release -p gasan-runtime --test large_churn -- --nocapture`).
#[test]
fn churn_table() {
    for unmap_thread in [true, false] {
        for (kind, stream) in [("sync", None), ("stream", Some(Stream(1)))] {
            for size in [1u64 << 20, 4 << 20, 16 << 20] {
                let c = churn(size, stream, unmap_thread, 20, 200);
                println!("unmap_thread={} {kind:6} {:>2} MiB {c}", unmap_thread as u8, size >> 20);
            }
        }
    }
}

/// A churn of same-size large blocks with synchronous frees and the unmap thread reuses a few
/// handles: the freed block's handle is back in the cache for a later block of its size. Before
/// the freeing thread settled the books and handed the unmaps over, the thread needed the
/// allocator's lock twice per block and fell behind a program holding it in a loop: 138 of 200
/// 4 MiB blocks and 158 of 200 16 MiB blocks created a handle (cuMemCreate on the GPU), and the
/// 16 MiB ones overflowed the run cache into releases.
#[test]
fn sync_churn_reuses_its_handles() {
    for size in [1u64 << 20, 4 << 20, 16 << 20] {
        for stream in [None, Some(Stream(1))] {
            let c = churn(size, stream, true, 20, 200);
            let created = c.counters.runs_created + c.counters.chunks_created;
            // Stream-ordered frees hold up to the quarantine's 256 MiB mapped: that many blocks'
            // handles, created as it fills during the first pairs.
            let bound = if stream.is_none() { 12 } else { 12 + (256 << 20) / size.max(G) };
            assert!(created <= bound, "{} MiB, stream {stream:?}: {created} handles created over 200 pairs (bound {bound}): {c}", size >> 20);
            assert_eq!((c.counters.runs_split, c.counters.runs_released), (0, 0), "{} MiB: {c}", size >> 20);
        }
    }
}
