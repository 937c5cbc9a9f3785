//! gasan-run: runs a CUDA program with the gasan runtime preloaded.
//!
//! Its flags are built from the options table (`gasan_runtime::options::TABLE`): one `--flag` per
//! option, with the option's help line. Options come from `GASAN_OPTIONS`, then the flags (flags
//! win); all are checked, against this machine too (log directory, suppressions file), before the
//! program starts; a refusal names the option and where it came from and exits 2. The options reach
//! the runtime as one `GASAN_OPTIONS` string with values quoted where needed.
//!
//! For Python programs, framework memory pools are seen through ([`frameworks`], option
//! `framework_pools`): the child's environment gets the frameworks' own switches and a start-up hook.
//!
//! `--cache-list` / `--cache-clear` (instead of a program) show or empty the checked-module cache
//! that the same options name (`--cache-dir`, `--cache-size-mb`).
//!
//! `--help` fits a screen: the most used options ([`COMMON`]), the exit statuses, and a pointer to
//! `--help-options`, which prints every option with its full help.

#[path = "launcher/frameworks.rs"]
mod frameworks;
#[path = "launcher/jit.rs"]
mod jit;

use clap::{Arg, ArgAction, ArgMatches, Command};
use gasan_runtime::cache::{dir_for, Cache};
use gasan_runtime::options::{os_error_text, Options, OptionsError, EXIT_BAD_OPTIONS, TABLE};
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// The options `--help` shows, most used first, each with a help line that fits a screen's width;
/// `--help-options` prints every option with its full help.
const COMMON: &[(&str, &str)] = &[
    ("log_path", "Write reports to PATH.<pid> instead of stderr"),
    ("halt_on_error", "1: stop at the first error; 0: report and continue"),
    ("report_format", "text (ASan-style) or json (one object per line)"),
    ("suppressions", "File of reports not to print (kernel:, src:, call: lines)"),
    ("detect_leaks", "1: report device allocations still live at exit"),
    ("exitcode", "Exit status of the program after an error report"),
    ("print_limit", "Recover mode: stop after N reports (0: no limit)"),
    ("outside_checks", "1: also check registered and driver-made host memory"),
    ("instrument", "0: allocation checks only (kernels left unchecked)"),
    ("verbosity", "1: summary at exit; 2: every intercepted call"),
    ("cache_dir", "Directory of the checked-module cache"),
];

/// The launcher's exit statuses, for `--help` (shells' 126/127 for a program that cannot run).
const EXIT_STATUSES: &str = "Exit status: the program's own; its exitcode (1) after an error report;
  2: options refused (the program did not start); 126: the program cannot be executed;
  127: no such program.";

fn cli() -> Command {
    let mut cmd = Command::new("gasan-run")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Run a CUDA program under gasan, the GPU AddressSanitizer")
        .override_usage("gasan-run [OPTIONS] [--] PROGRAM [ARGS]...\n       gasan-run [OPTIONS] --cache-list | --cache-clear")
        .after_help(format!(
            "Options may also be given in GASAN_OPTIONS=name=value:name=value, by their names with '_'
for '-' (flags win); quote values that hold ':' or spaces: log_path=\"/x/a b:c\". Bad options
are refused, by name, with exit status 2 before the program starts.
{} more options (pools, redzones, caching, PTX checks): gasan-run --help-options

{EXIT_STATUSES}",
            TABLE.len() - COMMON.len()
        ));
    // The common options first, in COMMON's order; the rest are hidden from --help.
    let rank = |name: &str| COMMON.iter().position(|(n, _)| *n == name);
    let mut rows: Vec<_> = TABLE.iter().collect();
    rows.sort_by_key(|o| rank(o.name).unwrap_or(usize::MAX));
    for o in rows {
        // clap keeps flag names for the life of the program.
        let long: &'static str = Box::leak(o.flag().into_boxed_str());
        let arg = Arg::new(o.name).long(long).value_name(o.shape).action(ArgAction::Set).allow_negative_numbers(true);
        cmd = cmd.arg(match rank(o.name) {
            Some(i) => {
                let d = (o.default)();
                arg.help(if d.is_empty() { COMMON[i].1.to_string() } else { format!("{} [default: {d}]", COMMON[i].1) })
            }
            None => arg.help(o.help_line()).hide(true),
        });
    }
    cmd.arg(Arg::new("cache_list").long("cache-list").action(ArgAction::SetTrue).help("List the cache's entries and totals, then exit").conflicts_with_all(["program", "cache_clear"]))
        .arg(Arg::new("cache_clear").long("cache-clear").action(ArgAction::SetTrue).help("Remove gasan's entries from the cache, then exit").conflicts_with("program"))
        .arg(Arg::new("help_options").long("help-options").action(ArgAction::SetTrue).help("Print every option with its full description, then exit"))
        .arg(
            Arg::new("program")
                .value_name("PROGRAM")
                .help("The program and its arguments")
                .required_unless_present_any(["cache_list", "cache_clear", "help_options"])
                .num_args(1..)
                .trailing_var_arg(true),
        )
}

/// `--help-options`: every option, in table order, with its full help line (help text, allowed
/// values, default), one line each.
fn options_help() -> String {
    let mut s = String::from("Every option, as a flag and as a GASAN_OPTIONS name (the flag's name with '_' for '-'):\n\n");
    for o in TABLE {
        s += &format!("  --{} <{}>  {}\n", o.flag(), o.shape, o.help_line());
    }
    s + "\n" + EXIT_STATUSES + "\n"
}

/// `--cache-list` / `--cache-clear`: the cache the options name.
fn cache_action(opts: &Options, clear: bool) -> Result<(), String> {
    let dir = dir_for(opts.cache_dir.as_deref()).ok_or("no cache directory: set --cache-dir (or HOME)")?;
    let cache = Cache::new(dir, opts.cache_size_mb << 20);
    if clear {
        let (n, bytes) = cache.clear();
        println!("cache {}: removed {n} files, {:.1} MiB", cache.dir.display(), bytes as f64 / (1 << 20) as f64);
        return Ok(());
    }
    let mut entries = cache.entries();
    entries.sort_by(|a, b| b.used.cmp(&a.used).then(a.name.cmp(&b.name)));
    let now = std::time::SystemTime::now();
    println!("{:<15} {:>10} {:>9}  name", "kind", "bytes", "last use");
    let mut kinds: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
    for e in &entries {
        let age = now.duration_since(e.used).map(|d| d.as_secs()).unwrap_or(0);
        println!("{:<15} {:>10} {:>9}  {}", e.kind, e.size, ago(age), e.name);
        let k = kinds.entry(e.kind).or_default();
        k.0 += 1;
        k.1 += e.size;
    }
    let total: u64 = entries.iter().map(|e| e.size).sum();
    let by_kind: Vec<String> = kinds.iter().map(|(k, (n, _))| format!("{n} {k}")).collect();
    println!(
        "cache {}: {} files, {:.1} MiB of {} MiB{}{}",
        cache.dir.display(),
        entries.len(),
        total as f64 / (1 << 20) as f64,
        opts.cache_size_mb,
        if by_kind.is_empty() { "" } else { ": " },
        by_kind.join(", ")
    );
    Ok(())
}

/// A short age: 42s, 5m, 3h, 2d.
fn ago(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86400),
    }
}

/// A refusal: where the option came from (`--flag` or `GASAN_OPTIONS`) and why.
fn refuse(source: &str, e: OptionsError) -> String {
    format!("{source}: {e}")
}

/// The options from `GASAN_OPTIONS` and the flags, checked; each error names its option's source.
fn options(m: &ArgMatches) -> Result<Options, String> {
    let env = Options::env_string().map_err(|e| refuse("GASAN_OPTIONS", e))?;
    let mut opts = Options::default();
    let mut source: HashMap<&str, String> = HashMap::new();
    for (k, v) in gasan_runtime::options::pairs(&env).map_err(|e| refuse("GASAN_OPTIONS", e))? {
        opts.set(&k, &v).map_err(|e| refuse("GASAN_OPTIONS", e))?;
    }
    for o in TABLE {
        if let Some(v) = m.get_one::<String>(o.name) {
            let flag = format!("--{}", o.flag());
            opts.set(o.name, v).map_err(|e| refuse(&flag, e))?;
            source.insert(o.name, flag);
        }
    }
    opts.validate().map_err(|e| {
        let from = e.option().and_then(|n| source.get(n)).map_or("GASAN_OPTIONS", String::as_str);
        refuse(from, e.clone())
    })?;
    Ok(opts)
}

/// What gasan-run did: ran nothing (a cache action), or the exec of the program failed.
enum Outcome {
    Done,
    ExecFailed(String, std::io::Error),
}

fn run(m: ArgMatches) -> Result<Outcome, String> {
    if m.get_flag("help_options") {
        print!("{}", options_help());
        return Ok(Outcome::Done);
    }
    let opts = options(&m)?;
    if m.get_flag("cache_list") || m.get_flag("cache_clear") {
        cache_action(&opts, m.get_flag("cache_clear"))?;
        return Ok(Outcome::Done);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate gasan-run: {}", os_error_text(&e)))?;
    let lib = exe.with_file_name("libgasan_runtime.so");
    if !lib.exists() {
        return Err(format!("runtime library not found at {} (build with `cargo build --release`)", lib.display()));
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let program: Vec<&String> = m.get_many::<String>("program").expect("clap requires a program").collect();
    let (prog, args) = program.split_first().expect("clap requires a program");
    let mut cmd = std::process::Command::new(prog);
    // GASAN_RUN_PID: the program keeps this pid across the exec, its subprocesses do not (the
    // runtime's "made no CUDA call" note is for the program itself, not every helper it spawns).
    cmd.args(args).env("LD_PRELOAD", preload).env("GASAN_OPTIONS", opts.to_env_string()).env(gasan_runtime::options::RUN_PID_ENV, std::process::id().to_string());
    frameworks::apply(&mut cmd, &opts);
    jit::apply(&mut cmd, &opts);
    let err = cmd.exec();
    Ok(Outcome::ExecFailed(prog.to_string(), err))
}

fn main() -> ExitCode {
    match run(cli().get_matches()) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::ExecFailed(prog, exec_err)) => {
            eprintln!("gasan-run: cannot run program '{prog}': {}", os_error_text(&exec_err));
            // As shells do: 127 when there is no such program, 126 when it cannot be executed.
            ExitCode::from(if exec_err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
        }
        Err(e) => {
            eprintln!("gasan-run: error: {e}");
            ExitCode::from(EXIT_BAD_OPTIONS as u8)
        }
    }
}
