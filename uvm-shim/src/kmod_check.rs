//! The patched module's parameter checks, modelled in Rust, and the table of malformed calls the
//! kmod self-test sends (`gasan-uvm kmod-selftest`).
//!
//! The kernel runs the C checks of `kmod-patch/src/gasan_map_math.c` (`gasan_validate_*`) before
//! any state changes. `tests/kmod_math.rs` compiles that C file in userspace and checks it against
//! this model on random parameter blocks, and both against the hand-written expected status of
//! every case in [`malformed_cases`] / [`no_pool_cases`]; the self-test then checks the loaded
//! module against the same expectations. Checks run in the C file's order: padding, enumerations
//! and flags, the range's shape (base 0, empty, misaligned, wrapping), the pool, membership, reach.

use crate::kmod::abi::*;
use crate::plan;

/// What the checks know of the VA space (`gasan_limits_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub pool_base: u64,
    /// 0: no pool reserved yet.
    pub pool_length: u64,
    /// Exclusive VA bound every registered GPU reaches; 0: no GPU registered (not checked).
    pub max_va: u64,
}

const K4: u64 = 4 << 10;
const K64: u64 = 64 << 10;
const M2: u64 = 2 << 20;

/// `gasan_check_range`: non-empty, `gran`-aligned, not wrapping, not at 0.
pub fn check_range(va: u64, len: u64, gran: u64) -> u32 {
    if va == 0 || plan::check_aligned(va, len, gran).is_err() {
        UVM_GASAN_ST_INVALID_ADDRESS
    } else {
        UVM_GASAN_ST_OK
    }
}

fn reaches(l: &Limits, va: u64, len: u64) -> bool {
    l.max_va == 0 || va.checked_add(len).is_some_and(|e| e <= l.max_va)
}

fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen != 0 && blen != 0 && a < b.wrapping_add(blen) && b < a.wrapping_add(alen)
}

/// Runs the checks in order; the first non-OK status wins.
fn first(checks: &[&dyn Fn() -> u32]) -> u32 {
    checks.iter().map(|c| c()).find(|&s| s != UVM_GASAN_ST_OK).unwrap_or(UVM_GASAN_ST_OK)
}

fn pad(p: u32) -> u32 {
    if p != 0 {
        UVM_GASAN_ST_INVALID_ARGUMENT
    } else {
        UVM_GASAN_ST_OK
    }
}

fn pool(l: &Limits) -> u32 {
    if l.pool_length == 0 {
        UVM_GASAN_ST_INVALID_STATE
    } else {
        UVM_GASAN_ST_OK
    }
}

fn status_if(bad: bool, st: u32) -> u32 {
    if bad {
        st
    } else {
        UVM_GASAN_ST_OK
    }
}

/// One gasan command with its parameter block.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    Identify(UVM_GASAN_IDENTIFY_PARAMS),
    Query(UVM_GASAN_QUERY_PARAMS),
    ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS),
    MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS),
    UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS),
    SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS),
    MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS),
    SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS),
}

impl Call {
    /// The command's name in uvm_gasan_ioctl.h.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Identify(_) => "UVM_GASAN_IDENTIFY",
            Call::Query(_) => "UVM_GASAN_QUERY",
            Call::ReservePool(_) => "UVM_GASAN_RESERVE_POOL",
            Call::MapAlias(_) => "UVM_GASAN_MAP_ALIAS",
            Call::UnmapAlias(_) => "UVM_GASAN_UNMAP_ALIAS",
            Call::SetProtection(_) => "UVM_GASAN_SET_PROTECTION",
            Call::MapSparseZero(_) => "UVM_GASAN_MAP_SPARSE_ZERO",
            Call::SubscribeFaults(_) => "UVM_GASAN_SUBSCRIBE_FAULTS",
        }
    }

    /// The status the module's checks give this call (the model of `gasan_validate_*`).
    pub fn check(&self, l: &Limits) -> u32 {
        match *self {
            Call::Identify(p) => pad(p.pad0),
            Call::Query(p) => pad(p.pad0),
            Call::ReservePool(p) => first(&[&|| pad(p.pad0), &|| check_range(p.base, p.length, M2), &|| status_if(l.pool_length != 0, UVM_GASAN_ST_STATE_IN_USE), &|| {
                status_if(!reaches(l, p.base, p.length), UVM_GASAN_ST_OUT_OF_RANGE)
            }]),
            Call::MapAlias(p) => first(&[
                &|| pad(p.pad0),
                &|| check_range(p.srcBase, p.length, K4),
                &|| check_range(p.aliasBase, p.length, K4),
                &|| pool(l),
                &|| status_if(!plan::contains(l.pool_base, l.pool_length, p.srcBase, p.length), UVM_GASAN_ST_INVALID_ADDRESS),
                &|| status_if(overlaps(l.pool_base, l.pool_length, p.aliasBase, p.length), UVM_GASAN_ST_ADDRESS_IN_USE),
                &|| status_if(!reaches(l, p.aliasBase, p.length), UVM_GASAN_ST_OUT_OF_RANGE),
            ]),
            Call::UnmapAlias(p) => first(&[&|| pad(p.pad0), &|| check_range(p.aliasBase, p.length, K4), &|| pool(l)]),
            Call::SetProtection(p) => first(&[
                &|| pad(p.pad0),
                &|| status_if(u64::from(p.pageSize) != K4 && u64::from(p.pageSize) != K64, UVM_GASAN_ST_INVALID_ARGUMENT),
                &|| status_if(![UVM_GASAN_PROT_NONE, UVM_GASAN_PROT_RO, UVM_GASAN_PROT_RW].contains(&p.prot), UVM_GASAN_ST_INVALID_ARGUMENT),
                &|| check_range(p.base, p.length, u64::from(p.pageSize)),
                &|| pool(l),
                &|| status_if(!plan::contains(l.pool_base, l.pool_length, p.base, p.length), UVM_GASAN_ST_INVALID_ADDRESS),
            ]),
            Call::MapSparseZero(p) => first(&[
                &|| pad(p.pad0),
                &|| check_range(p.base, p.length, M2),
                &|| pool(l),
                &|| status_if(overlaps(l.pool_base, l.pool_length, p.base, p.length), UVM_GASAN_ST_ADDRESS_IN_USE),
                &|| status_if(!reaches(l, p.base, p.length), UVM_GASAN_ST_OUT_OF_RANGE),
            ]),
            Call::SubscribeFaults(p) => first(&[&|| status_if(p.pad0 != 0 || p.flags & !UVM_GASAN_SUBSCRIBE_NONBLOCK != 0, UVM_GASAN_ST_INVALID_ARGUMENT), &|| pool(l)]),
        }
    }
}

/// `gasan_prot_mapping_type`: the mapping type for `prot` (RO / RW) of a mapping first made with
/// `orig` (UvmGpuMappingType: 0 default, 1 read-write-atomic, 2 read-write, 3 read-only).
pub fn prot_mapping_type(prot: u32, orig: u32) -> Result<u32, u32> {
    match (prot, orig) {
        (_, o) if o > 3 => Err(UVM_GASAN_ST_INVALID_ARGUMENT),
        (UVM_GASAN_PROT_RO, _) => Ok(3),
        (UVM_GASAN_PROT_RW, 3) => Err(UVM_GASAN_ST_INVALID_ACCESS_TYPE),
        (UVM_GASAN_PROT_RW, o) => Ok(o),
        _ => Err(UVM_GASAN_ST_INVALID_ARGUMENT),
    }
}

/// One malformed call and the status the module must answer.
#[derive(Clone, Debug)]
pub struct Case {
    pub what: String,
    pub call: Call,
    pub expect: u32,
}

/// Calls that are refused by their checks alone, against a VA space whose pool is `l` (reserved,
/// at least 8 MiB, 2 MiB aligned) and whose GPUs reach `l.max_va` (cases past that bound are left
/// out when it is 0). Each malforms one field of an otherwise valid call; none is accepted by a
/// correct module, so sending them changes nothing.
pub fn malformed_cases(l: &Limits) -> Vec<Case> {
    assert!(l.pool_length >= 8 << 20 && l.pool_base.is_multiple_of(M2) && l.pool_base != 0);
    let (b, len) = (l.pool_base, l.pool_length);
    let end = b + len;
    // A free alias spot above the pool (below the GPUs' bound) and the address where reach ends.
    let alias = (end + M2).next_multiple_of(1 << 30);
    let top = if l.max_va != 0 { l.max_va } else { 0 };
    let wrap = u64::MAX - M2 + 1; // 2 MiB aligned, wraps with any length > 2 MiB
    let mut v = Vec::new();
    let mut c = |what: &str, call: Call, expect: u32| v.push(Case { what: what.into(), call, expect });
    use Call::*;
    let (bad_arg, bad_addr) = (UVM_GASAN_ST_INVALID_ARGUMENT, UVM_GASAN_ST_INVALID_ADDRESS);

    c("padding", Identify(UVM_GASAN_IDENTIFY_PARAMS { pad0: 1, ..Default::default() }), bad_arg);
    c("padding", Query(UVM_GASAN_QUERY_PARAMS { pad0: 1, ..Default::default() }), bad_arg);

    let rp = UVM_GASAN_RESERVE_POOL_PARAMS { base: end + M2, length: M2, ..Default::default() };
    c("a second pool", ReservePool(rp), UVM_GASAN_ST_STATE_IN_USE);
    c("padding", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { pad0: 1, ..rp }), bad_arg);
    c("base 0", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { base: 0, ..rp }), bad_addr);
    c("empty", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { length: 0, ..rp }), bad_addr);
    c("base misaligned (4 KiB)", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { base: rp.base + K4, ..rp }), bad_addr);
    c("length misaligned", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { length: M2 + K64, ..rp }), bad_addr);
    c("wrapping", ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { base: wrap, length: 2 * M2, ..rp }), bad_addr);

    let ma = UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: b, length: K64, aliasBase: alias, ..Default::default() };
    c("padding", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { pad0: 7, ..ma }), bad_arg);
    c("source 0", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: 0, ..ma }), bad_addr);
    c("source misaligned", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: b + 512, ..ma }), bad_addr);
    c("empty", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { length: 0, ..ma }), bad_addr);
    c("length misaligned", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { length: K4 + 1, ..ma }), bad_addr);
    c("alias 0", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: 0, ..ma }), bad_addr);
    c("alias misaligned", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: alias + 8, ..ma }), bad_addr);
    c("alias wrapping", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: u64::MAX - K4 + 1, length: 2 * K4, ..ma }), bad_addr);
    c("source outside the pool", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: end, ..ma }), bad_addr);
    c("source across the pool's end", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: end - K4, length: 2 * K4, ..ma }), bad_addr);
    c("alias inside the pool", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: b + M2, ..ma }), UVM_GASAN_ST_ADDRESS_IN_USE);
    c("alias across the pool's start", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: b - K4, length: 2 * K4, ..ma }), UVM_GASAN_ST_ADDRESS_IN_USE);
    if top != 0 {
        c("alias beyond the GPUs' reach", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: top, ..ma }), UVM_GASAN_ST_OUT_OF_RANGE);
        c("alias across the GPUs' reach", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { aliasBase: top - K4, length: 2 * K4, ..ma }), UVM_GASAN_ST_OUT_OF_RANGE);
    }

    let ua = UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: alias, length: K64, ..Default::default() };
    c("padding", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { pad0: 1, ..ua }), bad_arg);
    c("base 0", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: 0, ..ua }), bad_addr);
    c("base misaligned", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: alias + 1, ..ua }), bad_addr);
    c("empty", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { length: 0, ..ua }), bad_addr);
    c("wrapping", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: u64::MAX - K4 + 1, length: 2 * K4, ..ua }), bad_addr);

    let sp = UVM_GASAN_SET_PROTECTION_PARAMS { base: b + K64, length: K64, pageSize: K64 as u32, prot: UVM_GASAN_PROT_NONE, ..Default::default() };
    c("padding", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { pad0: 1, ..sp }), bad_arg);
    c("page size 8 KiB", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { pageSize: 8192, ..sp }), bad_arg);
    c("page size 2 MiB", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { pageSize: M2 as u32, ..sp }), bad_arg);
    c("page size 0", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { pageSize: 0, ..sp }), bad_arg);
    c("prot 2 (write-only)", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { prot: 2, ..sp }), bad_arg);
    c("prot with an unknown bit", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { prot: UVM_GASAN_PROT_RW | 0x100, ..sp }), bad_arg);
    c("base 0", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: 0, ..sp }), bad_addr);
    c("base misaligned to the page size", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: b + K4, ..sp }), bad_addr);
    c("length misaligned to the page size", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { length: K64 + K4, ..sp }), bad_addr);
    c("empty", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { length: 0, ..sp }), bad_addr);
    c("wrapping", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: u64::MAX - K64 + 1, length: 2 * K64, ..sp }), bad_addr);
    c("outside the pool", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: end, ..sp }), bad_addr);
    c("across the pool's end", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: end - K64, length: 2 * K64, ..sp }), bad_addr);
    c("across the pool's start", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: b - K64, length: 2 * K64, ..sp }), bad_addr);

    let sz = UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: alias + (1 << 30), length: M2, ..Default::default() };
    c("padding", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { pad0: 1, ..sz }), bad_arg);
    c("base 0", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: 0, ..sz }), bad_addr);
    c("base misaligned (64 KiB)", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: sz.base + K64, ..sz }), bad_addr);
    c("empty", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { length: 0, ..sz }), bad_addr);
    c("wrapping", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: wrap, length: 2 * M2, ..sz }), bad_addr);
    c("inside the pool", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: b, ..sz }), UVM_GASAN_ST_ADDRESS_IN_USE);
    if top != 0 {
        c("beyond the GPUs' reach", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: top, ..sz }), UVM_GASAN_ST_OUT_OF_RANGE);
    }

    let sf = UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS::default();
    c("padding", SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { pad0: 1, ..sf }), bad_arg);
    c("unknown flag", SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { flags: 2, ..sf }), bad_arg);
    c("unknown high flag", SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { flags: 1 << 31, ..sf }), bad_arg);
    v
}

/// Well-formed calls that need a pool, sent before one is reserved: all refused with
/// INVALID_STATE. `near` is any 2 MiB-aligned, non-zero address (the future pool's).
pub fn no_pool_cases(near: u64) -> Vec<Case> {
    use Call::*;
    let st = UVM_GASAN_ST_INVALID_STATE;
    let mut v = Vec::new();
    let mut c = |what: &str, call: Call| v.push(Case { what: what.into(), call, expect: st });
    c("no pool", MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: near, length: K64, aliasBase: near + (1 << 40), ..Default::default() }));
    c("no pool", UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: near, length: K64, ..Default::default() }));
    c("no pool", SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: near, length: K4, pageSize: K4 as u32, prot: UVM_GASAN_PROT_NONE, ..Default::default() }));
    c("no pool", MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: near, length: M2, ..Default::default() }));
    c("no pool", SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS::default()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits { pool_base: 0x7f00_0000_0000, pool_length: 1 << 34, max_va: 1 << 49 }
    }

    #[test]
    fn every_case_is_refused_as_written() {
        for k in malformed_cases(&lim()).iter().chain(no_pool_cases(lim().pool_base).iter()) {
            let l = if k.expect == UVM_GASAN_ST_INVALID_STATE && k.what == "no pool" { Limits { pool_length: 0, ..lim() } } else { lim() };
            assert_eq!(k.call.check(&l), k.expect, "{} {}", k.call.name(), k.what);
            assert_ne!(k.expect, UVM_GASAN_ST_OK);
        }
    }

    #[test]
    fn the_valid_calls_behind_the_cases_pass() {
        let l = lim();
        let end = l.pool_base + l.pool_length;
        let alias = (end + M2).next_multiple_of(1 << 30);
        let ok = [
            Call::Identify(Default::default()),
            Call::Query(Default::default()),
            Call::MapAlias(UVM_GASAN_MAP_ALIAS_PARAMS { srcBase: l.pool_base, length: K64, aliasBase: alias, ..Default::default() }),
            Call::UnmapAlias(UVM_GASAN_UNMAP_ALIAS_PARAMS { aliasBase: alias, length: K64, ..Default::default() }),
            Call::SetProtection(UVM_GASAN_SET_PROTECTION_PARAMS { base: l.pool_base + K64, length: K64, pageSize: K64 as u32, prot: 0, ..Default::default() }),
            Call::MapSparseZero(UVM_GASAN_MAP_SPARSE_ZERO_PARAMS { base: alias + (1 << 30), length: M2, ..Default::default() }),
            Call::SubscribeFaults(UVM_GASAN_SUBSCRIBE_FAULTS_PARAMS { flags: UVM_GASAN_SUBSCRIBE_NONBLOCK, ..Default::default() }),
        ];
        for c in ok {
            assert_eq!(c.check(&l), UVM_GASAN_ST_OK, "{c:?}");
        }
        let first = Call::ReservePool(UVM_GASAN_RESERVE_POOL_PARAMS { base: l.pool_base, length: l.pool_length, ..Default::default() });
        assert_eq!(first.check(&Limits { pool_length: 0, ..l }), UVM_GASAN_ST_OK);
    }

    #[test]
    fn read_write_never_exceeds_the_original_mapping() {
        assert_eq!(prot_mapping_type(UVM_GASAN_PROT_RW, 3), Err(UVM_GASAN_ST_INVALID_ACCESS_TYPE));
        assert_eq!(prot_mapping_type(UVM_GASAN_PROT_RW, 1), Ok(1));
        assert_eq!(prot_mapping_type(UVM_GASAN_PROT_RW, 0), Ok(0));
        assert_eq!(prot_mapping_type(UVM_GASAN_PROT_RO, 1), Ok(3));
        assert_eq!(prot_mapping_type(UVM_GASAN_PROT_NONE, 0), Err(UVM_GASAN_ST_INVALID_ARGUMENT));
    }
}
