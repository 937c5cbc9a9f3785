//! What a process that sees several GPUs pays per checked access: its modules are instrumented
//! without the aligned-pool form (every control block names the whole span of the GPUs' pools,
//! docs/design.md "One pool per device, in one span"), so each check tests the pool range and
//! indexes the shadow with 64-bit arithmetic instead of 32-bit. Measured on the CPU as code: the
//! checked PTX of sample modules (instrument/tests) with the options a one-GPU process uses
//! (aligned) and a several-GPU one uses (span), counting the PTX instructions the rewriter added
//! per check and, when ptxas is found (`--ptxas` option's lookup: PATH, CUDA_HOME, the pinned
//! toolchain under GASAN_CACHE), the SASS instructions of each cubin for sm_90 (16 bytes each).
//! Not timed: GPU time per access needs a GPU (benches/).
//!
//!     cargo run --release -p gasan-runtime --example span_check_cost [PTX FILES...]

use gasan_runtime::modules::ModuleOptions;
use gasan_runtime::options::Options;
use object::{Object, ObjectSection};
use std::path::{Path, PathBuf};
use std::process::Command;

/// PTX instructions the rewriter added (its marked lines that are instructions).
fn added_instructions(ptx: &str) -> usize {
    ptx.lines()
        .filter(|l| l.contains(gasan_instrument::ptx::MARKER))
        .map(|l| l.split(gasan_instrument::ptx::MARKER).next().unwrap_or("").trim())
        .filter(|code| code.ends_with(';') && !code.starts_with('.') && !code.starts_with("//"))
        .count()
}

/// SASS instructions in the cubin ptxas makes of `ptx` for sm_90 (its `.text.*` sections).
fn sass_instructions(ptxas: &Path, ptx: &str, dir: &Path, name: &str) -> Option<u64> {
    let (src, cubin) = (dir.join(format!("{name}.ptx")), dir.join(format!("{name}.cubin")));
    std::fs::write(&src, ptx).ok()?;
    let out = Command::new(ptxas).args(["-arch", "sm_90", "-o"]).arg(&cubin).arg(&src).output().ok()?;
    if !out.status.success() {
        eprintln!("ptxas {name}: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let bytes = std::fs::read(&cubin).ok()?;
    let elf = object::File::parse(&*bytes).ok()?;
    Some(elf.sections().filter(|s| s.name().is_ok_and(|n| n.starts_with(".text."))).map(|s| s.size()).sum::<u64>() / 16)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files: Vec<PathBuf> = match std::env::args().skip(1).map(PathBuf::from).collect::<Vec<_>>() {
        f if !f.is_empty() => f,
        _ => vec![root.join("instrument/tests/corpus/ptx_sample.ptx"), root.join("instrument/tests/data/loops.ptx")],
    };
    let opts = ModuleOptions::from(&Options::default());
    let env = |k: &str| std::env::var_os(k);
    let toolchain = std::env::var_os("GASAN_CACHE").map(|c| PathBuf::from(c).join("cuda-13.0/bin/ptxas")).filter(|p| p.exists());
    let ptxas = gasan_runtime::sass::find_ptxas(None, env).or(toolchain);
    let dir = std::env::temp_dir().join(format!("gasan-span-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("options: {:?} (aligned: one GPU; span: several)", opts.instrument_options(false));
    println!("ptxas: {}", ptxas.as_deref().map_or("not found (no SASS counts)".into(), |p| p.display().to_string()));
    for f in &files {
        let ptx = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let mut row = Vec::new();
        for aligned in [true, false] {
            let out = gasan_instrument::ptx::instrument_ptx(&ptx, &opts.instrument_options(aligned)).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let checks = out.stats.total().checked.max(1) as f64;
            let added = added_instructions(&out.ptx);
            let form = if aligned { "aligned" } else { "span" };
            let sass = ptxas.as_deref().and_then(|p| sass_instructions(p, &out.ptx, &dir, &format!("{name}-{form}")));
            row.push((form, out.stats.total().checked, added, added as f64 / checks, sass));
        }
        let native = ptxas.as_deref().and_then(|p| sass_instructions(p, &ptx, &dir, &format!("{name}-native")));
        println!("{name}: native SASS {}", native.map_or("-".into(), |n| n.to_string()));
        for (form, checks, added, per, sass) in &row {
            println!("  {form:7} {checks} checks, {added} PTX instructions added ({per:.1} a check), SASS {}", sass.map_or("-".into(), |n| n.to_string()));
        }
        let (a, s) = (&row[0], &row[1]);
        if let (Some(sa), Some(ss)) = (a.4, s.4) {
            println!(
                "  span - aligned: {} PTX instructions ({:.1} a check), {} SASS instructions ({:.1} a check)",
                s.2 as i64 - a.2 as i64,
                (s.2 as f64 - a.2 as f64) / a.1.max(1) as f64,
                ss as i64 - sa as i64,
                (ss as f64 - sa as f64) / a.1.max(1) as f64
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
