//! ASan-style reports (text and JSON), with GPU coordinates.

use crate::allocator::{AddrDescription, AddrKind, AllocInfo, FreeError, HostStack};
use crate::faults::FatalFault;
use crate::options::{Options, ReportFormat};
use gasan_instrument::abi::{free_error, AccessKind, ErrorRecord, MemorySpace};
use gasan_instrument::ptx::{Site, SiteTable, SpaceSite};
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;

/// One error to report.
#[derive(Clone, Debug)]
pub enum Report {
    /// A checked kernel access that failed (from the error ring).
    Device {
        record: ErrorRecord,
        site: Option<Site>,
        desc: AddrDescription,
        device: i32,
    },
    /// A host API call (memcpy/memset) whose range is bad.
    Api {
        call: String,
        addr: u64,
        len: u64,
        write: bool,
        desc: AddrDescription,
        stack: HostStack,
    },
    /// A bad `cuMemFree*`.
    Free {
        call: String,
        err: FreeError,
        stack: HostStack,
    },
    /// A kernel died with a device fault that no check reported (uninstrumented code), with the
    /// faulting address from nvidia-uvm's tools queue when it could be read.
    Fault {
        cuda_error: i32,
        call: String,
        stack: HostStack,
        fault: Option<(FatalFault, AddrDescription)>,
    },
    /// A kernel stopped at a failed check whose error record never reached the host: `claimed`
    /// ring slots were taken and not one finished (the writer was stopped while writing it).
    Unfinished {
        cuda_error: i32,
        call: String,
        stack: HostStack,
        claimed: u64,
    },
    Leaks(Vec<AllocInfo>),
}

impl Report {
    /// ASan bug-type name.
    pub fn kind(&self) -> &'static str {
        match self {
            Report::Device { record, .. } if record.kind == AccessKind::Free as u8 => {
                if record.shadow == free_error::DOUBLE_FREE {
                    "double-free"
                } else {
                    "bad-free"
                }
            }
            Report::Device { site: Some(Site { space: Some(sp), .. }), .. } => space_kind(sp.space),
            Report::Device { desc, .. } | Report::Api { desc, .. } => desc_kind(desc),
            Report::Free { err, .. } => match err {
                FreeError::DoubleFree { .. } => "double-free",
                FreeError::NotBase { .. } | FreeError::Unknown { .. } => "bad-free",
                FreeError::WrongCall { .. } => "alloc-dealloc-mismatch",
            },
            // The allocator knows what the faulting address was: name the bug as for checked accesses.
            Report::Fault { fault: Some((_, desc)), .. } if matches!(desc.kind, AddrKind::OverflowLeft { .. } | AddrKind::OverflowRight { .. } | AddrKind::UseAfterFree { .. }) => desc_kind(desc),
            Report::Fault { .. } => "gpu-fault-in-uninstrumented-code",
            // A check failed, and what it found is not known: ASan's name for a bad access of
            // unknown kind.
            Report::Unfinished { .. } => "unknown-crash",
            Report::Leaks(_) => "detected-memory-leaks",
        }
    }
}

/// ASan's names where it has one (stack-*), else the same shape for shared memory.
fn space_kind(space: MemorySpace) -> &'static str {
    match space {
        MemorySpace::Shared => "shared-buffer-overflow",
        MemorySpace::Local => "stack-buffer-overflow",
        MemorySpace::LocalOutOfScope => "stack-use-after-scope",
        MemorySpace::LocalPastTop => "stack-buffer-overflow",
        MemorySpace::LocalDeadFrame => "stack-use-after-scope",
        MemorySpace::Global => "unknown-crash",
    }
}

/// The space's name in reports.
fn space_name(space: MemorySpace) -> &'static str {
    match space {
        MemorySpace::Global => "global",
        MemorySpace::Shared => "shared",
        MemorySpace::Local | MemorySpace::LocalOutOfScope | MemorySpace::LocalPastTop | MemorySpace::LocalDeadFrame => "local",
    }
}

/// Where a shared/local access fell, from the offset the check recorded (`record.addr`, two's
/// complement, relative to the variable or frame).
fn space_location(sp: &SpaceSite, record: &ErrorRecord, kernel: &str) -> String {
    let offset = record.addr as i64;
    let what = match sp.space {
        MemorySpace::Shared if sp.size.is_none() => format!("dynamic shared memory '{}' (the launch's sharedMemBytes)", sp.variable_demangled),
        MemorySpace::Shared => format!("{}-byte shared variable '{}'", sp.size.unwrap_or(0), sp.variable_demangled),
        MemorySpace::Local => format!("{}-byte local frame {} of {kernel}", sp.size.unwrap_or(0), sp.variable),
        MemorySpace::LocalOutOfScope => {
            let size = sp.size.unwrap_or(0);
            let place = if offset < 0 { format!("{} bytes before", offset.unsigned_abs()) } else { format!("{} bytes after", (offset as u64).saturating_sub(size)) };
            return format!("local address {place} the {size}-byte frame of {kernel}: in the frame of a function that has returned (a pointer to its local variable outlived it)");
        }
        MemorySpace::LocalPastTop => {
            return format!("local address {offset} bytes past the end of the live frames of the function's callers, through a pointer it was passed: past the end of a caller's local array");
        }
        MemorySpace::LocalDeadFrame => {
            return format!("local address {offset} bytes past the end of the live frames of the function's callers, outside its own frame: in the frame of a function that has returned (a pointer to its local variable outlived it)");
        }
        MemorySpace::Global => return String::new(),
    };
    match (offset, sp.size) {
        (o, _) if o < 0 => format!("Address is located {} bytes before the {what}", o.unsigned_abs()),
        (o, Some(size)) if o as u64 >= size => format!("Address is located {} bytes after the {what}", o as u64 - size),
        (o, Some(size)) => format!("Address is located {o} bytes inside the {what}, the access of size {} runs past its end at {size}", record.width),
        (o, None) => format!("Address is located at offset {o} of the {what}, past the launch's size"),
    }
}

fn desc_kind(desc: &AddrDescription) -> &'static str {
    match desc.kind {
        AddrKind::OverflowLeft { .. } | AddrKind::OverflowRight { .. } | AddrKind::StraddlesEnd { .. } | AddrKind::RowPadding { .. } => "heap-buffer-overflow",
        AddrKind::UseAfterFree { .. } => "heap-use-after-free",
        AddrKind::InBounds { .. } => "unknown-crash",
        AddrKind::TagMismatch { .. } => "tag-mismatch",
        AddrKind::Wild => "wild-access",
        AddrKind::Unknown => "unknown-address",
    }
}

/// A module's site table as reports read it: a [`SiteTable`], or a [`ModuleSites`] parsed on use.
pub trait ModuleTable {
    fn site_table(&self) -> &SiteTable;
}

impl ModuleTable for SiteTable {
    fn site_table(&self) -> &SiteTable {
        self
    }
}

/// A checked module's site table. One read from the cache stays JSON until a report needs it:
/// a warm module load does not parse it (about 0.5 ms for a 100-kernel module's 450 sites), and
/// most modules never report.
#[derive(Debug)]
pub struct ModuleSites {
    json: Option<String>,
    table: OnceLock<SiteTable>,
}

impl ModuleSites {
    pub fn parsed(table: SiteTable) -> Self {
        Self { json: None, table: OnceLock::from(table) }
    }

    pub fn json(text: String) -> Self {
        Self { json: Some(text), table: OnceLock::new() }
    }

    /// The table itself (parsed now if it was not).
    pub fn into_table(self) -> SiteTable {
        self.table();
        self.table.into_inner().unwrap_or_default()
    }

    /// The table (parsed on first use; a cache file that does not parse gives an empty table, so
    /// its reports name no kernel or line, with a warning).
    pub fn table(&self) -> &SiteTable {
        self.table.get_or_init(|| match self.json.as_deref().map(SiteTable::from_json) {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                eprintln!("==gasan== WARNING: a cached site table does not parse ({e}): reports from its module name no kernel or line");
                SiteTable::default()
            }
            None => SiteTable::default(),
        })
    }
}

impl ModuleTable for ModuleSites {
    fn site_table(&self) -> &SiteTable {
        self.table()
    }
}

/// The site of an error-ring record: entry `site_id` of module `module_id`'s table. Module ids
/// start at 1 (`sites[module_id - 1]`, as [`ModuleRegistry::register`] hands them out). The ring holds
/// whatever the device wrote (id 0 from a module whose control block was never written, garbage
/// from a torn record): such records have no site, and the report says `<unknown kernel>`.
pub fn record_site<'a, T: ModuleTable>(rec: &ErrorRecord, sites: &'a [T]) -> Option<&'a Site> {
    let module = (rec.module_id as usize).checked_sub(1)?;
    sites.get(module)?.site_table().get(rec.site_id)
}

/// The report of one raw ring record: its site from [`record_site`], `desc` the allocator's
/// description of `rec.addr`. Any record bytes give a report (an unknown `kind` byte prints as a
/// read); formatting it never panics (fuzzed: fuzz/fuzz_targets/ring_record.rs).
pub fn device_report<T: ModuleTable>(record: ErrorRecord, sites: &[T], desc: AddrDescription, device: i32) -> Report {
    let site = record_site(&record, sites).cloned();
    Report::Device { record, site, desc, device }
}

/// The site tables of every checked module of the process, by module id (the process's module
/// registry: ids from 1, in the order modules were registered, never reused).
#[derive(Default)]
pub struct ModuleRegistry {
    tables: std::sync::Mutex<Vec<ModuleSites>>,
}

impl ModuleRegistry {
    /// Registers a checked module's sites; returns its module id (what its control block and its
    /// ring records carry).
    pub fn register(&self, sites: ModuleSites) -> u64 {
        let mut v = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        v.push(sites);
        v.len() as u64
    }

    /// [`device_report`] of `record` against the registered tables.
    pub fn device_report(&self, record: ErrorRecord, desc: AddrDescription, device: i32) -> Report {
        device_report(record, self.tables.lock().unwrap_or_else(|e| e.into_inner()).as_slice(), desc, device)
    }
}

pub struct Reporter {
    format: ReportFormat,
    log_path: Option<std::path::PathBuf>,
    print_limit: u32,
    suppress: Vec<(String, String)>,
    reported: AtomicUsize,
    out: Mutex<()>,
}

/// Symbolizes a stack as `#N 0xADDR in func file:line`.
pub fn format_stack(s: &HostStack) -> Vec<String> {
    let mut out = Vec::new();
    for (i, &ip) in s.0.iter().enumerate() {
        let mut line = format!("#{i} {ip:#x}");
        let mut done = false;
        backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
            if done {
                return;
            }
            done = true;
            if let Some(n) = sym.name() {
                let _ = write!(line, " in {n:#}");
            }
            if let (Some(f), Some(l)) = (sym.filename(), sym.lineno()) {
                let _ = write!(line, " {}:{}", f.display(), l);
            }
        });
        out.push(line);
    }
    out
}

fn access_word(k: AccessKind) -> &'static str {
    match k {
        AccessKind::Read => "READ",
        AccessKind::Write => "WRITE",
        AccessKind::Atomic => "ATOMIC READ-WRITE",
        AccessKind::Free => "FREE",
    }
}

fn location_text(d: &AddrDescription) -> Option<String> {
    let a = d.alloc.as_ref()?;
    let region = format!("{}-byte {} [{:#x},{:#x})", a.size, a.noun(), a.start, a.start + a.size);
    Some(match d.kind {
        AddrKind::OverflowRight { distance } => format!("{:#x} is located {distance} bytes after {region}", d.addr),
        AddrKind::OverflowLeft { distance } => format!("{:#x} is located {distance} bytes before {region}", d.addr),
        AddrKind::UseAfterFree { offset } | AddrKind::InBounds { offset } => {
            format!("{:#x} is located {offset} bytes inside of {region}", d.addr)
        }
        AddrKind::StraddlesEnd { offset, past } => {
            format!("{:#x} is located {offset} bytes inside of {region}; the access runs {past} bytes past its end", d.addr)
        }
        AddrKind::RowPadding { row, past } => {
            let (width, pitch) = a.rows.unwrap_or_default();
            format!("{:#x} is located in the row padding of pitched {region}: row {row}, {past} bytes after the row's {width} bytes (pitch {pitch})", d.addr)
        }
        AddrKind::TagMismatch { ptr_tag, mem_tag, offset } => format!(
            "{:#x} has pointer tag {ptr_tag}; it reaches {offset} bytes into {region} of tag {mem_tag} ({}), seen through the wrong window: the pointer walked out of its own allocation into another one",
            d.addr,
            if a.live { "live" } else { "freed" }
        ),
        _ => return None,
    })
}

fn shadow_text(d: &AddrDescription, out: &mut String) {
    let Some((first, bytes)) = &d.shadow else { return };
    let g = d.scale.granule();
    let _ = writeln!(
        out,
        "Shadow bytes around the buggy address (one byte per {g}-byte granule; 00 = inaccessible, {}):",
        if g == 256 { "n = first n+1 bytes accessible" } else { "n = first n bytes accessible" }
    );
    for (r, row) in bytes.chunks(16).enumerate() {
        let row_addr = first + (r as u64) * 16 * g;
        let mut line = format!("  {row_addr:#x}:");
        for (i, b) in row.iter().enumerate() {
            let a = row_addr + i as u64 * g;
            if d.addr >= a && d.addr < a + g {
                let _ = write!(line, "[{b:02x}]");
            } else {
                let _ = write!(line, " {b:02x} ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

pub use crate::suppressions::{parse_suppressions, SUPPRESSION_KINDS};

/// What the reporter takes from the options, built in one place from the process's [`Options`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    pub format: ReportFormat,
    /// Reports go to `<log_path>.<pid>` (stderr when unset or when it cannot take them).
    pub log_path: Option<std::path::PathBuf>,
    /// Stop printing after this many reports (0: no limit).
    pub print_limit: u32,
    /// The suppressions file (checked before the program started).
    pub suppressions: Option<std::path::PathBuf>,
}

impl From<&Options> for ReportOptions {
    fn from(o: &Options) -> Self {
        ReportOptions { format: o.report_format, log_path: o.log_path.clone(), print_limit: o.print_limit, suppressions: o.suppressions.clone() }
    }
}

impl Reporter {
    pub fn new(opts: impl Into<ReportOptions>) -> Self {
        let opts: ReportOptions = opts.into();
        // The rules the file was checked with before the program started
        // (options::SuppressionsFile); options never checked: read now, and an unreadable or
        // malformed file suppresses nothing.
        let suppress = opts.suppressions.as_deref().and_then(|p| crate::options::suppression_rules(p).ok()).unwrap_or_default();
        Reporter { format: opts.format, log_path: opts.log_path, print_limit: opts.print_limit, suppress, reported: AtomicUsize::new(0), out: Mutex::new(()) }
    }

    pub fn errors_reported(&self) -> usize {
        self.reported.load(Ordering::SeqCst)
    }

    fn suppressed(&self, r: &Report) -> bool {
        self.suppress.iter().any(|(k, v)| match (k.as_str(), r) {
            ("kernel", Report::Device { site: Some(s), .. }) => s.kernel.contains(v.as_str()) || s.kernel_demangled.contains(v.as_str()),
            ("src", Report::Device { site: Some(s), .. }) => s.loc.as_ref().is_some_and(|l| l.file.contains(v.as_str())),
            ("call", Report::Api { call, .. }) | ("call", Report::Free { call, .. }) => call.contains(v.as_str()),
            _ => false,
        })
    }

    /// Prints a report unless suppressed or past `print_limit`. Returns whether it counted.
    pub fn report(&self, r: &Report) -> bool {
        if self.suppressed(r) {
            return false;
        }
        let n = self.reported.fetch_add(1, Ordering::SeqCst);
        if self.print_limit != 0 && n >= self.print_limit as usize {
            return true;
        }
        let text = match self.format {
            ReportFormat::Text => format_text(r),
            ReportFormat::Json => format_json(r) + "\n",
        };
        let _g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        deliver(self.log_path.as_deref(), std::process::id(), &text, &mut std::io::stderr().lock());
        true
    }
}

/// Writes a report to `<log_path>.<pid>`, or to `stderr` when there is no log path. When the log
/// cannot be opened or written (the start-up check passed but the file system says no now: root
/// passes `access(W_OK)` for `/proc`, a disk fills up, a directory goes away), the report goes to
/// `stderr` after a line saying why: a report is never lost. Returns where it went.
pub fn deliver(log_path: Option<&std::path::Path>, pid: u32, text: &str, stderr: &mut dyn std::io::Write) -> Delivered {
    let Some(p) = log_path else {
        let _ = stderr.write_all(text.as_bytes());
        return Delivered::Stderr;
    };
    let mut path = p.as_os_str().to_owned();
    path.push(format!(".{pid}"));
    let path = std::path::PathBuf::from(path);
    let written = std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.flush()));
    match written {
        Ok(()) => Delivered::Log,
        Err(e) => {
            let _ = writeln!(stderr, "==gasan== cannot write the report to {} (log_path): {}; it follows here", path.display(), crate::options::os_error_text(&e));
            let _ = stderr.write_all(text.as_bytes());
            Delivered::StderrInstead
        }
    }
}

/// Where [`deliver`] put a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// The log file `<log_path>.<pid>`.
    Log,
    /// Standard error: no log path is set.
    Stderr,
    /// Standard error, after a line saying why the log file could not take it.
    StderrInstead,
}

fn kernel_short(s: &Site) -> String {
    let d = &s.kernel_demangled;
    d.split('(').next().unwrap_or(d).to_string()
}

fn site_where(s: &Site) -> String {
    match &s.loc {
        Some(l) => l.to_string(),
        None => format!("PTX line {}", s.ptx_line),
    }
}

/// One report as both renderers print it ([`format_text`], [`format_json`]): built once per kind
/// by [`describe`] (ASan's one `ErrorXxx::Print` per kind, with a JSON twin).
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    /// ASan bug type ([`Report::kind`]).
    pub kind: &'static str,
    /// The text after `==PID==ERROR: GPUAddressSanitizer: `.
    pub headline: String,
    /// The text lines between the headline and the summary, each ending in a newline.
    pub body: String,
    /// The text after `SUMMARY: GPUAddressSanitizer: `.
    pub summary: String,
    /// The JSON object's fields besides `tool` and `kind`.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// The JSON fields of `v`, an object literal.
fn fields(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("report fields are written as object literals"),
    }
}

fn stack_text(stack: &HostStack, o: &mut String) {
    for l in format_stack(stack) {
        let _ = writeln!(o, "    {l}");
    }
}

fn access_name(kind: u8) -> &'static str {
    match AccessKind::from_u8(kind) {
        Some(AccessKind::Write) => "write",
        Some(AccessKind::Atomic) => "atomic",
        Some(AccessKind::Free) => "free",
        _ => "read",
    }
}

/// Each report kind's words and fields, once.
pub fn describe(r: &Report) -> Description {
    use serde_json::json;
    let kind = r.kind();
    let mut body = String::new();
    let o = &mut body;
    let (headline, summary, fields) = match r {
        Report::Device { record, site: Some(site @ Site { space: Some(sp), .. }), device, .. } => {
            let access = AccessKind::from_u8(record.kind).unwrap_or(AccessKind::Read);
            let kernel = &site.kernel_demangled;
            let location = space_location(sp, record, &kernel_short(site));
            let _ = writeln!(o, "{} of size {} in kernel {kernel} on device {device}", access_word(access), record.width);
            let _ = writeln!(o, "    block ({},{},{}) thread ({},{},{}), at {}", record.ctaid[0], record.ctaid[1], record.ctaid[2], record.tid[0], record.tid[1], record.tid[2], site_where(site));
            let _ = writeln!(o, "{location}");
            (
                format!("{kind} in {} memory at offset {} of {}", space_name(sp.space), record.addr as i64, sp.variable_demangled),
                format!("{kind} {} in {}", site_where(site), kernel_short(site)),
                fields(json!({
                    "access": access_name(record.kind),
                    "size": record.width,
                    "space": space_name(sp.space),
                    "variable": sp.variable_demangled,
                    "variable_mangled": sp.variable,
                    "variable_size": sp.size,
                    "offset": record.addr as i64,
                    "device": device,
                    "kernel": site.kernel_demangled,
                    "kernel_mangled": site.kernel,
                    "file": site.loc.as_ref().map(|l| l.file.clone()),
                    "line": site.loc.as_ref().map(|l| l.line),
                    "column": site.loc.as_ref().map(|l| l.col),
                    "ptx_line": site.ptx_line,
                    "block": record.ctaid, "thread": record.tid,
                    "location": location,
                })),
            )
        }
        Report::Device { record, site, desc, device } => {
            let access = AccessKind::from_u8(record.kind).unwrap_or(AccessKind::Read);
            let kernel = site.as_ref().map(|s| s.kernel_demangled.clone()).unwrap_or_else(|| "<unknown kernel>".into());
            let headline = if access == AccessKind::Free {
                let what = if record.shadow == free_error::DOUBLE_FREE { "attempting double-free" } else { "attempting free on address which is not the start of a device-heap block" };
                let _ = writeln!(o, "in-kernel free in kernel {kernel} on device {device}");
                format!("{kind} on {:#x}: {what}", record.addr)
            } else {
                let _ = writeln!(o, "{} of size {} in kernel {kernel} on device {device}", access_word(access), record.width);
                format!("{kind} on address {:#x}", record.addr)
            };
            let at = site.as_ref().map(site_where).unwrap_or_else(|| format!("site {}", record.site_id));
            let _ = writeln!(o, "    block ({},{},{}) thread ({},{},{}), at {at}", record.ctaid[0], record.ctaid[1], record.ctaid[2], record.tid[0], record.tid[1], record.tid[2]);
            describe_text(desc, o);
            let summary_at = site.as_ref().map(|s| format!("{} in {}", site_where(s), kernel_short(s))).unwrap_or_default();
            (
                headline,
                format!("{kind} {summary_at}"),
                fields(json!({
                    "access": access_name(record.kind),
                    "size": record.width,
                    "address": format!("{:#x}", record.addr),
                    "device": device,
                    "kernel": site.as_ref().map(|s| s.kernel_demangled.clone()),
                    "kernel_mangled": site.as_ref().map(|s| s.kernel.clone()),
                    "file": site.as_ref().and_then(|s| s.loc.as_ref().map(|l| l.file.clone())),
                    "line": site.as_ref().and_then(|s| s.loc.as_ref().map(|l| l.line)),
                    "column": site.as_ref().and_then(|s| s.loc.as_ref().map(|l| l.col)),
                    "ptx_line": site.as_ref().map(|s| s.ptx_line),
                    "block": record.ctaid, "thread": record.tid,
                    "shadow_byte": record.shadow,
                    "location": desc_json(desc),
                })),
            )
        }
        Report::Api { call, addr, len, write, desc, stack } => {
            let _ = writeln!(o, "{} of size {len} at {addr:#x} by host call {call}", if *write { "WRITE" } else { "READ" });
            stack_text(stack, o);
            describe_text(desc, o);
            (
                format!("{kind} on address {:#x}", desc.addr),
                format!("{kind} in {call}"),
                fields(json!({
                    "call": call, "access": if *write { "write" } else { "read" },
                    "size": len, "address": format!("{:#x}", addr), "bad_address": format!("{:#x}", desc.addr),
                    "stack": format_stack(stack), "location": desc_json(desc),
                })),
            )
        }
        Report::Free { call, err, stack } => {
            let (ptr, info) = match err {
                FreeError::DoubleFree { ptr, info } | FreeError::NotBase { ptr, info } | FreeError::WrongCall { ptr, info } => (*ptr, Some(info)),
                FreeError::Unknown { ptr, .. } => (*ptr, None),
            };
            let what = match err {
                FreeError::DoubleFree { .. } => "attempting double-free",
                FreeError::NotBase { .. } => "attempting free on address which was not allocated by cuMemAlloc (not the start of a block)",
                FreeError::Unknown { .. } => "attempting free on address which was not allocated by cuMemAlloc",
                FreeError::WrongCall { .. } => "attempting free with the wrong call (pinned host memory goes with cuMemFreeHost, other memory with cuMemFree)",
            };
            stack_text(stack, o);
            if let Some(a) = info {
                let _ = writeln!(o, "{ptr:#x} is located {} bytes inside of {}-byte region [{:#x},{:#x})", ptr - a.start, a.size, a.start, a.start + a.size);
                if let Some(f) = &a.free_stack {
                    let _ = writeln!(o, "freed by thread T0 here:");
                    stack_text(f, o);
                }
                let _ = writeln!(o, "previously allocated by thread T0 here:");
                stack_text(&a.alloc_stack, o);
            }
            (format!("{kind} on {ptr:#x}: {what}"), format!("{kind} in {call}"), fields(json!({"call": call, "address": format!("{ptr:#x}"), "stack": format_stack(stack)})))
        }
        Report::Fault { cuda_error, call, stack, fault } => {
            let headline = match fault {
                Some((f, _)) => {
                    let _ = writeln!(o, "{} in an uninstrumented kernel (fault type {}, reason {}; page-granular, the access may be later in the page)", f.access_word(), f.fault_type, f.reason);
                    format!("{kind} on address {:#x} (GPU fault, CUDA error {cuda_error} reported by {call})", f.address)
                }
                None => format!("{kind}: CUDA error {cuda_error} reported by {call}"),
            };
            let _ = writeln!(o, "A kernel faulted on memory no gasan check saw (an uninstrumented, SASS-only module, or an access to unmapped pool VA: a guard gap or freed large block).");
            if let Some((_, desc)) = fault {
                describe_text(desc, o);
            }
            let _ = writeln!(o, "host call:");
            stack_text(stack, o);
            (
                headline,
                format!("{kind} (CUDA error {cuda_error})"),
                fields(json!({
                    "cuda_error": cuda_error, "call": call,
                    "address": fault.as_ref().map(|(f, _)| format!("{:#x}", f.address)),
                    "access": fault.as_ref().map(|(f, _)| f.access_word().to_lowercase()),
                    "location": fault.as_ref().map(|(_, d)| desc_json(d)),
                })),
            )
        }
        Report::Unfinished { cuda_error, call, stack, claimed } => {
            let _ = writeln!(
                o,
                "A kernel stopped at a failed gasan check, but the check's error record did not reach the host before the kernel ended ({claimed} claimed, none finished), so the access's address, kind and place are not known. Running the program again usually shows them."
            );
            let _ = writeln!(o, "host call:");
            stack_text(stack, o);
            (
                format!("{kind}: a checked access failed in a kernel (CUDA error {cuda_error} reported by {call})"),
                format!("{kind} (CUDA error {cuda_error})"),
                fields(json!({"cuda_error": cuda_error, "call": call, "unfinished_records": claimed})),
            )
        }
        Report::Leaks(v) => {
            let total: u64 = v.iter().map(|a| a.size).sum();
            for a in v {
                let _ = writeln!(o, "Direct leak of {} byte(s) in 1 object(s) at {:#x} allocated from:", a.size, a.start);
                stack_text(&a.alloc_stack, o);
            }
            (
                "detected memory leaks".to_string(),
                format!("{total} byte(s) leaked in {} allocation(s).", v.len()),
                fields(json!({"leaks": v.iter().map(|a| json!({"address": format!("{:#x}", a.start), "size": a.size})).collect::<Vec<_>>()})),
            )
        }
    };
    Description { kind, headline, body, summary, fields }
}

/// The text report: headline, body and summary of [`describe`], ASan's shape.
pub fn format_text(r: &Report) -> String {
    let d = describe(r);
    format!("=={pid}==ERROR: GPUAddressSanitizer: {}\n{}SUMMARY: GPUAddressSanitizer: {}\n", d.headline, d.body, d.summary, pid = std::process::id())
}

fn describe_text(d: &AddrDescription, o: &mut String) {
    if let Some(t) = location_text(d) {
        let _ = writeln!(o, "{t}");
    } else if d.kind == AddrKind::Wild {
        let _ = writeln!(o, "{:#x} is in the gasan pool but not near any allocation", d.addr);
    }
    if let Some(a) = &d.alloc {
        if let Some(h) = &a.heap_block {
            // A device-heap block: kernel coordinates instead of host stacks.
            let at = |c: [u32; 3], t: [u32; 3]| format!("block ({},{},{}) thread ({},{},{})", c[0], c[1], c[2], t[0], t[1], t[2]);
            if let Some((c, t)) = h.free {
                let _ = writeln!(o, "freed by in-kernel free in {}", at(c, t));
            }
            let _ = writeln!(o, "{}allocated by in-kernel malloc in {} (device-heap region)", if h.free.is_some() { "previously " } else { "" }, at(h.alloc_ctaid, h.alloc_tid));
            shadow_text(d, o);
            return;
        }
        // Registered host memory is registered and unregistered, not allocated and freed.
        let (freed, allocated) = if a.registered { ("unregistered", "registered") } else { ("freed", "allocated") };
        if let Some(f) = &a.free_stack {
            let _ = writeln!(o, "{freed} by thread T0 here:");
            for l in format_stack(f) {
                let _ = writeln!(o, "    {l}");
            }
            let _ = writeln!(o, "previously {allocated} by thread T0 here:");
        } else {
            let _ = writeln!(o, "{allocated} by thread T0 here:");
        }
        for l in format_stack(&a.alloc_stack) {
            let _ = writeln!(o, "    {l}");
        }
    }
    if let (AddrKind::TagMismatch { ptr_tag, .. }, Some(p)) = (d.kind, &d.ptr_alloc) {
        let end = p.start + p.size;
        let whereabouts = if d.addr >= end { format!("{} bytes after", d.addr - end) } else { format!("{} bytes before", p.start - d.addr) };
        let _ = writeln!(
            o,
            "the pointer's own allocation is most likely the nearest one of tag {ptr_tag}: {}-byte region [{:#x},{:#x}) ({}), the address being {whereabouts} it; allocated by thread T0 here:",
            p.size,
            p.start,
            end,
            if p.live { "live" } else { "freed" }
        );
        for l in format_stack(&p.alloc_stack) {
            let _ = writeln!(o, "    {l}");
        }
    }
    shadow_text(d, o);
}

/// One JSON object per report: `tool`, `kind` and the fields of [`describe`].
pub fn format_json(r: &Report) -> String {
    let d = describe(r);
    let mut object = d.fields;
    object.insert("tool".into(), "gasan".into());
    object.insert("kind".into(), d.kind.into());
    serde_json::Value::Object(object).to_string()
}

/// An address description's JSON fields.
fn desc_json(d: &AddrDescription) -> serde_json::Value {
    use serde_json::json;
    let (side, distance) = match d.kind {
        AddrKind::OverflowLeft { distance } => (Some("left"), Some(distance)),
        AddrKind::OverflowRight { distance } => (Some("right"), Some(distance)),
        AddrKind::RowPadding { past, .. } => (Some("row-padding"), Some(past)),
        AddrKind::StraddlesEnd { past, .. } => (Some("straddles-end"), Some(past)),
        _ => (None, None),
    };
    json!({
        "address": format!("{:#x}", d.addr),
        "side": side,
        "distance": distance,
        "region": d.alloc.as_ref().map(|a| json!({"start": format!("{:#x}", a.start), "size": a.size, "live": a.live, "tag": a.tag})),
        "pointer_tag": match d.kind { AddrKind::TagMismatch { ptr_tag, .. } => Some(ptr_tag), _ => None },
        "pointer_region": d.ptr_alloc.as_ref().map(|a| json!({"start": format!("{:#x}", a.start), "size": a.size, "live": a.live, "tag": a.tag, "alloc_stack": format_stack(&a.alloc_stack)})),
        "space": d.alloc.as_ref().map(|a| a.space()),
        "heap_block": d.alloc.as_ref().and_then(|a| a.heap_block.map(|h| json!({"alloc_block": h.alloc_ctaid, "alloc_thread": h.alloc_tid, "free_block": h.free.map(|f| f.0), "free_thread": h.free.map(|f| f.1)}))),
        "alloc_stack": d.alloc.as_ref().map(|a| format_stack(&a.alloc_stack)),
        "free_stack": d.alloc.as_ref().and_then(|a| a.free_stack.as_ref().map(format_stack)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{AddrDescription, AddrKind, AllocInfo, HostStack};
    use gasan_instrument::shadow::Scale;

    fn table(kernels: &[&str]) -> SiteTable {
        let sites = kernels
            .iter()
            .enumerate()
            .map(|(i, k)| Site { id: i as u32, kernel: k.to_string(), kernel_demangled: k.to_string(), ptx_line: 10 + i as u32, loc: None, kind: AccessKind::Read, width: 4, space: None })
            .collect();
        SiteTable { sites, files: Default::default() }
    }

    #[test]
    fn the_reporter_suppresses_with_the_rules_the_file_was_checked_with() {
        let p = std::env::temp_dir().join(format!("gasan-report-supp-{}.supp", std::process::id()));
        std::fs::write(&p, "call:cuMemcpyHtoD\n").unwrap();
        let o = Options { suppressions: Some(p.clone()), report_format: ReportFormat::Json, ..Options::default() };
        o.validate().unwrap();
        // Changed after the check: the reporter keeps what was checked (the file is read once).
        std::fs::write(&p, "kernel:other\n").unwrap();
        let r = Reporter::new(&o);
        let desc = AddrDescription { ptr_alloc: None, addr: 0x1000, kind: AddrKind::Unknown, alloc: None, shadow: None, scale: Scale::S8 };
        let api = |call: &str| Report::Api { call: call.into(), addr: 0x1000, len: 4, write: true, desc: desc.clone(), stack: HostStack::default() };
        assert!(!r.report(&api("cuMemcpyHtoD_v2")), "suppressed by call:cuMemcpyHtoD");
        assert_eq!(r.errors_reported(), 0);
        assert!(r.report(&api("cuMemsetD8_v2")), "another call is reported");
        assert_eq!(r.errors_reported(), 1);
        // A file never checked is read when the reporter is made.
        let q = std::env::temp_dir().join(format!("gasan-report-supp-unchecked-{}.supp", std::process::id()));
        std::fs::write(&q, "call:cuMemsetD8\n").unwrap();
        let unchecked = Reporter::new(&Options { suppressions: Some(q.clone()), ..Options::default() });
        assert!(!unchecked.report(&api("cuMemsetD8_v2")));
        let _ = (std::fs::remove_file(&p), std::fs::remove_file(&q));
    }

    #[test]
    fn record_site_takes_one_based_module_ids_and_refuses_the_rest() {
        let sites = vec![table(&["k0", "k1"]), table(&["m0"])];
        let rec = |module_id, site_id| ErrorRecord { module_id, site_id, ..Default::default() };
        assert_eq!(record_site(&rec(1, 1), &sites).unwrap().kernel, "k1");
        assert_eq!(record_site(&rec(2, 0), &sites).unwrap().kernel, "m0");
        // Module id 0 (control block never written), past the last module, past the last site.
        for (m, s) in [(0, 0), (3, 0), (u32::MAX, 0), (2, 1), (1, u32::MAX)] {
            assert!(record_site(&rec(m, s), &sites).is_none(), "module {m} site {s}");
        }
    }

    #[test]
    fn the_registry_hands_out_ids_from_one_and_reports_against_them() {
        let r = ModuleRegistry::default();
        assert_eq!(r.register(ModuleSites::parsed(table(&["k0", "k1"]))), 1);
        assert_eq!(r.register(ModuleSites::json(table(&["m0"]).to_json())), 2);
        let desc = AddrDescription { ptr_alloc: None, addr: 0, kind: AddrKind::Unknown, alloc: None, shadow: None, scale: Scale::S8 };
        let site_of = |module_id, site_id| match r.device_report(ErrorRecord { module_id, site_id, ..Default::default() }, desc.clone(), 3) {
            Report::Device { site, device, .. } => {
                assert_eq!(device, 3);
                site.map(|s| s.kernel)
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(site_of(1, 1).as_deref(), Some("k1"));
        assert_eq!(site_of(2, 0).as_deref(), Some("m0"));
        assert_eq!(site_of(0, 0), None);
        assert_eq!(site_of(3, 0), None);
    }

    #[test]
    fn cached_site_tables_are_parsed_when_a_report_first_needs_them() {
        let (a, b) = (table(&["k0", "k1"]), table(&["m0"]));
        let lazy = vec![ModuleSites::json(a.to_json()), ModuleSites::parsed(b.clone()), ModuleSites::json("{\"sites\": [{]}".into())];
        assert!(lazy[0].table.get().is_none(), "not parsed at registration");
        let rec = |module_id, site_id| ErrorRecord { module_id, site_id, ..Default::default() };
        assert_eq!(record_site(&rec(1, 1), &lazy), a.get(1));
        assert_eq!(lazy[0].table.get(), Some(&a), "parsed once, kept");
        assert_eq!(record_site(&rec(2, 0), &lazy), b.get(0));
        // A table that does not parse gives reports without a site, not a panic.
        assert!(record_site(&rec(3, 0), &lazy).is_none());
        assert_eq!(ModuleSites::json(b.to_json()).into_table(), b);
    }

    #[test]
    fn shared_and_local_records_name_the_space_and_variable() {
        let mut t = table(&["_Z1kv"]);
        t.sites[0].space = Some(SpaceSite { space: MemorySpace::Shared, variable: "_ZZ1kvE1s".into(), variable_demangled: "k()::s".into(), size: Some(256) });
        let record = ErrorRecord { addr: 256, module_id: 1, site_id: 0, kind: AccessKind::Write as u8, width: 4, ..Default::default() };
        let desc = AddrDescription { ptr_alloc: None, addr: 256, kind: AddrKind::Unknown, alloc: None, shadow: None, scale: Scale::S8 };
        let r = device_report(record, std::slice::from_ref(&t), desc.clone(), 0);
        assert_eq!(r.kind(), "shared-buffer-overflow");
        let text = format_text(&r);
        assert!(text.contains("Address is located 0 bytes after the 256-byte shared variable 'k()::s'"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
        assert_eq!(json["space"], "shared");
        assert_eq!(json["variable"], "k()::s");
        assert_eq!(json["offset"], 256);
        t.sites[0].space = Some(SpaceSite { space: MemorySpace::Local, variable: "__local_depot0".into(), variable_demangled: "__local_depot0".into(), size: Some(64) });
        let r = device_report(ErrorRecord { addr: (-4i64) as u64, module_id: 1, ..record }, std::slice::from_ref(&t), desc.clone(), 0);
        assert_eq!(r.kind(), "stack-buffer-overflow");
        assert!(format_text(&r).contains("4 bytes before the 64-byte local frame"), "{}", format_text(&r));
        t.sites[0].space.as_mut().unwrap().space = MemorySpace::LocalOutOfScope;
        let r = device_report(ErrorRecord { addr: (-96i64) as u64, module_id: 1, ..record }, std::slice::from_ref(&t), desc.clone(), 0);
        assert_eq!(r.kind(), "stack-use-after-scope");
        assert!(format_text(&r).contains("local address 96 bytes before the 64-byte frame of _Z1kv"), "{}", format_text(&r));
        // ptxas places a callee's frame above its caller's: a dead one past the kernel's end.
        let r = device_report(ErrorRecord { addr: 96, module_id: 1, ..record }, std::slice::from_ref(&t), desc.clone(), 0);
        assert!(format_text(&r).contains("local address 32 bytes after the 64-byte frame of _Z1kv"), "{}", format_text(&r));
        // A called function's accesses past its callers' top (frames.rs): through a pointer it
        // was passed, an overflow; through any other, a dead frame.
        t.sites[0].space = Some(SpaceSite { space: MemorySpace::LocalPastTop, variable: "__gasan_top".into(), variable_demangled: "__gasan_top".into(), size: None });
        let r = device_report(ErrorRecord { addr: 0, module_id: 1, ..record }, std::slice::from_ref(&t), desc.clone(), 0);
        assert_eq!(r.kind(), "stack-buffer-overflow");
        assert!(format_text(&r).contains("local address 0 bytes past the end of the live frames of the function's callers, through a pointer it was passed"), "{}", format_text(&r));
        let json: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
        assert_eq!(json["space"], "local");
        t.sites[0].space = Some(SpaceSite { space: MemorySpace::LocalDeadFrame, variable: "__local_depot1".into(), variable_demangled: "__local_depot1".into(), size: Some(32) });
        let r = device_report(ErrorRecord { addr: 40, module_id: 1, ..record }, std::slice::from_ref(&t), desc, 0);
        assert_eq!(r.kind(), "stack-use-after-scope");
        assert!(format_text(&r).contains("local address 40 bytes past the end of the live frames of the function's callers, outside its own frame"), "{}", format_text(&r));
    }

    /// The fuzzer's records (fuzz/seeds/ring_record/{local_huge_offset,shared_huge_width}):
    /// extreme offsets and widths, and i64::MIN / u64::MAX offsets, format without overflow.
    #[test]
    fn space_records_with_extreme_offsets_and_widths_format() {
        let desc = AddrDescription { ptr_alloc: None, addr: 0, kind: AddrKind::Unknown, alloc: None, shadow: None, scale: Scale::S8 };
        for space in [MemorySpace::Shared, MemorySpace::Local, MemorySpace::LocalOutOfScope, MemorySpace::LocalPastTop, MemorySpace::LocalDeadFrame, MemorySpace::Global] {
            for size in [None, Some(0), Some(64), Some(u64::MAX)] {
                for addr in [0, 16, 68719476752, i64::MAX as u64, i64::MIN as u64, u64::MAX] {
                    let mut t = table(&["_Z3genPd"]);
                    t.sites[0].space = Some(SpaceSite { space, variable: "__local_depot6".into(), variable_demangled: "__local_depot6".into(), size });
                    for (kind, width) in [(AccessKind::Read as u8, 1543504128), (AccessKind::Free as u8, u32::MAX), (0xff, 0)] {
                        let rec = ErrorRecord { addr, module_id: 1, site_id: 0, kind, width, ..Default::default() };
                        let r = device_report(rec, std::slice::from_ref(&t), desc.clone(), 0);
                        let text = format_text(&r);
                        assert!(text.contains(&format!("at offset {} of __local_depot6", addr as i64)), "{text}");
                        let json: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
                        assert_eq!(json["offset"], addr as i64);
                        assert_eq!(json["access"], if kind == AccessKind::Free as u8 { "free" } else { "read" });
                    }
                }
            }
        }
    }

    #[test]
    fn device_heap_free_records_name_the_bug_and_the_block() {
        use crate::device_heap::HeapBlockOrigin;
        let rec = |code| ErrorRecord { addr: 0x7000_0000_0200, module_id: 1, site_id: 0, kind: AccessKind::Free as u8, shadow: code, ctaid: [2, 0, 0], tid: [5, 0, 0], ..Default::default() };
        let block = AllocInfo {
            id: 0,
            start: 0x7000_0000_0200,
            size: 40,
            region_end: 0x7000_0000_0300,
            tag: 0,
            large: false,
            managed: false,
            memory: gasan_uvm::Memory::Device,
            live: false,
            alloc_stack: HostStack::default(),
            free_stack: Some(HostStack::default()),
            heap_block: Some(HeapBlockOrigin { alloc_ctaid: [1, 0, 0], alloc_tid: [7, 0, 0], free: Some(([2, 0, 0], [5, 0, 0])) }),
            registered: false,
            rows: None,
        };
        let desc = AddrDescription { ptr_alloc: None, addr: block.start, kind: AddrKind::UseAfterFree { offset: 0 }, alloc: Some(block), shadow: None, scale: Scale::S8 };
        let r = device_report(rec(free_error::DOUBLE_FREE), &[table(&["freer"])], desc.clone(), 0);
        assert_eq!(r.kind(), "double-free");
        let text = format_text(&r);
        assert!(text.contains("double-free on 0x700000000200: attempting double-free"), "{text}");
        assert!(text.contains("in-kernel free in kernel freer"), "{text}");
        assert!(text.contains("0 bytes inside of 40-byte device-heap block"), "{text}");
        assert!(text.contains("freed by in-kernel free in block (2,0,0) thread (5,0,0)"), "{text}");
        assert!(text.contains("previously allocated by in-kernel malloc in block (1,0,0) thread (7,0,0)"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
        assert_eq!((json["kind"].as_str(), json["access"].as_str()), (Some("double-free"), Some("free")));
        assert_eq!(json["location"]["space"], "device-heap");
        let r = device_report(rec(free_error::INVALID_FREE), &[table(&["freer"])], desc, 0);
        assert_eq!(r.kind(), "bad-free");
    }

    #[test]
    fn any_record_formats_as_a_device_report() {
        // Module id 0, an unknown kind byte, extreme coordinates: a report, not a panic.
        let record = ErrorRecord { addr: u64::MAX, module_id: 0, site_id: u32::MAX, kind: 0xff, width: u32::MAX, ctaid: [u32::MAX; 3], ..Default::default() };
        let desc = AddrDescription { ptr_alloc: None, addr: record.addr, kind: AddrKind::Unknown, alloc: None, shadow: None, scale: Scale::S8 };
        let r = device_report(record, &[table(&["k"])], desc, 0);
        let text = format_text(&r);
        assert!(text.contains("unknown-address on address 0xffffffffffffffff"), "{text}");
        assert!(text.contains("READ of size 4294967295 in kernel <unknown kernel>"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
        assert_eq!(json["access"], "read");
        assert!(json["kernel"].is_null());
    }
}
