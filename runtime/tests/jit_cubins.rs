//! What a load does with a cubin that has no PTX for the GPU (runtime/src/modules.rs,
//! `plan_cubin` and `image_cubin`), without a GPU: real cubins from gasan-ptxas (checked, with its
//! marker and tables) and from the pinned ptxas (native), and damaged copies of them. Triton's
//! PTX through gasan-ptxas is tested in jit/ptxas/tests/front_end.rs.

mod common;
use gasan_instrument::abi::CONTROL_BLOCK_SYMBOL;
use gasan_instrument::container::{build_elf_fatbin, symbol_data_ranges};
use gasan_jit::{MARKER_SYMBOL, TABLES_SYMBOL};
use gasan_runtime::modules::{image_cubin, plan_cubin, CubinPlan};
use gasan_runtime::options::Options;
use gasan_runtime::report::ModuleSites;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A straight-line kernel (so that `param_bounds` gives its pointer parameters tags): `*q = *p`.
const PTX: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry copy_one(.param .u64 p, .param .u64 q)\n{\n.reg .b64 %rd<3>;\n.reg .b32 %r<2>;\nld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [q];\nld.global.u32 %r1, [%rd1];\nst.global.u32 [%rd2], %r1;\nret;\n}\n";
/// Its one kernel.
const KERNEL: &str = "copy_one";

fn front_end() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("gasan-ptxas")
}

/// The pinned toolchain's ptxas (`$GASAN_CUDA_ROOT`, else installed by scripts/cuda-toolchain.sh).
fn real_ptxas() -> PathBuf {
    let root = common::cuda_root();
    root.join("bin/ptxas")
}

/// [`PTX`] assembled as Triton does (`-lineinfo -v --gpu-name=sm_90a`), through gasan-ptxas
/// (`checked`, default options) or the real ptxas alone.
fn cubin(checked: bool) -> Vec<u8> {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!("gasan-jit-cubins-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("k.ptx"), PTX).unwrap();
    let mut c = Command::new(if checked { front_end() } else { real_ptxas() });
    c.env("GASAN_REAL_PTXAS", real_ptxas()).env("GASAN_OPTIONS", format!("cache_dir={}", d.join("cache").display())).env_remove("GASAN_REAL_PTXAS_BLACKWELL");
    let out = c.args(["-lineinfo", "-v", "--gpu-name=sm_90a"]).arg(d.join("k.ptx")).arg("-o").arg(d.join("k.cubin")).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "{out:?}");
    let b = std::fs::read(d.join("k.cubin")).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
    b
}

/// gasan-ptxas is built next to gasan-run (scripts/test.d/10-cargo.sh builds the workspace first).
fn built() -> bool {
    let ok = front_end().is_file();
    if !ok {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "gasan-ptxas not built next to gasan-run");
        eprintln!("skipped: build the workspace first (gasan-ptxas)");
    }
    ok
}

/// `plan_cubin` with a registry that records what it is handed and answers `id`.
fn plan(elf: &[u8], opts: &str, id: u64) -> (CubinPlan, Vec<ModuleSites>) {
    let mut registered = Vec::new();
    let p = plan_cubin(elf, &(&Options::parse(opts).unwrap()).into(), |m| {
        registered.push(m);
        id
    });
    (p, registered)
}

#[test]
fn a_checked_cubin_registers_its_sites_and_keeps_its_tags() {
    if !built() {
        return;
    }
    let elf = cubin(true);
    let tables = gasan_jit::tables_in_cubin(&elf).unwrap().expect("gasan-ptxas appends its tables");
    let (p, registered) = plan(&elf, "", 7);
    let CubinPlan::Checked { id, param_tags, linked } = p else { panic!("{p:?}") };
    assert!(linked.is_empty(), "one module: no further linked inputs");
    assert_eq!(id, 7, "the registry's id is the module's");
    assert_eq!(registered.len(), 1);
    let sites = registered.into_iter().next().unwrap().into_table();
    assert!(!sites.sites.is_empty());
    assert_eq!(sites, tables.sites);
    assert_eq!(*param_tags, tables.param_tags);
    assert_eq!(param_tags.kernels.keys().collect::<Vec<_>>(), [&KERNEL.to_string()], "{param_tags:?}");
    // The block the control-block write looks up after the load is in the cubin, with its bytes.
    let [ctl] = symbol_data_ranges(&elf, [CONTROL_BLOCK_SYMBOL]);
    assert!(ctl.is_some_and(|r| !r.is_empty()), "{CONTROL_BLOCK_SYMBOL} missing");
    // What the loaders hand over: the cubin itself, or a fatbin whose ELF entry runs on the GPU.
    // SAFETY: `elf` and the fatbin are whole images in memory.
    unsafe {
        assert_eq!(image_cubin(elf.as_ptr().cast(), None).unwrap().as_deref(), Some(&elf[..]));
        let fatbin = build_elf_fatbin(&elf, 90, true);
        assert_eq!(image_cubin(fatbin.as_ptr().cast(), Some(90)).unwrap().as_deref(), Some(&elf[..]));
        assert_eq!(image_cubin(fatbin.as_ptr().cast(), Some(100)).unwrap(), None, "sm_90a SASS does not run on sm_100");
        assert_eq!(image_cubin(fatbin.as_ptr().cast(), None).unwrap(), None);
    }
}

#[test]
fn a_cubin_checked_otherwise_is_foreign_and_registers_nothing() {
    if !built() {
        return;
    }
    let elf = cubin(true);
    // Another process's checks: the stubs go on where these would trap.
    let (p, registered) = plan(&elf, "halt_on_error=0", 1);
    assert!(matches!(&p, CubinPlan::Foreign(why) if why.contains("halt_on_error=1")), "{p:?}");
    assert!(registered.is_empty());
    let (p, _) = plan(&elf, "shadow_scale=7", 1);
    assert!(matches!(&p, CubinPlan::Foreign(why) if why.contains("shadow_scale")), "{p:?}");
    // Another gasan's REVISION (marker bytes 12..16).
    let [marker] = symbol_data_ranges(&elf, [MARKER_SYMBOL]);
    let at = marker.expect("marker").start + 12;
    let mut other = elf.clone();
    let revision = u32::from_le_bytes(other[at..at + 4].try_into().unwrap());
    assert_eq!(revision, gasan_instrument::ptx::REVISION);
    other[at..at + 4].copy_from_slice(&(revision + 1).to_le_bytes());
    let (p, registered) = plan(&other, "", 1);
    assert!(matches!(&p, CubinPlan::Foreign(why) if why.contains(&format!("REVISION {}", revision + 1))), "{p:?}");
    assert!(registered.is_empty());
}

#[test]
fn a_native_cubin_is_native() {
    if !built() {
        return;
    }
    let (p, registered) = plan(&cubin(false), "", 1);
    assert!(matches!(p, CubinPlan::Native), "{p:?}");
    assert!(registered.is_empty());
}

#[test]
fn damaged_cubins_are_named_without_a_panic() {
    if !built() {
        return;
    }
    let elf = cubin(true);
    for cut in [0, 3, 40, 64, elf.len() / 3, elf.len() / 2, elf.len() - 1] {
        let (p, registered) = plan(&elf[..cut], "", 1);
        assert!(matches!(p, CubinPlan::Damaged(_)), "cut at {cut}: {p:?}");
        assert!(registered.is_empty());
    }
    // Tables that do not decompress.
    let [tables] = symbol_data_ranges(&elf, [TABLES_SYMBOL]);
    let t = tables.expect("tables");
    let mut bad = elf.clone();
    bad[t.start + 4..t.end].fill(0xff);
    let (p, registered) = plan(&bad, "", 1);
    assert!(matches!(&p, CubinPlan::Damaged(e) if e.contains(TABLES_SYMBOL)), "{p:?}");
    assert!(registered.is_empty());
    // A marker of another format.
    let [marker] = symbol_data_ranges(&elf, [MARKER_SYMBOL]);
    let mut bad = elf.clone();
    bad[marker.unwrap().start + 8] = 1;
    assert!(matches!(plan(&bad, "", 1).0, CubinPlan::Damaged(e) if e.contains("format 1")));
}
