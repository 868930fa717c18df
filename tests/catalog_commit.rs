//! The catalog store on real SlateDB: DuckLake-shaped commits land as one
//! batch, versions move from current to history, time travel, races, reopen.

mod common;

use common::*;
use moraine::catalog::{self, Cell, Kind, TableRef};
use moraine::staged::{CommitOutcome, StagedTransaction};
use moraine::Error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_makes_snapshot_zero_and_the_tables() {
    let store = memory_store("bootstrap").await;
    bootstrap(&store).await;
    let dump = catalog::dump_head(&store).await.unwrap();
    assert_eq!(dump.head.snapshot_id, 0);
    assert_eq!(dump.tables[&Kind::Snapshot].len(), 1);
    assert_eq!(dump.tables[&Kind::SnapshotChanges].len(), 1);
    assert_eq!(dump.tables[&Kind::Metadata].len(), 2);
    let mut tx = StagedTransaction::new(store.clone());
    assert!(tx.lookup("ducklake_data_file").await.unwrap().is_some());
    assert!(tx
        .lookup("ducklake_inlined_data_1_1")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_version_moves_it_to_history_and_time_travel_sees_it() {
    let store = memory_store("history").await;
    bootstrap(&store).await;
    assert_eq!(
        create_table(&store, 1, 1, "t").await,
        CommitOutcome::Snapshot(1)
    );
    // Snapshot 2 renames: DuckLake ends the table row and inserts a new one.
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Table)).await.unwrap();
    assert_eq!(rows.len(), 1);
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(2, 2, 3, 0)])
        .await
        .unwrap();
    tx.stage_update(fixed(Kind::Table), &[base], &[3], vec![vec![int(2)]])
        .await
        .unwrap();
    tx.stage_insert(fixed(Kind::Table), vec![table_row(1, 2, "t2")])
        .await
        .unwrap();
    // Read-your-writes: the transaction sees both versions.
    assert_eq!(tx.visible_rows(fixed(Kind::Table)).await.unwrap().len(), 2);
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(2, "altered_table:1")],
    )
    .await
    .unwrap();
    assert_eq!(tx.commit().await.unwrap(), CommitOutcome::Snapshot(2));

    let head = catalog::dump_head(&store).await.unwrap();
    assert_eq!(head.tables[&Kind::Table], vec![table_row(1, 2, "t2")]);
    let at1 = catalog::dump_at(&store, 1).await.unwrap();
    let mut ended = table_row(1, 1, "t");
    ended[3] = int(2);
    assert_eq!(at1.tables[&Kind::Table], vec![ended]);
    let err = catalog::dump_at(&store, 9).await.unwrap_err();
    assert!(err.to_string().contains("snapshot 9"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_commits_one_lands_the_other_gets_conflict() {
    let store = memory_store("race").await;
    bootstrap(&store).await;
    let mut a = StagedTransaction::new(store.clone());
    let mut b = StagedTransaction::new(store.clone());
    a.premise().await.unwrap();
    b.premise().await.unwrap();
    for (tx, id) in [(&mut a, 1), (&mut b, 1)] {
        stage_snapshot(tx, snapshot_row(id, 1, 3, 0), "created_table:x").await;
    }
    assert_eq!(a.commit().await.unwrap(), CommitOutcome::Snapshot(1));
    let err = b.commit().await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(err.message().contains("conflict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_discards_and_reopen_sees_exactly_what_committed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = local_store(dir.path()).await;
        bootstrap(&store).await;
        create_table(&store, 1, 1, "kept").await;
        let mut dropped = StagedTransaction::new(store.clone());
        dropped
            .stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(2, 2, 3, 0)])
            .await
            .unwrap();
        drop(dropped); // ROLLBACK: nothing reaches the store.
        store.close().await.unwrap();
    }
    let store = local_store(dir.path()).await;
    let dump = catalog::dump_head(&store).await.unwrap();
    assert_eq!(dump.head.snapshot_id, 1);
    assert_eq!(dump.tables[&Kind::Table], vec![table_row(1, 1, "kept")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_commits_preserve_head() {
    let store = memory_store("maintenance").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    create_table(&store, 2, 3, "u").await;
    let before = catalog::dump_head(&store).await.unwrap();
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    let at = rows.iter().position(|r| r[0] == int(1)).unwrap() as i64;
    tx.stage_delete(fixed(Kind::Snapshot), &[base + at])
        .await
        .unwrap();
    // Read-your-writes: the staged delete hides the snapshot inside the
    // transaction, a fresh reader still sees it.
    assert_eq!(
        tx.visible_rows(fixed(Kind::Snapshot)).await.unwrap().len(),
        2
    );
    assert_eq!(
        tx.visible_rows(fixed(Kind::SnapshotChanges))
            .await
            .unwrap()
            .len(),
        2
    );
    let mut outside = StagedTransaction::new(store.clone());
    assert_eq!(
        outside
            .visible_rows(fixed(Kind::Snapshot))
            .await
            .unwrap()
            .len(),
        3
    );
    let outcome = tx.commit().await.unwrap();
    let CommitOutcome::HeadPreserving(head) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(head.snapshot_id, before.head.snapshot_id);
    assert_eq!(head.batch_count, before.head.batch_count + 1);
    assert!(catalog::dump_at(&store, 1).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_head_snapshot_is_refused() {
    let store = memory_store("head").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    let at = rows.iter().position(|r| r[0] == int(1)).unwrap() as i64;
    tx.stage_delete(fixed(Kind::Snapshot), &[base + at])
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(err.to_string().contains("head snapshot"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_changes_without_a_snapshot_are_refused() {
    let store = memory_store("mixed").await;
    bootstrap(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(fixed(Kind::Table), vec![table_row(5, 0, "sneaky")])
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_after_a_crash_replays_exactly_the_acknowledged_commits() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = local_store(dir.path()).await;
        bootstrap(&store).await;
        create_table(&store, 1, 1, "acknowledged").await;
        // A crash: the handle is dropped without close, so nothing is flushed
        // beyond what each acknowledged commit already made durable.
        drop(store);
    }
    let store = local_store(dir.path()).await;
    let dump = catalog::dump_head(&store).await.unwrap();
    assert_eq!(dump.head.snapshot_id, 1);
    assert_eq!(
        dump.tables[&Kind::Table],
        vec![table_row(1, 1, "acknowledged")]
    );
}

/// A commit's snapshot is the only one above the head, so minting it reads
/// nothing; an id the store holds is still found and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_id_the_store_holds_is_refused() {
    let store = memory_store("reminted").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    let before = store_contents(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    stage_snapshot(&mut tx, snapshot_row(1, 1, 3, 0), "created_table:again").await;
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(
        err.to_string().contains("snapshot 1 already exists"),
        "{err}"
    );
    assert_eq!(store_contents(&store).await, before);
}

/// Inlined rows of the commit's own snapshot start a fresh chunk without a
/// scan; rows added to an older snapshot's chunks join them; rows that
/// begin after the commit's snapshot are refused, since nothing stored may
/// name a snapshot above the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inlined_rows_begin_no_later_than_their_commit() {
    let store = memory_store("inline-begin").await;
    inline_history(&store).await;
    let before = store_contents(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    stage_snapshot(&mut tx, snapshot_row(3, 1, 2, 0), "inlined_insert:1").await;
    tx.stage_insert(TableRef::parse(INLINED).unwrap(), vec![inline_row(8, 4)])
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(
        err.to_string()
            .contains("begin at snapshot 4, after this commit's snapshot 3"),
        "{err}"
    );
    assert_eq!(store_contents(&store).await, before);

    let late = vec![inline_row(8, 2), inline_row(9, 3)];
    commit_inline_rows(&store, INLINED, None, 3, late).await;
    let mut tx = StagedTransaction::new(store.clone());
    let rows = tx
        .visible_rows(TableRef::parse(INLINED).unwrap())
        .await
        .unwrap();
    let mut ids: Vec<(Cell, Cell)> = (0..rows.len())
        .filter_map(|at| rows.row(at))
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    ids.sort_by_key(|(id, _)| id.as_int());
    let expected: Vec<(Cell, Cell)> = (0..6)
        .map(|r| (int(r), int(1)))
        .chain([
            (int(6), int(2)),
            (int(7), int(2)),
            (int(8), int(2)),
            (int(9), int(3)),
        ])
        .collect();
    assert_eq!(ids, expected);
}
