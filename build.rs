//! Generates the shim's header, `moraine.h`, from the Rust that defines the C
//! ABI, and compiles the C++ shim against it and the DuckDB headers
//! `libduckdb-sys` publishes (`DEP_DUCKDB_INCLUDE`), the shim only when the
//! `extension` feature is on.

use std::path::{Path, PathBuf};

/// The files that define everything crossing the ABI.
const ABI_SOURCES: [&str; 3] = ["src/ffi/abi.rs", "src/error.rs", "src/catalog/mod.rs"];

fn main() {
    println!("cargo:rerun-if-changed=extension");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let generated = out.join("include");
    generate_header(&generated.join("moraine.h"));
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
        .include(&generated)
        // Match the bundled DuckDB build: class layouts depend on NDEBUG.
        .define("NDEBUG", None)
        .flag_if_supported("-Wno-unused-parameter")
        .cargo_metadata(false)
        .files(&sources);
    build.compile("moraine_shim");
    println!("cargo:rustc-link-search=native={}", out.display());
    // Whole-archive: nothing in Rust references the shim's objects except the
    // entry point, and the linker must keep all of them.
    println!("cargo:rustc-link-lib=static:+whole-archive=moraine_shim");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// Writes `moraine.h`, on every build so that `cargo test` checks it too. A
/// change to one of [`ABI_SOURCES`] reruns this script, and with it the
/// shim's compilation in an extension build, whether the header changed or
/// not: `cc` has no way to skip an unchanged source.
fn generate_header(path: &Path) {
    let config = cbindgen::Config::from_file("extension/cbindgen.toml")
        .expect("extension/cbindgen.toml describes how moraine.h is generated");
    let mut builder = cbindgen::Builder::new().with_config(config);
    for source in ABI_SOURCES {
        println!("cargo:rerun-if-changed={source}");
        builder = builder.with_src(source);
    }
    let bindings = builder
        .generate()
        .expect("the C ABI in src/ffi/abi.rs is one cbindgen can describe");
    bindings.write_to_file(path);
}
