//! PTX rewriter: inserts a shadow check before every access that can touch global memory.
//!
//! A line-level rewriter: every statement that is not a global/generic memory access passes through
//! byte-identical (directives, `.loc`, comments, labels). A checked access becomes
//!
//! ```text
//! { .reg ...;  <range test against the pool, shadow load, encoding test>
//!   @bad call (skip), __gasan_report, (...);
//!   @skip bra SKIP;   <original statement, unchanged>   ...   SKIP: }
//! ```
//!
//! The control block `__gasan_ctl` and the slow path `__gasan_report` are added after the module
//! header (see [`crate::abi`]).
//!
//! In halt mode with optimization, the checks of one basic block are planned together first:
//! same-register accesses are coalesced into range checks (coalesce.rs), and the others have their
//! shadow bytes loaded as early as their addresses are known and are tested behind one branch
//! before the block's first access, or pipelined one iteration ahead in single-block loops
//! (prefetch.rs). A failed batch rechecks its members to report the right one.
//!
//! # The pipeline
//!
//! One rewrite runs these passes in this order, each once (the numbers mark them in the code).
//! The analyses of the module and of its functions all come before the walk that writes the text
//! (12), which reads their plans; the walk itself still decides, statement by statement, what an
//! earlier check in the same block makes needless (`BlockChecks`), collects register types as it
//! goes, and asks spaces.rs for each shared/local check (moving those into plans waits for the
//! IR's per-function register types and definitions).
//!
//! 1. refusals: a module gasan checked already, or one naming gasan's own names
//!    ([`instrument_ptx_threads`]);
//! 2. labels.rs: every label on a line of its own;
//! 3. frames.rs: the callers' frame top passed to each function that can take it (a plan of
//!    in-line edits over the IR's statements, applied to the text every later pass reads);
//! 4. the header (`.version`, `.target`, `.address_size`; ir/header.rs);
//! 5. the IR: the lines read once, the function bodies, the source location of each line, the
//!    shared/local declarations (ir/, spaces.rs `declarations`);
//! 6. branches and loops (ir/cfg.rs), then loop versioning (loops.rs), which rewrites the lines;
//! 7. heap.rs: the renaming of the driver's heap functions (a plan of in-line edits);
//! 8. coalescing, runs of masked accesses and prefetching of each block's global checks
//!    (coalesce.rs, masked_runs.rs, prefetch.rs);
//! 9. the shared/local provenance of each function's registers (spaces.rs);
//! 10. shared/local checks grouped, or proven needless (spaces.rs, thread_ranges.rs);
//! 11. each kernel's pointer parameters looked up at its entry (bounds.rs);
//! 12. the walk: each line written as it was or with its checks (emit.rs, outside.rs), in parts
//!     of whole functions on several threads for a large module;
//! 13. the functions gasan defines for the heap appended (heap_functions.rs).
//!
//! 8 to 11 are [`Module::plan`], made per part of a split rewrite.
//!
//! # Layers
//!
//! Each file of `ptx/` names only files of its own layer or of those below it, with no cycle
//! (instrument/tests/ptx_layers.rs reads the `use` lines and holds every file to it):
//!
//! - `ir` (ir/): the model of the input, every fact about it decided once;
//! - `lines` (lines.rs): how a line of checked PTX is written, emission's leaf;
//! - `plan`: frames, heap, coalesce, prefetch, loops, bounds, spaces, space_check, thread_ranges;
//! - `emit`: emit.rs (checks, report blocks, the prelude), outside.rs, heap_functions.rs;
//! - `rewrite`: mod.rs (the pipeline, the walk, its threads) and sites.rs.
//!
//! (bounds.rs, loops.rs and spaces.rs still write some text of their own, through `lines` only;
//! moving it into `emit` is what is left of issue 37's emission split.)

mod bounds;
mod coalesce;
mod emit;
mod frames;
mod heap;
mod heap_functions;
mod ir;
use ir::header::{self, Directive, Header};
use ir::line::{find_byte, find_pair, release_excess, strip_comment, Line, LineMap, LineSet, Loc, ParsedStmt};
use ir::regs::{type_bits, DeclaredRegs, RegTypes};
use ir::stmt::kills_checks;
use ir::{access, bodies, cfg as branches, defs, func, labels, line, opcode, stmt};
mod lines;
mod loops;
#[cfg(test)]
mod loops_sim;
mod masked_runs;
mod outside;
mod prefetch;
mod sites;
mod space_check;
mod spaces;
mod thread_ranges;

pub use access::SkipReason;
pub use frames::{undo as undo_frame_tops, TOP_PARAM as FRAME_TOP_PARAM};
pub use ir::header::PtxHeader;
pub use lines::MARKER;
use lines::{indented, push_indented};
pub use sites::{Site, SiteTable, SourceLoc, SpaceSite};
pub use spaces::NO_FRAME as FRAMELESS_KERNEL_VARIABLE;

use crate::shadow::Scale;
use access::{Classified, Instr};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Options of one instrumentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstrumentOptions {
    pub scale: Scale,
    /// Check elimination (drop checks dominated by an identical one in the same basic block).
    pub optimize: bool,
    /// Recover mode: a bad access is reported and skipped (loads yield 0). Otherwise (halt mode)
    /// the check branches to an out-of-line block that reports and traps, keeping the fast path
    /// free of calls and of branches around the access.
    pub recover: bool,
    /// The pool the module will run against satisfies [`Scale::pool_allows_aligned_check`]: the
    /// in-pool test and the shadow index use 32-bit arithmetic (four instructions fewer a check).
    /// Only valid with such a pool's control block.
    pub aligned_pool: bool,
    /// Loop versioning (halt mode with optimization, loops.rs): checks of accesses affine in a
    /// single-block loop's iteration become one range test per address at the loop's entry
    /// against the pool's extent table; the checked loop runs when the test fails.
    pub hoist_loops: bool,
    /// Kernel-parameter bounds (bounds.rs): each kernel looks up, at its entry, the pool block of
    /// each pointer parameter its checked addresses derive from, and checks of addresses inside
    /// that block's whole granules skip their shadow load.
    pub param_bounds: bool,
    /// Checks of addresses outside the pool fail over, while the control block says so, to the
    /// verdict against the runtime's table of outside ranges (outside.rs): each check's stub
    /// gains the verdict and a resume label. Off: outside addresses pass, as before.
    pub outside_checks: bool,
}

impl Default for InstrumentOptions {
    fn default() -> Self {
        Self { scale: Scale::S8, optimize: true, recover: false, aligned_pool: false, hoist_loops: true, param_bounds: true, outside_checks: false }
    }
}

impl InstrumentOptions {
    fn form(&self) -> emit::Form {
        emit::Form { scale: self.scale, aligned: self.aligned_pool, outside: self.outside_checks, fails_after_joins: false }
    }
}

/// Errors of the rewriter. The input is never partially trusted: any error means "load the original".
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PtxError {
    #[error("not PTX text: no .version directive")]
    NoVersion,
    #[error("unsupported PTX version {0} (gasan needs 6.0 or newer)")]
    UnsupportedVersion(String),
    #[error("unsupported .address_size {0} (gasan checks 64-bit addressing only)")]
    AddressSize(String),
    #[error("module already instrumented by gasan")]
    AlreadyInstrumented,
    #[error("unbalanced braces at line {0}")]
    Unbalanced(usize),
    #[error("address register {reg} at line {line} is not a 64-bit register")]
    AddressRegister { reg: String, line: usize },
    /// The input names a symbol or register of gasan's own ([`reserved_name`]): the checked module
    /// would declare it twice, or gasan's edits would reach the input's own text.
    #[error("line {line} names {name}: names starting __gasan_ or %gs are gasan's own")]
    ReservedName { name: String, line: usize },
}

/// Most characters of input text an error message quotes.
pub const MAX_QUOTED_CHARS: usize = 200;

/// `text` as an error message quotes it: whole up to [`MAX_QUOTED_CHARS`] characters, else its
/// start and its length (a bad line may be megabytes long).
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// Per-kernel (per-function) counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FunctionStats {
    /// Global or generic accesses found.
    pub found: u32,
    /// Checks emitted.
    pub checked: u32,
    /// Checks dropped by elimination.
    pub eliminated: u32,
    pub skipped: BTreeMap<String, u32>,
    /// Memory-like statements not understood (left alone).
    pub unknown: u32,
    /// Shared- and local-space accesses found (spaces.rs): checked, eliminated or neither (an
    /// address whose variable is not known).
    #[serde(default)]
    pub space_found: u32,
    /// Shared/local checks emitted (spaces.rs).
    #[serde(default)]
    pub space_checked: u32,
    /// Shared/local checks dropped: proven by earlier checks on every path (spaces.rs).
    #[serde(default)]
    pub space_eliminated: u32,
    /// Global checks in versioned loops' fast copies (loops.rs): checks of accesses their range
    /// test does not cover. A copy repeats statements counted above, so nothing else of it is
    /// counted; each of these checks has a site of its own.
    #[serde(default)]
    pub copy_checked: u32,
}

impl FunctionStats {
    /// Adds the counts of `other`: every field summed, in one place.
    fn add(&mut self, other: &FunctionStats) {
        self.found += other.found;
        self.checked += other.checked;
        self.eliminated += other.eliminated;
        self.unknown += other.unknown;
        self.space_found += other.space_found;
        self.space_checked += other.space_checked;
        self.space_eliminated += other.space_eliminated;
        self.copy_checked += other.copy_checked;
        for (k, v) in &other.skipped {
            *self.skipped.entry(k.clone()).or_default() += v;
        }
    }
}

/// Whole-module counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub functions: BTreeMap<String, FunctionStats>,
    pub unknown_opcodes: BTreeMap<String, u32>,
}

impl Stats {
    /// Adds the counts of `other` (of other functions, or more of the same).
    fn add(&mut self, other: Stats) {
        for (name, f) in other.functions {
            self.functions.entry(name).or_default().add(&f);
        }
        for (op, n) in other.unknown_opcodes {
            *self.unknown_opcodes.entry(op).or_default() += n;
        }
    }

    pub fn total(&self) -> FunctionStats {
        let mut t = FunctionStats::default();
        for f in self.functions.values() {
            t.add(f);
        }
        t
    }
}

/// Result of instrumenting one PTX module.
#[derive(Clone, Debug)]
pub struct Instrumented {
    pub ptx: String,
    pub sites: SiteTable,
    pub stats: Stats,
    /// The kernels' parameters launches may tag ([`crate::abi::param_tag`]).
    pub param_tags: crate::abi::ParamTagTable,
}

/// Changes whenever the same input and options produce different checked PTX (cache keys use it).
pub const REVISION: u32 = 104;

/// Instruments a PTX module.
///
/// A module of [`PARALLEL_MIN_BYTES`] or more is rewritten in parts on up to as many threads as the
/// machine has cores ([`instrument_ptx_threads`] with 0); the text is the same either way.
pub fn instrument_ptx(ptx: &str, opts: &InstrumentOptions) -> Result<Instrumented, PtxError> {
    instrument_ptx_threads(ptx, opts, 0)
}

/// [`instrument_ptx`] on a chosen number of threads: 1 rewrites the module in one piece on this
/// thread; n > 1 splits it into up to n parts of whole functions (at most one a function), whatever
/// its size, each rewritten on a thread of its own; 0 leaves it to the module's size and the
/// machine's cores. The checked PTX, site table and statistics are byte for byte those of one
/// piece.
pub fn instrument_ptx_threads(ptx: &str, opts: &InstrumentOptions, threads: usize) -> Result<Instrumented, PtxError> {
    // 1. (`memmem`: whole-module searches are serial time of every rewrite, and its vector search
    // reads the text several times faster than `str::contains`.)
    // (The control block's name begins with gasan's reserved prefix: a module without the prefix,
    // as nearly all are, is searched once for both.)
    let gasan_names = memchr::memmem::find(ptx.as_bytes(), RESERVED_PREFIXES[0].as_bytes()).is_some();
    if gasan_names && memchr::memmem::find(ptx.as_bytes(), crate::abi::CONTROL_BLOCK_SYMBOL.as_bytes()).is_some() {
        return Err(PtxError::AlreadyInstrumented);
    }
    if let Some((name, line)) = reserved_name(ptx, gasan_names) {
        return Err(PtxError::ReservedName { name: excerpt(name), line });
    }
    // 2, 3. Labels and a body brace followed by statements get lines of their own (labels.rs),
    // then called functions get the top of their
    // callers' frames (frames.rs), before anything else reads the module: every pass then sees
    // an ordinary module.
    let labels = labels::LabelLines::split(ptx);
    let ptx = labels.as_ref().map_or(ptx, |l| l.text.as_str());
    let (text, functions) = match frames::pass_tops(ptx) {
        Some(t) => (Some(t.text), t.functions),
        None => (None, Default::default()),
    };
    // 4.
    let mut r = Rewriter::new(text.as_deref().unwrap_or(ptx), *opts)?;
    r.top_params = functions;
    r.label_lines = labels.as_ref();
    r.run(threads)
}

/// Where gasan's own names begin: its symbols (`__gasan_ctl`, `__gasan_top`, `__gasan_free`, ...)
/// and its registers (`%gsa0`, `%gsct`, ...), which the checked module declares or passes.
const RESERVED_PREFIXES: [&str; 2] = ["__gasan_", "%gs"];

/// The first name of the input's code (comments aside) that starts with one of
/// [`RESERVED_PREFIXES`], and its line number (1-based). A module naming one is refused, not
/// rewritten: its own `__gasan_top` parameter or `%gsct` register would be taken for gasan's
/// (frames.rs), and gasan's declarations would clash with its own.
/// `gasan_names`: the text holds `RESERVED_PREFIXES[0]` (searched for by the caller).
fn reserved_name(ptx: &str, gasan_names: bool) -> Option<(&str, usize)> {
    let bytes = ptx.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut first: Option<(usize, usize)> = None;
    for prefix in RESERVED_PREFIXES.iter().skip(usize::from(!gasan_names)) {
        // (A name starting `%gs` needs one more letter: `%gs` alone is no register of gasan's.)
        let letter = prefix.starts_with('%');
        for at in memchr::memmem::find_iter(bytes, prefix.as_bytes()) {
            if first.is_some_and(|(f, _)| f < at) {
                break;
            }
            let end = at + prefix.len() + bytes[at + prefix.len()..].iter().take_while(|&&b| ident(b)).count();
            let starts_name = at == 0 || !ident(bytes[at - 1]);
            if !starts_name || (letter && !bytes.get(at + prefix.len()).is_some_and(u8::is_ascii_lowercase)) {
                continue;
            }
            let line_start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |p| p + 1);
            let line_end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |p| at + p);
            // In code: not after a `//` on its line.
            if at < line_start + strip_comment(&ptx[line_start..line_end]).len() {
                first = Some((at, end));
                break;
            }
        }
    }
    let (at, end) = first?;
    Some((&ptx[at..end], memchr::memchr_iter(b'\n', &bytes[..at]).count() + 1))
}

fn parse_header(ptx: &str) -> Result<Header, PtxError> {
    let mut version = None;
    let mut target_sm = 0;
    let mut insert_at = None;
    for (directive, end) in header::directives(ptx) {
        match directive {
            Directive::Version(v) => {
                let (maj, min) = v.split_once('.').ok_or_else(|| PtxError::UnsupportedVersion(excerpt(v)))?;
                let parsed = (maj.trim().parse().ok(), min.trim().parse().ok());
                match parsed {
                    (Some(a), Some(b)) => version = Some((a, b)),
                    _ => return Err(PtxError::UnsupportedVersion(excerpt(v))),
                }
            }
            Directive::Target(t) => {
                for part in t.split(',') {
                    if let Some(sm) = part.trim().strip_prefix("sm_") {
                        target_sm = sm.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().unwrap_or(0);
                    }
                }
            }
            Directive::AddressSize(a) => {
                if a != "64" {
                    return Err(PtxError::AddressSize(excerpt(a)));
                }
            }
        }
        insert_at = Some(end);
    }
    let version = version.ok_or(PtxError::NoVersion)?;
    if version < (6, 0) {
        return Err(PtxError::UnsupportedVersion(format!("{}.{}", version.0, version.1)));
    }
    Ok(Header { insert_at: insert_at.unwrap_or(0), version, target_sm })
}

/// `(file, line, column)`: the first three numbers of `.loc` operands (without allocating: every
/// `.loc` line of every module goes through here).
fn loc_numbers(text: &str) -> Option<Loc> {
    // (ASCII text, as a `.loc` is, split and parsed byte by byte: the `char` split and `str::parse`
    // were most of finding a module's source locations. Other text goes to them, as it did.)
    if !text.is_ascii() {
        let mut nums = text.split(|c: char| c == ',' || c.is_whitespace()).filter_map(|s| s.parse().ok());
        return Some((nums.next()?, nums.next()?, nums.next()?));
    }
    let mut nums = text.as_bytes().split(|&b| b == b',' || access::ascii_whitespace(b)).filter_map(parse_u32);
    Some((nums.next()?, nums.next()?, nums.next()?))
}

/// `str::parse::<u32>` of ASCII digits: an optional `+`, then one digit or more, the value
/// below 2^32.
fn parse_u32(s: &[u8]) -> Option<u32> {
    let digits = s.strip_prefix(b"+").unwrap_or(s);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &d| if d.is_ascii_digit() { n.checked_mul(10)?.checked_add(u32::from(d - b'0')) } else { None })
}

/// Source locations of `.loc` directives, with inlined code placed at the program's own call site,
/// as a report should name it. nvcc writes one `.loc` per level of inlining, each naming the call
/// site of its level with `inlined_at`, which is the location of an earlier `.loc`: `.loc 1 11 5`
/// (the program's line), `.loc 2 69 9, function_name ..., inlined_at 1 11 5` (cuda_pipeline.h),
/// `.loc 3 292 5, ..., inlined_at 2 69 9` (its helper) all resolve to 1:11:5. Fed every `.loc` in
/// order.
#[derive(Default)]
struct LocChain {
    /// Outermost call site of each inlined location seen.
    outer: HashMap<Loc, Loc>,
}

impl LocChain {
    const INLINED_AT: &'static str = "inlined_at";

    /// The location a `.loc` directive (its operands, `rest`) stands for. (`inlined_at` is
    /// [`LocChain::INLINED_AT`], built once: a `str` pattern builds its searcher at every call,
    /// which cost more than the rest of a `.loc` line.)
    fn resolve(&mut self, rest: &str, inlined_at: &memchr::memmem::Finder<'_>) -> Option<Loc> {
        // (Most `.loc`s are three numbers: without a `_` they hold no `inlined_at`, which the
        // searcher's setup would cost more than the line to find.)
        let split = find_byte(b'_', rest.as_bytes()).and_then(|_| inlined_at.find(rest.as_bytes())).map(|p| (&rest[..p], &rest[p + Self::INLINED_AT.len()..]));
        match split {
            Some((own, at)) => {
                let (own, at) = (loc_numbers(own)?, loc_numbers(at)?);
                let outer = self.outer.get(&at).copied().unwrap_or(at);
                self.outer.insert(own, outer);
                Some(outer)
            }
            None => {
                let own = loc_numbers(rest)?;
                if !self.outer.is_empty() {
                    self.outer.remove(&own);
                }
                Some(own)
            }
        }
    }
}

/// The source location in effect at each line: the last `.loc` up to and including it (inlined
/// code placed at the program's own call site, [`LocChain`]), `None` from a function's opening
/// line to its first `.loc`. Found once and read by every pass that records sites.
fn source_locations(lines: &[Line<'_>], bodies: &bodies::Bodies) -> Vec<Option<Loc>> {
    let (mut chain, mut loc) = (LocChain::default(), None);
    let inlined_at = memchr::memmem::Finder::new(LocChain::INLINED_AT);
    let mut locs = Vec::with_capacity(lines.len());
    // The bodies' opening lines in order (`bodies.opening_at(i)` of every line, without a search
    // per line).
    let mut opens = bodies.iter().map(|b| b.open).peekable();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.loc_operands() {
            loc = chain.resolve(rest, &inlined_at).or(loc);
        }
        while opens.next_if(|&o| o < i).is_some() {}
        if opens.peek() == Some(&i) {
            loc = None;
        }
        locs.push(loc);
    }
    locs
}

/// Whether `text` waits for `wgmma` groups: a function that does reports through calls where a
/// group can be in flight ([`emit::reports_through_calls`]).
fn waits_for_wgmma(text: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), b"wgmma.wait_group").is_some()
}

/// The whitespace a line starts with: the indent of the lines written for it (borrowed, not
/// copied: every access line has one).
fn leading_whitespace(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// Function-level state while scanning; what planning decided for the function is borrowed from
/// its [`Plans`] (`'p`), not copied per body.
struct FuncState<'p> {
    name: String,
    /// Demangled once per function, when its first site is recorded (demangling is the costliest
    /// part of a site; a function without checks is never demangled).
    demangled: std::cell::OnceCell<String>,
    /// Its register types, read to the line being rewritten.
    regs: DeclaredRegs,
    /// Checks already emitted in the current basic block.
    block_checks: BlockChecks,
    /// Out-of-line report blocks (halt mode), emitted before the function's closing brace.
    fail_blocks: Vec<String>,
    /// Some check branches to the function's shared report block.
    uses_shared_fail: bool,
    /// The line being rewritten is inside a block of the body (or opens or closes one): a check's
    /// stub goes inline there, because its resume label is not visible from the body's level
    /// (PTX labels are scoped by block).
    nested: bool,
    /// Register provenance for shared/local checks (spaces.rs).
    spaces: &'p spaces::FnSpaces,
    /// Some shared/local check branches to the function's [`spaces::SPACE_FAIL`] block.
    uses_space_fail: bool,
    /// The kernel's looked-up pointer parameters ([`bounds`]).
    bounds: Option<&'p bounds::ParamBounds>,
    /// Where its text begins in the output.
    out_start: usize,
    /// It waits for `wgmma` groups: halt mode's reports where a group can be in flight rejoin
    /// their checks ([`emit::reports_through_calls`]).
    wgmma: bool,
    /// Its counts so far, and those of its statements in fast loop copies: added to the module's
    /// ([`Rewriter::stats`], [`Rewriter::copy_stats`]) when the body closes (a statement's counts
    /// found no map entry by the function's name).
    stats: FunctionStats,
    copy_stats: FunctionStats,
}

struct Rewriter<'a> {
    src: &'a str,
    opts: InstrumentOptions,
    header: Header,
    out: String,
    sites: Sites,
    stats: Stats,
    /// Fast loop copies repeat input statements: their counts go here, not into the module's.
    copy_stats: Stats,
    next_label: u32,
    /// Labels of prefetches' fast paths ([`bounds`]), numbered apart from the checks' labels.
    prefetch_labels: u32,
    /// Shared/local variables' demangled names, by name: a function's checks name few variables
    /// many times, and demangling is the costliest part of a site.
    demangled_vars: HashMap<String, String>,
    param_tags: crate::abi::ParamTagTable,
    /// A walk that only counts the labels and sites it would number ([`Rewriter::run_parts`]): the
    /// decisions are made, the check text is not written.
    counting: bool,
    /// The functions given [`frames::TOP_PARAM`].
    top_params: rustc_hash::FxHashSet<String>,
    /// Where the text's lines were in the input, when labels were moved to lines of their own.
    label_lines: Option<&'a labels::LabelLines>,
    /// Halt mode, in a module that waits for `wgmma` groups ([`waits_for_wgmma`]): its functions
    /// that do report through calls ([`emit::halt_functions`]).
    wgmma: bool,
}

impl<'a> Rewriter<'a> {
    fn new(src: &'a str, opts: InstrumentOptions) -> Result<Self, PtxError> {
        let header = parse_header(src)?;
        Ok(Self {
            src,
            opts,
            header,
            out: String::with_capacity(src.len() * 8 + 16 * 1024),
            sites: Sites::default(),
            stats: Stats::default(),
            copy_stats: Stats::default(),
            next_label: 0,
            prefetch_labels: 0,
            demangled_vars: HashMap::default(),
            param_tags: crate::abi::ParamTagTable::default(),
            counting: false,
            top_params: Default::default(),
            label_lines: None,
            wgmma: !opts.recover && waits_for_wgmma(src),
        })
    }

    fn run(mut self, threads: usize) -> Result<Instrumented, PtxError> {
        let (head, body) = self.src.split_at(self.header.insert_at);
        self.out.push_str(head);
        if !head.ends_with('\n') && !head.is_empty() {
            self.out.push('\n');
        }
        self.out.push_str(&emit::fixed_text(emit::FixedBlock::Prelude { no_extent: self.opts.param_bounds, outside: self.opts.outside_checks }, self.opts.scale, emit::publish_for(&self.header)));
        if self.wgmma {
            self.out.push_str(&emit::halt_functions(self.opts.form(), emit::publish_for(&self.header)));
        }
        // 5. Read on this thread whatever the thread count: reading a line costs little more than
        // writing it, so lines read on other threads cost as much again to move into the one
        // vector every pass indexes (a piece a thread was slower than one thread reading all).
        let mut scanner = bodies::Scanner::default();
        let input = Line::read_text_scanning(body, &mut scanner);
        let planned = self.opts.optimize && !self.opts.recover;
        let input_bodies = scanner.finish();
        // With threads to spare, the source locations and the shared/local declarations (read by
        // every part of a split rewrite) are found on two more while this one scans the branches
        // and versions loops: serial passes of the whole module, run side by side. Versioning
        // moves the lines, and then both are found again from the new lines.
        let spare = read_threads(body.len(), threads) > 1;
        let (input_branches, loud_input, versioned, early) = std::thread::scope(|s| {
            let early = spare.then(|| (s.spawn(|| source_locations(&input, &input_bodies)), s.spawn(|| spaces::declarations(&input))));
            // 6. (Kernel-parameter bounds ask which lines are in loops, in every mode.)
            // (Where loops may be versioned, the lines found to be labels or to name branches:
            // the others the scan of the versioned lines passes over.)
            let (input_branches, loud) = if planned && self.opts.hoist_loops {
                branches::Branches::scan_noting_loud(&input, &input_bodies)
            } else if planned || self.opts.param_bounds {
                (branches::Branches::scan(&input, &input_bodies), Vec::new())
            } else {
                (branches::Branches::default(), Vec::new())
            };
            let versioned = if planned && self.opts.hoist_loops { loops::version(&input, &input_bodies, &input_branches, self.opts.scale, self.header.version >= (6, 2)) } else { None };
            let early = early.map(|(locs, declared)| (locs.join().expect("finding source locations panicked"), declared.join().expect("scanning declarations panicked")));
            (input_branches, loud, versioned, early)
        });
        let early = early.filter(|_| versioned.is_none());
        if versioned.as_ref().is_some_and(|v| v.sweeps) {
            // Defined ahead of every function, so each range test can call it.
            self.out.push_str(&loops::sweep_function(self.opts.scale));
        }
        // Versioning rewrote the lines: the input's lines and bodies move to their new places
        // (its lines are only added inside loops, never at a body's braces), branches are found
        // again.
        let (lines, bodies, branches) = match &versioned {
            Some(v) => {
                let quiet_input = branches::quiet_lines(&loud_input, &input_bodies, input.len());
                let (lines, moved_to) = v.take_lines(input);
                let bodies = input_bodies.moved(&moved_to);
                debug_assert_eq!(bodies, bodies::Bodies::scan(&lines));
                // (A line moved or copied from the input, `origin` its input line, has the text
                // the first scan read: one it found quiet is passed over. Lines versioning wrote
                // are all read.)
                let branches = branches::Branches::scan_skipping(&lines, &bodies, |j| !lines[j].generated && quiet_input[v.origin[j]]);
                (lines, bodies, branches)
            }
            None => (input, input_bodies, input_branches),
        };
        let none = LineSet::default();
        let (covered, copies, space_covered) = versioned.as_ref().map_or((&none, &none, &none), |v| (&v.covered, &v.copies, &v.space_covered));
        let (locs, declared) = match early {
            Some((locs, declared)) => (locs, Some(declared)),
            None => (source_locations(&lines, &bodies), None),
        };
        let versioned_loop = versioned.as_ref().filter(|_| self.opts.param_bounds).map(|v| v.loop_lines()).unwrap_or_default();
        // 7. (A line is in a function where the walk is in its body: after its opening line.)
        let heap = heap::HeapPlan::of(self.src, &lines, |i| bodies.holding(i).is_some_and(|b| b.open < i));
        let module = Module {
            lines: &lines,
            bodies: &bodies,
            branches: &branches,
            covered,
            copies,
            space_covered,
            origin: versioned.as_ref().map(|v| v.origin.as_slice()),
            base_line: memchr::memchr_iter(b'\n', head.as_bytes()).count(),
            label_lines: self.label_lines,
            locs: &locs,
            versioned_loop: &versioned_loop,
            heap: heap.as_ref(),
            wgmma: self.wgmma,
        };
        let declared = declared.unwrap_or_else(|| spaces::declarations(&lines));
        if heap.is_none() {
            let parts = parts(&bodies, lines.len(), self.src.len(), threads);
            if parts.len() > 1 {
                if let Some(done) = self.run_parts(&module, &parts, &declared) {
                    // Dropping the lines and their parse costs as much as reading them.
                    drop_in_parts(lines, parts.len());
                    return Ok(done);
                }
            }
        }
        // 8 to 11, then 12.
        let plans = module.plan(0..lines.len(), &bodies, declared, &self.opts, &self.top_params);
        let mut walk = Walk::default();
        for i in 0..lines.len() {
            self.walk_line(&plans, &mut walk, i)?;
        }
        if let Some(f) = walk.func.take() {
            self.add_stats(f);
        }
        if walk.depth != 0 {
            let last = self.src.lines().count();
            return Err(PtxError::Unbalanced(self.label_lines.map_or(last, |l| l.input_line(last - 1) + 1)));
        }
        // 13.
        if let Some(h) = &heap {
            self.out.push_str(&h.flush(&mut walk.heap, &lines));
            if !self.out.ends_with('\n') {
                self.out.push('\n');
            }
            self.out.push_str(&heap_functions::definitions(h.declared(), self.opts.scale, &self.header));
        }
        self.sites.table.resolve_files();
        let stats = self.stats_with_copies();
        Ok(Instrumented { ptx: self.out, sites: self.sites.table, stats, param_tags: self.param_tags })
    }

    /// The rewrite of a module's lines in parts (`parts`: line ranges that begin at a body's
    /// opening line or the first line, in order), each planned and walked on a thread of its own,
    /// and stitched together: the text and site table the walk of all lines in order writes.
    /// Check labels and site ids are numbered through the module, so a part's walk needs to know
    /// how many the parts before it used. A part whose predecessors have all been walked when its
    /// planning is done is walked once, numbered from their sum; any other is walked first
    /// numbering from zero, which tells how many it uses (the walk's decisions do not depend on the
    /// numbers), and, when the sum before it is known and not zero, walked again from there.
    /// `None` when a part does not end as the walk of the whole module would pass from it to the
    /// next (an error, an unclosed brace or block comment): the module is then walked in one
    /// piece, which finds the same error or state.
    fn run_parts(&mut self, m: &Module<'_, '_>, parts: &[std::ops::Range<usize>], declared: &spaces::ModuleSpaces) -> Option<Instrumented> {
        let head = self.out.clone();
        let first_out = std::mem::take(&mut self.out);
        let this = &*self;
        let used = Numbers::new(parts.len());
        let part = |k: usize, out: String| -> Option<Walked> {
            let range = parts[k].clone();
            let first = m.bodies.iter().position(|b| b.open >= range.start).unwrap_or(m.bodies.len());
            let end = m.bodies.iter().position(|b| b.open >= range.end).unwrap_or(m.bodies.len());
            let plans = m.plan(range.clone(), &m.bodies.part(first..end), declared.clone(), &this.opts, &this.top_params);
            match used.start(k) {
                Some(start) => {
                    let walked = start.and_then(|start| this.walk_part(&plans, range, start, false, out));
                    used.publish(k, walked.as_ref().map(|w| w.used));
                    walked
                }
                None => {
                    // Only counting: its text is written by the walk from its start.
                    let counted = this.walk_part(&plans, range.clone(), Numbering::default(), true, String::new());
                    used.publish(k, counted.as_ref().map(|w| w.used));
                    let start = used.wait_start(k)?;
                    counted.and_then(|_| this.walk_part(&plans, range, start, false, out))
                }
            }
        };
        // The first part (always walked once, from zero, on this thread) writes after the module's
        // head and prelude, in place; each later part is appended as its thread is joined, in
        // order, while the parts after it may still be running: the text is copied once, and only
        // the last part's copy waits for every walk. On failure the head is put back for the walk
        // in one piece.
        let stitched = std::thread::scope(|s| {
            let handles: Vec<_> = (1..parts.len()).map(|k| s.spawn(move || part(k, String::new()))).collect();
            let first = part(0, first_out)?;
            let (mut out, mut sites, mut stats, mut param_tags) = (first.out, first.sites, first.stats, first.param_tags);
            for h in handles {
                let w = h.join().expect("a part's rewrite panicked")?;
                out.push_str(&w.out);
                sites.sites.extend(w.sites.sites);
                sites.files.extend(w.sites.files);
                stats.add(w.stats);
                param_tags.kernels.extend(w.param_tags.kernels);
            }
            Some((out, sites, stats, param_tags))
        });
        let Some((out, mut sites, stats, param_tags)) = stitched else {
            self.out = head;
            return None;
        };
        sites.resolve_files();
        Some(Instrumented { ptx: out, sites, stats, param_tags })
    }

    /// The walk of the lines of `range` (a part of [`Rewriter::run_parts`]) on its own: its text,
    /// sites and counts, numbered from `start`. `None` when the walk stops with an error or does
    /// not end between bodies at brace depth 0.
    fn walk_part(&self, plans: &Plans<'_, '_>, range: std::ops::Range<usize>, start: Numbering, counting: bool, mut out: String) -> Option<Walked> {
        if !counting {
            let bytes: usize = plans.module.lines[range.clone()].iter().map(|l| l.raw.len()).sum();
            out.reserve(bytes * 8 + 1024);
        }
        let mut r = Rewriter {
            src: self.src,
            opts: self.opts,
            header: self.header.clone(),
            out,
            sites: Sites { table: SiteTable::default(), base: start.sites },
            stats: Stats::default(),
            copy_stats: Stats::default(),
            next_label: start.labels,
            prefetch_labels: start.prefetch_labels,
            demangled_vars: HashMap::default(),
            param_tags: crate::abi::ParamTagTable::default(),
            counting,
            top_params: Default::default(),
            label_lines: self.label_lines,
            wgmma: self.wgmma,
        };
        let mut walk = Walk::default();
        for i in range {
            r.walk_line(plans, &mut walk, i).ok()?;
            if counting {
                // (Its text is dropped: kept, it grew to the part's size, reallocated on the way.)
                r.out.clear();
            }
        }
        if walk.depth != 0 || walk.func.is_some() || walk.in_block_comment {
            return None;
        }
        let used = Numbering { labels: r.next_label - start.labels, prefetch_labels: r.prefetch_labels - start.prefetch_labels, sites: r.sites.table.sites.len() as u32 };
        let stats = r.stats_with_copies();
        Some(Walked { out: r.out, sites: r.sites.table, stats, param_tags: r.param_tags, used })
    }

    /// The module's counts, with the fast copies' global checks as [`FunctionStats::copy_checked`].
    fn stats_with_copies(&mut self) -> Stats {
        let mut stats = std::mem::take(&mut self.stats);
        for (name, copy) in std::mem::take(&mut self.copy_stats).functions {
            if copy.checked > 0 {
                stats.functions.entry(name).or_default().copy_checked += copy.checked;
            }
        }
        stats
    }

    /// Writes line `i` and what goes before it: prefetches and batch branches planned there, its
    /// checks, and a closing body's report blocks.
    fn walk_line<'p>(&mut self, plans: &'p Plans<'_, '_>, w: &mut Walk<'p>, i: usize) -> Result<(), PtxError> {
        let line = plans.module.lines[i].raw;
        let code = plans.module.lines[i].stripped();
        let line_no = plans.ptx_line(i);
        if !w.in_block_comment {
            self.before_line(plans, w, i);
        }
        // Block comments pass through untouched (inside a heap statement being collected, in
        // their place in it).
        // (`code` holds a `/` only where the line's code does: `slash`.)
        let opens_comment = !w.in_block_comment && plans.module.lines[i].slash && find_pair(code, b'/', b'*').is_some();
        if w.in_block_comment || opens_comment {
            if w.in_block_comment {
                w.in_block_comment = find_pair(line, b'*', b'/').is_none();
            } else if let Some(p) = find_pair(code, b'/', b'*') {
                w.in_block_comment = find_pair(&code[p..], b'*', b'/').is_none();
            }
            if !w.heap.held() {
                self.out.push_str(line);
            }
            return Ok(());
        }

        if let Some((idx, name)) = plans.module.lines[i].file_entry() {
            self.sites.table.add_file(idx, name);
        }

        // Statements that open or close a function body.
        let (opens, closes) = plans.module.lines[i].brace_counts();
        // (A body opens on a line that opens a brace and closes on one that closes one: the
        // searches are only made there.)
        let closes_body = closes > 0 && plans.module.bodies.holding(i).is_some_and(|b| b.close == i);
        let mut opened_now = false;
        if w.func.is_none() && opens > 0 {
            if let Some(body) = plans.module.bodies.opening_at(i) {
                let name = &body.name;
                let bounds = plans.bounds.get(&body.open).and_then(Option::as_ref);
                if let Some(tags) = bounds.and_then(bounds::ParamBounds::tags) {
                    self.param_tags.kernels.insert(name.clone(), tags);
                }
                w.func = Some(FuncState {
                    // (A counting walk's sites are only counted.)
                    demangled: if self.counting { String::new().into() } else { std::cell::OnceCell::new() },
                    name: name.clone(),
                    regs: DeclaredRegs::of_body(body.open),
                    block_checks: BlockChecks::default(),
                    fail_blocks: Vec::new(),
                    uses_shared_fail: false,
                    spaces: plans.module_spaces.functions.get(name).unwrap_or(&plans.no_spaces),
                    uses_space_fail: false,
                    bounds,
                    nested: false,
                    out_start: self.out.len(),
                    stats: FunctionStats::default(),
                    copy_stats: FunctionStats::default(),
                    wgmma: self.wgmma && plans.module.lines[body.open..=body.close.min(plans.module.lines.len() - 1)].iter().any(|l| l.stmts().iter().any(|s| s.text.starts_with("wgmma.wait_group"))),
                });
                // (Its entry in the module's counts is made when they are added: add_stats.)
                opened_now = true;
            }
        }
        // A line of a heap statement that spans lines (heap.rs) is part of it, and is written
        // with it, in order.
        let held = w.heap.held() || plans.module.heap.is_some_and(|h| h.holds_from(i));
        // The body's lines after its opening line (the closing one included).
        let in_body = w.func.is_some() && !opened_now;
        let (line_has_memory, any_check) = if in_body && !plans.module.lines[i].generated && !held { plans.module.lines[i].memory() } else { (false, false) };
        if line_has_memory {
            if let Some(f) = w.func.as_mut() {
                f.nested = w.depth != 1 || opens + closes > 0;
                // The register types declared down to this line (read here, where they are
                // asked: the lines between are read on the way, in order, as each was before).
                f.regs.at(plans.module.lines, i);
            }
            self.access_line(plans, w, i, any_check)?;
        } else {
            if closes_body {
                if let Some(f) = w.func.as_mut() {
                    self.close_body(f, &plans.module.lines[i]);
                }
            } else if let Some(f) = w.func.as_mut().filter(|f| !f.block_checks.is_empty()) {
                // (With no check recorded, neither changes what the walk decides: `clear` would
                // only drop lists of keys already forgotten, and forgetting a key again, when its
                // register is redefined, removes nothing. So the line's window test, computed on
                // first use, is not asked of lines the walk passes with no check recorded.)
                if plans.module.lines[i].kills_checks() {
                    f.block_checks.clear();
                } else if !plans.module.lines[i].generated {
                    // (Loop versioning's lines write only gasan's own registers, which no
                    // recorded check names: their statements are not read.)
                    invalidate_defs(f, plans.module.lines[i].stmts());
                }
            }
            match plans.module.heap {
                // Heap calls and declarations are renamed (heap.rs): lines of an unfinished
                // statement are held until its end.
                Some(h) => {
                    let (sites, func, loc) = (&mut self.sites, &w.func, plans.module.locs[i]);
                    let text = h.line(&mut w.heap, plans.module.lines, i, || match func.as_ref() {
                        Some(f) => new_site(sites, f, line_no, loc, crate::abi::AccessKind::Free, 0),
                        None => u32::MAX,
                    });
                    self.out.push_str(&text);
                }
                None => self.out.push_str(line),
            }
            // The body's declarations, unless the body also closed on this line (`{ ret; }`:
            // nothing in it is checked, and a `.reg` after it would be at module scope).
            if opened_now && !closes_body && !self.opts.recover {
                self.out.push_str(&emit::function_decls());
            }
            if let (true, false, false, Some(b)) = (opened_now, closes_body, self.counting, w.func.as_ref().and_then(|f| f.bounds)) {
                b.entry_lookups(&mut self.out, self.opts.scale);
            }
        }

        // A tagged parameter read by the program is untagged right after (bounds.rs).
        if let Some(b) = w.func.as_ref().filter(|_| in_body && !self.counting).and_then(|f| f.bounds) {
            b.untag_after(&mut self.out, i);
        }
        w.depth += opens - closes;
        if w.depth < 0 {
            return Err(PtxError::Unbalanced(line_no));
        }
        if closes_body {
            if let Some(f) = w.func.take() {
                self.add_stats(f);
            }
        }
        Ok(())
    }

    /// Adds the counts of function `f` (its body closed) to the module's.
    fn add_stats(&mut self, f: FuncState) {
        if f.copy_stats != FunctionStats::default() {
            self.copy_stats.functions.entry(f.name.clone()).or_default().add(&f.copy_stats);
        }
        // (Its name moved into the map, not copied.)
        self.stats.functions.entry(f.name).or_default().add(&f.stats);
    }

    /// The prefetches planned before line `i`, and the branch of a batch whose first access it is.
    fn before_line(&mut self, plans: &Plans<'_, '_>, w: &mut Walk<'_>, i: usize) {
        let Some(f) = w.func.as_mut() else { return };
        // Nothing planned here and no batch's recheck waiting: nothing to write.
        if !plans.planned_before.get(i).copied().unwrap_or(true) && w.batch_recheck.is_empty() {
            return;
        }
        if let (Some(&first), false) = (plans.coalescing.runs.ends.get(&i), self.counting) {
            emit::run_branch(&mut self.out, &run_preds(first).0);
        }
        if let (Some(members), false) = (plans.coalescing.runs.loaded_ahead.get(&i), self.counting) {
            self.run_prefetch(plans, f, &mut w.tested_members, i, members);
        }
        // A next-iteration load needs its preheader's registers; if it cannot be emitted, the
        // access falls back to a full check (never a stale byte).
        let planned = plans.coalescing.prefetch.at.get(&i).map_or(&[][..], Vec::as_slice);
        // (Asked before every line: most have no prefetch, and build nothing.)
        let (here, fasts): (Vec<&prefetch::Prefetch>, Vec<Option<bounds::FastPath>>) = if planned.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            // The register types declared above this line (prefetch_text reads them).
            f.regs.at(plans.module.lines, i - 1);
            let here: Vec<&prefetch::Prefetch> = planned.iter().filter(|p| p.target != prefetch::Target::NextIteration || w.prefetched.contains(&p.access)).collect();
            let fasts = here.iter().map(|p| fast_path_of(f, plans.module.lines[p.access].first_stmt().and_then(ParsedStmt::checked_access), &mut self.prefetch_labels)).collect();
            (here, fasts)
        };
        // Batch members with fast paths here, two or more of one batch: their fast tests go
        // first and one branch skips all their shadow loads (emit::fast_group).
        let batch_of = |p: &prefetch::Prefetch| match p.target {
            prefetch::Target::Batch(first) => Some(first),
            _ => None,
        };
        let with_fast = |b: Option<usize>| here.iter().zip(&fasts).filter(|(p, fp)| fp.is_some() && batch_of(p) == b).count();
        let grouped = |k: usize| batch_of(here[k]).is_some() && fasts[k].is_some() && with_fast(batch_of(here[k])) >= 2;
        // (fast predicate, shadow part) per grouped member.
        let mut group: Vec<(String, String)> = Vec::new();
        let mut group_label = None;
        for (k, (p, fast)) in here.iter().zip(&fasts).enumerate() {
            let batch = batch_of(p).map(|first| (first, !w.batch_recheck.contains_key(&first)));
            let gf = grouped(k).then(|| lines::numbered("%gsf", p.access));
            match self.prefetch_text(plans.module.lines, p, f, batch, fast.as_ref(), gf.as_deref()) {
                Some((text, a)) => {
                    self.out.push_str(&text);
                    if let (Some(gf), Some((first, _)), Some(fp), access::Width::Fixed(wd), false) = (gf, batch, fast, &a.width, self.counting) {
                        let mut label = lines::numbered(fp.label.0, fp.label.1);
                        label.push_str("_g");
                        let part = emit::grouped_shadow_part(self.opts.form(), &a, &prefetch_reg(p.access), &batch_pred(first), *wd, &gf, &label);
                        group_label.get_or_insert_with(|| lines::numbered(&label, "a"));
                        group.push((gf, part));
                    }
                    w.prefetched.insert(p.access);
                    if let (Some((first, _)), access::Width::Fixed(wd)) = (batch, &a.width) {
                        // Its site, and its part of the batch's recheck.
                        let site = new_site(&mut self.sites, f, plans.ptx_line(p.access), p.loc, a.kind, *wd);
                        let recheck = w.batch_recheck.entry(first).or_default();
                        if !self.counting {
                            emit::batch_recheck(recheck, self.opts.form(), &a, *wd, site);
                        }
                        w.batched.insert(p.access);
                    }
                }
                None => {
                    w.prefetched.remove(&p.access);
                }
            }
        }
        if let (Some(label), false) = (group_label, self.counting) {
            emit::fast_group(&mut self.out, "\t", &group, &label);
        }
        if let Some(recheck) = w.batch_recheck.remove(&i) {
            // The block's one branch for all its batched checks, before its first access.
            let _ = writeln!(self.out, "\t@{} bra $gasan_batch_{i}; {MARKER}", batch_pred(i));
            let block = format!("$gasan_batch_{i}: {MARKER}\n{recheck}");
            if !self.opts.outside_checks {
                f.fail_blocks.push(format!("{block}\ttrap; {MARKER}\n"));
            } else if w.depth == 1 {
                let _ = writeln!(self.out, "{}{i}: {MARKER}", emit::BATCH_RESUME);
                f.fail_blocks.push(format!("{block}\tbra.uni {}{i}; {MARKER}\n", emit::BATCH_RESUME));
            } else {
                // Inside a block of the body: the recheck goes here (see FuncState::nested).
                let _ = writeln!(self.out, "\tbra.uni {}{i}; {MARKER}\n{block}{}{i}: {MARKER}", emit::BATCH_RESUME, emit::BATCH_RESUME);
            }
            f.uses_shared_fail = true;
        }
        for &j in plans.coalescing.prefetch.moves.get(&i).into_iter().flatten() {
            if w.prefetched.contains(&j) {
                emit::next_iteration_move(&mut self.out, &prefetch_reg(j), &next_iteration_reg(j));
            }
        }
    }

    /// The shadow bytes of the run of masked accesses whose first member is line `first`, loaded
    /// and tested before it (masked_runs.rs), when every member has a kernel-parameter fast path (one branch
    /// skips all the loads) or some member is an atomic (whose order would otherwise hold each
    /// later member's load back). Otherwise each member loads its own byte. The members' sites
    /// are made here, in member order (the test records the first bad one's), and kept in
    /// `tested` by member line.
    fn run_prefetch(&mut self, plans: &Plans<'_, '_>, f: &FuncState, tested: &mut LineMap<u32>, first: usize, members: &[usize]) {
        let lines = plans.module.lines;
        let mut found = Vec::with_capacity(members.len());
        for &m in members {
            let Some((ins, a)) = lines[m].first_stmt().and_then(ParsedStmt::checked) else { return };
            let access::Width::Fixed(width) = a.width else { return };
            found.push((ins, a, width, fast_path_at(f, a, 0)));
        }
        let all_fast = found.iter().all(|(.., fp)| fp.is_some());
        let any_atomic = found.iter().any(|(_, a, ..)| a.kind == crate::abi::AccessKind::Atomic);
        if !all_fast && !any_atomic {
            return;
        }
        // Members at one register plus constants, in one parameter's block: a span, where there
        // are two or more (one alone keeps its own test, under its guard).
        let mut groups: Vec<(emit::RunSpan<'_>, Vec<usize>)> = Vec::new();
        for (k, ((.., fp), m)) in found.iter().zip(members).enumerate() {
            let (Some(fp), Some((base, offset))) = (fp, plans.coalescing.runs.span_bases.get(m)) else { continue };
            match groups.iter_mut().find(|(s, _)| s.base == base && s.fast.lo == fp.lo && s.fast.hi == fp.hi) {
                Some((s, ks)) => {
                    (s.first, s.last) = (s.first.min(*offset), s.last.max(*offset));
                    ks.push(k);
                }
                None => groups.push((emit::RunSpan { base, first: *offset, last: *offset, fast: fp }, vec![k])),
            }
        }
        groups.retain(|(_, ks)| ks.len() >= 2);
        let mut span_of: Vec<Option<usize>> = vec![None; found.len()];
        for (j, (_, ks)) in groups.iter().enumerate() {
            for &k in ks {
                span_of[k] = Some(j);
            }
        }
        let spans: Vec<emit::RunSpan<'_>> = groups.into_iter().map(|(s, _)| s).collect();
        let mut regs: Vec<emit::RunPrefetch<'_>> = Vec::with_capacity(found.len());
        for (pos, ((ins, a, width, fp), &m)) in found.iter().zip(members).enumerate() {
            let (mask, bit) = run_mask_bit(first, pos);
            let site = new_site(&mut self.sites, f, plans.ptx_line(m), plans.module.locs[m], a.kind, *width);
            tested.insert(m, site);
            regs.push(emit::RunPrefetch { access: a, guard: ins.guard, width: *width, fast: fp.as_ref(), site, mask, bit, span: span_of[pos] });
        }
        let label = lines::numbered("$gasan_runp_", first);
        let (pred, ok) = run_preds(first);
        emit::run_prefetch(&mut self.out, self.opts.form(), leading_whitespace(lines[first].raw), &regs, &spans, &label, (&pred, &ok));
    }

    /// A body line holding a memory access: each statement with its shared/local check and its
    /// global check (or the line unchanged when nothing on it is checked).
    fn access_line(&mut self, plans: &Plans<'_, '_>, w: &mut Walk<'_>, i: usize, any_check: bool) -> Result<(), PtxError> {
        let Line { raw: line, .. } = plans.module.lines[i];
        let code = plans.module.lines[i].stripped();
        let (line_no, loc) = (plans.ptx_line(i), plans.module.locs[i]);
        let f = w.func.as_mut().expect("access lines are in a body");
        let indent = leading_whitespace(line);
        let trailing_comment = &line[code.len()..];
        // Each statement split once (Line::stmts), for its shared/local check and its global one.
        let stmts = plans.module.lines[i].stmts();
        // Shared/local checks (spaces.rs), by statement, and the shared/local accesses the
        // statements name (each statement's access decoded once, for both).
        let fn_spaces = f.spaces;
        let access_of = |st: &ParsedStmt<'_>| st.instr.as_ref().and_then(|ins| spaces::access_in(ins, fn_spaces));
        let mut found = 0u32;
        let space_checks: Vec<Option<String>> = if plans.module_spaces.is_empty() {
            // (Only the accesses whose opcode names the space can count: the others are not
            // decoded.)
            found = stmts.iter().filter(|st| st.instr.as_ref().is_some_and(spaces::may_name_space)).filter_map(access_of).filter(|a| a.named_space().is_some()).count() as u32;
            vec![None; stmts.len()]
        } else {
            let ptx_line = |l: usize| plans.ptx_line(l);
            let at = SpaceAt { key: (i, 0), line_no, loc, groups: &plans.space_groups, ptx_line: &ptx_line };
            let mut checks = Vec::with_capacity(stmts.len());
            for (j, st) in stmts.iter().enumerate() {
                let a = access_of(st);
                found += u32::from(a.as_ref().is_some_and(|a| a.named_space().is_some()));
                checks.push(self.space_check(&plans.module_spaces, f, st.instr.as_ref().zip(a), indent, SpaceAt { key: (i, j), ..at }));
            }
            checks
        };
        if found > 0 {
            let stats = if plans.module.copies.contains(&i) { &mut f.copy_stats } else { &mut f.stats };
            stats.space_found += found;
        }
        let verbatim = !any_check && space_checks.iter().all(Option::is_none);
        let coalescing = &plans.coalescing;
        // Some(true): its check was hoisted earlier; Some(false): covered by hoisted ones.
        let covered = coalescing.covered.contains(&i).then(|| coalescing.hoisted_lines.contains(&i));
        // Range groups hold one-statement lines only (coalesce.rs): each line's one statement.
        let hoisted: Vec<(Option<&ParsedStmt<'_>>, usize, Option<Loc>)> =
            coalescing.hoist.get(&i).map(|v| v.iter().map(|&(l, lc)| (plans.module.lines[l].first_stmt(), plans.ptx_line(l), lc)).collect()).unwrap_or_default();
        let prefetched = w.prefetched.contains(&i).then(|| prefetch_reg(i));
        // A member of a run tested before it (emit::run_prefetch): its verdict's mask bit.
        let run_bit = w.tested_members.get(&i).and_then(|&site| {
            let first = *coalescing.runs.members.get(&i)?;
            let pos = coalescing.runs.loaded_ahead.get(&first)?.binary_search(&i).ok()?;
            let (mask, bit) = run_mask_bit(first, pos);
            Some((mask, bit, site))
        });
        for (parsed, space_check) in stmts.iter().zip(space_checks) {
            let stmt = parsed.text;
            let mut text = String::with_capacity(stmt.len() + 1);
            text.push_str(stmt);
            if parsed.terminated {
                text.push(';');
            }
            if let (Some(c), false) = (space_check, verbatim) {
                self.out.push_str(&c);
            }
            let statement = Statement {
                parsed,
                text: &text,
                indent,
                line_no,
                loc,
                covered,
                hoisted: &hoisted,
                prefetched: prefetched.as_deref(),
                batched: w.batched.contains(&i),
                run: coalescing.runs.members.get(&i).map(|&first| (first, first == i)),
                run_bit: run_bit.as_ref().map(|(mask, bit, site)| (mask.as_str(), *bit, *site)),
                in_loop_copy: plans.module.copies.contains(&i),
                range_tested: plans.module.covered.contains(&i),
            };
            let emitted = self.rewrite_statement(f, &statement)?;
            if !verbatim {
                self.out.push_str(&emitted);
            }
        }
        if verbatim {
            // Nothing to check on this line (skipped or unknown accesses were counted).
            self.out.push_str(line);
        } else if !trailing_comment.trim().is_empty() {
            self.out.push_str(indent);
            self.out.push_str(trailing_comment.trim_end());
            self.out.push('\n');
        }
        Ok(())
    }

    /// Before a body's closing line: its out-of-line report blocks.
    fn close_body(&mut self, f: &mut FuncState, line: &Line<'_>) {
        if line.kills_checks() {
            f.block_checks.clear();
        } else {
            invalidate_defs(f, line.stmts());
        }
        if f.wgmma && !self.counting {
            let mut body = self.out.split_off(f.out_start);
            let (shared, space) = emit::reports_through_calls(&mut body, &mut f.fail_blocks);
            self.out.push_str(&body);
            f.uses_shared_fail &= shared;
            f.uses_space_fail &= space;
        }
        for b in f.fail_blocks.drain(..) {
            self.out.push_str(&b);
        }
        // Same text in every function (emit::fixed_text).
        let publish = emit::publish_for(&self.header);
        if f.uses_shared_fail {
            self.out.push_str(&emit::ReportBlock::Global.block(self.opts.form(), publish));
            f.uses_shared_fail = false;
        }
        if f.uses_space_fail {
            self.out.push_str(&emit::ReportBlock::Space.block(self.opts.form(), publish));
            f.uses_space_fail = false;
        }
    }

    /// The prefetch block of `p` (its recomputed address arithmetic, then the shadow load), or
    /// `None` when something in it is not understood (the access then gets a full check).
    fn prefetch_text(
        &self,
        lines: &[Line<'_>],
        p: &prefetch::Prefetch,
        f: &FuncState,
        batch: Option<(usize, bool)>,
        fast: Option<&bounds::FastPath>,
        group: Option<&str>,
    ) -> Option<(String, access::Access)> {
        // Prefetched accesses and their address arithmetic are one-statement lines (coalesce.rs,
        // prefetch.rs): each line's one statement.
        let mut a = lines[p.access].first_stmt()?.checked_access()?.clone();
        let indent = leading_whitespace(lines[p.access].raw);
        // Recompute chains into temporaries, in order, each reading the latest renamed inputs.
        let mut chain = Vec::new();
        let mut n = 0;
        let mut recompute = |lines_of: &[usize], renamed: &mut HashMap<String, String>| -> Option<()> {
            for &l in lines_of {
                let ins = lines[l].first_instr()?;
                let (dest, srcs) = ins.operands.split_first()?;
                let ty = f.regs.types().type_of(dest)?;
                let tmp = format!("%gst{}_{n}", p.access);
                n += 1;
                let srcs: Vec<&str> = srcs.iter().map(|s| renamed.get(*s).map_or(*s, String::as_str)).collect();
                chain.push((format!(".reg .{ty} {tmp};"), format!("{} {tmp}, {};", ins.opcode, srcs.join(", "))));
                renamed.insert(dest.to_string(), tmp);
            }
            Some(())
        };
        // Next iteration: loop-carried registers take their back-edge values, each computed on
        // its own (intermediate values of one must not leak into another).
        let mut renamed: HashMap<String, String> = HashMap::default();
        for (reg, value_chain) in &p.next_values {
            let mut own = HashMap::default();
            recompute(value_chain, &mut own)?;
            renamed.insert(reg.clone(), own.remove(reg)?);
        }
        recompute(&p.chain, &mut renamed)?;
        if let access::AddrBase::Reg(r) = &a.base {
            if let Some(t) = renamed.get(r.as_str()) {
                a.base = access::AddrBase::Reg(t.clone());
            }
        }
        let (cur, next) = (prefetch_reg(p.access), next_iteration_reg(p.access));
        let (declare, load_into): (Vec<&str>, &str) = match p.target {
            prefetch::Target::Plain | prefetch::Target::Batch(_) => (vec![&cur], &cur),
            prefetch::Target::Preheader => (vec![&cur, &next], &cur),
            prefetch::Target::NextIteration => (vec![], &next),
        };
        let pred = batch.map(|(first, _)| batch_pred(first));
        let batch = match (&pred, batch, &a.width) {
            (Some(pr), Some((_, is_first)), access::Width::Fixed(w)) => Some((pr.as_str(), is_first, *w)),
            (Some(_), _, _) => return None,
            _ => None,
        };
        if self.counting {
            return Some((String::new(), a));
        }
        // (The fast path's index test reads the index where the chain recomputed it.)
        let fast = fast.map(|fp| fp.renamed(&renamed));
        Some((emit::prefetch(self.opts.form(), &a, &chain, &declare, load_into, indent, batch, p.data && (fast.is_none() || p.data_on_fast_path), fast.as_ref(), group), a))
    }

    /// The shared/local check of one statement (spaces.rs), recording its site; `None` when it
    /// gets none.
    fn space_check(&mut self, m: &spaces::ModuleSpaces, f: &mut FuncState, access: Option<(&Instr<'_>, spaces::SpaceAccess)>, indent: &str, at: SpaceAt<'_>) -> Option<String> {
        let (ins, sa) = access?;
        let reg_bits = |r: &str| f.regs.types().type_of(r).and_then(type_bits);
        let c = spaces::plan_access(sa, ins, m, f.spaces, &reg_bits)?;
        let label = self.next_label;
        let (inline, stub) = match at.groups.get(&at.key) {
            Some(spaces::Role::Covered) => {
                f.stats.space_checked += 1;
                return None;
            }
            Some(spaces::Role::Available) => {
                f.stats.space_eliminated += 1;
                return None;
            }
            // Checked at its loop's entry (a fast copy's line): nothing to count, as for
            // range-tested global accesses.
            Some(spaces::Role::RangeTested) => return None,
            Some(spaces::Role::Leader(members)) => {
                let sites: Vec<u32> = members.iter().map(|mb| self.space_site(f, &mb.check, (at.ptx_line)(mb.key.0), mb.loc)).collect();
                if self.counting {
                    (String::new(), String::new())
                } else {
                    spaces::emit_group(members, &sites, indent, label)
                }
            }
            None => {
                let site = self.space_site(f, &c, at.line_no, at.loc);
                if self.counting {
                    (String::new(), String::new())
                } else {
                    spaces::emit_check(&c, ins.guard, indent, site, label, self.opts.recover)
                }
            }
        };
        self.next_label += 1;
        if !stub.is_empty() {
            f.fail_blocks.push(stub);
            f.uses_space_fail = true;
        }
        f.stats.space_checked += 1;
        Some(inline)
    }

    /// Records the site of a shared/local check; returns its id.
    fn space_site(&mut self, f: &FuncState, c: &spaces::SpaceCheck, line_no: usize, loc: Option<Loc>) -> u32 {
        let site = new_site(&mut self.sites, f, line_no, loc, c.kind, c.width);
        let demangled = match self.demangled_vars.get(&c.var) {
            // (A counting walk's sites are only counted.)
            _ if self.counting => String::new(),
            // A called function's check against its callers' top (frames.rs).
            _ if c.var == frames::TOP_PARAM => "the end of the callers' frames".to_string(),
            // A frameless kernel's check (spaces.rs).
            _ if c.var == spaces::NO_FRAME => "the frames of returned callees".to_string(),
            Some(d) => d.clone(),
            None => {
                // Only Itanium names: a plain `d` would demangle as the type `double`.
                let d = if c.var.starts_with("_Z") { sites::demangle(&c.var) } else { c.var.clone() };
                self.demangled_vars.insert(c.var.clone(), d.clone());
                d
            }
        };
        self.sites.get_mut(site).space = Some(SpaceSite { space: c.space, variable: c.var.clone(), variable_demangled: demangled, size: c.size });
        site
    }

    /// The text of one statement of an access line: the statement, preceded by its check and by
    /// the checks hoisted to it, as the plans decided.
    fn rewrite_statement(&mut self, f: &mut FuncState, s: &Statement<'_>) -> Result<String, PtxError> {
        // The function's own counts (in its state while it is walked), taken out for the
        // statement and put back.
        fn slot<'f>(f: &'f mut FuncState<'_>, copy: bool) -> &'f mut FunctionStats {
            if copy {
                &mut f.copy_stats
            } else {
                &mut f.stats
            }
        }
        let mut fstats = std::mem::take(slot(f, s.in_loop_copy));
        let r = self.rewrite_statement_counted(f, s, &mut fstats);
        *slot(f, s.in_loop_copy) = fstats;
        r
    }

    fn rewrite_statement_counted(&mut self, f: &mut FuncState, s: &Statement<'_>, fstats: &mut FunctionStats) -> Result<String, PtxError> {
        let Statement { parsed, text, indent, line_no, loc, covered, hoisted, prefetched, batched, run, run_bit, in_loop_copy, range_tested } = *s;
        let stmt = parsed.text;
        let (opts, counting) = (self.opts, self.counting);
        let (sites, next_label) = (&mut self.sites, &mut self.next_label);
        let stats = if in_loop_copy { &mut self.copy_stats } else { &mut self.stats };
        let (Some(ins), Some(class)) = (parsed.instr.as_ref(), parsed.class()) else {
            // A scope brace or a declaration on an access line (one-line inline asm): registers
            // declared in the scope may shadow checked ones, so no earlier check carries over.
            if stmt.starts_with(['{', '}', '.']) {
                f.block_checks.clear();
            }
            return Ok(indented(indent, text));
        };
        let access = match class {
            Classified::NotMemory => {
                if kills_checks(stmt) {
                    f.block_checks.clear();
                } else {
                    invalidate_defs(f, std::slice::from_ref(parsed));
                }
                return Ok(indented(indent, text));
            }
            Classified::Skip(reason) => {
                let key = reason.name();
                match fstats.skipped.get_mut(key) {
                    Some(n) => *n += 1,
                    None => {
                        fstats.skipped.insert(key.to_string(), 1);
                    }
                }
                invalidate_defs(f, std::slice::from_ref(parsed));
                return Ok(indented(indent, text));
            }
            Classified::Unknown(op) => {
                fstats.unknown += 1;
                match stats.unknown_opcodes.get_mut(op) {
                    Some(n) => *n += 1,
                    None => {
                        stats.unknown_opcodes.insert(op.clone(), 1);
                    }
                }
                f.block_checks.clear();
                return Ok(indented(indent, text));
            }
            Classified::Check(a) => a,
        };
        fstats.found += 1;
        if let access::AddrBase::Reg(r) = &access.base {
            if let Some(ty) = f.regs.types().type_of(r) {
                if type_bits(ty) != Some(64) {
                    return Err(PtxError::AddressRegister { reg: excerpt(r), line: line_no });
                }
            }
        }

        // Check elimination: an identical earlier check in this basic block dominates this one.
        let key = emit::check_key(ins, access);
        let width_now = match &access.width {
            access::Width::Fixed(w) => Some(*w),
            access::Width::Reg(_) | access::Width::Tile { .. } => None,
        };
        if let Some(own_check_hoisted) = covered {
            // Checked at the first access of its range group (coalesce.rs), or at its loop's entry
            // (range-tested: nothing to count).
            if !range_tested {
                if own_check_hoisted {
                    fstats.checked += 1;
                } else {
                    fstats.eliminated += 1;
                }
            }
            invalidate_defs(f, std::slice::from_ref(parsed));
            return Ok(indented(indent, text));
        }
        // Checks of later accesses of this one's range group, hoisted here (coalesce.rs).
        let mut prefix = String::new();
        for &(h_stmt, h_line, h_loc) in hoisted {
            let Some((h_ins, h_acc)) = h_stmt.and_then(ParsedStmt::checked) else { continue };
            let w = match h_acc.width {
                access::Width::Fixed(w) => w,
                access::Width::Reg(_) | access::Width::Tile { .. } => continue,
            };
            let h_site = new_site(sites, f, h_line, h_loc, h_acc.kind, w);
            let label = *next_label;
            *next_label += 1;
            if counting {
                continue;
            }
            // No statement of its own: the access it stands for comes later.
            let fast = fast_path_at(f, h_acc, label);
            let (inline, fail) = emit::checked_statement_halt(halt_form(&opts, f), h_ins, h_acc, "", indent, h_site, label, None, fast.as_ref(), f.nested);
            f.uses_shared_fail = true;
            f.fail_blocks.push(fail);
            prefix.push_str(&inline);
        }
        if let (Some((first, is_first)), Some(w)) = (run, width_now) {
            debug_assert!(hoisted.is_empty(), "a run holds no coalescing point (masked_runs.rs)");
            // Checked without a branch, the access under its guard and its verdict; the run's
            // branch follows its last member (masked_runs.rs).
            // (A member tested before its run has its site from there, in the same order.)
            let site_id = match run_bit {
                Some((.., site)) => site,
                None => new_site(sites, f, line_no, loc, access.kind, w),
            };
            fstats.checked += 1;
            if !counting {
                let unguarded = text.trim_start().strip_prefix('@').and_then(|g| g.split_once(char::is_whitespace)).map_or(text, |(_, rest)| rest.trim_start());
                let (pred, ok) = run_preds(first);
                let member = match run_bit {
                    Some((mask, bit, _)) => emit::run_member_tested(ins.guard, unguarded, indent, &ok, mask, bit),
                    None => emit::run_member(opts.form(), ins, access, unguarded, indent, site_id, w, (&pred, &ok), is_first),
                };
                prefix.push_str(&member);
            }
            f.uses_shared_fail = true;
            if let Some(k) = key {
                f.block_checks.record(k, w);
            }
            invalidate_defs(f, std::slice::from_ref(parsed));
            return Ok(prefix);
        }
        if batched {
            // Checked at its block's batch point (its site was recorded there).
            fstats.checked += 1;
            if let (Some(k), Some(w)) = (key, width_now) {
                f.block_checks.record(k, w);
            }
            invalidate_defs(f, std::slice::from_ref(parsed));
            push_indented(&mut prefix, indent, text);
            return Ok(prefix);
        }
        if opts.optimize {
            if let (Some(k), Some(w)) = (&key, width_now) {
                if f.block_checks.covers(k, w) {
                    fstats.eliminated += 1;
                    invalidate_defs(f, std::slice::from_ref(parsed));
                    push_indented(&mut prefix, indent, text);
                    return Ok(prefix);
                }
            }
        }

        let site_id = new_site(sites, f, line_no, loc, access.kind, width_now.unwrap_or(0));
        fstats.checked += 1;
        let label = *next_label;
        *next_label += 1;
        let dest_types: Vec<Option<String>> = access.dests.iter().map(|d| f.regs.types().type_of(d).map(String::from)).collect();
        // (A prefetched shadow byte took its fast path where it was loaded.)
        let fast = if prefetched.is_some() { None } else { fast_path_at(f, access, label) };
        let emitted = if counting {
            String::new()
        } else if opts.recover {
            emit::checked_statement(opts.form(), ins, access, &dest_types, text, indent, site_id, label, fast.as_ref())
        } else {
            let (inline, fail) = emit::checked_statement_halt(halt_form(&opts, f), ins, access, text, indent, site_id, label, prefetched, fast.as_ref(), f.nested);
            f.uses_shared_fail = true;
            f.fail_blocks.push(fail);
            inline
        };
        if let (Some(k), Some(w)) = (key, width_now) {
            f.block_checks.record(k, w);
        }
        // Atomics order memory like fences: later checks must be redone.
        if access.kind == crate::abi::AccessKind::Atomic {
            f.block_checks.clear();
        } else {
            invalidate_defs(f, std::slice::from_ref(parsed));
        }
        prefix.push_str(&emitted);
        Ok(prefix)
    }
}

/// What the planning passes decided for (a part of) a module ([`Module::plan`]), with the module
/// they planned over, read by the walk that writes them out.
struct Plans<'p, 'l> {
    module: &'p Module<'p, 'l>,
    coalescing: coalesce::Plan,
    module_spaces: spaces::ModuleSpaces,
    space_groups: HashMap<(usize, usize), spaces::Role>,
    /// Each kernel's looked-up pointer parameters ([`bounds`]), by its body's opening line.
    bounds: LineMap<Option<bounds::ParamBounds>>,
    /// The provenance of a function `module_spaces` has none for.
    no_spaces: spaces::FnSpaces,
    /// By line: the coalescing plan places something before it (a run's branch or loads, a
    /// prefetch, a next-iteration move): what [`Rewriter::before_line`] looks up (most lines have
    /// nothing, and it asks every line).
    planned_before: Vec<bool>,
}

/// What every part of a module's rewrite reads: its lines after loop versioning and what was found
/// about them before planning.
struct Module<'p, 'l> {
    lines: &'p [Line<'l>],
    bodies: &'p bodies::Bodies,
    branches: &'p branches::Branches<'l>,
    /// Accesses covered by a loop's range test, lines of fast loop copies ([`loops::Versioned`];
    /// the lines it wrote are `Line::generated`).
    covered: &'p LineSet,
    copies: &'p LineSet,
    /// Lines of fast loop copies whose shared-memory check the loop's range test covers.
    space_covered: &'p LineSet,
    origin: Option<&'p [usize]>,
    base_line: usize,
    /// Where the text's lines were in the input ([`labels::LabelLines`]).
    label_lines: Option<&'p labels::LabelLines>,
    locs: &'p [Option<Loc>],
    versioned_loop: &'p [bool],
    /// The renaming of the driver's heap functions (heap.rs), when the module declares one.
    heap: Option<&'p heap::HeapPlan>,
    /// Halt mode in a module that uses `wgmma` ([`Rewriter::wgmma`]): no batches, whose recheck
    /// blocks are reached by a branch that never comes back.
    wgmma: bool,
}

impl<'l> Module<'_, 'l> {
    /// The plan phase (passes 8 to 11 of the pipeline, the module doc's list) of the lines of
    /// `range`, the whole module or a part of it beginning and ending outside bodies (`bodies`:
    /// its bodies), from the module's shared/local declarations `declared`: every analysis the
    /// walk's text is decided by, made before any of it is written.
    fn plan<'q>(
        &'q self,
        range: std::ops::Range<usize>,
        bodies: &bodies::Bodies,
        declared: spaces::ModuleSpaces,
        opts: &InstrumentOptions,
        top_params: &rustc_hash::FxHashSet<String>,
    ) -> Plans<'q, 'l> {
        let planned = opts.optimize && !opts.recover;
        // Each body's register definitions, built on first use and read by planning only: dropped
        // when it ends, before the walk writes the text.
        let defs = defs::ModuleDefs::new(self.lines, bodies);
        // 8. Coalescing and prefetching of the global checks of each block (halt mode, optimized).
        let coalescing = if planned { coalesce::plan_range(self.lines, range, &defs, self.branches, self.covered, self.locs, !opts.outside_checks, !self.wgmma) } else { coalesce::Plan::default() };
        // 9. Shared/local provenance of each function's registers.
        let mut module_spaces = declared;
        module_spaces.top_params.clone_from(top_params);
        spaces::analyze_functions(self.lines, bodies, &defs, &mut module_spaces);
        // 10. Shared/local checks grouped or proven needless.
        // (Not through sums in a `wgmma` kernel's loops: there a group's stub, whose jumps never
        // come back, made ptxas serialize attention's `wgmma` (C7518), and one that comes back,
        // through a call, cost the unhinted matmul's fast loop 1,197 → 1,748 SASS instructions.)
        let sums_at = |i: usize| !(self.wgmma && self.branches.in_loop(i));
        let space_groups = if planned { spaces::group_accesses(self.lines, bodies, &defs, &module_spaces, self.space_covered, self.locs, &sums_at) } else { HashMap::default() };
        // 11. Each kernel's pointer parameters looked up at its entry.
        let bounds = match opts.param_bounds {
            true => bodies
                .iter()
                .map(|b| (b.open, bounds::ParamBounds::analyze(self.lines, b, defs.of(b), |l| self.versioned_loop.get(l).copied().unwrap_or(false), |r| self.branches.any_in_loop(r))))
                .collect(),
            false => LineMap::default(),
        };
        let mut planned_before = vec![false; self.lines.len()];
        for &i in coalescing.runs.ends.keys().chain(coalescing.runs.loaded_ahead.keys()).chain(coalescing.prefetch.at.keys()).chain(coalescing.prefetch.moves.keys()) {
            if let Some(p) = planned_before.get_mut(i) {
                *p = true;
            }
        }
        Plans { module: self, coalescing, module_spaces, space_groups, bounds, no_spaces: spaces::FnSpaces::default(), planned_before }
    }
}

/// Label and site numbers: where a part's walk starts them, or how many it used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Numbering {
    labels: u32,
    prefetch_labels: u32,
    sites: u32,
}

/// The numbers each part of a module's rewrite used ([`Rewriter::run_parts`]), published by its
/// thread once known (`None` in a slot: that part's walk failed).
struct Numbers {
    used: std::sync::Mutex<Vec<Option<Option<Numbering>>>>,
    published: std::sync::Condvar,
}

impl Numbers {
    fn new(parts: usize) -> Self {
        Numbers { used: std::sync::Mutex::new(vec![None; parts]), published: std::sync::Condvar::new() }
    }

    /// Where part `k`'s numbers start, from what the parts before it published: `None` while some
    /// has not, `Some(None)` when one failed.
    fn start_in(used: &[Option<Option<Numbering>>], k: usize) -> Option<Option<Numbering>> {
        let mut start = Numbering::default();
        for u in &used[..k] {
            match (*u)? {
                Some(n) => start = Numbering { labels: start.labels + n.labels, prefetch_labels: start.prefetch_labels + n.prefetch_labels, sites: start.sites + n.sites },
                None => return Some(None),
            }
        }
        Some(Some(start))
    }

    fn start(&self, k: usize) -> Option<Option<Numbering>> {
        Self::start_in(&self.used.lock().expect("no part panicked"), k)
    }

    /// [`Numbers::start`], waiting for the parts before `k` to publish; `None` when one failed.
    fn wait_start(&self, k: usize) -> Option<Numbering> {
        let mut used = self.used.lock().expect("no part panicked");
        loop {
            if let Some(start) = Self::start_in(&used, k) {
                return start;
            }
            used = self.published.wait(used).expect("no part panicked");
        }
    }

    fn publish(&self, k: usize, n: Option<Numbering>) {
        self.used.lock().expect("no part panicked")[k] = Some(n);
        self.published.notify_all();
    }
}

/// What the walk of a part of a module wrote and counted.
struct Walked {
    out: String,
    sites: SiteTable,
    stats: Stats,
    param_tags: crate::abi::ParamTagTable,
    used: Numbering,
}

/// Smallest module (bytes of PTX) rewritten in parts on several threads when the thread count is
/// left to the rewriter. (A part walked twice costs its walk again, about half its rewrite: a
/// module should be large enough for the threads to win that back even on a busy machine.)
pub const PARALLEL_MIN_BYTES: usize = 64 * 1024;

/// Least text of a part when the rewriter chooses the number of parts (a thread's start and the
/// stitching cost a few tens of microseconds; a part this large takes about a millisecond).
pub const PART_MIN_BYTES: usize = 16 * 1024;

/// The threads a module's rewrite (of `bytes` bytes of text) may be split over ([`parts`]; 1 when
/// it will not be split): when more than one, its module-wide scans run side by side.
fn read_threads(bytes: usize, threads: usize) -> usize {
    match threads {
        0 if bytes >= PARALLEL_MIN_BYTES => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get).min(bytes / PART_MIN_BYTES),
        0 => 1,
        n => n.min(bytes / 4096).max(1),
    }
}

/// Drops the lines in `n` pieces on as many threads: what each line owns (its parsed statements
/// and their accesses) is taken out and dropped in place, a chunk a thread, and the emptied vector
/// is freed here. (Splitting the vector off in pieces instead copied all but the first piece, on
/// this thread, before any was dropped.)
fn drop_in_parts(mut lines: Vec<Line<'_>>, n: usize) {
    let piece = lines.len().div_ceil(n.max(1)).max(1);
    std::thread::scope(|s| {
        let mut chunks = lines.chunks_mut(piece);
        let first = chunks.next();
        for chunk in chunks {
            s.spawn(move || chunk.iter_mut().for_each(|l| l.drop_parse()));
        }
        first.into_iter().flatten().for_each(|l| l.drop_parse());
    });
    drop(lines);
}

/// The line ranges a module's rewrite is split into: `threads` parts at most (0: for modules of
/// [`PARALLEL_MIN_BYTES`] or more, as many as the machine has cores, each of at least
/// [`PART_MIN_BYTES`]), each beginning at a body's opening line (the first at line 0), holding
/// about as many lines. None: no split.
fn parts(bodies: &bodies::Bodies, lines: usize, bytes: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let want = match threads {
        0 => {
            if bytes < PARALLEL_MIN_BYTES {
                return Vec::new();
            }
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            cores.min(bytes / PART_MIN_BYTES)
        }
        n => n,
    };
    let n = want.min(bodies.len());
    if n < 2 || bodies.iter().any(|b| b.close == usize::MAX) {
        return Vec::new();
    }
    // A function defined twice keeps one set of facts by name in the whole-module plans.
    let mut names = std::collections::HashSet::with_capacity(bodies.len());
    if !bodies.iter().all(|b| names.insert(b.name.as_str())) {
        return Vec::new();
    }
    let mut starts = vec![0];
    for k in 1..bodies.len() {
        let at = bodies.nth(k).open;
        // The k-th part starts at the first body opening past k/n of the lines.
        if at * n >= lines * starts.len() && starts.len() < n {
            starts.push(at);
        }
    }
    starts.push(lines);
    starts.windows(2).map(|w| w[0]..w[1]).collect()
}

impl Plans<'_, '_> {
    /// The PTX line (of the input: sites and errors name it) of line `i`.
    fn ptx_line(&self, i: usize) -> usize {
        let line = self.module.base_line + self.module.origin.map_or(i, |o| o[i]);
        self.module.label_lines.map_or(line, |l| l.input_line(line)) + 1
    }
}

/// The walk's state between lines.
#[derive(Default)]
struct Walk<'p> {
    /// The function whose body the walk is in.
    func: Option<FuncState<'p>>,
    /// Brace depth.
    depth: i32,
    in_block_comment: bool,
    /// Where the walk is in the module's heap plan (heap.rs).
    heap: heap::HeapWalk,
    /// Access lines whose shadow byte was prefetched into `%gsv<line>`.
    prefetched: LineSet,
    /// Batched access lines (checked at their block's batch point), and the rechecks of the
    /// batches not yet branched on, by batch point.
    batched: LineSet,
    batch_recheck: LineMap<String>,
    /// The members of the runs of masked accesses tested before the run (emit::run_prefetch),
    /// and the sites made there.
    tested_members: LineMap<u32>,
}

/// One statement of an access line and what the plans decided for it.
#[derive(Clone, Copy)]
struct Statement<'s> {
    /// The statement without its `;`, split into its parts and classified, and its text with its
    /// `;`.
    parsed: &'s ParsedStmt<'s>,
    text: &'s str,
    indent: &'s str,
    /// Its PTX line (of the input) and source location.
    line_no: usize,
    loc: Option<Loc>,
    /// `Some(true)`: its check was hoisted to an earlier access of its range group (coalesce.rs);
    /// `Some(false)`: covered by such hoisted checks.
    covered: Option<bool>,
    /// Checks of later accesses of its range group, hoisted to it: (statement, PTX line, location).
    hoisted: &'s [(Option<&'s ParsedStmt<'s>>, usize, Option<Loc>)],
    /// The register its shadow byte was prefetched into.
    prefetched: Option<&'s str>,
    /// Checked at its block's batch point (its site was recorded there).
    batched: bool,
    /// A member of a run of masked accesses checked without branches (masked_runs.rs): the
    /// run's first line, and whether it is this one.
    run: Option<(usize, bool)>,
    /// A run member whose verdict was tested before its run: its mask register and bit, and the
    /// site made there.
    run_bit: Option<(&'s str, u32, u32)>,
    /// A statement of a fast loop copy (loops.rs), counted apart from the module's statistics.
    in_loop_copy: bool,
    /// An access of a fast loop copy that its loop's range test covers: no check, no count.
    range_tested: bool,
}

/// Where a statement's shared/local check goes: its (line, statement) key into the module's
/// groups (spaces.rs), its own PTX line and source location, and the PTX line of any line index.
#[derive(Clone, Copy)]
struct SpaceAt<'g> {
    key: (usize, usize),
    line_no: usize,
    loc: Option<Loc>,
    groups: &'g HashMap<(usize, usize), spaces::Role>,
    ptx_line: &'g dyn Fn(usize) -> usize,
}

/// Halt mode's check form in function `f`: its branches to reports come after its fast paths
/// join where it waits for `wgmma` groups ([`emit::Form::fails_after_joins`]).
fn halt_form(opts: &InstrumentOptions, f: &FuncState) -> emit::Form {
    emit::Form { fails_after_joins: f.wgmma, ..opts.form() }
}

/// The kernel-parameter fast path ([`bounds`]) of a check of `a` whose label number is `label`.
fn fast_path_at(f: &FuncState, a: &access::Access, label: u32) -> Option<bounds::FastPath> {
    f.bounds?.fast_path(a, lines::Numbered("$gasan_inb_", label))
}

/// [`fast_path_at`] for a check without a label of its own (a prefetch): numbered apart.
fn fast_path_of(f: &FuncState, a: Option<&access::Access>, next_label: &mut u32) -> Option<bounds::FastPath> {
    let fp = f.bounds?.fast_path(a?, lines::Numbered("$gasan_inb_p", *next_label))?;
    *next_label += 1;
    Some(fp)
}

/// The register holding the prefetched shadow byte of the access at body line `line`.
fn prefetch_reg(line: usize) -> String {
    lines::numbered("%gsv", line)
}

/// The mask register and bit of the verdict of member `pos` of the run whose first member is body
/// line `first`, when its bytes are tested before it ([`emit::run_prefetch`]).
fn run_mask_bit(first: usize, pos: usize) -> (String, u32) {
    (format!("%gsm{first}_{}", pos / 32), (pos % 32) as u32)
}

/// The predicates of the run of masked accesses whose first member is body line `line`: some
/// member was bad, and the current member's access may run.
fn run_preds(line: usize) -> (String, String) {
    (lines::numbered("%gsk", line), lines::numbered("%gsg", line))
}

/// The predicate collecting the batched checks whose batch point is body line `line`.
fn batch_pred(line: usize) -> String {
    lines::numbered("%gsb", line)
}

/// The register a pipelined loop loads the next iteration's shadow byte into.
fn next_iteration_reg(line: usize) -> String {
    lines::numbered("%gsn", line)
}

/// Records the site of an access of the current function; returns its id.
fn new_site(sites: &mut Sites, f: &FuncState, line_no: usize, loc: Option<(u32, u32, u32)>, kind: crate::abi::AccessKind, width: u32) -> u32 {
    sites.push(Site {
        id: 0,
        kernel: f.name.clone(),
        kernel_demangled: f.demangled.get_or_init(|| sites::demangle(&f.name)).clone(),
        ptx_line: line_no as u32,
        loc: loc.map(|(file, line, col)| SourceLoc { file_index: file, file: String::new(), line, col }),
        kind,
        width,
        space: None,
    })
}

/// The sites a walk records. A chunk of a module's bodies walked on its own ([`Rewriter::run_chunks`])
/// numbers its sites from `base`, the sites of the bodies before it.
#[derive(Default)]
struct Sites {
    table: SiteTable,
    base: u32,
}

impl Sites {
    /// Records a site; returns its id.
    fn push(&mut self, site: Site) -> u32 {
        let id = self.base + self.table.push(site);
        if let Some(s) = self.table.sites.last_mut() {
            s.id = id;
        }
        id
    }

    fn get_mut(&mut self, id: u32) -> &mut Site {
        &mut self.table.sites[(id - self.base) as usize]
    }
}

/// Forgets checks whose address register the writes of `stmts` redefine. (Loops over the
/// statements and their destinations, not [`Line::dests`]' flat map, whose state was copied at
/// each step: a tenth of a percent of the walk of the 2.71 MB module.)
fn invalidate_defs(f: &mut FuncState, stmts: &[ParsedStmt<'_>]) {
    if f.block_checks.is_empty() {
        return;
    }
    for ins in stmts.iter().filter_map(|s| s.instr.as_ref()) {
        for d in ins.dests() {
            f.block_checks.forget_register(d);
        }
    }
}

/// The checks already emitted in the current basic block (elimination keys of
/// [`emit::check_key`] → widest width), indexed by the registers each key names (address and
/// guard), so that a statement redefining a register forgets its keys without looking at the
/// others: a block of n checks costs O(n), not O(n²) (each of its loads defines a register).
#[derive(Default)]
struct BlockChecks {
    widths: HashMap<String, u32>,
    /// Register → keys naming it. A key may still be listed after it was forgotten through its
    /// other register (or listed twice after being recorded again): forgetting it once more is
    /// right, as it names this register too, and the lists only grow with recorded checks.
    by_register: HashMap<String, Vec<String>>,
}

impl BlockChecks {
    fn is_empty(&self) -> bool {
        self.widths.is_empty()
    }

    /// Forgets every check (the block ended). A no-op when there is none: blocks end on most
    /// lines, and clearing a map costs its capacity.
    fn clear(&mut self) {
        if !self.widths.is_empty() || !self.by_register.is_empty() {
            self.widths.clear();
            self.by_register.clear();
            release_excess(&mut self.widths);
            release_excess(&mut self.by_register);
        }
    }

    /// Is an access of `width` bytes under `key` covered by an earlier check?
    fn covers(&self, key: &str, width: u32) -> bool {
        self.widths.get(key).is_some_and(|&prev| prev >= width)
    }

    fn record(&mut self, key: String, width: u32) {
        match self.widths.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let w = e.get_mut();
                *w = (*w).max(width);
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                for reg in emit::key_registers(e.key()) {
                    // (A register's name copied only the first time it is listed.)
                    match self.by_register.get_mut(reg) {
                        Some(keys) => keys.push(e.key().clone()),
                        None => {
                            self.by_register.insert(reg.to_string(), vec![e.key().clone()]);
                        }
                    }
                }
                e.insert(width);
            }
        }
    }

    /// Forgets the checks whose key names `reg` (it was redefined).
    fn forget_register(&mut self, reg: &str) {
        if let Some(keys) = self.by_register.remove(reg) {
            for k in keys {
                self.widths.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod loc_tests {
    use super::LocChain;
    use proptest::prelude::*;

    proptest! {
        /// A `.loc`'s numbers read byte by byte are those the `char` split and `str::parse` read.
        #[test]
        fn loc_numbers_are_the_char_splits(text in "[0-9+\\-, \t\x0b\u{a0}a_]{0,24}|( ?[0-9]{1,11},?){0,4}") {
            let mut nums = text.split(|c: char| c == ',' || c.is_whitespace()).filter_map(|s| s.parse().ok());
            let by_chars = (|| Some((nums.next()?, nums.next()?, nums.next()?)))();
            prop_assert_eq!(super::loc_numbers(&text), by_chars);
        }
    }

    /// nvcc's chain for `__pipeline_memcpy_async` called on line 11 of file 1: every level, and
    /// the code after it, is placed on the program's own line until the next plain `.loc`.
    #[test]
    fn inlined_locations_resolve_to_the_outermost_call_site() {
        let mut c = LocChain::default();
        let f = memchr::memmem::Finder::new(LocChain::INLINED_AT);
        assert_eq!(c.resolve(" 1 11 5", &f), Some((1, 11, 5)));
        assert_eq!(c.resolve("\t2 69 9, function_name $L__info_string0, inlined_at 1 11 5", &f), Some((1, 11, 5)));
        assert_eq!(c.resolve("\t3 292 5, function_name $L__info_string1, inlined_at 2 69 9", &f), Some((1, 11, 5)));
        assert_eq!(c.resolve("\t3 219 9, function_name $L__info_string2, inlined_at 3 292 5", &f), Some((1, 11, 5)));
        // A second call of the same helper from another line.
        assert_eq!(c.resolve(" 1 20 3", &f), Some((1, 20, 3)));
        assert_eq!(c.resolve(" 2 69 9, function_name $L__info_string0, inlined_at 1 20 3", &f), Some((1, 20, 3)));
        assert_eq!(c.resolve(" 3 292 5, function_name $L__info_string1, inlined_at 2 69 9", &f), Some((1, 20, 3)));
        // A call site never seen is taken as it is; malformed operands give nothing.
        assert_eq!(c.resolve(" 4 7 1, function_name $x, inlined_at 5 8 2", &f), Some((5, 8, 2)));
        assert_eq!(c.resolve(" 4 7", &f), None);
        assert_eq!(c.resolve(" 4 7 1, inlined_at 5", &f), None);
    }
}

#[cfg(test)]
mod reserved_tests {
    use proptest::prelude::*;

    proptest! {
        /// Told whether the text holds `__gasan_`, the search for reserved names finds what it
        /// finds searching for it.
        #[test]
        fn reserved_names_are_found_told_of_gasans_prefix(text in "(__gasan_|%gs|[ a-z_%\\n/]){0,16}") {
            let holds = text.contains(super::RESERVED_PREFIXES[0]);
            prop_assert_eq!(super::reserved_name(&text, holds), super::reserved_name(&text, true));
        }
    }
}
