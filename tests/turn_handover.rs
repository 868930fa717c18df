//! Two writers of one store in one process take turns at the writer lease:
//! each sees the other's commits, every commit lands once, and what a
//! handover costs in object-store requests and time is measured against the
//! same commits made by one writer.

mod common;

use common::*;
use moraine::store::{Store, StoreSettings, StoreUri};
use std::sync::Arc;
use std::time::{Duration, Instant};

const COMMITS: i64 = 20;

fn requests(store: &Store) -> u64 {
    store.requests().snapshot().iter().map(|(_, v)| v).sum()
}

/// Opens `writers` writers of one fresh store and makes `COMMITS` commits,
/// rotating between them: the elapsed time and the requests all made.
async fn rotate(writers: usize) -> (Duration, u64, Vec<Arc<Store>>, StoreUri, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let uri = StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
    let mut stores = Vec::new();
    for _ in 0..writers {
        stores.push(Arc::new(
            Store::open(&uri, &StoreSettings::default()).await.unwrap(),
        ));
    }
    bootstrap(&stores[0]).await;
    let before: u64 = stores.iter().map(|s| requests(s)).sum();
    let started = Instant::now();
    for next in 1..=COMMITS {
        commit_next(&stores[next as usize % writers], next).await;
    }
    let elapsed = started.elapsed();
    let after: u64 = stores.iter().map(|s| requests(s)).sum();
    (elapsed, after - before, stores, uri, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_take_turns_and_every_commit_lands_once() {
    let (alone, alone_requests, _one, _, _d1) = rotate(1).await;
    let (taking_turns, turn_requests, stores, uri, _d2) = rotate(2).await;
    let turns = |s: &Store| s.turn_counters().unwrap().snapshot();
    let handovers: u64 = stores
        .iter()
        .map(|s| counter(&turns(s), "turns_handed_over"))
        .sum();
    // Every commit but the first needed the turn back from the other writer.
    assert!(handovers >= (COMMITS - 1) as u64, "{handovers} handovers");
    println!(
        "{COMMITS} commits by one writer: {alone:?}, {alone_requests} requests; alternating between two \
         writers: {taking_turns:?}, {turn_requests} requests, {handovers} handovers: {:.1} requests and {:?} \
         per handover",
        (turn_requests.saturating_sub(alone_requests)) as f64 / handovers as f64,
        taking_turns.saturating_sub(alone) / handovers as u32
    );
    for store in &stores {
        println!("{:?}", store.requests().snapshot());
        store.close().await.unwrap();
    }
    let reopened = Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
    let dump = moraine::catalog::dump_head(&reopened).await.unwrap();
    assert_eq!(dump.head.snapshot_id, COMMITS);
}
