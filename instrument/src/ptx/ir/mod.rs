//! The rewriter's model of its input, which every pass reads (issue 37; the worked proposal is
//! `shared/research/shape.md` section 4). It decides each fact about the input in one place and
//! imports nothing else of `ptx/`: `ir` <- `lines` <- `plan` <- `emit` <- `rewrite` (ptx/mod.rs
//! lists the layers; the test below holds `ir` to it, instrument/tests/ptx_layers.rs all of
//! `ptx/`).
//!
//! Here so far: the module's header (header.rs: `.version`, `.target`, `.address_size`; exported
//! as [`crate::ptx::PtxHeader`]), a line and its statements (line.rs), what a statement does to control flow and
//! to earlier checks, and the module's statements across lines (stmt.rs: a `call` or a
//! declaration spread over lines, read by frames.rs and heap.rs), the opcode table (opcode.rs), the statement decoder and the
//! access classifier (access.rs), where labels are (labels.rs: every label on a line of its own),
//! the register types declared above each line of a body (regs.rs: `DeclaredRegs`, the one reader every pass asks), which statements define each register of a body (defs.rs), where function bodies are (bodies.rs), a function's header and parameters (func.rs) and their labels, branches and loops (cfg.rs).

pub(in crate::ptx) mod access;
pub(in crate::ptx) mod bodies;
pub(in crate::ptx) mod cfg;
pub(in crate::ptx) mod decl;
pub(in crate::ptx) mod defs;
pub(in crate::ptx) mod func;
pub(in crate::ptx) mod header;
pub(in crate::ptx) mod labels;
pub(in crate::ptx) mod line;
pub(in crate::ptx) mod opcode;
pub(in crate::ptx) mod regs;
pub(in crate::ptx) mod stmt;

#[cfg(test)]
mod tests {
    /// `ir` imports nothing from the rest of `ptx/`: outside their test modules, its files name
    /// only each other (`super::<file>` from a file of `ir`; nothing from `ir/mod.rs`, whose
    /// `super` is `ptx/`), the crate's other modules (`crate::abi`, `crate::shadow`) and other
    /// crates. Read from the source, so a new file or a new path is held to it too.
    #[test]
    fn ir_imports_nothing_else_of_ptx() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ptx/ir");
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "rs")).collect();
        files.sort();
        let own: Vec<String> = files.iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).filter(|s| s != "mod").collect();
        assert!(own.len() >= 3, "{files:?}");
        let (up, ptx_path) = (["super", "::"].concat(), ["crate::ptx", "::"].concat());
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            let is_mod = f.file_name().is_some_and(|n| n == "mod.rs");
            let code_lines = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code_lines.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let at = format!("{}:{}: {line}", f.display(), n + 1);
                assert!(!code.contains(&ptx_path), "{at}");
                let mut rest = code;
                while let Some(p) = rest.find(&up) {
                    rest = &rest[p + up.len()..];
                    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    let names: Vec<String> = match rest.strip_prefix('{') {
                        Some(list) => list.split('}').next().unwrap_or("").split(',').map(|m| m.trim().split("::").next().unwrap_or("").to_string()).filter(|m| !m.is_empty()).collect(),
                        None => vec![name],
                    };
                    assert!(!is_mod && names.iter().all(|m| own.contains(m)), "{at}: imports {names:?} from outside ir");
                }
            }
        }
    }
}
