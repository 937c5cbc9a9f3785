//! PTX text that the rewriter emits: the module prelude (control block + slow path) and the check
//! around one access. Every emitted line ends with the [`MARKER`] comment (lines.rs writes them).

use super::access::{Access, AddrBase, Instr, Width};
use super::bounds::FastPath;
use super::ir::header::Header;
use super::lines::{encoding_test, ln, pool_test, Lines, Piece, LAST_ADDR, LAST_SITE, MARKER};
use crate::abi::{ctl_offset, record_offset, ring_offset, CONTROL_BLOCK_SIZE, CONTROL_BLOCK_SYMBOL, ERROR_RECORD_SIZE, EXTENT_ENTRY_SIZE, FLAG_RECOVER, RING_RECORDS_OFFSET, SLOW_PATH_SYMBOL};
use crate::shadow::{Scale, OUT_OF_POOL_SHADOW};
use rustc_hash::FxHashMap as HashMap;
use std::fmt::Write;

/// Which fixed block [`fixed_text`] holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum FixedBlock {
    /// With `no_extent`: the zero extent entry kernel-parameter lookups read (bounds.rs); with
    /// `outside`: the outside verdict's list scan (outside.rs).
    Prelude { no_extent: bool, outside: bool },
    /// A function's report block of this kind (with outside checks: see [`ReportBlock::shadow`]).
    Report(ReportBlock, bool),
}

/// The text of a block that depends only on the scale and the publishing form: built once per process and
/// shared (a module's prelude and its functions' report blocks are the same text every time, and
/// formatting them was a measurable part of instrumenting a small module).
pub(super) fn fixed_text(block: FixedBlock, scale: Scale, publish: Publish) -> std::sync::Arc<str> {
    type Texts = std::collections::HashMap<(FixedBlock, Scale, Publish), std::sync::Arc<str>>;
    static TEXTS: std::sync::OnceLock<std::sync::Mutex<Texts>> = std::sync::OnceLock::new();
    // A poisoned lock only means another thread panicked while building a text: the map holds
    // whole entries only, so it is still good.
    let mut texts = TEXTS.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    texts
        .entry((block, scale, publish))
        .or_insert_with(|| {
            match block {
                FixedBlock::Prelude { no_extent, outside } => {
                    let mut p = prelude(scale, publish, no_extent);
                    if outside {
                        super::outside::pass_function(&mut p);
                    }
                    p
                }
                FixedBlock::Report(report, outside) => fail_block(report, scale, outside, "\t", publish),
            }
            .into()
        })
        .clone()
}

/// Control block and slow path, inserted after the module header.
fn prelude(scale: Scale, publish: Publish, no_extent: bool) -> String {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut s = String::new();
    let _ = writeln!(s, "{MARKER} checked by gasan (GASan-{}), control block + slow path", scale.granule());
    let _ = writeln!(s, ".weak .const .align 8 .b8 {ctl}[{CONTROL_BLOCK_SIZE}]; {MARKER}");
    if no_extent {
        // An extent entry that claims nothing, read by kernel-parameter lookups (bounds.rs) whose
        // pointer is not in the pool: the load stays unpredicated (ptxas schedules it earlier).
        let _ = writeln!(s, ".weak .global .align 16 .b8 {}[{EXTENT_ENTRY_SIZE}]; {MARKER}", super::bounds::NO_EXTENT_SYMBOL);
    }
    let _ = writeln!(
        s,
        ".weak .func (.param .b32 gasan_ret) {SLOW_PATH_SYMBOL}(.param .b64 gasan_addr, .param .b32 gasan_width, .param .b32 gasan_kind, .param .b32 gasan_site, .param .b32 gasan_shadow) {MARKER}"
    );
    let mut body = Lines::new(&mut s, "");
    body.texts(&[
        "{",
        ".reg .b64 %ra<6>;",
        ".reg .b32 %rr<12>;",
        ".reg .pred %rp<3>;",
        "ld.param.u64 %ra0, [gasan_addr];",
        "ld.param.u32 %rr0, [gasan_width];",
        "ld.param.u32 %rr1, [gasan_kind];",
        "ld.param.u32 %rr2, [gasan_site];",
        "ld.param.u32 %rr3, [gasan_shadow];",
    ]);
    record_body(&mut body, publish, "", AfterRecord::Continue);
    ln!(body; "ld.const.u64 %ra3, [", ctl, "+", ctl_offset::FLAGS, "];");
    ln!(body; "and.b64 %ra3, %ra3, ", FLAG_RECOVER, ";");
    body.texts(&["setp.eq.u64 %rp2, %ra3, 0;", "@%rp2 trap;", "mov.u32 %rr11, 1;", "st.param.b32 [gasan_ret], %rr11;", "ret;", "}"]);
    s
}

/// The control-block loads every check repeats, formatted once (the checks are the hot path of
/// instrumentation throughput).
struct CtlLoads {
    base: String,
    size: String,
    shadow: String,
    base_hi: String,
    size_hi: String,
}

fn ctl_loads() -> &'static CtlLoads {
    static LOADS: std::sync::OnceLock<CtlLoads> = std::sync::OnceLock::new();
    LOADS.get_or_init(|| {
        let ctl = CONTROL_BLOCK_SYMBOL;
        CtlLoads {
            base: format!("ld.const.u64 %gsa1, [{ctl}+{}];", ctl_offset::POOL_BASE),
            size: format!("ld.const.u64 %gsa2, [{ctl}+{}];", ctl_offset::POOL_SIZE),
            shadow: format!("ld.const.u64 %gsa2, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
            base_hi: format!("ld.const.u32 %gsw2, [{ctl}+{}];", ctl_offset::POOL_BASE + 4),
            size_hi: format!("ld.const.u32 %gsw2, [{ctl}+{}];", ctl_offset::POOL_SIZE + 4),
        }
    })
}

/// How a check computes its shadow address: the encoding, and whether the pool is aligned so that
/// the in-pool test and the index need only 32-bit arithmetic ([`Scale::aligned_probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Form {
    pub scale: Scale,
    pub aligned: bool,
    /// [`super::InstrumentOptions::outside_checks`].
    pub outside: bool,
    /// A check's branch to its report comes after its kernel-parameter fast path has joined
    /// ([`probe_branch`]): in functions that wait for `wgmma` groups, where ptxas keeps the
    /// descriptors and stage counters in uniform registers only when no branch leaves such a
    /// skip from inside it.
    pub fails_after_joins: bool,
}

/// `LAST_SITE`'s value for a failing access: `site | width << 32 | kind << 56`.
fn packed_site(site: u32, width: u32, kind: u8) -> u64 {
    u64::from(site) | (u64::from(width) << 32) | (u64::from(kind) << 56)
}

/// The shared report block's label (labels are function-scoped in PTX).
pub(super) const SHARED_FAIL: &str = "$gasan_fail_shared";

/// Their declaration, right after a function's opening brace.
pub(super) fn function_decls() -> String {
    format!("\t.reg .b64 {LAST_ADDR}, {LAST_SITE}; {MARKER}\n")
}

/// A function's report blocks (halt mode), one per kind: each reports [`LAST_ADDR`] and the
/// packed site [`LAST_SITE`], then traps.
///
/// (Measured and not kept, 2026-11-27: the blocks as calls of one `.noreturn` function per kind
/// defined once per module. ptxas compiles a whole-program module with a copy of every called
/// function in each kernel's code, plus per-copy ELF entries: benches/startup/kernels.cu's cubin
/// grew 669,792 -> 732,128 bytes, its code 525,312 -> 544,512; instrument/results.md.)
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum ReportBlock {
    /// A global (pool) access: the shadow byte is read at the address.
    Global,
    /// A shared/local access (spaces.rs): the address is the offset from the variable, shadow 0.
    Space,
}

impl ReportBlock {
    /// The block's label (labels are function-scoped in PTX).
    pub fn label(self) -> &'static str {
        match self {
            ReportBlock::Global => SHARED_FAIL,
            ReportBlock::Space => super::spaces::SPACE_FAIL,
        }
    }

    /// The record's label suffix ([`record_body`]).
    fn suffix(self) -> &'static str {
        match self {
            ReportBlock::Global => "_shared",
            ReportBlock::Space => "_space",
        }
    }

    /// The statements leaving the failed shadow byte in `%rr3`, from the address in `%ra0`.
    /// With `outside` checks the address may be outside the pool, where it has no shadow
    /// byte: 0 is reported.
    fn shadow(self, l: &mut Lines<'_>, scale: Scale, outside: bool) {
        match self {
            ReportBlock::Global => {
                let ctl = CONTROL_BLOCK_SYMBOL;
                if outside {
                    pool_test(l, "%ra0", ("%ra1", "%ra2"), "%rp1");
                } else {
                    ln!(l; "ld.const.u64 %ra1, [", ctl, "+", ctl_offset::POOL_BASE, "];");
                    l.text("sub.s64 %ra1, %ra0, %ra1;");
                }
                ln!(l; "shr.u64 %ra1, %ra1, ", scale.shift(), ";");
                ln!(l; "ld.const.u64 %ra2, [", ctl, "+", ctl_offset::SHADOW_BASE, "];");
                l.text("add.s64 %ra1, %ra1, %ra2;");
                if outside {
                    l.texts(&["mov.u32 %rr3, 0;", "@%rp1 ld.global.nc.u8 %rr3, [%ra1];"]);
                } else {
                    l.text("ld.global.nc.u8 %rr3, [%ra1];");
                }
            }
            ReportBlock::Space => l.text("mov.u32 %rr3, 0;"),
        }
    }

    /// The block's text (emitted once, before the function's closing brace, when used).
    pub fn block(self, form: Form, publish: Publish) -> std::sync::Arc<str> {
        fixed_text(FixedBlock::Report(self, form.outside), form.scale, publish)
    }
}

/// The report block at `report`'s label: unpacks [`LAST_ADDR`] and [`LAST_SITE`] into the
/// record's inputs, reads the shadow byte ([`ReportBlock`]), writes the record ([`record_body`])
/// and traps.
fn fail_block(report: ReportBlock, scale: Scale, outside: bool, indent: &str, publish: Publish) -> String {
    let mut s = String::new();
    let mut f = Lines::new(&mut s, indent);
    ln!(f; report.label(), ":");
    f.texts(&["{", ".reg .b64 %ra<4>;", ".reg .b32 %rr<11>;", ".reg .pred %rp<2>;"]);
    ln!(f; "mov.b64 %ra0, ", LAST_ADDR, ";");
    ln!(f; "cvt.u32.u64 %rr2, ", LAST_SITE, ";");
    ln!(f; "shr.b64 %ra3, ", LAST_SITE, ", 32;");
    f.texts(&["cvt.u32.u64 %rr0, %ra3;", "and.b32 %rr0, %rr0, 16777215;"]);
    ln!(f; "shr.b64 %ra3, ", LAST_SITE, ", 56;");
    f.text("cvt.u32.u64 %rr1, %ra3;");
    report.shadow(&mut f, scale, outside);
    record_body(&mut f, publish, report.suffix(), AfterRecord::Trap);
    f.texts(&["trap;", "}"]);
    s
}

/// How a report block publishes its record to the host. A kernel that holds a `fence.sc` or
/// `fence.acq_rel` anywhere (itself or in a function it calls) keeps its result-less `atom`s as
/// `ATOMG` where ptxas would emit `REDG` (ptxas 13.0, sm_90: histogram's contended atomics ran
/// 1.32x native that way, 1.00x without; benches/results/variants.md). So no form below holds
/// one. The record layout and its stores are the same in every form (a wider store layout cost
/// gemm_tiled two registers, over the 32 that keep its occupancy); only the ordering differs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Publish {
    /// `fence.release.sys` between the stores (PTX 8.6+, sm_90+).
    ReleaseFence,
    /// Every field store a `st.release.sys`, the sequence number an `atom.release.sys.exch`
    /// (sm_70+, PTX 6.0+).
    ReleaseStores,
    /// `membar.sys` between the stores (targets before the PTX memory model).
    Membar,
}

/// How far a fence's ordering must reach: other threads of the GPU (the device heap's writes
/// before its pointer escapes) or the host too (error records).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum FenceScope {
    Gpu,
    Sys,
}

impl Publish {
    /// A fence ordering this thread's earlier writes before its later ones at `scope`: a release
    /// fence where the target has one (it leaves the kernel's atomics reducible), else `membar`.
    pub(super) fn release_fence(self, scope: FenceScope) -> &'static str {
        match (self, scope) {
            (Publish::ReleaseFence, FenceScope::Gpu) => "fence.release.gpu;",
            (Publish::ReleaseFence, FenceScope::Sys) => "fence.release.sys;",
            (Publish::ReleaseStores | Publish::Membar, FenceScope::Gpu) => "membar.gl;",
            (Publish::ReleaseStores | Publish::Membar, FenceScope::Sys) => "membar.sys;",
        }
    }
}

/// The [`Publish`] form the module's target and PTX version allow.
pub(super) fn publish_for(header: &Header) -> Publish {
    if header.target_sm >= 90 && header.version >= (8, 6) {
        Publish::ReleaseFence
    } else if header.target_sm >= 70 && header.version >= (6, 0) {
        Publish::ReleaseStores
    } else {
        Publish::Membar
    }
}

/// The ring write of one error record, ending at `$gasan_rec_done{suffix}:`. Inputs: `%ra0` address,
/// `%rr0` width, `%rr1` kind, `%rr2` site, `%rr3` shadow byte; uses `%ra1..2`, `%rr4..10`,
/// `%rp0..1`. Shared by the slow-path function (recover mode), the report blocks (halt mode: no
/// call in the kernel, whose calling convention would cost the fast path registers; see
/// [`ReportBlock`] for a `.noreturn` call) and the device heap's free.
///
/// Order (what the host reader relies on, runtime/src/ring.rs): the slot's seq is zeroed before
/// any field is written and set to index + 1 after all of them, so a writer killed mid-record
/// (another thread's trap) leaves seq 0, never an older record's seq over a mix of two records;
/// and the final seq is performed before the thread goes on (to a trap, in halt mode).
///
/// `then` is what follows the record. Before a trap ([`AfterRecord::Trap`], the halt-mode report
/// blocks) the host reads the ring only after the kernel is dead, so only the finished record must
/// reach it: the steps are ordered at GPU scope and one sys-scope release ends the record. Every
/// sys-scope fence in a kernel costs its lazy load ~3.7 µs on the H100 (the driver's work on the
/// SASS: benches/diag, `checked_onesys` 21.2 µs a kernel against 28.4 with three), paid at each
/// kernel's first launch. Where the thread goes on ([`AfterRecord::Continue`], recover mode, the
/// device heap's free), a reader may look while other kernels run: every step at sys scope.
pub(super) fn record_body(l: &mut Lines<'_>, publish: Publish, suffix: &str, then: AfterRecord) {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let release = publish == Publish::ReleaseStores;
    let inner = match then {
        AfterRecord::Trap => FenceScope::Gpu,
        AfterRecord::Continue => FenceScope::Sys,
    };
    // Release stores order themselves; the other forms fence between volatile stores.
    let fence = |l: &mut Lines<'_>, scope: FenceScope| {
        if !release {
            l.text(publish.release_fence(scope));
        }
    };
    // A field store: a release where the stores order themselves, else volatile between fences.
    let sem = match (release, inner) {
        (false, _) => "volatile",
        (true, FenceScope::Gpu) => "release.gpu",
        (true, FenceScope::Sys) => "release.sys",
    };
    let st = |l: &mut Lines<'_>, ty: &str, off: usize, val: &str| ln!(l; "st.", sem, ".global.", ty, " [%ra2+", off, "], ", val, ";");
    ln!(l; "ld.const.u64 %ra1, [", ctl, "+", ctl_offset::RING, "];");
    l.text("setp.eq.u64 %rp0, %ra1, 0;");
    ln!(l; "@%rp0 bra $gasan_rec_done", suffix, ";");
    ln!(l; "atom.global.add.u32 %rr4, [%ra1+", ring_offset::HEAD, "], 1;");
    ln!(l; "ld.volatile.global.u32 %rr5, [%ra1+", ring_offset::CAPACITY, "];");
    // The ring is reused: slot = index mod capacity (a power of two), seq = index + 1.
    l.texts(&["add.u32 %rr5, %rr5, -1;", "and.b32 %rr5, %rr4, %rr5;"]);
    ln!(l; "mul.wide.u32 %ra2, %rr5, ", ERROR_RECORD_SIZE, ";");
    l.text("add.s64 %ra2, %ra2, %ra1;");
    ln!(l; "add.s64 %ra2, %ra2, ", RING_RECORDS_OFFSET, ";");
    ln!(l; "st.volatile.global.u32 [%ra2+", record_offset::SEQ, "], 0;");
    fence(l, inner);
    st(l, "u64", record_offset::ADDR, "%ra0");
    ln!(l; "ld.const.u32 %rr6, [", ctl, "+", ctl_offset::MODULE_ID, "];");
    st(l, "u32", record_offset::MODULE_ID, "%rr6");
    st(l, "u32", record_offset::SITE_ID, "%rr2");
    l.texts(&["mov.u32 %rr7, %ctaid.x;", "mov.u32 %rr8, %ctaid.y;", "mov.u32 %rr9, %ctaid.z;"]);
    st(l, "v2.u32", record_offset::CTAID, "{%rr7, %rr8}");
    st(l, "u32", record_offset::CTAID + 8, "%rr9");
    l.texts(&["mov.u32 %rr7, %tid.x;", "mov.u32 %rr8, %tid.y;", "mov.u32 %rr9, %tid.z;"]);
    st(l, "u32", record_offset::TID, "%rr7");
    st(l, "v2.u32", record_offset::TID + 4, "{%rr8, %rr9}");
    st(l, "u32", record_offset::WIDTH, "%rr0");
    st(l, "u8", record_offset::KIND, "%rr1");
    st(l, "u8", record_offset::SHADOW, "%rr3");
    fence(l, inner);
    l.text("add.u32 %rr10, %rr4, 1;");
    if release {
        // The exchange's old value, stored beside it, makes the thread wait for the exchange to be
        // performed (what the trailing fence does in the other forms).
        ln!(l; "atom.release.sys.global.exch.b32 %rr9, [%ra2+", record_offset::SEQ, "], %rr10;");
        ln!(l; "st.volatile.global.u32 [%ra2+", record_offset::SEQ + 4, "], %rr9;");
    } else {
        ln!(l; "st.volatile.global.u32 [%ra2+", record_offset::SEQ, "], %rr10;");
        fence(l, FenceScope::Sys);
    }
    ln!(l; "$gasan_rec_done", suffix, ":");
}

/// What a thread does after writing an error record ([`record_body`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum AfterRecord {
    /// Traps (halt mode's report blocks).
    Trap,
    /// Goes on (recover mode's slow path, the device heap's free).
    Continue,
}

/// [`record_body`]'s lines for a thread that goes on, unmarked (heap.rs assembles its functions, once per module, from
/// lines).
pub(super) fn record_body_lines(publish: Publish, suffix: &str) -> Vec<String> {
    let mut s = String::new();
    record_body(&mut Lines::unmarked(&mut s, ""), publish, suffix, AfterRecord::Continue);
    s.lines().map(String::from).collect()
}

/// Key for check elimination: same guard, same address expression.
pub(super) fn check_key(ins: &Instr<'_>, a: &Access) -> Option<String> {
    if a.bulk || a.guard_nonzero.is_some() {
        return None;
    }
    // `guard|base|offset`, an immediate base as `#value`.
    let mut key = String::with_capacity(32);
    key.push_str(ins.guard.unwrap_or(""));
    key.push('|');
    match &a.base {
        AddrBase::Reg(r) => key.push_str(r),
        AddrBase::Imm(v) => {
            key.push('#');
            v.put(&mut key);
        }
    }
    key.push('|');
    a.offset.put(&mut key);
    Some(key)
}

/// The registers elimination key `k` depends on: its guard predicate (without `!`) and its
/// address register (an immediate address, `#…`, and the offset name none).
pub(super) fn key_registers(k: &str) -> impl Iterator<Item = &str> {
    k.split('|').map(|p| p.trim_start_matches('!')).filter(|p| p.starts_with('%'))
}

/// The condition under which the access happens, in `%gsp3`: its own predicate and, for cp.async,
/// a nonzero src-size. `None` when it always happens.
fn guard_setup(v: &mut Lines<'_>, ins: &Instr<'_>, a: &Access) -> Option<&'static str> {
    let mut guard = None;
    if let Some(g) = ins.guard {
        if let Some(neg) = g.strip_prefix('!') {
            ln!(v; "not.pred %gsp3, ", neg, ";");
        } else {
            ln!(v; "mov.pred %gsp3, ", g, ";");
        }
        guard = Some("%gsp3");
    }
    if let Some(r) = &a.guard_nonzero {
        ln!(v; "setp.ne.u32 %gsp4, ", r, ", 0;");
        if guard.is_some() {
            v.text("and.pred %gsp3, %gsp3, %gsp4;");
        } else {
            v.text("mov.pred %gsp3, %gsp4;");
            guard = Some("%gsp3");
        }
    }
    guard
}

/// The in-pool test and the shadow load: `dst` = the shadow byte of `addr_reg`'s granule, or
/// [`OUT_OF_POOL_SHADOW`] (passes every access) when the address is outside the pool or `guard` is
/// false, so no predicate has to survive the load. Uses `%gsa1..2`, `%gsp0`.
fn probe_load(out: &mut Lines<'_>, form: Form, addr_reg: &str, guard: Option<&str>, dst: &str, fast: Fast<'_>) {
    let scale = form.scale;
    let loads = ctl_loads();
    if let Some((fp, suffix)) = fast {
        // Inside the whole granules of the block a kernel parameter points into (bounds.rs):
        // the shadow byte would grant them all, so it is not loaded.
        ln!(out; "mov.u32 ", dst, ", ", OUT_OF_POOL_SHADOW, ";");
        fast_test(out, addr_reg, fp);
        ln!(out; "@!%gsp0 bra ", fp.label, suffix, ";");
    }
    if form.aligned {
        // hi(addr) - hi(base) < hi(size), and index lo(addr >> shift): Scale::aligned_probe.
        out.texts(&["{", ".reg .b32 %gsw<3>;"]);
        ln!(out; "mov.b64 {%gsw0, %gsw1}, ", addr_reg, ";");
        out.text(&loads.base_hi);
        out.text("sub.u32 %gsw1, %gsw1, %gsw2;");
        out.text(&loads.size_hi);
        out.text("setp.lt.u32 %gsp0, %gsw1, %gsw2;");
        if let Some(g) = guard {
            ln!(out; "and.pred %gsp0, %gsp0, ", g, ";");
        }
        ln!(out; "shr.u64 %gsa1, ", addr_reg, ", ", scale.shift(), ";");
        out.text("cvt.u32.u64 %gsw0, %gsa1;");
        out.text(&loads.shadow);
        out.text("mad.wide.u32 %gsa1, %gsw0, 1, %gsa2;");
    } else {
        out.text(&loads.base);
        ln!(out; "sub.s64 %gsa1, ", addr_reg, ", %gsa1;");
        out.text(&loads.size);
        out.text("setp.lt.u64 %gsp0, %gsa1, %gsa2;");
        if let Some(g) = guard {
            ln!(out; "and.pred %gsp0, %gsp0, ", g, ";");
        }
        ln!(out; "shr.u64 %gsa1, %gsa1, ", scale.shift(), ";");
        out.text(&loads.shadow);
        out.text("add.s64 %gsa1, %gsa1, %gsa2;");
    }
    // Outside the pool, the control block's byte: one that passes, or once the process has
    // outside ranges, one that fails over to their verdict ([`outside_verdict`]). A guarded-off
    // access passes.
    match guard {
        _ if !form.outside => ln!(out; "mov.u32 ", dst, ", ", OUT_OF_POOL_SHADOW, ";"),
        None => ln!(out; "ld.const.u8 ", dst, ", [", CONTROL_BLOCK_SYMBOL, "+", ctl_offset::OUTSIDE_SHADOW, "];"),
        Some(g) => {
            ln!(out; "mov.u32 ", dst, ", ", OUT_OF_POOL_SHADOW, ";");
            ln!(out; "@", g, " ld.const.u8 ", dst, ", [", CONTROL_BLOCK_SYMBOL, "+", ctl_offset::OUTSIDE_SHADOW, "];");
        }
    }
    ln!(out; "@%gsp0 ld.global.nc.u8 ", dst, ", [%gsa1];");
    if form.aligned {
        out.text("}");
    }
    if let Some((fp, suffix)) = fast {
        ln!(out; fp.label, suffix, ":");
    }
}

/// A check's kernel-parameter fast path ([`super::bounds`]) and the suffix that makes its label
/// unique among the check's probes.
type Fast<'a> = Option<(&'a FastPath, &'a str)>;

/// The encoding test ([`Scale::fast_test`]) of shadow byte `shadow` for an access of
/// `check_width` bytes at `addr_reg + offset`, leaving `%gsp1` = bad (and `guard`, when given).
/// Uses `%gsr1`.
fn probe_compare(out: &mut Lines<'_>, scale: Scale, shadow: &str, addr_reg: &str, offset: i64, check_width: u32, guard: Option<&str>) {
    ln!(out; "cvt.u32.u64 %gsr1, ", addr_reg, ";");
    if offset != 0 {
        ln!(out; "add.u32 %gsr1, %gsr1, ", offset as i32, ";");
    }
    ln!(out; "and.b32 %gsr1, %gsr1, ", scale.granule() - 1, ";");
    encoding_test(out, scale, check_width, shadow, "%gsr1", "%gsp1");
    if let Some(g) = guard {
        ln!(out; "and.pred %gsp1, %gsp1, ", g, ";");
    }
}

/// Halt mode's whole check of one probe, ending in its branch to `$gasan_fail_{label}{suffix}`
/// (`at` = label, suffix; the fast path's label takes the same suffix). On the kernel-parameter
/// fast path the branch skips the encoding test too, not only the shadow load: an aligned access
/// of at most a granule that starts inside the whole granules of a live block lies in one of
/// them, which grants all its bytes (three fewer instructions and one fewer predicate per check
/// on the path nearly every access takes).
///
/// With [`Form::fails_after_joins`] the branch to the report comes after the fast path has
/// joined: a branch out of the skip from inside it made ptxas give up the uniform registers of a
/// `wgmma` loop after it, even a loop with no check (the pipelined matmul's fast loop: 209 SASS
/// instructions an iteration, 32 of them `R2UR`, against 172 with its range test's vote, native
/// 167). The verdict is set "good" before the skip, so the encoding test stays inside it (up to
/// REVISION 104 it ran on every pass, on a shadow byte the fast path left granting the access:
/// four more instructions a check on the path nearly every access takes).
fn probe_branch(out: &mut Lines<'_>, form: Form, addr_reg: &str, check_width: u32, guard: Option<&str>, fast: Option<&FastPath>, at: (u32, &str)) {
    let (label, suffix) = at;
    let joins_first = form.fails_after_joins;
    if let Some(fp) = fast {
        if joins_first {
            // The fast path leaves the verdict "good": only the branch after the join is on it.
            out.text("setp.ne.u32 %gsp1, 0, 0;");
        }
        fast_test(out, addr_reg, fp);
        ln!(out; "@!%gsp0 bra ", fp.label, suffix, ";");
    }
    probe_test(out, form, addr_reg, check_width, guard, None);
    if !joins_first {
        ln!(out; "@%gsp1 bra $gasan_fail_", label, suffix, ";");
    }
    if let Some(fp) = fast {
        ln!(out; fp.label, suffix, ":");
    }
    if joins_first {
        ln!(out; "@%gsp1 bra $gasan_fail_", label, suffix, ";");
    }
}

/// The whole check of one probe in place: `%gsr0` = shadow byte, `%gsp1` = bad.
fn probe_test(out: &mut Lines<'_>, form: Form, addr_reg: &str, check_width: u32, guard: Option<&str>, fast: Fast<'_>) {
    let scale = form.scale;
    probe_load(out, form, addr_reg, guard, "%gsr0", fast);
    probe_compare(out, scale, "%gsr0", addr_reg, 0, check_width, None);
}

/// Prefetch (halt mode): the shadow byte of a later access's granule, loaded into `%gsv<line>` as
/// soon as its address register holds its final value, so that the loads of several checks in a
/// basic block are in flight together instead of each waiting behind the previous check's branch.
/// The load is unguarded (any pool address has mapped shadow); the check at the access applies the
/// guard. Declares the register in the current scope.
/// `chain` is the address arithmetic to recompute first: (declaration, statement) pairs.
/// `declare` are the registers to declare in the current scope, `reg` the one loaded.
/// With `batch` = (predicate, first member, width) the byte is also tested at once and the result
/// ORed into the block's batch predicate (set by the first member); the chain's temporaries are
/// then declared in the current scope, for the batch's recheck.
/// With `data`, a load's data is also prefetched into L2 there.
#[allow(clippy::too_many_arguments)]
/// With `group` (a batch member with a fast path, emitted with others at one point: see
/// [`fast_group`]), only the fast test is made here, into predicate `group`.
pub(super) fn prefetch(
    form: Form,
    a: &Access,
    chain: &[(String, String)],
    declare: &[&str],
    reg: &str,
    indent: &str,
    batch: Option<(&str, bool, u32)>,
    data: bool,
    fast: Option<&FastPath>,
    group: Option<&str>,
) -> String {
    let scale = form.scale;
    let mut s = String::with_capacity(1024);
    let mut v = Lines::new(&mut s, indent);
    for d in declare {
        ln!(v; ".reg .b32 ", d, ";");
    }
    if let Some((pred, true, _)) = batch {
        ln!(v; ".reg .pred ", pred, ";");
    }
    let group = group.filter(|_| batch.is_some() && fast.is_some());
    if let Some(g) = group {
        ln!(v; ".reg .pred ", g, ";");
    }
    let declare_chain = |v: &mut Lines<'_>| {
        for (decl, _) in chain {
            v.text(decl);
        }
    };
    if batch.is_some() {
        declare_chain(&mut v);
    }
    v.texts(&["{", ".reg .b64 %gsa<3>;", ".reg .b32 %gsr<2>;", ".reg .pred %gsp<2>;"]);
    if batch.is_none() {
        declare_chain(&mut v);
    }
    for (_, stmt) in chain {
        v.text(stmt);
    }
    address_setup(&mut v, a, "%gsa0");
    if data && a.kind == crate::abi::AccessKind::Read {
        // Start fetching the load's data into L2 while its check runs, so the load that follows
        // the check's branch does not add the shadow byte's latency (or, on the kernel-parameter
        // fast path, the batch's tests) to its own. A prefetch is a hint: an invalid or unmapped
        // address is ignored, a shared-window one is a no-op.
        v.text("prefetch.L2 [%gsa0];");
    }
    match (batch, fast, group) {
        (Some((pred, first, _)), Some(fp), Some(g)) => {
            // The batch predicate starts false: the group's shadow parts OR into it.
            if first {
                ln!(v; "mov.pred ", pred, ", 0;");
            }
            fast_test(&mut v, "%gsa0", fp);
            ln!(v; "mov.pred ", g, ", %gsp0;");
        }
        (Some((pred, first, width)), Some(fp), None) => {
            // The fast path leaves the batch predicate as it is (false for the first member) and
            // skips the load and the encoding test, as [`probe_branch`] does.
            fast_test(&mut v, "%gsa0", fp);
            if first {
                ln!(v; "mov.pred ", pred, ", %gsp0;");
            }
            ln!(v; "@!%gsp0 bra ", fp.label, ";");
            probe_load(&mut v, form, "%gsa0", None, reg, None);
            batch_member(&mut v, scale, reg, pred, first, width);
            ln!(v; fp.label, ":");
        }
        (Some((pred, first, width)), None, _) => {
            probe_load(&mut v, form, "%gsa0", None, reg, None);
            batch_member(&mut v, scale, reg, pred, first, width);
        }
        (None, fast, _) => probe_load(&mut v, form, "%gsa0", None, reg, fast.map(|fp| (fp, ""))),
    }
    v.text("}");
    s
}

/// The batch members emitted at one point with fast paths ([`prefetch`] with `group`), after
/// their fast tests: one branch skips every shadow load when all of them passed, instead of a
/// branch (and a convergence barrier pair) per member. Each member's `(fast predicate, shadow
/// part)` ([`grouped_shadow_part`]); `label`: unique in the function.
pub(super) fn fast_group(out: &mut String, indent: &str, members: &[(String, String)], label: &str) {
    let Some(((first, _), rest)) = members.split_first() else { return };
    let mut v = Lines::new(out, indent);
    let any = if rest.is_empty() {
        first.clone()
    } else {
        let any = format!("{first}a");
        ln!(v; ".reg .pred ", any, ";");
        ln!(v; "mov.pred ", any, ", ", first, ";");
        for (g, _) in rest {
            ln!(v; "or.pred ", any, ", ", any, ", ", g, ";");
        }
        any
    };
    ln!(v; "@!", any, " bra ", label, ";");
    for (_, part) in members {
        out.push_str(part);
    }
    ln!(Lines::new(out, indent); label, ":");
}

/// A grouped batch member's shadow part ([`fast_group`]): when its fast test `group` failed, its
/// shadow byte loaded into `reg` and tested, ORed into the batch predicate `pred`. `a`: the access
/// with its base where the address lives at this point.
pub(super) fn grouped_shadow_part(form: Form, a: &Access, reg: &str, pred: &str, width: u32, group: &str, label: &str) -> String {
    let mut s = String::with_capacity(512);
    let mut v = Lines::new(&mut s, "\t");
    v.texts(&["{", ".reg .b64 %gsa<3>;", ".reg .b32 %gsr<2>;", ".reg .pred %gsp<2>;"]);
    ln!(v; "@!", group, " bra ", label, ";");
    address_setup(&mut v, a, "%gsa0");
    probe_load(&mut v, form, "%gsa0", None, reg, None);
    batch_member(&mut v, form.scale, reg, pred, false, width);
    ln!(v; label, ":");
    v.text("}");
    s
}

/// A batch member's encoding test of its prefetched shadow byte `reg`, set into (`first`) or
/// OR-ed into the batch predicate `pred`.
fn batch_member(v: &mut Lines<'_>, scale: Scale, reg: &str, pred: &str, first: bool, width: u32) {
    probe_compare(v, scale, reg, "%gsa0", 0, width, None);
    if first {
        ln!(v; "mov.pred ", pred, ", %gsp1;");
    } else {
        ln!(v; "or.pred ", pred, ", ", pred, ", %gsp1;");
    }
}

/// The kernel-parameter fast path's test: `%gsp0` = `addr_reg` lies outside the whole granules of
/// its parameter's block (false: the access needs no shadow byte).
fn fast_test(out: &mut Lines<'_>, addr_reg: &str, fp: &FastPath) {
    match &fp.index {
        Some(ix) if ix.add == 0 => ln!(out; "setp.ge.u32 %gsp0, ", ix.index, ", ", ix.limit, ";"),
        Some(ix) => {
            out.texts(&["{", ".reg .b32 %gsi;"]);
            ln!(out; "add.s32 %gsi, ", ix.index, ", ", ix.add, ";");
            ln!(out; "setp.ge.u32 %gsp0, %gsi, ", ix.limit, ";");
            out.text("}");
        }
        None => fast_test_address(out, addr_reg, fp),
    }
}

/// [`fast_test`] on the 64-bit address.
fn fast_test_address(out: &mut Lines<'_>, addr_reg: &str, fp: &FastPath) {
    ln!(out; "setp.lt.u64 %gsp0, ", addr_reg, ", ", fp.lo, ";");
    ln!(out; "setp.ge.or.u64 %gsp0, ", addr_reg, ", ", fp.hi, ", %gsp0;");
}

/// One member of a batch's recheck (reached when the batch predicate is set): the full check of
/// the access at `a` (its base already renamed to where the address lives at the batch point); on
/// failure it hands the address and packed site to the function's shared report block.
pub(super) fn batch_recheck(out: &mut String, form: Form, a: &Access, width: u32, site: u32) {
    let packed = packed_site(site, width, a.kind as u8);
    let mut v = Lines::new(out, "\t");
    v.texts(&["{", ".reg .b64 %gsa<3>;", ".reg .b32 %gsr<2>;", ".reg .pred %gsp<2>;"]);
    address_setup(&mut v, a, "%gsa0");
    probe_test(&mut v, form, "%gsa0", width, None, None);
    if !form.outside {
        ln!(v; "@%gsp1 mov.b64 ", LAST_ADDR, ", %gsa0;");
        ln!(v; "@%gsp1 mov.b64 ", LAST_SITE, ", ", packed, ";");
        ln!(v; "@%gsp1 bra ", SHARED_FAIL, ";");
        v.text("}");
        return;
    }
    ln!(v; "@!%gsp1 bra ", BATCH_NEXT, site, ";");
    outside_verdict(&mut v, "%gsa0", width, (BATCH_NEXT, site, ""));
    ln!(v; "mov.b64 ", LAST_ADDR, ", %gsa0;");
    ln!(v; "mov.b64 ", LAST_SITE, ", ", packed, ";");
    ln!(v; "bra.uni ", SHARED_FAIL, ";");
    ln!(v; BATCH_NEXT, site, ":");
    v.text("}");
}

/// The check of one member of a run of masked accesses (masked_runs.rs), written before it, and
/// the access itself under `guard && !bad` (`stmt`: its text without its guard). The shadow byte
/// is loaded and tested under the access's own guard; a bad member's access is not made, and the
/// run's first bad member leaves its address and packed site where the report block reads them;
/// `run`: the run's predicate (some member was bad), declared and set by its `first` member,
/// branched on after its last ([`run_branch`]). No branch: the run stays one basic block.
/// The byte is loaded even where a kernel-parameter fast path (bounds.rs) would grant the
/// access: in a member, that address test cost more than the load it spared (REVISION 91 to 93,
/// Triton's vector add 1.022x native against 1.007x, benches/jit/pair.py on an H100). A run
/// tested before it has members of [`run_member_tested`]'s form instead.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_member(form: Form, ins: &Instr<'_>, a: &Access, stmt: &str, indent: &str, site: u32, width: u32, run: (&str, &str), first: bool) -> String {
    let (pred, ok) = run;
    let mut s = String::with_capacity(1024);
    let mut v = Lines::new(&mut s, indent);
    if first {
        ln!(v; ".reg .pred ", pred, ", ", ok, ";");
    }
    v.texts(&["{", ".reg .b64 %gsa<3>;", ".reg .b32 %gsr<2>;", ".reg .pred %gsp<3>;"]);
    address_setup(&mut v, a, "%gsa0");
    run_guard(&mut v, ins.guard);
    let guard = "%gsp2";
    probe_load(&mut v, form, "%gsa0", Some(guard), "%gsr0", None);
    probe_compare(&mut v, form.scale, "%gsr0", "%gsa0", 0, width, Some(guard));
    // %gsp1: bad (and guarded). The access runs where its guard holds and it is not bad.
    ln!(v; "not.pred %gsp0, %gsp1;");
    ln!(v; "and.pred ", ok, ", %gsp0, ", guard, ";");
    // The run's first bad member is the one reported.
    if first {
        ln!(v; "mov.pred ", pred, ", %gsp1;");
    } else {
        first_bad(&mut v, pred, "%gsp1", "%gsp0");
    }
    let at = if first { "%gsp1" } else { "%gsp0" };
    record_bad(&mut v, at, "%gsa0", packed_site(site, width, a.kind as u8));
    v.text("}");
    ln!(Lines::new(&mut s, indent); "@", ok, " ", stmt);
    s
}

/// A member of a run tested before it ([`run_prefetch`], which also recorded the run's first bad
/// member): its access runs where its guard holds and bit `bit` of register `mask` (bad) is
/// clear. Two instructions: the run stays one basic block, and its members wait on no load.
pub(super) fn run_member_tested(guard: Option<&str>, stmt: &str, indent: &str, ok: &str, mask: &str, bit: u32) -> String {
    let mut s = String::with_capacity(stmt.len() + 128);
    let mut v = Lines::new(&mut s, indent);
    v.texts(&["{", ".reg .b32 %gsr0;"]);
    ln!(v; "and.b32 %gsr0, ", mask, ", ", 1u32 << bit, ";");
    match guard {
        Some(g) => ln!(v; "setp.eq.and.u32 ", ok, ", %gsr0, 0, ", g, ";"),
        None => ln!(v; "setp.eq.u32 ", ok, ", %gsr0, 0;"),
    }
    v.text("}");
    ln!(v; "@", ok, " ", stmt);
    s
}

/// `at` := `bad` and no earlier member of the run was (`pred`), then `pred` |= `bad`.
fn first_bad(v: &mut Lines<'_>, pred: &str, bad: &str, at: &str) {
    ln!(v; "not.pred ", at, ", ", pred, ";");
    ln!(v; "and.pred ", at, ", ", at, ", ", bad, ";");
    ln!(v; "or.pred ", pred, ", ", pred, ", ", bad, ";");
}

/// Where `at` holds, the address in `addr` and the packed site become the report block's.
fn record_bad(v: &mut Lines<'_>, at: &str, addr: &str, packed: u64) {
    ln!(v; "@", at, " mov.b64 ", LAST_ADDR, ", ", addr, ";");
    ln!(v; "@", at, " mov.b64 ", LAST_SITE, ", ", packed, ";");
}

/// A run member's guard into `%gsp2` (members are guarded; `!%p` taken as written).
fn run_guard(v: &mut Lines<'_>, guard: Option<&str>) {
    match guard.map(|g| (g.strip_prefix('!'), g)) {
        Some((Some(neg), _)) => ln!(v; "not.pred %gsp2, ", neg, ";"),
        Some((None, g)) => ln!(v; "mov.pred %gsp2, ", g, ";"),
        None => v.text("setp.eq.u32 %gsp2, 0, 0;"),
    }
}

/// One member of a run whose shadow bytes are loaded before it ([`run_prefetch`]): its access,
/// its guard, its width, its kernel-parameter fast path, its site, and the mask bit its verdict
/// goes into.
pub(super) struct RunPrefetch<'a> {
    pub access: &'a Access,
    pub guard: Option<&'a str>,
    pub width: u32,
    pub fast: Option<&'a FastPath>,
    pub site: u32,
    pub mask: String,
    pub bit: u32,
    /// The [`RunSpan`] the member's address is tested in before the branch, if any.
    pub span: Option<usize>,
}

/// Run members at `base` plus constants, inside one kernel parameter's block (bounds.rs): before
/// the branch, the span from the least to the greatest of their addresses is tested once instead
/// of each member (a Triton tile: one pointer plus the lanes' offsets). Guards are not read there,
/// so a masked-off lane outside the block sends the run past the branch, where each member is
/// tested under its guard.
pub(super) struct RunSpan<'a> {
    pub base: &'a str,
    pub first: i64,
    pub last: i64,
    pub fast: &'a FastPath,
}

/// Before a run of masked accesses (masked_runs.rs `loaded_ahead`): each member's test first (its
/// guard, and outside its parameter's block where it has a fast path), then one branch past every
/// shadow load when no member needs one; past it, each such member's byte is loaded (with
/// [`probe_load`]'s in-pool test) and tested in member order: a bad one sets its bit in the run's
/// masks (32 members a register), and the first bad one records its address and site for the
/// report and sets the run's predicate. Each member then only tests its bit
/// ([`run_member_tested`]): the run carries one register per 32 members, no member waits on a
/// load, and the run's branch ([`run_branch`]) reads the predicate set here. `run`: the run's
/// predicates (some member bad; a member's access may run), declared here with the masks in the
/// current scope, for the members. `label`: unique in the function.
pub(super) fn run_prefetch(out: &mut String, form: Form, indent: &str, members: &[RunPrefetch<'_>], spans: &[RunSpan<'_>], label: &str, run: (&str, &str)) {
    let (pred, ok) = run;
    let mut v = Lines::new(out, indent);
    ln!(v; ".reg .pred ", pred, ", ", ok, ";");
    ln!(v; "setp.ne.u32 ", pred, ", 0, 0;");
    let mut masks: Vec<&str> = members.iter().map(|m| m.mask.as_str()).collect();
    masks.dedup();
    for mask in &masks {
        ln!(v; ".reg .b32 ", mask, ";");
        ln!(v; "mov.b32 ", mask, ", 0;");
    }
    v.texts(&["{", ".reg .b64 %gsa<3>;", ".reg .b32 %gsr<2>;"]);
    ln!(v; ".reg .pred %gsp<3>, %gsq<", members.len(), ">;");
    // %gsp1: some span, or some member outside every span, needs shadow bytes.
    let mut any = false;
    let mut or_into = |v: &mut Lines<'_>, p: &str| {
        if any {
            ln!(v; "or.pred %gsp1, %gsp1, ", p, ";");
        } else {
            ln!(v; "mov.pred %gsp1, ", p, ";");
        }
        any = true;
    };
    for s in spans {
        // Outside: its least address below the block, its greatest at or past the block's end, or
        // the two wrapped around (then the members between are not between them).
        span_address(&mut v, s.base, s.first, "%gsa0");
        span_address(&mut v, s.base, s.last, "%gsa1");
        ln!(v; "setp.lt.u64 %gsp0, %gsa0, ", s.fast.lo, ";");
        ln!(v; "setp.ge.or.u64 %gsp0, %gsa1, ", s.fast.hi, ", %gsp0;");
        v.text("setp.lt.or.u64 %gsp0, %gsa1, %gsa0, %gsp0;");
        or_into(&mut v, "%gsp0");
    }
    for (k, m) in members.iter().enumerate().filter(|(_, m)| m.span.is_none()) {
        member_needs_byte(&mut v, m, k);
        or_into(&mut v, &format!("%gsq{k}"));
    }
    ln!(v; "@!%gsp1 bra ", label, ";");
    for (k, m) in members.iter().enumerate().filter(|(_, m)| m.span.is_some()) {
        member_needs_byte(&mut v, m, k);
    }
    for (k, m) in members.iter().enumerate() {
        let q = format!("%gsq{k}");
        address_setup(&mut v, m.access, "%gsa0");
        probe_load(&mut v, form, "%gsa0", Some(&q), "%gsr0", None);
        probe_compare(&mut v, form.scale, "%gsr0", "%gsa0", 0, m.width, Some(&q));
        ln!(v; "@%gsp1 or.b32 ", m.mask, ", ", m.mask, ", ", 1u32 << m.bit, ";");
        first_bad(&mut v, pred, "%gsp1", "%gsp0");
        record_bad(&mut v, "%gsp0", "%gsa0", packed_site(m.site, m.width, m.access.kind as u8));
    }
    ln!(v; label, ":");
    v.text("}");
}

/// `%gsq<k>`: run member `k` (of [`run_prefetch`]) needs its shadow byte: its guard holds and its
/// address lies outside its parameter's block (or it has no fast path).
fn member_needs_byte(v: &mut Lines<'_>, m: &RunPrefetch<'_>, k: usize) {
    address_setup(v, m.access, "%gsa0");
    run_guard(v, m.guard);
    match m.fast {
        Some(fp) => {
            fast_test(v, "%gsa0", fp);
            ln!(v; "and.pred %gsq", k, ", %gsp0, %gsp2;");
        }
        None => ln!(v; "mov.pred %gsq", k, ", %gsp2;"),
    }
}

/// `dst` := `base` + `offset` (a [`RunSpan`]'s end).
fn span_address(v: &mut Lines<'_>, base: &str, offset: i64, dst: &str) {
    if offset == 0 {
        ln!(v; "mov.b64 ", dst, ", ", base, ";");
    } else {
        ln!(v; "add.s64 ", dst, ", ", base, ", ", offset, ";");
    }
}

/// After a run's last member: the report of its first bad member, if any ([`run_member`]).
pub(super) fn run_branch(out: &mut String, pred: &str) {
    ln!(Lines::new(out, "\t"); "@", pred, " bra ", SHARED_FAIL, ";");
}

/// Where a check goes on after its stub found an outside access the verdict passes
/// (`$gasan_resume_<label><suffix>`), and where a batch's recheck goes on to its next member
/// (`$gasan_bnext_<site>`) and back after its last (`$gasan_batch_resume_<line>`).
const RESUME: &str = "$gasan_resume_";
const BATCH_NEXT: &str = "$gasan_bnext_";
/// Where a recover-mode probe goes on after its verdict or its report.
const RECOVER_DONE: &str = "$gasan_rdone_";
pub(super) const BATCH_RESUME: &str = "$gasan_batch_resume_";

/// The out-of-line verdict on a failed check of `width` bytes at `addr` (a `.b64` register): a
/// branch to `resume` (label pieces) when the address is outside the pool and
/// [`crate::abi::outside::must_report`] passes it (see [`super::outside`]); on, to the report,
/// otherwise.
fn outside_verdict(f: &mut Lines<'_>, addr: &str, width: impl Piece, resume: (&str, u32, &str)) {
    let mut pass = String::with_capacity(32);
    pass.push_str(resume.0);
    resume.1.put(&mut pass);
    pass.push_str(resume.2);
    super::outside::verdict(f, addr, &width, &pass);
}

/// At a pipelined loop's back edge: the next iteration's shadow byte becomes the current one.
pub(super) fn next_iteration_move(out: &mut String, cur: &str, next: &str) {
    let mut v = Lines::new(out, "\t");
    ln!(v; "mov.b32 ", cur, ", ", next, ";");
}

/// `dst` = the access's first byte address.
fn address_setup(v: &mut Lines<'_>, a: &Access, dst: &str) {
    match &a.base {
        AddrBase::Reg(r) if a.offset == 0 => ln!(v; "mov.b64 ", dst, ", ", r, ";"),
        AddrBase::Reg(r) => ln!(v; "add.s64 ", dst, ", ", r, ", ", a.offset, ";"),
        AddrBase::Imm(x) => ln!(v; "mov.b64 ", dst, ", ", x.wrapping_add(a.offset as u64), ";"),
    }
}

/// Halt mode: the inline check (a conditional branch to an out-of-line block, no call and nothing
/// around the access) and that block, which recomputes the address from the unchanged operands,
/// reports and traps.
#[allow(clippy::too_many_arguments)]
pub(super) fn checked_statement_halt(
    form: Form,
    ins: &Instr<'_>,
    a: &Access,
    original: &str,
    indent: &str,
    site: u32,
    label: u32,
    prefetched: Option<&str>,
    fast: Option<&FastPath>,
    nested: bool,
) -> (String, String) {
    let scale = form.scale;
    let mut inline = String::with_capacity(1024);
    let mut v = Lines::new(&mut inline, indent);
    v.texts(&["{", ".reg .b64 %gsa<6>;", ".reg .b32 %gsr<2>;", ".reg .pred %gsp<5>;"]);
    // With the shadow byte prefetched, only the low address bits are needed here.
    let prefetched = match (&a.base, &a.width, a.bulk, prefetched) {
        (AddrBase::Reg(r), Width::Fixed(w), false, Some(reg)) => Some((r.as_str(), *w, reg)),
        _ => None,
    };
    if prefetched.is_none() {
        address_setup(&mut v, a, "%gsa0");
    }
    let guard = guard_setup(&mut v, ins, a);
    let kind = a.kind as u8;
    // (Sized for a stub: grown from empty, it was reallocated several times a check.)
    let mut fail = String::with_capacity(256);
    let mut f = Lines::new(&mut fail, indent);
    match (&a.width, a.bulk) {
        (Width::Fixed(w), false) => {
            // Fixed-width accesses report through the function's one shared block: the address
            // goes through `LAST_ADDR` and (site, width, kind) through `LAST_SITE` (one immediate,
            // moved only on failure). One block for all keeps the kernel's fast path as compact
            // as with no report code at all (ptxas keeps registers for every block that stores).
            match prefetched {
                Some((base, w, reg)) => {
                    probe_compare(&mut v, scale, reg, base, a.offset, w, guard);
                    ln!(v; "@%gsp1 bra $gasan_fail_", label, ";");
                }
                None => probe_branch(&mut v, form, "%gsa0", *w, guard, fast, (label, "")),
            }
            // A stub (no stores: those would cost the fast path registers) that recomputes the
            // address from the access's operands, lets an outside access the verdict passes go
            // on, names the site and jumps to the shared block.
            ln!(f; "$gasan_fail_", label, ":");
            address_setup(&mut f, a, LAST_ADDR);
            if form.outside {
                outside_verdict(&mut f, LAST_ADDR, *w, (RESUME, label, ""));
            }
            ln!(f; "mov.b64 ", LAST_SITE, ", ", packed_site(site, *w, kind), ";");
            ln!(f; "bra.uni ", SHARED_FAIL, ";");
        }
        (width, _) => {
            size_setup(&mut v, width);
            probe_branch(&mut v, form, "%gsa0", 1, guard, fast, (label, ""));
            v.texts(&["add.s64 %gsa4, %gsa0, %gsa5;", "sub.s64 %gsa4, %gsa4, 1;"]);
            probe_branch(&mut v, form, "%gsa4", 1, guard, fast, (label, "_last"));
            // A stub per probe (first and last byte), like the fixed-width one, that also packs
            // the byte count computed at run time into the site's width field (24 bits: a larger
            // count is reported as 16777215).
            for suffix in ["", "_last"] {
                ln!(f; "$gasan_fail_", label, suffix, ":");
                f.texts(&["{", ".reg .b64 %gsa<6>;"]);
                address_setup(&mut f, a, "%gsa0");
                size_setup(&mut f, width);
                if form.outside {
                    f.texts(&[".reg .b32 %gsbw;", "{", ".reg .b64 %gsbm;", "min.u64 %gsbm, %gsa5, 4294967295;", "cvt.u32.u64 %gsbw, %gsbm;", "}"]);
                }
                if suffix == "_last" {
                    f.texts(&["add.s64 %gsa0, %gsa0, %gsa5;", "sub.s64 %gsa0, %gsa0, 1;"]);
                }
                ln!(f; "mov.b64 ", LAST_ADDR, ", %gsa0;");
                // The verdict is on the whole access, from its first byte.
                if form.outside && suffix == "_last" {
                    f.texts(&["{", ".reg .b64 %gsaf;"]);
                    address_setup(&mut f, a, "%gsaf");
                    outside_verdict(&mut f, "%gsaf", "%gsbw", (RESUME, label, ""));
                    f.text("}");
                } else if form.outside {
                    outside_verdict(&mut f, "%gsa0", "%gsbw", (RESUME, label, ""));
                }
                f.texts(&["min.u64 %gsa5, %gsa5, 16777215;", "shl.b64 %gsa5, %gsa5, 32;"]);
                ln!(f; "or.b64 ", LAST_SITE, ", %gsa5, ", packed_site(site, 0, kind), ";");
                ln!(f; "bra.uni ", SHARED_FAIL, ";");
                f.text("}");
            }
        }
    }
    v.text("}");
    if !form.outside {
        if !original.is_empty() {
            v.verbatim(original);
        }
        return (inline, fail);
    }
    if nested {
        // Inside a block of the body the stub goes here, jumped over ([`super::FuncState`]).
        ln!(v; "bra.uni ", RESUME, label, ";");
        inline.push_str(&std::mem::take(&mut fail));
        v = Lines::new(&mut inline, indent);
    }
    // (Outside the check's scope: PTX labels are scoped by block.)
    ln!(v; RESUME, label, ":");
    if !original.is_empty() {
        v.verbatim(original);
    }
    (inline, fail)
}

/// The register holding a `wmma` tile's byte count ([`size_setup`]).
const TILE_WIDTH: &str = "%gstw";

/// A bulk access's byte count into `%gsa5`, in one line; returns what the report names as its
/// width: the constant, the register, or for a `wmma` tile [`TILE_WIDTH`] (declared here), set to
/// `stride * per_stride + row`.
fn size_setup<'w>(v: &mut Lines<'_>, width: &'w Width) -> std::borrow::Cow<'w, str> {
    match width {
        Width::Fixed(w) => {
            ln!(v; "mov.b64 %gsa5, ", u64::from(*w), ";");
            w.to_string().into()
        }
        Width::Reg(r) => {
            ln!(v; "cvt.u64.u32 %gsa5, ", r, ";");
            r.as_str().into()
        }
        Width::Tile { stride, per_stride, row } => {
            ln!(v; ".reg .b32 ", TILE_WIDTH, "; cvt.u64.u32 %gsa5, ", stride, "; mul.lo.u64 %gsa5, %gsa5, ", per_stride, "; add.s64 %gsa5, %gsa5, ", row, "; cvt.u32.u64 ", TILE_WIDTH, ", %gsa5;");
            TILE_WIDTH.into()
        }
    }
}

/// One recover-mode probe: the test, then a call of the slow path that returns "skip" (OR-ed into
/// `%gsr3`) when the access is bad.
#[allow(clippy::too_many_arguments)]
/// `at`: the check's label and the probe's suffix (unique in the function).
fn probe(out: &mut Lines<'_>, form: Form, addr_reg: &str, check_width: u32, report_width: &dyn Piece, kind: u8, site: u32, at: (u32, &str), guard: Option<&str>, fast: Fast<'_>) {
    probe_test(out, form, addr_reg, check_width, guard, fast);
    out.text("mov.u32 %gsr2, 0;");
    if form.outside {
        // An outside access goes on unless its verdict reports it.
        let (label, suffix) = at;
        ln!(out; "@!%gsp1 bra ", RECOVER_DONE, label, suffix, ";");
        outside_verdict(out, addr_reg, check_width, (RECOVER_DONE, label, suffix));
        ln!(out; "call (%gsr2), ", SLOW_PATH_SYMBOL, ", (", addr_reg, ", ", report_width, ", ", kind, ", ", site, ", %gsr0);");
        ln!(out; RECOVER_DONE, label, suffix, ":");
    } else {
        ln!(out; "@%gsp1 call (%gsr2), ", SLOW_PATH_SYMBOL, ", (", addr_reg, ", ", report_width, ", ", kind, ", ", site, ", %gsr0);");
    }
    out.text("or.b32 %gsr3, %gsr3, %gsr2;");
}

/// The original statement wrapped in its check.
#[allow(clippy::too_many_arguments)]
pub(super) fn checked_statement(form: Form, ins: &Instr<'_>, a: &Access, dest_types: &[Option<String>], original: &str, indent: &str, site: u32, label: u32, fast: Option<&FastPath>) -> String {
    let mut s = String::with_capacity(1024);
    let mut v = Lines::new(&mut s, indent);
    v.texts(&["{", ".reg .b64 %gsa<6>;", ".reg .b32 %gsr<4>;", ".reg .pred %gsp<5>;"]);
    // Address of the first byte.
    address_setup(&mut v, a, "%gsa0");
    // Guard: the access's own predicate, and a nonzero cp.async src-size.
    let guard = guard_setup(&mut v, ins, a);
    v.text("mov.u32 %gsr3, 0;");
    let kind = a.kind as u8;
    match (&a.width, a.bulk) {
        (Width::Fixed(w), false) => probe(&mut v, form, "%gsa0", *w, w, kind, site, (label, ""), guard, fast.map(|fp| (fp, ""))),
        (width, _) => {
            // Bulk range: first and last byte.
            let size = size_setup(&mut v, width);
            probe(&mut v, form, "%gsa0", 1, &size.as_ref(), kind, site, (label, ""), guard, fast.map(|fp| (fp, "")));
            v.texts(&["add.s64 %gsa4, %gsa0, %gsa5;", "sub.s64 %gsa4, %gsa4, 1;"]);
            probe(&mut v, form, "%gsa4", 1, &size.as_ref(), kind, site, (label, "_last"), guard, fast.map(|fp| (fp, "_last")));
        }
    }
    v.text("setp.ne.u32 %gsp2, %gsr3, 0;");
    ln!(v; "@%gsp2 bra $gasan_skip_", label, ";");
    v.verbatim(original);
    let zeroing = a.dests.iter().zip(dest_types).filter(|(_, ty)| ty.as_deref() != Some("pred"));
    if zeroing.clone().next().is_none() {
        ln!(v; "$gasan_skip_", label, ":");
    } else {
        ln!(v; "bra.uni $gasan_done_", label, ";");
        ln!(v; "$gasan_skip_", label, ":");
        for (d, ty) in zeroing {
            let bits = ty.as_deref().and_then(super::type_bits).unwrap_or(32);
            ln!(v; "mov.b", bits, " ", d, ", 0;");
        }
        ln!(v; "$gasan_done_", label, ":");
    }
    v.text("}");
    s
}

/// The module functions halt mode reports through in functions that use `wgmma`
/// ([`reports_through_calls`]): one per [`ReportBlock`], each the block's text (it reads
/// [`LAST_ADDR`] and [`LAST_SITE`], here its parameters), ending in its trap.
pub(super) fn halt_functions(form: Form, publish: Publish) -> String {
    let mut out = String::new();
    for report in [ReportBlock::Global, ReportBlock::Space] {
        let mut l = Lines::new(&mut out, "\t");
        ln!(l; ".func ", report.halt_function(), "(.param .b64 __gasan_halt_addr, .param .b64 __gasan_halt_site)");
        l.text("{");
        ln!(l; ".reg .b64 ", LAST_ADDR, ", ", LAST_SITE, ";");
        ln!(l; "ld.param.b64 ", LAST_ADDR, ", [__gasan_halt_addr];");
        ln!(l; "ld.param.b64 ", LAST_SITE, ", [__gasan_halt_site];");
        out.push_str(&fail_block(report, form.scale, form.outside, "\t", publish));
        let mut l = Lines::new(&mut out, "\t");
        l.texts(&["ret;", "}"]);
    }
    out
}

impl ReportBlock {
    /// The module function reporting as this block does ([`halt_functions`]).
    pub(super) fn halt_function(self) -> &'static str {
        match self {
            ReportBlock::Global => "__gasan_halt_global",
            ReportBlock::Space => "__gasan_halt_space",
        }
    }

    fn of_label(label: &str) -> Option<Self> {
        [ReportBlock::Global, ReportBlock::Space].into_iter().find(|r| r.label() == label)
    }
}

/// How a line of the checked text changes the brace depth (register lists' braces close on their
/// line: only a scope changes it; a `//` comment is not counted).
fn brace_change(line: &str) -> i64 {
    let code = line.split("//").next().unwrap_or("");
    code.matches('{').count() as i64 - code.matches('}').count() as i64
}

/// One of gasan's lines without its marker and indent.
fn marked(line: &str) -> Option<&str> {
    line.trim_end().strip_suffix(MARKER).map(str::trim)
}

/// The target of a branch line (`[@P] bra[.uni] LABEL;`, any line of the checked text).
fn branch_target(line: &str) -> Option<&str> {
    let code = line.split("//").next().unwrap_or("").trim();
    let code = match code.strip_prefix('@') {
        Some(guarded) => guarded.split_once(char::is_whitespace)?.1.trim_start(),
        None => code,
    };
    let rest = code.strip_prefix("bra")?;
    let rest = rest.strip_prefix(".uni").unwrap_or(rest);
    let label = rest.strip_prefix(char::is_whitespace)?.trim().strip_suffix(';')?.trim_end();
    (!label.is_empty() && !label.contains([' ', ',', '\t'])).then_some(label)
}

/// The line spans of the checked text where a `wgmma` group can be in flight: each loop (from a
/// label to a branch back to it), and from each `wgmma.mma_async` to the next wait for every
/// group (`wgmma.wait_group 0`).
fn in_flight_spans(lines: &[&str]) -> Vec<(usize, usize)> {
    let mut label_at: HashMap<&str, usize> = HashMap::default();
    let mut spans = Vec::new();
    let mut issued: Option<usize> = None;
    for (k, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("").trim();
        if let Some(label) = code.strip_suffix(':').filter(|l| !l.contains(char::is_whitespace)) {
            label_at.insert(label, k);
        } else if let Some(&start) = branch_target(line).and_then(|l| label_at.get(l)) {
            spans.push((start, k));
        } else if code.starts_with("wgmma.mma_async") {
            issued.get_or_insert(k);
        } else if let Some(wait) = code.strip_prefix("wgmma.wait_group") {
            // (`wait_group N` with N > 0 leaves groups in flight past it.)
            let n = wait.trim_end_matches(';').rsplit(|c: char| c.is_whitespace() || c == '.').next().and_then(|n| n.trim().parse::<u32>().ok());
            if n == Some(0) {
                spans.extend(issued.take().map(|start| (start, k)));
            }
        }
    }
    // (Issued and never waited for in the text: in flight to its end.)
    spans.extend(issued.map(|start| (start, lines.len())));
    spans
}

/// `@P bra LABEL;` (gasan's own line): the guard and the label.
fn guarded_branch(line: &str) -> Option<(&str, &str)> {
    let t = marked(line)?.strip_suffix(';')?;
    let (guard, rest) = t.strip_prefix('@')?.split_once(' ')?;
    let label = rest.trim().strip_prefix("bra")?.trim_start_matches(".uni").trim();
    (label.starts_with("$gasan_") && !label.contains([' ', ','])).then_some((guard, label))
}

/// Halt mode in a function that waits for `wgmma` groups: the out-of-line stub of each check
/// where a group can be in flight ([`in_flight_spans`]: in a loop, or between an issue and its
/// wait), which names the site and jumps to the report block (which traps), ends in a call of
/// the block's module function
/// ([`halt_functions`]) and a jump back to a label right after the check, instead of its jump to
/// the block. ptxas serializes a loop's `wgmma` when a branch to code that never comes back lies
/// where a group is in flight (C7518, "wgmma.mma_async instructions are serialized due to program
/// dependence on compiler-inserted WG.DP in divergent path"; Triton's pipelined matmul,
/// jit/FORMS.md); a call comes back as far as ptxas knows, so the stub rejoins the check and the
/// threads stay converged. The check's own branch is unchanged: its fast path gains only the
/// rejoin (a predicated call at the check instead made ptxas select the report registers on every
/// pass: the matmul's fast loop grew from 371 to 702 SASS instructions). The call never returns
/// (the function traps), so where the stub jumps back to does not matter to the program. Stubs
/// of checks where no group is in flight keep their jumps: Triton's attention waits for every
/// group, and only its loop's checked copy checks between an issue and its wait; with every stub
/// rejoining, its code before the loop grew from 1,183 to 1,388 SASS instructions on a clean
/// launch's path (native 293), and the pipelined matmul's from 1,843 to 2,268 (native 429). The
/// stubs in loops alone keep ptxas from serializing either (ptxas 13.0, sm_90a; jit/FORMS.md).
///
/// Converted: a stub branched to from one line at the body's level or in a check block there (the
/// jump back needs a label at that level: PTX labels are scoped by block), with no control of its own
/// (the outside verdict's resume and group rechecks keep their branches), and a branch from such
/// a line to the report block itself (given a stub of its own). `body`: the function's text so
/// far, from its opening brace; `stubs`: its out-of-line blocks. Returns whether a jump to each
/// report block is left.
pub(super) fn reports_through_calls(body: &mut String, stubs: &mut Vec<String>) -> (bool, bool) {
    // Each stub with no control of its own: its report block.
    let mut plain: HashMap<String, ReportBlock> = HashMap::default();
    for block in stubs.iter() {
        let mut current: Option<String> = None;
        for line in block.lines() {
            let Some(t) = marked(line) else {
                current = None;
                continue;
            };
            if let Some(label) = t.strip_suffix(':').filter(|l| l.starts_with("$gasan_")) {
                current = Some(label.to_string());
                continue;
            }
            let Some(label) = current.as_ref() else { continue };
            if let Some(report) = t.strip_prefix("bra.uni ").and_then(|r| r.strip_suffix(';')).and_then(ReportBlock::of_label) {
                plain.insert(label.clone(), report);
                current = None;
            } else if t.starts_with('@') || t.contains("bra") || t.starts_with("trap") || t.starts_with("call") || t.ends_with(':') {
                current = None;
            }
        }
    }
    // Branches from the body: (line index, label) of those at a check block's level, and how many
    // lines branch to each label.
    let lines: Vec<&str> = body.split_inclusive('\n').collect();
    let mut from: HashMap<&str, usize> = HashMap::default();
    let mut branches: Vec<(usize, &str)> = Vec::new();
    let mut depth = 0i64;
    let mut depth_at: Vec<i64> = Vec::with_capacity(lines.len());
    for (k, line) in lines.iter().enumerate() {
        depth_at.push(depth);
        depth += brace_change(line);
        if let Some((_, label)) = guarded_branch(line) {
            *from.entry(label).or_default() += 1;
            if (depth == 1 || depth == 2) && (plain.contains_key(label) || ReportBlock::of_label(label).is_some()) {
                branches.push((k, label));
            }
        }
    }
    let spans = in_flight_spans(&lines);
    branches.retain(|&(k, _)| spans.iter().any(|&(s, e)| (s..=e).contains(&k)));
    // Where each converted branch's check block ends (the line after which depth is 1 again).
    // (Several checks of one block rejoin after it: a label each.)
    let mut resume_after: HashMap<usize, Vec<String>> = HashMap::default();
    let mut own_stubs: Vec<String> = Vec::new();
    let mut retarget: HashMap<usize, String> = HashMap::default();
    let mut converted: HashMap<String, String> = HashMap::default();
    for (n, &(k, label)) in branches.iter().enumerate() {
        // (A branch at the body's level rejoins right after itself.)
        let Some(end) = (k..lines.len()).find(|&j| depth_at[j] + brace_change(lines[j]) == 1) else { continue };
        let resume = format!("$gasan_rejoin_{n}");
        if let Some(report) = ReportBlock::of_label(label) {
            // A branch to the block itself: a stub of its own.
            let stub = format!("$gasan_halt_{n}");
            let mut s = String::new();
            let mut l = Lines::new(&mut s, "\t");
            ln!(l; stub, ":");
            ln!(l; "call ", report.halt_function(), ", (", LAST_ADDR, ", ", LAST_SITE, ");");
            ln!(l; "bra.uni ", resume, ";");
            own_stubs.push(s);
            retarget.insert(k, stub);
        } else if from.get(label) == Some(&1) {
            converted.insert(label.to_string(), resume.clone());
        } else {
            continue;
        }
        resume_after.entry(end).or_default().push(resume);
    }
    let mut out = String::with_capacity(body.len() + 64 * resume_after.len());
    for (k, line) in lines.iter().enumerate() {
        match retarget.get(&k) {
            Some(stub) => {
                let (guard, _) = guarded_branch(line).expect("a branch");
                let indent = &line[..line.len() - line.trim_start().len()];
                ln!(Lines::new(&mut out, indent); "@", guard, " bra ", stub, ";");
            }
            None => out.push_str(line),
        }
        for resume in resume_after.get(&k).into_iter().flatten() {
            ln!(Lines::new(&mut out, "\t"); resume, ":");
        }
    }
    *body = out;
    // The converted stubs end in the call and the jump back.
    for block in stubs.iter_mut() {
        let mut current: Option<&str> = None;
        let mut s = String::with_capacity(block.len() + 128);
        for line in block.split_inclusive('\n') {
            let t = marked(line).unwrap_or("");
            if let Some(label) = t.strip_suffix(':') {
                current = converted.get(label).map(String::as_str);
            }
            let report = t.strip_prefix("bra.uni ").and_then(|r| r.strip_suffix(';')).and_then(ReportBlock::of_label);
            match (current, report) {
                (Some(resume), Some(report)) => {
                    let indent = &line[..line.len() - line.trim_start().len()];
                    let mut l = Lines::new(&mut s, indent);
                    ln!(l; "call ", report.halt_function(), ", (", LAST_ADDR, ", ", LAST_SITE, ");");
                    ln!(l; "bra.uni ", resume, ";");
                    current = None;
                }
                _ => s.push_str(line),
            }
        }
        *block = s;
    }
    stubs.extend(own_stubs);
    let left = |report: ReportBlock| {
        let jump = format!(" {};", report.label());
        body.contains(&jump) || stubs.iter().any(|b| b.contains(&jump))
    };
    (left(ReportBlock::Global), left(ReportBlock::Space))
}

#[cfg(test)]
mod rejoin_tests {
    use super::*;

    fn m(t: &str) -> String {
        format!("\t{t} {MARKER}\n")
    }

    #[test]
    fn every_check_of_a_block_and_every_branch_at_the_body_level_rejoins_at_a_label_of_its_own() {
        // A check block with two probes (each its own stub), a branch at the body's level to the
        // report block itself, and a stub with control of its own (kept).
        // All of it while a `wgmma` group is in flight.
        let mut body = String::from("{\n\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%f1}, %rd8, %rd9, 1, 1, 1, 0, 0;\n");
        for t in ["{", "@%gsp1 bra $gasan_fail_0;", "@%gsp2 bra $gasan_fail_0_last;", "}"] {
            body.push_str(&m(t));
        }
        body.push_str("\tld.global.u32 %r1, [%rd1];\n");
        body.push_str(&m("@%gsb bra $gasan_fail_shared;"));
        body.push_str(&m("@%gsp3 bra $gasan_fail_1;"));
        body.push_str("\twgmma.wait_group.sync.aligned 0;\n");
        let stub = |label: &str, last: &str| [format!("{label}:"), "mov.b64 %gsx, %rd1;".into(), "mov.b64 %gss, 7;".into(), last.into()].iter().map(|t| m(t)).collect::<String>();
        let mut stubs = vec![stub("$gasan_fail_0", "bra.uni $gasan_fail_shared;") + &stub("$gasan_fail_0_last", "bra.uni $gasan_fail_shared;"), stub("$gasan_fail_1", "trap;")];
        let (shared, space) = reports_through_calls(&mut body, &mut stubs);
        let all = format!("{body}{}", stubs.concat());
        // Each jump back has its label, once.
        for n in 0..3 {
            let label = format!("$gasan_rejoin_{n}");
            assert_eq!(all.matches(&format!("{label}:")).count(), 1, "{all}");
            assert_eq!(all.matches(&format!("bra.uni {label};")).count(), 1, "{all}");
        }
        assert_eq!(all.matches("call __gasan_halt_global, (%gsx, %gss);").count(), 3, "{all}");
        // The block's labels come after its closing brace; the body-level branch's right after it.
        let close = body.find(&m("}")).unwrap();
        assert!(body.find("$gasan_rejoin_0:").unwrap() > close && body.find("$gasan_rejoin_1:").unwrap() > close, "{body}");
        assert!(body.contains(&format!("{}\t$gasan_rejoin_2: {MARKER}", m("@%gsb bra $gasan_halt_2;"))), "{body}");
        // The stub that traps on its own keeps its branch; no jump to a report block is left.
        assert!(body.contains("bra $gasan_fail_1;") && all.contains("$gasan_fail_1:"));
        assert_eq!((shared, space), (false, false), "{all}");
    }

    #[test]
    fn only_checks_where_a_group_can_be_in_flight_rejoin() {
        // Checks before any issue (0), in a loop (1), between an issue and its wait (2), after the
        // wait (3).
        let mut body = String::from("{\n");
        body.push_str(&m("@%gsp0 bra $gasan_fail_0;"));
        body.push_str("$L__BB0_1:\n");
        body.push_str(&m("@%gsp1 bra $gasan_fail_1;"));
        body.push_str("\tld.global.u32 %r1, [%rd1];\n");
        body.push_str("\t@%p1 bra $L__BB0_1;  // back\n");
        body.push_str("\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%f1}, %rd8, %rd9, 1, 1, 1, 0, 0;\n");
        body.push_str(&m("@%gsp2 bra $gasan_fail_2;"));
        body.push_str("\twgmma.wait_group.sync.aligned 0;\n");
        body.push_str(&m("@%gsp3 bra $gasan_fail_3;"));
        body.push_str("\tbra.uni $L__BB0_3;\n$L__BB0_3:\n");
        let stub = |n: usize| [format!("$gasan_fail_{n}:"), "mov.b64 %gsx, %rd1;".into(), "bra.uni $gasan_fail_shared;".into()].iter().map(|t| m(t)).collect::<String>();
        let mut stubs: Vec<String> = (0..4).map(stub).collect();
        let (shared, _) = reports_through_calls(&mut body, &mut stubs);
        let all = format!("{body}{}", stubs.concat());
        for n in [1, 2] {
            assert!(stubs[n].contains("call __gasan_halt_global") && stubs[n].contains("bra.uni $gasan_rejoin_"), "{n} rejoins: {all}");
        }
        for n in [0, 3] {
            assert!(stubs[n].contains("bra.uni $gasan_fail_shared;") && !stubs[n].contains("call"), "{n} keeps its jump: {all}");
        }
        assert!(shared, "a jump to the report block is left");
    }

    #[test]
    fn branch_targets_and_in_flight_spans_are_read_from_any_line() {
        assert_eq!(branch_target("\t@%p1 bra $L__BB0_1;  // back"), Some("$L__BB0_1"));
        assert_eq!(branch_target("\t@!%p1 bra.uni \t$L__BB0_1 ;"), Some("$L__BB0_1"));
        assert_eq!(branch_target("\tbra.uni $gasan_loop0_done; //gasan"), Some("$gasan_loop0_done"));
        assert_eq!(branch_target("\tbrev.b32 %r1, %r2;"), None);
        assert_eq!(branch_target("\t// bra $L__BB0_1;"), None);
        let lines = [
            "$L0:",
            "\tadd.s32 %r1, %r1, 1;",
            "\t@%p bra $L0;",
            "\tbra $L9;",
            "$L9:",
            "\tbra $L9;",
            "\twgmma.mma_async.x;",
            "\twgmma.mma_async.y;",
            "\twgmma.wait_group.sync.aligned 1;",
            "\tadd.s32 %r1, %r1, 1;",
            "\twgmma.wait_group.sync.aligned 0; // all",
            "\twgmma.mma_async.z;",
        ];
        assert_eq!(in_flight_spans(&lines), vec![(0, 2), (4, 5), (6, 10), (11, 12)]);
    }
}

#[cfg(test)]
mod encoding_tests {
    use super::*;

    /// Runs the emitted encoding test on shadow byte `s` and granule offset `at` (the few 32-bit
    /// operations it uses, as PTX defines them), returning `bad`.
    fn run(lines: &str, s: u32, at: u32) -> bool {
        let mut regs: std::collections::HashMap<String, u32> = [("%s".to_string(), s), ("%at".to_string(), at)].into_iter().collect();
        let mut bad = None;
        for l in lines.lines().map(|l| l.split("//").next().unwrap().trim().trim_end_matches(';')) {
            if l.is_empty() || l == "{" || l == "}" || l.starts_with(".reg") {
                continue;
            }
            let (op, rest) = l.split_once(' ').unwrap();
            let o: Vec<&str> = rest.split(',').map(str::trim).collect();
            let val = |x: &str| regs.get(x).copied().unwrap_or_else(|| x.parse::<i64>().unwrap() as u32);
            let v = match op {
                "add.u32" => val(o[1]).wrapping_add(val(o[2])),
                "max.u32" => val(o[1]).max(val(o[2])),
                "min.u32" => val(o[1]).min(val(o[2])),
                "setp.le.u32" => {
                    bad = Some(val(o[1]) <= val(o[2]));
                    continue;
                }
                _ => panic!("unexpected {l}"),
            };
            regs.insert(o[0].to_string(), v);
        }
        bad.expect("a comparison")
    }

    #[test]
    fn the_emitted_encoding_test_is_the_encodings_for_every_byte_offset_and_width() {
        for scale in [Scale::S7, Scale::S8] {
            for w in [1u32, 2, 4, 8, 16] {
                let mut text = String::new();
                encoding_test(&mut Lines::new(&mut text, ""), scale, w, "%s", "%at", "%bad");
                for off in (0..scale.granule() as u32).step_by(w as usize) {
                    for s in 0..=255u32 {
                        let want = scale.is_bad(s as u8, u64::from(off), w);
                        assert_eq!(run(&text, s, off), want, "{scale:?} width {w} offset {off} shadow {s}:\n{text}");
                    }
                }
            }
        }
    }
}
