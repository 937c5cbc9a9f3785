//! gasan-ptxas: a ptxas front end for frameworks that compile kernels at run time (Triton,
//! torch.compile's Inductor, JAX/XLA). gasan-run points them at it (`TRITON_PTXAS_PATH`,
//! `TRITON_PTXAS_BLACKWELL_PATH`, `PATH`, and JAX's CUDA data directory through gasan's Python
//! hook); it takes ptxas's command line unchanged:
//!
//! * `--version`: the real ptxas's answer plus a line naming gasan's `REVISION` and the checks'
//!   options ([`gasan_jit::version_answer`]), so Triton's cache key differs from a native run's;
//! * a whole-program compile of one PTX file: the PTX is checked with the program's options (from
//!   `GASAN_OPTIONS`, as gasan-run hands them to the runtime), marked for the runtime with its site
//!   table and parameter tags ([`gasan_jit::marker`]), and the real ptxas compiles the checked copy
//!   with the same arguments;
//! * anything else ([`gasan_jit::args::Plan::PassThrough`]) goes to the real ptxas as it is, and
//!   so does everything with `instrument=0`.
//!
//! The compile never fails because of gasan: PTX the rewriter refuses, bad `GASAN_OPTIONS`, or
//! checked PTX the real ptxas refuses, give a warning on standard error (Triton keeps it in the
//! ptxas log) and the original is assembled, unchecked. Which real ptxas: [`gasan_jit::real`].
//!
//! Exit status: the real ptxas's (128 + the signal when it was killed by one); 1 when no real ptxas
//! can be found or run.

#![forbid(unsafe_code)]

use gasan_instrument::ptx::InstrumentOptions;
use gasan_jit::args::{plan, Plan};
use gasan_jit::real::{self, Role};
use gasan_runtime::options::Options;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};

fn warn(msg: impl std::fmt::Display) {
    eprintln!("gasan-ptxas: warning: {msg}");
}

/// The instrumenter's options for the program's options, as the runtime gives them to modules it
/// checks itself, without the aligned-pool form: that form is valid only with the pool this
/// process cannot see, and the general form is valid with every pool.
fn instrument_options(opts: &Options) -> InstrumentOptions {
    gasan_runtime::modules::ModuleOptions::from(opts).instrument_options(false)
}

/// The real ptxas's exit status as ours.
fn exit_code(s: ExitStatus) -> ExitCode {
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

/// Runs the real ptxas with `args`, standard streams inherited.
fn pass_through(real: &Path, args: &[OsString]) -> ExitCode {
    match Command::new(real).args(args).status() {
        Ok(s) => exit_code(s),
        Err(e) => {
            eprintln!("gasan-ptxas: error: cannot run {}: {e}", real.display());
            ExitCode::FAILURE
        }
    }
}

/// `--version`: the real answer with gasan's line (the real answer alone without options to check
/// with: then nothing is checked, and the cubins are native).
fn version(real: &Path, args: &[OsString], opts: Option<&Options>) -> ExitCode {
    let out = match Command::new(real).args(args).stderr(Stdio::inherit()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gasan-ptxas: error: cannot run {}: {e}", real.display());
            return ExitCode::FAILURE;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let answer = match (opts, out.status.success()) {
        (Some(o), true) => gasan_jit::version_answer(&text, &instrument_options(o)),
        _ => text.into_owned(),
    };
    let _ = std::io::stdout().write_all(answer.as_bytes());
    exit_code(out.status)
}

/// Checks `ptx`, the text of the PTX file at `args[input]`, and compiles the checked copy; the
/// original when anything fails.
fn check(real: &Path, args: &[OsString], input: usize, ptx: &str, opts: &Options) -> ExitCode {
    let path = PathBuf::from(&args[input]);
    let iopts = instrument_options(opts);
    let checked = match gasan_jit::check_module(ptx, &iopts, &opts.code_key()) {
        Ok(c) => c,
        Err(e) => {
            warn(format!("{}: {e}; assembling it unchecked", path.display()));
            return pass_through(real, args);
        }
    };
    if opts.verbosity >= 1 {
        let t = checked.instrumented.stats.total();
        eprintln!("gasan-ptxas: {}: {} accesses, {} checked, {} eliminated, {} unknown; module key {}", path.display(), t.found, t.checked, t.eliminated, t.unknown, checked.marker.key_hex());
    }
    let tmp = tempfile::Builder::new().prefix("gasan-checked-").suffix(".ptx").tempfile().and_then(|mut f| {
        f.write_all(checked.text.as_bytes())?;
        f.flush()?;
        Ok(f)
    });
    let tmp = match tmp {
        Ok(t) => t,
        Err(e) => {
            warn(format!("cannot write the checked PTX ({e}); assembling {} unchecked", path.display()));
            return pass_through(real, args);
        }
    };
    let mut checked_args = args.to_vec();
    checked_args[input] = tmp.path().as_os_str().to_owned();
    // Its messages are shown only when it succeeds: on failure the original's are the ones to see.
    let out = match Command::new(real).args(&checked_args).stdout(Stdio::inherit()).stderr(Stdio::piped()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gasan-ptxas: error: cannot run {}: {e}", real.display());
            return ExitCode::FAILURE;
        }
    };
    if out.status.success() {
        let _ = std::io::stderr().write_all(&out.stderr);
        return ExitCode::SUCCESS;
    }
    // The original, with its messages: if it fails too, the fault is not gasan's (a bad argument,
    // bad PTX) and the caller sees exactly what the real ptxas says of it.
    let original = match Command::new(real).args(args).stdout(Stdio::inherit()).stderr(Stdio::piped()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gasan-ptxas: error: cannot run {}: {e}", real.display());
            return ExitCode::FAILURE;
        }
    };
    if original.status.success() {
        let log = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = log.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
        warn(format!("{} refused the checked copy of {} ({}): {}; assembled the original unchecked", real.display(), path.display(), out.status, tail.join(" | ")));
    }
    let _ = std::io::stderr().write_all(&original.stderr);
    exit_code(original.status)
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let program = PathBuf::from(argv.next().unwrap_or_default());
    let args: Vec<OsString> = argv.collect();
    let role = Role::from_program(&program);
    let me = std::env::current_exe().unwrap_or_else(|_| program.clone());
    let words: Option<Vec<String>> = args.iter().map(|a| a.to_str().map(String::from)).collect();
    let what = match &words {
        Some(w) => plan(w),
        None => Plan::PassThrough("an argument is not UTF-8".into()),
    };
    // PTX checked already comes from gasan's runtime compiling its own modules (it finds this
    // front end first on gasan-run's PATH): it goes to the ptxas PATH and CUDA_HOME name, not
    // to a Triton's bundled one (an older ptxas may refuse the PTX version of a newer CUDA).
    let input_text = match &what {
        Plan::Check { input } => std::fs::read_to_string(&args[*input]).ok(),
        _ => None,
    };
    let checked_already = input_text.as_deref().is_some_and(|t| t.contains(gasan_instrument::abi::CONTROL_BLOCK_SYMBOL));
    let maps = if checked_already { None } else { real::parent_maps() };
    let Some((real, _how)) = real::find(role, |k| std::env::var_os(k), maps.as_deref(), &me) else {
        eprintln!("gasan-ptxas: error: no real {} found: set {} ({}), or put one on PATH or in $CUDA_HOME/bin", role.tool_name(), role.real_env(), role.real_env_source());
        return ExitCode::FAILURE;
    };
    // instrument=0 checks nothing: the front end is the real ptxas (its cubins are native, and so
    // is its version answer).
    let opts = Options::env_string().and_then(|s| Options::parse(&s));
    if checked_already || opts.as_ref().is_ok_and(|o| !o.instrument) {
        return pass_through(&real, &args);
    }
    match (what, opts, input_text) {
        (Plan::Version, opts, _) => version(&real, &args, opts.as_ref().ok()),
        (Plan::Check { input }, Ok(opts), Some(ptx)) => check(&real, &args, input, &ptx, &opts),
        // Unreadable or not text: the real ptxas says what is wrong with it.
        (Plan::Check { .. }, Ok(_), None) => pass_through(&real, &args),
        (Plan::Check { input }, Err(e), _) => {
            warn(format!("GASAN_OPTIONS: {e}; assembling {} unchecked", args[input].to_string_lossy()));
            pass_through(&real, &args)
        }
        (Plan::PassThrough(why), Ok(o), _) => {
            if o.verbosity >= 1 {
                eprintln!("gasan-ptxas: not checked: {why}");
            }
            pass_through(&real, &args)
        }
        (Plan::PassThrough(_), Err(_), _) => pass_through(&real, &args),
    }
}
