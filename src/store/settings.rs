//! SlateDB settings moraine opens a store with, and the attach options that
//! tune them.

use super::uri::StoreUri;
use crate::error::{Error, Result};
use slatedb::config::{
    CompactorOptions, DbReaderOptions, GarbageCollectorDirectoryOptions, GarbageCollectorOptions,
    Settings,
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
    /// Keep the writer lease for the whole attach and refuse other writers,
    /// instead of taking turns with them ([`super::turn`]).
    pub exclusive_writer: bool,
    /// How long a transaction waits for the writer turn.
    pub turn_wait: Duration,
    /// Minimum age of an unreferenced object before garbage collection deletes it.
    pub gc_min_age: Duration,
    /// How often garbage collection runs.
    pub gc_interval: Duration,
    /// Minimum age of a WAL fence (the empty WAL object a writer's open
    /// writes at the next position) before garbage collection deletes it.
    /// A fence turns away a writer that was fenced out but still meant to
    /// write at that position, so it must outlive any writer that stands
    /// stalled without noticing it lost the lease; kept for ever, one
    /// accumulates per session and every collection lists them all.
    pub wal_fence_min_age: Duration,
    /// How often the compactor looks for work.
    pub compactor_poll: Duration,
    /// How long a compaction keeps its inputs readable. It bounds how long
    /// one read transaction may run; a catalog transaction is short.
    pub compaction_checkpoint: Duration,
    /// How long a writer goes without a commit before it tidies the store
    /// (flush, full compaction; see `store::upkeep`). `None`: one garbage
    /// collection interval. Zero turns the idle upkeep off.
    pub idle_upkeep: Option<Duration>,
    /// How often SlateDB retries a failing object-store call before the
    /// error surfaces. SlateDB's default retries forever, which turns an
    /// unreachable bucket or a damaged object into a hung statement.
    pub object_store_retries: u32,
    /// Endpoint and credentials of an `s3://` store.
    pub s3: S3Options,
}

/// How an `s3://` store is reached. The shim fills these from DuckDB's `s3`
/// secret for the path; what stays unset falls back to the `AWS_*`
/// environment variables (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`, ...).
#[derive(Clone, Default, PartialEq)]
pub struct S3Options {
    /// `host:port` as DuckDB secrets spell it, or a full `http(s)://` URL.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub key_id: Option<String>,
    pub secret: Option<String>,
    pub session_token: Option<String>,
    /// `path` or `vhost`.
    pub url_style: Option<String>,
    pub use_ssl: Option<bool>,
}

/// Credentials never reach logs or error messages.
impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("key_id", &redacted(&self.key_id))
            .field("secret", &redacted(&self.secret))
            .field("session_token", &redacted(&self.session_token))
            .field("url_style", &self.url_style)
            .field("use_ssl", &self.use_ssl)
            .finish()
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            read_only: false,
            force_takeover: false,
            exclusive_writer: false,
            turn_wait: Duration::from_secs(60),
            gc_min_age: Duration::from_secs(300),
            gc_interval: Duration::from_secs(60),
            wal_fence_min_age: Duration::from_secs(24 * 60 * 60),
            compactor_poll: Duration::from_secs(5),
            compaction_checkpoint: Duration::from_secs(120),
            idle_upkeep: None,
            object_store_retries: 5,
            s3: S3Options::default(),
        }
    }
}

/// The longest time any option takes: ten years.
const MOST_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The attach options moraine understands (DuckLake forwards `META_<name>`).
pub const OPTION_NAMES: [&str; 17] = [
    "gc_min_age_seconds",
    "gc_interval_seconds",
    "wal_fence_min_age_seconds",
    "compactor_poll_ms",
    "compaction_checkpoint_seconds",
    "idle_upkeep_seconds",
    "force_takeover",
    "exclusive_writer",
    "turn_wait_seconds",
    "object_store_retries",
    "s3_endpoint",
    "s3_region",
    "s3_key_id",
    "s3_secret",
    "s3_session_token",
    "s3_url_style",
    "s3_use_ssl",
];

fn non_empty(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

impl StoreSettings {
    pub fn apply_option(&mut self, name: &str, value: &str) -> Result<()> {
        let number = || {
            value.trim().parse::<u64>().map_err(|_| {
                Error::InvalidArgument(format!(
                    "moraine option {name} expects a non-negative integer, got '{value}'"
                ))
            })
        };
        // Times beyond any use overflow the clock arithmetic they feed
        // (SlateDB's compactor panicked on a checkpoint lifetime of 10^13 s).
        let time = |most: u64, unit: fn(u64) -> Duration| {
            let n = number()?;
            if n > most {
                return Err(Error::InvalidArgument(format!(
                    "moraine option {name} is at most {most} (ten years), got '{value}'"
                )));
            }
            Ok(unit(n))
        };
        let seconds = || time(MOST_SECONDS, Duration::from_secs);
        let millis = || time(MOST_SECONDS * 1000, Duration::from_millis);
        let at_least = |least: Duration, given: Duration| given.max(least);
        // DuckDB passes a bare option (`META_FORCE_TAKEOVER`) as `true`.
        let flag = || match value.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => number().map(|n| n != 0),
        };
        match name.to_ascii_lowercase().as_str() {
            "gc_min_age_seconds" => self.gc_min_age = seconds()?,
            "gc_interval_seconds" => {
                self.gc_interval = at_least(Duration::from_secs(1), seconds()?)
            }
            "wal_fence_min_age_seconds" => self.wal_fence_min_age = seconds()?,
            "compactor_poll_ms" => {
                self.compactor_poll = at_least(Duration::from_millis(10), millis()?)
            }
            "compaction_checkpoint_seconds" => {
                self.compaction_checkpoint = at_least(Duration::from_secs(1), seconds()?)
            }
            "idle_upkeep_seconds" => self.idle_upkeep = Some(seconds()?),
            "force_takeover" => self.force_takeover = flag()?,
            "exclusive_writer" => self.exclusive_writer = flag()?,
            "turn_wait_seconds" => self.turn_wait = at_least(Duration::from_secs(1), seconds()?),
            "object_store_retries" => {
                self.object_store_retries = u32::try_from(number()?).unwrap_or(u32::MAX)
            }
            "s3_endpoint" => self.s3.endpoint = non_empty(value),
            "s3_region" => self.s3.region = non_empty(value),
            "s3_key_id" => self.s3.key_id = non_empty(value),
            "s3_secret" => self.s3.secret = non_empty(value),
            "s3_session_token" => self.s3.session_token = non_empty(value),
            "s3_url_style" => match value.trim().to_ascii_lowercase().as_str() {
                "" => self.s3.url_style = None,
                style @ ("path" | "vhost") => self.s3.url_style = Some(style.to_string()),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "moraine option s3_url_style expects 'path' or 'vhost', got '{value}'"
                    )))
                }
            },
            "s3_use_ssl" => {
                self.s3.use_ssl = Some(match value.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "moraine option s3_use_ssl expects true or false, got '{value}'"
                        )))
                    }
                })
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown moraine option '{name}'; known options: {}",
                    OPTION_NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }

    pub fn reader_options(&self) -> DbReaderOptions {
        DbReaderOptions {
            object_store_max_retries: Some(self.object_store_retries),
            ..DbReaderOptions::default()
        }
    }

    /// How long the writer waits without a commit before its idle upkeep;
    /// `None` when the upkeep is off.
    pub fn idle_upkeep_after(&self) -> Option<Duration> {
        let after = self.idle_upkeep.unwrap_or(self.gc_interval);
        (!after.is_zero()).then_some(after)
    }

    /// The background compactor moraine runs beside a writer
    /// (`store::upkeep`). It is not SlateDB's embedded one, so moraine can
    /// swap in a quicker one while it compacts on purpose.
    pub fn compactor_options(&self) -> CompactorOptions {
        let mut compactor = CompactorOptions {
            poll_interval: self.compactor_poll,
            checkpoint_lifetime: self.compaction_checkpoint,
            object_store_max_retries: Some(self.object_store_retries),
            ..CompactorOptions::default()
        };
        // Size-tiered: a run joins a merge only while it is at most four
        // times what the merge makes, so each byte a commit writes is
        // rewritten a bounded number of times. Merging every L0 into the
        // oldest run rewrote the whole catalog every two L0s, a cost that grew
        // with the lake's history. Tombstones reach the oldest run, where
        // they are dropped, with the merges that include it and with the idle
        // upkeep's and `moraine_reclaim`'s full merges. Past four runs the
        // newest are merged whatever their sizes, so a cold attach opens a
        // bounded number of runs.
        for (option, value) in [
            ("min_compaction_sources", "2"),
            ("include_size_threshold", "4"),
            ("sorted_run_consolidation_threshold", "4"),
        ] {
            compactor
                .scheduler_options
                .insert(option.into(), value.into());
        }
        compactor
    }

    /// What the garbage collection beside a writer deletes, and how old it
    /// must be first (`store::upkeep::spawn_collection`).
    pub fn collection_options(&self, uri: &StoreUri) -> GarbageCollectorOptions {
        collection(
            uri,
            Some(self.gc_interval),
            self.gc_min_age,
            self.gc_min_age,
            Some(self.wal_fence_min_age),
        )
    }

    /// What a closing writer collects before it releases the lease
    /// (`store::upkeep::collect_history_at_close`): the WAL objects,
    /// manifests and compaction records its session made obsolete at once,
    /// and the compacted SSTs and fences that are old enough, as a
    /// collection beside a writer would. A lake used only by sessions
    /// shorter than the first collection's delay is collected here alone:
    /// before, its merged-away SSTs and its fences stayed for ever.
    pub fn close_collection_options(&self, uri: &StoreUri) -> GarbageCollectorOptions {
        collection(
            uri,
            None,
            Duration::ZERO,
            self.gc_min_age,
            Some(self.wal_fence_min_age),
        )
    }

    pub fn slatedb_settings(&self) -> Settings {
        Settings {
            flush_interval: Some(Duration::from_millis(100)),
            object_store_max_retries: Some(self.object_store_retries),
            // moraine runs the compactor (`compactor_options`) and the
            // garbage collection (`collection_options`) itself.
            compactor_options: None,
            garbage_collector_options: None,
            ..Settings::default()
        }
    }
}

/// A garbage collection of `uri`'s store, every `interval` or once: the
/// logs (manifests, WAL objects, compaction records) once older than
/// `logs_min_age`, compacted SSTs once older than `compacted_min_age`, and
/// WAL fences once older than `fence_min_age`, or never without one.
pub fn collection(
    uri: &StoreUri,
    interval: Option<Duration>,
    logs_min_age: Duration,
    compacted_min_age: Duration,
    fence_min_age: Option<Duration>,
) -> GarbageCollectorOptions {
    let aged = |min_age| GarbageCollectorDirectoryOptions {
        interval,
        min_age,
        dry_run: false,
    };
    GarbageCollectorOptions {
        manifest_options: Some(aged(logs_min_age)),
        wal_options: Some(aged(logs_min_age)),
        wal_fence_options: fence_min_age.map(aged),
        compacted_options: Some(aged(compacted_min_age)),
        compactions_options: Some(aged(logs_min_age)),
        boundary_files_enabled: uri.gc_boundary_files(),
        ..GarbageCollectorOptions::default()
    }
}
