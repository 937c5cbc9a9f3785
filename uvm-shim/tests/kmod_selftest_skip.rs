//! `gasan-uvm kmod-selftest` is built with the tests and, where the patched nvidia-uvm is not
//! loaded (CI, GPU machines with the stock driver), skips with exit status 77 and says why,
//! having sent no gasan ioctl.

#[test]
fn kmod_selftest_skips_without_the_patched_module() {
    if std::fs::metadata(gasan_uvm::kmod::SYSFS_ABI).is_ok() {
        eprintln!("the patched module is loaded here: run `gasan-uvm kmod-selftest` by hand");
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gasan-uvm")).arg("kmod-selftest").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(77), "{text}");
    assert!(text.contains("kmod-selftest: SKIPPED:"), "{text}");
}
