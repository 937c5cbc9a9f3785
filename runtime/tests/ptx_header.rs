//! Modules of a PTX ISA or a target gasan does not know are loaded unchecked with a warning
//! (gasan_runtime::ptx_header); those of every target CUDA 13.0 knows are checked. Exercised
//! through the checked-module path that the loaders and cuLink use (`modules::check_ptx`), with no
//! GPU: the instrumenter runs, the driver is not needed.

fn module(version: &str, target: &str) -> String {
    format!(
        ".version {version}\n.target {target}\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n.reg .b64 %rd<3>;\n.reg .f32 %f<2>;\n\
         ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd2, %rd1;\nld.global.f32 %f1, [%rd2];\nst.global.f32 [%rd2], %f1;\nret;\n}}\n"
    )
}

#[test]
fn known_targets_are_checked_and_unknown_versions_and_targets_are_refused_by_name() {
    // A cache of this test's own (the first use of the runtime's state reads GASAN_OPTIONS).
    let cache = std::env::temp_dir().join(format!("gasan-ptx-header-{}", std::process::id()));
    std::env::set_var("GASAN_OPTIONS", format!("cache_dir={}", cache.display()));
    for (version, target) in [("8.0", "sm_90"), ("9.0", "sm_100a"), ("8.8", "sm_120"), ("8.7", "sm_120f")] {
        let (checked, sites, _) = gasan_runtime::modules::check_ptx(&module(version, target)).unwrap_or_else(|e| panic!("{version} {target}: {e}"));
        assert!(checked.contains(&format!(".target {target}")), "{target}: header kept");
        assert!(!sites.sites.is_empty(), "{version} {target}: the accesses are checked");
    }
    for (version, target, says) in [("9.9", "sm_90", "PTX '.version 9.9' is newer than the PTX ISA 9.0 gasan reads"), ("8.0", "sm_130", "PTX '.target sm_130' is not a target gasan knows")] {
        let e = gasan_runtime::modules::check_ptx(&module(version, target)).unwrap_err();
        assert!(e.contains(says), "{version} {target}: {e}");
    }
    let _ = std::fs::remove_dir_all(&cache);
}
