//! A detach merges the tree it leaves into one sorted run. The close-merge
//! counters are the process's, so this test has its binary to itself.

mod common;

use common::*;
use moraine::store::{Store, StoreSettings, StoreUri};
use std::sync::Arc;

/// A detach merges the tree it leaves into one run once it holds three L0s
/// or runs. The background compactor may already have scheduled some of
/// those L0s into the same run; the merge then plans again instead of
/// waiting out its deadline on a job SlateDB failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_detach_that_merges_finishes_its_merge() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
    let merges = || {
        let counts = moraine::store::upkeep::close_merge_counts();
        (
            counter(&counts, "close_merges"),
            counter(&counts, "close_merges_unfinished"),
        )
    };
    let before = merges();
    let mut next = 1;
    for session in 0..9 {
        let store = Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
        if session == 0 {
            bootstrap(&store).await;
        }
        for _ in 0..5 {
            commit_next(&store, next).await;
            next += 1;
        }
        store.close().await.unwrap();
    }
    let after = merges();
    let (merged, unfinished) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(
        unfinished, 0,
        "{unfinished} detaches left their merge unfinished"
    );
    // Each detach adds an L0, so every other one of nine has three sources
    // to merge, unless the background compactor got there first.
    println!("{merged} of 9 detaches merged");
    assert!(merged >= 2, "{merged} detaches merged");
    let reopened = Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
    let dump = moraine::catalog::dump_head(&reopened).await.unwrap();
    assert_eq!(dump.head.snapshot_id, next - 1);
}
