//! What an NVRTC compile's options ask for, as far as the runtime's NVRTC interposer
//! (runtime/src/hooks/nvrtc.rs) must know: whether the program gets a cubin (`-arch=sm_XX`), and
//! if so how to make a checked one: the same compile for the virtual architecture
//! (`compute_XX`), which gives the PTX to check, and the ptxas flags that assemble the checked
//! PTX as NVRTC would have assembled the original.
//!
//! NVRTC 13.0 (`nvrtc.h`, "Supported Compile Options") takes each option as one string, `-o=v` or
//! `--option=v`; `-arch` / `--gpu-architecture` also as two (`-arch`, `sm_90`). Without an
//! `sm_` architecture it makes PTX only (default `compute_75`), which the driver's JIT loads and the
//! runtime checks itself.

/// What the runtime does with one NVRTC compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// A cubin for `target` (`sm_90`, `sm_90a`): compile `shadow_options` (the program's, with the
    /// architecture made virtual) to PTX, check it, assemble it with `ptxas -arch=target
    /// ptxas_flags`.
    Check { target: String, shadow_options: Vec<String>, ptxas_flags: Vec<String> },
    /// NVRTC makes PTX only, which the runtime checks when the driver loads it: why.
    PtxOnly(String),
    /// A cubin this scheme cannot check: why.
    NotChecked(String),
}

/// The architecture option's names.
const ARCH: &[&str] = &["-arch", "--gpu-architecture"];

/// The value of `opt` if it is `name=value` for one of `names`.
fn value_of<'a>(opt: &'a str, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| opt.strip_prefix(n).and_then(|r| r.strip_prefix('=')))
}

/// Decides what to do with a compile of `options` (the program's, in order).
pub fn plan(options: &[String]) -> Plan {
    let mut target: Option<String> = None;
    let mut shadow = Vec::with_capacity(options.len());
    let mut ptxas = Vec::new();
    let mut i = 0;
    while i < options.len() {
        let o = options[i].as_str();
        // The architecture, attached or in the next word.
        let arch = match value_of(o, ARCH) {
            Some(v) => Some(v.to_string()),
            None if ARCH.contains(&o) => {
                i += 1;
                match options.get(i) {
                    Some(v) => Some(v.clone()),
                    None => return Plan::NotChecked(format!("{o} without a value")),
                }
            }
            None => None,
        };
        if let Some(a) = arch {
            if target.is_some() {
                return Plan::NotChecked("more than one architecture".into());
            }
            let Some(rest) = a.strip_prefix("sm_") else {
                return Plan::PtxOnly(format!("compiled for {a}: NVRTC makes no cubin, and PTX is checked when the driver loads it"));
            };
            target = Some(a.clone());
            shadow.push(format!("--gpu-architecture=compute_{rest}"));
            i += 1;
            continue;
        }
        match o {
            "-rdc=true" | "--relocatable-device-code=true" | "-dc" => return Plan::NotChecked(format!("{o}: relocatable device code is linked later, unchecked")),
            "-dlto" | "--dlink-time-opt" => return Plan::NotChecked(format!("{o}: link-time-optimization IR, not a cubin (checked when nvJitLink links it)")),
            "-lineinfo" | "--generate-line-info" => ptxas.push("-lineinfo".to_string()),
            "-G" | "--device-debug" => ptxas.push("-g".to_string()),
            "-Xptxas" | "--ptxas-options" => {
                // ptxas's own options: for the assembly only, not for the PTX compile.
                i += 1;
                match options.get(i) {
                    Some(v) => ptxas.extend(v.split(',').map(String::from)),
                    None => return Plan::NotChecked(format!("{o} without a value")),
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        if let Some(v) = value_of(o, &["-Xptxas", "--ptxas-options"]) {
            ptxas.extend(v.split(',').map(String::from));
            i += 1;
            continue;
        }
        if let Some(v) = value_of(o, &["-maxrregcount", "--maxrregcount"]) {
            ptxas.push(format!("--maxrregcount={v}"));
        }
        shadow.push(o.to_string());
        i += 1;
    }
    match target {
        Some(t) => Plan::Check { target: t, shadow_options: shadow, ptxas_flags: ptxas },
        None => Plan::PtxOnly("no -arch=sm_XX: NVRTC makes PTX only, checked when the driver loads it".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(o: &[&str]) -> Plan {
        plan(&o.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_real_architecture_is_checked_through_its_virtual_one() {
        assert_eq!(
            p(&["--gpu-architecture=sm_90", "-lineinfo", "--std=c++17"]),
            Plan::Check { target: "sm_90".into(), shadow_options: vec!["--gpu-architecture=compute_90".into(), "-lineinfo".into(), "--std=c++17".into()], ptxas_flags: vec!["-lineinfo".into()] }
        );
        assert_eq!(
            p(&["-arch", "sm_90a", "-G", "-maxrregcount=64"]),
            Plan::Check {
                target: "sm_90a".into(),
                shadow_options: vec!["--gpu-architecture=compute_90a".into(), "-G".into(), "-maxrregcount=64".into()],
                ptxas_flags: vec!["-g".into(), "--maxrregcount=64".into()]
            }
        );
        // ptxas options go to the assembly only.
        assert_eq!(
            p(&["-arch=sm_100f", "-Xptxas", "-O1,-dlcm=cg", "--ptxas-options=-v"]),
            Plan::Check { target: "sm_100f".into(), shadow_options: vec!["--gpu-architecture=compute_100f".into()], ptxas_flags: vec!["-O1".into(), "-dlcm=cg".into(), "-v".into()] }
        );
    }

    #[test]
    fn what_gives_no_whole_program_cubin_is_left_alone() {
        for o in [&["--gpu-architecture=compute_90"][..], &[][..], &["-std=c++17"][..]] {
            assert!(matches!(p(o), Plan::PtxOnly(_)), "{o:?}: {:?}", p(o));
        }
        for o in [&["-arch=sm_90", "-rdc=true"][..], &["-arch=sm_90", "-dlto"][..], &["-arch=sm_90", "-arch=sm_80"][..], &["-arch"][..]] {
            assert!(matches!(p(o), Plan::NotChecked(_)), "{o:?}: {:?}", p(o));
        }
    }
}
