//! Checked PTX compiled to cubins and the on-disk cache, on the CPU: ptxas on real nvcc output
//! (instrumented), failures told apart, concurrent compiles and writers (threads and processes)
//! never leaving a torn entry, and gasan-run's `--cache-list` / `--cache-clear`.
//!
//! The compile tests need the pinned toolchain: `GASAN_CUDA_ROOT` (scripts/test.sh sets it). Without
//! it they print `SKIPPED` and pass.

use gasan_instrument::container::{self, EntryKind};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use gasan_instrument::shadow::Scale;
use gasan_runtime::cache::Cache;
use gasan_runtime::sass::{self, Compile};
use object::{Object, ObjectSection};
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sass-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cuda_root(test: &str) -> Option<PathBuf> {
    let r = std::env::var_os("GASAN_CUDA_ROOT").map(PathBuf::from);
    if r.is_none() {
        eprintln!("SKIPPED {test}: GASAN_CUDA_ROOT is not set (scripts/test.sh sets it)");
    }
    r
}

const SRC: &str = r#"
__global__ void add(float* a, const float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i]; }
__global__ void stencil(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1) out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}
"#;

/// nvcc's PTX for [`SRC`], instrumented as the runtime does by default.
fn checked_ptx(root: &Path, dir: &Path) -> String {
    let cu = dir.join("k.cu");
    std::fs::write(&cu, SRC).unwrap();
    let ptx = dir.join("k.ptx");
    let out = Command::new(root.join("bin/nvcc")).args(["-ptx", "-O3", "-lineinfo", "-arch=compute_90", "-o"]).arg(&ptx).arg(&cu).output().unwrap();
    assert!(out.status.success(), "nvcc: {}", String::from_utf8_lossy(&out.stderr));
    let opts = InstrumentOptions { scale: Scale::S8, optimize: true, recover: false, aligned_pool: true, hoist_loops: true, param_bounds: true, outside_checks: false };
    instrument_ptx(&std::fs::read_to_string(&ptx).unwrap(), &opts).unwrap().ptx
}

#[test]
fn checked_ptx_compiles_to_a_cubin_that_loaders_can_take() {
    let Some(root) = cuda_root("checked_ptx_compiles_to_a_cubin_that_loaders_can_take") else {
        return;
    };
    let d = scratch("compile");
    let ptx = checked_ptx(&root, &d);
    let cache = Cache::new(d.join("cache"), 1 << 30);
    let ptxas = root.join("bin/ptxas");
    let target = sass::target_for(&ptx, 90);
    assert_eq!(target, "sm_90");
    let c = Compile { ptxas: &ptxas, target: &target, flags: &[], split: 0 };
    let cubin = sass::compile(&c, &cache, ptx.as_bytes(), "entry.cubin").unwrap();
    assert!(sass::is_cubin(&cubin));
    // Whole-program: both kernels are in it, with the control block as a global (not relocatable).
    let text = String::from_utf8_lossy(&cubin);
    assert!(text.contains(".text._Z3addPfPKfi") && text.contains(".text._Z7stencilPKfPfi"), "kernels in the cubin");
    assert_eq!(u16::from_le_bytes([cubin[16], cubin[17]]), 2, "ET_EXEC, not a relocatable object");
    // Stored under its name, byte for byte; no temporary left behind.
    assert_eq!(cache.get("entry.cubin").unwrap(), cubin);
    assert!(std::fs::read_dir(&cache.dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".gasan-tmp")));
    // The fatbin the fatbin loaders get holds it as an sm_90 ELF entry.
    let fb = container::build_elf_fatbin(&cubin, 90, false);
    let parsed = container::Fatbin::parse(&fb).unwrap();
    assert_eq!(parsed.entries.len(), 1);
    assert_eq!((parsed.entries[0].kind, parsed.entries[0].arch), (EntryKind::Elf, 90));
    assert!(parsed.has_sass_for(90));
    assert_eq!(&parsed.entries[0].payload().unwrap()[..cubin.len()], &cubin[..]);
    // No line tables or PTX text unless the loader asks for them (the PTX has `.loc` lines).
    let sections = |b: &[u8]| object::read::File::parse(b).map(|f| f.sections().filter_map(|s| s.name().ok().map(String::from)).collect::<Vec<_>>()).unwrap_or_default();
    let plain = sections(&cubin);
    assert!(!plain.is_empty(), "the cubin's sections are read");
    // (`.debug_frame`, the unwind table, is in every cubin.)
    let line_tables = [".debug_line", ".nv_debug_line_sass", ".nv_debug_ptx_txt"];
    assert!(!plain.iter().any(|s| line_tables.contains(&s.as_str())), "no line tables or PTX text: {plain:?}");
    let lineinfo = sass::jit_flags(&[(13, 1)]).unwrap();
    let with_lines = sass::compile(&Compile { flags: &lineinfo, ..c }, &cache, ptx.as_bytes(), "lines.cubin").unwrap();
    let lined = sections(&with_lines);
    assert!(lined.iter().any(|s| s == ".debug_line") && lined.iter().any(|s| s == ".nv_debug_ptx_txt"), "GENERATE_LINE_INFO keeps line tables: {lined:?}");
    assert!(with_lines.len() > cubin.len());
    // The control block's initial data is in the file, where a preset writes it before loading
    // (ControlBlocks::preset): CONTROL_BLOCK_SIZE zero bytes of `.nv.constant3`, nowhere else touched.
    let ctl = gasan_instrument::abi::CONTROL_BLOCK_SYMBOL;
    let heap = gasan_instrument::device_heap::heap_symbol(ctl);
    let [ctl_range, heap_range] = gasan_instrument::container::symbol_data_ranges(&cubin, [ctl, &heap]);
    let range = ctl_range.expect("the control block has file data");
    assert_eq!(range.len(), gasan_instrument::abi::CONTROL_BLOCK_SIZE);
    assert!(cubin[range.clone()].iter().all(|&b| b == 0));
    let elf = object::read::File::parse(&cubin[..]).unwrap();
    let bank = elf.section_by_name(".nv.constant3").expect("constant bank 3");
    let (bank_off, bank_len) = bank.file_range().unwrap();
    assert!(range.start as u64 >= bank_off && range.end as u64 <= bank_off + bank_len, "{range:?} in .nv.constant3 at {bank_off}+{bank_len}");
    let block = gasan_instrument::abi::ControlBlock { pool_base: 1 << 44, pool_size: 1 << 40, module_id: 7, ..Default::default() };
    let mut preset = cubin.clone();
    preset[range.clone()].copy_from_slice(&block.to_bytes());
    assert!(sass::is_cubin(&preset));
    let data = object::read::File::parse(&preset[..]).unwrap().section_by_name(".nv.constant3").unwrap().data().unwrap().to_vec();
    let at = range.start - bank_off as usize;
    assert_eq!(data[at..at + gasan_instrument::abi::CONTROL_BLOCK_SIZE], block.to_bytes());
    assert_eq!(preset.iter().zip(&cubin).filter(|(a, b)| a != b).count(), block.to_bytes().iter().filter(|&&b| b != 0).count(), "only the block's bytes change");
    // No in-kernel malloc here: no heap symbol. Absent symbols and non-ELF input give nothing.
    assert_eq!(heap_range, None);
    assert_eq!(gasan_instrument::container::symbol_data_ranges(&cubin, ["no_such_symbol"]), [None]);
    assert_eq!(gasan_instrument::container::symbol_data_ranges(b"not an elf file at all", [ctl]), [None]);
    // JIT options become flags: a register cap changes the code, and the key.
    let flags = sass::jit_flags(&[(0, 16), (13, 1)]).unwrap();
    let c16 = Compile { flags: &flags, ..c };
    let capped = sass::compile(&c16, &cache, ptx.as_bytes(), "capped.cubin").unwrap();
    assert!(sass::is_cubin(&capped) && capped != cubin);
}

#[test]
fn compile_failures_say_whether_to_remember_them() {
    let d = scratch("fail");
    let cache = Cache::new(d.join("cache"), 1 << 30);
    let missing = d.join("no-such-ptxas");
    let c = Compile { ptxas: &missing, target: "sm_90", flags: &[], split: 0 };
    let e = sass::compile(&c, &cache, b".version 9.0\n", "x.cubin").unwrap_err();
    assert!(!e.permanent && e.message.contains("cannot run"), "{e:?}");
    assert!(!cache.has("x.cubin"));
    let Some(root) = cuda_root("compile_failures_say_whether_to_remember_them (ptxas part)") else {
        return;
    };
    let ptxas = root.join("bin/ptxas");
    let c = Compile { ptxas: &ptxas, ..c };
    let e = sass::compile(&c, &cache, b".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }\n", "x.cubin").unwrap_err();
    assert!(e.permanent && e.message.contains("-arch=sm_90"), "{e:?}");
    assert!(!cache.has("x.cubin"));
    assert!(cache.entries().is_empty(), "nothing left behind: {:?}", cache.entries());
}

#[test]
fn concurrent_compiles_of_one_key_are_harmless() {
    let Some(root) = cuda_root("concurrent_compiles_of_one_key_are_harmless") else {
        return;
    };
    let d = scratch("same-key");
    let ptx = checked_ptx(&root, &d);
    let cache = Cache::new(d.join("cache"), 1 << 30);
    let ptxas = root.join("bin/ptxas");
    let results: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (cache, ptx, ptxas) = (&cache, &ptx, &ptxas);
                s.spawn(move || sass::compile(&Compile { ptxas, target: "sm_90", flags: &[], split: 1 }, cache, ptx.as_bytes(), "k.sm_90.cubin").unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stored = cache.get("k.sm_90.cubin").unwrap();
    assert!(sass::is_cubin(&stored));
    for r in &results {
        assert_eq!(r.len(), stored.len(), "every compile of the key made the same cubin");
    }
    assert_eq!(std::fs::read_dir(&cache.dir).unwrap().count(), 1, "one entry, no temporaries");
}

/// Content of writer `w`: recognisable, and a different length for each writer.
fn content(w: usize) -> Vec<u8> {
    (0..(1 << 19) + w * 4099).map(|i| (i as u8).wrapping_mul(31) ^ (w as u8)).collect()
}

const TORN_ENTRY: &str = "00000000000000000000000000000000000000000000000000000000000000aa.sm_90.cubin";

/// Child half of [`processes_writing_one_entry_never_tear_it`]: writes its content 40 times.
#[test]
fn writer_process() {
    let (Some(dir), Some(w)) = (std::env::var_os("GASAN_TEST_CACHE_DIR"), std::env::var("GASAN_TEST_WRITER").ok()) else {
        return;
    };
    let c = Cache::new(PathBuf::from(dir), 1 << 30);
    let data = content(w.parse().unwrap());
    for _ in 0..40 {
        c.put(TORN_ENTRY, &data).unwrap();
    }
}

#[test]
fn processes_writing_one_entry_never_tear_it() {
    let d = scratch("torn-processes");
    let c = Cache::new(d.clone(), 1 << 30);
    let me = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..4)
        .map(|w| {
            Command::new(&me)
                .args(["--exact", "writer_process", "--test-threads", "1"])
                .env("GASAN_TEST_CACHE_DIR", &d)
                .env("GASAN_TEST_WRITER", w.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut reads = 0;
    let mut running = kids;
    while !running.is_empty() {
        if let Some(b) = c.get(TORN_ENTRY) {
            assert!((0..4).any(|w| b == content(w)), "torn read: {} bytes", b.len());
            reads += 1;
        }
        running.retain_mut(|k| k.try_wait().unwrap().is_none());
    }
    let b = c.get(TORN_ENTRY).expect("written");
    assert!((0..4).any(|w| b == content(w)));
    assert!(c.entries().iter().all(|e| e.kind != "temporary"), "no temporary left: {:?}", c.entries());
    eprintln!("{reads} reads while 4 processes wrote");
}

fn gasan_run() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gasan-run"));
    c.env_remove("GASAN_OPTIONS");
    c
}

#[test]
fn cli_lists_and_clears_the_cache() {
    let d = scratch("cli");
    let c = Cache::new(d.clone(), 1 << 30);
    let k = "1".repeat(64);
    c.put(&format!("{k}.ptx"), b"checked").unwrap();
    c.put(&format!("{k}.sites.json"), b"[]").unwrap();
    c.put(&format!("{k}.sm_90.cubin"), &[7u8; 3000]).unwrap();
    std::fs::write(d.join("notes.txt"), "not gasan's").unwrap();
    let list = gasan_run().arg("--cache-dir").arg(&d).arg("--cache-list").output().unwrap();
    assert!(list.status.success());
    let out = String::from_utf8(list.stdout).unwrap();
    for want in [format!("{k}.sm_90.cubin"), format!("{k}.ptx"), format!("{k}.sites.json"), "cubin".into(), "3000".into(), "3 files".into(), "1 checked-ptx, 1 cubin, 1 sites".into()] {
        assert!(out.contains(&want), "--cache-list lacks {want:?}:\n{out}");
    }
    assert!(!out.contains("notes.txt"), "{out}");
    // The same through GASAN_OPTIONS, with the budget it reports.
    let list = gasan_run().env("GASAN_OPTIONS", format!("cache_dir={}:cache_size_mb=7", d.display())).arg("--cache-list").output().unwrap();
    assert!(String::from_utf8(list.stdout).unwrap().contains("of 7 MiB"));
    let clear = gasan_run().arg("--cache-dir").arg(&d).arg("--cache-clear").output().unwrap();
    assert!(clear.status.success());
    assert!(String::from_utf8(clear.stdout).unwrap().contains("removed 3 files"));
    assert!(c.entries().is_empty());
    assert!(d.join("notes.txt").exists(), "other files stay");
    let list = gasan_run().arg("--cache-dir").arg(&d).arg("--cache-list").output().unwrap();
    assert!(String::from_utf8(list.stdout).unwrap().contains("0 files"));
    // A cache action takes no program; a bad option is still refused with status 2.
    let both = gasan_run().args(["--cache-list", "/bin/true"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
    let bad = gasan_run().args(["--cache-size-mb", "0", "--cache-list"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cache_size_mb"));
}
