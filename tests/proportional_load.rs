//! Loading the catalog at head costs what the live catalog holds, not what
//! history holds: 1,000 commits of churn over a fixed live set leave the head
//! load reading the same number of keys.

mod common;

use common::*;
use moraine::catalog::{self, Kind};
use moraine::staged::{CommitOutcome, StagedTransaction};

/// One DuckLake-shaped rename: end the live table row, insert the new one.
async fn rename(
    store: &std::sync::Arc<moraine::store::Store>,
    snapshot: i64,
    table_id: i64,
    name: &str,
) {
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::Table)).await.unwrap();
    let at = rows
        .iter()
        .position(|r| r[0] == int(table_id) && r[3].is_null())
        .unwrap() as i64;
    tx.stage_insert(
        fixed(Kind::Snapshot),
        vec![snapshot_row(snapshot, snapshot, 100, 0)],
    )
    .await
    .unwrap();
    tx.stage_update(
        fixed(Kind::Table),
        &[base + at],
        &[3],
        vec![vec![int(snapshot)]],
    )
    .await
    .unwrap();
    tx.stage_insert(
        fixed(Kind::Table),
        vec![table_row(table_id, snapshot, name)],
    )
    .await
    .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(snapshot, &format!("altered_table:{table_id}"))],
    )
    .await
    .unwrap();
    assert_eq!(
        tx.commit().await.unwrap(),
        CommitOutcome::Snapshot(snapshot)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_load_reads_the_same_keys_after_churn() {
    let store = memory_store("proportional").await;
    bootstrap(&store).await;
    for t in 0..4 {
        create_table(&store, t + 1, 10 * (t + 1), &format!("t{t}")).await;
    }
    let before_reads = store.keys_read();
    let before = catalog::dump_head(&store).await.unwrap();
    let cost_before = store.keys_read() - before_reads;

    let mut snapshot = 5;
    for round in 0..250 {
        for t in 0..4 {
            rename(&store, snapshot, 10 * (t + 1), &format!("t{t}_{round}")).await;
            snapshot += 1;
        }
    }
    let after_reads = store.keys_read();
    let after = catalog::dump_head(&store).await.unwrap();
    let cost_after = store.keys_read() - after_reads;

    assert_eq!(after.head.snapshot_id, 1004);
    assert_eq!(
        after.tables[&Kind::Table].len(),
        before.tables[&Kind::Table].len()
    );
    println!("head load: {cost_before} keys before 1,000 commits of churn, {cost_after} after");
    assert_eq!(
        cost_before, cost_after,
        "the head load must not grow with history"
    );
    // History holds every ended version, and time travel still reaches them.
    let early = catalog::dump_at(&store, 5).await.unwrap();
    assert_eq!(early.tables[&Kind::Table].len(), 4);
}
