//! What reports say about an address and the block near it: the allocation (host stacks, where
//! its memory lives, a device-heap block's kernel coordinates) and the kind of bad access. The
//! allocator, the device heap and the side table describe addresses in these terms; the reports
//! print them. A leaf: it names no other module of the crate.

use gasan_instrument::shadow::Scale;
use gasan_uvm::Memory;

/// A captured host call stack (return addresses, innermost first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStack(pub Vec<usize>);

impl HostStack {
    /// Captures up to `depth` frames of the caller, skipping gasan's own frames.
    pub fn capture(depth: u32) -> Self {
        static TIMES: crate::call_times::CallTimes = crate::call_times::CallTimes::new("host stack capture", crate::call_times::Kind::Own);
        crate::call_times::timed(&TIMES, || Self::unwind(depth))
    }

    fn unwind(depth: u32) -> Self {
        let mut v = Vec::with_capacity(depth as usize);
        let mut skip = 3;
        backtrace::trace(|f| {
            if skip > 0 {
                skip -= 1;
                return true;
            }
            v.push(f.ip() as usize);
            v.len() < depth as usize
        });
        HostStack(v)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocInfo {
    pub id: u64,
    /// The address the program was given: the block's canonical address seen through its tag's
    /// window.
    pub start: u64,
    pub size: u64,
    /// End of the block's redzone (exclusive), in the same window as `start`.
    pub region_end: u64,
    /// The pointer tag: the pool window `start` lies in (0 with tagging off).
    pub tag: u64,
    pub large: bool,
    /// A managed block (`cuMemAllocManaged`): the CPU reads and writes it at the same address
    /// while its memory is [`Memory::Host`].
    pub managed: bool,
    /// Where its memory lives now: a managed block moves to [`Memory::Device`] while the GPU works
    /// on it ([`Allocator::migrate_managed`](crate::allocator::Allocator::migrate_managed)) and back when the CPU needs it.
    pub memory: Memory,
    pub live: bool,
    pub alloc_stack: HostStack,
    pub free_stack: Option<HostStack>,
    /// A block of the checked device heap (allocated by a kernel, not the host): its threads.
    pub heap_block: Option<HeapBlockOrigin>,
    /// Host memory the program registered (`cuMemHostRegister`): outside the pool, checked in
    /// kernels with `outside_checks=1` (crate::outside).
    pub registered: bool,
    /// A pitched block (`cuMemAllocPitch`): (bytes of each row the program asked for, pitch). The
    /// rest of each row is padding, poisoned like a redzone.
    pub rows: Option<(u64, u64)>,
}

impl AllocInfo {
    /// Pinned host memory (`cuMemHostAlloc`, `cuMemAllocHost`): host memory that is not managed.
    pub fn is_pinned_host(&self) -> bool {
        !self.managed && self.memory == Memory::Host
    }

    /// The memory space reports name: `device-heap` (in-kernel malloc), `managed`
    /// (`cuMemAllocManaged`), `host` (pinned host memory: `cuMemHostAlloc`, `cuMemAllocHost`) or
    /// `global`.
    pub fn space(&self) -> &'static str {
        match (self.heap_block.is_some(), self.managed, self.memory) {
            _ if self.registered => "host-registered",
            (true, _, _) => "device-heap",
            (false, true, _) => "managed",
            (false, false, Memory::Host) => "host",
            (false, false, Memory::Device) => "global",
        }
    }

    /// What reports call the block: "device-heap block", "managed region", "pinned host region"
    /// or "region".
    pub fn noun(&self) -> &'static str {
        match self.space() {
            "device-heap" => "device-heap block",
            "managed" => "managed region",
            "host" => "pinned host region",
            "host-registered" => "host-registered region",
            _ => "region",
        }
    }

    /// Accessible bytes of the block from `offset` on, when `offset` is in its row padding:
    /// `Some((row, bytes past the row's width))`.
    pub fn row_padding(&self, offset: u64) -> Option<(u64, u64)> {
        let (width, pitch) = self.rows?;
        (offset < self.size && offset % pitch >= width).then(|| (offset / pitch, offset % pitch - width))
    }

    /// Shadow bytes of the block's granules from its start: every row's width accessible, its
    /// padding and the block's tail past the last row poisoned (`size` encoded as
    /// `scale.encodable_size` would).
    pub fn shadow_image(&self, scale: Scale) -> Vec<u8> {
        let granule = scale.granule();
        let enc = scale.encodable_size(self.size.max(1));
        let mut img = vec![0u8; scale.shadow_len(enc) as usize];
        let mut mark = |from: u64, len: u64| {
            let (full, rest) = (len / granule, len % granule);
            let at = (from / granule) as usize;
            img[at..at + full as usize].fill(scale.encode(granule));
            if rest != 0 {
                img[at + full as usize] = scale.encode(rest);
            }
        };
        match self.rows {
            // Rows start granule-aligned (pitches are multiples of 512).
            Some((width, pitch)) if pitch.is_multiple_of(granule) && width < pitch => {
                for r in 0..self.size / pitch {
                    mark(r * pitch, scale.encodable_size(width));
                }
            }
            _ => mark(0, enc),
        }
        img
    }
}

/// Where an address is relative to the allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrKind {
    /// `distance` bytes past the end of the block.
    OverflowRight {
        distance: u64,
    },
    /// `distance` bytes before the start of the block.
    OverflowLeft {
        distance: u64,
    },
    UseAfterFree {
        offset: u64,
    },
    /// Inside a live block's accessible bytes.
    InBounds {
        offset: u64,
    },
    /// An access of several bytes that starts `offset` bytes inside a live block and runs `past`
    /// bytes beyond its end: an overflow, named (as ASan does) by its first inaccessible byte.
    StraddlesEnd {
        offset: u64,
        past: u64,
    },
    /// In the padding of row `row` of a pitched block, `past` bytes after the row's width.
    RowPadding {
        row: u64,
        past: u64,
    },
    /// Through tag window `ptr_tag`, the address reaches `offset` bytes into a block (live or
    /// freed: `alloc`) whose tag is `mem_tag`: a pointer that walked out of its own block.
    TagMismatch {
        ptr_tag: u64,
        mem_tag: u64,
        offset: u64,
    },
    /// In the pool but near no allocation.
    Wild,
    /// Outside the pool: memory gasan does not manage.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrDescription {
    pub addr: u64,
    pub kind: AddrKind,
    pub alloc: Option<AllocInfo>,
    /// For a tag mismatch: the block nearest to the address among those of the pointer's tag
    /// (the one the pointer most likely came from).
    pub ptr_alloc: Option<AllocInfo>,
    /// Shadow bytes around the address: (pool address of the first granule, bytes); empty when unreadable.
    pub shadow: Option<(u64, Vec<u8>)>,
    pub scale: Scale,
}

impl AddrDescription {
    /// The description of a `width`-byte access at `addr`: one that starts inside a live block
    /// and ends past it is [`AddrKind::StraddlesEnd`], not in bounds (a vector store of a tile's
    /// last elements, where only the first element fits).
    pub fn for_access(mut self, width: u64) -> Self {
        if let (AddrKind::InBounds { offset }, Some(a)) = (self.kind, &self.alloc) {
            let end = offset.saturating_add(width);
            if end > a.size {
                self.kind = AddrKind::StraddlesEnd { offset, past: end - a.size };
            }
        }
        self
    }
}

/// Who allocated (and freed) a device-heap block: the kernel's block and thread coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapBlockOrigin {
    pub alloc_ctaid: [u32; 3],
    pub alloc_tid: [u32; 3],
    /// Set when the block was freed.
    pub free: Option<([u32; 3], [u32; 3])>,
}

#[cfg(test)]
mod access_tests {
    use super::*;
    use proptest::prelude::*;

    fn block(size: u64, live: bool) -> AllocInfo {
        AllocInfo {
            id: 1,
            start: 0x1000,
            size,
            region_end: 0x1000 + size + 256,
            tag: 0,
            large: false,
            managed: false,
            memory: Memory::Device,
            live,
            alloc_stack: HostStack::default(),
            free_stack: None,
            heap_block: None,
            registered: false,
            rows: None,
        }
    }

    fn described(kind: AddrKind, alloc: AllocInfo) -> AddrDescription {
        AddrDescription { addr: 0, kind, alloc: Some(alloc), ptr_alloc: None, shadow: None, scale: Scale::S8 }
    }

    proptest! {
        /// An in-bounds start stays in bounds exactly when the last byte fits; otherwise the
        /// description says how far past the end the access runs.
        #[test]
        fn straddles_end_iff_the_last_byte_is_past(size in 1u64..1 << 20, offset_frac in 0.0f64..1.0, width in 1u64..64) {
            let offset = ((size as f64) * offset_frac) as u64 % size;
            let d = described(AddrKind::InBounds { offset }, block(size, true)).for_access(width);
            if offset + width <= size {
                prop_assert_eq!(d.kind, AddrKind::InBounds { offset });
            } else {
                prop_assert_eq!(d.kind, AddrKind::StraddlesEnd { offset, past: offset + width - size });
            }
        }
    }

    #[test]
    fn other_kinds_are_left_alone() {
        for kind in [AddrKind::UseAfterFree { offset: 4090 }, AddrKind::OverflowRight { distance: 0 }, AddrKind::Wild] {
            assert_eq!(described(kind, block(4096, false)).for_access(16).kind, kind);
        }
    }
}
