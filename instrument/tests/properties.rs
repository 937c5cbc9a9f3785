//! Property tests: the shadow encodings against a byte-exact model, and the parsers and rewriter on
//! arbitrary and mutated input (never a panic; bounded fuzzing in CI).

use gasan_instrument::container::{self, Elf64Header, EntryKind, Fatbin, FatbinEntryHeader, FatbinHeader, FatbinWrapper, FLAG_LZ4, FLAG_ZSTD};
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use gasan_instrument::shadow::{Scale, OUT_OF_POOL_SHADOW};
use proptest::prelude::*;

/// Random allocations (sizes 1..1 MiB, 256-aligned starts, gaps between) in a small address space.
fn layout() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((1u64..(1 << 20), 0u64..8), 1..6).prop_map(|v| {
        let mut at = 0u64;
        v.into_iter()
            .map(|(size, gap)| {
                let start = at + gap * 256;
                at = (start + size).div_ceil(256) * 256;
                (start, size)
            })
            .collect()
    })
}

fn check_layout(scale: Scale, allocs: &[(u64, u64)], probes: &[(u64, u32)]) -> Result<(), TestCaseError> {
    let end = allocs.iter().map(|(s, n)| s + n).max().unwrap() + 4096;
    let g = scale.granule();
    let mut shadow = vec![0u8; scale.shadow_len(end) as usize];
    let mut accessible = vec![false; end as usize];
    for &(start, size) in allocs {
        // The allocator's rule: sizes the encoding cannot express grow by one byte.
        let enc = scale.encodable_size(size);
        let bytes = scale.region_shadow(enc, enc.div_ceil(g) * g);
        shadow[(start / g) as usize..(start / g) as usize + bytes.len()].copy_from_slice(&bytes);
        for b in start..start + enc {
            accessible[b as usize] = true;
        }
    }
    for &(addr, w) in probes {
        let addr = (addr % (end - 16)) & !(u64::from(w) - 1);
        let bad_model = (addr..addr + u64::from(w)).any(|b| !accessible[b as usize]);
        let s = shadow[(addr / g) as usize];
        prop_assert_eq!(scale.is_bad(s, addr, w), bad_model, "addr {} width {} shadow {}", addr, w, s);
        prop_assert_eq!(scale.fast_test(w).is_bad(scale, s, addr), bad_model, "fast test: addr {} width {} shadow {}", addr, w, s);
    }
    Ok(())
}

fn fatbin_header() -> impl Strategy<Value = FatbinHeader> {
    (any::<u32>(), any::<u16>(), any::<u16>(), any::<u64>()).prop_map(|(magic, version, header_size, payload_size)| FatbinHeader { magic, version, header_size, payload_size })
}

fn fatbin_entry_header() -> impl Strategy<Value = FatbinEntryHeader> {
    let sizes = (any::<u16>(), any::<u16>(), any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>());
    let code = (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>());
    (sizes, code).prop_map(
        |(
            (kind, header_version, header_size, payload_size, compressed_size, options_offset),
            (version_minor, version_major, arch, identifier_offset, identifier_len, flags, reserved, uncompressed_size),
        )| FatbinEntryHeader {
            kind,
            header_version,
            header_size,
            payload_size,
            compressed_size,
            options_offset,
            version_minor,
            version_major,
            arch,
            identifier_offset,
            identifier_len,
            flags,
            reserved,
            uncompressed_size,
        },
    )
}

fn fatbin_wrapper() -> impl Strategy<Value = FatbinWrapper> {
    (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(magic, version, data, filename_or_fatbins)| FatbinWrapper { magic, version, data, filename_or_fatbins })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn encodings_match_byte_model(allocs in layout(), probes in prop::collection::vec((any::<u64>(), prop::sample::select(vec![1u32, 2, 4, 8, 16])), 200)) {
        check_layout(Scale::S7, &allocs, &probes)?;
        check_layout(Scale::S8, &allocs, &probes)?;
    }

    #[test]
    fn fast_test_equals_the_encoding_test_for_every_shadow_byte(s in any::<u8>(), addr in any::<u64>(), wi in 0usize..5) {
        let w = [1u32, 2, 4, 8, 16][wi];
        let addr = addr & !(u64::from(w) - 1);
        for scale in [Scale::S7, Scale::S8] {
            prop_assert_eq!(scale.fast_test(w).is_bad(scale, s, addr), scale.is_bad(s, addr, w), "{:?} s {} addr {} w {}", scale, s, addr, w);
            // Addresses outside the pool read this value instead of a shadow byte: never bad.
            prop_assert!(!scale.fast_test(w).is_bad(scale, OUT_OF_POOL_SHADOW, addr));
        }
    }

    #[test]
    fn aligned_pool_check_is_the_range_test_and_index(base_slot in 1u64..200, size_4g in 1u64..=256, addr in any::<u64>(), near in any::<bool>(), off in any::<u64>()) {
        for scale in [Scale::S7, Scale::S8] {
            let align = scale.aligned_pool_alignment();
            let base = base_slot * align;
            let size = (size_4g << 32).min(align);
            prop_assert!(scale.pool_allows_aligned_check(base, size));
            // Addresses near the pool (inside, just outside) and anywhere.
            let a = if near { base.wrapping_sub(align / 2).wrapping_add(off % (2 * align)) } else { addr };
            let want = (a >= base && a - base < size).then(|| (a - base) >> scale.shift());
            prop_assert_eq!(scale.aligned_probe(a, base, size), want, "{:?} base {:#x} size {:#x} addr {:#x}", scale, base, size, a);
        }
    }

    #[test]
    fn s8_blind_spot_is_only_the_three_byte_granule(size in 1u64..4096) {
        // Without the allocator's rounding, the only sizes S8 misencodes are ≡ 3 (mod 256).
        let g = 256;
        let s = Scale::S8.encode(size % g);
        let exact = Scale::S8.accessible(s) == size % g || size % g == 0;
        prop_assert_eq!(exact, size % g != gasan_instrument::shadow::S8_UNENCODABLE);
    }

    #[test]
    fn container_parsers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = container::sniff(&bytes);
        let _ = container::image_len(&bytes);
        let _ = Fatbin::parse(&bytes);
        let _ = Fatbin::parse_all(&bytes);
        let _ = container::fatbins_in_file(&bytes);
    }

    /// Each binary layout's writer and reader agree for any field values, read only their own
    /// bytes, and every byte of a layout belongs to a field.
    #[test]
    fn binary_layouts_round_trip(fatbin in fatbin_header(), entry in fatbin_entry_header(), wrapper in fatbin_wrapper(), elf_bytes in any::<[u8; 64]>(), tail in prop::collection::vec(any::<u8>(), 0..16)) {
        let mut fatbin_bytes = fatbin.to_bytes().to_vec();
        fatbin_bytes.extend_from_slice(&tail);
        prop_assert_eq!(FatbinHeader::parse(&fatbin_bytes), Ok(fatbin));
        let mut entry_bytes = entry.to_bytes().to_vec();
        entry_bytes.extend_from_slice(&tail);
        prop_assert_eq!(FatbinEntryHeader::parse(&entry_bytes), Ok(entry));
        prop_assert_eq!(FatbinWrapper::parse(&wrapper.to_bytes()), Ok(wrapper));
        let elf = Elf64Header::parse(&elf_bytes).unwrap();
        prop_assert_eq!(elf.to_bytes(), elf_bytes);
        prop_assert_eq!(Elf64Header::parse(&elf.to_bytes()), Ok(elf));
        prop_assert_eq!(FatbinEntryHeader::parse(&entry.to_bytes()).unwrap().to_bytes(), entry.to_bytes());
        prop_assert!(FatbinEntryHeader::parse(&entry_bytes[..FatbinEntryHeader::SIZE - 1]).is_err());
        prop_assert!(FatbinHeader::parse(&fatbin_bytes[..FatbinHeader::SIZE - 1]).is_err());
    }

    /// A fatbin written with the layout structs reads back through `Fatbin::parse` with the same
    /// fields: the parser and the writers share one layout.
    #[test]
    fn written_entries_parse_back(kind in 1u16..=u16::MAX, arch in any::<u32>(), version in any::<(u16, u16)>(), flags in any::<u64>(), uncompressed_size in any::<u64>(), payload in prop::collection::vec(any::<u8>(), 0..100)) {
        let flags = flags & !(FLAG_LZ4 | FLAG_ZSTD);
        let padded = payload.len().div_ceil(8) * 8;
        let entry = FatbinEntryHeader {
            kind,
            header_size: FatbinEntryHeader::SIZE as u32,
            payload_size: padded as u64,
            version_major: version.0,
            version_minor: version.1,
            arch,
            flags,
            uncompressed_size,
            ..FatbinEntryHeader::default()
        };
        let mut fb = FatbinHeader::new((FatbinEntryHeader::SIZE + padded) as u64).to_bytes().to_vec();
        fb.extend_from_slice(&entry.to_bytes());
        fb.extend_from_slice(&payload);
        fb.resize(FatbinHeader::SIZE + FatbinEntryHeader::SIZE + padded, 0);
        prop_assert_eq!(container::image_len(&fb[..fb.len().min(container::LEN_PREFIX)]), Ok(container::ImageLen::Bytes(fb.len())));
        let f = Fatbin::parse(&fb).unwrap();
        prop_assert_eq!(f.len, fb.len());
        prop_assert_eq!(f.entries.len(), 1);
        let e = &f.entries[0];
        prop_assert_eq!((e.kind, e.arch, e.version, e.flags, e.uncompressed_size), (EntryKind::from_raw(kind), arch, version, flags, uncompressed_size));
        prop_assert_eq!(e.kind.raw(), kind);
        prop_assert_eq!(&e.raw[..payload.len()], &payload[..]);
    }

    #[test]
    fn mutated_fatbins_never_panic(flips in prop::collection::vec((0usize..400, any::<u8>()), 1..8)) {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p) { ret; }\n";
        let mut fb = container::build_ptx_fatbin(ptx, 90, (8, 0));
        for (at, v) in flips {
            let n = fb.len();
            fb[at % n] = v;
        }
        if let Ok(f) = Fatbin::parse(&fb) {
            for e in &f.entries {
                let _ = e.payload();
            }
            let _ = f.best_ptx(90);
        }
    }

    #[test]
    fn rewriter_never_panics_on_arbitrary_text(s in "\\PC{0,400}") {
        let _ = instrument_ptx(&s, &InstrumentOptions::default());
        let with_header = format!(".version 8.0\n.target sm_90\n.address_size 64\n{s}");
        let _ = instrument_ptx(&with_header, &InstrumentOptions::default());
    }

    #[test]
    fn rewriter_never_panics_on_mutated_ptx(cut in 0usize..2000, insert in "[\\[\\]{};@%.a-z0-9 ,+-]{0,40}") {
        let base = include_str!("corpus/ptx_sample.ptx");
        let cut = cut.min(base.len());
        let cut = (0..=cut).rev().find(|&i| base.is_char_boundary(i)).unwrap();
        let m = format!("{}{}{}", &base[..cut], insert, &base[cut..]);
        for recover in [false, true] {
            let _ = instrument_ptx(&m, &InstrumentOptions { scale: Scale::S8, optimize: true, recover, aligned_pool: recover, hoist_loops: true, param_bounds: !recover, outside_checks: recover });
        }
    }
}
