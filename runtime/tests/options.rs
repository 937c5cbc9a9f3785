//! GASAN_OPTIONS parsing, one option at a time: a good value lands in its field, a bad value or an
//! unknown name is refused with an error that names it, the checks against the machine (log
//! directory, suppressions file) refuse by name too, and any valid option set survives the trip
//! through the environment string gasan-run hands to the preloaded library, awkward values included.

use gasan_instrument::shadow::Scale;
use gasan_runtime::options::{known, not_utf8, pairs, quote, Options, OptionsError, ReportFormat, TABLE};
use proptest::prelude::*;
use std::path::PathBuf;

/// (option, a good value, check of the parsed field, bad values)
type Row = (&'static str, &'static str, fn(&Options) -> bool, &'static [&'static str]);

fn rows() -> Vec<Row> {
    vec![
        ("halt_on_error", "0", |o| !o.halt_on_error, &["maybe", "2"]),
        ("exitcode", "23", |o| o.exitcode == 23, &["x", "0", "256", "-1"]),
        ("log_path", "/tmp/gasan.log", |o| o.log_path == Some(PathBuf::from("/tmp/gasan.log")), &[]),
        ("shadow_scale", "7", |o| o.shadow_scale == Scale::S7, &["9", "x"]),
        ("redzone", "4", |o| o.redzone == 4, &["-1", "65"]),
        ("min_redzone", "512", |o| o.min_redzone == 512, &["300", "128", "131072"]),
        ("quarantine_size_mb", "64", |o| o.quarantine_size_mb == 64, &["lots", "1048577"]),
        ("unmap_thread", "0", |o| !o.unmap_thread, &["later"]),
        ("detect_leaks", "1", |o| o.detect_leaks, &["2"]),
        ("print_limit", "5", |o| o.print_limit == 5, &["five"]),
        ("malloc_context_size", "3", |o| o.malloc_context_size == 3, &["3.5", "257"]),
        ("suppressions", "/tmp/supp.txt", |o| o.suppressions == Some(PathBuf::from("/tmp/supp.txt")), &[]),
        ("report_format", "json", |o| o.report_format == ReportFormat::Json, &["xml"]),
        ("instrument", "0", |o| !o.instrument, &["off!"]),
        ("hoist_loops", "0", |o| !o.hoist_loops, &["sometimes"]),
        ("param_bounds", "0", |o| !o.param_bounds, &["often"]),
        ("outside_checks", "1", |o| o.outside_checks, &["2"]),
        ("arg_bounds", "0", |o| !o.arg_bounds, &["tagged"]),
        ("call_times", "1", |o| o.call_times, &["2"]),
        ("verbosity", "2", |o| o.verbosity == 2, &["loud"]),
        ("tags", "16", |o| o.tags == 16, &["3", "128", "many"]),
        ("pool_size", "1073741824", |o| o.pool_size == Some(1 << 30), &["1G", "0"]),
        ("cache_dir", "/tmp/gasan-cache", |o| o.cache_dir == Some(PathBuf::from("/tmp/gasan-cache")), &[]),
        ("cache_size_mb", "64", |o| o.cache_size_mb == 64, &["0", "4194305", "1G"]),
        ("sass", "0", |o| !o.sass, &["maybe"]),
        ("prefetch", "0", |o| !o.prefetch, &["later"]),
        ("preload", "0", |o| !o.preload, &["ahead"]),
        ("ptxas", "/opt/cuda/bin/ptxas", |o| o.ptxas == Some(PathBuf::from("/opt/cuda/bin/ptxas")), &[]),
        ("patch_export_table", "1", |o| o.patch_export_table, &["on"]),
        ("managed_memory", "0", |o| !o.managed_memory, &["host"]),
        ("host_memory", "0", |o| !o.host_memory, &["pinned"]),
        ("framework_pools", "0", |o| !o.framework_pools, &["pools"]),
    ]
}

#[test]
fn every_option_parses_and_bad_values_name_the_option() {
    let t = rows();
    let names: Vec<_> = t.iter().map(|r| r.0).collect();
    assert_eq!(names, known().collect::<Vec<_>>(), "every option of the table is tested, in table order");
    for (name, good, check, bad) in t {
        let o = Options::parse(&format!("{name}={good}")).unwrap_or_else(|e| panic!("{name}={good}: {e}"));
        assert!(check(&o), "{name}={good} did not land in its field");
        // Round trip through the environment string.
        assert_eq!(Options::parse(&o.to_env_string()).unwrap(), o, "{name}");
        for bad in bad {
            let e = Options::parse(&format!("{name}={bad}")).expect_err(name);
            assert!(matches!(&e, OptionsError::BadValue { name: n, .. } if n == name), "{name}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("option '{name}'")) && msg.contains(&format!("'{bad}'")), "{msg}");
        }
    }
}

#[test]
fn every_option_has_help_and_a_default_that_parses() {
    for o in TABLE {
        assert!(o.help.len() > 10, "{} has no description", o.name);
        let d = (o.default)();
        let parsed = Options::parse(&format!("{}={}", o.name, quote(&d))).unwrap();
        assert_eq!(parsed, Options::default(), "{}'s default written in the table parses to Default", o.name);
    }
}

#[test]
fn unknown_names_and_missing_values_are_refused_by_name() {
    let e = Options::parse("halt_on_eror=1").unwrap_err();
    assert_eq!(e, OptionsError::Unknown("halt_on_eror".into()));
    assert!(e.to_string().contains("halt_on_eror") && e.to_string().contains("halt_on_error"));
    assert_eq!(Options::parse("detect_leaks").unwrap_err(), OptionsError::NoValue("detect_leaks".into()));
    // ASan's separators: ':' and whitespace; the last value of a repeated option wins.
    let o = Options::parse("verbosity=1:exitcode=7 verbosity=3").unwrap();
    assert_eq!((o.verbosity, o.exitcode), (3, 7));
    assert_eq!(Options::parse("").unwrap(), Options::default());
    // An empty value unsets an optional one.
    assert_eq!(Options::parse("log_path=/a:log_path=").unwrap().log_path, None);
}

#[test]
fn non_utf8_is_refused_naming_the_option_and_the_bytes() {
    let e = not_utf8(b"verbosity=1:log_path=/tmp/\xffx");
    assert_eq!(e.option(), Some("log_path"));
    let msg = e.to_string();
    assert!(msg.contains("UTF-8") && msg.contains("log_path") && msg.contains("\\xff"), "{msg}");
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gasan-options-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn refused_by(o: &Options, name: &str, says: &str) {
    let e = o.validate().expect_err(name);
    assert_eq!(e.option(), Some(name), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(says), "{msg}");
}

#[test]
fn log_path_must_name_a_writable_directory() {
    let ok = Options { log_path: Some(tmp("log")), ..Options::default() };
    ok.validate().unwrap();
    // A relative path lives in the current directory.
    Options::parse("log_path=gasan-report").unwrap().validate().unwrap();
    let o = Options { log_path: Some("/nonexistent-gasan-dir/log".into()), ..Options::default() };
    refused_by(&o, "log_path", "/nonexistent-gasan-dir is not a directory");
    // The directory of `<log_path>.<pid>` is a file.
    let file = tmp("plain-file");
    std::fs::write(&file, "x").unwrap();
    let o = Options { log_path: Some(file.join("log")), ..Options::default() };
    refused_by(&o, "log_path", "is not a directory");
    // /proc/self is a directory nobody may create files in (root included).
    let o = Options { log_path: Some("/proc/self/gasan-log".into()), ..Options::default() };
    refused_by(&o, "log_path", "cannot create /proc/self/gasan-log.<pid>");
}

#[test]
fn suppressions_must_exist_and_be_well_formed() {
    let o = Options { suppressions: Some(tmp("missing.supp")), ..Options::default() };
    refused_by(&o, "suppressions", "No such file or directory");
    for (text, says) in [("kernel:foo\nbogus line\n", "line 2: 'bogus line': expected kind:pattern"), ("# comment\nfun:foo\n", "unknown kind 'fun'"), ("kernel:\n", "empty pattern")] {
        let p = tmp("bad.supp");
        std::fs::write(&p, text).unwrap();
        refused_by(&Options { suppressions: Some(p), ..Options::default() }, "suppressions", says);
    }
    let p = tmp("good.supp");
    std::fs::write(&p, "# gasan suppressions\n\nkernel:readAt\n  src:cases.cu\ncall:cuMemcpyHtoD\n").unwrap();
    Options { suppressions: Some(p), ..Options::default() }.validate().unwrap();
}

#[test]
fn awkward_values_survive_the_environment_string() {
    for v in ["/x/a b:c", "a\"b", "it's", "back\\slash", "\\\"", "tab\there", "new\nline", "=", "é:☃", " lead", "trail "] {
        let o = Options { log_path: Some(v.into()), cache_dir: Some(format!("{v}/c").into()), ..Options::default() };
        let s = o.to_env_string();
        assert_eq!(Options::parse(&s).unwrap(), o, "{v:?} as {s}");
    }
    // ASan-style quoting written by hand.
    let p = pairs(r#"log_path='/x/a b:c' cache_dir="/y/\"q\"""#).unwrap();
    assert_eq!(p, vec![("log_path".into(), "/x/a b:c".into()), ("cache_dir".into(), "/y/\"q\"".into())]);
}

fn path() -> impl Strategy<Value = Option<PathBuf>> {
    prop_oneof![Just(None), any::<String>().prop_filter("non-empty", |s| !s.is_empty()).prop_map(|s| Some(PathBuf::from(s)))]
}

fn options() -> impl Strategy<Value = Options> {
    (
        (any::<bool>(), 1i32..=255, path(), any::<bool>(), 0u64..=64, 8u32..=16, 0u64..=(1 << 20), any::<bool>(), any::<u32>()),
        (0u32..=256, path(), any::<bool>(), any::<bool>(), any::<bool>(), any::<u32>(), prop::option::of(1u64..), path(), any::<bool>(), any::<bool>(), any::<bool>()),
        (1u64..=(1 << 22), any::<bool>(), path(), any::<bool>(), 0u32..=6, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (halt, exitcode, log, s7, redzone, minrz, q, leaks, limit),
                (ctx, supp, json, instr, hoist, verb, pool, cache, patch, preload, unmap),
                (cache_mb, sass, ptxas, pools, tags_log, managed, host, bounds, prefetch, arg_bounds, outside, times),
            )| {
                Options {
                    halt_on_error: halt,
                    exitcode,
                    log_path: log,
                    shadow_scale: if s7 { Scale::S7 } else { Scale::S8 },
                    redzone,
                    min_redzone: 1 << minrz,
                    quarantine_size_mb: q,
                    unmap_thread: unmap,
                    detect_leaks: leaks,
                    print_limit: limit,
                    malloc_context_size: ctx,
                    suppressions: supp,
                    report_format: if json { ReportFormat::Json } else { ReportFormat::Text },
                    instrument: instr,
                    hoist_loops: hoist,
                    param_bounds: bounds,
                    outside_checks: outside,
                    arg_bounds,
                    call_times: times,
                    verbosity: verb,
                    pool_size: pool,
                    cache_dir: cache,
                    cache_size_mb: cache_mb,
                    sass,
                    prefetch,
                    preload,
                    ptxas,
                    patch_export_table: patch,
                    framework_pools: pools,
                    managed_memory: managed,
                    host_memory: host,
                    tags: if tags_log == 6 { 0 } else { 1 << tags_log },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_valid_option_set_survives_the_environment_string(o in options()) {
        let s = o.to_env_string();
        let back = Options::parse(&s).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
        prop_assert_eq!(&back, &o);
        prop_assert_eq!(back.to_env_string(), s);
    }

    #[test]
    fn the_parser_never_panics(s in any::<String>()) {
        let _ = Options::parse(&s);
    }
}

#[test]
fn readme_lists_the_options_of_the_table() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let (begin, end) = ("<!-- options:begin (generated from runtime/src/options.rs) -->\n", "<!-- options:end -->");
    let start = readme.find(begin).expect("README has the options markers") + begin.len();
    let stop = start + readme[start..].find(end).expect("README has the end marker");
    let want = gasan_runtime::options::markdown_table();
    assert!(readme[start..stop] == want, "README's option list is stale; replace it with:\n{want}");
}
