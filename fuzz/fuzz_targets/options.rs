//! `GASAN_OPTIONS` parsing: `Options::parse` never panics, and whatever it accepts survives a
//! round trip through `to_env_string` (the string gasan-run hands to the preloaded runtime).
#![no_main]

use gasan_runtime::options::Options;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(o) = Options::parse(s) else { return };
    let env = o.to_env_string();
    let back = Options::parse(&env).unwrap_or_else(|e| panic!("{s:?} parsed, but its env string {env:?} does not: {e}"));
    assert_eq!(back, o, "round trip of {s:?} through {env:?}");
    // Applying the same string twice over the parsed options changes nothing.
    let mut again = o.clone();
    again.apply(s).unwrap();
    assert_eq!(again, o);
});
