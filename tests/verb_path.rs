//! The embedding API: moraine allocates ids, retries benign races, reports
//! overlapping ones as conflicts, and survives an expiry racing its retry.

mod common;

use common::*;
use moraine::catalog::Kind;
use moraine::embed::{Catalog, Mutation};
use moraine::staged::StagedTransaction;
use moraine::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

async fn catalog(name: &str) -> Arc<Catalog> {
    let uri = format!("memory://verb-{name}-{}", uuid::Uuid::new_v4());
    Arc::new(Catalog::open(&uri, "/data/").await.unwrap())
}

async fn new_table(c: &Catalog, name: &'static str) -> i64 {
    let id = std::sync::Mutex::new(0);
    c.commit(|m, _| {
        *id.lock().unwrap() = m.create_table(0, "main", name, &[("id", "int64")]);
        Ok(())
    })
    .await
    .unwrap();
    let id = *id.lock().unwrap();
    id
}

/// Commits `interloper` exactly once, while `victim`'s first attempt is
/// between reading its base and committing.
async fn race<F>(c: &Arc<Catalog>, victim_table: i64, interloper: F) -> Result<i64, Error>
where
    F: FnOnce(Arc<Catalog>) -> tokio::task::JoinHandle<()> + Send + 'static,
{
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let runner = c.clone();
    tokio::spawn(async move {
        tokio::task::spawn_blocking(move || go_rx.recv())
            .await
            .unwrap()
            .unwrap();
        interloper(runner).await.unwrap();
        done_tx.send(()).unwrap();
    });
    let first = AtomicBool::new(true);
    c.commit(move |m, _| {
        if first.swap(false, Ordering::SeqCst) {
            go_tx.send(()).unwrap();
            done_rx.recv().unwrap();
        }
        m.add_data_file(victim_table, "f.parquet", 10, 1000, 0);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_verb_commits_to_different_tables_both_land() {
    let c = catalog("different").await;
    let a = new_table(&c, "a").await;
    let b = new_table(&c, "b").await;
    let landed = race(&c, a, move |c| {
        tokio::spawn(async move {
            c.commit(|m, _| {
                m.add_data_file(b, "g.parquet", 5, 500, 0);
                Ok(())
            })
            .await
            .unwrap();
        })
    })
    .await
    .unwrap();
    let head = c.head().await.unwrap();
    assert_eq!(head.snapshot_id, landed);
    assert_eq!(head.tables[&Kind::DataFile].len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_verb_commits_to_the_same_table_conflict() {
    let c = catalog("same").await;
    let a = new_table(&c, "a").await;
    let result = race(&c, a, move |c| {
        tokio::spawn(async move {
            c.commit(|m, _| {
                m.drop_table(a);
                Ok(())
            })
            .await
            .unwrap();
        })
    })
    .await;
    assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
}

/// Deletes snapshot `id` as DuckLake's expiry does (it is never the head).
async fn expire_snapshot(c: &Catalog, id: i64) {
    let mut tx = StagedTransaction::new(c.store().clone());
    let (base, rows) = tx.scan(fixed(Kind::Snapshot)).await.unwrap();
    let at = rows.iter().position(|r| r[0] == int(id)).unwrap() as i64;
    tx.stage_delete(fixed(Kind::Snapshot), &[base + at])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Races a victim (a data file for table `a`) against an interloper that
/// commits `hidden`, then a data file for table `b`, then expires `hidden`'s
/// snapshot, so the victim's base is followed by a gap. Returns the victim's
/// result and the store as the interloper left it.
async fn race_across_an_expired_gap<F>(
    c: &Arc<Catalog>,
    a: i64,
    b: i64,
    hidden: F,
) -> (Result<i64, Error>, Vec<(Vec<u8>, Vec<u8>)>)
where
    F: Fn(&mut Mutation) + Send + Sync + 'static,
{
    let interloper_left = Arc::new(std::sync::Mutex::new(Vec::new()));
    let left = interloper_left.clone();
    let result = race(c, a, move |c| {
        tokio::spawn(async move {
            let hidden = c.commit(|m, _| {
                hidden(m);
                Ok(())
            });
            let hidden = hidden.await.unwrap();
            c.commit(|m, _| {
                m.add_data_file(b, "g.parquet", 5, 500, 0);
                Ok(())
            })
            .await
            .unwrap();
            expire_snapshot(&c, hidden).await;
            *left.lock().unwrap() = store_contents(c.store()).await;
        })
    })
    .await;
    let left = interloper_left.lock().unwrap().clone();
    assert!(!left.is_empty());
    (result, left)
}

/// An expired snapshot between the victim's base and the head took its
/// changes with it, so the victim cannot tell whether it overlapped. Here it
/// did: it dropped the victim's table. Treating the gap as benign would land
/// a data file in a dropped table; the victim instead gets a conflict, and
/// nothing of it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verb_retry_across_an_expired_gap_that_hid_an_overlap_reports_a_conflict() {
    let c = catalog("expired-overlap").await;
    let a = new_table(&c, "a").await;
    let b = new_table(&c, "b").await;
    let (result, interloper_left) = race_across_an_expired_gap(&c, a, b, move |m| {
        m.drop_table(a);
    })
    .await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert!(carries_retry_words(&err), "{}", err.message());
    assert!(err.to_string().contains("expired"), "{err}");
    assert_eq!(store_contents(c.store()).await, interloper_left);
    let head = c.head().await.unwrap();
    assert!(
        !head.tables[&Kind::DataFile].iter().any(|r| r[1] == int(a)),
        "no data file landed in the dropped table"
    );
}

/// The same gap with an unrelated change in it: the victim still cannot
/// see that, so it reports the conflict (never corruption) and lands
/// nothing; its next commit, based after the gap, lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verb_retry_across_an_expired_gap_reports_a_conflict_and_the_next_commit_lands() {
    let c = catalog("expired-unrelated").await;
    let a = new_table(&c, "a").await;
    let b = new_table(&c, "b").await;
    let (result, interloper_left) = race_across_an_expired_gap(&c, a, b, move |m| {
        m.add_data_file(b, "g0.parquet", 5, 500, 5);
    })
    .await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert!(err.to_string().contains("expired"), "{err}");
    assert_eq!(store_contents(c.store()).await, interloper_left);
    let landed = c
        .commit(|m, _| {
            m.add_data_file(a, "f.parquet", 10, 1000, 0);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(c.head().await.unwrap().snapshot_id, landed);
}

/// An expiry of snapshots before the victim's base leaves no gap after it:
/// the race with an unrelated commit is benign and retried internally.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verb_retry_after_an_expiry_below_its_base_lands() {
    let c = catalog("expired-below").await;
    let a = new_table(&c, "a").await;
    let b = new_table(&c, "b").await;
    let landed = race(&c, a, move |c| {
        tokio::spawn(async move {
            c.commit(|m, _| {
                m.add_data_file(b, "g.parquet", 5, 500, 0);
                Ok(())
            })
            .await
            .unwrap();
            // Snapshot 1 created `a`: below the victim's base (2).
            expire_snapshot(&c, 1).await;
        })
    })
    .await
    .unwrap();
    let head = c.head().await.unwrap();
    assert_eq!(head.snapshot_id, landed);
    assert_eq!(head.tables[&Kind::DataFile].len(), 2);
}
