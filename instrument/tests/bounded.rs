//! Bounded work on any input (issue 12, part 6): adversarial PTX shapes instrument completely and
//! correctly (these sizes took seconds to minutes when each access scanned the earlier checks of
//! its block; `examples/bench_adversarial.rs` times them), compressed fatbin entries stop at their
//! declared size, and error messages quote a bounded excerpt of a bad line. Results are asserted,
//! never wall time.

#[path = "common/adversarial.rs"]
mod adversarial;
mod common;

use common::*;
use gasan_instrument::container::{ContainerError, Fatbin, FLAG_LZ4, FLAG_ZSTD};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions, PtxError, MARKER};
use gasan_instrument::shadow::Scale;

fn option_sets() -> Vec<InstrumentOptions> {
    let halt = InstrumentOptions::default();
    vec![
        halt,
        InstrumentOptions { recover: true, ..halt },
        InstrumentOptions { optimize: false, ..halt },
        InstrumentOptions { hoist_loops: false, ..halt },
        InstrumentOptions { aligned_pool: true, scale: Scale::S7, ..halt },
    ]
}

/// The input's statements, in order, among the output's unmarked lines (the rewriter only adds
/// lines, and puts each statement of a multi-statement line on its own).
fn keeps_input(input: &str, output: &str) -> bool {
    let statements = |text: &str| -> Vec<String> { text.lines().filter(|l| !l.contains(MARKER)).flat_map(|l| l.split(';')).map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect() };
    let mut out = statements(output).into_iter();
    statements(input).iter().all(|s| out.any(|o| o == *s))
}

#[test]
fn forty_thousand_loads_in_one_block() {
    let n = 40_000;
    let ptx = adversarial::loads_one_block(n);
    for opts in [InstrumentOptions::default(), InstrumentOptions { recover: true, ..Default::default() }] {
        let r = instrument_ptx(&ptx, &opts).unwrap();
        let t = r.stats.total();
        assert_eq!((t.found, t.checked, t.eliminated), (n as u32, n as u32, 0), "{opts:?}");
        assert_eq!(r.sites.len(), n);
        assert!(r.ptx.len() < ptx.len() * 40, "output {} bytes for {} of input", r.ptx.len(), ptx.len());
    }
}

#[test]
fn forty_thousand_address_registers_in_one_block() {
    let n = 40_000;
    let ptx = adversarial::bases_one_block(n);
    let r = instrument_ptx(&ptx, &InstrumentOptions::default()).unwrap();
    let t = r.stats.total();
    assert_eq!((t.found, t.checked), (n as u32, n as u32));
}

/// The same load twice after a redefinition of its address register is checked twice; without
/// one, once: elimination through the register index forgets exactly what it must.
#[test]
fn elimination_forgets_redefined_registers_only() {
    let body = "\tld.global.f32 %f1, [%rd2];\n\tld.global.f32 %f2, [%rd3];\n\tadd.s64 %rd2, %rd2, 4;\n\tld.global.f32 %f3, [%rd2];\n\tld.global.f32 %f4, [%rd3];\n\t@%p1 ld.global.f32 %f5, [%rd3];\n\tsetp.lt.u32 %p1, %r1, 2;\n\t@%p1 ld.global.f32 %f6, [%rd3];\n\t@%p1 ld.global.f32 %f7, [%rd3];\n";
    let ptx = adversarial::kernel(8, body);
    let opts = InstrumentOptions { recover: true, ..Default::default() };
    let t = instrument_ptx(&ptx, &opts).unwrap().stats.total();
    // Checked: f1, f2, f3 (%rd2 redefined), f5 (new guard), f6 (guard redefined); eliminated: f4, f7.
    assert_eq!((t.found, t.checked, t.eliminated), (7, 5, 2));
}

#[test]
fn every_shape_under_every_option_set() {
    for (name, ptx) in adversarial::shapes(2_000) {
        for opts in option_sets() {
            let r = instrument_ptx(&ptx, &opts).unwrap_or_else(|e| panic!("{name} {opts:?}: {e}"));
            assert!(keeps_input(&ptx, &r.ptx), "{name} {opts:?}: input lines lost");
            assert!(r.stats.total().found > 0, "{name}");
        }
    }
}

/// The small shapes' checked PTX assembles (the rewriting stays well-formed on them).
#[test]
fn shapes_assemble() {
    let dir = scratch("bounded-shapes");
    for (name, ptx) in adversarial::shapes(200) {
        for (k, opts) in [InstrumentOptions::default(), InstrumentOptions { recover: true, ..Default::default() }].iter().enumerate() {
            let checked = instrument_ptx(&ptx, opts).unwrap().ptx;
            let p = dir.join(format!("{name}.{k}.ptx"));
            std::fs::write(&p, checked).unwrap();
            run_tool("ptxas", &["-arch=sm_90".as_ref(), p.as_os_str(), "-o".as_ref(), dir.join("a.cubin").as_os_str()]);
        }
    }
}

/// Offsets at the ends of i64 neither panic nor wrap into a coalesced or hoisted range.
#[test]
fn extreme_offsets() {
    let body = "\tld.global.f32 %f1, [%rd2+9223372036854775807];\n\tld.global.f32 %f2, [%rd2+-9223372036854775807];\n\tld.global.f32 %f3, [%rd2+9223372036854775800];\n\
                \tmov.u64 %rd3, %rd2;\n\tmov.u32 %r2, 0;\n$L:\n\tld.global.f32 %f1, [%rd3+9223372036854775807];\n\tld.global.f32 %f2, [%rd3+-9223372036854775807];\n\tadd.s64 %rd3, %rd3, 4;\n\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.u32 %p2, %r2, %r1;\n\t@%p2 bra $L;\n";
    let ptx = adversarial::kernel(8, body);
    for opts in option_sets() {
        let t = instrument_ptx(&ptx, &opts).unwrap().stats.total();
        assert_eq!(t.found, 5, "{opts:?}");
    }
}

#[test]
fn zstd_entry_stops_at_its_declared_size() {
    // 66,000 RLE blocks: 264 KB that inflate to 8.6 GB.
    let fb = adversarial::compressed_ptx_fatbin(FLAG_ZSTD, &adversarial::zstd_rle_bomb(66_000), 4096);
    let f = Fatbin::parse(&fb).unwrap();
    match f.entries[0].payload() {
        Err(ContainerError::Decompress { codec: "zstd", detail }) => assert!(detail.contains("declared size of 4096"), "{detail}"),
        other => panic!("{:?}", other.map(|p| p.len())),
    }
    // A frame of exactly the declared size inflates; one byte less declared is refused.
    let one_block = adversarial::zstd_rle_bomb(1);
    let fb = adversarial::compressed_ptx_fatbin(FLAG_ZSTD, &one_block, 128 * 1024);
    assert_eq!(Fatbin::parse(&fb).unwrap().entries[0].payload().unwrap().len(), 128 * 1024);
    let fb = adversarial::compressed_ptx_fatbin(FLAG_ZSTD, &one_block, 128 * 1024 - 1);
    assert!(Fatbin::parse(&fb).unwrap().entries[0].payload().is_err());
    // A declared size past the entry limit is refused before decoding.
    let fb = adversarial::compressed_ptx_fatbin(FLAG_ZSTD, &one_block, u64::MAX);
    assert!(Fatbin::parse(&fb).unwrap().entries[0].payload().is_err());
}

#[test]
fn lz4_entry_stops_at_its_declared_size() {
    let bomb = adversarial::lz4_bomb(8 << 20);
    let fb = adversarial::compressed_ptx_fatbin(FLAG_LZ4, &bomb, 4096);
    assert!(matches!(Fatbin::parse(&fb).unwrap().entries[0].payload(), Err(ContainerError::Decompress { codec: "lz4", .. })));
    let fb = adversarial::compressed_ptx_fatbin(FLAG_LZ4, &bomb, 8 << 20);
    assert_eq!(Fatbin::parse(&fb).unwrap().entries[0].payload().unwrap().len(), 8 << 20);
    // 100 bytes cannot hold 512 MiB: refused without allocating it.
    let small = adversarial::lz4_bomb(1000);
    let fb = adversarial::compressed_ptx_fatbin(FLAG_LZ4, &small, 512 << 20);
    match Fatbin::parse(&fb).unwrap().entries[0].payload() {
        Err(ContainerError::Decompress { codec: "lz4", detail }) => assert!(detail.contains("compressed bytes can hold"), "{detail}"),
        other => panic!("{:?}", other.map(|p| p.len())),
    }
}

#[test]
fn errors_quote_a_bounded_excerpt_of_bad_lines() {
    let long = "9".repeat(1 << 20);
    let cases = [
        format!(".version {long}\n.target sm_90\n.address_size 64\n"),
        format!(".version 8.0\n.target sm_90\n.address_size {long}\n"),
        adversarial::kernel(8, &format!("\t.reg .b32 %x{long};\n\tld.global.f32 %f1, [%x{long}];\n")),
    ];
    for ptx in cases {
        let e = instrument_ptx(&ptx, &InstrumentOptions::default()).unwrap_err();
        assert!(matches!(e, PtxError::UnsupportedVersion(_) | PtxError::AddressSize(_) | PtxError::AddressRegister { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.len() < 400, "{} bytes: {}...", msg.len(), &msg[..100]);
        assert!(msg.contains(&format!("({} bytes)", long.len())) || msg.contains(" bytes)"), "{msg}");
    }
}
