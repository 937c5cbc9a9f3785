// Compiles the kernel patch's kernel-independent mapping arithmetic so the tests can check it
// against the Rust planner (and so the ABI header's layout asserts run on every build).
fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kmod-patch");
    println!("cargo:rerun-if-changed={}", root.join("src/gasan_map_math.c").display());
    println!("cargo:rerun-if-changed={}", root.join("include").display());
    cc::Build::new()
        .file(root.join("src/gasan_map_math.c"))
        .include(root.join("include"))
        .flag_if_supported("-std=c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("gasan_map_math");
}
