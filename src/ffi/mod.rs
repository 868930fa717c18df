//! The C ABI the DuckDB shim calls, and the async bridge.
