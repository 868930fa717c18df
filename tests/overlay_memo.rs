//! A transaction keeps each table's overlaid rows and applies only the
//! operations staged since: what it shows after every statement must be
//! exactly the committed rows with all of its operations applied at once.

mod common;

use common::*;
use moraine::catalog::{Kind, Row, TableRef};
use moraine::staged::{overlay, StagedTransaction};
use std::sync::Arc;

/// `table` as the whole overlay shows it: the committed rows (read by a
/// transaction with nothing staged) with every operation of `tx` applied.
async fn applied_whole(
    store: &Arc<moraine::store::Store>,
    tx: &StagedTransaction,
    table: TableRef,
) -> Vec<Row> {
    let mut fresh = StagedTransaction::new(store.clone());
    let committed = fresh.visible_rows(table).await.unwrap();
    let parent = match overlay::parent_table(table) {
        Some(parent) => {
            let parents = fresh.visible_rows(parent).await.unwrap();
            Some(overlay::apply(parent, &parents, tx.ops(), None))
        }
        None => None,
    };
    overlay::apply(table, &committed, tx.ops(), parent.as_deref())
}

async fn check(store: &Arc<moraine::store::Store>, tx: &mut StagedTransaction, step: &str) {
    for kind in [Kind::Snapshot, Kind::SnapshotChanges, Kind::Metadata] {
        let table = fixed(kind);
        let shown = tx.visible_rows(table).await.unwrap();
        // Twice: the second scan is served from what the first kept.
        assert_eq!(tx.visible_rows(table).await.unwrap(), shown);
        assert_eq!(
            shown.as_ref(),
            &applied_whole(store, tx, table).await,
            "{} after {step}",
            kind.def().name
        );
    }
}

#[tokio::test]
async fn overlaid_rows_kept_across_statements_match_the_whole_overlay() {
    let store = memory_store("overlay-memo").await;
    bootstrap(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    check(&store, &mut tx, "nothing staged").await;
    for id in 1..4 {
        stage_snapshot(&mut tx, snapshot_row(id, 0, 1, 0), "inserted").await;
        check(&store, &mut tx, &format!("inserting snapshot {id}")).await;
    }
    let (base, snapshots) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    let second = snapshots.iter().position(|r| r[0] == int(2)).unwrap() as i64;
    tx.stage_delete(fixed(Kind::Snapshot), &[base + second])
        .await
        .unwrap();
    check(
        &store,
        &mut tx,
        "deleting snapshot 2, which hides its changes",
    )
    .await;
    let (base, metadata) = tx.scan(fixed(Kind::Metadata)).await.unwrap();
    let version = metadata
        .iter()
        .position(|r| r[0] == text("version"))
        .unwrap() as i64;
    tx.stage_update(
        fixed(Kind::Metadata),
        &[base + version],
        &[1],
        vec![vec![text("2.0")]],
    )
    .await
    .unwrap();
    check(&store, &mut tx, "updating a metadata row in place").await;
    tx.stage_insert(
        fixed(Kind::Metadata),
        vec![vec![text("k"), text("v"), NULL, NULL]],
    )
    .await
    .unwrap();
    let (base, metadata) = tx.scan(fixed(Kind::Metadata)).await.unwrap();
    let first = metadata
        .iter()
        .position(|r| r[0] == text("data_path"))
        .unwrap() as i64;
    tx.stage_delete(fixed(Kind::Metadata), &[base + first])
        .await
        .unwrap();
    check(
        &store,
        &mut tx,
        "an insert, then a delete of a committed row",
    )
    .await;
}

/// Deletes of committed rows a scan emitted apply by position
/// (`StagedOps::push_deletes`); a delete from a scan of the overlay, or any
/// other operation on the table, puts the table back on the general path.
/// Every step must show what applying all operations at once shows.
#[tokio::test]
async fn deletes_by_position_match_the_whole_overlay() {
    let store = memory_store("overlay-positions").await;
    bootstrap(&store).await;
    for next in 1..8 {
        commit_next(&store, next).await;
    }
    let mut tx = StagedTransaction::new(store.clone());
    let row_of = |rows: &moraine::catalog::Rows, id: i64| {
        rows.iter().position(|r| r[0] == int(id)).unwrap() as i64
    };
    let (base, committed) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    tx.stage_delete(
        fixed(Kind::Snapshot),
        &[base + row_of(&committed, 1), base + row_of(&committed, 3)],
    )
    .await
    .unwrap();
    check(&store, &mut tx, "deleting two committed snapshots").await;
    // A second statement scans the overlay, not the committed rows.
    let (base, again) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    assert_eq!(again.len(), committed.len() - 2);
    tx.stage_delete(fixed(Kind::Snapshot), &[base + row_of(&again, 4)])
        .await
        .unwrap();
    check(&store, &mut tx, "a delete from a scan of the overlay").await;
    stage_snapshot(&mut tx, snapshot_row(8, 0, 1, 0), "inserted").await;
    check(&store, &mut tx, "an insert after the deletes").await;
    let (base, last) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    tx.stage_delete(fixed(Kind::Snapshot), &[base + row_of(&last, 2)])
        .await
        .unwrap();
    check(&store, &mut tx, "a delete after the insert").await;
}
