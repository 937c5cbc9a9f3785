//! One allocator per device in a multi-GPU process (host backends standing for the devices, in
//! one `DeviceSpan`), as the runtime sets them up at each device's first use: each device's
//! blocks come from its own pool, and the control block every device's kernels get names the
//! whole span, so a kernel on one GPU checks an access to another GPU's block against the owner's
//! shadow and extent table (read here exactly as checked PTX reads them).

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, Allocator};
use gasan_runtime::options::Options;
use gasan_uvm::{DeviceSpan, HostBackend, Pool, PoolConfig};
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
