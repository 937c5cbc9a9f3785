//! One allocator per device in a multi-GPU process (host backends standing for the devices, in
//! one `DeviceSpan`), as the runtime sets them up at each device's first use: each device's
//! blocks come from its own pool, and the control block every device's kernels get names the
//! whole span, so a kernel on one GPU checks an access to another GPU's block against the owner's
//! shadow and extent table (read here exactly as checked PTX reads them).

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, AllocError, Allocator, FreeCall};
use gasan_runtime::options::Options;
use gasan_uvm::{DeviceSpan, HostBackend, Memory, Pool, PoolConfig, UvmError};
use std::sync::Arc;

const G: u64 = 2 << 20;
// The smallest pool whose extent table is whole 2 MiB chunks (what a span requires).
const POOL: u64 = 256 << 30;

fn cfg(scale: Scale) -> PoolConfig {
    PoolConfig { size: POOL, shift: scale.shift(), hints: vec![], max_size: 0, tags: 1 }
}

fn allocators(devices: u32, scale: Scale) -> (Arc<DeviceSpan>, Vec<Allocator>) {
    let span = DeviceSpan::reserve(Box::new(HostBackend::new(G)), devices, &cfg(scale)).unwrap();
    let opts = Options { shadow_scale: scale, malloc_context_size: 4, ..Options::default() };
    // Set up out of order, as devices are first used.
    let mut v: Vec<(u32, Allocator)> = (0..devices).rev().map(|d| (d, Allocator::new(Pool::in_span(Box::new(HostBackend::for_device(G, d as i32)), &cfg(scale), &span, d).unwrap(), &opts))).collect();
    v.sort_by_key(|(d, _)| *d);
    (span, v.into_iter().map(|(_, a)| a).collect())
}

/// The shadow byte of `addr` as a kernel given `control`'s control block reads it.
fn shadow_seen_by(control: &Allocator, addr: u64) -> u8 {
    let (base, size, sbase) = control.control_fields();
    assert!(addr >= base && addr - base < size, "{addr:#x} outside the control block's pool");
    let s = sbase + ((addr - base) >> control.scale().shift());
    // SAFETY: host backend: the span's shadow is host memory, mapped readable (real chunks or the
    // shared zero chunk) for every slot with a pool; `s` is the shadow byte of a pool address.
    unsafe { std::ptr::read_volatile(s as *const u8) }
}

fn bad_for(control: &Allocator, addr: u64, w: u32) -> bool {
    control.scale().is_bad(shadow_seen_by(control, addr), addr, w)
}

fn extent_seen_by(control: &Allocator, addr: u64) -> (u64, u64) {
    let (base, _, _) = control.control_fields();
    let (table, shift) = control.extent_fields();
    let e = table + ((addr - base) >> shift) * 16;
    // SAFETY: host backend: the span's extent tables are host memory mapped readable; `e` is the
    // 16-byte entry of a pool address's block.
    unsafe { (std::ptr::read_volatile(e as *const u64), std::ptr::read_volatile((e + 8) as *const u64)) }
}

#[test]
fn each_device_allocates_from_its_own_slot_and_every_control_block_names_the_span() {
    for scale in [Scale::S8, Scale::S7] {
        let (span, a) = allocators(3, scale);
        let l = span.layout();
        let (span_base, span_len) = l.span();
        for (d, alloc) in a.iter().enumerate() {
            assert_eq!(alloc.device(), d as i32);
            assert_eq!(alloc.control_fields(), (span_base, span_len, l.shadow_base), "device {d}");
            assert_eq!(alloc.extent_fields().0, l.extent_base);
        }
        // Larger than the aligned form covers: modules get the 64-bit in-pool check.
        assert!(!scale.pool_allows_aligned_check(span_base, span_len));
        let blocks: Vec<u64> = a.iter().map(|x| x.alloc(1000, None).unwrap()).collect();
        for (d, &p) in blocks.iter().enumerate() {
            assert_eq!(l.device_of(p), Some(d as u32), "device {d}'s block {p:#x} in its slot");
            for (o, other) in a.iter().enumerate() {
                assert_eq!(other.owns(p), o == d, "device {o} owns device {d}'s block");
            }
        }
    }
}

#[test]
fn a_kernel_on_one_gpu_checks_another_gpus_block_against_the_owners_shadow() {
    let (_span, a) = allocators(2, Scale::S8);
    let n = 1000;
    let on0 = a[0].alloc(n, None).unwrap();
    let on1 = a[1].alloc(n, None).unwrap();
    // Device 1's kernel (its control block) reading device 0's buffer, and the other way round.
    for (reader, p, owner) in [(&a[1], on0, &a[0]), (&a[0], on1, &a[1])] {
        assert!(!bad_for(reader, p, 4) && !bad_for(reader, p + n - 4, 4), "in-bounds peer read reported");
        assert!(bad_for(reader, p + n, 4), "a read just past a peer's buffer passes");
        assert!(bad_for(reader, p - 4, 4));
        // The report describes it from the owner's allocator.
        assert_eq!(owner.describe(p + n).kind, AddrKind::OverflowRight { distance: 0 });
    }
    // Freed on its device: a peer's kernel sees it freed too.
    a[1].free(on1, None).unwrap();
    assert!(bad_for(&a[0], on1, 4));
    assert!(matches!(a[1].describe(on1).kind, AddrKind::UseAfterFree { .. }));
}

#[test]
fn a_peers_hoisted_loop_checks_find_the_owners_extent_entry() {
    let (_span, a) = allocators(2, Scale::S8);
    // A large block (its own chunks, with an extent entry) on device 1.
    let n = 8 << 20;
    let p = a[1].alloc(n, None).unwrap();
    for addr in [p, p + n / 2, p + n - 1] {
        assert_eq!(extent_seen_by(&a[0], addr), (p, p + n), "device 0's kernel reading {addr:#x}");
    }
    a[1].free(p, None).unwrap();
    assert_ne!(extent_seen_by(&a[0], p), (p, p + n), "a freed block's extent entry stays live");
}

#[test]
fn peers_are_granted_and_revoked_on_a_devices_pool() {
    let (_span, a) = allocators(2, Scale::S8);
    let p = a[0].alloc(4096, None).unwrap();
    assert!(a[0].peers().is_empty());
    a[0].grant_peer_access(1).unwrap();
    assert_eq!(a[0].peers(), vec![1]);
    // Blocks placed after the grant keep the peer's access (the pool grants every new mapping).
    let q = a[0].alloc(16 << 20, None).unwrap();
    assert!(a[0].owns(p) && a[0].owns(q));
    a[0].revoke_peer_access(1).unwrap();
    assert!(a[0].peers().is_empty());
}

/// Whether a checked kernel on `device` may read `len` bytes at `addr` of `owner`'s pool (the
/// bytes and their shadow; the host backend models each device's rights as the CUDA VMM does).
fn readable_by(owner: &Allocator, device: i32, addr: u64, len: usize) -> bool {
    let mut buf = vec![0u8; len];
    match owner.read_as(device, addr, &mut buf) {
        Ok(()) => true,
        Err(AllocError::Pool(UvmError::NoAccess { device: d, .. })) if d == device => false,
        Err(e) => panic!("read_as({device}, {addr:#x}): {e}"),
    }
}

/// Byte `addr` of pool memory (host backend: mapped host memory).
fn poke(addr: u64, v: u8) {
    // SAFETY: a mapped byte of a live pool block (host backend); no Rust reference aliases it.
    unsafe { std::ptr::write_volatile(addr as *mut u8, v) }
}

#[test]
fn pinned_and_managed_blocks_are_every_gpus_and_checked_against_their_owners_shadow() {
    let (_span, a) = allocators(2, Scale::S8);
    let n = 1000;
    // Host memory of device 1's pool (it was current at the allocation), before any grant: a
    // kernel on device 0 could not even read it.
    let managed = a[1].alloc_managed(n).unwrap();
    let pinned = a[1].alloc_in(n, None, Memory::Host).unwrap();
    let on_device = a[1].alloc(n, None).unwrap();
    assert!(!readable_by(&a[1], 0, managed, 4), "a new mapping grants nobody");
    // What the runtime does when a second GPU is set up: each pool grants the other its host
    // memory and shadow.
    a[1].grant_host_access(0).unwrap();
    a[0].grant_host_access(1).unwrap();
    assert_eq!((a[0].host_readers(), a[1].host_readers()), (vec![1], vec![0]));
    assert!(a[1].peers().is_empty(), "host access is not peer access");
    // Host blocks placed after the grant (a large one: chunks of its own) are granted too.
    let large = a[1].alloc_in(8 << 20, None, Memory::Host).unwrap();
    for (p, len) in [(managed, n), (pinned, n), (large, 8 << 20)] {
        poke(p, 0x5a);
        assert!(readable_by(&a[1], 0, p, len as usize), "device 0's kernel cannot read device 1's host block {p:#x}");
        let mut b = [0u8; 1];
        a[1].read_as(0, p, &mut b).unwrap();
        assert_eq!(b[0], 0x5a, "the bytes the CPU wrote");
        // Device 0's kernel checks it against the owner's shadow (its control block names the
        // span), and the owner describes the overrun.
        assert!(!bad_for(&a[0], p + len - 4, 4), "in-bounds read of a host block reported");
        assert!(bad_for(&a[0], p + len, 4), "a read just past device 1's host block passes on device 0");
        assert_eq!(a[1].describe(p + len).kind, AddrKind::OverflowRight { distance: 0 });
    }
    // Device memory stays the owner's (and its peers') alone.
    assert!(!readable_by(&a[1], 0, on_device, 4), "host access granted device memory");
    a[1].grant_peer_access(0).unwrap();
    assert!(readable_by(&a[1], 0, on_device, 4));
    // Peer access taken back: the host blocks and the shadow stay readable.
    a[1].revoke_peer_access(0).unwrap();
    assert!(!readable_by(&a[1], 0, on_device, 4));
    assert!(readable_by(&a[1], 0, managed, 4) && readable_by(&a[1], 0, large, 4), "revoking peer access took the host memory away");
    // Freed on its owner: device 0's kernel sees it freed.
    a[1].free_by(pinned, None, FreeCall::PinnedHost).unwrap();
    a[1].free(managed, None).unwrap();
    for p in [pinned, managed] {
        assert!(bad_for(&a[0], p, 4));
        assert!(matches!(a[1].describe(p).kind, AddrKind::UseAfterFree { .. }));
    }
}
