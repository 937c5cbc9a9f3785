//! The binary contract between checked PTX and the runtime: the per-module control block and the
//! error ring. This is the one place these layouts are defined; the PTX generator emits offsets from
//! these constants and the runtime reads and writes memory with these structs.
//!
//! Data flow: the runtime loads a checked module, looks up [`CONTROL_BLOCK_SYMBOL`] with
//! `cuModuleGetGlobal`, and copies a [`ControlBlock`] into it. A checked access whose address lies in
//! `[pool_base, pool_base + pool_size)` reads its shadow byte at
//! `shadow_base + ((addr - pool_base) >> scale)`. A bad access calls the slow path, which takes a slot
//! with `atom.add` on [`RingHeader::head`] (slot = index mod capacity), writes an [`ErrorRecord`] whose
//! `seq` field is zeroed first and written last (release stores: instrument/src/ptx/emit.rs
//! `record_body`) as `index + 1`, then traps or skips the access depending on [`FLAG_RECOVER`].

/// Name of the `.const` control block that every checked module defines (`.weak`, so several checked
/// PTX inputs can be linked with `cuLink*`).
pub const CONTROL_BLOCK_SYMBOL: &str = "__gasan_ctl";
/// Name of the appended slow-path `.func`.
pub const SLOW_PATH_SYMBOL: &str = "__gasan_report";
/// Name of the module-local `.func` a loop's range test calls to sweep a range's shadow bytes
/// (instrument/src/ptx/loops.rs).
pub const RANGE_SWEEP_SYMBOL: &str = "__gasan_range_sweep";

/// `ControlBlock::flags` bit: record the error and skip the access (loads yield 0) instead of `trap`.
pub const FLAG_RECOVER: u64 = 1 << 0;

/// Per-module control block, written by the runtime after load. All zero (the state before the runtime
/// writes it) makes `pool_size == 0`, so every access passes unchecked: a module the runtime failed to
/// set up behaves like the original.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlBlock {
    pub pool_base: u64,
    pub pool_size: u64,
    /// Device address of the shadow byte of `pool_base`.
    pub shadow_base: u64,
    /// Device address of the [`RingHeader`] (host-mapped pinned memory).
    pub ring: u64,
    /// `FLAG_*` bits.
    pub flags: u64,
    /// Runtime-assigned id, copied into every [`ErrorRecord`] so a record finds its site table.
    pub module_id: u64,
    /// Device address of the pool's extent table (0: none). Entry `i` (16 bytes: `start`, `end`,
    /// both absolute device addresses, `end` exclusive) describes the pool block
    /// `[pool_base + (i << extent_shift), pool_base + ((i + 1) << extent_shift))`: when non-zero, the
    /// live allocation whose user bytes `[start, end)` cover or intersect that block. A range
    /// `[lo, hi]` with `start <= lo` and `hi < end` of `lo`'s entry lies inside one live
    /// allocation, so loop checks can be hoisted to one range test (instrument/src/ptx/loops.rs).
    /// An all-zero entry proves nothing (the checked loop runs).
    pub extent_table: u64,
    /// log2 of the pool block size one extent entry describes.
    pub extent_shift: u64,
    /// Low byte: the shadow byte a check uses for an address outside the pool.
    /// [`outside::NO_RANGES`] (255) passes every access; [`outside::RANGES`] (0) fails every
    /// access, which sends it to the out-of-line verdict against [`Self::outside_ranges`]. The
    /// runtime writes 0 only once the process has such ranges, so a program without them runs
    /// the same instructions as before they existed (the value is a constant-bank operand).
    pub outside_shadow: u64,
    /// Device address of the [`outside`] range table (0: none).
    pub outside_ranges: u64,
}

impl ControlBlock {
    /// The block as the device reads it: each word little-endian at its [`ctl_offset`].
    pub fn to_bytes(&self) -> [u8; CONTROL_BLOCK_SIZE] {
        let mut b = [0u8; CONTROL_BLOCK_SIZE];
        for (at, v) in [
            (ctl_offset::POOL_BASE, self.pool_base),
            (ctl_offset::POOL_SIZE, self.pool_size),
            (ctl_offset::SHADOW_BASE, self.shadow_base),
            (ctl_offset::RING, self.ring),
            (ctl_offset::FLAGS, self.flags),
            (ctl_offset::MODULE_ID, self.module_id),
            (ctl_offset::EXTENT_TABLE, self.extent_table),
            (ctl_offset::EXTENT_SHIFT, self.extent_shift),
            (ctl_offset::OUTSIDE_SHADOW, self.outside_shadow),
            (ctl_offset::OUTSIDE_RANGES, self.outside_ranges),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// Byte offsets inside [`ControlBlock`], used by the PTX generator.
pub mod ctl_offset {
    pub const POOL_BASE: usize = 0;
    pub const POOL_SIZE: usize = 8;
    pub const SHADOW_BASE: usize = 16;
    pub const RING: usize = 24;
    pub const FLAGS: usize = 32;
    pub const MODULE_ID: usize = 40;
    pub const EXTENT_TABLE: usize = 48;
    pub const EXTENT_SHIFT: usize = 56;
    pub const OUTSIDE_SHADOW: usize = 64;
    pub const OUTSIDE_RANGES: usize = 72;
}
/// One extent-table entry (see [`ControlBlock::extent_table`]): the live allocation's user
/// bytes `[start, end)` that cover or intersect the entry's pool block, or all zero (no claim).
/// Checked PTX reads the two words at offsets 0 and 8; the pool writes and reads them with
/// [`Self::to_bytes`] / [`Self::from_bytes`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtentEntry {
    pub start: u64,
    pub end: u64,
}

/// Bytes of one [`ExtentEntry`].
pub const EXTENT_ENTRY_SIZE: usize = std::mem::size_of::<ExtentEntry>();

impl ExtentEntry {
    /// The entry as the device reads it (little-endian words).
    pub fn to_bytes(self) -> [u8; EXTENT_ENTRY_SIZE] {
        let mut b = [0u8; EXTENT_ENTRY_SIZE];
        b[..8].copy_from_slice(&self.start.to_le_bytes());
        b[8..].copy_from_slice(&self.end.to_le_bytes());
        b
    }

    /// The inverse of [`Self::to_bytes`].
    pub fn from_bytes(b: &[u8; EXTENT_ENTRY_SIZE]) -> Self {
        let word = |i: usize| u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]]);
        ExtentEntry { start: word(0), end: word(8) }
    }
}
pub const CONTROL_BLOCK_SIZE: usize = 80;

/// Memory outside the pool that kernels reach and gasan knows the bounds of: host memory the
/// program registered (`cuMemHostRegister`) and managed or pinned host memory the driver
/// allocated (the pool could not take it). Kernels reach it at its own address, so it has no
/// pool shadow; instead, once the process has any, the control block's
/// [`ControlBlock::outside_shadow`] makes every out-of-pool check fail over to an out-of-line
/// verdict (instrument/src/ptx/outside.rs) that reads this table, and the access goes on unless
/// [`must_report`](outside::must_report) says otherwise.
///
/// Layout (device memory, written only by the host): word 0 is the
/// byte offset of the active [`List`](outside::LIST_SIZE) from the table's start. The host writes
/// the inactive list whole, then switches the offset. A kernel can run across two such
/// switches and read a list while it is rewritten: the host keeps each live range's entry at one
/// place in both lists (runtime/src/outside.rs, `Ranges`), so what it reads there is the same
/// either way. A list: its entry count (u64), 8 bytes of
/// padding, then [`CAPACITY`](outside::CAPACITY) entries of [`ENTRY_SIZE`](outside::ENTRY_SIZE).
pub mod outside {
    /// [`super::ControlBlock::outside_shadow`] while the process has no outside ranges: the
    /// shadow byte that passes every access ([`crate::shadow::OUT_OF_POOL_SHADOW`]).
    pub const NO_RANGES: u64 = crate::shadow::OUT_OF_POOL_SHADOW as u64;
    /// [`super::ControlBlock::outside_shadow`] once it has some: a shadow byte every access fails.
    pub const RANGES: u64 = 0;
    /// How far past either end of a live range an access is still taken for an overflow of it
    /// (beyond, the address may be any memory the device reaches: the check cannot tell).
    pub const REDZONE: u64 = 4096;
    pub const ENTRY_SIZE: usize = 32;
    /// Bytes before a list's first entry (the count, then padding to 16).
    pub const LIST_HEADER: usize = 16;
    pub const CAPACITY: usize = 127;
    pub const LIST_SIZE: usize = LIST_HEADER + CAPACITY * ENTRY_SIZE;
    /// Offsets of the two lists from the table's start.
    pub const LISTS: [usize; 2] = [64, 64 + LIST_SIZE];
    pub const TABLE_SIZE: usize = LISTS[1] + LIST_SIZE;

    /// One entry: accesses wholly inside `[start, start + len)` pass; others that touch
    /// `[near_lo, near_lo + near_len)` are reported. A live range has its bytes inside and
    /// [`REDZONE`] bytes on either side near; an unregistered one nothing inside and its old
    /// bytes near.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Entry {
        pub start: u64,
        pub len: u64,
        pub near_lo: u64,
        pub near_len: u64,
    }

    impl Entry {
        /// The registered (live) range `[start, end)`.
        pub fn live(start: u64, end: u64) -> Self {
            let near_lo = start.saturating_sub(REDZONE);
            Entry { start, len: end - start, near_lo, near_len: end.saturating_add(REDZONE) - near_lo }
        }

        /// The range `[start, end)` that was registered and no longer is.
        pub fn gone(start: u64, end: u64) -> Self {
            Entry { start, len: 0, near_lo: start, near_len: end - start }
        }

        /// The entry as the device reads it (four little-endian words).
        pub fn to_bytes(self) -> [u8; ENTRY_SIZE] {
            let mut b = [0u8; ENTRY_SIZE];
            for (i, w) in [self.start, self.len, self.near_lo, self.near_len].into_iter().enumerate() {
                b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            b
        }

        /// The inverse of [`Self::to_bytes`].
        pub fn from_bytes(b: &[u8; ENTRY_SIZE]) -> Self {
            let w = |i: usize| word(b, i * 8);
            Entry { start: w(0), len: w(1), near_lo: w(2), near_len: w(3) }
        }
    }

    fn word(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    }

    /// Writes `entries` as the list that is not active in `table` (an image of the whole table),
    /// then makes it the active one. Returns the list's offset: the host copies the list's
    /// [`LIST_SIZE`] bytes to the device first and word 0 after.
    pub fn publish(table: &mut [u8], entries: &[Entry]) -> usize {
        assert!(table.len() >= TABLE_SIZE && entries.len() <= CAPACITY);
        let next = if word(table, 0) == LISTS[1] as u64 { LISTS[0] } else { LISTS[1] };
        table[next..next + 8].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        for (i, e) in entries.iter().enumerate() {
            let at = next + LIST_HEADER + i * ENTRY_SIZE;
            table[at..at + ENTRY_SIZE].copy_from_slice(&e.to_bytes());
        }
        table[..8].copy_from_slice(&(next as u64).to_le_bytes());
        next
    }

    /// The active list of a table image, read as the device reads it (its count clamped to
    /// [`CAPACITY`]).
    pub fn active_entries(table: &[u8]) -> Vec<Entry> {
        let list = word(table, 0) as usize;
        let n = (word(table, list) as usize).min(CAPACITY);
        (0..n).map(|i| list + LIST_HEADER + i * ENTRY_SIZE).map(|at| Entry::from_bytes(table[at..at + ENTRY_SIZE].try_into().expect("an entry"))).collect()
    }

    /// The verdict on an access of `width` (at least 1) bytes at out-of-pool address `addr`: it
    /// is reported when no entry holds all of it and it touches some entry's near range. This is
    /// the one statement of the rule; the device computes it with 64-bit wrapping arithmetic
    /// (`addr - start < len && len - (addr - start) >= width`, `addr - near_lo < near_len`),
    /// which for an access that does not wrap the address space is the same.
    pub fn must_report(entries: &[Entry], addr: u64, width: u64) -> bool {
        let (a, end) = (u128::from(addr), u128::from(addr) + u128::from(width.max(1)));
        let inside = |e: &Entry| a >= u128::from(e.start) && end <= u128::from(e.start) + u128::from(e.len);
        // The device tests the first byte against the near range.
        let near = |e: &Entry| a >= u128::from(e.near_lo) && a < u128::from(e.near_lo) + u128::from(e.near_len);
        !entries.iter().any(inside) && entries.iter().any(near)
    }
}

/// Launch-time bounds carried in a kernel's pointer arguments ("parameter tags").
///
/// At a launch, the runtime may rewrite the values of a kernel's listed pointer arguments: each
/// keeps its low [`ADDRESS_BITS`](param_tag::ADDRESS_BITS) bits, and the bits above carry the
/// [`MARK`](param_tag::MARK) and how far the pointer's block reaches above it, in whole
/// [`REACH_UNIT`](param_tag::REACH_UNIT)s (at most [`MAX_REACH`](param_tag::MAX_REACH); a null or
/// out-of-pool pointer reaches 0). The field sits where one 32-bit AND of the value's high word
/// yields the reach in bytes, so the checked kernel (instrument/src/ptx/bounds.rs) decodes it in
/// four instructions — on the H100, a decode with a variable shift cost a one-element-per-thread
/// stencil 13 % of native time, and an extent-table load waits for memory.
///
/// A launch tags all of a kernel's listed arguments or none, and the kernel tests the first one
/// only. A value without the mark (a launch gasan did not tag) makes the kernel look its blocks
/// up as before, so a missed launch form costs speed, never a check; a pointer that is not
/// tagged decodes to itself with no reach, so it is checked as usual.
///
/// The bounds start at the pointer itself: an access below it takes the ordinary check.
pub mod param_tag {
    /// Bits of a taggable pointer: pool addresses lie below `1 << ADDRESS_BITS`.
    pub const ADDRESS_BITS: u32 = 48;
    /// The top two bits of a tagged value: neither a pointer (`00`) nor a sign-extended negative
    /// integer (`11`) has them.
    pub const MARK: u64 = 0b10;
    /// The pointer bits of a tagged value.
    pub const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;
    /// The reach field: bits 48..61 of the value, read as bits 16..29 of its high word (a count
    /// of [`REACH_UNIT`]s there is that many bytes).
    pub const REACH_MASK_HIGH_WORD: u32 = 0x3fff_0000;
    pub const REACH_UNIT: u64 = 1 << 16;
    /// The largest reach a tag carries: a block reaching further is looked up instead.
    pub const MAX_REACH: u64 = (REACH_MASK_HIGH_WORD as u64 >> 16) * REACH_UNIT;

    /// `ptr` tagged with the reach of `[ptr, hi)` rounded down to whole units (`hi == ptr`: no
    /// reach), or `None` when it cannot carry it (beyond [`ADDRESS_BITS`], `hi` below it, or
    /// reaching further than [`MAX_REACH`]).
    pub fn encode(ptr: u64, hi: u64) -> Option<u64> {
        if ptr > ADDRESS_MASK || hi < ptr || hi - ptr > MAX_REACH {
            return None;
        }
        let units = (hi - ptr) / REACH_UNIT;
        Some(MARK << 62 | units << 48 | ptr)
    }

    /// What a checked kernel reads from a parameter's value: (pointer, end of the bounds it
    /// carries), or `None` when it carries none (the value is then used as it is).
    pub fn decode(value: u64) -> Option<(u64, u64)> {
        if value >> 62 != MARK {
            return None;
        }
        let ptr = value & ADDRESS_MASK;
        let reach = u64::from((value >> 32) as u32 & REACH_MASK_HIGH_WORD);
        Some((ptr, ptr + reach))
    }
}

/// Which pointer parameters of each checked kernel the runtime may tag at a launch
/// ([`param_tag`]): kernel name → its parameter count and the tagged parameters' ordinals.
/// Written by the instrumenter beside the checked PTX, one line per kernel
/// (`name count ordinal...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamTagTable {
    pub kernels: std::collections::BTreeMap<String, KernelParamTags>,
}

/// One kernel's entry in a [`ParamTagTable`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelParamTags {
    /// Parameters the kernel declares (the length of a launch's argument array).
    pub count: u32,
    /// Ordinals of the parameters that may be tagged, ascending.
    pub tagged: Vec<u32>,
}

impl ParamTagTable {
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (name, k) in &self.kernels {
            s.push_str(name);
            s.push(' ');
            s.push_str(&k.count.to_string());
            for o in &k.tagged {
                s.push(' ');
                s.push_str(&o.to_string());
            }
            s.push('\n');
        }
        s
    }

    /// The inverse of [`Self::to_text`]; `None` for text it did not write (an ordinal not below
    /// the count, or not ascending, included: the runtime must never tag past the arguments).
    pub fn from_text(text: &str) -> Option<Self> {
        let mut kernels = std::collections::BTreeMap::new();
        for line in text.lines() {
            let mut words = line.split(' ');
            let name = words.next().filter(|n| !n.is_empty())?;
            let count: u32 = words.next()?.parse().ok()?;
            let tagged: Vec<u32> = words.map(|w| w.parse().ok()).collect::<Option<_>>()?;
            if tagged.iter().any(|&o| o >= count) || tagged.windows(2).any(|w| w[0] >= w[1]) {
                return None;
            }
            kernels.insert(name.to_string(), KernelParamTags { count, tagged });
        }
        Some(ParamTagTable { kernels })
    }
}

/// The control block's and extent table's layout as C `#define`s, for C/CUDA tools that build a
/// control block themselves (benches/variants/ptxtime.cu): generated from this file's constants,
/// so it is the one definition (`gasan-ptx abi`).
pub fn c_header() -> String {
    use ctl_offset as o;
    let full_granule_s8 = crate::shadow::Scale::S8.encode(crate::shadow::Scale::S8.granule());
    let defines: [(&str, String); 15] = [
        ("CTL_SYMBOL", format!("\"{CONTROL_BLOCK_SYMBOL}\"")),
        ("CTL_SIZE", CONTROL_BLOCK_SIZE.to_string()),
        ("CTL_POOL_BASE", o::POOL_BASE.to_string()),
        ("CTL_POOL_SIZE", o::POOL_SIZE.to_string()),
        ("CTL_SHADOW_BASE", o::SHADOW_BASE.to_string()),
        ("CTL_RING", o::RING.to_string()),
        ("CTL_FLAGS", o::FLAGS.to_string()),
        ("CTL_MODULE_ID", o::MODULE_ID.to_string()),
        ("CTL_EXTENT_TABLE", o::EXTENT_TABLE.to_string()),
        ("CTL_EXTENT_SHIFT", o::EXTENT_SHIFT.to_string()),
        ("CTL_OUTSIDE_SHADOW", o::OUTSIDE_SHADOW.to_string()),
        ("CTL_OUTSIDE_RANGES", o::OUTSIDE_RANGES.to_string()),
        ("EXTENT_ENTRY_SIZE", EXTENT_ENTRY_SIZE.to_string()),
        // A shadow byte granting a whole 256-byte granule (scale 8).
        ("SHADOW_FULL_GRANULE_S8", full_granule_s8.to_string()),
        ("SHADOW_SHIFT_S8", crate::shadow::Scale::S8.shift().to_string()),
    ];
    let mut h = String::from("/* gasan control-block layout: generated by `gasan-ptx abi` from instrument/src/abi.rs. */\n#pragma once\n");
    for (name, value) in defines {
        h.push_str(&format!("#define GASAN_{name} {value}\n"));
    }
    h
}

/// Header of the error ring. Records follow at [`RING_RECORDS_OFFSET`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingHeader {
    /// Number of errors so far (wrapping): an error takes index `head++` and writes slot
    /// `index % capacity`, so the ring is reused and the newest `capacity` records survive.
    pub head: u32,
    /// Number of record slots after the header, a power of two; set by the host.
    pub capacity: u32,
    pub reserved: [u32; 14],
}
pub const RING_HEADER_SIZE: usize = 64;
pub const RING_RECORDS_OFFSET: usize = RING_HEADER_SIZE;
pub mod ring_offset {
    pub const HEAD: usize = 0;
    pub const CAPACITY: usize = 4;
}

/// What the faulting instruction did.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Read = 1,
    Write = 2,
    /// Read-modify-write (`atom`).
    Atomic = 3,
    /// A device-heap `free` (in-kernel `free`/`delete`) that failed: the record's `addr` is the
    /// pointer passed, its `shadow` byte a [`free_error`] code and `width` 0.
    Free = 4,
}

/// Why a device-heap free failed ([`AccessKind::Free`] records carry it in `shadow`).
pub mod free_error {
    /// The block was already freed.
    pub const DOUBLE_FREE: u8 = 1;
    /// Not the start of a device-heap block (a pointer into one, another allocation, garbage).
    pub const INVALID_FREE: u8 = 2;
}

impl AccessKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Read),
            2 => Some(Self::Write),
            3 => Some(Self::Atomic),
            4 => Some(Self::Free),
            _ => None,
        }
    }
}

/// The memory space a check guards. Recorded per check site in the site table (a site checks one
/// space), not in [`ErrorRecord`]: the ring protocol, and so every global check's PTX, stays as it
/// was. Shared and local checks report an offset relative to the variable (or frame) in
/// [`ErrorRecord::addr`] (two's complement: negative below its start), never a device address.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySpace {
    /// Global or generic memory checked against the pool's shadow.
    #[default]
    Global,
    /// A `.shared` variable (static, or the launch's dynamic shared memory): bounds of the variable.
    Shared,
    /// A `.local` frame (nvcc's `__local_depot`): bounds of the current function's frame.
    Local,
    /// A local-window address outside a kernel's own frame: a callee's frame, dead since the
    /// callee returned (ASan's stack-use-after-scope).
    LocalOutOfScope,
    /// A local-window address a called function computed from a parameter, at or past the end of
    /// its callers' live frames: past the end of a caller's local array
    /// (instrument/src/ptx/frames.rs). The recorded offset is from that end.
    LocalPastTop,
    /// A local-window address a called function got otherwise (a call's result, a load), at or
    /// past the end of its callers' live frames and outside its own frame: in a frame that has
    /// returned (ASan's stack-use-after-scope). The recorded offset is from that end.
    LocalDeadFrame,
}

/// One error record, written by the device slow path.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorRecord {
    /// First byte of the access (for a range check: the address of the granule that failed).
    pub addr: u64,
    pub module_id: u32,
    pub site_id: u32,
    pub ctaid: [u32; 3],
    pub tid: [u32; 3],
    /// Access width in bytes (bulk copies: the whole range).
    pub width: u32,
    /// [`AccessKind`] as u8.
    pub kind: u8,
    /// The shadow byte that failed the check.
    pub shadow: u8,
    pub reserved0: u16,
    /// `index + 1` (see [`RingHeader::head`]), written last: a reader treats the record as complete
    /// only when it matches.
    pub seq: u32,
    /// `[0]`: in the release-store form, the slot's seq before this record (stored after `seq`, so the
    /// writer waits for its `seq` exchange; readers ignore it). `[1..3]`: unused.
    pub reserved1: [u32; 3],
}
pub const ERROR_RECORD_SIZE: usize = 64;

impl ErrorRecord {
    /// A record from its bytes as the device wrote them (little-endian, [`record_offset`] layout).
    /// Every byte pattern is a record; what the fields mean is for the reader to check.
    pub fn from_bytes(b: &[u8; ERROR_RECORD_SIZE]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u32x3 = |o: usize| [u32_at(o), u32_at(o + 4), u32_at(o + 8)];
        use record_offset as off;
        ErrorRecord {
            addr: u64::from(u32_at(off::ADDR)) | u64::from(u32_at(off::ADDR + 4)) << 32,
            module_id: u32_at(off::MODULE_ID),
            site_id: u32_at(off::SITE_ID),
            ctaid: u32x3(off::CTAID),
            tid: u32x3(off::TID),
            width: u32_at(off::WIDTH),
            kind: b[off::KIND],
            shadow: b[off::SHADOW],
            reserved0: u16::from_le_bytes([b[off::SHADOW + 1], b[off::SHADOW + 2]]),
            seq: u32_at(off::SEQ),
            reserved1: u32x3(off::SEQ + 4),
        }
    }

    /// The record's bytes, the inverse of [`Self::from_bytes`].
    pub fn to_bytes(&self) -> [u8; ERROR_RECORD_SIZE] {
        let mut b = [0u8; ERROR_RECORD_SIZE];
        let mut put = |o: usize, v: &[u8]| b[o..o + v.len()].copy_from_slice(v);
        use record_offset as off;
        put(off::ADDR, &self.addr.to_le_bytes());
        put(off::MODULE_ID, &self.module_id.to_le_bytes());
        put(off::SITE_ID, &self.site_id.to_le_bytes());
        for i in 0..3 {
            put(off::CTAID + 4 * i, &self.ctaid[i].to_le_bytes());
            put(off::TID + 4 * i, &self.tid[i].to_le_bytes());
            put(off::SEQ + 4 + 4 * i, &self.reserved1[i].to_le_bytes());
        }
        put(off::WIDTH, &self.width.to_le_bytes());
        put(off::KIND, &[self.kind, self.shadow]);
        put(off::SHADOW + 1, &self.reserved0.to_le_bytes());
        put(off::SEQ, &self.seq.to_le_bytes());
        b
    }
}
pub mod record_offset {
    pub const ADDR: usize = 0;
    pub const MODULE_ID: usize = 8;
    pub const SITE_ID: usize = 12;
    pub const CTAID: usize = 16;
    pub const TID: usize = 28;
    pub const WIDTH: usize = 40;
    pub const KIND: usize = 44;
    pub const SHADOW: usize = 45;
    pub const SEQ: usize = 48;
}

/// Bytes of host-mapped memory needed for a ring of `capacity` records.
pub const fn ring_bytes(capacity: u32) -> usize {
    RING_RECORDS_OFFSET + capacity as usize * ERROR_RECORD_SIZE
}

// Layout invariants, checked at compile time.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ControlBlock>() == CONTROL_BLOCK_SIZE);
    assert!(offset_of!(ControlBlock, pool_base) == ctl_offset::POOL_BASE);
    assert!(offset_of!(ControlBlock, pool_size) == ctl_offset::POOL_SIZE);
    assert!(offset_of!(ControlBlock, shadow_base) == ctl_offset::SHADOW_BASE);
    assert!(offset_of!(ControlBlock, ring) == ctl_offset::RING);
    assert!(offset_of!(ControlBlock, flags) == ctl_offset::FLAGS);
    assert!(offset_of!(ControlBlock, module_id) == ctl_offset::MODULE_ID);
    assert!(offset_of!(ControlBlock, extent_table) == ctl_offset::EXTENT_TABLE);
    assert!(offset_of!(ControlBlock, extent_shift) == ctl_offset::EXTENT_SHIFT);
    assert!(size_of::<RingHeader>() == RING_HEADER_SIZE);
    assert!(offset_of!(RingHeader, head) == ring_offset::HEAD);
    assert!(offset_of!(RingHeader, capacity) == ring_offset::CAPACITY);
    assert!(size_of::<ErrorRecord>() == ERROR_RECORD_SIZE);
    assert!(offset_of!(ErrorRecord, addr) == record_offset::ADDR);
    assert!(offset_of!(ErrorRecord, module_id) == record_offset::MODULE_ID);
    assert!(offset_of!(ErrorRecord, site_id) == record_offset::SITE_ID);
    assert!(offset_of!(ErrorRecord, ctaid) == record_offset::CTAID);
    assert!(offset_of!(ErrorRecord, tid) == record_offset::TID);
    assert!(offset_of!(ErrorRecord, width) == record_offset::WIDTH);
    assert!(offset_of!(ErrorRecord, kind) == record_offset::KIND);
    assert!(offset_of!(ErrorRecord, shadow) == record_offset::SHADOW);
    assert!(offset_of!(ErrorRecord, seq) == record_offset::SEQ);
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A tagged pointer decodes to itself, with an end inside the one it was encoded from
        /// and less than a unit short of it.
        #[test]
        fn tagged_pointers_carry_bounds_inside_their_block(ptr in 0u64..(1 << 48), above in 0u64..(1 << 31)) {
            let hi = ptr + above;
            match param_tag::encode(ptr, hi) {
                None => prop_assert!(above > param_tag::MAX_REACH || ptr > param_tag::ADDRESS_MASK),
                Some(v) => {
                    let (p, h) = param_tag::decode(v).expect("a tagged value decodes");
                    prop_assert_eq!(p, ptr);
                    prop_assert!(ptr <= h && h <= hi && hi - h < param_tag::REACH_UNIT, "{:x} {:x} from {:x}", p, h, hi);
                }
            }
        }

        /// Pointers (top bits 00) and negative integers (11) never read as tagged.
        #[test]
        fn untagged_values_decode_to_nothing(v in any::<u64>()) {
            prop_assume!(v >> 62 != param_tag::MARK);
            prop_assert_eq!(param_tag::decode(v), None);
        }

        #[test]
        fn param_tag_tables_read_back(kernels in proptest::collection::btree_map("[A-Za-z_$][A-Za-z0-9_$]{0,20}", (1u32..40, proptest::collection::btree_set(0u32..40, 0..5)), 0..6)) {
            let table = ParamTagTable { kernels: kernels.into_iter().map(|(n, (count, t))| (n, KernelParamTags { count, tagged: t.into_iter().filter(|&o| o < count).collect() })).collect() };
            prop_assert_eq!(ParamTagTable::from_text(&table.to_text()), Some(table));
        }
    }

    #[test]
    fn param_tag_tables_refuse_ordinals_past_the_arguments() {
        assert_eq!(ParamTagTable::from_text("k 2 2\n"), None);
        assert_eq!(ParamTagTable::from_text("k 3 1 0\n"), None);
        assert_eq!(ParamTagTable::from_text("k x\n"), None);
        assert!(ParamTagTable::from_text("k 3 0 2\n").is_some());
    }

    #[test]
    fn c_header_places_each_field_where_the_struct_has_it() {
        // A control block built from the header's offsets, as a C tool builds one, equals the
        // struct's bytes (a name bound to the wrong offset would move a field).
        let h = c_header();
        let define = |name: &str| -> usize {
            let line = h.lines().find(|l| l.starts_with(&format!("#define GASAN_{name} "))).unwrap_or_else(|| panic!("no {name} in\n{h}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let ctl = ControlBlock { pool_base: 1, pool_size: 2, shadow_base: 3, ring: 4, flags: 5, module_id: 6, extent_table: 7, extent_shift: 8, outside_shadow: 9, outside_ranges: 10 };
        let mut from_header = vec![0u8; define("CTL_SIZE")];
        for (name, v) in [
            ("POOL_BASE", 1u64),
            ("POOL_SIZE", 2),
            ("SHADOW_BASE", 3),
            ("RING", 4),
            ("FLAGS", 5),
            ("MODULE_ID", 6),
            ("EXTENT_TABLE", 7),
            ("EXTENT_SHIFT", 8),
            ("OUTSIDE_SHADOW", 9),
            ("OUTSIDE_RANGES", 10),
        ] {
            let at = define(&format!("CTL_{name}"));
            from_header[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        assert_eq!(from_header, ctl.to_bytes().to_vec());
        assert_eq!(define("EXTENT_ENTRY_SIZE"), ExtentEntry { start: 1, end: 2 }.to_bytes().len());
        assert!(h.contains(&format!("#define GASAN_CTL_SYMBOL \"{CONTROL_BLOCK_SYMBOL}\"")));
    }

    #[test]
    fn record_bytes_match_the_struct_layout() {
        let rec = ErrorRecord {
            addr: 0x1122_3344_5566_7788,
            module_id: 3,
            site_id: 0xdead,
            ctaid: [1, 2, 3],
            tid: [4, 5, 6],
            width: 16,
            kind: AccessKind::Atomic as u8,
            shadow: 0x7f,
            reserved0: 0xabcd,
            seq: 42,
            reserved1: [7, 8, 9],
        };
        // SAFETY: ErrorRecord is repr(C) plain integers with no padding (64 bytes, checked above).
        let raw: [u8; ERROR_RECORD_SIZE] = unsafe { std::mem::transmute(rec) };
        assert_eq!(rec.to_bytes(), raw);
        assert_eq!(ErrorRecord::from_bytes(&raw), rec);
    }

    #[test]
    fn control_block_bytes_match_the_struct_layout() {
        let ctl = ControlBlock {
            pool_base: 1 << 44,
            pool_size: 1 << 40,
            shadow_base: 0x2000_0000_0000,
            ring: 0x7f00_1234_5000,
            flags: FLAG_RECOVER,
            module_id: 9,
            extent_table: 0x3000_0000_0000,
            extent_shift: 21,
            outside_shadow: outside::RANGES,
            outside_ranges: 0x7f00_1234_6000,
        };
        // SAFETY: ControlBlock is repr(C), ten u64 words, no padding (80 bytes, checked above).
        let raw: [u8; CONTROL_BLOCK_SIZE] = unsafe { std::mem::transmute(ctl) };
        assert_eq!(ctl.to_bytes(), raw);
    }

    #[test]
    fn outside_tables_read_back_as_published_and_switch_lists() {
        let e = [outside::Entry::live(0x5555_0000_1000, 0x5555_0000_1fa0), outside::Entry::gone(0x7f00_0000_0000, 0x7f00_0000_4000)];
        assert_eq!(outside::Entry::from_bytes(&e[0].to_bytes()), e[0]);
        let mut table = vec![0u8; outside::TABLE_SIZE];
        let first = outside::publish(&mut table, &e);
        assert_eq!(outside::active_entries(&table), e);
        // The next list goes beside the active one, which stays intact until the switch.
        let before = table.clone();
        let second = outside::publish(&mut table, &e[..1]);
        assert_ne!(first, second);
        assert_eq!(table[first..first + outside::LIST_SIZE], before[first..first + outside::LIST_SIZE]);
        assert_eq!(outside::active_entries(&table), e[..1]);
    }

    #[test]
    fn extent_entry_bytes_are_the_two_words_checked_ptx_reads() {
        assert_eq!((std::mem::offset_of!(ExtentEntry, start), std::mem::offset_of!(ExtentEntry, end), EXTENT_ENTRY_SIZE), (0, 8, 16));
        let e = ExtentEntry { start: 0x1000_0020_0040, end: 0x1000_0020_1000 };
        let b = e.to_bytes();
        assert_eq!(b[..8], e.start.to_le_bytes());
        assert_eq!(b[8..], e.end.to_le_bytes());
        assert_eq!(ExtentEntry::from_bytes(&b), e);
    }
}
