//! gasan's messages on standard error, by verbosity level (the `verbosity` option).

/// Prints `msg()` as a gasan message when `verbosity >= level` (`msg` is not called otherwise).
/// [`crate::state::log`] is this after creating the state, for the callers that need it created.
pub fn log(level: u32, msg: impl FnOnce() -> String) {
    if crate::options::process().verbosity >= level {
        eprintln!("==gasan== {}", msg());
    }
}
