//! Geometry of pitched 2D / 3D copies and sets: the device bytes they touch, for the host API
//! checks. The first touched byte is row `y` of slice `z` at column `x`; the last is the end of the
//! last row, so the span [first, last] holds exactly the bytes of one pitched allocation that the
//! call reads or writes (rows in between lie inside it).

/// `CUmemorytype` values.
pub const MEMORYTYPE_DEVICE: u32 = 2;
pub const MEMORYTYPE_UNIFIED: u32 = 4;

/// `CUDA_MEMCPY2D` (cuda.h, 64-bit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: u32,
    pub src_host: usize,
    pub src_device: u64,
    pub src_array: usize,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: u32,
    pub dst_host: usize,
    pub dst_device: u64,
    pub dst_array: usize,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}
const _: () = assert!(std::mem::size_of::<Memcpy2D>() == 128);

/// `CUDA_MEMCPY3D` (cuda.h, 64-bit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: usize,
    pub src_device: u64,
    pub src_array: usize,
    pub reserved0: usize,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: usize,
    pub dst_device: u64,
    pub dst_array: usize,
    pub reserved1: usize,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}
const _: () = assert!(std::mem::size_of::<Memcpy3D>() == 200);

/// `CUDA_MEMCPY3D_PEER` is `CUDA_MEMCPY3D` with each side's context where the reserved words are,
/// so [`Memcpy3D`] reads it too (the fields it reads are at the same offsets, checked here).
mod peer_layout {
    use super::Memcpy3D;
    use cudarc::driver::sys::CUDA_MEMCPY3D_PEER as P;
    use std::mem::offset_of;
    const _: () = assert!(std::mem::size_of::<P>() == std::mem::size_of::<Memcpy3D>() && std::mem::align_of::<P>() == std::mem::align_of::<Memcpy3D>());
    const _: () =
        assert!(offset_of!(P, srcXInBytes) == offset_of!(Memcpy3D, src_x_in_bytes) && offset_of!(P, srcY) == offset_of!(Memcpy3D, src_y) && offset_of!(P, srcZ) == offset_of!(Memcpy3D, src_z));
    const _: () = assert!(offset_of!(P, srcMemoryType) == offset_of!(Memcpy3D, src_memory_type) && offset_of!(P, srcDevice) == offset_of!(Memcpy3D, src_device));
    const _: () = assert!(offset_of!(P, srcPitch) == offset_of!(Memcpy3D, src_pitch) && offset_of!(P, srcHeight) == offset_of!(Memcpy3D, src_height));
    const _: () =
        assert!(offset_of!(P, dstXInBytes) == offset_of!(Memcpy3D, dst_x_in_bytes) && offset_of!(P, dstY) == offset_of!(Memcpy3D, dst_y) && offset_of!(P, dstZ) == offset_of!(Memcpy3D, dst_z));
    const _: () = assert!(offset_of!(P, dstMemoryType) == offset_of!(Memcpy3D, dst_memory_type) && offset_of!(P, dstDevice) == offset_of!(Memcpy3D, dst_device));
    const _: () = assert!(offset_of!(P, dstPitch) == offset_of!(Memcpy3D, dst_pitch) && offset_of!(P, dstHeight) == offset_of!(Memcpy3D, dst_height));
    const _: () =
        assert!(offset_of!(P, WidthInBytes) == offset_of!(Memcpy3D, width_in_bytes) && offset_of!(P, Height) == offset_of!(Memcpy3D, height) && offset_of!(P, Depth) == offset_of!(Memcpy3D, depth));
}

/// One side of a copy that touches device memory: base pointer and the span it touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpan {
    pub addr: u64,
    pub len: u64,
}

/// Span of a 3D box: `width` bytes × `height` rows × `depth` slices starting at (x, y, z) in memory
/// with row `pitch` and `slice_rows` rows per slice. `None` when the box is empty; saturates on
/// absurd geometry so the check reports rather than wraps.
#[allow(clippy::too_many_arguments)] // the nine numbers of a CUDA 3D copy's geometry, named as CUDA names them
pub fn box_span(base: u64, x: u64, y: u64, z: u64, pitch: u64, slice_rows: u64, width: u64, height: u64, depth: u64) -> Option<DeviceSpan> {
    if width == 0 || height == 0 || depth == 0 {
        return None;
    }
    let row = |r: u64| r.saturating_mul(pitch);
    let first_row = z.saturating_mul(slice_rows).saturating_add(y);
    let last_row = (z.saturating_add(depth - 1)).saturating_mul(slice_rows).saturating_add(y).saturating_add(height - 1);
    let start = base.saturating_add(row(first_row)).saturating_add(x);
    let end = base.saturating_add(row(last_row)).saturating_add(x).saturating_add(width);
    Some(DeviceSpan { addr: start, len: end - start })
}

fn is_device(t: u32) -> bool {
    t == MEMORYTYPE_DEVICE || t == MEMORYTYPE_UNIFIED
}

/// A copy descriptor: the device spans of its two sides.
pub trait CopyDescriptor {
    /// (source span, destination span) for the sides that are device memory.
    fn spans(&self) -> (Option<DeviceSpan>, Option<DeviceSpan>);
}

impl CopyDescriptor for Memcpy2D {
    fn spans(&self) -> (Option<DeviceSpan>, Option<DeviceSpan>) {
        let (w, h) = (self.width_in_bytes as u64, self.height as u64);
        let src = is_device(self.src_memory_type).then(|| box_span(self.src_device, self.src_x_in_bytes as u64, self.src_y as u64, 0, self.src_pitch as u64, 0, w, h, 1)).flatten();
        let dst = is_device(self.dst_memory_type).then(|| box_span(self.dst_device, self.dst_x_in_bytes as u64, self.dst_y as u64, 0, self.dst_pitch as u64, 0, w, h, 1)).flatten();
        (src, dst)
    }
}

impl CopyDescriptor for Memcpy3D {
    fn spans(&self) -> (Option<DeviceSpan>, Option<DeviceSpan>) {
        let (w, h, d) = (self.width_in_bytes as u64, self.height as u64, self.depth as u64);
        let src = is_device(self.src_memory_type)
            .then(|| box_span(self.src_device, self.src_x_in_bytes as u64, self.src_y as u64, self.src_z as u64, self.src_pitch as u64, self.src_height as u64, w, h, d))
            .flatten();
        let dst = is_device(self.dst_memory_type)
            .then(|| box_span(self.dst_device, self.dst_x_in_bytes as u64, self.dst_y as u64, self.dst_z as u64, self.dst_pitch as u64, self.dst_height as u64, w, h, d))
            .flatten();
        (src, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The span is exactly the hull of the bytes a naive element-by-element copy touches.
        #[test]
        fn span_is_the_hull_of_touched_bytes(
            x in 0u64..64, y in 0u64..8, z in 0u64..4, extra in 0u64..64, rows_extra in 0u64..4,
            w in 1u64..64, h in 1u64..6, d in 1u64..4,
        ) {
            let pitch = x + w + extra;
            let slice_rows = y + h + rows_extra;
            let base = 0x1000_0000u64;
            let s = box_span(base, x, y, z, pitch, slice_rows, w, h, d).unwrap();
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for k in 0..d {
                for r in 0..h {
                    let row_start = base + ((z + k) * slice_rows + y + r) * pitch + x;
                    lo = lo.min(row_start);
                    hi = hi.max(row_start + w);
                }
            }
            prop_assert_eq!(s, DeviceSpan { addr: lo, len: hi - lo });
        }
    }

    #[test]
    fn host_and_array_sides_are_not_checked_and_empty_copies_touch_nothing() {
        let mut c = Memcpy2D { src_memory_type: 1, dst_memory_type: MEMORYTYPE_DEVICE, dst_device: 0x1000, dst_pitch: 512, width_in_bytes: 100, height: 3, ..Default::default() };
        assert_eq!(c.spans(), (None, Some(DeviceSpan { addr: 0x1000, len: 2 * 512 + 100 })));
        c.dst_memory_type = 3;
        assert_eq!(c.spans(), (None, None));
        c.dst_memory_type = MEMORYTYPE_DEVICE;
        c.height = 0;
        assert_eq!(c.spans(), (None, None));
        assert_eq!(box_span(0, 0, 0, 0, u64::MAX, 0, 1, 3, 1).map(|s| s.addr), Some(0));
    }

    #[test]
    fn a_peer_descriptor_is_read_with_its_contexts_left_out() {
        use cudarc::driver::sys::{CUmemorytype, CUDA_MEMCPY3D_PEER};
        let device = CUmemorytype::CU_MEMORYTYPE_DEVICE;
        let null = std::ptr::null_mut();
        let p = CUDA_MEMCPY3D_PEER {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: device,
            srcHost: std::ptr::null(),
            srcDevice: 0x10_0000,
            srcArray: null as _,
            // The contexts sit where CUDA_MEMCPY3D's reserved words are; nothing reads them.
            srcContext: 0x1111 as _,
            srcPitch: 256,
            srcHeight: 4,
            dstXInBytes: 16,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: device,
            dstHost: null,
            dstDevice: 0x20_0000,
            dstArray: null as _,
            dstContext: 0x2222 as _,
            dstPitch: 512,
            dstHeight: 8,
            WidthInBytes: 100,
            Height: 3,
            Depth: 2,
        };
        // SAFETY: same size, alignment and field offsets (peer_layout's assertions).
        let m: &Memcpy3D = unsafe { &*(&p as *const CUDA_MEMCPY3D_PEER).cast() };
        let src = box_span(0x10_0000, 0, 0, 0, 256, 4, 100, 3, 2);
        let dst = box_span(0x20_0000, 16, 0, 0, 512, 8, 100, 3, 2);
        assert_eq!(m.spans(), (src, dst));
        assert_eq!(src, Some(DeviceSpan { addr: 0x10_0000, len: 4 * 256 + 2 * 256 + 100 }));
    }
}
