//! No import cycle among runtime/src's modules, as the rewriter's test does for instrument/src:
//! module A depends on module B when A's code (comments and `#[cfg(test)]` parts left out) names
//! `crate::B` (a `use crate::B...` line or a path). Submodule files count as their top-level
//! module (`hooks/memory.rs` is `hooks`).
//!
//! The layers, bottom up, follow from it; where a lower layer must call a higher one (the state
//! starting the prefetch, loads taking what the prefetch prepared), `init::at_load` hands it a
//! function instead (`state::on_device_ready`, `modules::take_prepared_from`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or(text);
    text.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| l.split(" // ").next().unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().unwrap() != "bin" {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let module = rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
            if module == "lib" {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(&p).unwrap());
            let deps = g.entry(module.clone()).or_default();
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    g
}

/// Tarjan's strongly connected components of more than one module, each sorted.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: BTreeSet<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.insert(comp);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: BTreeSet::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn runtime_modules_have_no_import_cycle() {
    let g = graph();
    assert!(g.len() > 20 && g["hooks"].contains("state"), "the graph was not read: {g:?}");
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles in runtime/src: {found:?} (graph: {g:#?})");
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_passes_a_chain() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(cycles(&edges(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(cycles(&edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])), BTreeSet::from([vec!["a".to_string(), "b".into(), "c".into()]]));
    assert_eq!(code_of("use crate::x; // crate::y\n//! crate::z\n#[cfg(test)]\nuse crate::w;"), "use crate::x;");
}
