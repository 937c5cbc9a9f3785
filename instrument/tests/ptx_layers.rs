//! The rewriter's layering (instrument/src/ptx; stated in its mod.rs), read from the source: each
//! file of `ptx/` belongs to one layer, and names only files of its own layer or of layers below
//! it, with no import cycle among them:
//!
//! `ir` (the model of the input) <- `lines` (how a line of checked PTX is written) <- `plan`
//! (the passes deciding what to check and edit) <- `emit` (the text of checks and of gasan's
//! functions) <- `rewrite` (the walk that splices it all into the module, and the site table).
//!
//! A file names another when its code (comments and `#[cfg(test)]` items left out) holds a path
//! `super::X` or `crate::ptx::X` (in `ir/`, `super::super::X`), `X` a file of `ptx/`; a name
//! mod.rs imports from a file (`use ir::line::{Line, ...}`, `pub use lines::MARKER`) counts as
//! that file, any other item of mod.rs as mod.rs. `ir/` counts as one file (its own test keeps it
//! from naming the rest of `ptx/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom up, and their files (`ir` is the directory). A new file of `ptx/` must be
/// placed here.
const LAYERS: &[(&str, &[&str])] = &[
    ("ir", &["ir"]),
    ("lines", &["lines"]),
    ("plan", &["frames", "heap", "coalesce", "masked_runs", "prefetch", "loops", "bounds", "spaces", "space_check", "thread_ranges"]),
    ("emit", &["emit", "outside", "heap_functions"]),
    ("rewrite", &["mod", "sites"]),
];

/// `text` without its `#[cfg(test)]` items and its comments.
fn code_of(text: &str) -> String {
    let mut kept = String::new();
    let mut rest = text;
    while let Some(p) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..p]);
        rest = &rest[p + "#[cfg(test)]".len()..];
        let end = match (rest.find(';'), rest.find('{')) {
            (Some(semi), Some(brace)) if semi < brace => semi + 1,
            (Some(semi), None) => semi + 1,
            (_, Some(brace)) => brace + block_len(&rest[brace..]),
            (None, None) => rest.len(),
        };
        rest = &rest[end..];
    }
    kept.push_str(rest);
    kept.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The length of the `{...}` block `s` starts with, braces in string and character literals not
/// counted.
fn block_len(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') => i += s[i + 2..].find('\'').map_or(0, |e| e + 2),
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    s.len()
}

/// The first segments of the paths `after` starts with: `x::y` gives `x`, `{a::b, c as d, e::{f}}`
/// gives `a`, `c`, `e`.
fn first_segments(after: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let Some(list) = after.strip_prefix('{') else { return vec![ident(after)] };
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(ident(list[start..i].trim()));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(ident(list[start..i].trim()));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The names a `use` item of mod.rs brings in (the last segment, or its `as` name), from `path`
/// (what follows `use `, to the `;`).
fn imported_names(path: &str) -> Vec<String> {
    let leaf = |p: &str| {
        let p = p.trim();
        match p.split_once(" as ") {
            Some((_, alias)) => alias.trim().to_string(),
            None => p.rsplit("::").next().unwrap_or(p).trim().to_string(),
        }
    };
    match path.find('{') {
        Some(open) => {
            let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
            let module = path[..open].trim_end_matches("::").rsplit("::").next().unwrap_or("").to_string();
            inner.split(',').map(|p| if p.trim() == "self" { module.clone() } else { leaf(p) }).filter(|s| !s.is_empty()).collect()
        }
        None => vec![leaf(path)],
    }
}

/// File -> files it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ptx");
    let read = |p: &Path| code_of(&std::fs::read_to_string(p).unwrap());
    let mod_rs = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    // Files of ptx/ (test-only ones, `#[cfg(test)] mod x;`, left out).
    let test_only: BTreeSet<String> =
        mod_rs.split("#[cfg(test)]").skip(1).filter_map(|t| t.trim_start().strip_prefix("mod ")).filter_map(|t| t.split_once(';')).map(|(name, _)| name.trim().to_string()).collect();
    let mut files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|f| !test_only.contains(f))
        .collect();
    files.insert("ir".to_string());
    // Names mod.rs imports from a file: they count as that file.
    let mod_code = code_of(&mod_rs);
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    for stmt in mod_code.split(';') {
        let s = stmt.trim();
        let Some(path) = s.strip_prefix("pub use ").or_else(|| s.strip_prefix("use ")) else { continue };
        let source = path.split("::").next().unwrap_or("").trim().to_string();
        let source = from.get(&source).cloned().unwrap_or(source);
        if files.contains(&source) {
            for name in imported_names(path) {
                from.insert(name, source.clone());
            }
        }
    }

    let resolve = |name: &str| -> Option<String> {
        if files.contains(name) {
            Some(name.to_string())
        } else {
            Some(from.get(name).cloned().unwrap_or_else(|| "mod".to_string()))
        }
    };
    let names = |file: &str, code: &str, prefixes: &[&str]| {
        let mut out = BTreeSet::new();
        for prefix in prefixes {
            for (i, _) in code.match_indices(prefix) {
                // `super::super::x` read with the `super::` prefix is its own path.
                if *prefix == "super::" && code[..i].ends_with("super::") {
                    continue;
                }
                for name in first_segments(&code[i + prefix.len()..]) {
                    if name == "super" {
                        continue;
                    }
                    if let Some(to) = resolve(&name).filter(|to| to != file) {
                        out.insert(to);
                    }
                }
            }
        }
        out
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = files.iter().map(|f| (f.clone(), BTreeSet::new())).collect();
    for f in &files {
        match f.as_str() {
            "ir" => {
                for e in std::fs::read_dir(dir.join("ir")).unwrap() {
                    let p = e.unwrap().path();
                    let code = read(&p);
                    let prefixes: &[&str] = if p.file_name().is_some_and(|n| n == "mod.rs") { &["super::", "crate::ptx::"] } else { &["super::super::", "crate::ptx::"] };
                    let found = names("ir", &code, prefixes);
                    g.get_mut("ir").unwrap().extend(found);
                }
            }
            "mod" => {
                // mod.rs names its files directly (`emit::numbered`, `use ir::...`).
                for other in &files {
                    if other != "mod" && (mod_code.contains(&format!("{other}::")) || mod_code.contains(&format!("use {other}"))) {
                        g.get_mut("mod").unwrap().insert(other.clone());
                    }
                }
            }
            _ => {
                let found = names(f, &read(&dir.join(format!("{f}.rs"))), &["super::", "crate::ptx::"]);
                g.get_mut(f.as_str()).unwrap().extend(found);
            }
        }
    }
    g
}

/// Strongly connected components of more than one file (Tarjan), each sorted.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    fn visit<'a>(g: &'a BTreeMap<String, BTreeSet<String>>, v: &'a str, index: &mut BTreeMap<&'a str, (usize, usize)>, stack: &mut Vec<&'a str>, out: &mut BTreeSet<Vec<String>>) {
        let n = index.len();
        index.insert(v, (n, n));
        stack.push(v);
        for w in g.get(v).into_iter().flatten().map(String::as_str) {
            if !index.contains_key(w) {
                visit(g, w, index, stack, out);
                let lw = index[w].1;
                index.get_mut(v).unwrap().1 = index[v].1.min(lw);
            } else if stack.contains(&w) {
                let iw = index[w].0;
                index.get_mut(v).unwrap().1 = index[v].1.min(iw);
            }
        }
        if index[v].0 == index[v].1 {
            let mut comp = Vec::new();
            while let Some(w) = stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                out.insert(comp);
            }
        }
    }
    let (mut index, mut stack, mut out) = (BTreeMap::new(), Vec::new(), BTreeSet::new());
    for v in g.keys() {
        if !index.contains_key(v.as_str()) {
            visit(g, v, &mut index, &mut stack, &mut out);
        }
    }
    out
}

fn layer_of(file: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, files)| files.contains(&file))
}

#[test]
fn ptx_files_name_only_their_layer_and_those_below() {
    let g = graph();
    // The graph was read: files and the edges every layer has.
    assert!(g["emit"].contains("lines") && g["emit"].contains("ir") && g["mod"].contains("emit") && g["spaces"].contains("frames"), "{g:#?}");
    for (file, names) in &g {
        let own = layer_of(file).unwrap_or_else(|| panic!("ptx/{file}.rs is in no layer: place it in LAYERS (instrument/tests/ptx_layers.rs) and in ptx/mod.rs' comment"));
        for name in names {
            let theirs = layer_of(name).unwrap_or_else(|| panic!("{name} (named by {file}) is in no layer"));
            assert!(theirs <= own, "ptx/{file} ({}) names {name} ({}), a layer above it", LAYERS[own].0, LAYERS[theirs].0);
        }
    }
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles in instrument/src/ptx: {found:?}");
}

#[test]
fn the_reader_finds_paths_and_cycles() {
    assert_eq!(first_segments("emit::{ln, Lines};"), ["emit"]);
    assert_eq!(first_segments("{a::b, c as d, e::{f, g}, h}"), ["a", "c", "e", "h"]);
    assert_eq!(imported_names("ir::line::{find_pair, Line, LineMap}"), ["find_pair", "Line", "LineMap"]);
    assert_eq!(imported_names("ir::{access, cfg as branches}"), ["access", "branches"]);
    assert_eq!(imported_names("ir::header::{self, Directive}"), ["header", "Directive"]);
    assert_eq!(imported_names("lines::MARKER"), ["MARKER"]);
    let code = code_of(
        "use super::a;\n#[cfg(test)]\nfn t() { let s = \"{\"; use super::b; }\n// super::c\nuse super::d; // super::e\n#[cfg(test)]\nmod x;\n#[cfg(test)]\nmod tests {\n    use super::f;\n}\n",
    );
    assert!(code.contains("super::a") && code.contains("super::d"), "{code}");
    assert!(!["super::b", "super::c", "super::e", "super::f", "mod x"].iter().any(|p| code.contains(p)), "{code}");
    let edges = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(cycles(&edges(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(cycles(&edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])), BTreeSet::from([vec!["a".to_string(), "b".to_string(), "c".to_string()]]));
}
