//! Several pools in one process, one per simulated device (host backends sharing one
//! `DeviceSpan`), created lazily, with peers granted and revoked, over random operation sequences
//! checked against a model: each device's pool sits in its slot; a device reads another's memory
//! (bytes and shadow, as a checked kernel does) exactly while it is granted, chunks mapped after
//! the grant included, or, for host-memory chunks, while it is a host reader (peer access revoked
//! or not); bytes written are the bytes read, whichever device reads them.

use gasan_instrument::shadow::Scale;
use gasan_uvm::host::HostBackend;
use gasan_uvm::plan::DeviceLayout;
use gasan_uvm::{DeviceSpan, Memory, Pool, PoolConfig, Stream, UvmError};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const G: u64 = 64 << 10;
const POOL: u64 = 1 << 30;

fn cfg(shift: u32, tags: u64) -> PoolConfig {
    PoolConfig { size: POOL, shift, hints: vec![], max_size: 0, tags }
}

fn span(devices: u32, shift: u32) -> Arc<DeviceSpan> {
    DeviceSpan::reserve(Box::new(HostBackend::new(G)), devices, &cfg(shift, 1)).unwrap()
}

fn pool_of(span: &Arc<DeviceSpan>, d: u32, shift: u32, tags: u64) -> Pool {
    Pool::in_span(Box::new(HostBackend::for_device(G, d as i32)), &cfg(shift, tags), span, d).unwrap()
}

#[test]
fn eight_devices_get_aligned_slots_and_one_span_indexes_every_shadow() {
    // The runtime's default: 1 TiB per device at scale 8 from 16 TiB, 2 MiB chunks.
    let gran = 2 << 20;
    let c = PoolConfig { size: 0, shift: 8, hints: vec![0x1000_0000_0000, 0x2000_0000_0000], max_size: 1 << 40, tags: 4 };
    let span = DeviceSpan::reserve(Box::new(HostBackend::new(gran)), 8, &c).unwrap();
    let l = span.layout();
    assert_eq!((l.pool_size, l.devices), (1 << 40, 8));
    let (base, len) = l.span();
    assert_eq!(len, 8 << 40);
    assert!(base.is_multiple_of(1 << 40), "span at {base:#x}");
    // Pools created lazily, out of order.
    let mut pools: BTreeMap<u32, Pool> = BTreeMap::new();
    for d in [5u32, 0, 7, 2, 1, 6, 3, 4] {
        let p = Pool::in_span(Box::new(HostBackend::for_device(gran, d as i32)), &c, &span, d).unwrap();
        assert_eq!(p.base(), base + u64::from(d) * (1 << 40));
        assert_eq!(p.size(), 1 << 40);
        assert!(Scale::S8.pool_allows_aligned_check(p.base(), p.size()), "device {d}'s own control block keeps the aligned check");
        assert_eq!(p.window_size(), 1 << 38);
        pools.insert(d, p);
    }
    // A control block naming the whole span finds each address's shadow in its owner's shadow.
    for (&d, p) in &pools {
        for off in [0u64, 0x1234_5600, (1 << 40) - 256, 3 << 38] {
            let va = p.base() + off;
            assert_eq!(l.device_of(va), Some(d));
            assert_eq!(l.shadow_base + ((va - base) >> 8), p.shadow_addr(va), "device {d} offset {off:#x}");
            let (table, shift) = p.extent_table();
            assert_eq!(l.extent_base + ((va - base) >> shift) * 16, table + (off >> shift) * 16);
        }
    }
    assert_eq!(l.device_of(base + len), None);
    assert_eq!(l.device_of(base - 1), None);
    // A slot holds one pool at a time; a dropped pool frees its slot.
    let again = Pool::in_span(Box::new(HostBackend::for_device(gran, 3)), &c, &span, 3);
    assert!(matches!(again, Err(UvmError::BadConfig(_))), "{:?}", again.err());
    assert!(matches!(Pool::in_span(Box::new(HostBackend::for_device(gran, 8)), &c, &span, 8), Err(UvmError::BadConfig(_))));
    pools.remove(&3);
    let p3 = Pool::in_span(Box::new(HostBackend::for_device(gran, 3)), &c, &span, 3).unwrap();
    assert_eq!(p3.base(), base + (3 << 40));
}

#[test]
fn a_span_outlives_the_handle_it_was_made_with() {
    let s = span(2, 8);
    let mut p = pool_of(&s, 1, 8, 1);
    let base = p.base();
    drop(s);
    // The pool holds the span: its VA is still reserved and usable.
    p.commit(base, G).unwrap();
    p.backend().write(base, b"still mine", Stream::SYNC).unwrap();
    let mut b = [0u8; 10];
    p.backend().read(base, &mut b).unwrap();
    assert_eq!(&b, b"still mine");
}

#[test]
fn layouts_refuse_seams() {
    assert!(DeviceLayout::check(0, POOL, 8, G).is_err());
    assert!(DeviceLayout::check(17, POOL, 8, G).is_err());
    assert!(DeviceLayout::check(2, G << 8, 8, G).is_err(), "a 16 MiB pool's extent table (4 KiB) is not whole chunks");
    assert!(DeviceLayout::check(2, POOL + G, 8, G).is_err(), "not whole shadow chunks");
    assert!(DeviceLayout::check(8, 1 << 40, 8, 2 << 20).is_ok());
    assert!(DeviceLayout::check(16, 1 << 40, 7, 2 << 20).is_ok());
}

#[test]
fn a_peer_reads_only_while_granted_including_chunks_mapped_after_the_grant() {
    let s = span(2, 8);
    let mut p0 = pool_of(&s, 0, 8, 1);
    let b = p0.base();
    p0.commit(b, G).unwrap();
    p0.backend().write(b, b"device zero", Stream::SYNC).unwrap();
    let mut out = [0u8; 11];
    p0.read_as(0, b, &mut out).unwrap();
    assert!(matches!(p0.read_as(1, b, &mut out), Err(UvmError::NoAccess { device: 1, .. })), "no access before the grant");
    p0.grant_peer_access(1).unwrap();
    p0.read_as(1, b, &mut out).unwrap();
    assert_eq!(&out, b"device zero");
    // Mapped after the grant, far enough to need a shadow chunk of its own.
    let far = b + (G << 8) * 3;
    p0.commit(far, G).unwrap();
    p0.read_as(1, far, &mut out).unwrap();
    p0.revoke_peer_access(1).unwrap();
    for va in [b, far] {
        assert!(matches!(p0.read_as(1, va, &mut out), Err(UvmError::NoAccess { device: 1, .. })), "revoked at {va:#x}");
    }
    assert_eq!(p0.backend().access(p0.shadow_addr(b), 1).unwrap(), gasan_uvm::Prot::None, "shadow revoked too");
    p0.read_as(0, far, &mut out).unwrap();
    assert!(p0.peers().is_empty());
}

#[test]
fn a_host_reader_reaches_host_chunks_and_the_shadow_but_not_device_chunks() {
    let s = span(2, 8);
    let mut p0 = pool_of(&s, 0, 8, 1);
    let b = p0.base();
    let (host, device) = (b, b + G);
    p0.commit_tagged_in(host, G, 1, Memory::Host).unwrap();
    p0.commit(device, G).unwrap();
    p0.backend().write(host, b"pinned host", Stream::SYNC).unwrap();
    let mut out = [0u8; 11];
    assert!(matches!(p0.read_as(1, host, &mut out), Err(UvmError::NoAccess { device: 1, .. })), "no access before the grant");
    p0.grant_host_access(1).unwrap();
    p0.grant_host_access(0).unwrap(); // its own device: nothing to grant
    assert_eq!(p0.host_readers(), [1]);
    p0.read_as(1, host, &mut out).unwrap();
    assert_eq!(&out, b"pinned host");
    assert!(matches!(p0.read_as(1, device, &mut out), Err(UvmError::NoAccess { device: 1, .. })), "device memory granted");
    // Host memory mapped after the grant, far enough to need a shadow chunk of its own.
    let far = b + (G << 8) * 3;
    p0.commit_tagged_in(far, G, 1, Memory::Host).unwrap();
    p0.read_as(1, far, &mut out).unwrap();
    // Peer access given and taken back: the host reader keeps the host chunks and the shadow.
    p0.grant_peer_access(1).unwrap();
    p0.read_as(1, device, &mut out).unwrap();
    p0.revoke_peer_access(1).unwrap();
    assert!(matches!(p0.read_as(1, device, &mut out), Err(UvmError::NoAccess { device: 1, .. })));
    for va in [host, far] {
        p0.read_as(1, va, &mut out).unwrap();
    }
    assert_eq!(p0.backend().access(p0.shadow_addr(device), 1).unwrap(), gasan_uvm::Prot::ReadOnly, "the shadow stays readable");
    // A host chunk moved to device memory (a managed block) is the owner's again.
    p0.migrate(far, G, Memory::Device).unwrap();
    assert!(matches!(p0.read_as(1, far, &mut out), Err(UvmError::NoAccess { device: 1, .. })));
    p0.migrate(far, G, Memory::Host).unwrap();
    p0.read_as(1, far, &mut out).unwrap();
}

#[test]
fn a_grant_keeps_the_rights_protect_gave() {
    let s = span(2, 8);
    let mut p = pool_of(&s, 0, 8, 1);
    let b = p.base();
    p.commit(b, 4 * G).unwrap();
    p.protect(b + G, G, gasan_uvm::Prot::ReadOnly).unwrap();
    p.protect(b + 2 * G, G, gasan_uvm::Prot::None).unwrap();
    p.grant_peer_access(1).unwrap();
    let rights: Vec<_> = (0..4).map(|i| p.backend().access(b + i * G, 1).unwrap()).collect();
    use gasan_uvm::Prot::*;
    assert_eq!(rights, [ReadWrite, ReadOnly, None, ReadWrite]);
    // Protecting after the grant changes the peer's rights too.
    p.protect(b + 3 * G, G, ReadOnly).unwrap();
    assert_eq!(p.backend().access(b + 3 * G, 1).unwrap(), ReadOnly);
    p.revoke_peer_access(1).unwrap();
    assert!((0..4).all(|i| p.backend().access(b + i * G, 1).unwrap() == None));
}

#[derive(Clone, Debug)]
enum Op {
    /// Commit for the window `tag` (modulo the pool's windows), of host memory when `host`.
    Commit {
        dev: u32,
        chunk: u64,
        n: u64,
        tag: u64,
        host: bool,
    },
    Decommit {
        dev: u32,
        chunk: u64,
        n: u64,
    },
    Write {
        dev: u32,
        chunk: u64,
        byte: u8,
    },
    Grant {
        dev: u32,
        peer: u32,
    },
    Revoke {
        dev: u32,
        peer: u32,
    },
    /// `dev`'s pool grants `reader` its host memory and shadow.
    GrantHost {
        dev: u32,
        reader: u32,
    },
    /// Device `by` reads `dev`'s chunk through window `tag`.
    Read {
        dev: u32,
        by: u32,
        chunk: u64,
        tag: u64,
    },
    Drop {
        dev: u32,
    },
}

fn op(devices: u32) -> impl Strategy<Value = Op> {
    let d = 0..devices;
    let c = 0u64..12;
    prop_oneof![
        3 => (d.clone(), c.clone(), 1u64..3, 0u64..4, any::<bool>()).prop_map(|(dev, chunk, n, tag, host)| Op::Commit { dev, chunk, n, tag, host }),
        1 => (d.clone(), c.clone(), 1u64..3).prop_map(|(dev, chunk, n)| Op::Decommit { dev, chunk, n }),
        2 => (d.clone(), c.clone(), any::<u8>()).prop_map(|(dev, chunk, byte)| Op::Write { dev, chunk, byte }),
        2 => (d.clone(), d.clone()).prop_map(|(dev, peer)| Op::Grant { dev, peer }),
        1 => (d.clone(), d.clone()).prop_map(|(dev, peer)| Op::Revoke { dev, peer }),
        2 => (d.clone(), d.clone()).prop_map(|(dev, reader)| Op::GrantHost { dev, reader }),
        4 => (d.clone(), d.clone(), c.clone(), 0u64..4).prop_map(|(dev, by, chunk, tag)| Op::Read { dev, by, chunk, tag }),
        1 => d.prop_map(|dev| Op::Drop { dev }),
    ]
}

/// One device's pool in the model.
#[derive(Default)]
struct Model {
    /// Chunk → the window it is committed for, and whether it is host memory.
    committed: BTreeMap<u64, (u64, bool)>,
    /// Bytes known to be at each chunk's offset 8 (written since its commit).
    bytes: BTreeMap<u64, u8>,
    peers: BTreeSet<u32>,
    host_readers: BTreeSet<u32>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn pools_and_peers_follow_the_model(devices in 2u32..=4, shift in 7u32..=8, tags in prop::sample::select(vec![1u64, 4]), ops in prop::collection::vec(op(4), 1..48)) {
        let s = span(devices, shift);
        let l = s.layout();
        let mut pools: BTreeMap<u32, Pool> = BTreeMap::new();
        let mut model: BTreeMap<u32, Model> = BTreeMap::new();
        for o in ops {
            // Ops name up to 4 devices; fold them onto this span's.
            let o = match o {
                Op::Commit { dev, chunk, n, tag, host } => Op::Commit { dev: dev % devices, chunk, n, tag: tag % tags, host },
                Op::Decommit { dev, chunk, n } => Op::Decommit { dev: dev % devices, chunk, n },
                Op::Write { dev, chunk, byte } => Op::Write { dev: dev % devices, chunk, byte },
                Op::Grant { dev, peer } => Op::Grant { dev: dev % devices, peer: peer % devices },
                Op::Revoke { dev, peer } => Op::Revoke { dev: dev % devices, peer: peer % devices },
                Op::GrantHost { dev, reader } => Op::GrantHost { dev: dev % devices, reader: reader % devices },
                Op::Read { dev, by, chunk, tag } => Op::Read { dev: dev % devices, by: by % devices, chunk, tag: tag % tags },
                Op::Drop { dev } => Op::Drop { dev: dev % devices },
            };
            // Pools appear on a device's first use.
            let dev = match o { Op::Commit { dev, .. } | Op::Decommit { dev, .. } | Op::Write { dev, .. } | Op::Grant { dev, .. } | Op::Revoke { dev, .. } | Op::GrantHost { dev, .. } | Op::Read { dev, .. } | Op::Drop { dev } => dev };
            if matches!(o, Op::Drop { .. }) {
                pools.remove(&dev);
                model.remove(&dev);
                continue;
            }
            let p = pools.entry(dev).or_insert_with(|| pool_of(&s, dev, shift, tags));
            prop_assert_eq!(p.base(), l.slot(dev).pool);
            prop_assert_eq!(p.device(), dev as i32);
            let m = model.entry(dev).or_default();
            let base = p.base();
            match o {
                Op::Commit { chunk, n, tag, host, .. } => {
                    let ok = (chunk..chunk + n).all(|c| !m.committed.contains_key(&c));
                    let mem = if host { Memory::Host } else { Memory::Device };
                    prop_assert_eq!(p.commit_tagged_in(base + chunk * G, n * G, 1 << tag, mem).is_ok(), ok);
                    if ok {
                        // A chunk from the cache keeps the bytes it had: unknown until written.
                        for c in chunk..chunk + n {
                            m.committed.insert(c, (tag, host));
                            m.bytes.remove(&c);
                        }
                    }
                }
                Op::Decommit { chunk, n, .. } => {
                    let ok = (chunk..chunk + n).all(|c| m.committed.contains_key(&c));
                    prop_assert_eq!(p.decommit(base + chunk * G, n * G).is_ok(), ok);
                    if ok {
                        for c in chunk..chunk + n {
                            m.committed.remove(&c);
                            m.bytes.remove(&c);
                        }
                    }
                }
                Op::Write { chunk, byte, .. } => {
                    if let Some(&(tag, _)) = m.committed.get(&chunk) {
                        p.backend().write(p.tagged(base + chunk * G, tag) + 8, &[byte; 8], Stream::SYNC).unwrap();
                        m.bytes.insert(chunk, byte);
                    }
                }
                Op::Grant { peer, .. } => {
                    p.grant_peer_access(peer as i32).unwrap();
                    if peer != dev {
                        m.peers.insert(peer);
                    }
                }
                Op::Revoke { peer, .. } => {
                    p.revoke_peer_access(peer as i32).unwrap();
                    m.peers.remove(&peer);
                }
                Op::GrantHost { reader, .. } => {
                    p.grant_host_access(reader as i32).unwrap();
                    if reader != dev {
                        m.host_readers.insert(reader);
                    }
                }
                Op::Read { by, chunk, tag, .. } => {
                    let mut out = [0u8; 8];
                    let r = p.read_as(by as i32, p.tagged(base + chunk * G, tag) + 8, &mut out);
                    let committed = m.committed.get(&chunk).copied();
                    if committed.map(|(t, _)| t) != Some(tag) {
                        prop_assert!(matches!(r, Err(UvmError::NotCommitted(_))), "uncommitted: {:?}", r);
                    } else if by == dev || m.peers.contains(&by) || (committed.is_some_and(|(_, host)| host) && m.host_readers.contains(&by)) {
                        prop_assert!(r.is_ok(), "device {} reading device {}'s chunk {}: {:?}", by, dev, chunk, r);
                        if let Some(&b) = m.bytes.get(&chunk) {
                            prop_assert_eq!(out, [b; 8]);
                        }
                    } else {
                        prop_assert!(matches!(r, Err(UvmError::NoAccess { .. })), "device {} reading device {} ungranted: {:?}", by, dev, r);
                    }
                }
                Op::Drop { .. } => unreachable!(),
            }
            let mut peers: Vec<i32> = p.peers().to_vec();
            peers.sort();
            prop_assert_eq!(peers, m.peers.iter().map(|&x| x as i32).collect::<Vec<_>>());
            let mut readers: Vec<i32> = p.host_readers().to_vec();
            readers.sort();
            prop_assert_eq!(readers, m.host_readers.iter().map(|&x| x as i32).collect::<Vec<_>>());
        }
        // Pools of different devices never share VA.
        for (&d, p) in &pools {
            prop_assert_eq!(l.device_of(p.base()), Some(d));
            prop_assert_eq!(l.device_of(p.base() + p.size() - 1), Some(d));
        }
    }
}
