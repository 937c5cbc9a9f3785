//! Inputs the coverage-guided fuzzers (fuzz/) found, kept as regression tests.

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::ffi::OsStr;

/// fuzz/ptx_rewrite: a function whose body opens and closes on one line got the rewriter's
/// per-function `.reg` declarations after its closing brace, at module scope, which ptxas rejects
/// ("Module-scoped variables in .reg state space are not allowed").
#[test]
fn one_line_function_body_still_assembles() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry m() { ret; }\n\
               .visible .entry n(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<2>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.global.f32 %f1, [%rd2];\n\tret;\n}\n";
    let dir = scratch("fuzz-one-line-fn");
    for opts in [InstrumentOptions::default(), InstrumentOptions { optimize: false, ..Default::default() }] {
        let r = instrument_ptx(ptx, &opts).unwrap();
        assert_eq!(r.stats.total().checked, 1);
        let after = r.ptx.split(".visible .entry m() { ret; }\n").nth(1).expect("m kept verbatim on its own line");
        assert!(after.trim_start().starts_with(".visible .entry n("), "nothing emitted between m and n:\n{after}");
        let f = dir.join("m.ptx");
        std::fs::write(&f, &r.ptx).unwrap();
        run_tool("ptxas", &[OsStr::new("-arch=sm_90"), f.as_os_str(), OsStr::new("-o"), dir.join("m.cubin").as_os_str()]);
    }
    // Last line, no trailing newline: the declarations did not even get a line of their own.
    let r = instrument_ptx(".version 9.0\n.entry m() {}", &InstrumentOptions::default()).unwrap();
    assert!(r.ptx.ends_with(".entry m() {}"), "{}", &r.ptx[r.ptx.len().saturating_sub(200)..]);
}

/// Found by the ptx_rewrite fuzz target: a heap declaration the input never finishes (no `;`
/// before the end) was held back by the heap-call rewriter and lost from the output.
#[test]
fn an_unfinished_heap_declaration_is_kept() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.extern .func  (.param .b64 func_retval0) malloc\n(\n\t.param .b64 malloc_param_0\n)\n;\n.extern .func free\n(\n\t.param .b64 free_param_0\n)\n";
    let out = gasan_instrument::ptx::instrument_ptx(ptx, &gasan_instrument::ptx::InstrumentOptions::default()).expect("instruments");
    assert!(out.ptx.contains(".extern .func free\n(\n\t.param .b64 free_param_0\n)\n"), "{}", out.ptx);
}

/// Found by the ptx_rewrite fuzz target (2026-11-25): a heap declaration that opens a brace
/// (`.extern .func free{`) swallows the next statement while it is collected, but that statement,
/// a memory access, went out through the access path at once, ahead of the held declaration: the
/// output changed the order of the input's statements.
#[test]
fn a_statement_held_in_a_heap_declaration_keeps_its_place() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.extern .func  (.param .b64 func_retval0) malloc\n(\n\t.param .b64 malloc_param_0\n)\n;\n\
               .extern .func free{\n\tst.local.b8 [__local_depot0+16], 1;\n\tret;\n}\n";
    for opts in [InstrumentOptions::default(), InstrumentOptions { optimize: false, hoist_loops: false, ..Default::default() }] {
        let out = instrument_ptx(ptx, &opts).expect("instruments");
        let decl = out.ptx.find(".extern .func free{").or_else(|| out.ptx.find(".func free{")).expect("declaration kept");
        let store = out.ptx.find("st.local.b8 [__local_depot0+16], 1;").expect("store kept");
        assert!(decl < store, "{opts:?}: the store moved ahead of the declaration holding it:\n{}", out.ptx);
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-25): `st.global.v0.f32` made a zero-width access,
/// and GASan-128's check computed `width - 1` (an overflow panic in a checked build). A vector
/// count other than 2, 4 or 8 is malformed: the access is counted unknown and left unchecked.
#[test]
fn a_zero_element_vector_access_is_unknown_not_checked() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<3>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tst.global.v0.f32 [%rd2], {%f1, %f2};\n\tst.global.v2.f32 [%rd2], {%f1, %f2};\n\tret;\n}\n";
    for scale in [gasan_instrument::shadow::Scale::S7, gasan_instrument::shadow::Scale::S8] {
        for recover in [false, true] {
            let r = instrument_ptx(ptx, &InstrumentOptions { scale, recover, ..Default::default() }).unwrap();
            let t = r.stats.total();
            assert_eq!((t.checked, t.unknown), (1, 1), "{scale:?} recover {recover}: the v2 store is checked, the v0 one unknown");
        }
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-25): a line of empty statements before an access
/// (`;;ld.global.f32 %f3, [%rd2];`) was one statement to the coalescing pass, which let it end a
/// group of accesses through the same register (the middle one's check eliminated on its
/// strength), and several to the rewriter, which never checked it there: the group's far end went
/// unchecked while counted as checked. Such a line is now several statements to every pass.
#[test]
fn empty_statements_do_not_hide_an_access_from_its_group() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<4>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.global.f32 %f1, [%rd2+-8];\n\tld.global.f32 %f2, [%rd2+-4];\n\
               \t;;ld.global.f32 %f3, [%rd2];\n\tst.global.f32 [%rd2+-8], %f3;\n\tret;\n}\n";
    let last_load = 12;
    for scale in [gasan_instrument::shadow::Scale::S7, gasan_instrument::shadow::Scale::S8] {
        for aligned_pool in [false, true] {
            let opts = InstrumentOptions { scale, aligned_pool, hoist_loops: false, ..Default::default() };
            let r = instrument_ptx(ptx, &opts).unwrap();
            assert_eq!(r.sites.sites.len(), r.stats.total().checked as usize, "{opts:?}: every check counted has its site");
            assert!(r.sites.sites.iter().any(|s| s.ptx_line == last_load), "{opts:?}: the load after the empty statements is checked");
        }
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-25, in CI): a brace closing a function after
/// other text on its line (`mov.f32 %f3, 0f00000000; }`), inside an outer brace pair, ended the
/// body for the rewriter but not for the coalescing planner, which kept grouping accesses through
/// the same register past it and registered a site at the group's first access for a check never
/// emitted (two sites, one check). Every pass now takes the bodies from one scan (bodies.rs).
#[test]
fn a_group_never_reaches_past_the_end_of_its_function() {
    let ptx = include_str!("../../fuzz/seeds/ptx_rewrite/body_closed_after_text.ptx");
    let (first_load, closing_line) = (11, 12);
    for scale in [gasan_instrument::shadow::Scale::S7, gasan_instrument::shadow::Scale::S8] {
        for (aligned_pool, hoist_loops) in [(false, true), (true, false)] {
            let opts = InstrumentOptions { scale, aligned_pool, hoist_loops, ..Default::default() };
            let r = instrument_ptx(ptx, &opts).unwrap();
            let lines: Vec<u32> = r.sites.sites.iter().map(|s| s.ptx_line).collect();
            assert_eq!(r.sites.sites.len(), r.stats.total().checked as usize, "{opts:?}: sites at lines {lines:?}");
            assert!(lines.iter().all(|&l| l <= closing_line), "{opts:?}: a site after the body's end: {lines:?}");
            assert!(lines.contains(&first_load), "{opts:?}: the access inside the body is checked");
        }
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-27): operands whose brackets do not balance
/// (`[%}]`, `%4}`) were taken for an address register and for recomputed arithmetic and copied
/// into the added lines, which then closed braces they never opened. Such operand lists are no
/// instruction now: nothing of them is copied.
#[test]
fn unbalanced_operands_are_not_copied_into_added_lines() {
    let inputs = [".version 9.0\n.entry i({{\nst.f32 [%}];\n}", ".version 8.0\n.entry i({\n.reg b64 %rd<{\nld.u32 , [%];\nadd.s64 %rd4,%4};\n\tcp.async.shared.global ,[%rd4],4;\n}"];
    for ptx in inputs {
        let Ok(r) = instrument_ptx(ptx, &InstrumentOptions::default()) else { continue };
        let balance: i64 = r
            .ptx
            .lines()
            .filter(|l| l.contains(gasan_instrument::ptx::MARKER))
            .map(|l| {
                let code = l.split("//").next().unwrap_or("");
                code.matches('{').count() as i64 - code.matches('}').count() as i64
            })
            .sum();
        assert_eq!(balance, 0, "{}", r.ptx);
        assert!(!r.ptx.lines().any(|l| l.contains(gasan_instrument::ptx::MARKER) && (l.contains("%}") || l.contains("%4}"))), "{}", r.ptx);
    }
}

/// Reported by the ptx_rewrite fuzz target (finding 3) and fixed 2026-11-27: statements that share
/// a line with a scope brace were not checked. nvcc writes a one-line inline-asm block as written,
/// so `asm("{ .reg .u64 t; ld.global.u64 t, [%1]; ... }")` left its accesses unchecked. The braces
/// are statements of their own now: each access gets its check inside the block, and the module
/// assembles.
#[test]
fn one_line_inline_asm_blocks_are_checked() {
    let dir = scratch("fuzz-inline-asm");
    let ptx = nvcc_ptx_of(
        &dir,
        "inline_asm",
        r#"__global__ void k(unsigned long long *out, const unsigned long long *p, int n) {
    unsigned long long v;
    asm volatile("{ .reg .u64 t; ld.global.u64 t, [%1]; mov.u64 %0, t; }" : "=l"(v) : "l"(p + n));
    asm volatile("{ .reg .pred q; setp.ne.s32 q, %2, 0; @q st.global.u64 [%0], %1; }" :: "l"(out + n), "l"(v), "r"(n));
}
"#,
    );
    assert!(ptx.contains("{ .reg .u64 t; ld.global.u64 t, ["), "nvcc keeps the block on one line:\n{ptx}");
    for opts in [InstrumentOptions::default(), InstrumentOptions { optimize: false, recover: true, ..Default::default() }] {
        let r = instrument_ptx(&ptx, &opts).unwrap();
        let t = r.stats.total();
        assert_eq!((t.found, t.checked), (2, 2), "{opts:?}");
        // Each access's check comes after its block opens (it may use registers declared there).
        let open = r.ptx.find(".reg .u64 t;").unwrap();
        let load = r.ptx.find("ld.global.u64 t, [").unwrap();
        assert!(r.ptx[open..load].contains(gasan_instrument::ptx::MARKER), "no check between the block's start and its load:\n{}", r.ptx);
        assemble(&dir, "checked", &r.ptx);
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-27): `.local .b8 __local_depot .{` (a scope brace
/// after a declaration with a stray word) was read as a frame named `__local_depot.`, a name the
/// module does not have, glued from two words. A declared name is one word now: what follows it
/// is dimensions or nothing.
#[test]
fn a_declared_name_is_one_word() {
    let ptx = ".version 9.0\n.entry _({{\n.local .b8\t__local_depot .{\n.reg b64 %rd\n}st.u32\t[%rd];}}";
    if let Ok(r) = instrument_ptx(ptx, &InstrumentOptions::default()) {
        for s in &r.sites.sites {
            if let Some(sp) = &s.space {
                assert!(ptx.contains(&sp.variable), "{sp:?}");
            }
        }
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-27, CI): a shared range group whose leader an
/// earlier check proved (spaces.rs `available_checks`) dropped its check, but its members still
/// counted as checked, so the module claimed more shared checks than it had sites. The members go
/// with their leader.
#[test]
fn members_of_a_proven_group_are_not_counted_as_checked() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u32 p)\n{\n\
               \t.reg .b32 %r<9>;\n\t.reg .f32 %f<9>;\n\t.shared .align 4 .b8 a[128];\n\
               \tmov.u32 %r1, a;\n\tld.param.u32 %r8, [p];\n\tadd.s32 %r2, %r1, %r8;\n\
               \tld.shared.f32 %f1, [%r2];\n\tld.shared.f32 %f2, [%r2+4];\n\tbar.sync 0;\n\
               \tld.shared.f32 %f3, [%r2];\n\tld.shared.f32 %f4, [%r2+4];\n\tret;\n}\n";
    let r = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    let t = r.stats.total();
    let space_sites = r.sites.sites.iter().filter(|s| s.space.is_some()).count();
    assert_eq!((space_sites, t.space_checked as usize, t.space_eliminated), (2, 2, 2), "{t:?}");
}

/// Found by the ptx_rewrite fuzz target in CI (2026-11-28): an address whose "register" was
/// `%}16 \t[%r88` (malformed input) was taken as a register and copied into the check's added
/// lines, whose braces then no longer balanced (the `{` before it keeps the module's own braces
/// balanced, as the fuzzer's input did). Only a register's name is a register base now; the
/// access is unknown (left as it is).
#[test]
fn an_address_base_that_is_no_register_name_is_not_copied() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<2>;\n\
               \tld.param.u64 %rd1, [p];\n\t{\n\tst.f32 [%}16 \t[%rd1+-128], %f1;\n\tst.f32 [%rd1+-128], %f1;\n\tret;\n}\n";
    for opts in [InstrumentOptions::default(), InstrumentOptions { optimize: false, recover: true, param_bounds: false, ..Default::default() }] {
        let r = instrument_ptx(ptx, &opts).unwrap();
        let added: String = r.ptx.lines().filter(|l| l.contains("//gasan")).map(|l| l.split("//").next().unwrap_or("")).collect();
        assert_eq!(added.matches('{').count(), added.matches('}').count(), "{opts:?}:\n{}", r.ptx);
        assert!(!added.contains("%}16"), "{}", r.ptx);
        assert_eq!(r.stats.total().checked, 1, "the well-formed store is checked: {:?}", r.stats.total());
    }
}

/// Found by the ptx_rewrite fuzz target (2026-11-28): an access on the line after an unfinished
/// heap call (`@%p1 call free, (` with no `)`) is part of that call's statement for the rewriter's
/// walk, but the range-group planner led a group from it: the group's later accesses counted as
/// checked at their leader, which never emitted their checks (no site, no check). The planner
/// now ends groups at a line that continues an open statement.
#[test]
fn an_access_inside_an_unfinished_call_leads_no_range_group() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.extern .func free (.param .b64 p);\n\
               .visible .entry k(.param .u64 a, .param .u64 b)\n{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\
               \tld.param.u64 %rd1, [a];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tsetp.ne.u64 %p1, %rd2, 0;\n\
               \t@%p1 call free, (\n\tld.global.u32 %r1, [%rd2+-8];\n\tld.global.u32 %r2, [%rd2+-4];\n\
               \tld.global.u32 %r3, [%rd2];\n\tld.global.u32 %r4, [%rd2+4];\n\tret;\n}\n";
    let r = instrument_ptx(ptx, &InstrumentOptions::default()).unwrap();
    let t = r.stats.total();
    // The three accesses after the call's swallowed line: checked among themselves, and every
    // check counted has its site.
    assert_eq!((t.found, t.checked + t.eliminated), (3, 3), "{:?}", t);
    assert!(t.checked > 0, "{:?}", t);
    assert_eq!(r.sites.len(), (t.checked + t.space_checked) as usize, "{:?}", t);
}

/// Found by the ptx_rewrite fuzz target (CI on a fresh clone, 2026-12-04): a heap declaration that
/// spans two lines, with the next heap declaration after its `);` on the same line. The heap
/// rewrite read the two as one statement: it renamed both but gave only the first (`malloc`) its
/// treatment, so `free` was declared without its site parameter while its call passed one, and
/// ptxas refused the checked PTX ("Call has wrong number of parameters"). Each statement is now
/// read on its own. The checked PTX must assemble with the pinned ptxas under every option set the
/// fuzz step's ptxas check uses, and more.
#[test]
fn heap_declarations_sharing_a_line_are_each_rewritten() {
    let ptx = include_str!("../../fuzz/seeds/ptx_rewrite/heap_decls_share_a_line.ptx");
    assert!(ptx.contains("malloc (.param .b64 p\n);.extern .func free (.param .b64 p);"), "the seed keeps its shape");
    let dir = scratch("fuzz-heap-decls-share-a-line");
    let sets = [
        InstrumentOptions::default(),
        InstrumentOptions { hoist_loops: false, scale: gasan_instrument::shadow::Scale::S7, ..Default::default() },
        InstrumentOptions { outside_checks: true, aligned_pool: true, ..Default::default() },
        InstrumentOptions { recover: true, optimize: false, param_bounds: false, ..Default::default() },
    ];
    for (n, opts) in sets.into_iter().enumerate() {
        let r = instrument_ptx(ptx, &opts).unwrap();
        assert!(r.ptx.contains(".func __gasan_free (.param .b64 p, .param .b32 __gasan_free_site);"), "{opts:?}:\n{}", r.ptx);
        assert!(r.ptx.contains(".func (.param .b64 r) __gasan_malloc (.param .b64 p\n);"), "{opts:?}:\n{}", r.ptx);
        // The call passes the id of its own free site.
        let free_site = r.sites.sites.iter().position(|s| s.kind == gasan_instrument::abi::AccessKind::Free).expect("a free site");
        assert!(r.ptx.contains(&format!("call __gasan_free, (param0, {free_site}); // guarded")), "{opts:?}:\n{}", r.ptx);
        // Both replacements are defined.
        assert!(r.ptx.contains(".func __gasan_free(.param .b64 gasan_ptr, .param .b32 gasan_site)"), "{opts:?}");
        assert!(r.ptx.contains(".func (.param .b64 gasan_ret) __gasan_malloc(.param .b64 gasan_size)"), "{opts:?}");
        let f = dir.join(format!("checked{n}.ptx"));
        std::fs::write(&f, &r.ptx).unwrap();
        // `-c`: the module declares the driver's extern heap functions.
        let cubin = dir.join(format!("checked{n}.cubin"));
        run_tool("ptxas", &[OsStr::new("-arch=sm_90"), OsStr::new("-c"), f.as_os_str(), OsStr::new("-o"), cubin.as_os_str()]);
    }
}

/// Found by the ptx_rewrite fuzz target (2026-12-05, two inputs; fuzz/seeds/ptx_rewrite/
/// reserved_*.ptx): a module naming gasan's own symbols (a function `__gasan_topfree`, whose
/// parameter starts like frames.rs' `__gasan_top`) or registers (`%gsct`, the register a call
/// passes its frame top in) had its own text taken for gasan's edits. Such a module is refused by
/// name, so the application's original runs; a mention in a comment, or a name merely containing
/// the prefix, is no use of it.
#[test]
fn a_module_naming_gasans_own_names_is_refused() {
    use gasan_instrument::ptx::PtxError;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/ptx_rewrite");
    for (file, name, line) in [("reserved_name_gasan_topfree.ptx", "__gasan_topfree", 4), ("reserved_register_gsct.ptx", "%gsct", 12)] {
        let ptx = std::fs::read_to_string(dir.join(file)).unwrap();
        for opts in [InstrumentOptions::default(), InstrumentOptions { outside_checks: true, ..Default::default() }] {
            let err = instrument_ptx(&ptx, &opts).err();
            assert_eq!(err, Some(PtxError::ReservedName { name: name.to_string(), line }), "{file}");
            assert!(err.unwrap().to_string().contains(name));
        }
    }
    let module = |body: &str| format!(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n\t.reg .b64 %rd<3>;\n{body}\n\tret;\n}}\n");
    for (body, refused) in [
        ("\tld.param.u64 %rd1, [p]; // __gasan_top, %gsct", None),
        ("\tld.param.u64 %rd1, [p];\n\tmov.u64 %rd2, my__gasan_x;", None),
        ("\tld.param.u64 %rd1, [p];\n\tmov.u64 %gs, %rd1;", None),
        ("\tld.param.u64 %rd1, [p];\n\tmov.u64 %rd2, __gasan_heap_x;", Some(("__gasan_heap_x", 8))),
        ("\t.reg .b64 %gsa<2>;\n\tld.param.u64 %gsa1, [p];", Some(("%gsa", 7))),
    ] {
        let got = instrument_ptx(&module(body), &InstrumentOptions::default()).err();
        assert_eq!(got, refused.map(|(name, line)| PtxError::ReservedName { name: name.to_string(), line }), "{body}");
    }
}

/// Found by the ptx_rewrite fuzz target (2026-12-05, under `--no-opt --recover`;
/// fuzz/seeds/ptx_rewrite/recover_zeroes_malformed_vector_destination.ptx): a load whose
/// destination is no register and no `{...}` list of registers (`%rd1trix... {%r8, %r9, %r10,
/// %r11}`) had its destination's pieces copied into the recover-mode zeroing (`mov.b32
/// %rd1trix... {%r8, 0;`), an added line opening a brace it never closed. Such an access is
/// malformed, as a `.v0` vector is: counted unknown and left alone, nothing of it copied. A
/// well-formed vector destination still gets each of its registers zeroed.
#[test]
fn a_malformed_load_destination_is_not_copied_into_the_zeroing() {
    let ptx = include_str!("../../fuzz/seeds/ptx_rewrite/recover_zeroes_malformed_vector_destination.ptx");
    let malformed_line = 10;
    let added = |out: &str| out.lines().filter(|l| l.contains(gasan_instrument::ptx::MARKER)).map(|l| l.split("//").next().unwrap_or("").to_string()).collect::<Vec<_>>();
    for recover in [false, true] {
        let opts = InstrumentOptions { optimize: false, recover, hoist_loops: false, param_bounds: false, ..Default::default() };
        let r = instrument_ptx(ptx, &opts).expect("instruments");
        let added = added(&r.ptx);
        let balance: i64 = added.iter().map(|l| l.matches('{').count() as i64 - l.matches('}').count() as i64).sum();
        assert_eq!(balance, 0, "{opts:?}: added lines leave braces open:\n{}", r.ptx);
        assert!(!added.iter().any(|l| l.contains("%rd1trix") || l.contains("{%r8")), "{opts:?}: the malformed destination was copied:\n{}", r.ptx);
        let t = r.stats.total();
        assert_eq!((t.checked, t.unknown), (1, 1), "{opts:?}: the store is checked, the malformed load unknown");
        assert!(r.sites.sites.iter().all(|s| s.ptx_line != malformed_line), "{opts:?}: no check for the malformed load");
    }
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .b32 %r<5>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2];\n\tst.global.u32 [%rd2], %r4;\n\tret;\n}\n";
    let r = instrument_ptx(ptx, &InstrumentOptions { optimize: false, recover: true, ..Default::default() }).expect("instruments");
    let added = added(&r.ptx);
    for reg in ["%r1", "%r2", "%r3", "%r4"] {
        assert!(added.iter().any(|l| l.trim() == format!("mov.b32 {reg}, 0;")), "{reg} not zeroed:\n{}", r.ptx);
    }
    assert_eq!(r.stats.total().unknown, 0);
}

/// Found by the ptx_rewrite fuzz target (2026-12-05): a store left open by a scope brace
/// (`st.f32 [%rd2]};`, malformed) was one statement ended by the line's only `;` to coalesce,
/// which took it into a batch and emitted its check, while the walk, which checks only complete
/// statements, never counted it: the module had one more global site than checks. A line
/// holding a brace is a lone statement only when its pieces are one complete statement.
#[test]
fn a_statement_left_open_by_a_brace_joins_no_batch() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .f32 %f<3>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\t{\n\tst.global.f32 [%rd2], %f1;\n\tst.global.f32 [%rd2+4]};\n\tret;\n}\n";
    for hoist_loops in [false, true] {
        for scale in [gasan_instrument::shadow::Scale::S7, gasan_instrument::shadow::Scale::S8] {
            let opts = InstrumentOptions { scale, hoist_loops, aligned_pool: true, ..Default::default() };
            let r = instrument_ptx(ptx, &opts).expect("instruments");
            let t = r.stats.total();
            let global_sites = r.sites.sites.iter().filter(|s| s.space.is_none()).count();
            assert_eq!((global_sites, t.checked as usize), (1, 1), "{opts:?}: the open store gets no check, the complete one does:\n{}", r.ptx);
            assert!(r.sites.sites.iter().all(|s| s.ptx_line == 11), "{opts:?}: {:?}", r.sites.sites);
        }
    }
}

/// Found by the ptx_rewrite fuzz target (2026-12-05): loop versioning skipped a loop's `.pragma`
/// lines before looking for braces, so a scope brace on one (`.pragma "nounroll"; }`) went into
/// the loop's fast copy. The copy then closed a block the input never opened twice: the rewrite
/// of a balanced module failed ("unbalanced braces"), and on an unbalanced one the back edge went
/// missing from the output. A loop with a brace on any of its lines is not versioned. (The input
/// is no valid PTX, its label being scoped; the rewrite must still keep it whole.)
#[test]
fn a_brace_on_a_loops_pragma_line_is_not_copied() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<4>;\n\t.reg .pred %p<2>;\n\
               \tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r1, 0;\n\t{\n$L__BB0_1:\n\t.pragma \"nounroll\"; }\n\
               \tld.global.u32 %r2, [%rd2];\n\tadd.s32 %r1, %r1, 1;\n\tadd.s64 %rd2, %rd2, 4;\n\tsetp.ne.s32 %p1, %r1, 16;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}\n";
    let r = instrument_ptx(ptx, &InstrumentOptions::default()).expect("a balanced module instruments");
    assert_eq!(r.stats.total().checked, 1);
    let mut out = r.ptx.lines().filter(|l| !l.contains(gasan_instrument::ptx::MARKER));
    for line in ptx.lines() {
        assert!(out.any(|o| o == line), "{line:?} missing or out of order:\n{}", r.ptx);
    }
    assert_eq!(r.ptx.matches("@%p1 bra $L__BB0_1;").count(), 1, "the loop is not versioned:\n{}", r.ptx);
}

/// Found by the ptx_rewrite fuzz target (2026-12-06, after loop versioning took statements with
/// register lists in braces; fuzz/seeds/ptx_rewrite/stray_brace_in_a_loop_statement.ptx): a loop
/// statement with a stray brace (`m}l.wide.u32 ...;`) is one statement to the line reader, but the
/// scope scan closes the body at its `}`. Copied into the fast copy, it moved the body's end
/// (the rewriter's own check of the bodies after versioning failed). Such a loop is not versioned;
/// one whose braces pair up within its statements (a masked load's `{ %rs1 }`) is.
#[test]
fn a_stray_brace_in_a_loop_statement_keeps_the_loop_as_it_is() {
    let ptx = include_str!("../../fuzz/seeds/ptx_rewrite/stray_brace_in_a_loop_statement.ptx");
    let r = instrument_ptx(ptx, &InstrumentOptions::default());
    assert!(r.as_ref().map_or(true, |r| !r.ptx.contains("$gasan_loop")), "a loop holding a stray brace was versioned");
    let paired =
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p, .param .u32 n)\n{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<4>;\n\t.reg .b16 %rs<4>;\n\t.reg .pred %p<3>;\n\
                  \tld.param.u64 %rd1, [p];\n\tld.param.u32 %r3, [n];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r1, 0;\n$L__BB0_1:\n\tsetp.lt.s32 %p2, %r1, %r3;\n\
                  \t@%p2 ld.global.b16 { %rs1 }, [ %rd2 + 0 ];\n\tadd.s32 %r1, %r1, 1;\n\tadd.s64 %rd2, %rd2, 2;\n\tsetp.lt.s32 %p1, %r1, %r3;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}\n";
    let r = instrument_ptx(paired, &InstrumentOptions::default()).unwrap();
    assert!(r.ptx.contains("$gasan_loop0:"), "a masked load's register list kept the loop from being versioned");
}
