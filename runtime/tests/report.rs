//! Report formatting from synthetic ring records and allocation state (text shape, JSON fields).

use gasan_instrument::abi::{AccessKind, ErrorRecord};
use gasan_instrument::ptx::{Site, SourceLoc};
use gasan_instrument::shadow::Scale;
use gasan_runtime::allocator::{AddrDescription, AddrKind, AllocInfo, FreeError, HostStack};
use gasan_runtime::report::{format_json, format_text, Report};

fn region(live: bool) -> AllocInfo {
    AllocInfo {
        id: 1,
        start: 0x1000_0020_0000,
        size: 4096,
        region_end: 0x1000_0020_1200,
        tag: 0,
        large: false,
        managed: false,
        memory: gasan_uvm::Memory::Device,
        live,
        alloc_stack: HostStack::capture(4),
        free_stack: (!live).then(|| HostStack::capture(4)),
        heap_block: None,
        registered: false,
        rows: None,
    }
}

fn device_report(kind: AddrKind, live: bool, addr: u64) -> Report {
    let record = ErrorRecord { addr, module_id: 1, site_id: 3, ctaid: [3, 0, 0], tid: [64, 0, 0], width: 4, kind: AccessKind::Write as u8, shadow: 0, seq: 1, ..Default::default() };
    let site = Site {
        id: 3,
        kernel: "_Z6vecAddPfPKfi".into(),
        kernel_demangled: "vecAdd(float*, float const*, int)".into(),
        ptx_line: 40,
        loc: Some(SourceLoc { file_index: 1, file: "vecadd.cu".into(), line: 12, col: 5 }),
        kind: AccessKind::Write,
        width: 4,
        space: None,
    };
    let desc = AddrDescription { ptr_alloc: None, addr, kind, alloc: Some(region(live)), shadow: Some((0x1000_0020_0000, vec![255; 16].into_iter().chain(vec![0; 64]).collect())), scale: Scale::S8 };
    Report::Device { record, site: Some(site), desc, device: 0 }
}

#[test]
fn heap_buffer_overflow_text_has_the_asan_shape() {
    let t = format_text(&device_report(AddrKind::OverflowRight { distance: 64 }, true, 0x1000_0020_1040));
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("==") && lines[0].ends_with("==ERROR: GPUAddressSanitizer: heap-buffer-overflow on address 0x100000201040"), "{}", lines[0]);
    assert_eq!(lines[1], "WRITE of size 4 in kernel vecAdd(float*, float const*, int) on device 0");
    assert_eq!(lines[2], "    block (3,0,0) thread (64,0,0), at vecadd.cu:12:5");
    assert_eq!(lines[3], "0x100000201040 is located 64 bytes after 4096-byte region [0x100000200000,0x100000201000)");
    assert_eq!(lines[4], "allocated by thread T0 here:");
    assert!(t.contains("Shadow bytes around the buggy address"));
    assert!(t.contains("[00]"), "buggy granule marked");
    assert_eq!(*lines.last().unwrap(), "SUMMARY: GPUAddressSanitizer: heap-buffer-overflow vecadd.cu:12:5 in vecAdd");
}

#[test]
fn use_after_free_names_the_free_stack() {
    let t = format_text(&device_report(AddrKind::UseAfterFree { offset: 16 }, false, 0x1000_0020_0010));
    assert!(t.contains("heap-use-after-free on address 0x100000200010"));
    assert!(t.contains("is located 16 bytes inside of 4096-byte region"));
    let freed = t.find("freed by thread T0 here:").expect("free stack");
    let alloc = t.find("previously allocated by thread T0 here:").expect("alloc stack");
    assert!(freed < alloc);
}

#[test]
fn json_reports_parse_with_stable_fields() {
    let j = format_json(&device_report(AddrKind::OverflowLeft { distance: 4 }, true, 0x1000_001f_fffc));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["kind"], "heap-buffer-overflow");
    assert_eq!(v["access"], "write");
    assert_eq!(v["size"], 4);
    assert_eq!(v["file"], "vecadd.cu");
    assert_eq!(v["line"], 12);
    assert_eq!(v["location"]["side"], "left");
    assert_eq!(v["location"]["distance"], 4);
    assert_eq!(v["block"][0], 3);
    let free = format_json(&Report::Free { call: "cuMemFree".into(), err: FreeError::DoubleFree { ptr: 0x10, info: region(false) }, stack: HostStack::default() });
    let v: serde_json::Value = serde_json::from_str(&free).unwrap();
    assert_eq!(v["kind"], "double-free");
}

#[test]
fn free_and_api_kinds() {
    let r = Report::Free { call: "cuMemFree".into(), err: FreeError::NotBase { ptr: 0x1000_0020_0010, info: region(true) }, stack: HostStack::default() };
    assert_eq!(r.kind(), "bad-free");
    assert!(format_text(&r).contains("not the start of a block"));
    let desc = AddrDescription { ptr_alloc: None, addr: 0x1000_0020_1000, kind: AddrKind::OverflowRight { distance: 0 }, alloc: Some(region(true)), shadow: None, scale: Scale::S7 };
    let api = Report::Api { call: "cuMemcpyHtoD".into(), addr: 0x1000_0020_0000, len: 5000, write: true, desc, stack: HostStack::default() };
    let t = format_text(&api);
    assert!(t.contains("WRITE of size 5000 at 0x100000200000 by host call cuMemcpyHtoD"));
    assert!(t.contains("0 bytes after 4096-byte region"));
}

#[test]
fn uninstrumented_fault_with_an_address_is_attributed_through_the_allocator() {
    use gasan_runtime::faults::FatalFault;
    let addr = 0x1000_0020_1000 + 0x200;
    let desc = AddrDescription { ptr_alloc: None, addr, kind: AddrKind::OverflowRight { distance: 0x200 }, alloc: Some(region(true)), shadow: None, scale: Scale::S8 };
    let f = FatalFault { address: addr, fault_type: 1, access_type: 2, processor_index: 1, reason: 1, timestamp: 5 };
    let r = Report::Fault { cuda_error: 700, call: "cuCtxSynchronize".into(), stack: HostStack::capture(2), fault: Some((f, desc)) };
    assert_eq!(r.kind(), "heap-buffer-overflow");
    let t = format_text(&r);
    assert!(t.lines().next().unwrap().contains(&format!("heap-buffer-overflow on address {addr:#x}")), "{t}");
    assert!(t.contains("WRITE in an uninstrumented kernel"), "{t}");
    assert!(t.contains("512 bytes after"), "{t}");
    let j: serde_json::Value = serde_json::from_str(&format_json(&r)).unwrap();
    assert_eq!(j["address"], format!("{addr:#x}"));
    assert_eq!(j["access"], "write");
    assert_eq!(j["location"]["side"], "right");

    // Without an address the report says what it can, under its own kind.
    let r = Report::Fault { cuda_error: 700, call: "cuCtxSynchronize".into(), stack: HostStack::capture(2), fault: None };
    assert_eq!(r.kind(), "gpu-fault-in-uninstrumented-code");
    assert!(format_text(&r).contains("CUDA error 700 reported by cuCtxSynchronize"));
    assert!(serde_json::from_str::<serde_json::Value>(&format_json(&r)).unwrap()["address"].is_null());
}

#[test]
fn a_report_the_log_cannot_take_goes_to_stderr_with_the_reason() {
    use gasan_runtime::report::{deliver, Delivered};
    let text = format_text(&device_report(AddrKind::OverflowRight { distance: 64 }, true, 0x1000_0020_1040));
    // /proc passes root's access(W_OK) at start-up but takes no new file; a directory that went away.
    for log in ["/proc/gasan-report", "/nonexistent-gasan-dir/report"] {
        let mut stderr = Vec::new();
        assert_eq!(deliver(Some(std::path::Path::new(log)), 4242, &text, &mut stderr), Delivered::StderrInstead, "{log}");
        let said = String::from_utf8(stderr).unwrap();
        let (why, report) = said.split_once('\n').unwrap();
        assert!(why.starts_with(&format!("==gasan== cannot write the report to {log}.4242 (log_path): ")) && why.ends_with("; it follows here"), "{why}");
        assert_eq!(report, text, "the whole report follows");
    }
    // A writable log takes it, and stderr stays quiet; no log path: stderr.
    let dir = std::env::temp_dir().join(format!("gasan-report-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut stderr = Vec::new();
    assert_eq!(deliver(Some(&dir.join("r")), 7, &text, &mut stderr), Delivered::Log);
    assert!(stderr.is_empty());
    assert_eq!(std::fs::read_to_string(dir.join("r.7")).unwrap(), text);
    assert_eq!(deliver(None, 7, &text, &mut stderr), Delivered::Stderr);
    assert_eq!(String::from_utf8(stderr).unwrap(), text);
    let _ = std::fs::remove_dir_all(&dir);
}
