//! Tensor maps (TMA, `cp.async.bulk.tensor`): the rewriter leaves TMA copies unchecked because a
//! tensor map's global extent is fixed on the host when it is encoded, so the host checks it
//! there. `cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col` and `cuTensorMapEncodeIm2colWide`
//! check the bytes the map can reach (its base address, dimensions, strides and element size,
//! [`global_extent`]) against the allocation the base points into, as a host copy's range is
//! checked; `cuTensorMapReplaceAddress` checks the new base with the extent its map was encoded
//! with. A map that leaves its allocation is reported (heap-buffer-overflow, by host call) and
//! still encoded: encoding touches no memory, and a kernel may never reach the bad part.
//!
//! Triton resolves these entry points with `dlsym` on its libcuda handle (its
//! `backends/nvidia/driver.c`) and cudart with `cuGetProcAddress`: both reach these hooks
//! through [`crate::interpose`], like every hook of [`super::table`].

use super::*;
use cudarc::driver::sys::CUtensorMap;
use std::collections::HashMap;
use std::sync::Mutex;

/// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
const INTERLEAVE_NONE: u32 = 0;

/// Bits per element of a `CUtensorMapDataType`, for the types whose global layout is one element
/// after another; `None` for the padded sub-byte types (16U4_ALIGN16B, 16U6_ALIGN16B) and values
/// this build does not know.
pub fn element_bits(data_type: u32) -> Option<u64> {
    Some(match data_type {
        0 => 8,                         // UINT8
        1 | 6 | 9 => 16,                // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10 | 11 | 12 => 32, // UINT32, INT32, FLOAT32, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ
        4 | 5 | 8 => 64,                // UINT64, INT64, FLOAT64
        13 => 4,                        // 16U4_ALIGN8B: sixteen 4-bit elements in 8 bytes
        _ => return None,
    })
}

/// How many bytes from its base a tensor map can reach: the last element's offset plus its size.
/// `dims[i]` elements in dimension `i`; `strides[i - 1]` bytes between consecutive indices of
/// dimension `i >= 1` (dimension 0 is packed, as cuda.h defines `globalStrides`). Every element
/// lies in `[base, base + extent)` and the first and last bytes of that range are elements', so the
/// map stays in an allocation exactly when that range does.
///
/// `None` when nothing can be said soundly: an unknown or padded element type, an interleaved
/// layout, a dimension of 0, too few strides, or an extent past 64 bits (the driver refuses all of
/// these but the first two).
pub fn global_extent(data_type: u32, dims: &[u64], strides: &[u64], interleave: u32) -> Option<u64> {
    let bits = element_bits(data_type)?;
    if interleave != INTERLEAVE_NONE || dims.is_empty() || strides.len() + 1 < dims.len() || dims.contains(&0) {
        return None;
    }
    let inner = dims[0].checked_mul(bits)?.div_ceil(8);
    dims[1..].iter().zip(strides).try_fold(inner, |acc, (&d, &s)| acc.checked_add((d - 1).checked_mul(s)?))
}

/// How many maps' extents are kept for `cuTensorMapReplaceAddress` (a replaced map's base beyond
/// them goes unchecked).
const MAX_REMEMBERED_MAPS: usize = 4096;

/// Extents of the maps encoded so far, by the map's host address (for `cuTensorMapReplaceAddress`).
fn extents() -> &'static Mutex<HashMap<usize, u64>> {
    static M: std::sync::OnceLock<Mutex<HashMap<usize, u64>>> = std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

/// [`global_extent`] of an encode call's arguments; `None` also for arguments the driver refuses
/// itself (a rank outside 1..=5, null arrays).
fn extent_of(data_type: u32, rank: u32, dims: *const u64, strides: *const u64, interleave: u32) -> Option<u64> {
    if dims.is_null() || !(1..=5).contains(&rank) || (rank > 1 && strides.is_null()) {
        return None;
    }
    let rank = rank as usize;
    // SAFETY: cuTensorMapEncode*'s contract: `globalDim` holds `tensorRank` entries and
    // `globalStrides` `tensorRank - 1` (rank checked to be 1..=5 above, the driver's range; the
    // arrays non-null).
    let (dims, strides) = unsafe { (std::slice::from_raw_parts(dims, rank), if rank > 1 { std::slice::from_raw_parts(strides, rank - 1) } else { &[][..] }) };
    global_extent(data_type, dims, strides, interleave)
}

/// Checks a map about to be encoded at `map` with `extent` (kept for `cuTensorMapReplaceAddress`).
fn check_encode(call: &str, map: *mut CUtensorMap, addr: *mut c_void, extent: Option<u64>) {
    let Some(extent) = extent else {
        crate::state::log(2, || format!("{call}: extent not checked (element type, layout or arguments)"));
        return;
    };
    if !map.is_null() {
        let mut m = extents().lock().unwrap_or_else(|e| e.into_inner());
        // Frameworks encode a map per launch into fresh buffers: forget old ones rather than grow.
        if m.len() >= MAX_REMEMBERED_MAPS {
            m.clear();
        }
        m.insert(map as usize, extent);
    }
    check(call, addr as Dptr, extent);
}

fn check(call: &str, addr: Dptr, extent: u64) {
    if addr != 0 && usize::try_from(extent).is_ok() {
        super::copies::check_range(call, addr, extent as usize, false);
    }
}

hooks! {
    real;
    cuTensorMapEncodeTiled (map: *mut CUtensorMap, data_type: u32, rank: u32, addr: *mut c_void, dims: *const u64, strides: *const u64, box_dim: *const u32, element_strides: *const u32, interleave: u32, swizzle: u32, l2: u32, oob_fill: u32) {
        check_encode("cuTensorMapEncodeTiled", map, addr, extent_of(data_type, rank, dims, strides, interleave));
        real(map, data_type, rank, addr, dims, strides, box_dim, element_strides, interleave, swizzle, l2, oob_fill)
    }
    cuTensorMapEncodeIm2col (map: *mut CUtensorMap, data_type: u32, rank: u32, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: *const i32, upper: *const i32, channels: u32, pixels: u32, element_strides: *const u32, interleave: u32, swizzle: u32, l2: u32, oob_fill: u32) {
        check_encode("cuTensorMapEncodeIm2col", map, addr, extent_of(data_type, rank, dims, strides, interleave));
        real(map, data_type, rank, addr, dims, strides, lower, upper, channels, pixels, element_strides, interleave, swizzle, l2, oob_fill)
    }
    cuTensorMapEncodeIm2colWide (map: *mut CUtensorMap, data_type: u32, rank: u32, addr: *mut c_void, dims: *const u64, strides: *const u64, lower: i32, upper: i32, channels: u32, pixels: u32, element_strides: *const u32, interleave: u32, mode: u32, swizzle: u32, l2: u32, oob_fill: u32) {
        check_encode("cuTensorMapEncodeIm2colWide", map, addr, extent_of(data_type, rank, dims, strides, interleave));
        real(map, data_type, rank, addr, dims, strides, lower, upper, channels, pixels, element_strides, interleave, mode, swizzle, l2, oob_fill)
    }
    cuTensorMapReplaceAddress (map: *mut CUtensorMap, addr: *mut c_void) {
        let extent = extents().lock().unwrap_or_else(|e| e.into_inner()).get(&(map as usize)).copied();
        if let Some(extent) = extent {
            check("cuTensorMapReplaceAddress", addr as Dptr, extent);
        }
        real(map, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every element's bytes `(offset, length)` from the base, enumerated: the extent's definition
    /// without its arithmetic.
    fn every_element(bits: u64, dims: &[u64], strides: &[u64]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut idx = vec![0u64; dims.len()];
        loop {
            let off: u64 = (idx[0] * bits) / 8 + idx[1..].iter().zip(strides).map(|(i, s)| i * s).sum::<u64>();
            out.push((off, bits.div_ceil(8)));
            let mut k = 0;
            loop {
                if k == dims.len() {
                    return out;
                }
                idx[k] += 1;
                if idx[k] < dims[k] {
                    break;
                }
                idx[k] = 0;
                k += 1;
            }
        }
    }

    #[test]
    fn a_row_major_matrix_reaches_its_last_element() {
        // 128 x 64 bf16, rows 64 * 2 bytes apart: exactly 16 KiB.
        assert_eq!(global_extent(9, &[64, 128], &[128], 0), Some(128 * 64 * 2));
        // Rows padded to 256 bytes: the last row is not padded.
        assert_eq!(global_extent(9, &[64, 128], &[256], 0), Some(127 * 256 + 128));
        // A rank-1 map of 10 floats.
        assert_eq!(global_extent(7, &[10], &[], 0), Some(40));
        // Packed 4-bit elements: 33 of them take 17 bytes.
        assert_eq!(global_extent(13, &[33], &[], 0), Some(17));
    }

    #[test]
    fn what_cannot_be_measured_soundly_is_not() {
        assert_eq!(global_extent(14, &[16], &[], 0), None, "padded sub-byte type");
        assert_eq!(global_extent(99, &[16], &[], 0), None, "unknown type");
        assert_eq!(global_extent(7, &[16, 4], &[64], 1), None, "interleaved");
        assert_eq!(global_extent(7, &[16, 0], &[64], 0), None, "empty dimension");
        assert_eq!(global_extent(7, &[16, 4], &[], 0), None, "missing stride");
        assert_eq!(global_extent(8, &[u64::MAX, 2], &[16], 0), None, "past 64 bits");
    }

    proptest! {
        /// The extent is the end of the last element, so a map whose base lies in an allocation
        /// fits it exactly when every element does (the hook reports exactly those that do not).
        #[test]
        fn the_extent_is_where_the_last_element_ends(
            ty in prop::sample::select(vec![0u32, 1, 2, 4, 6, 7, 8, 9, 13]),
            dims in prop::collection::vec(1u64..6, 1..5),
            raw_strides in prop::collection::vec(0u64..200, 4),
            alloc_len in 1u64..4096,
            base_off in 0u64..4096,
        ) {
            let bits = element_bits(ty).unwrap();
            let strides: Vec<u64> = raw_strides[..dims.len() - 1].to_vec();
            let extent = global_extent(ty, &dims, &strides, 0).unwrap();
            let elements = every_element(bits, &dims, &strides);
            prop_assert_eq!(extent, elements.iter().map(|(o, n)| o + n).max().unwrap());
            let base_off = base_off % alloc_len;
            let extent_within = base_off + extent <= alloc_len;
            let every_element_within = elements.iter().all(|(o, n)| base_off + o + n <= alloc_len);
            prop_assert_eq!(extent_within, every_element_within);
        }
    }
}
