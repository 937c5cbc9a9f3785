//! Adversarial PTX shapes for the rewriter's bounded-work tests and `examples/bench_adversarial.rs`:
//! each is a well-formed module (ptxas accepts the small sizes) that stresses one dimension of
//! the rewriter's passes — many accesses in one basic block, many address registers, many labels
//! and loops, deep loop nests, long lines, many declared registers.
#![allow(dead_code)]

use std::fmt::Write as _;

/// A kernel `k(.param .u64 p)` with `%rd2` the global pointer, `regs` registers of each class
/// declared, and `body` between the pointer setup and `ret`.
pub fn kernel(regs: usize, body: &str) -> String {
    let mut s = String::with_capacity(body.len() + 512);
    s.push_str(".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n");
    let _ = writeln!(s, "\t.reg .pred %p<{}>;\n\t.reg .b32 %r<{}>;\n\t.reg .f32 %f<{}>;\n\t.reg .b64 %rd<{}>;", regs + 2, regs + 2, regs + 2, regs + 4);
    s.push_str("\n\tld.param.u64 %rd1, [k_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r1, %tid.x;\n\tsetp.lt.u32 %p1, %r1, 1;\n");
    s.push_str(body);
    s.push_str("\tret;\n}\n");
    s
}

/// `n` loads through one address register at distinct offsets (too far apart to coalesce), all in
/// one basic block: every load defines a register, so per-statement work over the block's earlier
/// checks is quadratic.
pub fn loads_one_block(n: usize) -> String {
    let mut b = String::with_capacity(n * 40);
    for i in 0..n {
        let _ = writeln!(b, "\tld.global.f32 %f{}, [%rd2+{}];", i + 1, i * 512);
    }
    kernel(n, &b)
}

/// `n` stores through one address register at distinct offsets, in one basic block.
pub fn stores_one_block(n: usize) -> String {
    let mut b = String::with_capacity(n * 40);
    for i in 0..n {
        let _ = writeln!(b, "\tst.global.f32 [%rd2+{}], %f1;", i * 512);
    }
    kernel(n, &b)
}

/// `n` loads, each through its own address register computed just before it, in one basic block:
/// as many coalescing groups and elimination keys as accesses.
pub fn bases_one_block(n: usize) -> String {
    let mut b = String::with_capacity(n * 80);
    for i in 0..n {
        let _ = writeln!(b, "\tadd.s64 %rd{}, %rd2, {};\n\tld.global.f32 %f{}, [%rd{}];", i + 3, i * 8, i + 1, i + 3);
    }
    kernel(n, &b)
}

/// `n` single-block loops one after another, each loading through an induction pointer: as many
/// labels, back edges, pipelined accesses and versioned loops as `n`.
pub fn many_loops(n: usize) -> String {
    let mut b = String::with_capacity(n * 200);
    for i in 0..n {
        let _ = write!(
            b,
            "\tmov.u64 %rd3, %rd2;\n\tmov.u32 %r2, 0;\n$L{i}:\n\tld.global.f32 %f1, [%rd3];\n\tadd.f32 %f2, %f2, %f1;\n\tadd.s64 %rd3, %rd3, 4;\n\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.u32 %p2, %r2, %r1;\n\t@%p2 bra $L{i};\n"
        );
    }
    let _ = writeln!(b, "\tst.global.f32 [%rd2], %f2;");
    kernel(8, &b)
}

/// `n` labels each followed by a load and a conditional forward branch: thousands of basic blocks
/// and branch targets.
pub fn many_labels(n: usize) -> String {
    let mut b = String::with_capacity(n * 100);
    for i in 0..n {
        let _ = write!(b, "$B{i}:\n\tld.global.f32 %f1, [%rd2+{}];\n\t@%p1 bra $B{};\n", (i % 64) * 4, i + 1);
    }
    let _ = writeln!(b, "$B{n}:");
    kernel(8, &b)
}

/// `n` loops nested inside each other (labels first, back edges in reverse order), a load in the
/// innermost body and one between consecutive back edges.
pub fn nested_loops(n: usize) -> String {
    let mut b = String::with_capacity(n * 120);
    for i in 0..n {
        let _ = writeln!(b, "$N{i}:");
    }
    b.push_str("\tld.global.f32 %f1, [%rd2];\n");
    for i in (0..n).rev() {
        let _ = write!(b, "\tld.global.f32 %f2, [%rd2+{}];\n\t@%p1 bra $N{i};\n", (i % 64) * 4);
    }
    kernel(8, &b)
}

/// One line of `n` load statements (`;`-separated), then one `n`-operand-long `.reg` line.
pub fn long_line(n: usize) -> String {
    let mut b = String::with_capacity(n * 40);
    b.push('\t');
    for i in 0..n {
        let _ = write!(b, "ld.global.f32 %f{}, [%rd2+{}]; ", i % 64 + 1, (i % 64) * 4);
    }
    b.push('\n');
    kernel(64, &b)
}

/// A function declaring `n` individually named registers (one `.reg` line each) and using each
/// in an access.
pub fn many_registers(n: usize) -> String {
    let mut b = String::with_capacity(n * 90);
    for i in 0..n {
        let _ = writeln!(b, "\t.reg .b64 %a{i};");
    }
    for i in 0..n {
        let _ = writeln!(b, "\tadd.s64 %a{i}, %rd2, {};\n\tst.global.f32 [%a{i}], %f1;", i * 4);
    }
    kernel(8, &b)
}

/// A realistic grid-stride loop body (index arithmetic, two loads, a store, a branch) repeated `n`
/// times in one function: a huge function of ordinary blocks.
pub fn huge_function(n: usize) -> String {
    let mut b = String::with_capacity(n * 400);
    for i in 0..n {
        let _ = write!(
            b,
            "\tmul.wide.u32 %rd3, %r1, 4;\n\tadd.s64 %rd4, %rd2, %rd3;\n\tld.global.f32 %f1, [%rd4];\n\tld.global.f32 %f2, [%rd4+4];\n\tadd.f32 %f3, %f1, %f2;\n\tst.global.f32 [%rd4+8], %f3;\n\tadd.s32 %r1, %r1, 32;\n\tsetp.lt.u32 %p1, %r1, 4096;\n\t@%p1 bra $H{i};\n$H{i}:\n"
        );
    }
    kernel(8, &b)
}

/// Every shape, by name, at size `n` (the benchmark runs each; tests pick).
pub fn shapes(n: usize) -> Vec<(&'static str, String)> {
    vec![
        ("loads_one_block", loads_one_block(n)),
        ("stores_one_block", stores_one_block(n)),
        ("bases_one_block", bases_one_block(n)),
        ("many_loops", many_loops(n / 4)),
        ("many_labels", many_labels(n)),
        ("nested_loops", nested_loops(n / 4)),
        ("long_line", long_line(n)),
        ("many_registers", many_registers(n)),
        ("huge_function", huge_function(n / 4)),
    ]
}

/// A fatbin holding one compressed PTX entry (`flags`: the codec's flag) with `declared` as its
/// stated uncompressed size.
pub fn compressed_ptx_fatbin(flags: u64, compressed: &[u8], declared: u64) -> Vec<u8> {
    use gasan_instrument::container::{EntryKind, FatbinEntryHeader, FatbinHeader, ENTRY_HEADER_VERSION, FLAG_64BIT, FLAG_HOST_LINUX};
    let padded = compressed.len().div_ceil(8) * 8;
    let header = FatbinEntryHeader {
        kind: EntryKind::Ptx.raw(),
        header_version: ENTRY_HEADER_VERSION,
        header_size: FatbinEntryHeader::SIZE as u32,
        payload_size: padded as u64,
        compressed_size: compressed.len() as u32,
        version_major: 8,
        version_minor: 0,
        arch: 90,
        flags: FLAG_64BIT | FLAG_HOST_LINUX | flags,
        uncompressed_size: declared,
        ..FatbinEntryHeader::default()
    };
    let mut b = FatbinHeader::new((FatbinEntryHeader::SIZE + padded) as u64).to_bytes().to_vec();
    b.extend_from_slice(&header.to_bytes());
    b.extend_from_slice(compressed);
    b.resize(FatbinHeader::SIZE + FatbinEntryHeader::SIZE + padded, 0);
    b
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB of `'/'` each (4 bytes per block: `blocks` × 128
/// KiB out of 4 × `blocks` + 5 bytes in), with no content size in its header.
pub fn zstd_rle_bomb(blocks: usize) -> Vec<u8> {
    const BLOCK: u32 = 128 * 1024;
    let mut z = Vec::with_capacity(6 + 4 * blocks);
    z.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
    z.push(0x00); // frame header descriptor: no content size, no checksum, no dictionary
    z.push(7 << 3); // window descriptor: 2^(10 + 7) = 128 KiB
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = (BLOCK << 3) | (1 << 1) | last; // block type 1: RLE
        z.extend_from_slice(&header.to_le_bytes()[..3]);
        z.push(b'/');
    }
    z
}

/// An LZ4 block of `len` bytes of `'/'` (about 1/255 of that compressed).
pub fn lz4_bomb(len: usize) -> Vec<u8> {
    lz4_flex::block::compress(&vec![b'/'; len])
}
