//! Mapping arithmetic, kept free of any backend: alignment, chunk spans, shadow ranges, alias offsets.
//! The kernel patch mirrors these functions in C (`kmod-patch/src/gasan_map_math.c`).

use crate::UvmError;

/// `[va, va+len)` must be non-empty, `gran`-aligned on both ends and not wrap.
pub fn check_aligned(va: u64, len: u64, gran: u64) -> Result<(), UvmError> {
    if len == 0 || !gran.is_power_of_two() || va % gran != 0 || len % gran != 0 || va.checked_add(len).is_none() {
        return Err(UvmError::Misaligned { va, len, gran });
    }
    Ok(())
}

/// Smallest `gran`-aligned range covering `[va, va+len)`.
pub fn align_out(va: u64, len: u64, gran: u64) -> Option<(u64, u64)> {
    if !gran.is_power_of_two() {
        return None;
    }
    let start = va & !(gran - 1);
    let end = va.checked_add(len)?.checked_add(gran - 1)? & !(gran - 1);
    Some((start, end - start))
}

/// Is `[va, va+len)` inside `[base, base+size)`?
pub fn contains(base: u64, size: u64, va: u64, len: u64) -> bool {
    va >= base && va.checked_add(len).is_some_and(|e| e <= base + size)
}

/// Shadow bytes `[start, start+len)` describing pool range `[va, va+len)` at scale `shift`.
pub fn shadow_range(pool_base: u64, shadow_base: u64, shift: u32, va: u64, len: u64) -> (u64, u64) {
    let first = (va - pool_base) >> shift;
    let last = (va - pool_base + len).div_ceil(1 << shift);
    (shadow_base + first, last - first)
}

/// Indices of the shadow chunks (each `gran` bytes of shadow) that describe pool range `[va, va+len)`.
pub fn shadow_chunks(pool_base: u64, shift: u32, gran: u64, va: u64, len: u64) -> std::ops::Range<u64> {
    let (s, l) = shadow_range(pool_base, 0, shift, va, len);
    (s / gran)..(s + l).div_ceil(gran)
}

/// The chunk-sized pieces of an aligned range.
pub fn chunk_spans(va: u64, len: u64, gran: u64) -> impl Iterator<Item = u64> {
    (0..len / gran).map(move |i| va + i * gran)
}

/// Address of `va`'s alias in an alias range that mirrors `[src, src+len)` at `alias_base`.
pub fn alias_addr(src: u64, alias_base: u64, va: u64) -> u64 {
    alias_base + (va - src)
}

/// Shadow VA size for a pool of `pool_size` bytes, rounded up to the granularity.
pub fn shadow_size(pool_size: u64, shift: u32, gran: u64) -> u64 {
    (pool_size >> shift).div_ceil(gran) * gran
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn shadow_range_matches_reference(off in 0u64..1 << 30, len in 1u64..1 << 24, shift in 7u32..=8) {
            let base = 0x1000_0000_0000u64;
            let (s, l) = shadow_range(base, 0x2000_0000_0000, shift, base + off, len);
            // Reference: the set of granule indices touched by the bytes.
            let first = off / (1 << shift);
            let last = (off + len - 1) / (1 << shift);
            prop_assert_eq!(s, 0x2000_0000_0000 + first);
            prop_assert_eq!(l, last - first + 1);
        }

        #[test]
        fn align_out_covers(va in 0u64..1 << 46, len in 1u64..1 << 30, g in 12u32..=21) {
            let gran = 1u64 << g;
            let (s, l) = align_out(va, len, gran).unwrap();
            prop_assert!(s <= va && s + l >= va + len);
            prop_assert!(check_aligned(s, l, gran).is_ok());
            prop_assert!(l - len < 2 * gran);
        }
    }
}
