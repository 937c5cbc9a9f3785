//! The kernel patch's C mapping arithmetic (kmod-patch/src/gasan_map_math.c, compiled by build.rs)
//! against the Rust planner, on random inputs.

use gasan_uvm::plan;
use proptest::prelude::*;

extern "C" {
    fn gasan_check_aligned(va: u64, len: u64, gran: u64) -> i32;
    fn gasan_contains(base: u64, size: u64, va: u64, len: u64) -> i32;
    fn gasan_shadow_range(pool_base: u64, shadow_base: u64, shift: u32, va: u64, len: u64, start: *mut u64, out_len: *mut u64);
    fn gasan_alias_addr(src: u64, alias_base: u64, va: u64) -> u64;
    fn gasan_split_pages(va: u64, len: u64, out_va: *mut u64, out_size: *mut u64, max: i32) -> i32;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn alignment_and_containment_agree(va in any::<u64>(), len in any::<u64>(), g in 0u32..24, base in 0u64..1 << 47, size in 0u64..1 << 41) {
        let gran = 1u64 << g;
        prop_assert_eq!(unsafe { gasan_check_aligned(va, len, gran) } == 0, plan::check_aligned(va, len, gran).is_ok());
        let (va2, len2) = (va >> 17, len >> 20);
        prop_assert_eq!(unsafe { gasan_contains(base, size, va2, len2) } == 1, plan::contains(base, size, va2, len2));
    }

    #[test]
    fn shadow_ranges_agree(off in 0u64..1 << 40, len in 1u64..1 << 30, shift in 7u32..=8) {
        let base = 0x1000_0000_0000u64;
        let (mut s, mut l) = (0u64, 0u64);
        unsafe { gasan_shadow_range(base, 0x3_0000_0000, shift, base + off, len, &mut s, &mut l) };
        prop_assert_eq!((s, l), plan::shadow_range(base, 0x3_0000_0000, shift, base + off, len));
        prop_assert_eq!(unsafe { gasan_alias_addr(base, 1 << 50, base + off) }, plan::alias_addr(base, 1 << 50, base + off));
    }

    #[test]
    fn page_splits_agree(va_pages in 0u64..1 << 20, len_pages in 0u64..2048) {
        let (va, len) = (va_pages * 4096, len_pages * 4096);
        let mut vs = vec![0u64; 4096];
        let mut ss = vec![0u64; 4096];
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
}
