//! Error-record decoding: any 64 bytes in an error-ring slot (module id 0 or past the last module,
//! a site id past the table, a bad kind byte, any address) become a report, text and JSON, without
//! a panic, and the report says what the record says: for a shared/local check's site, the space,
//! variable and offset (`addr` is an offset from the variable); for a failed device-heap free,
//! the pointer; otherwise the address. The path is the runtime's: `ErrorRecord::from_bytes` (the slot's bytes),
//! `report::device_report` (site lookup), `Allocator::describe` (a host-backed pool holding live,
//! freed, small and large allocations), `format_text` / `format_json`.
//!
//! Input: 64 record bytes, then an address mode byte (raw address / near one of the allocations /
//! anywhere in the pool), an allocation index and a scale byte.
#![no_main]

use gasan_instrument::abi::{AccessKind, ErrorRecord, MemorySpace, ERROR_RECORD_SIZE};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, SiteTable};
use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{Allocator, HostStack};
use gasan_runtime::options::Options;
use gasan_runtime::report::{device_report, format_json, format_text, record_site, Report};
use gasan_uvm::{HostBackend, Pool, PoolConfig};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct World {
    sites: Vec<SiteTable>,
    /// (allocator, addresses of its allocations) per scale.
    pools: Vec<(Allocator, Vec<u64>)>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        // Site tables of real modules (nvcc output), registered as modules 1 to 3.
        let sites = [
            include_str!("../../instrument/tests/data/loops.ptx"),
            include_str!("../../instrument/tests/corpus/ptx_sample.ptx"),
            // Device-heap calls: `free` sites (AccessKind::Free records).
            include_str!("../seeds/ptx_rewrite/heap_callseq.ptx"),
        ]
        .iter()
        .map(|p| instrument_ptx(p, &InstrumentOptions::default()).expect("seed PTX instruments").sites)
        .collect();
        let pools = [Scale::S7, Scale::S8]
            .into_iter()
            .map(|scale| {
                let pool = Pool::new(Box::new(HostBackend::new(2 << 20)), &PoolConfig { size: 64 << 30, shift: scale.shift(), hints: vec![], max_size: 0, tags: 4 }).expect("host pool");
                let opts = Options { shadow_scale: scale, malloc_context_size: 1, ..Options::default() };
                let a = Allocator::new(pool, &opts);
                let mut addrs = Vec::new();
                for (size, free) in [(100, false), (4096, true), (1, false), (300 << 10, false), (1 << 20, true), (256, false)] {
                    let p = a.alloc(size, None).expect("alloc");
                    if free {
                        a.free(p, None).expect("free");
                    }
                    addrs.push(p);
                }
                (a, addrs)
            })
            .collect();
        World { sites, pools }
    })
}

fuzz_target!(|data: &[u8]| {
    let mut raw = [0u8; ERROR_RECORD_SIZE];
    let n = data.len().min(ERROR_RECORD_SIZE);
    raw[..n].copy_from_slice(&data[..n]);
    let ctl = |i: usize| data.get(ERROR_RECORD_SIZE + i).copied().unwrap_or(0);
    let mut record = ErrorRecord::from_bytes(&raw);
    assert_eq!(record.to_bytes(), raw);

    let w = world();
    let (alloc, addrs) = &w.pools[usize::from(ctl(2) & 1)];
    let (base, size, _) = alloc.control_fields();
    record.addr = match ctl(0) % 3 {
        0 => record.addr,
        // Near an allocation: a signed 32-bit offset from it.
        1 => addrs[usize::from(ctl(1)) % addrs.len()].wrapping_add(record.addr as i32 as i64 as u64),
        _ => base + record.addr % size,
    };

    let mut desc = alloc.describe(record.addr);
    // Stacks are not input: skip symbolizing them (slow) on every run.
    if let Some(a) = desc.alloc.as_mut() {
        a.alloc_stack = HostStack::default();
        a.free_stack = a.free_stack.as_ref().map(|_| HostStack::default());
    }
    let site = record_site(&record, &w.sites);
    let expect_site = (1..=w.sites.len()).contains(&(record.module_id as usize)) && (record.site_id as usize) < w.sites[record.module_id as usize - 1].len();
    assert_eq!(site.is_some(), expect_site, "module {} site {}", record.module_id, record.site_id);

    let report = device_report(record, &w.sites, desc, i32::from(ctl(3)));
    let text = format_text(&report);
    let kind = report.kind();
    let json: serde_json::Value = serde_json::from_str(&format_json(&report)).expect("report JSON parses");
    assert_eq!(json["kind"], kind);
    assert!(matches!(report, Report::Device { .. }));
    if let Some(s) = site {
        assert!(text.contains(&s.kernel_demangled), "{text}");
        assert_eq!(json["kernel"], s.kernel_demangled.as_str());
    }
    let free = record.kind == AccessKind::Free as u8;
    match site.and_then(|s| s.space.as_ref()) {
        // A shared/local check records the offset from its variable (or frame): the report names
        // the space, the variable and the offset, and says where the access fell.
        Some(sp) => {
            if !free {
                let want = match sp.space {
                    MemorySpace::Shared => "shared-buffer-overflow",
                    MemorySpace::Local => "stack-buffer-overflow",
                    MemorySpace::LocalOutOfScope | MemorySpace::LocalDeadFrame => "stack-use-after-scope",
                    MemorySpace::LocalPastTop => "stack-buffer-overflow",
                    MemorySpace::Global => "unknown-crash",
                };
                assert_eq!(kind, want, "{text}");
            }
            let space = if sp.space == MemorySpace::Shared { "shared" } else { "local" };
            let head = format!("GPUAddressSanitizer: {kind} in {space} memory at offset {} of {}\n", record.addr as i64, sp.variable_demangled);
            assert!(text.contains(&head), "{text}");
            assert!(text.contains(&format!("of size {} in kernel", record.width)), "{text}");
            assert_eq!(json["space"], space);
            assert_eq!(json["variable"], sp.variable_demangled.as_str());
            assert_eq!(json["variable_mangled"], sp.variable.as_str());
            assert_eq!(json["offset"], record.addr as i64);
            assert_eq!(json["size"], record.width);
            let location = json["location"].as_str().expect("location");
            assert!(text.contains(location), "{text}");
            if sp.space != MemorySpace::Global {
                assert!(location.starts_with("Address is located") || location.starts_with("local address"), "{location}");
            }
        }
        None => {
            let head = if free {
                // A failed device-heap free: the pointer passed.
                assert!(matches!(kind, "double-free" | "bad-free"), "{text}");
                format!("GPUAddressSanitizer: {kind} on {:#x}: ", record.addr)
            } else {
                format!("GPUAddressSanitizer: {kind} on address {:#x}\n", record.addr)
            };
            assert!(text.contains(&head), "{text}");
            assert_eq!(json["address"], format!("{:#x}", record.addr));
            assert_eq!(json["access"], if free { "free" } else { json["access"].as_str().unwrap_or("") });
        }
    }
});
