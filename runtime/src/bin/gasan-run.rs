//! gasan-run: runs a CUDA program with the gasan runtime preloaded.
//!
//! Its flags are built from the options table (`gasan_runtime::options::TABLE`): one `--flag` per
//! option, with the option's help line. Options come from `GASAN_OPTIONS`, then the flags (flags
//! win); all are checked, against this machine too (log directory, suppressions file), before the
//! program starts; a refusal names the option and where it came from and exits 2. The options reach
//! the runtime as one `GASAN_OPTIONS` string with values quoted where needed.

use clap::{Arg, ArgAction, ArgMatches, Command};
use gasan_runtime::options::{os_error_text, Options, OptionsError, EXIT_BAD_OPTIONS, TABLE};
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

fn cli() -> Command {
    let mut cmd = Command::new("gasan-run")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Run a CUDA program under gasan, the GPU AddressSanitizer")
        .override_usage("gasan-run [OPTIONS] [--] PROGRAM [ARGS]...")
        .after_help(
            "Every option may also be given in GASAN_OPTIONS=name=value:name=value, by the names above \
             with '_' for '-' (flags win). Quote values that hold ':' or spaces: log_path=\"/x/a b:c\".\n\
             Bad options are refused, by name, with exit status 2 before the program starts.",
        );
    for o in TABLE {
        // clap keeps flag names for the life of the program.
        let long: &'static str = Box::leak(o.flag().into_boxed_str());
        cmd = cmd.arg(
            Arg::new(o.name)
                .long(long)
                .value_name(o.shape)
                .help(o.help_line())
                .action(ArgAction::Set),
        );
    }
    cmd.arg(
        Arg::new("program")
            .value_name("PROGRAM")
            .help("The program and its arguments")
            .required(true)
            .num_args(1..)
            .trailing_var_arg(true),
    )
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
        let from = e
            .option()
            .and_then(|n| source.get(n))
            .map_or("GASAN_OPTIONS", String::as_str);
        refuse(from, e.clone())
    })?;
    Ok(opts)
}

fn run(m: ArgMatches) -> Result<(String, std::io::Error), String> {
    let opts = options(&m)?;
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot locate gasan-run: {}", os_error_text(&e)))?;
    let lib = exe.with_file_name("libgasan_runtime.so");
    if !lib.exists() {
        return Err(format!(
            "runtime library not found at {} (build with `cargo build --release`)",
            lib.display()
        ));
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let program: Vec<&String> = m
        .get_many::<String>("program")
        .expect("clap requires a program")
        .collect();
    let (prog, args) = program.split_first().expect("clap requires a program");
    let err = std::process::Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("GASAN_OPTIONS", opts.to_env_string())
        .exec();
    Ok((prog.to_string(), err))
}

fn main() -> ExitCode {
    match run(cli().get_matches()) {
        Ok((prog, exec_err)) => {
            eprintln!(
                "gasan-run: cannot run program '{prog}': {}",
                os_error_text(&exec_err)
            );
            ExitCode::from(127)
        }
        Err(e) => {
            eprintln!("gasan-run: error: {e}");
            ExitCode::from(EXIT_BAD_OPTIONS as u8)
        }
    }
}
