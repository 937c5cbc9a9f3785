//! Interposition coverage against the CUDA 13.0 headers: every hook is a real driver symbol, and
//! every allocation, copy/set, synchronization, launch and module-loading entry point of cuda.h is
//! either hooked or on the explicit pass-through list below (with the reason).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn cuda_include() -> PathBuf {
    let root = std::env::var_os("GASAN_CUDA_ROOT").map(PathBuf::from).unwrap_or_else(|| {
        let s = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cuda-toolchain.sh");
        let out = std::process::Command::new("bash").arg(s).output().unwrap();
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    });
    root.join("include")
}

/// Exact entry-point names `cudaTypedefs.h` declares (`PFN_cuX_v12000` → versioned names come from cuda.h defines).
fn header_symbols() -> BTreeSet<String> {
    let cuda_h = std::fs::read_to_string(cuda_include().join("cuda.h")).unwrap();
    let mut s = BTreeSet::new();
    let mut prev = "";
    for line in cuda_h.lines() {
        let l = line.trim();
        // A declaration split after the return type: `CUresult CUDAAPI` / `cuLinkComplete(...)`.
        if prev == "CUresult CUDAAPI" && l.starts_with("cu") {
            if let Some(name) = l.split('(').next() {
                s.insert(name.trim().to_string());
            }
        }
        prev = l;
        // `CUresult CUDAAPI cuMemAlloc(...)` after the macro renames, and the `#define cuX cuX_v2` lines.
        if let Some(rest) = l.strip_prefix("CUresult CUDAAPI ") {
            if let Some(name) = rest.split('(').next() {
                s.insert(name.trim().to_string());
            }
        }
        if let Some(rest) = l.strip_prefix("#define ") {
            let mut it = rest.split_whitespace();
            if let (Some(a), Some(b)) = (it.next(), it.next()) {
                if a.starts_with("cu") && b.starts_with("cu") {
                    s.insert(b.to_string());
                }
                if let Some(inner) = b.strip_prefix("__CUDA_API_PTDS(").or_else(|| b.strip_prefix("__CUDA_API_PTSZ(")) {
                    let base = inner.trim_end_matches(')');
                    s.insert(base.to_string());
                    s.insert(format!("{base}{}", if b.contains("PTDS") { "_ptds" } else { "_ptsz" }));
                }
            }
        }
    }
    s
}

/// Entry points of the checked families that gasan leaves to the driver, and why.
const PASS_THROUGH: &[(&str, &str)] = &[
    ("cuMemcpyPeer", "peer copies: multi-GPU pools are a later step"),
    ("cuMemcpyPeerAsync", "peer copies: multi-GPU pools are a later step"),
    ("cuLaunchHostFunc", "no device memory"),
    ("cuMemcpy3DBatchAsync_v2", "batched copies: range check not implemented yet"),
    ("cuMemcpy3DPeer", "peer copies: multi-GPU pools are a later step"),
    ("cuMemcpy3DPeerAsync", "peer copies: multi-GPU pools are a later step"),
    ("cuMemcpyAtoA_v2", "CUDA arrays are not pool memory"),
    ("cuMemcpyAtoD_v2", "CUDA arrays: device side not range-checked yet"),
    ("cuMemcpyAtoH_v2", "CUDA arrays are not pool memory"),
    ("cuMemcpyAtoHAsync_v2", "CUDA arrays are not pool memory"),
    ("cuMemcpyDtoA_v2", "CUDA arrays: device side not range-checked yet"),
    ("cuMemcpyHtoA_v2", "CUDA arrays are not pool memory"),
    ("cuMemcpyHtoAAsync_v2", "CUDA arrays are not pool memory"),
];

#[test]
fn every_hook_is_a_driver_symbol() {
    let syms = header_symbols();
    assert!(syms.len() > 300, "parsed only {} cuda.h symbols", syms.len());
    for (name, _) in gasan_runtime::hooks::table() {
        assert!(syms.contains(name), "hook {name} is not a CUDA 13.0 driver entry point");
    }
}

#[test]
fn checked_families_are_hooked_or_listed() {
    let syms = header_symbols();
    let hooked: BTreeSet<&str> = gasan_runtime::hooks::table().into_iter().map(|(n, _)| n).collect();
    let listed: BTreeSet<&str> = PASS_THROUGH.iter().map(|(n, _)| *n).collect();
    let families = ["cuMemAlloc", "cuMemFree", "cuMemcpy", "cuMemset", "cuModuleLoad", "cuLibraryLoad", "cuLaunch", "cuLink"];
    let mut missing = Vec::new();
    for s in &syms {
        if families.iter().any(|f| s.starts_with(f)) && !hooked.contains(s.as_str()) && !listed.contains(s.as_str()) {
            // Versions superseded by a newer export of the same call are reached through the newer one.
            let superseded = syms.contains(&format!("{s}_v2")) || s.ends_with("_ptds") || s.ends_with("_ptsz");
            if !superseded {
                missing.push(s.clone());
            }
        }
    }
    assert!(missing.is_empty(), "entry points neither hooked nor on the pass-through list: {missing:?}");
    let both: Vec<_> = listed.iter().filter(|s| hooked.contains(*s)).collect();
    assert!(both.is_empty(), "hooked entry points still on the pass-through list: {both:?}");
    let core = ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuModuleLoadData", "cuLibraryLoadData", "cuLaunchKernel"];
    for c in core {
        assert!(hooked.contains(c), "core entry point {c} not hooked");
    }
}

/// cuda.h's prototype of every driver function, by the exact symbol a program links against: the
/// main API's declarations go to the names the header's defines turn them into (`cuX` →
/// `cuX_v2`, `__CUDA_API_PTDS(cuX)` → `cuX` and `cuX_ptds`), and the legacy declarations at the
/// header's end (indented, for the older exports that remain) name the rest.
fn header_prototypes() -> BTreeMap<String, Vec<String>> {
    let cuda_h = std::fs::read_to_string(cuda_include().join("cuda.h")).unwrap();
    // (declared name, parameters, whether it is in the main API)
    let mut decls: Vec<(String, Vec<String>, bool)> = Vec::new();
    let mut pending: Option<(String, bool)> = None;
    for line in cuda_h.lines() {
        if let Some((p, _)) = pending.as_mut() {
            p.push(' ');
            p.push_str(line.trim());
        } else if line.trim_start().starts_with("CUresult CUDAAPI") {
            pending = Some((line.trim().to_string(), line.starts_with("CUresult")));
        }
        if let Some((p, main)) = pending.take_if(|(p, _)| p.contains(");") || (p.trim_end() != "CUresult CUDAAPI" && !p.contains('('))) {
            let Some(rest) = p.strip_prefix("CUresult CUDAAPI") else { continue };
            let Some((name, params)) = rest.split_once('(') else { continue };
            let params = params.rsplit_once(')').map_or(params, |(a, _)| a);
            let params: Vec<String> = params.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty() && x != "void").collect();
            decls.push((name.trim().to_string(), params, main));
        }
    }
    // `#define cuX cuX_v2` / `#define cuX __CUDA_API_PTSZ(cuX_v2)`: the symbols cuX's main
    // declaration becomes.
    let mut renamed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in cuda_h.lines() {
        let Some(rest) = line.trim().strip_prefix("#define ") else { continue };
        let mut it = rest.split_whitespace();
        let (Some(a), Some(b)) = (it.next(), it.next()) else { continue };
        if !a.starts_with("cu") {
            continue;
        }
        if b.starts_with("cu") {
            renamed.entry(a.to_string()).or_default().push(b.to_string());
        } else if let Some(inner) = b.strip_prefix("__CUDA_API_PTDS(").or_else(|| b.strip_prefix("__CUDA_API_PTSZ(")) {
            let inner = inner.trim_end_matches(')');
            let suffix = if b.contains("PTDS") { "_ptds" } else { "_ptsz" };
            renamed.entry(a.to_string()).or_default().extend([inner.to_string(), format!("{inner}{suffix}")]);
        }
    }
    let mut protos = BTreeMap::new();
    for (name, params, _) in decls.iter().filter(|d| d.2) {
        match renamed.get(name) {
            Some(targets) => targets.iter().for_each(|t| {
                protos.entry(t.clone()).or_insert_with(|| params.clone());
            }),
            None => {
                protos.entry(name.clone()).or_insert_with(|| params.clone());
            }
        }
    }
    for (name, params, _) in decls.into_iter().filter(|d| !d.2) {
        protos.entry(name).or_insert(params);
    }
    protos
}

/// The size of a C parameter declaration on 64-bit Linux, where cuda.h says it: pointers,
/// handles (`typedef struct X_st *CUx`), enums (`typedef enum ... CUx`) and the integer types;
/// `None` for anything else (by-value structs, which no hooked function takes).
fn c_parameter_size(decl: &str, handles: &BTreeSet<String>, enums: &BTreeSet<String>) -> Option<usize> {
    if decl.contains('*') || decl.contains('[') {
        return Some(8);
    }
    let words: Vec<&str> = decl.split_whitespace().filter(|w| *w != "const").collect();
    let ty = words[..words.len().saturating_sub(1)].join(" ");
    Some(match ty.as_str() {
        t if handles.contains(t) => 8,
        t if enums.contains(t) => 4,
        "size_t" | "unsigned long long" | "CUdeviceptr" | "CUdeviceptr_v2" | "cuuint64_t" | "CUmemGenericAllocationHandle" | "CUtexObject" | "CUsurfObject" => 8,
        "unsigned int" | "int" | "unsigned" | "cuuint32_t" | "CUdevice" | "CUdevice_v1" | "float" => 4,
        "unsigned short" | "short" => 2,
        "unsigned char" | "char" => 1,
        _ => return None,
    })
}

#[test]
fn every_hook_takes_the_parameters_of_its_cuda_h_prototype() {
    let cuda_h = std::fs::read_to_string(cuda_include().join("cuda.h")).unwrap();
    let (mut handles, mut enums) = (BTreeSet::new(), BTreeSet::new());
    for line in cuda_h.lines().map(str::trim) {
        // typedef struct CUctx_st *CUcontext;  /  } CUlimit;  closing a typedef enum
        if let Some(rest) = line.strip_prefix("typedef struct ").filter(|r| r.contains('*')) {
            if let Some(name) = rest.rsplit('*').next() {
                handles.insert(name.trim_end_matches(';').trim().to_string());
            }
        }
        if let Some(rest) = line.strip_prefix("typedef enum ") {
            // `typedef enum CUlimit_enum CUlimit;` on one line
            if let Some(name) = rest.trim_end_matches(';').split_whitespace().nth(1) {
                enums.insert(name.to_string());
            }
        }
        if let Some(rest) = line.strip_prefix("typedef ").filter(|r| r.contains("_enum ")) {
            if let Some(name) = rest.trim_end_matches(';').split_whitespace().last() {
                enums.insert(name.to_string());
            }
        }
        if let Some(name) = line.strip_prefix("} ").and_then(|r| r.strip_suffix(';')).filter(|n| n.starts_with("CU") && !n.contains(' ')) {
            enums.insert(name.to_string());
        }
    }
    // Closing braces of structs also match the last rule; a name that is a handle is not an enum.
    enums.retain(|e| !handles.contains(e));
    let protos = header_prototypes();
    assert!(protos.len() > 400, "parsed only {} cuda.h prototypes", protos.len());
    let (mut checked, mut wrong) = (0, Vec::new());
    for (name, sizes) in gasan_runtime::hooks::parameter_sizes() {
        let proto = protos.get(name).unwrap_or_else(|| panic!("no cuda.h prototype for hook {name}"));
        if proto.len() != sizes.len() {
            wrong.push(format!("{name}: {} parameters here, {} in cuda.h ({proto:?})", sizes.len(), proto.len()));
            continue;
        }
        for (i, (decl, &size)) in proto.iter().zip(&sizes).enumerate() {
            match c_parameter_size(decl, &handles, &enums) {
                Some(c) if c != size => wrong.push(format!("{name}: parameter {i} ({decl}) is {c} bytes in cuda.h, {size} here")),
                Some(_) => checked += 1,
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "hooks that disagree with cuda.h: {wrong:#?}");
    assert!(checked > 300, "only {checked} parameters compared");
}
