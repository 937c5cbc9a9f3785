//! Every report kind's text and JSON, held to a reviewed copy (tests/report_golden.txt): the
//! renderers may be restructured, what a user reads may not change unnoticed. Run with
//! GASAN_BLESS=1 to rewrite the copy after a deliberate change (and review its diff).

use gasan_instrument::abi::{free_error, AccessKind, ErrorRecord, MemorySpace};
use gasan_instrument::ptx::{Site, SourceLoc, SpaceSite};
use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrDescription, AddrKind, AllocInfo, FreeError, HostStack};
use gasan_runtime::device_heap::HeapBlockOrigin;
use gasan_runtime::faults::FatalFault;
use gasan_runtime::report::{format_json, format_text, Report};

/// No frames: the output does not depend on this build's addresses.
fn stack() -> HostStack {
    HostStack(Vec::new())
}

fn region(live: bool, registered: bool, heap: Option<HeapBlockOrigin>) -> AllocInfo {
    AllocInfo {
        id: 1,
        start: 0x1000_0020_0000,
        size: 4096,
        region_end: 0x1000_0020_1200,
        tag: 1,
        large: false,
        managed: false,
        memory: gasan_uvm::Memory::Device,
        live,
        alloc_stack: stack(),
        free_stack: (!live).then(stack),
        heap_block: heap,
        registered,
        rows: None,
    }
}

fn desc(kind: AddrKind, addr: u64, alloc: Option<AllocInfo>) -> AddrDescription {
    let ptr_alloc = matches!(kind, AddrKind::TagMismatch { .. }).then(|| AllocInfo { start: 0x1000_0030_0000, tag: 2, ..region(true, false, None) });
    AddrDescription { ptr_alloc, addr, kind, alloc, shadow: Some((0x1000_0020_0000, [vec![0xfa; 8], vec![0; 16], vec![0xfb; 8]].concat())), scale: Scale::S8 }
}

fn site(space: Option<SpaceSite>) -> Site {
    Site {
        id: 3,
        kernel: "_Z6vecAddPfPKfi".into(),
        kernel_demangled: "vecAdd(float*, float const*, int)".into(),
        ptx_line: 40,
        loc: Some(SourceLoc { file_index: 1, file: "vecadd.cu".into(), line: 12, col: 5 }),
        kind: AccessKind::Write,
        width: 4,
        space,
    }
}

fn record(kind: AccessKind, addr: u64, shadow: u8) -> ErrorRecord {
    ErrorRecord { addr, module_id: 1, site_id: 3, ctaid: [3, 0, 0], tid: [64, 0, 0], width: 4, kind: kind as u8, shadow, seq: 1, ..Default::default() }
}

fn reports() -> Vec<(&'static str, Report)> {
    let heap = HeapBlockOrigin { alloc_ctaid: [1, 0, 0], alloc_tid: [2, 0, 0], free: Some(([4, 0, 0], [5, 0, 0])) };
    let dev = |k: AddrKind, addr: u64, alloc: Option<AllocInfo>, s: Option<Site>| Report::Device { record: record(AccessKind::Write, addr, 0), site: s, desc: desc(k, addr, alloc.clone()), device: 0 };
    let space = |space: MemorySpace, size: Option<u64>, offset: i64| Report::Device {
        record: record(AccessKind::Read, offset as u64, 0),
        site: Some(site(Some(SpaceSite { space, variable: "__local_depot0".into(), variable_demangled: "tile".into(), size }))),
        desc: desc(AddrKind::Unknown, 0, None),
        device: 1,
    };
    let fault = FatalFault { address: 0x1000_0020_1400, fault_type: 1, access_type: 2, processor_index: 0, reason: 1, timestamp: 0 };
    vec![
        ("overflow right", dev(AddrKind::OverflowRight { distance: 64 }, 0x1000_0020_1040, Some(region(true, false, None)), Some(site(None)))),
        ("overflow left, no site", dev(AddrKind::OverflowLeft { distance: 16 }, 0x1000_001f_fff0, Some(region(true, false, None)), None)),
        ("use after free", dev(AddrKind::UseAfterFree { offset: 16 }, 0x1000_0020_0010, Some(region(false, false, None)), Some(site(None)))),
        ("unregistered host memory", dev(AddrKind::UseAfterFree { offset: 16 }, 0x1000_0020_0010, Some(region(false, true, None)), Some(site(None)))),
        ("in bounds", dev(AddrKind::InBounds { offset: 8 }, 0x1000_0020_0008, Some(region(true, false, None)), Some(site(None)))),
        ("access straddles the end", dev(AddrKind::StraddlesEnd { offset: 4094, past: 2 }, 0x1000_0020_0ffe, Some(region(true, false, None)), Some(site(None)))),
        ("row padding", dev(AddrKind::RowPadding { row: 2, past: 8 }, 0x1000_0020_0408, Some(region(true, false, None)), Some(site(None)))),
        ("tag mismatch", dev(AddrKind::TagMismatch { ptr_tag: 2, mem_tag: 1, offset: 32 }, 0x1000_0020_0020, Some(region(true, false, None)), Some(site(None)))),
        ("wild", dev(AddrKind::Wild, 0x1000_0900_0000, None, Some(site(None)))),
        ("unknown address", dev(AddrKind::Unknown, 0x7000_0000, None, Some(site(None)))),
        ("device heap block", dev(AddrKind::UseAfterFree { offset: 4 }, 0x1000_0020_0004, Some(region(false, false, Some(heap))), Some(site(None)))),
        (
            "in-kernel double free",
            Report::Device {
                record: record(AccessKind::Free, 0x1000_0020_0000, free_error::DOUBLE_FREE),
                site: Some(site(None)),
                desc: desc(AddrKind::UseAfterFree { offset: 0 }, 0x1000_0020_0000, Some(region(false, false, Some(heap)))),
                device: 0,
            },
        ),
        ("shared overflow", space(MemorySpace::Shared, Some(256), 260)),
        ("dynamic shared", space(MemorySpace::Shared, None, 1024)),
        ("local overflow", space(MemorySpace::Local, Some(64), -8)),
        ("local out of scope", space(MemorySpace::LocalOutOfScope, Some(64), 72)),
        ("local past top", space(MemorySpace::LocalPastTop, None, 16)),
        ("local dead frame", space(MemorySpace::LocalDeadFrame, None, 32)),
        (
            "api write",
            Report::Api {
                call: "cuMemcpyHtoD".into(),
                addr: 0x1000_0020_0f00,
                len: 512,
                write: true,
                desc: desc(AddrKind::OverflowRight { distance: 0 }, 0x1000_0020_1000, Some(region(true, false, None))),
                stack: stack(),
            },
        ),
        ("free double", Report::Free { call: "cuMemFree".into(), err: FreeError::DoubleFree { ptr: 0x1000_0020_0000, info: region(false, false, None) }, stack: stack() }),
        ("free not base", Report::Free { call: "cuMemFree".into(), err: FreeError::NotBase { ptr: 0x1000_0020_0010, info: region(true, false, None) }, stack: stack() }),
        ("free unknown", Report::Free { call: "cuMemFreeAsync".into(), err: FreeError::Unknown { ptr: 0x1234, in_pool: false }, stack: stack() }),
        ("free wrong call", Report::Free { call: "cuMemFreeHost".into(), err: FreeError::WrongCall { ptr: 0x1000_0020_0000, info: region(true, false, None) }, stack: stack() }),
        (
            "fault described",
            Report::Fault {
                cuda_error: 700,
                call: "cuCtxSynchronize".into(),
                stack: stack(),
                fault: Some((fault, desc(AddrKind::OverflowRight { distance: 1024 }, 0x1000_0020_1400, Some(region(true, false, None))))),
            },
        ),
        ("fault wild", Report::Fault { cuda_error: 700, call: "cuStreamSynchronize".into(), stack: stack(), fault: Some((fault, desc(AddrKind::Wild, 0x1000_0020_1400, None))) }),
        ("fault no address", Report::Fault { cuda_error: 719, call: "cuCtxSynchronize".into(), stack: stack(), fault: None }),
        ("unfinished record", Report::Unfinished { cuda_error: 719, call: "cuMemAlloc_v2".into(), stack: stack(), claimed: 1 }),
        ("leaks", Report::Leaks(vec![region(true, false, None), AllocInfo { start: 0x1000_0040_0000, size: 100, ..region(true, false, None) }])),
    ]
}

fn rendered() -> String {
    let pid = format!("=={}==", std::process::id());
    let mut out = String::new();
    for (name, r) in reports() {
        out += &format!("### {name}: {}\n{}{}\n\n", r.kind(), format_text(&r).replace(&pid, "==PID=="), format_json(&r));
    }
    out
}

#[test]
fn every_report_kind_renders_as_reviewed() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/report_golden.txt");
    let now = rendered();
    if std::env::var_os("GASAN_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let reviewed = std::fs::read_to_string(&path).unwrap_or_default();
    if now != reviewed {
        let first = now.lines().zip(reviewed.lines()).position(|(a, b)| a != b).unwrap_or(now.lines().count().min(reviewed.lines().count()));
        panic!("reports differ from tests/report_golden.txt from line {}:\n now: {:?}\n was: {:?}", first + 1, now.lines().nth(first), reviewed.lines().nth(first));
    }
}
