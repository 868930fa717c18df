//! The planner's row estimates count what DuckDB's own table would: rows
//! DuckLake deleted stay counted, across commits, the transactions of one
//! attach and a reopen, until a commit empties the table.

mod common;

use common::*;
use moraine::catalog::Kind;
use moraine::staged::{AttachShared, StagedTransaction};
use std::sync::Arc;

async fn estimate(store: &Arc<moraine::store::Store>, kind: Kind) -> (u64, u64) {
    let mut tx = StagedTransaction::new(store.clone());
    tx.row_counts(fixed(kind)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_rows_stay_counted_until_a_commit_empties_the_table() {
    let store = memory_store("estimates").await;
    history(&store).await;
    let (live, counted) = estimate(&store, Kind::Snapshot).await;
    assert_eq!(live, counted, "nothing was deleted yet");

    expire(&store, &[1, 2]).await;
    assert_eq!(estimate(&store, Kind::Snapshot).await, (live - 2, live));

    // The expiry scheduled one file. A transaction's own deletes stay in
    // its estimate; the commit that empties the schedule forgets them.
    let schedule = Kind::FilesScheduledForDeletion;
    assert_eq!(estimate(&store, schedule).await, (1, 1));
    let mut tx = StagedTransaction::new(store.clone());
    assert_eq!(delete_where(&mut tx, schedule, |_| true).await, 1);
    assert_eq!(tx.row_counts(fixed(schedule)).await.unwrap(), (0, 1));
    tx.commit().await.unwrap();
    assert_eq!(estimate(&store, schedule).await, (0, 0));
    // The snapshots' count rode along in the commits after the expiry.
    assert_eq!(estimate(&store, Kind::Snapshot).await, (live - 2, live));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counts_are_kept_by_the_attach_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path()).await;
    history(&store).await;
    let (live, _) = estimate(&store, Kind::Snapshot).await;
    let shared = Arc::new(AttachShared::default());
    let mut tx = StagedTransaction::sharing(store.clone(), shared.clone());
    let named = |r: &moraine::catalog::Row| [1, 2].contains(&r[0].as_int().unwrap());
    delete_where(&mut tx, Kind::Snapshot, named).await;
    delete_where(&mut tx, Kind::SnapshotChanges, named).await;
    tx.commit().await.unwrap();

    // The next transaction of the attach takes the counts its commit left.
    let mut next = StagedTransaction::sharing(store.clone(), shared);
    assert_eq!(
        next.row_counts(fixed(Kind::Snapshot)).await.unwrap(),
        (live - 2, live)
    );
    drop(next);
    store.close().await.unwrap();
    drop(store);

    let reopened = local_store(dir.path()).await;
    assert_eq!(estimate(&reopened, Kind::Snapshot).await, (live - 2, live));
    reopened.close().await.unwrap();
}
