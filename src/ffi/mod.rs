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
