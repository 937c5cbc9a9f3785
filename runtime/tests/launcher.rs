//! gasan-run as a launcher, without a GPU: it preloads the runtime, hands the options over in
//! GASAN_OPTIONS, returns the program's own exit status, and refuses bad options by name.

use std::process::Command;

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
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run program"));
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
