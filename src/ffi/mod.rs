//! The C ABI the DuckDB shim calls, and the async bridge.
//!
//! Handles are opaque boxes. Every fallible call returns a status code (0 =
//! ok, otherwise [`crate::Error::code`]) and writes a message the caller frees
//! with `moraine_free_string`. Panics are caught at the boundary and become
//! internal errors: a Rust panic never unwinds into DuckDB. The declarations
//! live in `extension/include/moraine.h`; a test checks both sides agree.

mod abi;
mod bridge;

pub use abi::*;

#[cfg(test)]
mod tests {
    /// `extension/include/moraine.h` and this module must declare the same
    /// functions: the header is hand-written, so a drift fails here.
    #[test]
    fn header_declares_exactly_the_exported_functions() {
        let root = env!("CARGO_MANIFEST_DIR");
        let header =
            std::fs::read_to_string(format!("{root}/extension/include/moraine.h")).unwrap();
        let abi = std::fs::read_to_string(format!("{root}/src/ffi/abi.rs")).unwrap();
        let names = |text: &str, marker: &str| -> std::collections::BTreeSet<String> {
            text.split(marker)
                .skip(1)
                .filter_map(|rest| {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    name.starts_with("moraine_").then_some(name)
                })
                .collect()
        };
        let mut exported = names(&abi, "pub extern \"C\" fn ");
        exported.remove("moraine_duckdb_cpp_init");
        let declared: std::collections::BTreeSet<String> = header
            .lines()
            .filter(|l| !l.trim_start().starts_with("//") && l.contains('('))
            .flat_map(|l| names(&l.replace('*', " "), " "))
            .filter(|n| exported.contains(n) || !n.starts_with("moraine_cell"))
            .collect();
        assert_eq!(exported, declared);
    }
}
