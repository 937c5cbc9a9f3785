//! Fatbins in real executables and shared libraries built by the pinned nvcc: compressed (zstd,
//! nvcc 13's default for PTX) and uncompressed entries extract to the PTX nvcc emitted.

mod common;
use common::*;
use gasan_instrument::container::{fatbins_in_file, EntryKind, FLAG_ZSTD};
use std::ffi::OsStr;
use std::path::Path;

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/mixed.cu")
}

/// PTX as nvcc embeds it drops comments and blank lines; compare statement by statement.
fn normalize(ptx: &str) -> Vec<String> {
    ptx.lines().map(|l| l.split("//").next().unwrap().split_whitespace().collect::<Vec<_>>().join(" ")).filter(|l| !l.is_empty()).collect()
}

fn build(dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    // An executable needs a main; the corpus file has only kernels.
    let s = dir.join("app.cu");
    if !extra.contains(&"-shared") {
        std::fs::write(&s, format!("#include \"{}\"\nint main() {{ return 0; }}\n", src().display())).unwrap();
    } else {
        std::fs::copy(src(), &s).unwrap();
    }
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("-o"),
        out.as_os_str(),
        s.as_os_str(),
        OsStr::new("-gencode"),
        OsStr::new("arch=compute_75,code=compute_75"),
        OsStr::new("-gencode"),
        OsStr::new("arch=compute_90,code=[compute_90,sm_90]"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    run_tool("nvcc", &args);
    out
}

fn reference_ptx(dir: &Path, arch: &str) -> String {
    let out = dir.join(format!("ref.{arch}.ptx"));
    let s = src();
    run_tool("nvcc", &[OsStr::new("-ptx"), OsStr::new("-arch"), OsStr::new(arch), OsStr::new("-o"), out.as_os_str(), s.as_os_str()]);
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn executables_and_libraries_yield_the_emitted_ptx() {
    let dir = scratch("container");
    let ref90 = normalize(&reference_ptx(&dir, "compute_90"));
    let ref75 = normalize(&reference_ptx(&dir, "compute_75"));
    for (name, extra, compressed) in [
        ("app_default", vec![], true),
        ("app_plain", vec!["-Xfatbin=-compress-all", "-Xfatbin=-compress-mode=none"], false),
        ("app_size", vec!["-Xfatbin=-compress-all", "-Xfatbin=-compress-mode=size"], true),
        ("lib.so", vec!["-shared", "-Xcompiler", "-fPIC"], true),
    ] {
        let bin = build(&dir, name, &extra);
        let bytes = std::fs::read(&bin).unwrap();
        let fatbins = fatbins_in_file(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let entries: Vec<_> = fatbins.iter().flat_map(|(_, f)| f.entries.iter()).collect();
        let ptx: Vec<_> = entries.iter().filter(|e| e.kind == EntryKind::Ptx).collect();
        assert_eq!(ptx.len(), 2, "{name}: PTX entries");
        assert_eq!(ptx.iter().any(|e| e.flags & FLAG_ZSTD != 0 || e.is_compressed()), compressed, "{name}: compression");
        for e in entries.iter().filter(|e| e.kind == EntryKind::Elf) {
            let p = e.payload().unwrap();
            assert_eq!(&p[..4], b"\x7fELF", "{name}: cubin");
            assert_eq!(u16::from_le_bytes([p[18], p[19]]), 190, "{name}: EM_CUDA");
        }
        let best = fatbins.iter().find_map(|(_, f)| f.best_ptx(90)).expect("PTX for sm_90");
        assert_eq!(best.arch, 90);
        assert_eq!(normalize(&best.ptx().unwrap()), ref90, "{name}: sm_90 PTX");
        let older = fatbins.iter().find_map(|(_, f)| f.best_ptx(80)).expect("PTX for sm_80");
        assert_eq!(older.arch, 75);
        assert_eq!(normalize(&older.ptx().unwrap()), ref75, "{name}: compute_75 PTX");
    }
}

#[test]
fn rdc_objects_use_the_relocatable_section() {
    let dir = scratch("container-rdc");
    let obj = dir.join("m.o");
    let s = src();
    run_tool("nvcc", &[OsStr::new("-c"), OsStr::new("-rdc=true"), OsStr::new("-arch=sm_90"), OsStr::new("-o"), obj.as_os_str(), s.as_os_str()]);
    let bytes = std::fs::read(&obj).unwrap();
    let fatbins = fatbins_in_file(&bytes).unwrap();
    assert!(fatbins.iter().any(|(sec, f)| sec == "__nv_relfatbin" && f.best_ptx(90).is_some()), "{:?}", fatbins.iter().map(|(s, _)| s).collect::<Vec<_>>());
}

#[test]
fn extract_command_writes_every_entry() {
    let dir = scratch("container-extract");
    let bin = build(&dir, "app", &[]);
    let out = dir.join("entries");
    let listing = gasan_instrument::container::extract_command(&bin, Some(&out)).unwrap();
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(listing.lines().count(), files);
    assert!(listing.contains("ptx") && listing.contains("cubin"));
    assert!(gasan_instrument::container::extract_command(&dir.join("missing"), None).is_err());
}
