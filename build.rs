//! Compiles the C++ shim against the DuckDB headers `libduckdb-sys` publishes
//! (`DEP_DUCKDB_INCLUDE`), only when the `extension` feature is on.

fn main() {
    println!("cargo:rerun-if-changed=extension");
    if std::env::var_os("CARGO_FEATURE_EXTENSION").is_none() {
        return;
    }
    let include = std::env::var("DEP_DUCKDB_INCLUDE")
        .expect("libduckdb-sys (bundled) publishes DEP_DUCKDB_INCLUDE; is the `extension` feature wired to it?");
    let mut sources: Vec<_> = std::fs::read_dir("extension")
        .expect("extension/ holds the C++ shim")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    sources.sort();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .include(&include)
        .include("extension")
        .include("extension/include")
        // Match the bundled DuckDB build: class layouts depend on NDEBUG.
        .define("NDEBUG", None)
        .flag_if_supported("-Wno-unused-parameter")
        .cargo_metadata(false)
        .files(&sources);
    build.compile("moraine_shim");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out}");
    // Whole-archive: nothing in Rust references the shim's objects except the
    // entry point, and the linker must keep all of them.
    println!("cargo:rustc-link-lib=static:+whole-archive=moraine_shim");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
