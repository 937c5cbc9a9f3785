//! PTX text that the rewriter emits: the module prelude (control block + slow path) and the check
//! around one access. Every emitted line ends with the [`super::MARKER`] comment.

use super::access::{Access, AddrBase, Instr, Width};
use super::bounds::FastPath;
use super::Header;
use crate::abi::{ctl_offset, record_offset, ring_offset, CONTROL_BLOCK_SIZE, CONTROL_BLOCK_SYMBOL, ERROR_RECORD_SIZE, EXTENT_ENTRY_SIZE, FLAG_RECOVER, RING_RECORDS_OFFSET, SLOW_PATH_SYMBOL};
use crate::shadow::{Scale, OUT_OF_POOL_SHADOW};
use std::borrow::Cow;
use std::fmt::Write;

/// An emitted line: most are fixed text, so they are not allocated.
type Line = Cow<'static, str>;

macro_rules! f {
    ($($t:tt)*) => { Cow::Owned(format!($($t)*)) };
}

const M: &str = super::MARKER;

/// Which fixed block [`fixed_text`] holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum FixedBlock {
    /// With `no_extent`: the zero extent entry kernel-parameter lookups read (bounds.rs).
    Prelude {
        no_extent: bool,
    },
    SharedFail,
    SpaceFail,
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
                FixedBlock::Prelude { no_extent } => prelude(scale, publish, no_extent),
                FixedBlock::SharedFail => shared_fail_block(scale, "\t", publish),
                FixedBlock::SpaceFail => super::spaces::space_fail_block("\t", publish),
            }
            .into()
        })
        .clone()
}

/// Control block and slow path, inserted after the module header.
fn prelude(scale: Scale, publish: Publish, no_extent: bool) -> String {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut s = String::new();
    let _ = writeln!(s, "{M} checked by gasan (GASan-{}), control block + slow path", scale.granule());
    let _ = writeln!(s, ".weak .const .align 8 .b8 {ctl}[{CONTROL_BLOCK_SIZE}]; {M}");
    if no_extent {
        // An extent entry that claims nothing, read by kernel-parameter lookups (bounds.rs) whose
        // pointer is not in the pool: the load stays unpredicated (ptxas schedules it earlier).
        let _ = writeln!(s, ".weak .global .align 16 .b8 {}[{EXTENT_ENTRY_SIZE}]; {M}", super::bounds::NO_EXTENT_SYMBOL);
    }
    let _ = writeln!(
        s,
        ".weak .func (.param .b32 gasan_ret) {SLOW_PATH_SYMBOL}(.param .b64 gasan_addr, .param .b32 gasan_width, .param .b32 gasan_kind, .param .b32 gasan_site, .param .b32 gasan_shadow) {M}"
    );
    let mut body = vec![
        "{".to_string(),
        ".reg .b64 %ra<6>;".into(),
        ".reg .b32 %rr<12>;".into(),
        ".reg .pred %rp<3>;".into(),
        "ld.param.u64 %ra0, [gasan_addr];".into(),
        "ld.param.u32 %rr0, [gasan_width];".into(),
        "ld.param.u32 %rr1, [gasan_kind];".into(),
        "ld.param.u32 %rr2, [gasan_site];".into(),
        "ld.param.u32 %rr3, [gasan_shadow];".into(),
    ];
    body.extend(record_body(publish, ""));
    body.extend([
        format!("ld.const.u64 %ra3, [{ctl}+{}];", ctl_offset::FLAGS),
        format!("and.b64 %ra3, %ra3, {FLAG_RECOVER};"),
        "setp.eq.u64 %rp2, %ra3, 0;".into(),
        "@%rp2 trap;".into(),
        "mov.u32 %rr11, 1;".into(),
        "st.param.b32 [gasan_ret], %rr11;".into(),
        "ret;".into(),
        "}".into(),
    ]);
    for l in body {
        let _ = writeln!(s, "{l} {M}");
    }
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
}

/// Function-level registers of halt mode: the address being checked, and the failing site packed
/// as `site | width << 32 | kind << 56`, read by the function's shared report block.
pub(super) const LAST_ADDR: &str = "%gsx";
pub(super) const LAST_SITE: &str = "%gss";
/// `LAST_SITE`'s value for a failing access: `site | width << 32 | kind << 56`.
fn packed_site(site: u32, width: u32, kind: u8) -> u64 {
    u64::from(site) | (u64::from(width) << 32) | (u64::from(kind) << 56)
}

/// The shared report block's label (labels are function-scoped in PTX).
pub(super) const SHARED_FAIL: &str = "$gasan_fail_shared";

/// Their declaration, right after a function's opening brace.
pub(super) fn function_decls() -> String {
    format!("\t.reg .b64 {LAST_ADDR}, {LAST_SITE}; {M}\n")
}

/// The function's shared report block (emitted once, before its closing brace, when used).
fn shared_fail_block(scale: Scale, indent: &str, publish: Publish) -> String {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let shadow = vec![
        format!("ld.const.u64 %ra1, [{ctl}+{}];", ctl_offset::POOL_BASE),
        "sub.s64 %ra1, %ra0, %ra1;".into(),
        format!("shr.u64 %ra1, %ra1, {};", scale.shift()),
        format!("ld.const.u64 %ra2, [{ctl}+{}];", ctl_offset::SHADOW_BASE),
        "add.s64 %ra1, %ra1, %ra2;".into(),
        "ld.global.nc.u8 %rr3, [%ra1];".into(),
    ];
    fail_block(SHARED_FAIL, "_shared", shadow, indent, publish)
}

/// An inline report block (halt mode) at `label`: unpacks [`LAST_ADDR`] and [`LAST_SITE`] into the
/// record's inputs, runs `shadow` (which leaves the failed shadow byte in `%rr3`), writes the record
/// ([`record_body`], labels suffixed `suffix`) and traps. Global and shared/local checks share it.
pub(super) fn fail_block(label: &str, suffix: &str, shadow: Vec<String>, indent: &str, publish: Publish) -> String {
    let mut f: Vec<String> = vec![
        format!("{label}:"),
        "{".into(),
        ".reg .b64 %ra<4>;".into(),
        ".reg .b32 %rr<11>;".into(),
        ".reg .pred %rp<2>;".into(),
        format!("mov.b64 %ra0, {LAST_ADDR};"),
        format!("cvt.u32.u64 %rr2, {LAST_SITE};"),
        format!("shr.b64 %ra3, {LAST_SITE}, 32;"),
        "cvt.u32.u64 %rr0, %ra3;".into(),
        "and.b32 %rr0, %rr0, 16777215;".into(),
        format!("shr.b64 %ra3, {LAST_SITE}, 56;"),
        "cvt.u32.u64 %rr1, %ra3;".into(),
    ];
    f.extend(shadow);
    f.extend(record_body(publish, suffix));
    f.push("trap;".into());
    f.push("}".into());
    render(&f, indent)
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
/// `%rp0..1`. Shared by the slow-path function (recover mode) and the inline report blocks (halt
/// mode: no call in the kernel, whose calling convention would cost the fast path registers).
///
/// Order (what the host reader relies on, runtime/src/ring.rs): the slot's seq is zeroed before
/// any field is written and set to index + 1 after all of them, so a writer killed mid-record
/// (another thread's trap) leaves seq 0, never an older record's seq over a mix of two records;
/// and the final seq is performed before the thread goes on (to a trap, in halt mode).
pub(super) fn record_body(publish: Publish, suffix: &str) -> Vec<String> {
    let ctl = CONTROL_BLOCK_SYMBOL;
    let release = publish == Publish::ReleaseStores;
    // Release stores order themselves; the other forms fence between volatile stores.
    let fence = (!release).then(|| publish.release_fence(FenceScope::Sys));
    // A field store: a release where the stores order themselves, else volatile between fences.
    let st = |ty: &str, off: usize, val: &str| -> String {
        let sem = if release { "release.sys" } else { "volatile" };
        format!("st.{sem}.global.{ty} [%ra2+{off}], {val};")
    };
    let mut v: Vec<String> = vec![
        format!("ld.const.u64 %ra1, [{ctl}+{}];", ctl_offset::RING),
        "setp.eq.u64 %rp0, %ra1, 0;".into(),
        format!("@%rp0 bra $gasan_rec_done{suffix};"),
        format!("atom.global.add.u32 %rr4, [%ra1+{}], 1;", ring_offset::HEAD),
        format!("ld.volatile.global.u32 %rr5, [%ra1+{}];", ring_offset::CAPACITY),
        // The ring is reused: slot = index mod capacity (a power of two), seq = index + 1.
        "add.u32 %rr5, %rr5, -1;".into(),
        "and.b32 %rr5, %rr4, %rr5;".into(),
        format!("mul.wide.u32 %ra2, %rr5, {ERROR_RECORD_SIZE};"),
        "add.s64 %ra2, %ra2, %ra1;".into(),
        format!("add.s64 %ra2, %ra2, {RING_RECORDS_OFFSET};"),
        format!("st.volatile.global.u32 [%ra2+{}], 0;", record_offset::SEQ),
    ];
    v.extend(fence.map(String::from));
    v.extend([
        st("u64", record_offset::ADDR, "%ra0"),
        format!("ld.const.u32 %rr6, [{ctl}+{}];", ctl_offset::MODULE_ID),
        st("u32", record_offset::MODULE_ID, "%rr6"),
        st("u32", record_offset::SITE_ID, "%rr2"),
        "mov.u32 %rr7, %ctaid.x;".into(),
        "mov.u32 %rr8, %ctaid.y;".into(),
        "mov.u32 %rr9, %ctaid.z;".into(),
        st("v2.u32", record_offset::CTAID, "{%rr7, %rr8}"),
        st("u32", record_offset::CTAID + 8, "%rr9"),
        "mov.u32 %rr7, %tid.x;".into(),
        "mov.u32 %rr8, %tid.y;".into(),
        "mov.u32 %rr9, %tid.z;".into(),
        st("u32", record_offset::TID, "%rr7"),
        st("v2.u32", record_offset::TID + 4, "{%rr8, %rr9}"),
        st("u32", record_offset::WIDTH, "%rr0"),
        st("u8", record_offset::KIND, "%rr1"),
        st("u8", record_offset::SHADOW, "%rr3"),
    ]);
    v.extend(fence.map(String::from));
    v.push("add.u32 %rr10, %rr4, 1;".into());
    if release {
        // The exchange's old value, stored beside it, makes the thread wait for the exchange to be
        // performed (what the trailing fence does in the other forms).
        v.push(format!("atom.release.sys.global.exch.b32 %rr9, [%ra2+{}], %rr10;", record_offset::SEQ));
        v.push(format!("st.volatile.global.u32 [%ra2+{}], %rr9;", record_offset::SEQ + 4));
    } else {
        v.push(format!("st.volatile.global.u32 [%ra2+{}], %rr10;", record_offset::SEQ));
        v.extend(fence.map(String::from));
    }
    v.push(format!("$gasan_rec_done{suffix}:"));
    v
}

/// The lines, each indented and marked.
pub(super) fn render<L: AsRef<str>>(lines: &[L], indent: &str) -> String {
    let mut out = String::new();
    render_into(&mut out, lines, indent);
    out
}

/// [`render`] appended to `out`, whose room is made once: grown line by line, the buffer cost
/// about as much as writing the lines.
fn render_into<L: AsRef<str>>(out: &mut String, lines: &[L], indent: &str) {
    out.reserve(lines.iter().map(|l| indent.len() + l.as_ref().len() + M.len() + 2).sum());
    for l in lines {
        put(out, indent, l.as_ref());
    }
}

/// Appends `indent`, the line and the marker comment (no formatting machinery: this is hot).
fn put(out: &mut String, indent: &str, line: &str) {
    out.push_str(indent);
    out.push_str(line);
    out.push(' ');
    out.push_str(M);
    out.push('\n');
}

/// Key for check elimination: same guard, same address expression.
pub(super) fn check_key(ins: &Instr<'_>, a: &Access) -> Option<String> {
    if a.bulk || a.guard_nonzero.is_some() {
        return None;
    }
    let base = match &a.base {
        AddrBase::Reg(r) => r.clone(),
        AddrBase::Imm(v) => format!("#{v}"),
    };
    Some(format!("{}|{}|{}", ins.guard.unwrap_or(""), base, a.offset))
}

/// The registers elimination key `k` depends on: its guard predicate (without `!`) and its
/// address register (an immediate address, `#…`, and the offset name none).
pub(super) fn key_registers(k: &str) -> impl Iterator<Item = &str> {
    k.split('|').map(|p| p.trim_start_matches('!')).filter(|p| p.starts_with('%'))
}

/// The condition under which the access happens, in `%gsp3`: its own predicate and, for cp.async,
/// a nonzero src-size. `None` when it always happens.
fn guard_setup(v: &mut Vec<Line>, ins: &Instr<'_>, a: &Access) -> Option<&'static str> {
    let mut guard = None;
    if let Some(g) = ins.guard {
        if let Some(neg) = g.strip_prefix('!') {
            v.push(f!("not.pred %gsp3, {neg};"));
        } else {
            v.push(f!("mov.pred %gsp3, {g};"));
        }
        guard = Some("%gsp3");
    }
    if let Some(r) = &a.guard_nonzero {
        v.push(f!("setp.ne.u32 %gsp4, {r}, 0;"));
        if guard.is_some() {
            v.push("and.pred %gsp3, %gsp3, %gsp4;".into());
        } else {
            v.push("mov.pred %gsp3, %gsp4;".into());
            guard = Some("%gsp3");
        }
    }
    guard
}

/// The in-pool test and the shadow load: `dst` = the shadow byte of `addr_reg`'s granule, or
/// [`OUT_OF_POOL_SHADOW`] (passes every access) when the address is outside the pool or `guard` is
/// false, so no predicate has to survive the load. Uses `%gsa1..2`, `%gsp0`.
fn probe_load(out: &mut Vec<Line>, form: Form, addr_reg: &str, guard: Option<&str>, dst: &str, fast: Fast<'_>) {
    let scale = form.scale;
    let loads = ctl_loads();
    if let Some((fp, suffix)) = fast {
        // Inside the whole granules of the block a kernel parameter points into (bounds.rs):
        // the shadow byte would grant them all, so it is not loaded.
        out.push(f!("mov.u32 {dst}, {OUT_OF_POOL_SHADOW};"));
        out.push(f!("setp.lt.u64 %gsp0, {addr_reg}, {};", fp.lo));
        out.push(f!("setp.ge.or.u64 %gsp0, {addr_reg}, {}, %gsp0;", fp.hi));
        out.push(f!("@!%gsp0 bra {}{suffix};", fp.label));
    }
    if form.aligned {
        // hi(addr) - hi(base) < hi(size), and index lo(addr >> shift): Scale::aligned_probe.
        out.push("{".into());
        out.push(".reg .b32 %gsw<3>;".into());
        out.push(f!("mov.b64 {{%gsw0, %gsw1}}, {addr_reg};"));
        out.push(Line::Borrowed(&loads.base_hi));
        out.push("sub.u32 %gsw1, %gsw1, %gsw2;".into());
        out.push(Line::Borrowed(&loads.size_hi));
        out.push("setp.lt.u32 %gsp0, %gsw1, %gsw2;".into());
        if let Some(g) = guard {
            out.push(f!("and.pred %gsp0, %gsp0, {g};"));
        }
        out.push(f!("shr.u64 %gsa1, {addr_reg}, {};", scale.shift()));
        out.push("cvt.u32.u64 %gsw0, %gsa1;".into());
        out.push(Line::Borrowed(&loads.shadow));
        out.push("mad.wide.u32 %gsa1, %gsw0, 1, %gsa2;".into());
    } else {
        out.push(Line::Borrowed(&loads.base));
        out.push(f!("sub.s64 %gsa1, {addr_reg}, %gsa1;"));
        out.push(Line::Borrowed(&loads.size));
        out.push("setp.lt.u64 %gsp0, %gsa1, %gsa2;".into());
        if let Some(g) = guard {
            out.push(f!("and.pred %gsp0, %gsp0, {g};"));
        }
        out.push(f!("shr.u64 %gsa1, %gsa1, {};", scale.shift()));
        out.push(Line::Borrowed(&loads.shadow));
        out.push("add.s64 %gsa1, %gsa1, %gsa2;".into());
    }
    out.push(f!("mov.u32 {dst}, {OUT_OF_POOL_SHADOW};"));
    out.push(f!("@%gsp0 ld.global.nc.u8 {dst}, [%gsa1];"));
    if form.aligned {
        out.push("}".into());
    }
    if let Some((fp, suffix)) = fast {
        out.push(f!("{}{suffix}:", fp.label));
    }
}

/// A check's kernel-parameter fast path ([`super::bounds`]) and the suffix that makes its label
/// unique among the check's probes.
type Fast<'a> = Option<(&'a FastPath, &'a str)>;

/// The encoding test ([`Scale::fast_test`]) of shadow byte `shadow` for an access of
/// `check_width` bytes at `addr_reg + offset`, leaving `%gsp1` = bad (and `guard`, when given).
/// Uses `%gsr1`.
fn probe_compare(out: &mut Vec<Line>, scale: Scale, shadow: &str, addr_reg: &str, offset: i64, check_width: u32, guard: Option<&str>) {
    out.push(f!("cvt.u32.u64 %gsr1, {addr_reg};"));
    if offset != 0 {
        out.push(f!("add.u32 %gsr1, %gsr1, {};", offset as i32));
    }
    out.push(f!("and.b32 %gsr1, %gsr1, {};", scale.granule() - 1));
    encoding_test(out, scale, check_width, shadow, "%gsr1", "%gsp1");
    if let Some(g) = guard {
        out.push(f!("and.pred %gsp1, %gsp1, {g};"));
    }
}

/// The encoding test ([`Scale::fast_test`]) of shadow byte `shadow` for an access of `width` bytes
/// starting at offset `at` (a `.b32` register, overwritten) of its granule: `bad` = the access is
/// bad. Every check and the loop range test's sweep (loops.rs) make it this way.
pub(super) fn encoding_test(out: &mut Vec<Line>, scale: Scale, width: u32, shadow: &str, at: &str, bad: &str) {
    let t = scale.fast_test(width);
    if t.addend != 0 {
        out.push(f!("add.u32 {at}, {at}, {};", t.addend));
    }
    if t.at_least_one {
        out.push(f!("max.u32 {at}, {at}, 1;"));
    }
    let cmp = if t.strict { "lt" } else { "le" };
    out.push(f!("setp.{cmp}.u32 {bad}, {shadow}, {at};"));
}

/// The whole check of one probe in place: `%gsr0` = shadow byte, `%gsp1` = bad.
fn probe_test(out: &mut Vec<Line>, form: Form, addr_reg: &str, check_width: u32, guard: Option<&str>, fast: Fast<'_>) {
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
pub(super) fn prefetch(form: Form, a: &Access, chain: &[(String, String)], declare: &[&str], reg: &str, indent: &str, batch: Option<(&str, bool, u32)>, data: bool, fast: Option<&FastPath>) -> String {
    let scale = form.scale;
    let mut v: Vec<Line> = declare.iter().map(|d| f!(".reg .b32 {d};")).collect();
    if let Some((pred, true, _)) = batch {
        v.push(f!(".reg .pred {pred};"));
    }
    if batch.is_some() {
        v.extend(chain.iter().map(|(decl, _)| Line::from(decl.clone())));
    }
    v.extend(["{".into(), ".reg .b64 %gsa<3>;".into(), ".reg .b32 %gsr<2>;".into(), ".reg .pred %gsp<2>;".into()]);
    if batch.is_none() {
        v.extend(chain.iter().map(|(decl, _)| Line::from(decl.clone())));
    }
    v.extend(chain.iter().map(|(_, stmt)| Line::from(stmt.clone())));
    v.push(address_setup(a).into());
    if data && a.kind == crate::abi::AccessKind::Read {
        // Start fetching the load's data into L2 while its check runs, so the load that follows
        // the check's branch does not add the shadow byte's latency to its own. A prefetch is a
        // hint: an invalid or unmapped address is ignored, a shared-window one is a no-op.
        v.push("prefetch.L2 [%gsa0];".into());
    }
    probe_load(&mut v, form, "%gsa0", None, reg, fast.map(|fp| (fp, "")));
    if let Some((pred, first, width)) = batch {
        probe_compare(&mut v, scale, reg, "%gsa0", 0, width, None);
        v.push(if first { f!("mov.pred {pred}, %gsp1;") } else { f!("or.pred {pred}, {pred}, %gsp1;") });
    }
    v.push("}".into());
    render(&v, indent)
}

/// One member of a batch's recheck (reached when the batch predicate is set): the full check of
/// the access at `a` (its base already renamed to where the address lives at the batch point); on
/// failure it hands the address and packed site to the function's shared report block.
pub(super) fn batch_recheck(form: Form, a: &Access, width: u32, site: u32) -> String {
    let packed = packed_site(site, width, a.kind as u8);
    let mut v: Vec<Line> = vec!["{".into(), ".reg .b64 %gsa<3>;".into(), ".reg .b32 %gsr<2>;".into(), ".reg .pred %gsp<2>;".into()];
    v.push(address_setup(a).into());
    probe_test(&mut v, form, "%gsa0", width, None, None);
    v.push(f!("@%gsp1 mov.b64 {LAST_ADDR}, %gsa0;"));
    v.push(f!("@%gsp1 mov.b64 {LAST_SITE}, {packed};"));
    v.push(f!("@%gsp1 bra {SHARED_FAIL};"));
    v.push("}".into());
    render(&v, "\t")
}

/// At a pipelined loop's back edge: the next iteration's shadow byte becomes the current one.
pub(super) fn next_iteration_move(cur: &str, next: &str) -> String {
    let mut out = String::new();
    put(&mut out, "\t", &format!("mov.b32 {cur}, {next};"));
    out
}

/// `%gsa0` = the access's first byte address.
fn address_setup(a: &Access) -> String {
    match &a.base {
        AddrBase::Reg(r) if a.offset == 0 => format!("mov.b64 %gsa0, {r};"),
        AddrBase::Reg(r) => format!("add.s64 %gsa0, {r}, {};", a.offset),
        AddrBase::Imm(x) => format!("mov.b64 %gsa0, {};", x.wrapping_add(a.offset as u64)),
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
    publish: Publish,
    prefetched: Option<&str>,
    fast: Option<&FastPath>,
) -> (String, String, bool) {
    let scale = form.scale;
    let ctl = CONTROL_BLOCK_SYMBOL;
    let mut v: Vec<Line> = vec!["{".into(), ".reg .b64 %gsa<6>;".into(), ".reg .b32 %gsr<2>;".into(), ".reg .pred %gsp<5>;".into()];
    let addr = address_setup(a);
    let shared = matches!((&a.width, a.bulk), (Width::Fixed(_), false));
    // With the shadow byte prefetched, only the low address bits are needed here.
    let prefetched = match (&a.base, &a.width, a.bulk, prefetched) {
        (AddrBase::Reg(r), Width::Fixed(w), false, Some(reg)) => Some((r.as_str(), *w, reg)),
        _ => None,
    };
    if prefetched.is_none() {
        v.push(addr.clone().into());
    }
    let guard = guard_setup(&mut v, ins, a);
    let kind = a.kind as u8;
    // (probe label suffix, address setup in the fail block, check width, reported width)
    let mut probes: Vec<(String, Vec<Line>, u32, String)> = Vec::new();
    match (&a.width, a.bulk) {
        (Width::Fixed(w), false) => {
            // Fixed-width accesses report through the function's one shared block: the address
            // goes through `LAST_ADDR` and (site, width, kind) through `LAST_SITE` (one immediate,
            // moved only on failure). One block for all keeps the kernel's fast path as compact
            // as with no report code at all (ptxas keeps registers for every block that stores).
            match prefetched {
                Some((base, w, reg)) => probe_compare(&mut v, scale, reg, base, a.offset, w, guard),
                None => probe_test(&mut v, form, "%gsa0", *w, guard, fast.map(|fp| (fp, ""))),
            }
            v.push(f!("@%gsp1 bra $gasan_fail_{label};"));
        }
        (width, _) => {
            let (size_setup, size) = match width {
                Width::Fixed(w) => (format!("mov.b64 %gsa5, {};", u64::from(*w)), w.to_string()),
                Width::Reg(r) => (format!("cvt.u64.u32 %gsa5, {r};"), r.clone()),
                Width::Tile { stride, per_stride, row } => (tile_size(stride, *per_stride, *row), TILE_WIDTH.to_string()),
            };
            v.push(size_setup.clone().into());
            probe_test(&mut v, form, "%gsa0", 1, guard, fast.map(|fp| (fp, "")));
            v.push(f!("@%gsp1 bra $gasan_fail_{label};"));
            v.push("add.s64 %gsa4, %gsa0, %gsa5;".into());
            v.push("sub.s64 %gsa4, %gsa4, 1;".into());
            probe_test(&mut v, form, "%gsa4", 1, guard, fast.map(|fp| (fp, "_last")));
            v.push(f!("@%gsp1 bra $gasan_fail_{label}_last;"));
            // (A tile's reported width is computed, in the stub too.)
            let first: Vec<Line> = match width {
                Width::Tile { .. } => vec![addr.clone().into(), size_setup.clone().into()],
                _ => vec![addr.clone().into()],
            };
            probes.push((String::new(), first, 1, size.clone()));
            let last: Vec<Line> = vec![addr.clone().into(), size_setup.into(), "add.s64 %gsa0, %gsa0, %gsa5;".into(), "sub.s64 %gsa0, %gsa0, 1;".into()];
            probes.push(("_last".into(), last, 1, size));
        }
    }
    v.push("}".into());
    let mut inline = render(&v, indent);
    if !original.is_empty() {
        let _ = writeln!(inline, "{indent}{original}");
    }

    let mut fail = String::new();
    if let (true, Width::Fixed(w)) = (shared, &a.width) {
        // A stub (no stores: those would cost the fast path registers) that recomputes the
        // address from the access's operands, names the site and jumps to the shared block.
        let packed = packed_site(site, *w, kind);
        put(&mut fail, indent, &format!("$gasan_fail_{label}:"));
        put(&mut fail, indent, &addr.replacen("%gsa0", LAST_ADDR, 1));
        put(&mut fail, indent, &format!("mov.b64 {LAST_SITE}, {packed};"));
        put(&mut fail, indent, &format!("bra.uni {SHARED_FAIL};"));
    }
    for (suffix, setup, _w, report_width) in probes {
        let mut f: Vec<Line> = vec![
            f!("$gasan_fail_{label}{suffix}:"),
            "{".into(),
            ".reg .b64 %gsa<6>;".into(),
            ".reg .b32 %gsr<2>;".into(),
            ".reg .b64 %ra<3>;".into(),
            ".reg .b32 %rr<11>;".into(),
            ".reg .pred %rp<2>;".into(),
        ];
        f.extend(setup);
        f.push(f!("ld.const.u64 %gsa1, [{ctl}+{}];", ctl_offset::POOL_BASE));
        f.push("sub.s64 %gsa1, %gsa0, %gsa1;".into());
        f.push(f!("shr.u64 %gsa1, %gsa1, {};", scale.shift()));
        f.push(f!("ld.const.u64 %gsa2, [{ctl}+{}];", ctl_offset::SHADOW_BASE));
        f.push("add.s64 %gsa1, %gsa1, %gsa2;".into());
        f.push("ld.global.nc.u8 %gsr0, [%gsa1];".into());
        // The record is written inline: a call here would make the whole kernel pay the calling
        // convention's registers on its fast path.
        f.push("mov.b64 %ra0, %gsa0;".into());
        f.push(f!("mov.u32 %rr0, {report_width};"));
        f.push(f!("mov.u32 %rr1, {kind};"));
        f.push(f!("mov.u32 %rr2, {site};"));
        f.push("mov.u32 %rr3, %gsr0;".into());
        f.extend(record_body(publish, &format!("_{label}{suffix}")).into_iter().map(Line::Owned));
        f.push("trap;".into());
        f.push("}".into());
        render_into(&mut fail, &f, indent);
    }
    (inline, fail, shared)
}

/// The register holding a `wmma` tile's byte count ([`tile_size`]).
const TILE_WIDTH: &str = "%gstw";

/// One line leaving a `wmma` tile's byte count, `stride * per_stride + row`, in `%gsa5` (64 bits)
/// and in [`TILE_WIDTH`] (32 bits, declared here), for the checks and the report.
fn tile_size(stride: &str, per_stride: u32, row: u32) -> String {
    format!(".reg .b32 {TILE_WIDTH}; cvt.u64.u32 %gsa5, {stride}; mul.lo.u64 %gsa5, %gsa5, {per_stride}; add.s64 %gsa5, %gsa5, {row}; cvt.u32.u64 {TILE_WIDTH}, %gsa5;")
}

/// One recover-mode probe: the test, then a call of the slow path that returns "skip" (OR-ed into
/// `%gsr3`) when the access is bad.
#[allow(clippy::too_many_arguments)]
fn probe(out: &mut Vec<Line>, form: Form, addr_reg: &str, check_width: u32, report_width: &str, kind: u8, site: u32, guard: Option<&str>, fast: Fast<'_>) {
    probe_test(out, form, addr_reg, check_width, guard, fast);
    out.push("mov.u32 %gsr2, 0;".into());
    out.push(f!("@%gsp1 call (%gsr2), {SLOW_PATH_SYMBOL}, ({addr_reg}, {report_width}, {kind}, {site}, %gsr0);"));
    out.push("or.b32 %gsr3, %gsr3, %gsr2;".into());
}

/// The original statement wrapped in its check.
#[allow(clippy::too_many_arguments)]
pub(super) fn checked_statement(form: Form, ins: &Instr<'_>, a: &Access, dest_types: &[Option<String>], original: &str, indent: &str, site: u32, label: u32, fast: Option<&FastPath>) -> String {
    let mut v: Vec<Line> = vec!["{".into(), ".reg .b64 %gsa<6>;".into(), ".reg .b32 %gsr<4>;".into(), ".reg .pred %gsp<5>;".into()];
    // Address of the first byte.
    match &a.base {
        AddrBase::Reg(r) if a.offset == 0 => v.push(f!("mov.b64 %gsa0, {r};")),
        AddrBase::Reg(r) => v.push(f!("add.s64 %gsa0, {r}, {};", a.offset)),
        AddrBase::Imm(x) => v.push(f!("mov.b64 %gsa0, {};", x.wrapping_add(a.offset as u64))),
    }
    // Guard: the access's own predicate, and a nonzero cp.async src-size.
    let guard = guard_setup(&mut v, ins, a);
    v.push("mov.u32 %gsr3, 0;".into());
    let kind = a.kind as u8;
    match (&a.width, a.bulk) {
        (Width::Fixed(w), false) => probe(&mut v, form, "%gsa0", *w, &w.to_string(), kind, site, guard, fast.map(|fp| (fp, ""))),
        (width, _) => {
            // Bulk range: first and last byte.
            let size = match width {
                Width::Fixed(w) => {
                    v.push(f!("mov.b64 %gsa5, {};", u64::from(*w)));
                    w.to_string()
                }
                Width::Reg(r) => {
                    v.push(f!("cvt.u64.u32 %gsa5, {r};"));
                    r.clone()
                }
                Width::Tile { stride, per_stride, row } => {
                    v.push(tile_size(stride, *per_stride, *row).into());
                    TILE_WIDTH.to_string()
                }
            };
            probe(&mut v, form, "%gsa0", 1, &size, kind, site, guard, fast.map(|fp| (fp, "")));
            v.push("add.s64 %gsa4, %gsa0, %gsa5;".into());
            v.push("sub.s64 %gsa4, %gsa4, 1;".into());
            probe(&mut v, form, "%gsa4", 1, &size, kind, site, guard, fast.map(|fp| (fp, "_last")));
        }
    }
    v.push("setp.ne.u32 %gsp2, %gsr3, 0;".into());
    v.push(f!("@%gsp2 bra $gasan_skip_{label};"));

    let mut s = render(&v, indent);
    let _ = writeln!(s, "{indent}{original}");
    let zeroing: Vec<String> = a
        .dests
        .iter()
        .zip(dest_types)
        .filter_map(|(d, ty)| {
            let bits = ty.as_deref().and_then(super::type_bits).unwrap_or(32);
            (ty.as_deref() != Some("pred")).then(|| format!("mov.b{bits} {d}, 0;"))
        })
        .collect();
    if zeroing.is_empty() {
        let _ = writeln!(s, "{indent}$gasan_skip_{label}: {M}");
    } else {
        let _ = writeln!(s, "{indent}bra.uni $gasan_done_{label}; {M}");
        let _ = writeln!(s, "{indent}$gasan_skip_{label}: {M}");
        for z in zeroing {
            put(&mut s, indent, &z);
        }
        let _ = writeln!(s, "{indent}$gasan_done_{label}: {M}");
    }
    let _ = writeln!(s, "{indent}}} {M}");
    s
}
