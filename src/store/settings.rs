//! SlateDB settings moraine opens a store with, and the attach options that
//! tune them.

use super::uri::StoreUri;
use crate::error::{Error, Result};
use slatedb::config::{
    CompactorOptions, GarbageCollectorDirectoryOptions, GarbageCollectorOptions, Settings,
};
use std::time::Duration;

/// What an attach may tune. Defaults favour a small catalog: commits are
/// acknowledged after an explicit WAL flush, and deleted keys are compacted
/// and collected within minutes.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    pub read_only: bool,
    /// Take the writer lease even if another process holds it.
    pub force_takeover: bool,
    /// Minimum age of an unreferenced object before garbage collection deletes it.
    pub gc_min_age: Duration,
    /// How often garbage collection runs.
    pub gc_interval: Duration,
    /// How often the compactor looks for work.
    pub compactor_poll: Duration,
    /// How long a compaction keeps its inputs readable. It bounds how long
    /// one read transaction may run; a catalog transaction is short.
    pub compaction_checkpoint: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            read_only: false,
            force_takeover: false,
            gc_min_age: Duration::from_secs(300),
            gc_interval: Duration::from_secs(60),
            compactor_poll: Duration::from_secs(5),
            compaction_checkpoint: Duration::from_secs(120),
        }
    }
}

/// The attach options moraine understands (DuckLake forwards `META_<name>`).
pub const OPTION_NAMES: [&str; 5] = [
    "gc_min_age_seconds",
    "gc_interval_seconds",
    "compactor_poll_ms",
    "compaction_checkpoint_seconds",
    "force_takeover",
];

impl StoreSettings {
    pub fn apply_option(&mut self, name: &str, value: &str) -> Result<()> {
        let number = || {
            value.trim().parse::<u64>().map_err(|_| {
                Error::InvalidArgument(format!(
                    "moraine option {name} expects a non-negative integer, got '{value}'"
                ))
            })
        };
        match name.to_ascii_lowercase().as_str() {
            "gc_min_age_seconds" => self.gc_min_age = Duration::from_secs(number()?),
            "gc_interval_seconds" => self.gc_interval = Duration::from_secs(number()?.max(1)),
            "compactor_poll_ms" => self.compactor_poll = Duration::from_millis(number()?.max(10)),
            "compaction_checkpoint_seconds" => {
                self.compaction_checkpoint = Duration::from_secs(number()?.max(1))
            }
            "force_takeover" => self.force_takeover = number()? != 0,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown moraine option '{name}'; known options: {}",
                    OPTION_NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }

    pub fn slatedb_settings(&self, uri: &StoreUri) -> Settings {
        let dir = GarbageCollectorDirectoryOptions {
            interval: Some(self.gc_interval),
            min_age: self.gc_min_age,
            dry_run: false,
        };
        let mut compactor = CompactorOptions {
            poll_interval: self.compactor_poll,
            checkpoint_lifetime: self.compaction_checkpoint,
            ..CompactorOptions::default()
        };
        // Merge everything into the oldest run so tombstones reach the last
        // sorted run and are dropped: a catalog is small, rewriting it is cheap.
        compactor
            .scheduler_options
            .insert("min_compaction_sources".into(), "2".into());
        compactor
            .scheduler_options
            .insert("include_size_threshold".into(), "1000000".into());
        Settings {
            flush_interval: Some(Duration::from_millis(100)),
            compactor_options: Some(compactor),
            garbage_collector_options: Some(GarbageCollectorOptions {
                manifest_options: Some(dir),
                wal_options: Some(dir),
                wal_fence_options: None,
                compacted_options: Some(dir),
                compactions_options: Some(dir),
                // The local filesystem has no If-Match; boundary files would
                // stop manifest and compaction-log collection there.
                boundary_files_enabled: !uri.is_local(),
                ..GarbageCollectorOptions::default()
            }),
            ..Settings::default()
        }
    }
}
