//! A pool block shared with another process, as `cuIpcGetMemHandle` / `cuIpcOpenMemHandle` /
//! `cuIpcCloseMemHandle` do it under gasan: the exporter's allocator hands out the block's chunks,
//! the 64-byte handle travels through gasan's IPC (the exporter's Unix socket, file descriptors
//! over SCM_RIGHTS), and the importer's allocator maps them as a block with the exporter's bounds,
//! its shadow read back the way checked PTX reads it. Two allocators of one process stand for the
//! two processes (host backends: chunks are memfds); uvm-shim/tests/ipc.rs runs real processes.

use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrKind, Allocator, FreeError};
use gasan_runtime::options::Options;
use gasan_uvm::ipc::{self, Exporter, IpcHandle};
use gasan_uvm::{HostBackend, Pool, PoolConfig};

const G: u64 = 2 << 20;

fn allocator() -> Allocator {
    let pool = Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: 64 << 30, shift: Scale::S8.shift(), hints: vec![], max_size: 0, tags: 1 }).unwrap();
    Allocator::new(pool, &Options { malloc_context_size: 4, ..Options::default() })
}

fn bad(a: &Allocator, addr: u64) -> bool {
    let (base, _, sbase) = a.control_fields();
    // SAFETY: host backend: the whole shadow is host memory mapped readable; `addr` is in the pool.
    let s = unsafe { std::ptr::read_volatile((sbase + ((addr - base) >> 8)) as *const u8) };
    a.scale().is_bad(s, addr, 1)
}

/// Byte `addr` of pool memory (host backend: mapped host memory).
fn peek(addr: u64) -> u8 {
    // SAFETY: a mapped pool byte of a live block (host backend).
    unsafe { std::ptr::read_volatile(addr as *const u8) }
}

fn poke(addr: u64, v: u8) {
    // SAFETY: as for peek; no Rust reference aliases pool memory.
    unsafe { std::ptr::write_volatile(addr as *mut u8, v) }
}

#[test]
fn an_opened_block_shares_the_bytes_and_keeps_the_exporters_bounds() {
    let exporter = Exporter::start().unwrap();
    let (a, b) = (allocator(), allocator());
    // A small block (it shares its slab chunk with a neighbour) and a large one.
    let neighbour = a.alloc(300, None).unwrap();
    for size in [1000u64, (8 << 20) + 100] {
        let p = a.alloc(size, None).unwrap();
        poke(p, 0x5a);
        poke(p + size - 1, 0xa5);
        // A large block is backed by wide runs, shared as chunks copied from them (once).
        assert_eq!(a.export_copies(p), size > 1000);
        // Any pointer into the block names it.
        let e = a.export_ipc(p + 10).expect("a live block").unwrap();
        assert!(!a.export_copies(p), "chunks now");
        assert_eq!((e.start, e.size), (p, size));
        let h = exporter.export(e.fds, 0, e.gran, e.offset, e.size).unwrap();
        let wire = h.to_bytes();
        // The importer's side: the handle's bytes are all it has.
        let h = IpcHandle::from_bytes(&wire).unwrap();
        let q = b.import_ipc(ipc::import(&h).unwrap(), h.offset, h.size).unwrap();
        assert!(b.owns(q) && b.is_imported(q));
        assert_eq!((peek(q), peek(q + size - 1)), (0x5a, 0xa5), "the importer reads the exporter's bytes");
        poke(q + 1, 7);
        assert_eq!(peek(p + 1), 7, "the exporter reads the importer's write");
        // The importer's checks use the exporter's bounds.
        assert!(!bad(&b, q) && !bad(&b, q + size - 1));
        assert!(bad(&b, q + Scale::S8.encodable_size(size)), "a {size}-byte block's overrun is not caught in the importer");
        assert!(bad(&b, q - 1));
        assert_eq!(b.describe(q + Scale::S8.encodable_size(size)).kind, AddrKind::OverflowRight { distance: Scale::S8.encodable_size(size) - size });
        if size < G {
            // The slab's other block is in the mapped chunk, but not the importer's.
            let other = q - p + neighbour;
            assert!(bad(&b, other), "the exporter's neighbouring block is accessible in the importer");
        }
        // Not freed by cuMemFree, not a leak of the importer's; closed, it reads as gone.
        assert!(matches!(b.free(q, None), Err(FreeError::WrongCall { .. })));
        assert!(b.live_allocations().iter().all(|x| x.start != q));
        assert!(b.close_ipc(q));
        assert!(!b.close_ipc(q) && !b.is_imported(q));
        assert!(bad(&b, q));
        assert!(matches!(b.describe(q).kind, AddrKind::UseAfterFree { .. }));
        // The exporter's block is untouched.
        assert_eq!(peek(p), 0x5a);
        assert!(!bad(&a, p + size - 1));
        assert!(exporter.withdraw(&h));
        a.free(p, None).unwrap();
    }
}

#[test]
fn what_is_not_a_live_block_is_not_exported_and_bad_bounds_are_refused() {
    let a = allocator();
    let p = a.alloc(100, None).unwrap();
    assert!(a.export_ipc(p + 4096 * 1024).is_none(), "an address in no block");
    a.free(p, None).unwrap();
    assert!(a.export_ipc(p).is_none(), "a freed block");
    let q = a.alloc(100, None).unwrap();
    let e = a.export_ipc(q).unwrap().unwrap();
    let chunks = e.fds.len() as u64;
    let b = allocator();
    // Bounds past the chunks sent.
    assert!(b.import_ipc(e.fds, chunks * G - 64, 100).is_err());
    assert!(b.import_ipc(Vec::new(), 0, 1).is_err());
    assert!(b.live_allocations().is_empty());
}
