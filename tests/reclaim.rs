//! Deleted keys give their bytes back: compaction drops tombstones into the
//! last run and garbage collection deletes what no manifest references.

mod common;

use common::*;
use moraine::catalog::{Cell, ColumnDesc, Kind, Transfer};
use moraine::reclaim::{self, audit};
use moraine::staged::StagedTransaction;
use moraine::store::{Store, StoreSettings, StoreUri};
use std::sync::Arc;
use std::time::Duration;

/// A local-filesystem store with the given attach options, after 60 commits
/// of 20 KB of inlined rows each and the DROP of their table: 1.2 MB of
/// which a few KB stay live.
async fn dropped_inline_data(dir: &std::path::Path, options: &[(&str, &str)]) -> Arc<Store> {
    let mut settings = StoreSettings::default();
    for (k, v) in options {
        settings.apply_option(k, v).unwrap();
    }
    let uri = StoreUri::parse(dir.to_str().unwrap()).unwrap();
    let store = Arc::new(Store::open(&uri, &settings).await.unwrap());
    bootstrap(&store).await;
    let table = "ducklake_inlined_data_1_1";
    let mut columns = moraine::inline::data_columns(&[]);
    columns.push(ColumnDesc {
        name: "payload".into(),
        type_name: "BLOB".into(),
        transfer: Transfer::Value,
    });
    for snapshot in 1..=60 {
        let rows = (0..10)
            .map(|i| {
                vec![
                    int(snapshot * 10 + i),
                    int(snapshot),
                    NULL,
                    Cell::Blob(vec![7; 2000]),
                ]
            })
            .collect();
        let create = (snapshot == 1).then(|| columns.clone());
        commit_inline_rows(&store, table, create, snapshot, rows).await;
    }
    let mut tx = StagedTransaction::new(store.clone());
    tx.drop_table(table, false).await.unwrap();
    tx.commit().await.unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_inline_data_is_reclaimed_on_the_local_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let store = dropped_inline_data(
        dir.path(),
        &[
            ("gc_min_age_seconds", "1"),
            ("compaction_checkpoint_seconds", "1"),
            ("compactor_poll_ms", "100"),
        ],
    )
    .await;

    let report = reclaim::reclaim(&store, Duration::from_secs(60), &Default::default())
        .await
        .unwrap();
    let audit = audit::audit(&store).await.unwrap();
    println!(
        "physical by type after reclaim: {:?}",
        audit.physical.by_type
    );
    println!(
        "physical bytes {} -> {} ({} objects deleted in {:?}); live logical bytes {}",
        report.bytes_before,
        report.bytes_after,
        report.objects_deleted,
        report.elapsed,
        audit.live_bytes()
    );
    assert!(report.bytes_after * 2 < report.bytes_before, "{report:?}");
    assert!(
        report.bytes_after <= 2 * audit.live_bytes() + audit::FIXED_OVERHEAD_BYTES,
        "{report:?} {audit:?}"
    );
    assert!(
        audit
            .findings
            .iter()
            .all(|f| f.severity != audit::Severity::Reclaimable),
        "{:?}",
        audit.findings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_flags_unbounded_history_until_expiry_is_configured() {
    let store = memory_store("audit").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    let report = audit::audit(&store).await.unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == audit::Severity::Unbounded),
        "{:?}",
        report.findings
    );
    // The test's snapshots are dated 2023: a one-week horizon that nothing
    // enforces is still unbounded growth, with its own message.
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(
        fixed(Kind::Metadata),
        vec![vec![text("expire_older_than"), text("1 week"), NULL, NULL]],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let report = audit::audit(&store).await.unwrap();
    assert_eq!(report.expire_older_than.as_deref(), Some("1 week"));
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == audit::Severity::Unbounded
                && f.message.contains("configured and not running")),
        "{:?}",
        report.findings
    );
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Metadata)).await.unwrap();
    let at = rows
        .iter()
        .position(|r| r[0] == text("expire_older_than"))
        .unwrap();
    tx.stage_update(
        fixed(Kind::Metadata),
        &[base + at as i64],
        &[1],
        vec![vec![text("10 years")]],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let report = audit::audit(&store).await.unwrap();
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.severity != audit::Severity::Unbounded),
        "{:?}",
        report.findings
    );
}

/// The coverage guard on a real store: after history, inline data and its
/// end marks, every key belongs to a declared reclamation path; a key of a
/// family nobody declared is reported as UNDECLARED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stored_key_has_a_declared_reclamation_path() {
    let inline = memory_store("coverage-guard-inline").await;
    inline_history(&inline).await;
    let report = audit::audit(&inline).await.unwrap();
    println!("coverage: {:?}", report.coverage);
    assert!(
        report.coverage.values().all(Option::is_some),
        "{:?}",
        report.findings
    );
    assert!(report.coverage.contains_key("inline/chunk"));
    let store = memory_store("coverage-guard").await;
    history(&store).await;
    let report = audit::audit(&store).await.unwrap();
    println!("coverage: {:?}", report.coverage);
    assert!(
        report.coverage.values().all(Option::is_some),
        "{:?}",
        report.findings
    );
    for label in ["sys/head", "sys/format", "snapshot"] {
        assert!(report.coverage.contains_key(label), "{label} not seen");
    }
    // A record family written without a declaration fails the guard.
    let view = store.snapshot().await.unwrap();
    let txn = store.begin(&view).unwrap();
    txn.put(&[moraine::store::keys::Subspace::Sys as u8, 0x7f], b"new")
        .unwrap();
    store.commit(txn).await.unwrap();
    drop(view);
    let report = audit::audit(&store).await.unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == audit::Severity::Undeclared),
        "{:?}",
        report.findings
    );
}

/// An idle writer tidies itself: after churn and deletes, with no
/// `moraine_reclaim`, the background upkeep flushes, compacts and lets
/// garbage collection bring the store to what reclaim then finds nothing
/// more to take from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_writer_gives_bytes_back_without_reclaim() {
    let dir = tempfile::tempdir().unwrap();
    let store = dropped_inline_data(
        dir.path(),
        &[
            ("gc_min_age_seconds", "1"),
            ("gc_interval_seconds", "1"),
            ("compactor_poll_ms", "200"),
            ("compaction_checkpoint_seconds", "1"),
        ],
    )
    .await;
    let busy = reclaim::physical_usage(&store)
        .await
        .unwrap()
        .history_bytes();
    let started = std::time::Instant::now();
    // Sample until the size has held still for three samples after shrinking.
    let mut idle = busy;
    let mut still = 0;
    while started.elapsed() < Duration::from_secs(30) && still < 3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = reclaim::physical_usage(&store)
            .await
            .unwrap()
            .history_bytes();
        still = if now == idle && now < busy {
            still + 1
        } else {
            0
        };
        idle = now;
    }
    let live = audit::audit(&store).await.unwrap().live_bytes();
    let report = reclaim::reclaim(&store, Duration::from_secs(60), &Default::default())
        .await
        .unwrap();
    println!(
        "idle writer: {busy} bytes after the drop, {idle} after {:?} idle (live {live}); reclaim then: {} -> {}",
        started.elapsed(),
        report.bytes_before,
        report.bytes_after
    );
    assert!(
        idle * 20 < busy,
        "the idle writer kept {idle} of {busy} bytes"
    );
    assert!(
        idle <= report.bytes_after + report.bytes_after / 4 + 4096,
        "idle {idle} bytes, reclaim reaches {}",
        report.bytes_after
    );
}

/// Work that will write soon holds the idle upkeep off (a purge waiting for
/// its attach to go quiet): while held, an idle writer does not tidy; once
/// the hold drops, it tidies as it would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_upkeep_waits_for_the_hold_then_tidies() {
    let dir = tempfile::tempdir().unwrap();
    let options = [
        ("gc_min_age_seconds", "1"),
        ("gc_interval_seconds", "1"),
        ("compactor_poll_ms", "200"),
        ("compaction_checkpoint_seconds", "1"),
    ];
    // Taken with the last commit, as a purge takes it at its expiry's
    // commit; four idle periods then pass with it held.
    let store = dropped_inline_data(dir.path(), &options).await;
    let hold = store.hold_upkeep();
    let busy = reclaim::physical_usage(&store)
        .await
        .unwrap()
        .history_bytes();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = reclaim::physical_usage(&store)
        .await
        .unwrap()
        .history_bytes();
    assert!(
        held >= busy / 2,
        "the upkeep tidied while held: {busy} -> {held} bytes"
    );
    drop(hold);
    let started = std::time::Instant::now();
    let mut idle = held;
    while started.elapsed() < Duration::from_secs(30) && idle * 20 >= busy {
        tokio::time::sleep(Duration::from_millis(500)).await;
        idle = reclaim::physical_usage(&store)
            .await
            .unwrap()
            .history_bytes();
    }
    println!(
        "held upkeep: {busy} bytes busy, {held} after 4 s held, {idle} after the hold dropped"
    );
    assert!(
        idle * 20 < busy,
        "after the hold dropped the writer kept {idle} of {busy} bytes"
    );
}

/// Ends the live version of column `column_id` at `snapshot` and adds its
/// next version: what an ALTER of a live table leaves behind.
async fn alter_column(store: &Arc<Store>, snapshot: i64, column_id: i64, name: &str) {
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Column)).await.unwrap();
    let live = rows
        .iter()
        .position(|r| {
            r[moraine::column!(Column, column_id)] == int(column_id)
                && r[moraine::column!(Column, end_snapshot)].is_null()
        })
        .unwrap();
    stage(
        &mut tx,
        Kind::Snapshot,
        snapshot_row(snapshot, snapshot, 9, 0),
    )
    .await;
    tx.stage_update(
        fixed(Kind::Column),
        &[base + live as i64],
        &[moraine::column!(Column, end_snapshot)],
        vec![vec![int(snapshot)]],
    )
    .await
    .unwrap();
    stage(
        &mut tx,
        Kind::Column,
        column_row(column_id, snapshot, 1, name),
    )
    .await;
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(snapshot, "altered_table:1"),
    )
    .await;
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_ducklake_never_prunes_is_reported_with_its_size() {
    let store = memory_store("unpruned").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    for (snapshot, name) in [(2, "y"), (3, "z"), (4, "w")] {
        alter_column(&store, snapshot, 2, name).await;
    }
    let report = audit::audit(&store).await.unwrap();
    let (records, bytes) = report.unpruned["ducklake_column"];
    assert_eq!(records, 3, "{:?}", report.unpruned);
    assert!(bytes > 0);
    let rows = audit::rows(&report);
    assert!(
        rows.iter()
            .any(|r| r[0] == "unpruned" && r[1] == "ducklake_column" && r[2] == bytes.to_string()),
        "{rows:?}"
    );
    // Three versions are no finding; the size that makes one is pinned by the audit's own tests.
    assert!(!report
        .findings
        .iter()
        .any(|f| f.severity == audit::Severity::Unpruned));
}
