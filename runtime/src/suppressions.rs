//! The suppressions file's format: which reports not to print (read by `options`, which checks the
//! file before the program starts, and by `report`, which applies it).

/// What a suppressions file may say: `kernel:` (a substring of the kernel's mangled or demangled
/// name), `src:` (of the source file) and `call:` (of the host call's name).
pub const SUPPRESSION_KINDS: &[&str] = &["kernel", "src", "call"];

/// Parses a suppressions file: one `kind:pattern` per line ([`SUPPRESSION_KINDS`]); blank lines
/// and lines starting with `#` are skipped. An error names the first bad line.
pub fn parse_suppressions(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            let shown: String = l.chars().take(80).collect();
            format!("line {}: '{shown}': {why}", i + 1)
        };
        let (k, v) = l.split_once(':').ok_or_else(|| bad("expected kind:pattern"))?;
        if !SUPPRESSION_KINDS.contains(&k) {
            return Err(bad(&format!("unknown kind '{k}' (known: {})", SUPPRESSION_KINDS.join(", "))));
        }
        if v.is_empty() {
            return Err(bad("empty pattern"));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}
