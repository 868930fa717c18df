//! The retention audit: live logical bytes against physical bytes, history
//! and schedule backlogs, and the retention options DuckLake has set.
//! Read-only: safe on a live store.

use super::{physical_usage, PhysicalUsage};
use crate::catalog::{self, Cell, Kind};
use crate::error::Result;
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
    Unbounded,
    Reclaimable,
    Backlog,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Unbounded => "UNBOUNDED",
            Severity::Reclaimable => "RECLAIMABLE",
            Severity::Backlog => "BACKLOG",
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
    pub physical: PhysicalUsage,
    pub snapshot_count: u64,
    pub oldest_snapshot_id: Option<i64>,
    pub oldest_snapshot_age_seconds: Option<i64>,
    pub history_versions: u64,
    pub schedule_backlog: u64,
    pub oldest_schedule_age_seconds: Option<i64>,
    pub expire_older_than: Option<String>,
    pub delete_older_than: Option<String>,
    pub findings: Vec<Finding>,
}

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
    let view = store.snapshot()?;
    let mut report = Audit {
        physical: physical_usage(store).await?,
        ..Audit::default()
    };
    let now = now_micros();
    for subspace in Subspace::ALL {
        for (key, value) in store
            .scan_prefix(&view, &keys::prefix(subspace, None))
            .await?
        {
            let entry = report
                .logical
                .entry(crate::verify::key_label(&key))
                .or_default();
            entry.0 += 1;
            entry.1 += (key.len() + value.len()) as u64;
            match subspace {
                Subspace::History => report.history_versions += 1,
                Subspace::Snapshot => {
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

fn findings(a: &Audit) -> Vec<Finding> {
    let mut out = Vec::new();
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
