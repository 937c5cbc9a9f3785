//! GASAN_OPTIONS parsing, one option at a time: a good value lands in its field, a bad value or an
//! unknown name is refused with an error that names it, and any option set survives the trip
//! through the environment string gasan-run hands to the preloaded library.

use gasan_instrument::shadow::Scale;
use gasan_runtime::options::{Options, OptionsError, ReportFormat, KNOWN};
use proptest::prelude::*;
use std::path::PathBuf;

/// (option, a good value, check of the parsed field, a bad value or None when any string is valid)
fn table() -> Vec<(&'static str, &'static str, fn(&Options) -> bool, Option<&'static str>)> {
    vec![
        ("halt_on_error", "0", |o| !o.halt_on_error, Some("maybe")),
        ("exitcode", "23", |o| o.exitcode == 23, Some("x")),
        ("log_path", "/tmp/gasan.log", |o| o.log_path.as_deref() == Some("/tmp/gasan.log"), None),
        ("shadow_scale", "7", |o| o.shadow_scale == Scale::S7, Some("9")),
        ("redzone", "4", |o| o.redzone == 4, Some("-1")),
        ("min_redzone", "512", |o| o.min_redzone == 512, Some("300")),
        ("quarantine_size_mb", "64", |o| o.quarantine_size_mb == 64, Some("lots")),
        ("detect_leaks", "1", |o| o.detect_leaks, Some("2")),
        ("print_limit", "5", |o| o.print_limit == 5, Some("five")),
        ("malloc_context_size", "3", |o| o.malloc_context_size == 3, Some("3.5")),
        ("suppressions", "/tmp/supp.txt", |o| o.suppressions == Some(PathBuf::from("/tmp/supp.txt")), None),
        ("report_format", "json", |o| o.report_format == ReportFormat::Json, Some("xml")),
        ("instrument", "0", |o| !o.instrument, Some("off!")),
        ("hoist_loops", "0", |o| !o.hoist_loops, Some("sometimes")),
        ("verbosity", "2", |o| o.verbosity == 2, Some("loud")),
        ("pool_size", "1073741824", |o| o.pool_size == Some(1 << 30), Some("1G")),
        ("cache_dir", "/tmp/gasan-cache", |o| o.cache_dir == Some(PathBuf::from("/tmp/gasan-cache")), None),
    ]
}

#[test]
fn every_option_parses_and_bad_values_name_the_option() {
    let t = table();
    assert_eq!(t.len(), KNOWN.len(), "every known option is in the table");
    for (name, good, check, bad) in t {
        let o = Options::parse(&format!("{name}={good}")).unwrap_or_else(|e| panic!("{name}={good}: {e}"));
        assert!(check(&o), "{name}={good} did not land in its field");
        // Round trip through the environment string.
        assert_eq!(Options::parse(&o.to_env_string()).unwrap(), o, "{name}");
        if let Some(bad) = bad {
            let e = Options::parse(&format!("{name}={bad}")).expect_err(name);
            assert!(matches!(&e, OptionsError::BadValue { name: n, .. } if n == name), "{name}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(name) && msg.contains(bad), "{msg}");
        }
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
}

proptest! {
    #[test]
    fn any_combination_survives_the_environment_string(
        halt in any::<bool>(), exitcode in 0i32..256, scale7 in any::<bool>(), redzone in 0u64..64,
        minrz_log in 8u32..14, q in 0u64..4096, leaks in any::<bool>(), limit in 0u32..100,
        ctx in 0u32..64, json in any::<bool>(), instr in any::<bool>(), verb in 0u32..4,
    ) {
        let s = format!(
            "halt_on_error={}:exitcode={exitcode}:shadow_scale={}:redzone={redzone}:min_redzone={}:quarantine_size_mb={q}:detect_leaks={}:print_limit={limit}:malloc_context_size={ctx}:report_format={}:instrument={}:verbosity={verb}",
            halt as u8, if scale7 { 7 } else { 8 }, 1u64 << minrz_log, leaks as u8, if json { "json" } else { "text" }, instr as u8
        );
        let o = Options::parse(&s).unwrap();
        prop_assert_eq!(Options::parse(&o.to_env_string()).unwrap(), o);
    }
}
