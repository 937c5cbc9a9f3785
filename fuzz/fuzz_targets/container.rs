//! The fatbin / ELF / PTX image reader on any bytes: sniffing, sizing, parsing, entry payloads
//! (lz4, zstd) and PTX selection return values or errors, never panic; `image_len` agrees with the
//! parser on a fatbin's length; a PTX text wrapped by `build_ptx_fatbin` reads back unchanged.
#![no_main]

use gasan_instrument::container::{build_ptx_fatbin, fatbins_in_file, image_len, ptx_version, sniff, Fatbin, ImageKind, ImageLen, LEN_PREFIX};
use libfuzzer_sys::fuzz_target;

fn exercise(f: &Fatbin<'_>) {
    for e in &f.entries {
        let _ = e.is_compressed();
        let _ = e.arch_specific();
        if let Ok(p) = e.payload() {
            if !e.is_compressed() {
                assert!(p.len() <= e.raw.len());
            }
        }
        let _ = e.ptx();
    }
    for sm in [0, 75, 80, 90, 100, 120, u32::MAX] {
        if let Some(e) = f.best_ptx(sm) {
            assert!(e.arch <= sm);
        }
        let _ = f.has_sass_for(sm);
    }
}

fuzz_target!(|data: &[u8]| {
    let kind = sniff(data);
    let prefix = &data[..data.len().min(LEN_PREFIX)];
    let len = image_len(prefix);
    if kind == ImageKind::Fatbin {
        if let Ok(f) = Fatbin::parse(data) {
            assert_eq!(len, Ok(ImageLen::Bytes(f.len)), "image_len disagrees with the parser");
            exercise(&f);
        }
    }
    if let Ok(all) = Fatbin::parse_all(data) {
        all.iter().for_each(exercise);
    }
    if let Ok(files) = fatbins_in_file(data) {
        files.iter().for_each(|(_, f)| exercise(f));
    }
    // Wrapping PTX text in a fatbin and reading it back is lossless (the runtime hands checked PTX
    // to fatbin-only loaders this way).
    if let Ok(text) = std::str::from_utf8(data) {
        if !text.contains('\0') {
            let version = ptx_version(text).unwrap_or((8, 0));
            let fb = build_ptx_fatbin(text, 90, version);
            assert_eq!(image_len(&fb[..fb.len().min(LEN_PREFIX)]), Ok(ImageLen::Bytes(fb.len())));
            let f = Fatbin::parse(&fb).expect("built fatbin parses");
            assert_eq!(f.best_ptx(90).expect("its PTX entry").ptx().expect("PTX text"), text);
            assert_eq!(f.entries[0].version, version);
        }
    }
});
