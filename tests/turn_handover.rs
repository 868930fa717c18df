//! Two writers of one store in one process take turns: each commit lands
//! once, and a handover's cost is measured.

mod common;

use common::*;
use moraine::catalog::Kind;
use moraine::staged::StagedTransaction;
use moraine::store::{Store, StoreSettings, StoreUri};
use std::sync::Arc;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_take_turns_and_every_commit_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
    let a = Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
    bootstrap(&a).await;
    let b = Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
    let mut next = 1;
    let started = Instant::now();
    for round in 0..10 {
        for store in [&a, &b] {
            let mut tx = StagedTransaction::new(store.clone());
            let head = tx.premise().await.unwrap().unwrap().snapshot_id;
            assert_eq!(head, next - 1, "round {round}: a writer saw a stale head");
            tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(next, 1, 1, 0)])
                .await
                .unwrap();
            tx.stage_insert(
                fixed(Kind::SnapshotChanges),
                vec![changes_row(next, "created_table:x")],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            next += 1;
        }
    }
    let turns = |s: &Store| s.turn_counters().unwrap().snapshot();
    let handed_over = |s: &Store| {
        turns(s)
            .iter()
            .find(|(n, _)| *n == "turns_handed_over")
            .unwrap()
            .1
    };
    // Every commit but the first needed the turn back from the other writer.
    assert!(
        handed_over(&a) >= 9 && handed_over(&b) >= 9,
        "{:?} {:?}",
        turns(&a),
        turns(&b)
    );
    println!(
        "20 commits alternating between two writers of one store: {:?}",
        started.elapsed()
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_eq!(
        moraine::catalog::dump_head(&Arc::new(
            Store::open(&uri, &StoreSettings::default()).await.unwrap()
        ))
        .await
        .unwrap()
        .head
        .snapshot_id,
        20
    );
}
