//! gasan-run: runs a CUDA program with the gasan runtime preloaded.

use clap::Parser;
use gasan_runtime::options::Options;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(name = "gasan-run", version, about = "Run a CUDA program under gasan, the GPU AddressSanitizer",
          after_help = "Options may also be given as GASAN_OPTIONS=name=value:name=value (flags win).")]
struct Cli {
    /// 1: stop at the first error; 0: report and continue (recover mode).
    #[arg(long)]
    halt_on_error: Option<u8>,
    /// Exit code after an error report (default 1).
    #[arg(long)]
    exitcode: Option<i32>,
    /// Write reports to PATH.<pid> instead of stderr.
    #[arg(long)]
    log_path: Option<String>,
    /// Shadow scale: 7 (GASan-128) or 8 (GASan-256).
    #[arg(long)]
    shadow_scale: Option<u32>,
    /// Redzone scale L: redzone = max(L*size/16, min_redzone).
    #[arg(long)]
    redzone: Option<u64>,
    /// Minimum redzone B in bytes (power of two >= 256).
    #[arg(long)]
    min_redzone: Option<u64>,
    /// MiB of stream-ordered frees kept mapped until released (freed ranges are never reused)
    #[arg(long)]
    quarantine_size_mb: Option<u64>,
    #[arg(long)]
    detect_leaks: Option<u8>,
    #[arg(long)]
    print_limit: Option<u32>,
    #[arg(long)]
    malloc_context_size: Option<u32>,
    #[arg(long)]
    suppressions: Option<PathBuf>,
    /// text or json.
    #[arg(long)]
    report_format: Option<String>,
    /// 0: allocation-level checks only (no PTX instrumentation).
    #[arg(long)]
    instrument: Option<u8>,
    /// 0: check every access in every loop iteration (no range tests at loop entry).
    #[arg(long)]
    hoist_loops: Option<u8>,
    #[arg(long)]
    verbosity: Option<u32>,
    #[arg(long)]
    pool_size: Option<u64>,
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true)]
    program: Vec<String>,
}

fn run(cli: Cli) -> Result<std::io::Error, String> {
    let mut opts = Options::from_env().map_err(|e| format!("GASAN_OPTIONS: {e}"))?;
    let mut set = |k: &str, v: Option<String>| -> Result<(), String> {
        match v {
            Some(v) => opts.set(k, &v).map_err(|e| format!("--{}: {e}", k.replace('_', "-"))),
            None => Ok(()),
        }
    };
    set("halt_on_error", cli.halt_on_error.map(|v| v.to_string()))?;
    set("exitcode", cli.exitcode.map(|v| v.to_string()))?;
    set("log_path", cli.log_path)?;
    set("shadow_scale", cli.shadow_scale.map(|v| v.to_string()))?;
    set("redzone", cli.redzone.map(|v| v.to_string()))?;
    set("min_redzone", cli.min_redzone.map(|v| v.to_string()))?;
    set("quarantine_size_mb", cli.quarantine_size_mb.map(|v| v.to_string()))?;
    set("detect_leaks", cli.detect_leaks.map(|v| v.to_string()))?;
    set("print_limit", cli.print_limit.map(|v| v.to_string()))?;
    set("malloc_context_size", cli.malloc_context_size.map(|v| v.to_string()))?;
    set("suppressions", cli.suppressions.map(|p| p.display().to_string()))?;
    set("report_format", cli.report_format)?;
    set("instrument", cli.instrument.map(|v| v.to_string()))?;
    set("hoist_loops", cli.hoist_loops.map(|v| v.to_string()))?;
    set("verbosity", cli.verbosity.map(|v| v.to_string()))?;
    set("pool_size", cli.pool_size.map(|v| v.to_string()))?;
    set("cache_dir", cli.cache_dir.map(|p| p.display().to_string()))?;

    let exe = std::env::current_exe().map_err(|e| format!("cannot locate gasan-run: {e}"))?;
    let lib = exe.with_file_name("libgasan_runtime.so");
    if !lib.exists() {
        return Err(format!("runtime library not found at {} (build with `cargo build --release`)", lib.display()));
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let (prog, args) = cli.program.split_first().expect("clap requires a program");
    Ok(Command::new(prog).args(args).env("LD_PRELOAD", preload).env("GASAN_OPTIONS", opts.to_env_string()).exec())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(exec_err) => {
            eprintln!("gasan-run: cannot run program: {exec_err}");
            ExitCode::from(127)
        }
        Err(e) => {
            eprintln!("gasan-run: error: {e}");
            ExitCode::from(2)
        }
    }
}
