//! What a ptxas command line asks for, as far as the front end must know: a version query, a
//! whole-program compile of one PTX file (which it checks), or anything else (handed to the real
//! ptxas unchanged).
//!
//! Triton 3.x runs `ptxas -lineinfo [--fmad=false] -v [--opt-level 0] [PTXAS_OPTIONS] --gpu-name=sm_90a
//! in.ptx -o in.ptx.o` (`backends/nvidia/compiler.py`, `make_cubin`) and `ptxas --version`
//! (`knobs.py`, `NvidiaTool.from_path`; `get_ptxas_version` for the cache key). XLA runs
//! `ptxas in.ptx -o out.cubin -arch=sm_90a -O3 ...` and `ptxas --version`.
//!
//! ptxas (CUDA 13.0 `--help`) takes each option as `-short`, `--long`, `-long` or with `=value`;
//! the options in [`TAKES_VALUE`] read the next word as their value when it is not attached. Every
//! other word that does not start with `-` is an input file.

/// Options (without leading dashes, long and short names) that take a value in the next word.
pub const TAKES_VALUE: &[&str] = &[
    "Ofast-compile",
    "Ofc",
    "allow-expensive-optimizations",
    "def-load-cache",
    "dlcm",
    "def-store-cache",
    "dscm",
    "device-function-maxrregcount",
    "func-maxrregcount",
    "device-stack-protector",
    "entry",
    "e",
    "fmad",
    "force-load-cache",
    "flcm",
    "force-store-cache",
    "fscm",
    "gpu-name",
    "arch",
    "input-as-string",
    "ias",
    "machine",
    "m",
    "maxntid",
    "maxrregcount",
    "minnctapersm",
    "opt-level",
    "O",
    "options-file",
    "optf",
    "output-file",
    "o",
    "position-independent-code",
    "pic",
    "register-usage-level",
    "regUsageLevel",
    "sanitize",
    "split-compile",
];

/// Options after which the front end leaves the command to the real ptxas as it is, and why.
const PASS_THROUGH: &[(&[&str], &str)] = &[
    (&["compile-only", "c"], "a relocatable object (-c): its checks would need the linker's help, which the front end does not give"),
    (&["input-as-string", "ias"], "PTX given on the command line (--input-as-string)"),
    (&["options-file", "optf"], "options read from a file (--options-file)"),
    (&["help", "h"], "--help"),
    (&["list-version", "version-ls"], "--list-version"),
    (&["compile-as-tools-patch", "astoolspatch"], "a tools patch (--compile-as-tools-patch)"),
];

/// What to do with a ptxas command line (the arguments after the program name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// `--version` (`-V`): answer with the real ptxas's version and gasan's line.
    Version,
    /// Check the PTX file at `args[input]`, then compile the checked copy with the same arguments.
    Check { input: usize },
    /// Run the real ptxas with the arguments as they are; the reason is for the warning.
    PassThrough(String),
}

/// An option word's name: without its leading dashes and any `=value`.
fn option_name(word: &str) -> Option<&str> {
    let name = word.strip_prefix("--").or_else(|| word.strip_prefix('-'))?;
    Some(name.split_once('=').map_or(name, |(n, _)| n))
}

/// The plan for `args` (the arguments after the program name).
pub fn plan(args: &[String]) -> Plan {
    let mut inputs = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = &args[i];
        match option_name(word) {
            // A lone "-" is no option (ptxas reads no standard input): an input word.
            Some("") | None => inputs.push(i),
            Some(name) => {
                if name == "version" || name == "V" {
                    return Plan::Version;
                }
                if let Some((_, why)) = PASS_THROUGH.iter().find(|(names, _)| names.contains(&name)) {
                    return Plan::PassThrough((*why).to_string());
                }
                if !word.contains('=') && TAKES_VALUE.contains(&name) {
                    i += 1;
                }
            }
        }
        i += 1;
    }
    match inputs.as_slice() {
        [one] => Plan::Check { input: *one },
        [] => Plan::PassThrough("no input file".into()),
        _ => Plan::PassThrough(format!("{} input files (the front end checks one PTX file at a time)", inputs.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn tritons_and_xlas_command_lines_are_checked() {
        let triton = words("-lineinfo -v --gpu-name=sm_90a /tmp/tmpab.ptx -o /tmp/tmpab.ptx.o");
        assert_eq!(plan(&triton), Plan::Check { input: 3 });
        let triton_opts = words("-lineinfo --fmad=false -v --opt-level 0 -maxrregcount 128 --gpu-name=sm_90a k.ptx -o k.o");
        assert_eq!(plan(&triton_opts), Plan::Check { input: 8 });
        let xla = words("/tmp/x.ptx -o /tmp/x.cubin -arch=sm_90a -O3 --warn-on-spills -v");
        assert_eq!(plan(&xla), Plan::Check { input: 0 });
        let separate = words("-arch sm_90 -o out.cubin in.ptx");
        assert_eq!(plan(&separate), Plan::Check { input: 4 });
    }

    #[test]
    fn version_queries_are_recognised_anywhere() {
        assert_eq!(plan(&words("--version")), Plan::Version);
        assert_eq!(plan(&words("-V")), Plan::Version);
        assert_eq!(plan(&words("-arch sm_90 --version")), Plan::Version);
    }

    #[test]
    fn everything_else_passes_through_with_its_reason() {
        for (line, why) in [
            ("-c -arch sm_90 a.ptx -o a.o", "relocatable"),
            ("-arch sm_90 --input-as-string .version -o a.o", "command line"),
            ("--options-file opts.txt", "from a file"),
            ("-arch sm_90 -o a.o", "no input"),
            ("a.ptx b.ptx -o a.o", "2 input files"),
            ("--help", "--help"),
        ] {
            match plan(&words(line)) {
                Plan::PassThrough(r) => assert!(r.contains(why), "{line}: {r}"),
                p => panic!("{line}: {p:?}"),
            }
        }
        // A value-taking option at the end, without its value: no input found, so nothing checked.
        assert!(matches!(plan(&words("a.ptx -o")), Plan::Check { input: 0 }));
        assert!(matches!(plan(&words("-o a.ptx")), Plan::PassThrough(_)));
    }
}
