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

/// The write-once folders whose small objects a local store journals
/// (design 0022): the WAL, written at every commit, and the manifests, one
/// of which every read-write attach writes to fence the writer before it.
pub const JOURNALED: [&str; 2] = [WAL, MANIFEST];
