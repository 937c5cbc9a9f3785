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
use gasan_jit::occupancy;
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
        (Some(o), true) => gasan_jit::version_answer(&text, &instrument_options(o), o.match_occupancy),
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
    // The native twin compiles alongside the checked copy, for its register counts.
    let native = if opts.match_occupancy { NativeTwin::start(real, args) } else { None };
    // Its messages are shown only when it succeeds: on failure the original's are the ones to see.
    let out = match Command::new(real).args(&checked_args).stdout(Stdio::inherit()).stderr(Stdio::piped()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gasan-ptxas: error: cannot run {}: {e}", real.display());
            return ExitCode::FAILURE;
        }
    };
    if out.status.success() {
        let matched = native.and_then(|n| n.match_occupancy(real, &checked_args, input, &checked.text, opts.verbosity));
        let _ = std::io::stderr().write_all(matched.as_deref().unwrap_or(&out.stderr));
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

/// The original PTX compiled beside the checked copy, into a file of its own, for its kernels'
/// registers ([`gasan_jit::occupancy`]).
struct NativeTwin {
    child: std::process::Child,
    cubin: tempfile::TempPath,
    /// Where the compile's output path is in its arguments, and the SM it compiles for.
    output: (usize, usize),
    sm: occupancy::Sm,
}

impl NativeTwin {
    /// Starts the native compile, where the command line allows a match: it names its output and
    /// a GPU the occupancy table knows, and sets no registers or blocks per SM itself.
    fn start(real: &Path, args: &[OsString]) -> Option<NativeTwin> {
        let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let c = gasan_jit::args::compile(&words);
        let sm = occupancy::Sm::of(c.gpu_name.as_deref()?)?;
        let output = c.output.filter(|_| !c.registers_set)?;
        let cubin = tempfile::Builder::new().prefix("gasan-native-").suffix(".cubin").tempfile().ok()?.into_temp_path();
        let child = Command::new(real).args(gasan_jit::args::replaced(args, output, &cubin)).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        Some(NativeTwin { child, cubin, output, sm })
    }

    /// After the checked copy compiled (`checked_args`, `text`): where a checked kernel fits fewer
    /// blocks on an SM than its native twin, compiles the checked text again asking for the
    /// native count and, where that succeeds, puts its cubin in the output's place. Returns that
    /// compile's messages (to show instead of the first's), `None` where nothing changed.
    fn match_occupancy(mut self, real: &Path, checked_args: &[OsString], input: usize, text: &str, verbosity: u32) -> Option<Vec<u8>> {
        let native_ok = self.child.wait().ok()?.success();
        let output = PathBuf::from(checked_args[self.output.0].to_string_lossy()[self.output.1..].to_string());
        if !native_ok {
            return None;
        }
        let resources = |path: &Path| std::fs::read(path).map_err(|e| e.to_string()).and_then(|b| occupancy::resources_of(&b));
        let (native, checked) = match (resources(&self.cubin), resources(&output)) {
            (Ok(n), Ok(c)) => (n, c),
            (Err(e), _) | (_, Err(e)) => {
                warn(format!("cannot read the registers of {}: {e}; its occupancy is not matched", output.display()));
                return None;
            }
        };
        let of = |list: &[(String, occupancy::Resources)], name: &str| list.iter().find(|(n, _)| n == name).map(|(_, r)| *r);
        let mut wanted = Vec::new();
        for k in gasan_instrument::ptx::kernel_bounds(text) {
            let (Some(threads), false, Some(n), Some(c)) = (k.threads, k.occupancy_set, of(&native, &k.name), of(&checked, &k.name)) else { continue };
            if let Some(blocks) = occupancy::blocks_to_keep(&self.sm, threads, n.registers, c.registers) {
                if verbosity >= 1 {
                    eprintln!(
                        "gasan-ptxas: {}: {} registers checked, {} native: {} blocks of {threads} threads an SM, native {blocks}; compiling it for {blocks}",
                        k.name,
                        c.registers,
                        n.registers,
                        self.sm.blocks(threads, c.registers)
                    );
                }
                wanted.push((k.name, blocks));
            }
        }
        // A kernel whose frame grows past the budget keeps its first compile; the others are
        // compiled again without it (a module's kernels are compiled together).
        while !wanted.is_empty() {
            let (out, cubin) = match self.compile_with(real, checked_args, input, text, &wanted, &output) {
                Ok(r) => r,
                Err(e) => {
                    warn(format!("cannot compile the checked copy with native occupancy ({e}); keeping it as first compiled"));
                    return None;
                }
            };
            if !out.status.success() {
                warn(format!("{} refused the checked copy with native occupancy ({}); keeping it as first compiled", real.display(), out.status));
                return None;
            }
            let matched = match std::fs::read(&cubin).map_err(|e| e.to_string()).and_then(|b| occupancy::resources_of(&b)) {
                Ok(m) => m,
                Err(e) => {
                    warn(format!("cannot read the registers of the checked copy with native occupancy ({e}); keeping it as first compiled"));
                    return None;
                }
            };
            let before = wanted.len();
            wanted.retain(|(name, _)| {
                let (Some(m), Some(c)) = (of(&matched, name), of(&checked, name)) else { return false };
                let fits = m.frame <= c.frame + occupancy::FRAME_BUDGET;
                if verbosity >= 1 {
                    eprintln!(
                        "gasan-ptxas: {name}: {} registers and a frame of {} bytes (was {}): {}",
                        m.registers,
                        m.frame,
                        c.frame,
                        if fits { "kept" } else { "the first compile kept: its frame grew past the budget" }
                    );
                }
                fits
            });
            if wanted.len() == before {
                return match std::fs::metadata(&output).and_then(|m| cubin.as_file().set_permissions(m.permissions())).and_then(|()| cubin.persist(&output).map_err(|e| e.error)) {
                    Ok(_) => Some(out.stderr),
                    Err(e) => {
                        warn(format!("cannot write {} ({e}); keeping the checked cubin as first compiled", output.display()));
                        None
                    }
                };
            }
        }
        None
    }

    /// Compiles `text` with `.minnctapersm` for the kernels `wanted` names, into a file beside
    /// `output` (so that it can replace it in one rename).
    fn compile_with(
        &self,
        real: &Path,
        checked_args: &[OsString],
        input: usize,
        text: &str,
        wanted: &[(String, u32)],
        output: &Path,
    ) -> std::io::Result<(std::process::Output, tempfile::NamedTempFile)> {
        let mut ptx = tempfile::Builder::new().prefix("gasan-checked-").suffix(".ptx").tempfile()?;
        ptx.write_all(gasan_instrument::ptx::with_min_blocks(text, wanted).as_bytes())?;
        ptx.flush()?;
        let dir = output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let cubin = tempfile::Builder::new().prefix("gasan-matched-").suffix(".cubin").tempfile_in(dir)?;
        let mut args = gasan_jit::args::replaced(checked_args, self.output, cubin.path());
        args[input] = ptx.path().as_os_str().to_owned();
        let out = Command::new(real).args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
        Ok((out, cubin))
    }
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
