//! RFC 0007's core test obligations: DuckLake's expiry cascade, staged as
//! DuckLake issues it, prunes exactly what it names and preserves head.

mod common;

use common::*;
use moraine::catalog::{self, Kind, Row, TableRef};
use moraine::staged::{CommitOutcome, StagedTransaction};
use moraine::store::keys::{self, Subspace};
use moraine::Error;
use std::sync::Arc;

type StoreRef = Arc<moraine::store::Store>;

async fn raw_keys(store: &StoreRef, subspace: Subspace, tag: Option<u8>) -> usize {
    let view = store.snapshot().await.unwrap();
    store
        .scan_prefix(&view, &keys::prefix(subspace, tag))
        .await
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_prunes_and_preserves_head() {
    let store = memory_store("expiry").await;
    history(&store).await;
    let head_before = catalog::dump_head(&store).await.unwrap();
    let at3_before = catalog::dump_at(&store, 3).await.unwrap();
    assert_eq!(
        raw_keys(&store, Subspace::History, Some(Kind::DataFile.tag())).await,
        1
    );

    let outcome = expire(&store, &[1, 2]).await;
    let CommitOutcome::HeadPreserving(head) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(head.snapshot_id, 4);
    assert_eq!(head.batch_count, head_before.head.batch_count + 1);

    // The named snapshot records are gone; the dead history key is gone.
    for gone in [1, 2] {
        let err = catalog::dump_at(&store, gone).await.unwrap_err();
        assert!(matches!(err, Error::NotFound(_)), "{err}");
    }
    assert_eq!(
        raw_keys(&store, Subspace::History, Some(Kind::DataFile.tag())).await,
        0
    );
    // The scheduled file appears with its path.
    let head_after = catalog::dump_head(&store).await.unwrap();
    let schedule = &head_after.tables[&Kind::FilesScheduledForDeletion];
    assert_eq!(schedule.len(), 1);
    assert_eq!(schedule[0][0], int(10));
    assert_eq!(schedule[0][1], text("f10.parquet"));
    // The current view at head is unchanged (but for the schedule).
    for kind in Kind::ALL
        .iter()
        .filter(|k| **k != Kind::FilesScheduledForDeletion)
    {
        assert_eq!(
            head_after.tables[kind], head_before.tables[kind],
            "{kind:?}"
        );
    }
    // Above the prune, time travel resolves exactly as before.
    let at3_after = catalog::dump_at(&store, 3).await.unwrap();
    for kind in [Kind::Table, Kind::Column, Kind::DataFile, Kind::Schema] {
        assert_eq!(
            at3_after.tables[&kind], at3_before.tables[&kind],
            "{kind:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_forgets_the_schedule_row() {
    let store = memory_store("cleanup").await;
    history(&store).await;
    expire(&store, &[1, 2]).await;
    let mut tx = StagedTransaction::new(store.clone());
    assert_eq!(
        delete_where(&mut tx, Kind::FilesScheduledForDeletion, |r| r[0]
            == int(10))
        .await,
        1
    );
    assert!(matches!(
        tx.commit().await.unwrap(),
        CommitOutcome::HeadPreserving(_)
    ));
    assert_eq!(
        raw_keys(
            &store,
            Subspace::Current,
            Some(Kind::FilesScheduledForDeletion.tag())
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_of_interior_snapshots_keeps_later_ones() {
    let store = memory_store("interior").await;
    history(&store).await;
    // `versions => [2]`: an interior snapshot; 1, 3 and 4 survive, and file 10
    // (begin 2, end 3) has no survivor in [2, 3), so it is reclaimed.
    expire(&store, &[2]).await;
    assert!(catalog::dump_at(&store, 1).await.is_ok());
    assert!(catalog::dump_at(&store, 2).await.is_err());
    assert_eq!(
        catalog::dump_at(&store, 3).await.unwrap().tables[&Kind::DataFile].len(),
        1
    );
}

async fn delete_inline(store: &StoreRef, selection: &[(i64, i64)]) -> Result<CommitOutcome, Error> {
    let mut tx = StagedTransaction::new(store.clone());
    let table = TableRef::parse(INLINED).unwrap();
    let (base, rows) = tx.scan(table).await.unwrap();
    let mut ids = Vec::new();
    for (row_id, begin) in selection {
        match rows
            .iter()
            .position(|r| r[0] == int(*row_id) && r[1] == int(*begin))
        {
            Some(at) => ids.push(base + at as i64),
            None => return Err(Error::NotFound(format!("{row_id}"))),
        }
    }
    tx.stage_delete(table, &ids).await?;
    tx.commit().await
}

/// Every chunk of `ducklake_inlined_data_1_1` as stored: (begin snapshot,
/// sequence, rows `[row_id, user value]`).
async fn chunks(store: &StoreRef) -> Vec<(i64, i64, Vec<Row>)> {
    let view = store.snapshot().await.unwrap();
    let mut out = Vec::new();
    for (key, value) in store
        .scan_prefix(&view, &moraine::inline::chunk_prefix(1, 1))
        .await
        .unwrap()
    {
        let (begin, seq) = moraine::inline::chunk_coordinates(&key).unwrap();
        out.push((begin, seq, moraine::inline::decode_chunk(&value).unwrap()));
    }
    out
}

/// The chunk `(begin, seq)` holding exactly these row ids with their own
/// user values.
fn chunk(begin: i64, seq: i64, ids: impl IntoIterator<Item = i64>) -> (i64, i64, Vec<Row>) {
    let rows = ids
        .into_iter()
        .map(|id| vec![int(id), inline_value(id, begin)])
        .collect();
    (begin, seq, rows)
}

/// What a scan of the inlined table serves: every surviving version with its
/// user value, in insertion order.
async fn assert_scan_serves(store: &StoreRef, versions: &[(i64, i64)]) {
    let mut tx = StagedTransaction::new(store.clone());
    let rows = tx
        .visible_rows(TableRef::parse(INLINED).unwrap())
        .await
        .unwrap();
    let expected: Vec<Row> = versions
        .iter()
        .map(|(id, begin)| inline_row(*id, *begin))
        .collect();
    assert_eq!(rows.as_ref(), &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_partial_selection_rewrites_the_chunk_in_place() {
    let store = memory_store("inline-partial").await;
    inline_history(&store).await;
    delete_inline(&store, &[(2, 1), (3, 1)]).await.unwrap();
    // The survivors stay in their chunk, in their order, each with its own
    // user value.
    assert_eq!(
        chunks(&store).await,
        vec![chunk(1, 0, [0, 1, 4, 5]), chunk(2, 0, [6, 7])]
    );
    assert_scan_serves(&store, &[(0, 1), (1, 1), (4, 1), (5, 1), (6, 2), (7, 2)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_whole_chunk_selection_removes_the_chunk() {
    let store = memory_store("inline-whole").await;
    inline_history(&store).await;
    delete_inline(&store, &[(6, 2), (7, 2)]).await.unwrap();
    assert_eq!(chunks(&store).await, vec![chunk(1, 0, 0..6)]);
    assert_scan_serves(&store, &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_repeated_selection_is_deduplicated() {
    let store = memory_store("inline-repeat").await;
    inline_history(&store).await;
    let mut tx = StagedTransaction::new(store.clone());
    let table = TableRef::parse(INLINED).unwrap();
    let (base, rows) = tx.scan(table).await.unwrap();
    let at = base + rows.iter().position(|r| r[0] == int(7)).unwrap() as i64;
    tx.stage_delete(table, &[at, at]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        chunks(&store).await,
        vec![chunk(1, 0, 0..6), chunk(2, 0, [6])]
    );
    assert_scan_serves(
        &store,
        &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 2)],
    )
    .await;
}

/// A selection spread over a chunk, with an ended survivor: every
/// survivor keeps its row id, begin snapshot, end snapshot and user value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_rewrite_keeps_every_survivors_values_and_end() {
    let store = memory_store("inline-values").await;
    inline_history(&store).await;
    // Snapshot 3 ends row 4 (an inlined delete), as DuckLake does.
    let mut tx = StagedTransaction::new(store.clone());
    let table = TableRef::parse(INLINED).unwrap();
    let (base, rows) = tx.scan(table).await.unwrap();
    let at = base + rows.iter().position(|r| r[0] == int(4)).unwrap() as i64;
    stage(&mut tx, Kind::Snapshot, snapshot_row(3, 1, 2, 0)).await;
    tx.stage_update(table, &[at], &[2], vec![vec![int(3)]])
        .await
        .unwrap();
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(3, "inlined_delete:1"),
    )
    .await;
    tx.commit().await.unwrap();

    delete_inline(&store, &[(1, 1), (3, 1), (6, 2)])
        .await
        .unwrap();
    assert_eq!(
        chunks(&store).await,
        vec![chunk(1, 0, [0, 2, 4, 5]), chunk(2, 0, [7])]
    );
    let mut ended = inline_row(4, 1);
    ended[2] = int(3);
    let mut check = StagedTransaction::new(store.clone());
    assert_eq!(
        check.visible_rows(table).await.unwrap().as_ref(),
        &vec![
            inline_row(0, 1),
            inline_row(2, 1),
            ended,
            inline_row(5, 1),
            inline_row(7, 2),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_missing_version_fails_the_transaction() {
    let store = memory_store("inline-missing").await;
    inline_history(&store).await;
    let table = TableRef::parse(INLINED).unwrap();
    let head = StagedTransaction::new(store.clone())
        .premise()
        .await
        .unwrap();
    // A selection naming one real version and one that does not exist.
    let ops = vec![
        moraine::staged::StagedOp::Delete {
            table,
            row: inline_row(0, 1),
        },
        moraine::staged::StagedOp::Delete {
            table,
            row: inline_row(42, 1),
        },
    ];
    let view = store.snapshot().await.unwrap();
    let err = moraine::staged::translate::commit(&store, &view, head, &ops, &Default::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    assert!(err.to_string().contains("inlined row 42"), "{err}");
    // Nothing landed: the real version is still there.
    assert_eq!(chunks(&store).await[0], chunk(1, 0, 0..6));
}

/// The coverage guard's cross-check: after expiring every snapshot but the
/// head and draining the schedule, no kind declared as reclaimed by expiry
/// or cleanup keeps an ended version or a schedule row. (Adding a `Kind`
/// without a `Kind::reclaim` arm does not compile: the match is exhaustive.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_declarations_match_what_expiry_and_cleanup_remove() {
    use moraine::catalog::Reclaim;
    let store = memory_store("coverage").await;
    history(&store).await;
    expire(&store, &[0, 1, 2, 3]).await;
    let mut tx = StagedTransaction::new(store.clone());
    delete_where(&mut tx, Kind::FilesScheduledForDeletion, |_| true).await;
    tx.commit().await.unwrap();
    for kind in Kind::ALL {
        let declared = kind.reclaim();
        if kind.def().begin_end().is_some() && matches!(declared, Reclaim::SnapshotExpiry) {
            assert_eq!(
                raw_keys(&store, Subspace::History, Some(kind.tag())).await,
                0,
                "{kind:?} kept history"
            );
        }
        if declared == Reclaim::ScheduleCleanup {
            assert_eq!(
                raw_keys(&store, Subspace::Current, Some(kind.tag())).await,
                0,
                "{kind:?} kept rows"
            );
        }
    }
    // The expired records go with the purge that follows the expiry.
    moraine::catalog::expiring::purge(&store).await.unwrap();
    assert_eq!(
        raw_keys(&store, Subspace::Snapshot, None).await,
        1,
        "only the head snapshot survives"
    );
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_schema_versions_are_floored_at_the_oldest_data_file() {
    let store = memory_store("floor").await;
    history(&store).await; // table 1's files begin at 2, 3 and 4
                           // Simulate a store that lost the row DuckLake wrote at snapshot 1 and
                           // knows only a later one.
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(5, 2, 3, 13)])
        .await
        .unwrap();
    tx.stage_insert(
        fixed(Kind::SchemaVersions),
        vec![vec![int(3), int(2), int(1)]],
    )
    .await
    .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(5, "altered_table:1")],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut reader = StagedTransaction::new(store.clone());
    let rows = reader
        .visible_rows(fixed(Kind::SchemaVersions))
        .await
        .unwrap();
    assert!(rows.contains(&vec![int(2), int(2), int(1)]), "{rows:?}");
}

/// Snapshots 2..=`last` after [`history`]'s first table, one commit each.
async fn snapshots_up_to(store: &StoreRef, last: i64) {
    bootstrap(store).await;
    create_table(store, 1, 1, "t").await;
    for id in 2..=last {
        let mut tx = StagedTransaction::new(store.clone());
        stage(&mut tx, Kind::Snapshot, snapshot_row(id, 1, 3, 10)).await;
        stage(
            &mut tx,
            Kind::SnapshotChanges,
            changes_row(id, "altered_table:1"),
        )
        .await;
        tx.commit().await.unwrap();
    }
}

/// An expiry that read `ducklake_snapshot` knows every snapshot record's
/// key from those rows: its commit reads none of them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_commit_does_not_read_back_the_snapshots_it_read() {
    const LAST: i64 = 300;
    let store = memory_store("known-snapshots").await;
    snapshots_up_to(&store, LAST).await;
    let mut tx = StagedTransaction::new(store.clone());
    let older = |r: &Row| r[0].as_int() != Some(LAST);
    let expired = delete_where(&mut tx, Kind::Snapshot, older).await;
    delete_where(&mut tx, Kind::SnapshotChanges, older).await;
    assert_eq!(expired as i64, LAST);
    let before = store.keys_read();
    tx.commit().await.unwrap();
    let read = store.keys_read() - before;
    assert!(read < 10, "the expiry commit read {read} keys");
    let left = StagedTransaction::new(store.clone())
        .visible_rows(fixed(Kind::Snapshot))
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0][0], int(LAST));
    // The commit wrote one expiring entry instead of a tombstone per
    // snapshot; the purge deletes the records and the entry together.
    assert_eq!(
        raw_keys(&store, Subspace::Snapshot, None).await,
        LAST as usize + 1
    );
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 1);
    let purged = moraine::catalog::expiring::purge(&store).await.unwrap();
    assert_eq!(purged, LAST as u64);
    assert_eq!(raw_keys(&store, Subspace::Snapshot, None).await, 1);
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 0);
}

/// Known keys answer for existence: a snapshot they lack does not exist,
/// and a changes row whose snapshot stays cannot go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_snapshot_keys_still_refuse_what_does_not_exist() {
    let store = memory_store("known-refusals").await;
    snapshots_up_to(&store, 5).await;
    let mut tx = StagedTransaction::new(store.clone());
    let head = tx.premise().await.unwrap();
    let rows = tx.visible_rows(fixed(Kind::Snapshot)).await.unwrap();
    let prefix = keys::prefix(Subspace::Snapshot, None);
    let mut known = moraine::catalog::writes::KnownKeys::default();
    known.add_ints(
        prefix,
        rows.iter().map(|row| row[0].as_int().unwrap()).collect(),
    );
    let view = store.snapshot().await.unwrap();
    let facts = moraine::staged::translate::CommitFacts {
        known,
        ..Default::default()
    };
    let commit = |ops: Vec<moraine::staged::StagedOp>| {
        let (store, view, facts) = (&store, &view, &facts);
        async move { moraine::staged::translate::commit(store, view, head, &ops, facts).await }
    };
    let missing = commit(vec![moraine::staged::StagedOp::Delete {
        table: fixed(Kind::Snapshot),
        row: snapshot_row(99, 1, 3, 10),
    }])
    .await
    .unwrap_err();
    assert!(matches!(missing, Error::NotFound(_)), "{missing}");
    let orphaned = commit(vec![moraine::staged::StagedOp::Delete {
        table: fixed(Kind::SnapshotChanges),
        row: changes_row(3, "altered_table:1"),
    }])
    .await
    .unwrap_err();
    assert!(matches!(orphaned, Error::Constraint(_)), "{orphaned}");
    // Nothing landed.
    assert_eq!(raw_keys(&store, Subspace::Snapshot, None).await, 6);
}

/// Between an expiry's commit and its purge (design 0015) the expired
/// snapshots' records are still in the store; every reader skips them, a
/// second expiry cannot name them again, and the purge of both expiries'
/// entries deletes exactly their records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_snapshots_are_gone_for_every_reader_before_the_purge() {
    use moraine::catalog::expiring;
    const LAST: i64 = 20;
    let store = memory_store("expiring").await;
    snapshots_up_to(&store, LAST).await;
    expire(&store, &(0..=9).collect::<Vec<_>>()).await;
    assert_eq!(
        raw_keys(&store, Subspace::Snapshot, None).await,
        LAST as usize + 1
    );

    let mut reader = StagedTransaction::new(store.clone());
    let ids = |rows: Arc<moraine::catalog::Rows>| {
        rows.iter()
            .map(|r| r[0].as_int().unwrap())
            .collect::<Vec<_>>()
    };
    let retained: Vec<i64> = (10..=LAST).collect();
    assert_eq!(
        ids(reader.visible_rows(fixed(Kind::Snapshot)).await.unwrap()),
        retained
    );
    assert_eq!(
        ids(reader
            .visible_rows(fixed(Kind::SnapshotChanges))
            .await
            .unwrap()),
        retained
    );
    let err = catalog::dump_at(&store, 5).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    catalog::dump_at(&store, 15).await.unwrap();

    // A commit that names an expiring snapshot again is refused, and so is
    // one that deletes its changes as if the snapshot still lived.
    let head = catalog::read_head(&store, &store.snapshot().await.unwrap())
        .await
        .unwrap();
    for (kind, row) in [
        (Kind::Snapshot, snapshot_row(5, 1, 3, 10)),
        (Kind::SnapshotChanges, changes_row(5, "altered_table:1")),
    ] {
        let ops = vec![moraine::staged::StagedOp::Delete {
            table: fixed(kind),
            row,
        }];
        let view = store.snapshot().await.unwrap();
        let outcome =
            moraine::staged::translate::commit(&store, &view, head, &ops, &Default::default())
                .await;
        match kind {
            Kind::Snapshot => assert!(matches!(outcome, Err(Error::NotFound(_))), "{outcome:?}"),
            _ => assert!(
                outcome.is_ok(),
                "a changes delete of an expired snapshot is a no-op: {outcome:?}"
            ),
        }
    }

    // verify and the audit count the retained snapshots only, and the audit
    // declares the records awaiting their purge.
    let check = moraine::verify::check_catalog(&store).await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(check.snapshots, retained.len() as u64);
    let audit = moraine::reclaim::audit::audit(&store).await.unwrap();
    assert_eq!(audit.snapshot_count, retained.len() as u64);
    assert_eq!(audit.oldest_snapshot_id, Some(10));
    assert!(
        audit.coverage.values().all(Option::is_some),
        "{:?}",
        audit.coverage
    );
    assert_eq!(
        audit.logical["snapshot (expired, awaiting purge)"].0, 10,
        "{:?}",
        audit.logical
    );

    // A second expiry before the purge writes a second entry; one purge
    // takes both.
    expire(&store, &(10..=14).collect::<Vec<_>>()).await;
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 2);
    assert_eq!(expiring::purge(&store).await.unwrap(), 15);
    assert_eq!(raw_keys(&store, Subspace::Snapshot, None).await, 6);
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 0);
    assert_eq!(expiring::purge(&store).await.unwrap(), 0);
    assert_eq!(
        ids(StagedTransaction::new(store.clone())
            .visible_rows(fixed(Kind::Snapshot))
            .await
            .unwrap()),
        (15..=LAST).collect::<Vec<_>>()
    );
}

/// A process that stops between an expiry's commit and its purge leaves the
/// entry in the store: the next writer reads the catalog without the
/// expired snapshots, and its detach purges them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_left_by_a_stopped_writer_is_purged_by_the_next_detach() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path()).await;
    snapshots_up_to(&store, 8).await;
    expire(&store, &[0, 1, 2, 3]).await;
    store.close().await.unwrap();
    drop(store);

    let store = local_store(dir.path()).await;
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 1);
    let left = StagedTransaction::new(store.clone())
        .visible_rows(fixed(Kind::Snapshot))
        .await
        .unwrap();
    let left: Vec<i64> = left.iter().map(|r| r[0].as_int().unwrap()).collect();
    assert_eq!(left, (4..=8).collect::<Vec<_>>());
    let shared = moraine::staged::AttachShared::default();
    assert_eq!(shared.finish_purge(&store).await.unwrap(), 4);
    assert_eq!(raw_keys(&store, Subspace::Snapshot, None).await, 5);
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 0);
    store.close().await.unwrap();
}

/// A damaged entry that names snapshots at or past the head is refused by
/// the purge, which deletes nothing, instead of deleting key by key across
/// whatever range it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_refuses_an_entry_naming_snapshots_past_the_head() {
    use moraine::catalog::expiring;
    let store = memory_store("expiring-damaged").await;
    snapshots_up_to(&store, 5).await;
    let (key, value) = expiring::entry(1_000, &[2, 1_000_000].into_iter().collect());
    let view = store.snapshot().await.unwrap();
    let txn = store.begin(&view).unwrap();
    txn.put(&key, &value).unwrap();
    store.commit(txn).await.unwrap();
    drop(view);
    let err = expiring::purge(&store).await.unwrap_err();
    assert!(matches!(err, Error::Corruption(_)), "{err}");
    assert_eq!(raw_keys(&store, Subspace::Snapshot, None).await, 6);
    assert_eq!(raw_keys(&store, Subspace::Expiring, None).await, 1);
}
