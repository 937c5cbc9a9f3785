//! The pool's extent table on the Host backend (real mmap): after random sets and clears of
//! non-overlapping ranges (which may share blocks), the table read back through the backend matches a
//! per-block model, and no entry ever claims a range that is not live; bad requests are typed errors
//! that change nothing.

use gasan_uvm::{HostBackend, Pool, PoolConfig, Stream, UvmError};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const G: u64 = 64 << 10;
const POOL: u64 = 1 << 30;

fn pool() -> Pool {
    Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: POOL, shift: 8, hints: vec![], max_size: 0, tags: 1 }).unwrap()
}

/// Every entry of the table, as (start, end).
fn table(p: &Pool) -> Vec<(u64, u64)> {
    let mut t = vec![(0, 0); (p.size() >> p.extent_table().1) as usize];
    p.read_extents(0, &mut t).unwrap();
    t
}

/// Commits the pool chunks under `[start, end)` that are not committed yet.
fn commit_under(p: &mut Pool, start: u64, end: u64) {
    let mut c = start & !(G - 1);
    while c < end {
        if !p.is_committed(c) {
            p.commit(c, G).unwrap();
        }
        c += G;
    }
}

fn blocks(p: &Pool, start: u64, end: u64) -> std::ops::Range<u64> {
    (start - p.base()) / G..(end - p.base()).div_ceil(G)
}

#[derive(Clone, Debug)]
enum Op {
    Set(u64, u64),
    Clear(usize),
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets near the pool start make ranges share blocks; offsets anywhere reach every table chunk.
    let off = prop_oneof![0u64..16 * G, 0u64..POOL - 4 * G];
    prop_oneof![(off, 1u64..3 * G).prop_map(|(o, n)| Op::Set(o, n)), any::<usize>().prop_map(Op::Clear),]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn table_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let mut p = pool();
        let base = p.base();
        let (_, shift) = p.extent_table();
        prop_assert_eq!(1u64 << shift, G);
        let mut live: Vec<(u64, u64)> = Vec::new();
        // Block → the entry it must hold (absent: zero): the last range set or cleared over it.
        let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut table_chunks: BTreeSet<u64> = BTreeSet::new();
        for o in ops {
            match o {
                Op::Set(off, len) => {
                    let (s, e) = (base + off, base + off + len);
                    if live.iter().any(|&(a, b)| s < b && a < e) {
                        continue;
                    }
                    commit_under(&mut p, s, e);
                    p.set_extent(s, e, Stream::SYNC).unwrap();
                    live.push((s, e));
                    for b in blocks(&p, s, e) {
                        model.insert(b, (s, e));
                        table_chunks.insert(b * 16 / G);
                    }
                }
                Op::Clear(k) => {
                    if live.is_empty() {
                        continue;
                    }
                    let (s, e) = live.remove(k % live.len());
                    p.clear_extent(s, e, Stream::SYNC).unwrap();
                    for b in blocks(&p, s, e) {
                        model.remove(&b);
                    }
                }
            }
            let t = table(&p);
            for (i, &entry) in t.iter().enumerate() {
                let want = model.get(&(i as u64)).copied().unwrap_or((0, 0));
                prop_assert_eq!(entry, want, "block {}", i);
                if entry != (0, 0) {
                    // The property checked code relies on: a claim is a live range over its block.
                    let block = base + i as u64 * G;
                    prop_assert!(live.contains(&entry) && entry.0 < block + G && block < entry.1, "stale claim {:x?}", entry);
                }
            }
            // Table memory: one chunk for each table chunk that ever held an entry.
            prop_assert_eq!(p.counters().extent_bytes, table_chunks.len() as u64 * G);
        }
    }
}

#[test]
fn bad_extents_are_typed_errors_and_change_nothing() {
    let mut p = pool();
    let base = p.base();
    assert!(table(&p).iter().all(|&e| e == (0, 0)), "a fresh table reads zero");
    p.commit(base, 2 * G).unwrap();
    p.set_extent(base + 100, base + G + 5, Stream::SYNC).unwrap();
    let before = (table(&p), p.counters());
    let end = base + p.size();
    assert_eq!(p.set_extent(end - 8, end + 8, Stream::SYNC), Err(UvmError::OutsidePool { va: end - 8, len: 16 }));
    assert!(matches!(p.set_extent(base - 16, base + 16, Stream::SYNC), Err(UvmError::OutsidePool { .. })));
    assert!(matches!(p.clear_extent(end, end + 1, Stream::SYNC), Err(UvmError::OutsidePool { .. })));
    assert_eq!(p.set_extent(base + 64, base + 64, Stream::SYNC), Err(UvmError::BadExtent { start: base + 64, end: base + 64 }));
    assert!(matches!(p.clear_extent(base + 65, base + 64, Stream::SYNC), Err(UvmError::BadExtent { .. })));
    // Only committed memory can be claimed: the third chunk is not, nor is retired memory.
    assert_eq!(p.set_extent(base + G, base + 2 * G + 1, Stream::SYNC), Err(UvmError::NotCommitted(base + 2 * G)));
    p.commit(base + 8 * G, G).unwrap();
    p.retire(base + 8 * G, G).unwrap();
    assert_eq!(p.set_extent(base + 8 * G, base + 8 * G + 1, Stream::SYNC), Err(UvmError::NotCommitted(base + 8 * G)));
    assert_eq!(table(&p), before.0);
    assert_eq!(p.counters().extent_bytes, before.1.extent_bytes);
}

#[test]
fn clearing_where_nothing_was_set_leaves_the_zero_chunk() {
    // Clearing never backs table memory: entries on the shared zero chunk already read 0.
    let p = pool();
    p.clear_extent(p.base(), p.base() + p.size(), Stream::SYNC).unwrap();
    assert_eq!(p.counters().extent_bytes, 0);
    assert!(table(&p).iter().all(|&e| e == (0, 0)));
}
