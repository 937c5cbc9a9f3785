//! gasan-ptx's global allocator: mimalloc (v2, through `libmimalloc-sys`), as the `mimalloc`
//! crate's `MiMalloc` but asking mimalloc's plain `mi_malloc`/`mi_realloc` wherever they already
//! give the alignment asked, and its aligned entry points only where they may not.
//!
//! Why a crate of its own: the rewriter makes some 180,000 small allocations on the corpus of
//! `instrument/results.md` and 440,000 on its 2.7 MB module; `MiMalloc` sends every one through
//! `mi_malloc_aligned`, some 47 instructions an allocation before mimalloc's own fast path (which
//! tests the alignment and then calls the plain one). The plain path needs `unsafe` calls, which
//! `gasan-ptx` and the `gasan-instrument` library forbid; here they are the whole crate, each
//! block saying why it is sound.
//!
//! When the plain path is enough: mimalloc allocates a block whose size is at least its alignment
//! and at most `MI_MAX_ALIGN_SIZE` (16 bytes on every 64-bit target mimalloc builds for) aligned
//! to that alignment. That is the rule its own aligned allocator relies on
//! (`mi_malloc_is_naturally_aligned` in `alloc-aligned.c`: "use regular allocation if it is
//! guaranteed to fit the alignment constraints"), and it holds because small blocks come in
//! sizes rounded up to 16 bytes (8 for the 8-byte class) from page starts aligned to the block
//! size (`_mi_segment_page_start_from_slice`), larger ones at multiples of 16.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use libmimalloc_sys as ffi;

/// The largest alignment `mi_malloc` gives every block at least as large as it (mimalloc's
/// `MI_MAX_ALIGN_SIZE`, `sizeof(max_align_t)` on x86-64 and aarch64).
const MI_MAX_ALIGN_SIZE: usize = 16;

/// Whether a block of `size` bytes from mimalloc's plain path is aligned to `align` (a power of
/// two): mimalloc's own `mi_malloc_is_naturally_aligned` for alignments up to
/// `MI_MAX_ALIGN_SIZE`.
#[inline]
pub fn plain_path_aligns(size: usize, align: usize) -> bool {
    align <= MI_MAX_ALIGN_SIZE && align <= size
}

/// mimalloc as a global allocator, with the plain path where [`plain_path_aligns`] holds.
pub struct GasanAlloc;

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of either
// path); each method keeps `GlobalAlloc`'s contract as its own block says.
unsafe impl GlobalAlloc for GasanAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain_path_aligns(layout.size(), layout.align()) {
            // SAFETY: `mi_malloc` has no precondition; it returns null or a block of at least
            // `layout.size()` bytes, aligned to `layout.align()` because the alignment is at most
            // MI_MAX_ALIGN_SIZE and at most the size (the module doc).
            unsafe { ffi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: `layout.align()` is a power of two (`Layout`'s invariant), which is all
            // `mi_malloc_aligned` asks.
            unsafe { ffi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain_path_aligns(layout.size(), layout.align()) {
            // SAFETY: as `alloc`'s plain path; `mi_zalloc` zeroes the block.
            unsafe { ffi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: as `alloc`'s aligned path; `mi_zalloc_aligned` zeroes the block.
            unsafe { ffi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned (GlobalAlloc's contract), so
        // one of mimalloc's, which `mi_free` takes whichever entry point made it.
        unsafe { ffi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain_path_aligns(new_size, layout.align()) {
            // SAFETY: `ptr` is a live block of this allocator (the caller's contract), so one of
            // mimalloc's. `mi_realloc` either keeps it where it is (still aligned to
            // `layout.align()`, as when it was made) or moves its contents to a new
            // `mi_malloc(new_size)` block, aligned because the alignment is at most
            // MI_MAX_ALIGN_SIZE and at most `new_size`.
            unsafe { ffi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            // SAFETY: as above; `mi_realloc_aligned` keeps or gives the alignment asked, a power
            // of two.
            unsafe { ffi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8 }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// Every block of either path is aligned as asked, for the sizes and alignments the
    /// rewriter uses and the boundaries of the plain path's rule.
    #[test]
    fn blocks_are_aligned_as_asked() {
        let a = GasanAlloc;
        let mut live = Vec::new();
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=300).chain([1000, 4095, 4096, 70_000, 1 << 20]) {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: `layout`'s size is not zero.
                let p = unsafe { a.alloc(layout) };
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                // SAFETY: `p` is a live block of `layout`'s size.
                unsafe { p.write_bytes(0xa5, size) };
                // SAFETY: `p` was made with `layout`; the new size is not zero.
                let q = unsafe { a.realloc(p, layout, size * 3) };
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                // SAFETY: `q` holds the first `size` bytes written above.
                assert_eq!(unsafe { *q.add(size - 1) }, 0xa5);
                live.push((q, Layout::from_size_align(size * 3, align).unwrap()));
                // SAFETY: as for `alloc`.
                let z = unsafe { a.alloc_zeroed(layout) };
                assert_eq!(z as usize % align, 0, "zeroed size {size} align {align}");
                // SAFETY: `z` is a live block of `size` bytes.
                assert!(unsafe { core::slice::from_raw_parts(z, size) }.iter().all(|&b| b == 0));
                live.push((z, layout));
            }
        }
        for (p, layout) in live {
            // SAFETY: each block is live and was made (or last resized) with `layout`.
            unsafe { a.dealloc(p, layout) };
        }
    }
}
