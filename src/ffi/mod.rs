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

    /// The header's status codes, cell kinds and transfer kinds are written
    /// by hand too: each must carry the value Rust uses.
    #[test]
    fn header_constants_match_rust() {
        use crate::catalog::Transfer;
        use crate::Error;
        let root = env!("CARGO_MANIFEST_DIR");
        let header =
            std::fs::read_to_string(format!("{root}/extension/include/moraine.h")).unwrap();
        let declared: std::collections::BTreeMap<String, i64> = header
            .lines()
            .filter_map(|line| {
                let (name, value) = line.trim().trim_end_matches(',').split_once(" = ")?;
                Some((name.trim().to_string(), value.trim().parse().ok()?))
            })
            .filter(|(name, _)| name.starts_with("MORAINE_"))
            .collect();
        let expected: Vec<(&str, i64)> = vec![
            ("MORAINE_OK", 0),
            (
                "MORAINE_CONFLICT",
                Error::Conflict(String::new()).code().into(),
            ),
            (
                "MORAINE_NOT_FOUND",
                Error::NotFound(String::new()).code().into(),
            ),
            (
                "MORAINE_CONSTRAINT",
                Error::Constraint(String::new()).code().into(),
            ),
            (
                "MORAINE_INVALID_ARGUMENT",
                Error::InvalidArgument(String::new()).code().into(),
            ),
            (
                "MORAINE_CORRUPTION",
                Error::Corruption(String::new()).code().into(),
            ),
            ("MORAINE_STORE", Error::Store(String::new()).code().into()),
            ("MORAINE_FENCED", Error::Fenced.code().into()),
            (
                "MORAINE_UNSUPPORTED",
                Error::Unsupported(String::new()).code().into(),
            ),
            (
                "MORAINE_INTERNAL",
                Error::Internal(String::new()).code().into(),
            ),
            ("MORAINE_CELL_NULL", super::CELL_NULL.into()),
            ("MORAINE_CELL_INT", super::CELL_INT.into()),
            ("MORAINE_CELL_BOOL", super::CELL_BOOL.into()),
            ("MORAINE_CELL_TEXT", super::CELL_TEXT.into()),
            ("MORAINE_CELL_BLOB", super::CELL_BLOB.into()),
            ("MORAINE_TRANSFER_INT64", Transfer::Int64 as i64),
            ("MORAINE_TRANSFER_BOOL", Transfer::Bool as i64),
            ("MORAINE_TRANSFER_TEXT", Transfer::Text as i64),
            ("MORAINE_TRANSFER_UUID", Transfer::Uuid as i64),
            ("MORAINE_TRANSFER_TIMESTAMPTZ", Transfer::TimestampTz as i64),
            ("MORAINE_TRANSFER_VALUE", Transfer::Value as i64),
        ];
        let expected: std::collections::BTreeMap<String, i64> = expected
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect();
        assert_eq!(declared, expected);
    }
}
