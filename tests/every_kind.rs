//! Every one of DuckLake's 28 kinds round-trips through a commit, on both
//! the in-memory and the local-filesystem object store; and a second
//! read-write opener fences the first.

mod common;

use common::*;
use moraine::catalog::{Cell, ColumnType, Kind, Lifecycle, Row, TableRef, TABLES};
use moraine::staged::StagedTransaction;
use moraine::store::Store;
use moraine::Error;
use std::sync::Arc;

/// A row for `kind` whose ids are all `id`, begin snapshot 1, end NULL.
fn sample_row(kind: Kind, id: i64) -> Row {
    let def = kind.def();
    def.columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if def.begin_end().is_some_and(|(_, e)| e == i) {
                return Cell::Null;
            }
            if def.begin_end().is_some_and(|(b, _)| b == i) {
                return int(1);
            }
            match c.ty {
                ColumnType::BigInt | ColumnType::TimestampTz => int(id),
                ColumnType::Boolean => Cell::Bool(true),
                ColumnType::Uuid => text("00000000-0000-0000-0000-00000000000a"),
                ColumnType::Varchar => text(&format!("{}-{}", c.name, id)),
            }
        })
        .collect()
}

async fn round_trip(store: Arc<Store>) {
    bootstrap(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    let mut expected = Vec::new();
    // Snapshot 1 with its changes; every other kind gets one row with ids 7.
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(1, 1, 8, 8)])
        .await
        .unwrap();
    let parents_first = TABLES
        .iter()
        .filter(|d| !matches!(d.lifecycle, Lifecycle::Embedded { .. }));
    let children = TABLES
        .iter()
        .filter(|d| matches!(d.lifecycle, Lifecycle::Embedded { .. }));
    for def in parents_first.chain(children) {
        let row = match def.kind {
            Kind::Snapshot => continue,
            Kind::SnapshotChanges => changes_row(1, "created_table:\"main\".\"t\""),
            kind => sample_row(kind, 7),
        };
        tx.stage_insert(fixed(def.kind), vec![row.clone()])
            .await
            .unwrap();
        expected.push((def.kind, row));
    }
    tx.commit().await.unwrap();
    let mut reader = StagedTransaction::new(store.clone());
    for (kind, row) in expected {
        let rows = reader.visible_rows(TableRef::Fixed(kind)).await.unwrap();
        assert!(rows.contains(&row), "{kind:?}: {row:?} not in {rows:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_round_trips_in_memory() {
    round_trip(memory_store("every-kind").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_round_trips_on_the_local_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(local_store(dir.path()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_writer_fences_the_older_one_and_nothing_it_staged_lands() {
    let dir = tempfile::tempdir().unwrap();
    let old = local_store(dir.path()).await;
    bootstrap(&old).await;
    let mut stale = StagedTransaction::new(old.clone());
    stale
        .stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(1, 1, 2, 0)])
        .await
        .unwrap();
    stale
        .stage_insert(
            fixed(Kind::SnapshotChanges),
            vec![changes_row(1, "created_table:x")],
        )
        .await
        .unwrap();

    // An operator's takeover: it does not wait for the turn.
    let uri = moraine::store::StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
    let mut force = moraine::store::StoreSettings::default();
    force.apply_option("force_takeover", "1").unwrap();
    let newer = Arc::new(Store::open(&uri, &force).await.unwrap());
    let err = stale.commit().await.unwrap_err();
    assert!(matches!(err, Error::Fenced), "{err:?}");
    assert!(
        err.message().contains("fenced by a newer writer"),
        "{}",
        err.message()
    );
    let dump = moraine::catalog::dump_head(&newer).await.unwrap();
    assert_eq!(dump.head.snapshot_id, 0, "the fenced commit must not land");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_fails_fast_while_another_process_holds_the_lease() {
    use moraine::store::{lease, StoreSettings, StoreUri};
    use object_store::ObjectStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let uri = StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
    // Another process's live lease.
    let object_store = uri.object_store(&Default::default()).unwrap();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 60;
    let body = format!("pid 1 (other) until {expires}");
    object_store
        .put(
            &lease::lease_path(&uri.root_path()),
            body.into_bytes().into(),
        )
        .await
        .unwrap();

    let err = match Store::open(&uri, &StoreSettings::default()).await {
        Err(e) => e,
        Ok(_) => panic!("a second writer must be refused while the lease is live"),
    };
    let text = err.message();
    assert!(
        text.contains("in use by another writer") && text.contains("READ_ONLY"),
        "{text}"
    );
    // The operator's override takes over at once.
    let mut force = StoreSettings::default();
    force.apply_option("force_takeover", "1").unwrap();
    let store = Store::open(&uri, &force).await.unwrap();
    store.close().await.unwrap();
    // Closing releases the lease, so the next writer attaches without force.
    Store::open(&uri, &StoreSettings::default())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
}
