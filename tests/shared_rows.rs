//! The committed rows one attach shares across its transactions must be
//! exactly what the store serves — same rows, same order — after every kind
//! of commit: new tables, files with partition values, ended and rewritten
//! files, stats updated in place, inlined rows inserted, ended and deleted,
//! inlined deletions, and an expiry cascade; some commits after the
//! transaction read its own writes back, so that they carry its overlays.

mod common;

use common::*;
use moraine::catalog::{Kind, Row, Rows, TableRef};
use moraine::staged::pushdown::IntBound;
use moraine::staged::{committed_records, take_image, AttachShared, StagedTransaction};
use moraine::store::Store;
use std::sync::atomic::Ordering;
use std::sync::Arc;

struct Attach {
    store: Arc<Store>,
    shared: Arc<AttachShared>,
}

impl Attach {
    /// A new attach of `store`, keeping nothing yet.
    fn of(store: &Arc<Store>) -> Attach {
        Attach {
            store: store.clone(),
            shared: Arc::default(),
        }
    }

    fn tx(&self) -> StagedTransaction {
        StagedTransaction::sharing(self.store.clone(), self.shared.clone())
    }

    /// Every table, read once through the shared rows and once from the
    /// store alone, must agree row for row.
    async fn check(&self, after: &str) {
        let mut shared = self.tx();
        let mut fresh = StagedTransaction::new(self.store.clone());
        let names = fresh.list_tables().await.unwrap();
        assert_eq!(shared.list_tables().await.unwrap(), names, "after {after}");
        for name in names {
            let table = TableRef::parse(&name).unwrap();
            let from_store = fresh.visible_rows(table).await.unwrap();
            let kept = shared.visible_rows(table).await.unwrap();
            assert_eq!(kept, from_store, "{name} after {after}");
        }
        drop((shared, fresh));
        self.check_image(after).await;
    }

    /// An image of the kept rows, read by an attach that keeps nothing yet,
    /// must serve exactly the records, and must be what it reads.
    async fn check_image(&self, after: &str) {
        assert!(
            take_image(&self.store, &self.shared, 0).await.unwrap(),
            "no image taken after {after}"
        );
        let mut records = StagedTransaction::new(self.store.clone());
        let names = records.list_tables().await.unwrap();
        let mut expected = Vec::new();
        for name in &names {
            let table = TableRef::parse(name).unwrap();
            expected.push(records_of(&self.store, table).await);
        }
        let mut imaged = StagedTransaction::new(self.store.clone());
        assert_eq!(imaged.list_tables().await.unwrap(), names);
        let keys_before = self.store.keys_read();
        let mut rows_served = 0;
        for (name, expected) in names.iter().zip(expected) {
            let table = TableRef::parse(name).unwrap();
            let kept = self
                .shared
                .rows
                .rows(imaged.premise().await.unwrap(), table);
            let from_image = imaged.visible_rows(table).await.unwrap();
            if kept.is_some() {
                assert_eq!(
                    from_image.as_ref(),
                    &expected,
                    "{name}'s image after {after}"
                );
                rows_served += expected.len();
            }
        }
        let keys = self.store.keys_read() - keys_before;
        // The image's stamp and parts, the head and format, the inline
        // listings: and not one record.
        let image_keys = store_contents(&self.store)
            .await
            .iter()
            .filter(|(key, _)| key.first() == Some(&7))
            .count() as u64;
        assert!(
            keys <= image_keys + 6,
            "after {after}: {keys} keys read to serve {rows_served} rows from {image_keys} image keys"
        );
    }

    async fn scan(&self, tx: &mut StagedTransaction, kind: Kind) -> (i64, Arc<Rows>) {
        tx.scan(fixed(kind)).await.unwrap()
    }
}

/// Reads every table through `tx` before it commits, as DuckLake's expiry
/// reads the snapshots it has just deleted: the commit then carries those
/// overlays forward instead of applying its operations again.
async fn read_back(tx: &mut StagedTransaction) {
    for name in tx.list_tables().await.unwrap() {
        let table = TableRef::parse(&name).unwrap();
        tx.visible_rows(table).await.unwrap();
    }
}

/// A table's committed rows read from its records alone.
async fn records_of(store: &Arc<Store>, table: TableRef) -> Vec<Row> {
    let view = store.snapshot().await.unwrap();
    committed_records(store, &view, table).await.unwrap()
}

fn stats_row(table_id: i64, records: i64) -> Row {
    vec![int(table_id), int(records), int(records), int(records * 10)]
}

fn partition_value(file: i64, table: i64, value: &str) -> Row {
    vec![int(file), int(table), int(0), text(value)]
}

#[tokio::test]
async fn shared_rows_match_the_store_after_every_kind_of_commit() {
    let lake = Attach::of(&memory_store("shared").await);
    bootstrap(&lake.store).await;
    lake.check("bootstrap").await;

    // Two tables, created in separate commits, interleaved files.
    for (snapshot, table) in [(1, 1), (2, 3)] {
        let mut tx = lake.tx();
        stage(
            &mut tx,
            Kind::Snapshot,
            snapshot_row(snapshot, snapshot, table + 2, 0),
        )
        .await;
        stage(
            &mut tx,
            Kind::Table,
            table_row(table, snapshot, &format!("t{table}")),
        )
        .await;
        stage(
            &mut tx,
            Kind::Column,
            column_row(table + 1, snapshot, table, "x"),
        )
        .await;
        stage(&mut tx, Kind::TableStats, stats_row(table, 0)).await;
        stage(
            &mut tx,
            Kind::SnapshotChanges,
            changes_row(snapshot, "created_table"),
        )
        .await;
        tx.commit().await.unwrap();
        lake.check("create table").await;
    }
    let mut next_file = 10;
    for snapshot in 3..9 {
        let table = if snapshot % 2 == 0 { 1 } else { 3 };
        let mut tx = lake.tx();
        let (base, stats) = lake.scan(&mut tx, Kind::TableStats).await;
        let at = stats.iter().position(|r| r[0] == int(table)).unwrap();
        stage(
            &mut tx,
            Kind::Snapshot,
            snapshot_row(snapshot, 2, 5, next_file + 1),
        )
        .await;
        stage(
            &mut tx,
            Kind::DataFile,
            data_file_row(next_file, table, snapshot),
        )
        .await;
        stage(
            &mut tx,
            Kind::FilePartitionValue,
            partition_value(next_file, table, &format!("p{snapshot}")),
        )
        .await;
        tx.stage_update(
            fixed(Kind::TableStats),
            &[base + at as i64],
            &[1],
            vec![vec![int(snapshot)]],
        )
        .await
        .unwrap();
        stage(
            &mut tx,
            Kind::SnapshotChanges,
            changes_row(snapshot, "inserted"),
        )
        .await;
        tx.commit().await.unwrap();
        next_file += 1;
        lake.check("insert file").await;
    }

    // Rewrite: end the first file of table 1 and add its replacement.
    let mut tx = lake.tx();
    let (base, files) = lake.scan(&mut tx, Kind::DataFile).await;
    let at = files.iter().position(|r| r[1] == int(1)).unwrap();
    stage(
        &mut tx,
        Kind::Snapshot,
        snapshot_row(9, 2, 5, next_file + 1),
    )
    .await;
    tx.stage_update(
        fixed(Kind::DataFile),
        &[base + at as i64],
        &[3],
        vec![vec![int(9)]],
    )
    .await
    .unwrap();
    stage(&mut tx, Kind::DataFile, data_file_row(next_file, 1, 9)).await;
    stage(&mut tx, Kind::SnapshotChanges, changes_row(9, "rewrite")).await;
    read_back(&mut tx).await;
    tx.commit().await.unwrap();
    lake.check("rewrite").await;

    // Inlined rows: create, insert over several commits, end some, delete one.
    for snapshot in 10..14 {
        let mut tx = lake.tx();
        if snapshot == 10 {
            tx.create_table(INLINED, inline_columns(), true)
                .await
                .unwrap();
            tx.create_table(
                "ducklake_inlined_delete_1",
                moraine::inline::delete_columns(),
                true,
            )
            .await
            .unwrap();
        }
        stage(
            &mut tx,
            Kind::Snapshot,
            snapshot_row(snapshot, 2, 5, next_file + 1),
        )
        .await;
        let rows = (0..3)
            .map(|i| inline_row(snapshot * 10 + i, snapshot))
            .collect();
        tx.stage_insert(TableRef::parse(INLINED).unwrap(), rows)
            .await
            .unwrap();
        tx.stage_insert(
            TableRef::parse("ducklake_inlined_delete_1").unwrap(),
            vec![vec![int(13 - snapshot), int(snapshot), int(snapshot)]],
        )
        .await
        .unwrap();
        stage(
            &mut tx,
            Kind::SnapshotChanges,
            changes_row(snapshot, "inlined_insert:1"),
        )
        .await;
        tx.commit().await.unwrap();
        lake.check("inline insert").await;
    }
    let inlined = TableRef::parse(INLINED).unwrap();
    let mut tx = lake.tx();
    let (base, rows) = tx.scan(inlined).await.unwrap();
    stage(
        &mut tx,
        Kind::Snapshot,
        snapshot_row(14, 2, 5, next_file + 1),
    )
    .await;
    let ended: Vec<i64> = (0..rows.len())
        .filter(|i| i % 4 == 1)
        .map(|i| base + i as i64)
        .collect();
    let values = ended.iter().map(|_| vec![int(14)]).collect();
    tx.stage_update(inlined, &ended, &[2], values)
        .await
        .unwrap();
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(14, "inlined_delete:1"),
    )
    .await;
    read_back(&mut tx).await;
    tx.commit().await.unwrap();
    lake.check("inline end").await;
    // Flush-style delete of a row in the middle of a chunk.
    let mut tx = lake.tx();
    let (base, rows) = tx.scan(inlined).await.unwrap();
    let middle = rows.iter().position(|r| r[0] == int(111)).unwrap();
    tx.stage_delete(inlined, &[base + middle as i64])
        .await
        .unwrap();
    read_back(&mut tx).await;
    tx.commit().await.unwrap();
    lake.check("inline partial delete").await;

    // Expiry: snapshots 1..=8 go, with their changes, the dead file and the
    // schedule it enters.
    let outcome = expire(&lake.store, &(1..9).collect::<Vec<_>>()).await;
    assert!(matches!(
        outcome,
        moraine::staged::CommitOutcome::HeadPreserving(_)
    ));
    lake.check("expiry by another transaction").await;
    let mut tx = lake.tx();
    let named = |r: &Row| r[0].as_int().is_some_and(|s| s == 9 || s == 10);
    delete_where(&mut tx, Kind::Snapshot, named).await;
    delete_where(&mut tx, Kind::SnapshotChanges, named).await;
    delete_where(&mut tx, Kind::FilesScheduledForDeletion, |_| true).await;
    delete_where(&mut tx, Kind::DataFile, |r| r[0] == int(11)).await;
    read_back(&mut tx).await;
    tx.commit().await.unwrap();
    lake.check("expiry through the shared rows").await;
}

/// A bootstrapped in-memory lake named `name` with one table, `t`.
async fn lake_with_table(name: &str) -> Arc<Store> {
    let store = memory_store(name).await;
    bootstrap(&store).await;
    create_table(&store, 1, 1, "t").await;
    store
}

/// Reads `kinds` in a transaction of `attach`.
async fn read_in(attach: &Attach, kinds: &[Kind]) {
    let mut tx = attach.tx();
    for kind in kinds {
        tx.visible_rows(fixed(*kind)).await.unwrap();
    }
}

#[tokio::test]
async fn an_image_is_retaken_at_its_head_only_when_a_session_read_a_table_it_lacks() {
    let store = lake_with_table("retake").await;
    let session = || Attach::of(&store);

    let tiny = session();
    read_in(&tiny, &[Kind::Snapshot]).await;
    assert!(
        !take_image(&store, &tiny.shared, 1_000).await.unwrap(),
        "a catalog under the minimum got an image"
    );

    let first = session();
    read_in(&first, &[Kind::Snapshot]).await;
    assert!(take_image(&store, &first.shared, 0).await.unwrap());

    // The image holds every table a cold attach reads, also those the
    // session that took it never read.
    let reader = session();
    read_in(&reader, &[Kind::Snapshot, Kind::Schema, Kind::Metadata]).await;
    assert!(
        !take_image(&store, &reader.shared, 0).await.unwrap(),
        "retaken by a session that read only tables the image holds"
    );
    assert_eq!(
        reader
            .shared
            .tables_read_from_records
            .load(Ordering::Relaxed),
        0
    );

    // A cold session reads the image, then a table the image lacks: one
    // of those it holds only once a session read them.
    let second = session();
    read_in(&second, &[Kind::Snapshot, Kind::FileColumnStats]).await;
    assert!(
        take_image(&store, &second.shared, 0).await.unwrap(),
        "the image of this head lacks a table the session read, and was not retaken"
    );

    let third = session();
    read_in(
        &third,
        &[Kind::Snapshot, Kind::Schema, Kind::FileColumnStats],
    )
    .await;
    assert!(
        !take_image(&store, &third.shared, 0).await.unwrap(),
        "retaken although the image held every table read"
    );
}

/// A cold session reads the image's rows packed: its scans, bounds and
/// rowids read cells in place, a DELETE through one of its rowids lands,
/// the shared rows carried past it match the store, and the next image,
/// written from rows still packed, reads back as the records.
#[tokio::test]
async fn a_cold_session_scans_packed_rows_and_writes_through_them() {
    let store = lake_with_table("packed").await;
    let writer = Attach::of(&store);
    for snapshot in 2..42 {
        let mut tx = writer.tx();
        stage(
            &mut tx,
            Kind::Snapshot,
            snapshot_row(snapshot, 1, 3, snapshot + 100),
        )
        .await;
        stage(
            &mut tx,
            Kind::DataFile,
            data_file_row(snapshot + 99, 1, snapshot),
        )
        .await;
        tx.commit().await.unwrap();
    }
    read_in(&writer, &[Kind::Snapshot, Kind::DataFile]).await;
    assert!(take_image(&store, &writer.shared, 0).await.unwrap());
    let files = records_of(&store, fixed(Kind::DataFile)).await;

    let cold = Attach::of(&store);
    let mut tx = cold.tx();
    let within = IntBound {
        column: 0,
        low: 110,
        high: 119,
    };
    let scan = tx
        .scan_within(fixed(Kind::DataFile), &[within])
        .await
        .unwrap();
    assert_eq!(
        cold.shared.tables_read_from_records.load(Ordering::Relaxed),
        0,
        "the cold scan read records instead of the image"
    );
    assert_eq!(scan.rows.len(), files.len());
    assert_eq!(scan.len(), 10);
    let mut doomed = None;
    for n in 0..scan.len() {
        let (i, rowid) = scan.emitted(n).unwrap();
        for (column, cell) in files[i].iter().enumerate() {
            assert_eq!(scan.rows.cell(i, column), cell.as_cell_ref());
        }
        if files[i][0] == int(115) {
            doomed = Some(rowid);
        }
    }
    // The snapshots stay packed through the commit below.
    tx.visible_rows(fixed(Kind::Snapshot)).await.unwrap();
    tx.stage_delete(fixed(Kind::DataFile), &[doomed.unwrap()])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let after = records_of(&store, fixed(Kind::DataFile)).await;
    assert_eq!(after.len(), files.len() - 1);
    assert!(after.iter().all(|row| row[0] != int(115)));
    cold.check("a delete through a packed scan").await;
}

/// After a commit of this attach, a table the commit did not change and no
/// transaction has read yet still comes from the image taken at the head
/// before it; a table it changed comes from its records.
#[tokio::test]
async fn the_image_is_carried_across_a_commit_for_the_tables_it_did_not_change() {
    let store = lake_with_table("carried").await;
    let first = Attach::of(&store);
    read_in(&first, &[Kind::Snapshot]).await;
    assert!(take_image(&store, &first.shared, 0).await.unwrap());

    let cold = Attach::of(&store);
    read_in(&cold, &[Kind::Snapshot, Kind::DataFile]).await;
    let mut tx = cold.tx();
    stage_snapshot(&mut tx, snapshot_row(2, 1, 3, 11), "inserted_into_table:1").await;
    stage(&mut tx, Kind::DataFile, data_file_row(10, 1, 2)).await;
    tx.commit().await.unwrap();
    let from_records = || cold.shared.tables_read_from_records.load(Ordering::Relaxed);
    assert_eq!(from_records(), 0);

    // Never read, unchanged by the commit: the carried image answers, and
    // its rows are the store's.
    let mut tx = cold.tx();
    let columns = tx.visible_rows(fixed(Kind::Column)).await.unwrap();
    assert_eq!(
        from_records(),
        0,
        "an unchanged table was read from its records"
    );
    assert_eq!(*columns, records_of(&store, fixed(Kind::Column)).await);
    // The tables it changed are kept, carried by the commit itself; the
    // changes of its snapshot ride inside the snapshot's record.
    let changes = tx.visible_rows(fixed(Kind::SnapshotChanges)).await.unwrap();
    assert_eq!(
        *changes,
        records_of(&store, fixed(Kind::SnapshotChanges)).await
    );
}

#[tokio::test]
async fn an_attach_reads_the_head_once_per_committed_state() {
    let store = memory_store("head-once").await;
    bootstrap(&store).await;
    commit_next(&store, 1).await;
    let lake = Attach::of(&store);
    let head = lake.tx().premise().await.unwrap();
    assert_eq!(head.map(|h| h.snapshot_id), Some(1));
    let before = store.keys_read();
    for _ in 0..3 {
        assert_eq!(lake.tx().premise().await.unwrap(), head);
    }
    assert_eq!(store.keys_read() - before, 0, "the head was read again");
    // Another attach's commit moves the store on: the next transaction sees it.
    commit_next(&store, 2).await;
    let moved = lake.tx().premise().await.unwrap();
    assert_eq!(moved.map(|h| h.snapshot_id), Some(2));
    assert!(moved.unwrap().batch_count > head.unwrap().batch_count);
}

#[tokio::test]
async fn an_attachs_own_commit_leaves_its_head_known() {
    let store = memory_store("head-left").await;
    bootstrap(&store).await;
    let lake = Attach::of(&store);
    for next in 1..=3 {
        let mut tx = lake.tx();
        assert_eq!(tx.premise().await.unwrap().unwrap().snapshot_id, next - 1);
        stage_snapshot(&mut tx, snapshot_row(next, 1, 1, 0), "created_table:x").await;
        tx.commit().await.unwrap();
        let before = store.keys_read();
        let known = lake.tx().premise().await.unwrap();
        assert_eq!(
            store.keys_read() - before,
            0,
            "the committed head was read back"
        );
        let stored = Attach::of(&store).tx().premise().await.unwrap();
        assert_eq!(known, stored, "the head left by commit {next}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_taking_turns_each_see_the_others_head() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (local_store(dir.path()).await, local_store(dir.path()).await);
    bootstrap(&one).await;
    let lakes = [Attach::of(&one), Attach::of(&two)];
    for next in 1..=6 {
        let lake = &lakes[next as usize % 2];
        let mut tx = lake.tx();
        let head = tx.premise().await.unwrap().unwrap().snapshot_id;
        assert_eq!(head, next - 1, "writer {} saw a stale head", next % 2);
        stage_snapshot(&mut tx, snapshot_row(next, 1, 1, 0), "created_table:x").await;
        tx.commit().await.unwrap();
    }
}
