//! The PTX rewriter on any text: `instrument_ptx` returns a module or an error, never panics, and
//! an instrumented module keeps the rewriter's cheap invariants (under three option sets; on inputs
//! with every addressed statement ending its own line, see `well_scoped`):
//! * dropping the lines it added (`//gasan` marker) gives the input's statements back unchanged
//!   up to whitespace (a line with several statements is split; the corpus test checks that
//!   nvcc's one-statement lines come back byte for byte); with loop versioning, which copies loop
//!   bodies unmarked, the input's statements are a subsequence of what is left;
//! * every access found is checked or eliminated; site ids are table indices on input lines;
//!   the sites are the global checks (one per check, more with loop versioning), the shared/local
//!   checks (one per check, naming a variable of the input) and the device-heap `free` calls
//!   (kind Free, width 0, only in modules whose heap calls were renamed); check sites sit on
//!   lines with an address operand;
//! * heap calls and declarations (heap.rs) are the only input statements rewritten in place;
//! * the added lines open and close as many braces as they close;
//! * the output is recognised as instrumented (no double instrumentation);
//! * the kernels' parameter-tag table (which launch arguments may carry bounds) reads back from
//!   its cache text, so no ordinal is past its kernel's parameters; and that text's parser, fed the
//!   same input, never panics and round-trips what it accepts.
//!
//! Whether rewritten modules still assemble is checked outside the fuzzer, over a sample of the
//! corpus (fuzz/ptxas-check.sh): ptxas is far too slow to run per execution.
#![no_main]

use gasan_instrument::abi::{AccessKind, MemorySpace, ParamTagTable};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, PtxError, MARKER};
use gasan_instrument::shadow::Scale;
use libfuzzer_sys::fuzz_target;

const OPTION_SETS: [InstrumentOptions; 4] = [
    // gasan-run's default.
    InstrumentOptions { scale: Scale::S8, optimize: true, recover: false, aligned_pool: false, hoist_loops: true, param_bounds: true, outside_checks: false },
    InstrumentOptions { scale: Scale::S7, optimize: true, recover: false, aligned_pool: true, hoist_loops: false, param_bounds: true, outside_checks: false },
    // halt_on_error=0, and check elimination off.
    InstrumentOptions { scale: Scale::S8, optimize: false, recover: true, aligned_pool: false, hoist_loops: false, param_bounds: false, outside_checks: false },
    // outside_checks=1 (stubs that resume, inline stubs in nested blocks), halt and aligned.
    InstrumentOptions { scale: Scale::S8, optimize: true, recover: false, aligned_pool: true, hoist_loops: true, param_bounds: true, outside_checks: true },
];

/// The text's pieces between `;`, line ends and braces (each brace a piece of its own), with
/// whitespace removed and empty ones dropped, a leading label split off its piece: a line holding
/// several statements is split (a check goes between them, scope braces sharing the line become
/// lines of their own, and so does a label sharing its line: labels.rs), which changes only
/// whitespace and drops empty statements.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut piece = String::new();
    for c in text.chars() {
        if matches!(c, ';' | '\n' | '{' | '}') {
            out.push(std::mem::take(&mut piece));
            if matches!(c, '{' | '}') {
                out.push(c.to_string());
            }
        } else if !c.is_whitespace() {
            piece.push(c);
        }
    }
    out.push(piece);
    out.retain(|p| !p.is_empty());
    out.into_iter().flat_map(split_label).collect()
}

/// The output's unmarked lines, and the input, with the accesses a run of masked accesses
/// re-guards compared up to their guard: masked_runs.rs re-emits such an access as a marked line
/// under the run's verdict (`@%gsgN ld.global... //gasan`) in place of the input's line. Both
/// sides get the guard `@§` where the input line's text after its guard is such an access's.
fn reguarded(out: &str, input: &str) -> (String, String) {
    let squeeze = |t: &str| t.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let mut kept = String::new();
    let mut rests = std::collections::HashSet::new();
    for l in out.split_inclusive('\n') {
        if !l.contains(MARKER) {
            kept.push_str(l);
        } else if let Some(g) = l.trim_start().strip_prefix("@%gsg") {
            let rest = g.split_once(char::is_whitespace).map_or("", |(_, r)| r).trim_end();
            let rest = rest.strip_suffix(MARKER).unwrap_or(rest).trim_end();
            rests.insert(squeeze(rest));
            kept.push_str("@\u{a7} ");
            kept.push_str(rest);
            kept.push('\n');
        }
    }
    // The same access unmarked elsewhere (outside a run, in a loop's fast copy) is compared up to
    // its guard too, the access told by its code alone (a run's member comes back as its
    // statement, any comment after it on a line of its own).
    let rename = |text: &str| {
        let mut renamed = String::new();
        for l in text.split_inclusive('\n') {
            let rest = l.trim_start().strip_prefix('@').and_then(|g| g.split_once(char::is_whitespace)).map(|(_, r)| r);
            match rest {
                Some(r) if rests.contains(&squeeze(r.split("//").next().unwrap_or(r))) => {
                    renamed.push_str("@\u{a7} ");
                    renamed.push_str(r);
                }
                _ => renamed.push_str(l),
            }
        }
        renamed
    };
    (rename(&kept), rename(input))
}

/// `piece` as its leading labels (`name:`, each on its own: the rewriter writes `a:b:c` as `a:`,
/// `b:` and `c`) and the rest; else itself.
fn split_label(piece: String) -> Vec<String> {
    let b = piece.as_bytes();
    let ident = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$');
    let starts = b.first().is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%'));
    let name = if starts { 1 + b[1..].iter().take_while(|c| ident(c)).count() } else { 0 };
    if name > 0 && b.get(name) == Some(&b':') && name + 1 < b.len() && b[name + 1] != b':' && !piece[name + 1..].starts_with("//") {
        let mut out = vec![piece[..=name].to_string()];
        out.extend(split_label(piece[name + 1..].to_string()));
        out
    } else {
        vec![piece]
    }
}

/// Every statement with an address operand is ended by its `;` on its line: the line ends with
/// `;`, or with scope braces after one (`{ .reg .u64 t; ld.global.u64 t, [%rd1]; }`, one-line
/// inline asm, whose braces are statements of their own and whose accesses are checked). A line
/// with an unfinished statement (`ld.global.f32 %f1, [%rd1] }`) is no access line for the
/// rewriter, while the planners may still count it. (Statements at module scope, invalid PTX, are
/// allowed: every pass takes function bodies from one scan, bodies.rs, and plans nothing outside
/// them.)
fn well_scoped(ptx: &str) -> bool {
    ptx.lines().all(|line| {
        let code = line.split("//").next().unwrap_or("").trim();
        !(code.contains('[') && !code.starts_with('.') && !code.trim_end_matches(|c: char| c == '}' || c.is_whitespace()).ends_with(';'))
    })
}

/// A statement piece (whitespace removed) with heap.rs's in-place changes undone: gasan's names
/// back to the driver's, no `.extern`, no `free` site parameter, no `,<digits>` before a `)` (the
/// site argument of a `free` call). Applied to input and output alike.
fn unheap(piece: &str) -> String {
    let s = piece
        .replace(",.param.b32__gasan_free_site", "")
        .replace("__gasan_aligned_malloc", "__cuda_syscall_aligned_malloc")
        .replace("__gasan_malloc", "malloc")
        .replace("__gasan_free", "free")
        .replace(".extern", "");
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b',' {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits > 0 && b.get(i + 1 + digits) == Some(&b')') {
                i += 1 + digits;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    // Only ASCII bytes were dropped.
    String::from_utf8(out).expect("UTF-8")
}

fn brace_balance(lines: &str) -> i64 {
    lines
        .lines()
        .map(|l| {
            let code = l.split("//").next().unwrap_or("");
            code.matches('{').count() as i64 - code.matches('}').count() as i64
        })
        .sum()
}

fuzz_target!(|data: &[u8]| {
    let Ok(ptx) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(t) = ParamTagTable::from_text(ptx) {
        assert_eq!(ParamTagTable::from_text(&t.to_text()), Some(t));
    }
    for opts in &OPTION_SETS {
        let r = match instrument_ptx(ptx, opts) {
            Ok(r) => r,
            Err(_) => continue,
        };
        assert_eq!(ParamTagTable::from_text(&r.param_tags.to_text()).as_ref(), Some(&r.param_tags), "{opts:?}");
        let t = r.stats.total();
        assert_eq!(t.found, t.checked + t.eliminated, "{opts:?}");
        if !well_scoped(ptx) {
            continue; // (still must not panic)
        }
        // The site table holds three kinds of site: global/generic shadow checks (one per check;
        // a versioned loop's fast copy gets sites of its own, not counted again in the stats),
        // shared/local bounds checks (spaces.rs: one per check, `space` names what they bound) and
        // device-heap `free` calls (heap.rs: kind Free, width 0, on the line ending the call).
        let input_lines = ptx.lines().count() as u32;
        let (mut global, mut space, mut free) = (0usize, 0usize, 0usize);
        for (i, s) in r.sites.sites.iter().enumerate() {
            assert_eq!(s.id as usize, i);
            assert!((1..=input_lines).contains(&s.ptx_line), "site {i} at line {} of {input_lines}", s.ptx_line);
            let line = ptx.lines().nth(s.ptx_line as usize - 1).unwrap_or("");
            if s.kind == AccessKind::Free {
                free += 1;
                assert!(s.space.is_none() && s.width == 0, "{opts:?}: free site {i}: {s:?}");
                assert!(line.contains(';'), "free site {i} at line {}, which ends no statement: {line:?}", s.ptx_line);
                continue;
            }
            assert!(line.contains('['), "site {i} at line {}, which has no address operand: {line:?}", s.ptx_line);
            match &s.space {
                None => global += 1,
                Some(sp) => {
                    space += 1;
                    assert!(sp.space != MemorySpace::Global && !sp.variable.is_empty(), "{opts:?}: space site {i}: {sp:?}");
                    // The variable bounded is the access's base: a `.shared` variable or the
                    // frame (`__local_depotN`), named in the input.
                    // (A called function's check against its callers' frames names the parameter
                    // frames.rs gave it; a frameless kernel's, the returned callees' frames.)
                    let named = [gasan_instrument::ptx::FRAME_TOP_PARAM, gasan_instrument::ptx::FRAMELESS_KERNEL_VARIABLE];
                    assert!(ptx.contains(&sp.variable) || named.contains(&sp.variable.as_str()), "{opts:?}: space site {i}: {sp:?}");
                }
            }
        }
        if opts.hoist_loops {
            assert!(global >= t.checked as usize, "{opts:?}");
            assert!(space >= t.space_checked as usize, "{opts:?}");
        } else {
            assert_eq!(global, t.checked as usize, "{opts:?}");
            assert_eq!(space, t.space_checked as usize, "{opts:?}");
        }
        // Only a module calling the driver's heap gets free sites (and its free calls renamed).
        // (A module declaring only `malloc` gets its declaration renamed too.)
        let heap = ["__gasan_free", "__gasan_malloc", "__gasan_aligned_malloc"].iter().any(|f| r.ptx.contains(f));
        assert!(free == 0 || heap, "{opts:?}: {free} free sites, no __gasan_free");
        // (An input that spells gasan's own names, which the rewriter refuses in code but leaves in
        // comments, makes undoing the frame tops ambiguous: `// b, %gsct);` would be "undone" too.)
        let own_names = ["%gs", "__gasan_"].iter().any(|n| ptx.contains(n));
        if !ptx.contains(MARKER) && !own_names {
            let added: String = r.ptx.split_inclusive('\n').filter(|l| l.contains(MARKER)).collect();
            let (kept, input) = reguarded(&r.ptx, ptx);
            // (Called functions' frame tops, frames.rs, are edits inside input lines: undone.)
            let (mut want, mut got) = (statements(&input), statements(&gasan_instrument::ptx::undo_frame_tops(&kept)));
            if heap {
                // Heap calls and declarations are rewritten in place (renamed, `.extern` dropped,
                // a site argument for `free`): compare both sides with those changes undone.
                // (A piece that was only what heap.rs drops, a lone `.extern`, is nothing.)
                want = want.iter().map(|p| unheap(p)).filter(|p| !p.is_empty()).collect();
                got = got.iter().map(|p| unheap(p)).filter(|p| !p.is_empty()).collect();
            }
            if opts.hoist_loops {
                // Loop versioning adds unmarked fast copies of loop bodies: the input's statements
                // are then a subsequence of the unmarked ones.
                let mut want = want.into_iter().peekable();
                for g in &got {
                    if want.peek() == Some(g) {
                        want.next();
                    }
                }
                assert_eq!(want.next(), None, "{opts:?}: an original statement changed or went missing");
            } else {
                assert_eq!(got, want, "{opts:?}: original statements changed");
            }
            assert_eq!(brace_balance(&added), 0, "{opts:?}: added lines leave braces open");
        }
        assert_eq!(instrument_ptx(&r.ptx, opts).err(), Some(PtxError::AlreadyInstrumented));
    }
});
