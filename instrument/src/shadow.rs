//! The GASan shadow encodings (one shadow byte per 128- or 256-byte granule), stated once here and
//! used by the PTX generator (the check), the runtime (poisoning) and the property tests.
//!
//! * GASan-128 (scale 7): `s` = number of accessible leading bytes (0..=128). Bad iff `s <= off`.
//! * GASan-256 (scale 8): `s` = number of accessible leading bytes for `s <= 2`, `s + 1` above
//!   (`255`: the whole granule). A granule with exactly [`S8_UNENCODABLE`] (3) accessible bytes
//!   cannot be encoded, so [`Scale::encodable_size`] rounds such allocation sizes up by one byte.
//!   Bad iff `accessible(s) <= off`. The gap sits at 3 rather than at 1 (GASan's `n + 1` form) so
//!   that the classic off-by-one, a byte one past a buffer of 2^k + 1 bytes, is caught: sizes of
//!   256·k + 3 bytes are far rarer than 256·k + 1 (257, 513, 1025), and no buffer of 2-byte or
//!   wider elements has either size.
//!
//! In both, `off = (addr & (granule - 1)) + width - 1`, and an access never spans two granules
//! (allocations start granule-aligned and PTX accesses are naturally aligned, ≤ 16 bytes).

/// Shadow scale: log2 of the granule size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scale {
    /// GASan-128.
    S7,
    /// GASan-256.
    S8,
}

impl Scale {
    pub fn from_shift(shift: u32) -> Option<Self> {
        match shift {
            7 => Some(Self::S7),
            8 => Some(Self::S8),
            _ => None,
        }
    }
    pub const fn shift(self) -> u32 {
        match self {
            Self::S7 => 7,
            Self::S8 => 8,
        }
    }
    pub const fn granule(self) -> u64 {
        1 << self.shift()
    }

    /// Shadow byte of a granule whose first `accessible` bytes may be touched (clamped to the
    /// granule). Under S8 [`S8_UNENCODABLE`] accessible bytes are encoded as one more (see
    /// [`Self::encodable_size`]).
    pub fn encode(self, accessible: u64) -> u8 {
        let k = accessible.min(self.granule());
        match self {
            Self::S7 => k as u8,
            Self::S8 if k <= S8_UNENCODABLE => k as u8,
            Self::S8 => (k - 1) as u8,
        }
    }

    /// Number of accessible leading bytes that shadow byte `s` grants.
    pub fn accessible(self, s: u8) -> u64 {
        match self {
            Self::S7 => u64::from(s).min(128),
            Self::S8 if u64::from(s) < S8_UNENCODABLE => u64::from(s),
            Self::S8 => u64::from(s) + 1,
        }
    }

    /// The check the instrumented code performs: is an access of `width` bytes at `addr`, whose
    /// granule has shadow byte `s`, bad?
    pub fn is_bad(self, s: u8, addr: u64, width: u32) -> bool {
        let off = (addr & (self.granule() - 1)) + u64::from(width) - 1;
        self.accessible(s) <= off
    }

    /// The same test in the form the checked PTX computes it (32-bit, one comparison): see
    /// [`FastTest`]. Equal to [`Self::is_bad`] for every shadow byte and naturally aligned access
    /// (property-tested against the byte-exact model).
    pub fn fast_test(self, width: u32) -> FastTest {
        match self {
            Self::S7 => FastTest { addend: width - 1, at_least_one: false, clamp: false },
            // Bad iff `s <= t(off)`, `t(x) = x - [x >= 3]` (the largest `s` granting at most `x`
            // bytes). An access of 4 or more bytes has off >= 3: `off - 1`.
            Self::S8 if width >= 4 => FastTest { addend: width - 2, at_least_one: false, clamp: false },
            // A naturally aligned 2-byte access starts at an even offset o, off = o + 1:
            // t = max(o, 1).
            Self::S8 if width == 2 => FastTest { addend: 0, at_least_one: true, clamp: false },
            // Bytes (and any other width): t itself, `min(off, max(off - 1, 2))`.
            Self::S8 => FastTest { addend: width - 1, at_least_one: false, clamp: true },
        }
    }

    /// Alignment (and largest size) of a pool for the aligned-pool check: within such a pool the
    /// shadow index `(addr - base) >> shift` is the low 32 bits of `addr >> shift`, and the in-pool
    /// test needs only the high 32 bits of the address.
    pub const fn aligned_pool_alignment(self) -> u64 {
        1 << (32 + self.shift())
    }

    /// Can checks use the aligned-pool form for a pool at `base` of `size` bytes?
    pub fn pool_allows_aligned_check(self, base: u64, size: u64) -> bool {
        let a = self.aligned_pool_alignment();
        size != 0 && base.is_multiple_of(a) && size <= a && size.is_multiple_of(1 << 32)
    }

    /// What the aligned-pool check computes for `addr` (when [`Self::pool_allows_aligned_check`]):
    /// `Some(shadow index)` when it treats the address as in the pool. In 32-bit arithmetic, as
    /// emitted: `(hi(addr) - hi(base)) < hi(size)`, index `lo(addr >> shift)`.
    pub fn aligned_probe(self, addr: u64, base: u64, size: u64) -> Option<u64> {
        let in_pool = ((addr >> 32) as u32).wrapping_sub((base >> 32) as u32) < (size >> 32) as u32;
        in_pool.then_some(u64::from((addr >> self.shift()) as u32))
    }

    /// Size the allocator must make accessible so that the encoding is exact: S8 cannot express a
    /// last granule with [`S8_UNENCODABLE`] accessible bytes, so such sizes grow by one (the
    /// documented blind spot).
    pub fn encodable_size(self, size: u64) -> u64 {
        match self {
            Self::S8 if size % 256 == S8_UNENCODABLE => size + 1,
            _ => size,
        }
    }

    /// Number of shadow bytes covering `len` bytes of pool starting at a granule boundary.
    pub fn shadow_len(self, len: u64) -> u64 {
        len.div_ceil(self.granule())
    }

    /// Shadow bytes for a region of `len` bytes (granule-aligned start) whose first `size` bytes are
    /// accessible and the rest (redzone) are not.
    pub fn region_shadow(self, size: u64, len: u64) -> Vec<u8> {
        let g = self.granule();
        (0..self.shadow_len(len)).map(|i| self.encode(size.saturating_sub(i * g))).collect()
    }
}

/// The one count of accessible bytes a GASan-256 shadow byte cannot express (a granule's first
/// 3 bytes are encoded as its first 4).
pub const S8_UNENCODABLE: u64 = 3;

/// Shadow value the check uses for addresses outside the pool: it passes every naturally aligned
/// access under both encodings, so an out-of-pool address needs no predicate after the load.
pub const OUT_OF_POOL_SHADOW: u8 = 255;

/// `bad iff s <= lim`, with `lim = (addr & (granule - 1)) + addend`, raised to at least 1 when
/// `at_least_one`, and lowered by one from 3 up when `clamp` (`min(lim, max(lim - 1, 2))`, the
/// subtraction wrapping at 0 so that 0 stays 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastTest {
    pub addend: u32,
    pub at_least_one: bool,
    pub clamp: bool,
}

impl FastTest {
    pub fn is_bad(self, scale: Scale, s: u8, addr: u64) -> bool {
        u32::from(s) <= self.limit(scale, addr)
    }

    /// `lim`: the largest shadow byte that is bad for this access at `addr`.
    pub fn limit(self, scale: Scale, addr: u64) -> u32 {
        let mut lim = (addr as u32 & (scale.granule() as u32 - 1)).wrapping_add(self.addend);
        if self.at_least_one {
            lim = lim.max(1);
        }
        if self.clamp {
            lim = lim.min(lim.wrapping_sub(1).max(S8_UNENCODABLE as u32 - 1));
        }
        lim
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s7_partial_granule() {
        let s = Scale::S7.encode(100);
        assert!(!Scale::S7.is_bad(s, 96, 4));
        assert!(Scale::S7.is_bad(s, 100, 4));
        assert!(Scale::S7.is_bad(Scale::S7.encode(0), 0, 1));
        assert!(!Scale::S7.is_bad(Scale::S7.encode(128), 112, 16));
    }

    #[test]
    fn s8_partial_granule() {
        let s = Scale::S8.encode(100);
        assert!(!Scale::S8.is_bad(s, 96, 4));
        assert!(Scale::S8.is_bad(s, 100, 4));
        assert!(!Scale::S8.is_bad(Scale::S8.encode(256), 240, 16));
        assert!(Scale::S8.is_bad(0, 0, 1));
        // A byte one past 257 bytes is caught; 259 bytes grow to 260.
        assert_eq!(Scale::S8.encodable_size(257), 257);
        assert!(Scale::S8.is_bad(Scale::S8.encode(1), 257, 1));
        assert!(!Scale::S8.is_bad(Scale::S8.encode(1), 256, 1));
        assert_eq!(Scale::S8.encodable_size(259), 260);
        for k in [0, 1, 2, 4, 100, 256] {
            assert_eq!(Scale::S8.accessible(Scale::S8.encode(k)), k);
        }
    }
}
