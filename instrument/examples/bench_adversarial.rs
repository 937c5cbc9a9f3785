//! Instrumentation time on adversarial inputs, and the normal corpus throughput for comparison.
//!
//! ```text
//! cargo run --release -p gasan-instrument --example bench_adversarial -- [--n 40000] [--iters 20] [--only SHAPE] [CORPUS.ptx ...]
//! ```
//!
//! For each shape of `tests/common/adversarial.rs` at size `n` (40,000 accesses by default): input
//! size, seconds for one instrumentation (halt mode with all optimizations, and recover mode), and
//! MB/s. Then the compressed-fatbin bombs (time to the decompression error), then the throughput
//! over the given corpus PTX files (`iters` passes).

#[path = "../tests/common/adversarial.rs"]
mod adversarial;

use gasan_instrument::container::{Fatbin, FLAG_LZ4, FLAG_ZSTD};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::time::Instant;

fn main() {
    let mut n = 40_000usize;
    let mut iters = 20u32;
    let mut corpus = Vec::new();
    // Run only this shape (or bomb): lets a slow build be timed one shape at a time.
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--n" => n = args.next().and_then(|v| v.parse().ok()).expect("--n NUMBER"),
            "--iters" => iters = args.next().and_then(|v| v.parse().ok()).expect("--iters NUMBER"),
            "--only" => only = args.next(),
            _ => corpus.push(a),
        }
    }
    let halt = InstrumentOptions::default();
    let recover = InstrumentOptions { recover: true, ..halt };
    println!("{:<18} {:>9} {:>10} {:>9} {:>10} {:>9}", "shape", "MB", "halt s", "MB/s", "recover s", "MB/s");
    let selected = |name: &str| only.as_deref().is_none_or(|o| o == name);
    for (name, ptx) in adversarial::shapes(n) {
        if !selected(name) {
            continue;
        }
        let mb = ptx.len() as f64 / 1e6;
        let mut cols = Vec::new();
        for opts in [&halt, &recover] {
            let t = Instant::now();
            let r = instrument_ptx(&ptx, opts);
            let secs = t.elapsed().as_secs_f64();
            std::hint::black_box(&r);
            if let Err(e) = r {
                println!("{name}: error: {e}");
            }
            cols.push((secs, mb / secs));
        }
        println!("{name:<18} {mb:>9.2} {:>10.3} {:>9.1} {:>10.3} {:>9.1}", cols[0].0, cols[0].1, cols[1].0, cols[1].1);
    }

    // Entries whose compressed stream inflates far past their declared size (4 KiB).
    let bombs = [
        ("zstd_bomb", adversarial::compressed_ptx_fatbin(FLAG_ZSTD, &adversarial::zstd_rle_bomb(66_000), 4096)),
        ("lz4_bomb", adversarial::compressed_ptx_fatbin(FLAG_LZ4, &adversarial::lz4_bomb(64 << 20), 4096)),
    ];
    for (name, fatbin) in bombs {
        if !selected(name) {
            continue;
        }
        let t = Instant::now();
        let result = Fatbin::parse(&fatbin).map(|f| f.entries[0].payload().map(|p| p.len()));
        let secs = t.elapsed().as_secs_f64();
        let outcome = match result {
            Ok(Ok(len)) => format!("inflated to {len} bytes"),
            Ok(Err(e)) | Err(e) => format!("error: {e}"),
        };
        println!("{name:<18} {:>9.2} {secs:>10.3}  {outcome}", fatbin.len() as f64 / 1e6);
    }

    if !corpus.is_empty() {
        let texts: Vec<String> = corpus.iter().map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"))).collect();
        let bytes: usize = texts.iter().map(String::len).sum();
        let t = Instant::now();
        for _ in 0..iters {
            for p in &texts {
                std::hint::black_box(instrument_ptx(p, &halt).ok());
            }
        }
        let secs = t.elapsed().as_secs_f64();
        println!("corpus: {} files, {:.2} MB, {iters} passes in {secs:.3} s: {:.1} MB/s", texts.len(), bytes as f64 / 1e6, bytes as f64 * f64::from(iters) / 1e6 / secs);
    }
}
