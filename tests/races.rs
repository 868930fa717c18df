//! Commits racing from one head: a head-preserving maintenance commit
//! against an ordinary one, in both orders, caught by each of the two checks
//! that stand between them: the premise (the head re-read through the store
//! transaction) and the store transaction's write-write conflict detection
//! (both commits rewrite `sys/head`). The loser gets the wording DuckLake
//! retries on, and the store afterwards holds exactly what the winner alone
//! left: nothing of the loser lands.

mod common;

use common::*;
use moraine::catalog::Kind;
use moraine::staged::translate::PreparedCommit;
use moraine::staged::{CommitOutcome, StagedTransaction};
use moraine::store::Store;
use moraine::Error;
use std::sync::Arc;

/// Expiry's first step: delete snapshot 1 (not the head). Lands without a snapshot.
async fn staged_maintenance(store: &Arc<Store>) -> StagedTransaction {
    let mut tx = StagedTransaction::new(store.clone());
    assert_eq!(
        delete_where(&mut tx, Kind::Snapshot, |r| r[0] == int(1)).await,
        1
    );
    tx
}

/// An ordinary DuckLake commit: snapshot 5 adds a data file to table 1.
async fn staged_ordinary(store: &Arc<Store>) -> StagedTransaction {
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(5, 1, 3, 14)).await;
    stage(&mut tx, Kind::DataFile, data_file_row(13, 1, 5)).await;
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(5, "inserted_into_table:1"),
    )
    .await;
    tx
}

async fn prepare(tx: &mut StagedTransaction) -> Result<PreparedCommit, Error> {
    tx.prepare().await
}

fn assert_lost_a_race(err: &Error) {
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert!(carries_retry_words(err), "{}", err.message());
}

#[derive(Clone, Copy, PartialEq)]
enum Winner {
    Maintenance,
    Ordinary,
}

#[derive(Clone, Copy, PartialEq)]
enum CaughtBy {
    /// The loser opens its store transaction after the winner committed.
    Premise,
    /// Both store transactions are open (and past the premise) before
    /// either commits.
    StoreTransaction,
}

/// Races a maintenance commit against an ordinary one from the same head;
/// checks the winner's outcome, the loser's error and that the store holds
/// exactly what the winner alone left.
async fn race(name: &str, winner: Winner, caught_by: CaughtBy) {
    let store = memory_store(name).await;
    history(&store).await;
    let maintenance = staged_maintenance(&store).await;
    let mut ordinary = staged_ordinary(&store).await;
    ordinary.premise().await.unwrap();
    let (mut winning, mut losing) = match winner {
        Winner::Maintenance => (maintenance, ordinary),
        Winner::Ordinary => (ordinary, maintenance),
    };
    let (outcome, err) = match caught_by {
        CaughtBy::Premise => {
            let outcome = winning.commit().await.unwrap();
            let winner_alone = store_contents(&store).await;
            let err = losing.commit().await.unwrap_err();
            assert_eq!(store_contents(&store).await, winner_alone);
            (outcome, err)
        }
        CaughtBy::StoreTransaction => {
            let winning = prepare(&mut winning).await.unwrap();
            let losing = prepare(&mut losing).await.unwrap();
            let outcome = winning.commit(&store).await.unwrap().outcome;
            let winner_alone = store_contents(&store).await;
            let err = losing.commit(&store).await.unwrap_err();
            assert_eq!(store_contents(&store).await, winner_alone);
            (outcome, err)
        }
    };
    match winner {
        // The head keeps snapshot 4, but its batch count moves: still a lost race.
        Winner::Maintenance => assert!(
            matches!(outcome, CommitOutcome::HeadPreserving(h) if h.snapshot_id == 4),
            "{outcome:?}"
        ),
        Winner::Ordinary => assert_eq!(outcome, CommitOutcome::Snapshot(5)),
    }
    assert_lost_a_race(&err);
    let wording = match caught_by {
        CaughtBy::Premise => "moved",
        CaughtBy::StoreTransaction => "another commit landed first",
    };
    assert!(err.to_string().contains(wording), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_commit_racing_an_ordinary_one_loses_at_the_premise() {
    race(
        "maintenance-loses-premise",
        Winner::Ordinary,
        CaughtBy::Premise,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_commit_racing_a_maintenance_one_loses_at_the_premise() {
    race(
        "ordinary-loses-premise",
        Winner::Maintenance,
        CaughtBy::Premise,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_commit_racing_an_ordinary_one_loses_at_the_store_transaction() {
    race(
        "maintenance-loses-txn",
        Winner::Ordinary,
        CaughtBy::StoreTransaction,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_commit_racing_a_maintenance_one_loses_at_the_store_transaction() {
    race(
        "ordinary-loses-txn",
        Winner::Maintenance,
        CaughtBy::StoreTransaction,
    )
    .await;
}

/// The write-write path on its own: two ordinary commits prepared from one
/// head both mint snapshot 5, pass the premise, and the second to commit
/// fails inside SlateDB's transaction rather than at a check of moraine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_commits_prepared_from_one_head_the_second_fails_at_the_store_transaction() {
    let store = memory_store("race-txn-ordinary").await;
    history(&store).await;
    let mut first = staged_ordinary(&store).await;
    let mut second = StagedTransaction::new(store.clone());
    stage(&mut second, Kind::Snapshot, snapshot_row(5, 1, 3, 14)).await;
    stage(&mut second, Kind::DataFile, data_file_row(13, 1, 5)).await;
    stage(&mut second, Kind::Table, table_row(7, 5, "second")).await;
    stage(
        &mut second,
        Kind::SnapshotChanges,
        changes_row(5, "created_table:\"main\".\"second\""),
    )
    .await;
    let first = prepare(&mut first).await.unwrap();
    let second = prepare(&mut second).await.unwrap();
    assert_eq!(second.outcome(), CommitOutcome::Snapshot(5));
    first.commit(&store).await.unwrap();
    let winner_alone = store_contents(&store).await;

    let err = second.commit(&store).await.unwrap_err();
    assert_lost_a_race(&err);
    assert!(
        err.to_string().contains("another commit landed first"),
        "{err}"
    );
    assert_eq!(store_contents(&store).await, winner_alone);
    let head = moraine::catalog::dump_head(&store).await.unwrap();
    assert!(
        !head.tables[&Kind::Table]
            .iter()
            .any(|r| r[5] == text("second")),
        "the loser's table did not land"
    );
}
