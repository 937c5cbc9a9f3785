//! gasan-run as a launcher, without a GPU: it preloads the runtime, hands the options over in
//! GASAN_OPTIONS (awkward values intact), returns the program's own exit status, and refuses bad
//! options by name with exit status 2 before the program starts, in the same words from a flag and
//! from GASAN_OPTIONS; the preloaded runtime on its own refuses them the same way.

use gasan_runtime::options::{quote, Options, TABLE};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gasan_run() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gasan-run"))
}

fn lib_exists() -> bool {
    std::path::Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("libgasan_runtime.so").exists()
}

#[test]
fn exit_status_and_environment_pass_through() {
    if !lib_exists() {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "libgasan_runtime.so not built next to gasan-run");
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let st = gasan_run().args(["--", "/bin/sh", "-c", "exit 3"]).status().unwrap();
    assert_eq!(st.code(), Some(3));
    let out = gasan_run()
        .args(["--shadow-scale", "7", "--detect-leaks", "1", "--", "/bin/sh", "-c", "echo \"$LD_PRELOAD|$GASAN_OPTIONS\""])
        .env("LD_PRELOAD", "/lib/x86_64-linux-gnu/libm.so.6")
        .env("GASAN_OPTIONS", "verbosity=0:exitcode=9")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let (preload, opts) = line.trim().split_once('|').unwrap();
    // The runtime first, the user's preloads kept after it.
    assert!(preload.starts_with(&*std::path::Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("libgasan_runtime.so").to_string_lossy()), "{preload}");
    assert!(preload.ends_with(":/lib/x86_64-linux-gnu/libm.so.6"), "{preload}");
    // Flags and the inherited GASAN_OPTIONS both reach the program.
    for want in ["shadow_scale=7", "detect_leaks=1", "exitcode=9"] {
        assert!(opts.split(':').any(|o| o == want), "{want} missing in {opts}");
    }
}

#[test]
fn bad_options_are_named_and_refused() {
    let out = gasan_run().args(["--shadow-scale", "9", "--", "/bin/true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shadow-scale") || err.contains("shadow_scale"), "{err}");

    let out = gasan_run().args(["--", "/bin/true"]).env("GASAN_OPTIONS", "quarantine_mb=5").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("quarantine_mb"));

    let out = gasan_run().args(["--min-redzone", "100", "--", "/bin/true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--min-redzone"));

    let out = gasan_run().args(["--bogus-flag", "--", "/bin/true"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus-flag"));
}

#[test]
fn a_missing_program_is_exit_127() {
    if !lib_exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let out = gasan_run().args(["--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run program '/nonexistent/program': No such file or directory"), "{err}");
}

#[test]
fn program_arguments_that_look_like_flags_reach_the_program() {
    if !lib_exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let out = gasan_run().args(["/bin/echo", "-n", "x", "--shadow-scale", "9"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x --shadow-scale 9");
}

fn lib() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gasan-run")).with_file_name("libgasan_runtime.so")
}

/// A fresh directory for one test, with ':' and a space in its name.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gasan-launcher {test}:{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A program that leaves `marker` behind if it ever starts.
fn marker_program(marker: &Path) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), "touch \"$0\"".into(), marker.display().to_string()]
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The bad options: (option, bad value). Files are made under `d`.
fn bad_cases(d: &Path) -> Vec<(&'static str, String)> {
    let malformed = d.join("malformed.supp");
    std::fs::write(&malformed, "kernel:ok\nnot a suppression\n").unwrap();
    vec![
        ("exitcode", "256".into()),
        ("exitcode", "0".into()),
        ("redzone", "65".into()),
        ("min_redzone", "300".into()),
        ("quarantine_size_mb", "1048577".into()),
        ("pool_size", "0".into()),
        ("halt_on_error", "maybe".into()),
        ("shadow_scale", "9".into()),
        ("verbosity", "loud".into()),
        ("log_path", "/nonexistent-gasan-dir/report".into()),
        ("suppressions", d.join("missing.supp").display().to_string()),
        ("suppressions", malformed.display().to_string()),
    ]
}

#[test]
fn bad_options_are_refused_before_the_program_runs_in_the_same_words() {
    let d = dir("refused");
    let marker = d.join("started");
    for (name, bad) in bad_cases(&d) {
        let flag = format!("--{}", name.replace('_', "-"));
        let by_flag = gasan_run().arg(&flag).arg(&bad).arg("--").args(marker_program(&marker)).output().unwrap();
        let by_env = gasan_run().arg("--").args(marker_program(&marker)).env("GASAN_OPTIONS", format!("{name}={}", quote(&bad))).output().unwrap();
        for (how, out) in [(&flag, &by_flag), (&"GASAN_OPTIONS".to_string(), &by_env)] {
            assert_eq!(out.status.code(), Some(2), "{name}={bad} by {how}: {}", stderr(out));
            assert!(!marker.exists(), "{name}={bad} by {how}: the program ran");
            let err = stderr(out);
            assert!(err.starts_with(&format!("gasan-run: error: {how}: ")), "{err}");
            assert!(err.contains(&format!("option '{name}'")) && err.contains(&bad), "{err}");
        }
        let words = |o: &Output, how: &str| stderr(o).replacen(&format!("gasan-run: error: {how}: "), "", 1);
        assert_eq!(words(&by_flag, &flag), words(&by_env, "GASAN_OPTIONS"), "{name}={bad}");
    }
    // Names only GASAN_OPTIONS can get wrong, and a non-UTF-8 value.
    for (opts, says) in [
        (OsStr::new("quarantine_mb=5"), "unknown option 'quarantine_mb'"),
        (OsStr::new("detect_leaks"), "option 'detect_leaks' needs a value"),
        (OsStr::new("log_path=\"/tmp/x"), "no closing quote"),
        (OsStr::from_bytes(b"verbosity=1:log_path=/tmp/\xff"), "not valid UTF-8 (in option 'log_path'): 'verbosity=1:log_path=/tmp/\\xff'"),
    ] {
        let out = gasan_run().arg("--").args(marker_program(&marker)).env("GASAN_OPTIONS", opts).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{opts:?}");
        assert!(!marker.exists(), "{opts:?}: the program ran");
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

#[test]
fn the_runtime_alone_refuses_bad_options_with_status_2_before_main() {
    if !lib().exists() {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "libgasan_runtime.so not built next to gasan-run");
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let d = dir("runtime");
    let marker = d.join("started");
    let prog = marker_program(&marker);
    for (name, bad) in bad_cases(&d) {
        let env = format!("{name}={}", quote(&bad));
        let out = Command::new(&prog[0]).args(&prog[1..]).env("LD_PRELOAD", lib()).env("GASAN_OPTIONS", &env).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{env}: {}", stderr(&out));
        assert!(!marker.exists(), "{env}: the program ran");
        // The launcher's words, with the runtime's prefix.
        let launcher = gasan_run().arg("--").arg("/bin/true").env("GASAN_OPTIONS", &env).output().unwrap();
        assert_eq!(stderr(&out).replacen("==gasan== error: ", "", 1), stderr(&launcher).replacen("gasan-run: error: ", "", 1));
    }
    // Good options let it run.
    let out = Command::new(&prog[0]).args(&prog[1..]).env("LD_PRELOAD", lib()).env("GASAN_OPTIONS", "exitcode=9").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists());
}

#[test]
fn values_with_colons_and_spaces_reach_the_runtime_intact() {
    if !lib().exists() {
        assert!(std::env::var_os("GASAN_TEST_STRICT").is_none(), "libgasan_runtime.so not built next to gasan-run");
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let d = dir("awkward");
    let marker = d.join("started");
    let log = d.join("a b:c").join("it's \"the\" log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let supp = d.join("s p:q.supp");
    std::fs::write(&supp, "kernel:x\n").unwrap();
    let out = gasan_run().arg("--log-path").arg(&log).arg("--suppressions").arg(&supp).args(["--verbosity", "2", "--"]).args(marker_program(&marker)).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(marker.exists(), "the program ran");
    // The runtime read them back (it prints what it parsed at verbosity 2).
    let line = err.lines().find_map(|l| l.strip_prefix("==gasan== options: ")).unwrap_or_else(|| panic!("{err}"));
    let o = Options::parse(line).unwrap();
    assert_eq!((o.log_path.as_deref(), o.suppressions.as_deref(), o.verbosity), (Some(&*log), Some(&*supp), 2));
}

#[test]
fn help_options_lists_every_option_with_its_description() {
    let out = gasan_run().arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: gasan-run [OPTIONS] [--] PROGRAM [ARGS]..."));
    let out = gasan_run().arg("--help-options").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for o in TABLE {
        let line = help.lines().find(|l| l.trim_start().starts_with(&format!("--{} ", o.flag()))).unwrap_or_else(|| panic!("--{} missing:\n{help}", o.flag()));
        assert!(line.contains(&o.help_line()), "{line}");
    }
}

#[test]
fn verbosity_1_says_when_the_program_made_no_cuda_call() {
    if !lib().exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let out = gasan_run().args(["--verbosity", "1", "--", "/bin/true"]).output().unwrap();
    assert!(out.status.success());
    assert!(stderr(&out).contains("made no CUDA call"), "{}", stderr(&out));
    let out = gasan_run().args(["--", "/bin/true"]).output().unwrap();
    assert_eq!(stderr(&out), "", "quiet by default");
    let said = |out: &std::process::Output| stderr(out).matches("made no CUDA call").count();
    // A program that closes stderr before its exit handlers run (coreutils' echo) is still heard.
    let out = gasan_run().args(["--verbosity", "1", "--", "/bin/echo", "hi"]).output().unwrap();
    assert_eq!(said(&out), 1, "{}", stderr(&out));
    // Once for the program, not for the subshells and helper processes it forks.
    let out = gasan_run().args(["--verbosity", "1", "--", "bash", "-c", "x=$(echo a); y=$(echo b; ls / >/dev/null); /bin/echo $x$y; exit 0"]).output().unwrap();
    assert_eq!(said(&out), 1, "{}", stderr(&out));
}

/// A cache directory whose last set-up GPU is remembered, so that the runtime starts its early
/// preparation when it is loaded (gasan_runtime::prefetch::start_early).
fn cache_with_a_device(d: &Path) -> (PathBuf, gasan_runtime::prefetch::DeviceRecord) {
    let cache = d.join("cache");
    let record = gasan_runtime::prefetch::DeviceRecord { cc: 90, aligned_pool: true, driver: "a driver".into() };
    record.write(&gasan_runtime::cache::Cache::new(cache.clone(), 1 << 20)).unwrap();
    (cache, record)
}

#[test]
fn a_remembered_device_costs_programs_that_never_use_cuda_nothing_they_can_see() {
    if !lib().exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let d = dir("early");
    let (cache, record) = cache_with_a_device(&d);
    let run = |args: &[&str]| gasan_run().arg("--cache-dir").arg(&cache).args(["--verbosity", "1", "--"]).args(args).output().unwrap();
    let said = |out: &Output| stderr(out).matches("made no CUDA call").count();
    // The early thread loads no libcuda: the program is still seen to make no CUDA call.
    let out = run(&["/bin/true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(said(&out), 1, "{}", stderr(&out));
    // A program that forks at once, while the early thread works, and its children.
    let out = run(&["bash", "-c", "for i in 1 2 3 4 5 6 7 8; do (echo $i >/dev/null) & done; wait; x=$(echo done); echo $x"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(said(&out), 1, "{}", stderr(&out));
    // Nothing is written before a set-up: the record stays the one remembered.
    assert_eq!(gasan_runtime::prefetch::DeviceRecord::read(&gasan_runtime::cache::Cache::new(cache.clone(), 1 << 20)), Some(record));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_cuda_program_that_forks_before_using_cuda_runs_with_a_remembered_device() {
    if !lib().exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let Some(root) = std::env::var_os("GASAN_CUDA_ROOT").map(PathBuf::from) else {
        eprintln!("SKIPPED a_cuda_program_that_forks_before_using_cuda_runs_with_a_remembered_device: GASAN_CUDA_ROOT is not set (scripts/test.sh sets it)");
        return;
    };
    let d = dir("early-fork");
    let cu = d.join("fork.cu");
    // Kernels in the program (listed and looked up by the early thread) and forks at once; no
    // CUDA call anywhere (no GPU here).
    std::fs::write(
        &cu,
        r#"#include <cstdio>
#include <unistd.h>
#include <sys/wait.h>
__global__ void scale(float* a, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= s; }
int main() {
    for (int i = 0; i < 4; i++) {
        pid_t p = fork();
        if (p == 0) { printf("child\n"); fflush(stdout); _exit(0); }
        waitpid(p, nullptr, 0);
    }
    printf("parent\n");
    return 0;
}
"#,
    )
    .unwrap();
    let exe = d.join("fork");
    let out = Command::new(root.join("bin/nvcc")).args(["-O1", "-arch=sm_90", "-o"]).arg(&exe).arg(&cu).output().unwrap();
    assert!(out.status.success(), "nvcc: {}", String::from_utf8_lossy(&out.stderr));
    let (cache, _) = cache_with_a_device(&d);
    let out = gasan_run().arg("--cache-dir").arg(&cache).args(["--verbosity", "1", "--"]).arg(&exe).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "child\nchild\nchild\nchild\nparent\n");
    assert_eq!(stderr(&out).matches("made no CUDA call").count(), 1, "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs `cmd` to its end, or kills it after `secs` seconds and fails the test (a hang is a bug
/// these tests look for, not a reason to hang the suite).
fn output_within(mut cmd: Command, secs: u64, what: &str) -> Output {
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_suppressions_file_that_is_not_a_small_regular_file_is_refused_at_once() {
    let d = dir("special-files");
    let marker = d.join("started");
    let fifo = d.join("supp.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let big = d.join("big.supp");
    std::fs::write(&big, "kernel:x\n".repeat((2 << 20) / 9)).unwrap();
    let cases = [
        (fifo.clone(), "is a FIFO, not a regular file"),
        (PathBuf::from("/dev/zero"), "is a character device, not a regular file"),
        (PathBuf::from("/dev/urandom"), "is a character device"),
        (d.clone(), "is a directory"),
        (big.clone(), "more than the 1048576 allowed"),
    ];
    for (path, says) in &cases {
        let mut by_flag = gasan_run();
        by_flag.arg("--suppressions").arg(path).arg("--").args(marker_program(&marker));
        let out = output_within(by_flag, 20, &format!("gasan-run --suppressions {}", path.display()));
        assert_eq!(out.status.code(), Some(2), "{}: {}", path.display(), stderr(&out));
        assert!(stderr(&out).contains("option 'suppressions'") && stderr(&out).contains(says), "{}", stderr(&out));
        if lib().exists() {
            // The preloaded runtime, on its own, before main.
            let prog = marker_program(&marker);
            let mut alone = Command::new(&prog[0]);
            alone.args(&prog[1..]).env("LD_PRELOAD", lib()).env("GASAN_OPTIONS", format!("suppressions={}", quote(&path.display().to_string())));
            let out = output_within(alone, 20, &format!("the runtime with suppressions={}", path.display()));
            assert_eq!(out.status.code(), Some(2), "{}: {}", path.display(), stderr(&out));
            assert!(stderr(&out).contains(says), "{}", stderr(&out));
        }
        assert!(!marker.exists(), "{}: the program ran", path.display());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_program_that_cannot_be_executed_is_126_and_a_missing_one_127() {
    if !lib_exists() {
        eprintln!("skipped: build the workspace first (libgasan_runtime.so)");
        return;
    }
    let d = dir("exec");
    let not_executable = d.join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    for (prog, code, says) in [
        (not_executable.display().to_string(), 126, "Permission denied"),
        (d.display().to_string(), 126, "Permission denied"),
        ("/nonexistent/program".to_string(), 127, "No such file or directory"),
        ("gasan-no-such-program-on-path".to_string(), 127, "No such file or directory"),
    ] {
        let out = gasan_run().args(["--", &prog]).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{prog}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("cannot run program '{prog}': {says}")), "{}", stderr(&out));
        // The shell's own statuses for the same programs.
        let sh = Command::new("/bin/sh").args(["-c", "exec \"$0\"", &prog]).output().unwrap();
        assert_eq!(sh.status.code(), Some(code), "sh exec {prog}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn help_fits_a_screen_with_the_common_options_first_and_the_exit_statuses() {
    let out = gasan_run().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = help.lines().collect();
    assert!(lines.len() <= 40, "{} lines:\n{help}", lines.len());
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "lines wider than 100 columns:\n{help}");
    // The first options listed are the most used, in this order.
    let listed: Vec<&str> = lines.iter().filter_map(|l| l.trim_start().strip_prefix("--")).map(|l| l.split([' ', '<']).next().unwrap()).collect();
    assert_eq!(&listed[..4], ["log-path", "halt-on-error", "report-format", "suppressions"], "{help}");
    for want in ["--help-options", "2: options refused", "126: the program cannot be executed", "127: no such program"] {
        assert!(help.contains(want), "{want} missing:\n{help}");
    }
    // -h is the same screen.
    assert_eq!(String::from_utf8_lossy(&gasan_run().arg("-h").output().unwrap().stdout), help);
}

#[test]
fn number_errors_name_the_allowed_values_not_the_type() {
    for (name, bad, allowed) in [
        ("exitcode", "abc", "allowed: 1..=255"),
        ("exitcode", "99999999999", "allowed: 1..=255"),
        ("min_redzone", "1e3", "allowed: power of two, 256..=65536"),
        ("malloc_context_size", "-1", "allowed: 0..=256"),
        ("tags", "four", "allowed: 0, 1, 2, 4, 8, 16, 32 or 64"),
        ("pool_size", "1G", "allowed: 1..=18446744073709551615, or empty for the default"),
        ("verbosity", "loud", "allowed: 0..=4294967295"),
    ] {
        let flag = format!("--{}", name.replace('_', "-"));
        for out in [gasan_run().args([&flag, bad, "--", "/bin/true"]).output().unwrap(), gasan_run().args(["--", "/bin/true"]).env("GASAN_OPTIONS", format!("{name}={bad}")).output().unwrap()] {
            assert_eq!(out.status.code(), Some(2), "{name}={bad}");
            let err = stderr(&out);
            assert!(err.contains(&format!("bad value '{bad}' for option '{name}': expected a whole number; {allowed}")), "{err}");
            assert!(!err.contains("2147483647") && !err.contains("-2147483648"), "the type's range: {err}");
        }
    }
}
