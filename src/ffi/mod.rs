//! The C ABI the DuckDB shim calls, and the async bridge.
//!
//! Handles are opaque boxes. Every fallible call returns a [`crate::error::Status`]
//! (`Ok`, or [`crate::Error::status`]) and writes a message the caller frees
//! with `moraine_free_string`. Panics are caught at the boundary and become
//! internal errors: a Rust panic never unwinds into DuckDB. The shim's header,
//! `moraine.h`, is generated from this module by `build.rs` (cbindgen, with
//! `extension/cbindgen.toml`): every function, struct and enum crossing the
//! boundary is declared here once.

mod abi;
mod bridge;

pub use abi::*;

#[cfg(test)]
mod tests {
    /// The names the shim's C++ is written against come out of the
    /// generator's configuration; a renaming there fails here, before the
    /// extension build compiles the shim.
    #[test]
    fn generated_header_declares_what_the_shim_names() {
        let header = include_str!(concat!(env!("OUT_DIR"), "/include/moraine.h"));
        for name in [
            "MORAINE_STATUS_OK = 0",
            "MORAINE_STATUS_CONFLICT = 1",
            "MORAINE_STATUS_INTERNAL = 9",
            "MORAINE_CELL_KIND_NULL = 0",
            "MORAINE_CELL_KIND_BLOB = 4",
            "MORAINE_TRANSFER_INT64 = 0",
            "MORAINE_TRANSFER_VALUE = 5",
            "typedef struct MoraineTableDesc MoraineTableDesc;",
            "MoraineStatus moraine_txn_scan(MoraineTxn *txn,",
        ] {
            assert!(header.contains(name), "moraine.h lacks `{name}`:\n{header}");
        }
        assert!(!header.contains("moraine_duckdb_cpp_init"));
    }
}
