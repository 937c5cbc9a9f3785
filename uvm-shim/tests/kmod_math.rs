//! The kernel patch's C arithmetic and parameter checks (kmod-patch/src/gasan_map_math.c, compiled
//! by build.rs) against the Rust planner and the Rust model of the checks
//! (`gasan_uvm::kmod_check`), on random inputs and on every malformed case the kmod self-test sends.

#![allow(non_snake_case)] // the kernel structs' field names, bound by name in the strategies

use gasan_uvm::kmod::abi::*;
use gasan_uvm::kmod_check::{self, Call, Limits};
use gasan_uvm::plan;
use proptest::prelude::*;

extern "C" {
    fn gasan_check_aligned(va: u64, len: u64, gran: u64) -> i32;
    fn gasan_contains(base: u64, size: u64, va: u64, len: u64) -> i32;
    fn gasan_shadow_range(pool_base: u64, shadow_base: u64, shift: u32, va: u64, len: u64, start: *mut u64, out_len: *mut u64);
    fn gasan_alias_addr(src: u64, alias_base: u64, va: u64) -> u64;
    fn gasan_split_pages(va: u64, len: u64, out_va: *mut u64, out_size: *mut u64, max: i32) -> i32;
    fn gasan_check_range(va: u64, len: u64, gran: u64) -> u32;
    fn gasan_validate_identify(p: *const UVM_GASAN_IDENTIFY_PARAMS) -> u32;
    fn gasan_validate_query(p: *const UVM_GASAN_QUERY_PARAMS) -> u32;
    fn gasan_validate_reserve_pool(p: *const UVM_GASAN_RESERVE_POOL_PARAMS, l: *const Limits) -> u32;
    fn gasan_validate_map_alias(p: *const UVM_GASAN_MAP_ALIAS_PARAMS, l: *const Limits) -> u32;
    fn gasan_validate_unmap_alias(p: *const UVM_GASAN_UNMAP_ALIAS_PARAMS, l: *const Limits) -> u32;
    fn gasan_validate_set_protection(p: *const UVM_GASAN_SET_PROTECTION_PARAMS, l: *const Limits) -> u32;
    fn gasan_validate_map_sparse_zero(p: *const UVM_GASAN_MAP_SPARSE_ZERO_PARAMS, l: *const Limits) -> u32;
    fn gasan_validate_subscribe_faults(p: *const UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS, l: *const Limits) -> u32;
    fn gasan_prot_mapping_type(prot: u32, orig: u32, out: *mut u32) -> u32;
}

/// The C check the kernel runs for `call`.
fn c_check(call: &Call, l: &Limits) -> u32 {
    // SAFETY: every pointer is to a live local of the C struct's layout (bindgen / repr(C)).
    unsafe {
        match call {
            Call::Identify(p) => gasan_validate_identify(p),
            Call::Query(p) => gasan_validate_query(p),
            Call::ReservePool(p) => gasan_validate_reserve_pool(p, l),
            Call::MapAlias(p) => gasan_validate_map_alias(p, l),
            Call::UnmapAlias(p) => gasan_validate_unmap_alias(p, l),
            Call::SetProtection(p) => gasan_validate_set_protection(p, l),
            Call::MapSparseZero(p) => gasan_validate_map_sparse_zero(p, l),
            Call::SubscribeFaults(p) => gasan_validate_subscribe_faults(p, l),
        }
    }
}

/// Addresses near the interesting edges (0, the pool's ends, alignment, the top of the space),
/// mixed with arbitrary ones.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        any::<u64>(),
        (0u64..64).prop_map(|k| k << 16),
        (0x7f00_0000u64..0x7f00_1000).prop_map(|k| k << 16),
        (0u64..8).prop_map(|k| u64::MAX - (k << 16) - 0xffff),
        (0u64..4096).prop_map(|k| (1u64 << 49) - (k << 12)),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), (1u64..64).prop_map(|k| k << 12), (1u64..8).prop_map(|k| k << 21), any::<u64>(), 1u64..5000]
}

fn small() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(1), Just(2), Just(3), Just(4096), Just(65536), Just(8192), any::<u32>()]
}

fn limits() -> impl Strategy<Value = Limits> {
    (prop_oneof![Just(0u64), (1u64..64).prop_map(|k| k << 21)], prop_oneof![Just(0u64), Just(1u64 << 34)], prop_oneof![Just(0u64), Just(1u64 << 47), Just(1u64 << 49)])
        .prop_map(|(len, base, max_va)| Limits { pool_base: if len == 0 { 0 } else { 0x7f00_0000_0000 + base }, pool_length: len, max_va })
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        small().prop_map(|pad0| Call::Identify(UVM_GASAN_IDENTIFY_PARAMS { pad0, ..Default::default() })),
        small().prop_map(|pad0| Call::Query(UVM_GASAN_QUERY_PARAMS { pad0, ..Default::default() })),
        (addr(), len(), small()).prop_map(|(base, length, pad0)| Call::ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { base, length, pad0, ..Default::default() })),
        (addr(), len(), addr(), small()).prop_map(|(srcBase, length, aliasBase, pad0)| { Call::MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase, length, aliasBase, pad0, ..Default::default() }) }),
        (addr(), len(), small()).prop_map(|(aliasBase, length, pad0)| Call::UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase, length, pad0, ..Default::default() })),
        (addr(), len(), small(), small(), prop_oneof![Just(0u32), small()])
            .prop_map(|(base, length, pageSize, prot, pad0)| { Call::SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base, length, pageSize, prot, pad0, ..Default::default() }) }),
        (addr(), len(), small()).prop_map(|(base, length, pad0)| Call::MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base, length, pad0, ..Default::default() })),
        (small(), small()).prop_map(|(flags, pad0)| Call::SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { flags, pad0, ..Default::default() })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn alignment_and_containment_agree(va in any::<u64>(), len in any::<u64>(), g in 0u32..24, base in 0u64..1 << 47, size in 0u64..1 << 41) {
        let gran = 1u64 << g;
        // SAFETY: plain C functions over integers.
        prop_assert_eq!(unsafe { gasan_check_aligned(va, len, gran) } == 0, plan::check_aligned(va, len, gran).is_ok());
        // SAFETY: plain C functions over integers.
        prop_assert_eq!(unsafe { gasan_check_range(va, len, gran) }, kmod_check::check_range(va, len, gran));
        let (va2, len2) = (va >> 17, len >> 20);
        // SAFETY: plain C functions over integers.
        prop_assert_eq!(unsafe { gasan_contains(base, size, va2, len2) } == 1, plan::contains(base, size, va2, len2));
    }

    #[test]
    fn shadow_ranges_agree(off in 0u64..1 << 40, len in 1u64..1 << 30, shift in 7u32..=8) {
        let base = 0x1000_0000_0000u64;
        let (mut s, mut l) = (0u64, 0u64);
        // SAFETY: the out pointers are live locals.
        unsafe { gasan_shadow_range(base, 0x3_0000_0000, shift, base + off, len, &mut s, &mut l) };
        prop_assert_eq!((s, l), plan::shadow_range(base, 0x3_0000_0000, shift, base + off, len));
        // SAFETY: plain C function over integers.
        prop_assert_eq!(unsafe { gasan_alias_addr(base, 1 << 50, base + off) }, plan::alias_addr(base, 1 << 50, base + off));
    }

    #[test]
    fn page_splits_agree(va_pages in 0u64..1 << 20, len_pages in 0u64..2048) {
        let (va, len) = (va_pages * 4096, len_pages * 4096);
        let mut vs = vec![0u64; 4096];
        let mut ss = vec![0u64; 4096];
        // SAFETY: both buffers hold `max` = 4096 entries.
        let n = unsafe { gasan_split_pages(va, len, vs.as_mut_ptr(), ss.as_mut_ptr(), 4096) };
        match plan::split_pages(va, len) {
            Ok(pages) => {
                prop_assert_eq!(n as usize, pages.len());
                let c: Vec<(u64, u64)> = vs.into_iter().zip(ss).take(n as usize).collect();
                prop_assert_eq!(&c, &pages);
                // The pages tile the range exactly.
                prop_assert_eq!(pages.iter().map(|p| p.1).sum::<u64>(), len);
            }
            Err(_) => prop_assert_eq!(n, -1),
        }
    }

    /// The kernel's checks and the Rust model give the same status for any parameter block.
    #[test]
    fn parameter_checks_agree(c in call(), l in limits()) {
        prop_assert_eq!(c_check(&c, &l), c.check(&l), "{:?} {:?}", c, l);
    }

    #[test]
    fn mapping_types_agree(prot in small(), orig in 0u32..6) {
        let mut out = u32::MAX;
        // SAFETY: `out` is a live local.
        let st = unsafe { gasan_prot_mapping_type(prot, orig, &mut out) };
        match kmod_check::prot_mapping_type(prot, orig) {
            Ok(t) => { prop_assert_eq!(st, 0); prop_assert_eq!(out, t); }
            Err(e) => prop_assert_eq!(st, e),
        }
    }
}

/// Every malformed call of the self-test is refused by the kernel's C checks with the status the
/// table states (the module must give the same on hardware).
#[test]
fn c_checks_refuse_every_self_test_case() {
    for max_va in [0, 1u64 << 47, 1 << 49] {
        let l = Limits { pool_base: 0x7f00_0000_0000, pool_length: 1 << 34, max_va };
        for k in kmod_check::malformed_cases(&l) {
            assert_eq!(c_check(&k.call, &l), k.expect, "{} {} (max_va {max_va:#x})", k.call.name(), k.what);
        }
        for k in kmod_check::no_pool_cases(l.pool_base) {
            let none = Limits { pool_base: 0, pool_length: 0, max_va };
            assert_eq!(c_check(&k.call, &none), k.expect, "{} {}", k.call.name(), k.what);
        }
    }
}

/// The fixes the issue named, each as a check the old C code failed.
#[test]
fn c_checks_refuse_what_the_old_code_accepted() {
    let l = Limits { pool_base: 0x7f00_0000_0000, pool_length: 1 << 34, max_va: 1 << 49 };
    // base 0 (the old gasan_check_aligned accepted it; upstream's uvm_api_range_invalid does not)
    let p = UVM_GASAN_RESERVE_POOL_PARAMS { base: 0, length: 2 << 20, ..Default::default() };
    // SAFETY: live locals of the C layout.
    assert_eq!(unsafe { gasan_validate_reserve_pool(&p, &Limits { pool_length: 0, ..l },) }, UVM_GASAN_ST_INVALID_ADDRESS);
    // non-zero padding (never looked at before)
    let p = UVM_GASAN_SET_PROTECTION_PARAMS { base: l.pool_base, length: 4096, pageSize: 4096, prot: 0, pad0: 1, ..Default::default() };
    // SAFETY: live locals of the C layout.
    assert_eq!(unsafe { gasan_validate_set_protection(&p, &l) }, UVM_GASAN_ST_INVALID_ARGUMENT);
    // read-write of a read-only mapping (the old code remapped it with the default, writable type)
    let mut out = 0;
    // SAFETY: `out` is a live local the C function writes.
    assert_eq!(unsafe { gasan_prot_mapping_type(UVM_GASAN_PROT_RW, 3, &mut out) }, UVM_GASAN_ST_INVALID_ACCESS_TYPE);
    // SAFETY: `out` is a live local the C function writes.
    assert_eq!(unsafe { gasan_prot_mapping_type(UVM_GASAN_PROT_RW, 1, &mut out) }, 0);
    assert_eq!(out, 1, "read-write goes back to the original read-write-atomic type, not the default");
}
