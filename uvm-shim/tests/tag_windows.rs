//! Tag windows on the Host backend (real memfd mappings): one committed chunk is the same memory
//! through every window it is committed for, each window has its own shadow, and only the windows
//! a commit names get the mapping and real shadow (elsewhere it faults). Random commit/decommit/retire sequences keep that, checked against a model.

use gasan_uvm::host::faults_in_child;
use gasan_uvm::{HostBackend, Pool, PoolConfig, Stream, UvmError};
use proptest::prelude::*;
use std::collections::BTreeMap;

const G: u64 = 64 << 10;
const WINDOWS: u64 = 4;

fn pool(shift: u32) -> Pool {
    Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: 1 << 32, shift, hints: vec![], max_size: 0, tags: WINDOWS }).unwrap()
}

#[test]
fn one_chunk_is_one_memory_through_every_window() {
    let mut p = pool(8);
    let (base, ws) = (p.base(), p.window_size());
    assert_eq!(p.windows(), WINDOWS);
    assert_eq!(ws, p.size() / WINDOWS);
    p.commit_tagged(base, 2 * G, 0b1111).unwrap();
    p.backend().write(base + 2 * ws + 100, b"through window 2", Stream::SYNC).unwrap();
    for t in 0..WINDOWS {
        let mut back = [0u8; 16];
        p.backend().read(base + t * ws + 100, &mut back).unwrap();
        assert_eq!(&back, b"through window 2", "window {t}");
        assert_eq!(p.canonical(base + t * ws + G + 7), base + G + 7);
        assert_eq!(p.tag_of(base + t * ws + G + 7), t);
        assert_eq!(p.tagged(base + G + 7, t), base + t * ws + G + 7);
    }
    assert!(p.is_committed(base + 3 * ws + G));
    // A chunk committed for window 1 only is not mapped through window 3.
    p.commit_tagged(base + 4 * G, G, 0b0010).unwrap();
    let unnamed = base + 3 * ws + 4 * G;
    assert!(
        faults_in_child(move || {
            // SAFETY: probing a mapping; a fault ends only the child.
            unsafe { std::ptr::read_volatile(unnamed as *const u8) };
        }),
        "window 3 is unmapped"
    );
    let named = base + ws + 4 * G;
    assert!(!faults_in_child(move || {
        // SAFETY: probing a mapping inside a forked child; a fault ends only the child.
        unsafe { std::ptr::read_volatile(named as *const u8) };
    }));
}

#[test]
fn each_window_has_its_own_shadow_and_only_named_windows_are_writable() {
    let mut p = pool(7);
    let (base, ws) = (p.base(), p.window_size());
    p.commit_tagged(base, G, 0b0110).unwrap();
    // Window 2 marks its allocation accessible; window 1 sees the same bytes poisoned.
    p.fill_shadow(base + 2 * ws, 4, 128, Stream::SYNC).unwrap();
    let mut s = [9u8; 4];
    p.read_shadow(base + ws, &mut s).unwrap();
    assert_eq!(s, [0; 4], "window 1's shadow is its own");
    p.read_shadow(base + 2 * ws, &mut s).unwrap();
    assert_eq!(s, [128; 4]);
    // Windows 0 and 3 were not named: their shadow is the read-only zero chunk.
    assert_eq!(p.fill_shadow(base, 4, 128, Stream::SYNC), Err(UvmError::NotCommitted(base)));
    assert!(p.fill_shadow(base + 3 * ws, 4, 128, Stream::SYNC).is_err());
    p.read_shadow(base + 3 * ws, &mut s).unwrap();
    assert_eq!(s, [0; 4]);
    // Requests name canonical addresses.
    assert!(p.commit_tagged(base + ws + G, G, 1).is_err());
    assert!(p.retire(base + ws, G).is_err());
    // Retiring zeroes every named window's shadow.
    p.retire(base, G).unwrap();
    p.read_shadow(base + 2 * ws, &mut s).unwrap();
    assert_eq!(s, [0; 4]);
    assert!(!p.is_committed(base + 2 * ws));
}

#[test]
fn window_counts_are_checked() {
    for tags in [0, 3, 128] {
        let cfg = PoolConfig { size: 1 << 32, shift: 8, hints: vec![], max_size: 0, tags };
        assert!(matches!(Pool::new(Box::new(HostBackend::new(G)), &cfg), Err(UvmError::BadConfig(_))), "{tags} windows");
    }
    // A window must hold whole shadow chunks (64 KiB of shadow = 16 MiB of pool at scale 8): 64
    // windows of a 1 GiB pool are 16 MiB each (fine), of a 512 MiB pool 8 MiB (refused).
    let ok = PoolConfig { size: 1 << 30, shift: 8, hints: vec![], max_size: 0, tags: 64 };
    assert!(Pool::new(Box::new(HostBackend::new(G)), &ok).is_ok());
    let small = PoolConfig { size: 1 << 29, ..ok };
    assert!(matches!(Pool::new(Box::new(HostBackend::new(G)), &small), Err(UvmError::BadConfig(_))));
}

/// A chunk retired for one window can be committed again for another (the allocator reuses VA
/// under a new tag), never for that window.
#[test]
fn retiring_for_one_window_leaves_the_others() {
    let mut p = pool(8);
    let (base, ws) = (p.base(), p.window_size());
    p.commit_tagged(base, 2 * G, 0b0010).unwrap();
    p.retire_tagged(base, 2 * G, 0).unwrap();
    assert!(p.is_retired(base + ws) && !p.is_retired(base + 2 * ws) && !p.is_retired(base));
    assert_eq!(p.commit_tagged(base, G, 0b0010), Err(UvmError::Retired(base)));
    assert_eq!(p.commit_tagged(base, G, 0b0110), Err(UvmError::Retired(base)));
    p.commit_tagged(base, G, 0b0100).unwrap();
    assert_eq!(p.committed_windows(base + 2 * ws), Some(0b0100));
    p.retire(base, G).unwrap();
    assert_eq!(p.retired_windows(base), 0b1111);
    assert!(p.retire(base, G).is_err(), "retired for every window already");
    assert!(p.commit_tagged(base, G, 0b1000).is_err());
    // The second chunk was only ever used by window 1.
    p.commit_tagged(base + G, G, 0b1001).unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Commit(u64, u64, u64),
    Decommit(u64, u64),
    Retire(u64, u64),
    RetireOwn(u64, u64),
    Write(u64, u64, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let chunk = 0u64..12;
    prop_oneof![
        (chunk.clone(), 1u64..3, 1u64..16).prop_map(|(c, n, m)| Op::Commit(c, n, m)),
        (chunk.clone(), 1u64..3).prop_map(|(c, n)| Op::Decommit(c, n)),
        (chunk.clone(), 1u64..3).prop_map(|(c, n)| Op::Retire(c, n)),
        (chunk.clone(), 1u64..3).prop_map(|(c, n)| Op::RetireOwn(c, n)),
        (chunk, 0..WINDOWS, any::<u8>()).prop_map(|(c, t, v)| Op::Write(c, t, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_sequences_keep_windows_consistent(ops in prop::collection::vec(op(), 1..30), shift in 7u32..=8) {
        let mut p = pool(shift);
        let (base, ws) = (p.base(), p.window_size());
        // Model: committed chunk → window mask; chunk → windows retired for.
        let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
        let mut retired: BTreeMap<u64, u64> = BTreeMap::new();
        let all = (1u64 << WINDOWS) - 1;
        for o in ops {
            match o {
                Op::Commit(c, n, m) => {
                    let ok = (c..c + n).all(|i| !committed.contains_key(&i) && retired.get(&i).copied().unwrap_or(0) & m == 0);
                    prop_assert_eq!(p.commit_tagged(base + c * G, n * G, m).is_ok(), ok);
                    if ok {
                        committed.extend((c..c + n).map(|i| (i, m)));
                    }
                }
                Op::Decommit(c, n) => {
                    let ok = (c..c + n).all(|i| committed.contains_key(&i));
                    prop_assert_eq!(p.decommit(base + c * G, n * G).is_ok(), ok);
                    if ok {
                        (c..c + n).for_each(|i| { committed.remove(&i); });
                    }
                }
                Op::Retire(c, n) | Op::RetireOwn(c, n) => {
                    let asked = if matches!(o, Op::Retire(..)) { all } else { 0 };
                    let tags: Vec<u64> = (c..c + n).map(|i| asked | committed.get(&i).copied().unwrap_or(0)).collect();
                    let ok = (c..c + n).zip(&tags).all(|(i, &t)| retired.get(&i).copied().unwrap_or(0) & t != t);
                    let r = if asked == all { p.retire(base + c * G, n * G) } else { p.retire_tagged(base + c * G, n * G, 0) };
                    prop_assert_eq!(r.is_ok(), ok);
                    if ok {
                        for (i, t) in (c..c + n).zip(tags) {
                            *retired.entry(i).or_insert(0) |= t;
                            committed.remove(&i);
                        }
                    }
                    for i in 0..12u64 {
                        for t in 0..WINDOWS {
                            prop_assert_eq!(p.is_retired(base + t * ws + i * G), retired.get(&i).copied().unwrap_or(0) >> t & 1 == 1);
                        }
                    }
                }
                Op::Write(c, t, v) => {
                    // Shadow writes succeed exactly in the windows the chunk was committed for.
                    let ok = committed.get(&c).is_some_and(|m| m >> t & 1 == 1);
                    let va = base + t * ws + c * G;
                    prop_assert_eq!(p.fill_shadow(va, 2, v, Stream::SYNC).is_ok(), ok);
                    if ok {
                        // The memory is shared by every window it is committed for.
                        let m = committed[&c];
                        p.backend().write(va + 8, &[v], Stream::SYNC).unwrap();
                        let other = (0..WINDOWS).rev().find(|k| m >> k & 1 == 1).unwrap();
                        let mut back = [0u8];
                        p.backend().read(base + other * ws + c * G + 8, &mut back).unwrap();
                        prop_assert_eq!(back[0], v);
                    }
                }
            }
            // Shadow of every window not named for a chunk reads zero.
            for c in 0..12u64 {
                for t in 0..WINDOWS {
                    if committed.get(&c).is_some_and(|m| m >> t & 1 == 1) {
                        continue;
                    }
                    let mut s = [1u8; 2];
                    p.read_shadow(base + t * ws + c * G, &mut s).unwrap();
                    prop_assert_eq!(s, [0, 0], "chunk {} window {}", c, t);
                }
            }
        }
    }
}
