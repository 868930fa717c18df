//! The retention audit: live logical bytes against physical bytes, history
//! and schedule backlogs, and the retention options DuckLake has set.
//! Read-only: safe on a live store.

use super::{physical_usage, PhysicalUsage};
use crate::catalog::{self, expiring, image, Cell, Kind, Reclaim, SysRecord};
use crate::column;
use crate::error::Result;
use crate::inline::InlineRecord;
use crate::store::keys::{self, Subspace};
use crate::store::value::decode_record;
use crate::store::Store;
use std::collections::BTreeMap;
use std::fmt;

/// Physical bytes beyond live bytes that every store carries: the manifest,
/// compaction state and the SST and WAL framing of a small catalog.
pub const FIXED_OVERHEAD_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Keys that no reclamation path covers: a record family added without
    /// a declaration.
    Undeclared,
    Unbounded,
    Reclaimable,
    Backlog,
    /// Records DuckLake 1.5.5's expiry never removes while their table lives.
    Unpruned,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Undeclared => "UNDECLARED",
            Severity::Unbounded => "UNBOUNDED",
            Severity::Reclaimable => "RECLAIMABLE",
            Severity::Backlog => "BACKLOG",
            Severity::Unpruned => "UNPRUNED",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audit {
    /// "subspace/kind" → (keys, bytes of keys and values).
    pub logical: BTreeMap<String, (u64, u64)>,
    /// "subspace/kind" → its declared reclamation path (`None`: undeclared).
    pub coverage: BTreeMap<String, Option<Reclaim>>,
    pub physical: PhysicalUsage,
    pub snapshot_count: u64,
    pub oldest_snapshot_id: Option<i64>,
    pub oldest_snapshot_age_seconds: Option<i64>,
    pub history_versions: u64,
    pub schedule_backlog: u64,
    pub oldest_schedule_age_seconds: Option<i64>,
    pub expire_older_than: Option<String>,
    pub delete_older_than: Option<String>,
    /// Growth DuckLake 1.5.5 never prunes, by what it is: (records, bytes).
    pub unpruned: BTreeMap<&'static str, (u64, u64)>,
    pub findings: Vec<Finding>,
}

/// What DuckLake 1.5.5's expiry leaves behind for good while a table lives:
/// the ended column, tag, partition and sort versions every ALTER leaves,
/// and a `schema_versions` row per schema change; and, once the table is
/// dropped, its option rows. Each (kind, table-id column) names one such
/// growth of history.
const UNPRUNED_HISTORY: [(Kind, &str); 7] = [
    (Kind::Column, "table_id"),
    (Kind::Tag, "object_id"),
    (Kind::ColumnTag, "table_id"),
    (Kind::PartitionInfo, "table_id"),
    (Kind::PartitionColumn, "table_id"),
    (Kind::SortInfo, "table_id"),
    (Kind::SortExpression, "table_id"),
];

/// Unpruned growth becomes a finding once it is this large, in bytes, and
/// at least a tenth of the live bytes: a few ALTERs are no finding.
const UNPRUNED_FINDING_BYTES: u64 = 256 * 1024;

impl Audit {
    pub fn live_bytes(&self) -> u64 {
        self.logical.values().map(|(_, b)| b).sum()
    }
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// Where a key belongs and how its bytes come back: the coverage guard's
/// classification. `path` is `None` for a key no declaration covers.
pub fn declared(key: &[u8]) -> (String, Option<Reclaim>) {
    let Some(subspace) = key.first().and_then(|b| Subspace::from_byte(*b)) else {
        return (format!("unknown subspace {:?}", key.first()), None);
    };
    match subspace {
        Subspace::Sys => match SysRecord::ALL.into_iter().find(|r| r.key() == key) {
            Some(record) => (format!("sys/{}", record.name()), Some(record.reclaim())),
            None => (format!("sys/unknown {key:02x?}"), None),
        },
        Subspace::Snapshot => ("snapshot".into(), Some(Kind::Snapshot.reclaim())),
        Subspace::Current | Subspace::History => {
            match key.get(1).and_then(|t| Kind::from_tag(*t)) {
                Some(kind) => (
                    format!("{}/{}", subspace.name(), kind.def().name),
                    Some(kind.reclaim()),
                ),
                None => (
                    format!("{}/unknown tag {:?}", subspace.name(), key.get(1)),
                    None,
                ),
            }
        }
        Subspace::SchemaVersion => (
            subspace.name().to_string(),
            Some(Kind::SchemaVersions.reclaim()),
        ),
        Subspace::Inline => match key.get(1).and_then(|b| InlineRecord::from_byte(*b)) {
            Some(record) => (format!("inline/{}", record.name()), Some(record.reclaim())),
            None => (format!("inline/unknown type {:?}", key.get(1)), None),
        },
        Subspace::Image if key == image::stamp_key().as_slice() => {
            ("image/stamp".into(), Some(Reclaim::ReplacedByNextImage))
        }
        Subspace::Image => match image::decode_key(key) {
            Ok((table, _)) => (format!("image/{table}"), Some(Reclaim::ReplacedByNextImage)),
            Err(_) => ("image/malformed key".into(), None),
        },
        Subspace::Expiring => (
            subspace.name().to_string(),
            Some(Reclaim::PurgedAfterExpiry),
        ),
    }
}

/// Parses DuckDB interval text as DuckLake options hold it ("2 days", "1 week").
pub fn interval_seconds(text: &str) -> Option<i64> {
    let mut total = 0;
    let mut parts = text.split_whitespace();
    while let Some(n) = parts.next() {
        let n: i64 = n.parse().ok()?;
        let unit = parts.next()?.trim_end_matches('s').to_ascii_lowercase();
        total += n * match unit.as_str() {
            "second" | "sec" => 1,
            "minute" | "min" => 60,
            "hour" => 3600,
            "day" => 86_400,
            "week" => 604_800,
            "month" => 2_592_000,
            "year" => 31_536_000,
            _ => return None,
        };
    }
    Some(total)
}

pub async fn audit(store: &Store) -> Result<Audit> {
    let view = store.snapshot().await?;
    let mut report = Audit {
        physical: physical_usage(store).await?,
        ..Audit::default()
    };
    let now = now_micros();
    let live_tables: std::collections::HashSet<i64> =
        catalog::committed_rows(store, &view, Kind::Table)
            .await?
            .iter()
            .filter(|row| {
                row.get(column!(Table, end_snapshot))
                    .is_some_and(Cell::is_null)
            })
            .filter_map(|row| row.get(column!(Table, table_id)).and_then(Cell::as_int))
            .collect();
    let expiring = expiring::read(store, &view).await?;
    // Every key of the store, whatever its first byte: the coverage guard
    // must see keys outside the known subspaces too.
    for (key, value) in store.scan_prefix(&view, b"").await? {
        if let Some(what) = unpruned(&key, &value, &live_tables)? {
            let entry = report.unpruned.entry(what).or_default();
            entry.0 += 1;
            entry.1 += (key.len() + value.len()) as u64;
        }
        let awaiting_purge = key.first() == Some(&(Subspace::Snapshot as u8))
            && keys::decode_cells(&key, 1)
                .ok()
                .and_then(|cells| cells.first().and_then(Cell::as_int))
                .is_some_and(|id| expiring.contains(id));
        let (label, path) = if awaiting_purge {
            (
                "snapshot (expired, awaiting purge)".to_string(),
                Some(Reclaim::PurgedAfterExpiry),
            )
        } else {
            declared(&key)
        };
        let entry = report.logical.entry(label.clone()).or_default();
        entry.0 += 1;
        entry.1 += (key.len() + value.len()) as u64;
        report.coverage.insert(label, path);
        match key.first().and_then(|b| Subspace::from_byte(*b)) {
            Some(Subspace::History) => report.history_versions += 1,
            Some(Subspace::Snapshot) if !awaiting_purge => {
                report.snapshot_count += 1;
                let record = decode_record(Kind::Snapshot.tag(), &value)?;
                if report.oldest_snapshot_id.is_none() {
                    report.oldest_snapshot_id = record.row.first().and_then(Cell::as_int);
                    report.oldest_snapshot_age_seconds = record
                        .row
                        .get(1)
                        .and_then(Cell::as_int)
                        .map(|t| (now - t) / 1_000_000);
                }
            }
            _ => {}
        }
    }
    for row in catalog::committed_rows(store, &view, Kind::FilesScheduledForDeletion).await? {
        report.schedule_backlog += 1;
        if let Some(start) = row.get(3).and_then(Cell::as_int) {
            let age = (now - start) / 1_000_000;
            report.oldest_schedule_age_seconds = Some(
                report
                    .oldest_schedule_age_seconds
                    .map_or(age, |a| a.max(age)),
            );
        }
    }
    for row in catalog::committed_rows(store, &view, Kind::Metadata).await? {
        let (Some(key), Some(value), true) = (row[0].as_text(), row[1].as_text(), row[2].is_null())
        else {
            continue;
        };
        match key {
            "expire_older_than" => report.expire_older_than = Some(value.to_string()),
            "delete_older_than" => report.delete_older_than = Some(value.to_string()),
            _ => {}
        }
    }
    report.findings = findings(&report);
    Ok(report)
}

/// Which unpruned growth a key is, if any: an ended version of a live
/// table's column, tag, partition or sort, a live table's schema version, or
/// an option of a dropped table. A record that does not decode is left to
/// `moraine verify`, not counted.
fn unpruned(
    key: &[u8],
    value: &[u8],
    live_tables: &std::collections::HashSet<i64>,
) -> Result<Option<&'static str>> {
    let table_of = |kind: Kind, column: &str| -> Result<Option<i64>> {
        let Ok(record) = decode_record(kind.tag(), value) else {
            return Ok(None);
        };
        Ok(kind
            .def()
            .position(column)
            .and_then(|at| record.row.get(at))
            .and_then(Cell::as_int))
    };
    match key.first().and_then(|b| Subspace::from_byte(*b)) {
        Some(Subspace::History) => {
            let Some(kind) = key.get(1).and_then(|t| Kind::from_tag(*t)) else {
                return Ok(None);
            };
            let Some((_, column)) = UNPRUNED_HISTORY.iter().find(|(k, _)| *k == kind) else {
                return Ok(None);
            };
            let live = table_of(kind, column)?.is_some_and(|t| live_tables.contains(&t));
            Ok(live.then_some(kind.def().name))
        }
        Some(Subspace::Current) if key.get(1) == Some(&Kind::Metadata.tag()) => {
            let Ok(record) = decode_record(Kind::Metadata.tag(), value) else {
                return Ok(None);
            };
            let cell = |at: usize| record.row.get(at);
            let scoped_to_table =
                cell(column!(Metadata, scope)).and_then(Cell::as_text) == Some("table");
            let dropped = cell(column!(Metadata, scope_id))
                .and_then(Cell::as_int)
                .is_some_and(|t| !live_tables.contains(&t));
            Ok((scoped_to_table && dropped).then_some("options of dropped tables"))
        }
        Some(Subspace::SchemaVersion) => {
            let live = table_of(Kind::SchemaVersions, "table_id")?
                .is_some_and(|t| live_tables.contains(&t));
            Ok(live.then_some("ducklake_schema_versions"))
        }
        _ => Ok(None),
    }
}

fn findings(a: &Audit) -> Vec<Finding> {
    let mut out = Vec::new();
    for (label, _) in a.coverage.iter().filter(|(_, path)| path.is_none()) {
        let keys = a.logical.get(label).map_or(0, |(keys, _)| *keys);
        out.push(Finding {
            severity: Severity::Undeclared,
            message: format!(
                "{keys} keys under {label} have no declared reclamation path: declare one (Kind::reclaim, \
                 InlineRecord::reclaim, SysRecord::reclaim) before writing them"
            ),
        });
    }
    // History is whatever expiry could still remove: snapshots besides the
    // head, and ended versions.
    let history = a.snapshot_count > 1 || a.history_versions > 0;
    match a.expire_older_than.as_deref().map(interval_seconds) {
        None if history => out.push(Finding {
            severity: Severity::Unbounded,
            message: format!(
                "{} snapshots and {} ended versions are kept and nothing expires them: set DuckLake's expire_older_than \
                 (CALL ducklake_set_option('lake', 'expire_older_than', '1 week')) and run ducklake_expire_snapshots \
                 regularly",
                a.snapshot_count, a.history_versions
            ),
        }),
        // The horizon is set, yet snapshots older than it remain: expiry is
        // configured but not running. (The head never expires, so a lone old
        // head snapshot is no finding.)
        Some(Some(horizon)) if a.snapshot_count > 1 => {
            if let Some(age) = a.oldest_snapshot_age_seconds.filter(|age| *age > horizon) {
                out.push(Finding {
                    severity: Severity::Unbounded,
                    message: format!(
                        "expire_older_than is {} but the oldest of {} snapshots is {age} s old: expiry is configured \
                         and not running; schedule CALL ducklake_expire_snapshots('lake')",
                        a.expire_older_than.as_deref().unwrap_or_default(),
                        a.snapshot_count
                    ),
                });
            }
        }
        _ => {}
    }
    let live = a.live_bytes();
    let physical = a.physical.bytes();
    if physical > 4 * live + FIXED_OVERHEAD_BYTES {
        out.push(Finding {
            severity: Severity::Reclaimable,
            message: format!("{physical} physical bytes hold {live} live bytes: run CALL moraine_reclaim('lake')"),
        });
    }
    let (records, bytes) = a
        .unpruned
        .values()
        .fold((0, 0), |(r, b), (records, bytes)| (r + records, b + bytes));
    if bytes > UNPRUNED_FINDING_BYTES && bytes * 10 > live {
        let parts: Vec<String> = a
            .unpruned
            .iter()
            .map(|(what, (records, bytes))| format!("{what}: {records} records, {bytes} bytes"))
            .collect();
        out.push(Finding {
            severity: Severity::Unpruned,
            message: format!(
                "{records} records ({bytes} bytes) that DuckLake 1.5.5's expiry never removes while their table \
                 lives ({}); they grow with every ALTER and schema change. Recreating the table (CREATE TABLE … AS, \
                 then DROP) lets expiry take them",
                parts.join("; ")
            ),
        });
    }
    let horizon = a
        .delete_older_than
        .as_deref()
        .and_then(interval_seconds)
        .unwrap_or(2 * 86_400);
    if let Some(age) = a.oldest_schedule_age_seconds.filter(|age| *age > horizon) {
        out.push(Finding {
            severity: Severity::Backlog,
            message: format!(
                "{} files are scheduled for deletion, the oldest for {age} s, past the {horizon} s cleanup horizon: \
                 run ducklake_cleanup_old_files",
                a.schedule_backlog
            ),
        });
    }
    out
}

/// The audit as `[section, item, value, detail]` rows, for SQL and the CLI.
pub fn rows(a: &Audit) -> Vec<[String; 4]> {
    let mut out = Vec::new();
    let row = |s: &str, i: &str, v: String, d: String| [s.to_string(), i.to_string(), v, d];
    for (label, (keys, bytes)) in &a.logical {
        out.push(row(
            "live",
            label,
            bytes.to_string(),
            format!("{keys} keys"),
        ));
    }
    for (label, path) in &a.coverage {
        let keys = a.logical.get(label).map_or(0, |(keys, _)| *keys);
        out.push(row(
            "coverage",
            label,
            path.map_or("UNDECLARED", Reclaim::name).to_string(),
            format!("{keys} keys"),
        ));
    }
    out.push(row(
        "live",
        "total",
        a.live_bytes().to_string(),
        "logical bytes of keys and values".into(),
    ));
    for (kind, (objects, bytes)) in &a.physical.by_type {
        out.push(row(
            "physical",
            kind,
            bytes.to_string(),
            format!("{objects} objects"),
        ));
    }
    out.push(row(
        "physical",
        "total",
        a.physical.bytes().to_string(),
        format!("{} objects", a.physical.objects()),
    ));
    let opt = |v: Option<i64>| v.map_or("none".to_string(), |v| v.to_string());
    out.push(row(
        "snapshots",
        "count",
        a.snapshot_count.to_string(),
        format!("oldest id {}", opt(a.oldest_snapshot_id)),
    ));
    out.push(row(
        "snapshots",
        "oldest_age_seconds",
        opt(a.oldest_snapshot_age_seconds),
        String::new(),
    ));
    out.push(row(
        "history",
        "ended_versions",
        a.history_versions.to_string(),
        String::new(),
    ));
    for (what, (records, bytes)) in &a.unpruned {
        out.push(row(
            "unpruned",
            what,
            bytes.to_string(),
            format!("{records} records DuckLake's expiry never removes"),
        ));
    }
    out.push(row(
        "schedule",
        "backlog",
        a.schedule_backlog.to_string(),
        String::new(),
    ));
    out.push(row(
        "schedule",
        "oldest_age_seconds",
        opt(a.oldest_schedule_age_seconds),
        String::new(),
    ));
    let option = |v: &Option<String>| v.clone().unwrap_or_else(|| "unset".into());
    out.push(row(
        "options",
        "expire_older_than",
        option(&a.expire_older_than),
        String::new(),
    ));
    out.push(row(
        "options",
        "delete_older_than",
        option(&a.delete_older_than),
        String::new(),
    ));
    for f in &a.findings {
        out.push(row(
            "finding",
            &f.severity.to_string(),
            String::new(),
            f.message.clone(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit_of(snapshots: u64, oldest_age: i64, horizon: Option<&str>) -> Audit {
        Audit {
            snapshot_count: snapshots,
            oldest_snapshot_id: Some(1),
            oldest_snapshot_age_seconds: Some(oldest_age),
            expire_older_than: horizon.map(str::to_string),
            ..Audit::default()
        }
    }

    fn severities(a: &Audit) -> Vec<Severity> {
        findings(a).into_iter().map(|f| f.severity).collect()
    }

    #[test]
    fn history_without_a_horizon_is_unbounded_even_after_a_manual_expiry() {
        // Oldest snapshot 1, not 0: an expiry ran once, and history grew again.
        assert_eq!(severities(&audit_of(40, 10, None)), [Severity::Unbounded]);
        assert!(
            severities(&audit_of(1, 10, None)).is_empty(),
            "only the head is left"
        );
    }

    #[test]
    fn a_horizon_that_expiry_does_not_keep_is_unbounded() {
        assert_eq!(
            severities(&audit_of(40, 8 * 86_400, Some("1 week"))),
            [Severity::Unbounded]
        );
        assert!(
            severities(&audit_of(40, 86_400, Some("1 week"))).is_empty(),
            "within the horizon"
        );
        assert!(
            severities(&audit_of(1, 8 * 86_400, Some("1 week"))).is_empty(),
            "an old head never expires"
        );
    }

    #[test]
    fn growth_expiry_never_prunes_is_a_finding_once_it_matters() {
        let mut a = audit_of(1, 0, Some("1 week"));
        a.logical.insert("current/x".into(), (1, 10_000_000));
        a.physical.by_type.insert("sst".into(), (1, 10_000_000));
        a.unpruned
            .insert("ducklake_column", (10, UNPRUNED_FINDING_BYTES / 2));
        assert!(severities(&a).is_empty(), "small growth is no finding");
        a.unpruned
            .insert("ducklake_column", (5_000, UNPRUNED_FINDING_BYTES + 1));
        assert!(
            severities(&a).is_empty(),
            "a small share of a large catalog"
        );
        a.unpruned
            .insert("ducklake_schema_versions", (2_000, 1_000_000));
        let found = findings(&a);
        assert_eq!(severities(&a), [Severity::Unpruned]);
        assert!(
            found[0].message.contains("ducklake_column: 5000 records"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn reclaimable_bytes_and_a_cleanup_backlog_are_findings() {
        let mut a = audit_of(1, 0, Some("1 week"));
        a.logical.insert("current/x".into(), (1, 1_000));
        a.physical
            .by_type
            .insert("sst".into(), (9, 4 * 1_000 + FIXED_OVERHEAD_BYTES + 1));
        assert_eq!(severities(&a), [Severity::Reclaimable]);
        a.physical.by_type.insert("sst".into(), (9, 2_000));
        a.schedule_backlog = 3;
        a.oldest_schedule_age_seconds = Some(3 * 86_400);
        assert_eq!(
            severities(&a),
            [Severity::Backlog],
            "past the default two-day horizon"
        );
        a.delete_older_than = Some("1 week".into());
        assert!(severities(&a).is_empty());
    }

    #[test]
    fn intervals_parse_like_ducklake_options() {
        assert_eq!(interval_seconds("2 days"), Some(172_800));
        assert_eq!(interval_seconds("1 week"), Some(604_800));
        assert_eq!(interval_seconds("1 hour 30 minutes"), Some(5_400));
        assert_eq!(interval_seconds("soon"), None);
    }
}
