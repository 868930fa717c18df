//! RFC 0007's rules for rows embedded in a parent record (partition values in
//! a data file, name mappings in a column mapping, macro bodies in a macro,
//! ...): they are written with their parent and deleted with it. A delete of
//! an embedded row is a validated no-op once its parent is gone; an embedded
//! row cannot join a parent this commit did not insert, and cannot be deleted
//! from a parent that stays live.

mod common;

use common::*;
use moraine::catalog::{Kind, Row};
use moraine::staged::StagedTransaction;
use moraine::Error;

fn partition_value(file: i64, table: i64) -> Row {
    vec![int(file), int(table), int(0), text("p")]
}

async fn lake_with_a_partitioned_file() -> std::sync::Arc<moraine::store::Store> {
    let store = memory_store("embedded").await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(2, 1, 3, 11)).await;
    stage(&mut tx, Kind::DataFile, data_file_row(10, 1, 2)).await;
    stage(&mut tx, Kind::FilePartitionValue, partition_value(10, 1)).await;
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(2, "inserted_into_table:1"),
    )
    .await;
    tx.commit().await.unwrap();
    store
}

#[tokio::test]
async fn an_embedded_row_cannot_join_a_parent_this_commit_did_not_insert() {
    let store = lake_with_a_partitioned_file().await;
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(3, 1, 3, 11)).await;
    tx.stage_insert(
        fixed(Kind::FilePartitionValue),
        vec![partition_value(10, 1)],
    )
    .await
    .unwrap();
    stage(&mut tx, Kind::SnapshotChanges, changes_row(3, "x")).await;
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(err.to_string().contains("does not insert"), "{err}");
    let mut check = StagedTransaction::new(store.clone());
    let values = check
        .visible_rows(fixed(Kind::FilePartitionValue))
        .await
        .unwrap();
    assert_eq!(values.len(), 1, "nothing of the refused commit landed");
}

#[tokio::test]
async fn an_embedded_delete_from_a_parent_that_stays_live_is_refused() {
    let store = lake_with_a_partitioned_file().await;
    let mut tx = StagedTransaction::new(store.clone());
    delete_where(&mut tx, Kind::FilePartitionValue, |_| true).await;
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::Constraint(_)), "{err}");
    assert!(err.to_string().contains("deleted together"), "{err}");
    let mut check = StagedTransaction::new(store.clone());
    assert_eq!(
        check
            .visible_rows(fixed(Kind::FilePartitionValue))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn an_embedded_delete_rides_its_parents_delete_in_either_order() {
    for child_first in [true, false] {
        let store = lake_with_a_partitioned_file().await;
        let mut tx = StagedTransaction::new(store.clone());
        if child_first {
            delete_where(&mut tx, Kind::FilePartitionValue, |_| true).await;
            delete_where(&mut tx, Kind::DataFile, |_| true).await;
        } else {
            // The scan of partition values happens first, as DuckLake's cascade
            // reads before it deletes; the delete then finds no parent: a no-op.
            let (base, rows) = tx.scan(fixed(Kind::FilePartitionValue)).await.unwrap();
            assert_eq!(rows.len(), 1);
            delete_where(&mut tx, Kind::DataFile, |_| true).await;
            tx.stage_delete(fixed(Kind::FilePartitionValue), &[base])
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
        let mut check = StagedTransaction::new(store.clone());
        assert!(check
            .visible_rows(fixed(Kind::FilePartitionValue))
            .await
            .unwrap()
            .is_empty());
        assert!(check
            .visible_rows(fixed(Kind::DataFile))
            .await
            .unwrap()
            .is_empty());
    }
}
