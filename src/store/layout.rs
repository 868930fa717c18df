//! The folders SlateDB keeps under a store's root. Everything that lists,
//! classifies, recycles or journals a store's objects by folder names them
//! from here.

/// Manifests: each a numbered, write-once object.
pub const MANIFEST: &str = "manifest";

/// WAL objects, one per flushed write batch (a commit, on moraine).
pub const WAL: &str = "wal";

/// Compacted SSTs, named by ULID.
pub const COMPACTED: &str = "compacted";

/// The compactor's records of its work.
pub const COMPACTIONS: &str = "compactions";

/// Checkpoint records.
pub const CHECKPOINTS: &str = "checkpoints";

/// Garbage collection's boundary files.
pub const GC: &str = "gc";

/// The folders whose objects are each written once under a name never used
/// again, and deleted only by the collector.
pub const WRITE_ONCE: [&str; 4] = [WAL, COMPACTED, MANIFEST, COMPACTIONS];
