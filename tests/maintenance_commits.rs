//! RFC 0007's translation obligations for commits that mint no snapshot:
//! which row operations may land as head-preserving maintenance, and which
//! are refused. Every refusal is checked to leave the store byte for byte
//! as it was.

mod common;

use common::*;
use moraine::catalog::{self, DeletedRowCounts, Kind, Row};
use moraine::staged::translate::ROW_ID_FIELD_ID;
use moraine::staged::{CommitOutcome, StagedTransaction};
use moraine::store::keys;
use moraine::Error;

/// A `ducklake_file_column_stats` row for `column_id` of `data_file_id` in table 1.
fn file_stats(data_file_id: i64, column_id: i64) -> Row {
    vec![
        int(data_file_id),
        int(1),
        int(column_id),
        NULL,
        int(10),
        int(0),
        text("0"),
        text("9"),
        NULL,
        NULL,
    ]
}

/// Commits one statistics insert with no snapshot row.
async fn insert_stats_without_a_snapshot(
    store: &std::sync::Arc<moraine::store::Store>,
    row: Row,
) -> Result<CommitOutcome, Error> {
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(fixed(Kind::FileColumnStats), vec![row])
        .await
        .unwrap();
    tx.commit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_id_statistics_for_an_active_file_land_without_a_snapshot() {
    let store = memory_store("row-id-active").await;
    history(&store).await; // file 11 is live from snapshot 3
    let before = catalog::dump_head(&store).await.unwrap();
    let row = file_stats(11, ROW_ID_FIELD_ID);
    let outcome = insert_stats_without_a_snapshot(&store, row.clone())
        .await
        .unwrap();
    let CommitOutcome::HeadPreserving(head) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(head.snapshot_id, before.head.snapshot_id);
    assert_eq!(head.batch_count, before.head.batch_count + 1);
    let after = catalog::dump_head(&store).await.unwrap();
    assert_eq!(after.tables[&Kind::FileColumnStats], vec![row]);
    assert_eq!(
        after.tables[&Kind::Snapshot],
        before.tables[&Kind::Snapshot],
        "no snapshot record was minted"
    );
}

/// Commits one statistics insert with no snapshot over `history`, and
/// checks it is refused with a terminal constraint error saying `why`, and
/// that nothing of it landed.
async fn assert_refused_without_a_snapshot(name: &str, row: Row, why: &str) {
    let store = memory_store(name).await;
    history(&store).await;
    let before = store_contents(&store).await;
    let err = insert_stats_without_a_snapshot(&store, row)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(err.to_string().contains(why), "{err}");
    assert!(!carries_retry_words(&err), "{}", err.message());
    assert_eq!(store_contents(&store).await, before, "nothing landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_id_statistics_for_an_ended_file_are_refused() {
    // File 10 ended at snapshot 3.
    let row = file_stats(10, ROW_ID_FIELD_ID);
    assert_refused_without_a_snapshot("row-id-ended", row, "active data file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_id_statistics_for_an_unknown_file_are_refused() {
    let row = file_stats(99, ROW_ID_FIELD_ID);
    assert_refused_without_a_snapshot("row-id-unknown", row, "active data file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_id_statistics_for_a_file_the_same_commit_deletes_are_refused() {
    let store = memory_store("row-id-deleted").await;
    history(&store).await;
    let before = store_contents(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    delete_where(&mut tx, Kind::DataFile, |r| r[0] == int(11)).await;
    tx.stage_insert(
        fixed(Kind::FileColumnStats),
        vec![file_stats(11, ROW_ID_FIELD_ID)],
    )
    .await
    .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert_eq!(store_contents(&store).await, before, "nothing landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_file_statistics_without_a_snapshot_are_refused() {
    // Column 2 of the live file 11: an ordinary statistic, not the row-id field.
    let row = file_stats(11, 2);
    let why = "inserts no ducklake_snapshot row";
    assert_refused_without_a_snapshot("ordinary-stats", row, why).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_file_statistics_with_a_snapshot_land() {
    let store = memory_store("ordinary-stats-snapshot").await;
    history(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(5, 1, 3, 13)).await;
    stage(&mut tx, Kind::FileColumnStats, file_stats(11, 2)).await;
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(5, "inserted_into_table:1"),
    )
    .await;
    assert_eq!(tx.commit().await.unwrap(), CommitOutcome::Snapshot(5));
}

/// DuckLake's expiry deletes `ducklake_snapshot` rows and then the same ids
/// from `ducklake_snapshot_changes`. The two are one record in moraine, so
/// the second delete is a validated no-op: the store after both deletes is
/// exactly the store after the snapshot delete alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_changes_delete_with_its_snapshot_is_a_no_op() {
    let with_changes = memory_store("changes-delete").await;
    let snapshot_only = memory_store("changes-delete-twin").await;
    for store in [&with_changes, &snapshot_only] {
        history(store).await;
    }

    let mut tx = StagedTransaction::new(with_changes.clone());
    // DuckLake's DELETE on the changes table bound its rows before the
    // snapshot delete hid them; stage it after the snapshot delete, in
    // DuckLake's statement order.
    let (base, changes) = tx.scan(fixed(Kind::SnapshotChanges)).await.unwrap();
    let at = changes.iter().position(|r| r[0] == int(1)).unwrap() as i64;
    assert_eq!(
        delete_where(&mut tx, Kind::Snapshot, |r| r[0] == int(1)).await,
        1
    );
    tx.stage_delete(fixed(Kind::SnapshotChanges), &[base + at])
        .await
        .unwrap();
    let outcome = tx.commit().await.unwrap();
    assert!(
        matches!(outcome, CommitOutcome::HeadPreserving(_)),
        "{outcome:?}"
    );

    let mut twin = StagedTransaction::new(snapshot_only.clone());
    delete_where(&mut twin, Kind::Snapshot, |r| r[0] == int(1)).await;
    twin.commit().await.unwrap();

    // The same records; the heads differ only in the deleted rows they
    // count for the planner: DuckDB's own changes table would count one.
    let without_head = |contents: Vec<(Vec<u8>, Vec<u8>)>| -> Vec<(Vec<u8>, Vec<u8>)> {
        contents
            .into_iter()
            .filter(|(key, _)| key.as_slice() != keys::SYS_HEAD)
            .collect()
    };
    assert_eq!(
        without_head(store_contents(&with_changes).await),
        without_head(store_contents(&snapshot_only).await)
    );
    let head_of = |contents: Vec<(Vec<u8>, Vec<u8>)>| {
        let (_, value) = contents
            .into_iter()
            .find(|(key, _)| key.as_slice() == keys::SYS_HEAD)
            .unwrap();
        let counts = DeletedRowCounts::of_head(&value).unwrap();
        (catalog::Head::decode(&value).unwrap(), counts)
    };
    let (head, counts) = head_of(store_contents(&with_changes).await);
    let (twin_head, twin_counts) = head_of(store_contents(&snapshot_only).await);
    assert_eq!(head, twin_head);
    assert_eq!(counts.get(fixed(Kind::SnapshotChanges)), 1);
    assert_eq!(twin_counts.get(fixed(Kind::SnapshotChanges)), 0);
    assert_eq!(counts.get(fixed(Kind::Snapshot)), 1);
    let mut check = StagedTransaction::new(with_changes.clone());
    let changes = check
        .visible_rows(fixed(Kind::SnapshotChanges))
        .await
        .unwrap();
    assert!(!changes.iter().any(|r| r[0] == int(1)), "{changes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_changes_delete_without_its_snapshot_is_refused() {
    let store = memory_store("changes-alone").await;
    history(&store).await;
    let before = store_contents(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    assert_eq!(
        delete_where(&mut tx, Kind::SnapshotChanges, |r| r[0] == int(1)).await,
        1
    );
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(
        err.to_string().contains("together with their snapshot"),
        "{err}"
    );
    assert_eq!(store_contents(&store).await, before, "nothing landed");
}
