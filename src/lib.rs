//! moraine: a SlateDB key-value store on object storage as the metadata
//! catalog of DuckLake.
//!
//! Data flows one way: `ffi` (the C ABI the DuckDB shim calls) → `staged`
//! (one DuckDB transaction's reads and writes) → `catalog` (DuckLake's table
//! kinds) and `inline` (inlined data) → `store` (keys, codecs, SlateDB).

pub mod catalog;
pub mod embed;
pub mod error;
pub mod ffi;
pub mod inline;
pub mod reclaim;
pub mod staged;
pub mod store;
pub mod verify;

pub use error::{Error, Result};

// The shim's C++ objects call into DuckDB; nothing in Rust does, so the
// dependency must be named for rustc to link the static DuckDB at all.
#[cfg(feature = "extension")]
use libduckdb_sys as _;

/// The crate version, stamped into the extension footer and `moraine_version()`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
