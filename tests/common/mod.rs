//! Shared helpers: a store on a real object store, and DuckLake-shaped
//! staged commits (the rows DuckLake 1.5.5 writes for its bootstrap and for
//! ordinary commits).

#![allow(dead_code)]

use moraine::catalog::{fixed_columns, Cell, ColumnDesc, Kind, Row, TableRef, Transfer};
use moraine::staged::{CommitOutcome, StagedTransaction};
use moraine::store::{Store, StoreSettings, StoreUri};
use std::sync::Arc;

pub fn int(v: i64) -> Cell {
    Cell::Int(v)
}

pub fn text(v: &str) -> Cell {
    Cell::Text(v.to_string())
}

pub const NULL: Cell = Cell::Null;

pub async fn memory_store(name: &str) -> Arc<Store> {
    let uri = StoreUri::parse(&format!("memory://{name}-{}", uuid::Uuid::new_v4())).unwrap();
    Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap())
}

pub async fn local_store(dir: &std::path::Path) -> Arc<Store> {
    let uri = StoreUri::parse(dir.to_str().unwrap()).unwrap();
    Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap())
}

pub fn fixed(kind: Kind) -> TableRef {
    TableRef::Fixed(kind)
}

pub fn snapshot_row(id: i64, schema_version: i64, next_catalog_id: i64, next_file_id: i64) -> Row {
    vec![
        int(id),
        int(1_700_000_000_000_000 + id),
        int(schema_version),
        int(next_catalog_id),
        int(next_file_id),
    ]
}

pub fn changes_row(id: i64, changes: &str) -> Row {
    vec![int(id), text(changes), NULL, NULL, NULL]
}

/// DuckLake's initialisation batch: the 28 CREATE TABLEs and the seed rows.
pub async fn bootstrap(store: &Arc<Store>) {
    let mut tx = StagedTransaction::new(store.clone());
    assert!(
        tx.lookup("ducklake_metadata").await.unwrap().is_none(),
        "an empty store has no tables"
    );
    for kind in Kind::ALL {
        tx.create_table(kind.def().name, fixed_columns(kind).to_vec(), false)
            .await
            .unwrap();
    }
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(0, 0, 1, 0)])
        .await
        .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(0, "created_schema:\"main\"")],
    )
    .await
    .unwrap();
    tx.stage_insert(
        fixed(Kind::Metadata),
        vec![
            vec![text("version"), text("1.0"), NULL, NULL],
            vec![text("data_path"), text("/data/"), NULL, NULL],
        ],
    )
    .await
    .unwrap();
    tx.stage_insert(
        fixed(Kind::Schema),
        vec![vec![
            int(0),
            text("00000000-0000-0000-0000-000000000000"),
            int(0),
            NULL,
            text("main"),
            text("main/"),
            Cell::Bool(true),
        ]],
    )
    .await
    .unwrap();
    assert_eq!(tx.commit().await.unwrap(), CommitOutcome::Snapshot(0));
}

pub fn table_row(id: i64, begin: i64, name: &str) -> Row {
    vec![
        int(id),
        text("00000000-0000-0000-0000-000000000001"),
        int(begin),
        NULL,
        int(0),
        text(name),
        text(&format!("{name}/")),
        Cell::Bool(true),
    ]
}

pub fn column_row(column_id: i64, begin: i64, table_id: i64, name: &str) -> Row {
    vec![
        int(column_id),
        int(begin),
        NULL,
        int(table_id),
        int(column_id),
        text(name),
        text("int32"),
        NULL,
        NULL,
        Cell::Bool(true),
        NULL,
        NULL,
        NULL,
    ]
}

pub fn data_file_row(id: i64, table_id: i64, begin: i64) -> Row {
    vec![
        int(id),
        int(table_id),
        int(begin),
        NULL,
        NULL,
        text(&format!("f{id}.parquet")),
        Cell::Bool(true),
        text("parquet"),
        int(10),
        int(1000),
        int(100),
        int(0),
        NULL,
        NULL,
        NULL,
        NULL,
    ]
}

/// A DuckLake commit that creates a table with one column.
pub async fn create_table(
    store: &Arc<Store>,
    snapshot: i64,
    table_id: i64,
    name: &str,
) -> CommitOutcome {
    let mut tx = StagedTransaction::new(store.clone());
    tx.premise().await.unwrap();
    stage(
        &mut tx,
        Kind::Snapshot,
        snapshot_row(snapshot, snapshot, table_id + 2, 0),
    )
    .await;
    stage(&mut tx, Kind::Table, table_row(table_id, snapshot, name)).await;
    stage(
        &mut tx,
        Kind::Column,
        column_row(table_id + 1, snapshot, table_id, "x"),
    )
    .await;
    let changes = format!("created_table:\"main\".\"{name}\"");
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(snapshot, &changes),
    )
    .await;
    tx.commit().await.unwrap()
}

/// Stages one DuckLake row insert.
pub async fn stage(tx: &mut StagedTransaction, kind: Kind, row: Row) {
    tx.stage_insert(fixed(kind), vec![row]).await.unwrap();
}

/// One DuckLake commit of inlined rows into `table`, creating the inline
/// table first when `create` names its columns.
pub async fn commit_inline_rows(
    store: &Arc<Store>,
    table: &str,
    create: Option<Vec<moraine::catalog::ColumnDesc>>,
    snapshot: i64,
    rows: Vec<Row>,
) {
    let mut tx = StagedTransaction::new(store.clone());
    if let Some(columns) = create {
        tx.create_table(table, columns, true).await.unwrap();
    }
    stage(&mut tx, Kind::Snapshot, snapshot_row(snapshot, 1, 2, 0)).await;
    tx.stage_insert(TableRef::parse(table).unwrap(), rows)
        .await
        .unwrap();
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(snapshot, "inlined_insert:1"),
    )
    .await;
    tx.commit().await.unwrap();
}

/// Snapshots 1..=4: create table 1, add file 10, rewrite it into file 11
/// (ending 10 at snapshot 3), add file 12.
pub async fn history(store: &Arc<Store>) {
    bootstrap(store).await;
    create_table(store, 1, 1, "t").await;
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(2, 1, 3, 11)])
        .await
        .unwrap();
    tx.stage_insert(fixed(Kind::DataFile), vec![data_file_row(10, 1, 2)])
        .await
        .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(2, "inserted_into_table:1")],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut tx = StagedTransaction::new(store.clone());
    let (base, rows) = tx.scan(fixed(Kind::DataFile)).await.unwrap();
    assert_eq!(rows.len(), 1);
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(3, 1, 3, 12)])
        .await
        .unwrap();
    tx.stage_update(fixed(Kind::DataFile), &[base], &[3], vec![vec![int(3)]])
        .await
        .unwrap();
    tx.stage_insert(fixed(Kind::DataFile), vec![data_file_row(11, 1, 3)])
        .await
        .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(3, "rewrite_delete:1")],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut tx = StagedTransaction::new(store.clone());
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot_row(4, 1, 3, 13)])
        .await
        .unwrap();
    tx.stage_insert(fixed(Kind::DataFile), vec![data_file_row(12, 1, 4)])
        .await
        .unwrap();
    tx.stage_insert(
        fixed(Kind::SnapshotChanges),
        vec![changes_row(4, "inserted_into_table:1")],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

pub async fn delete_where(
    tx: &mut StagedTransaction,
    kind: Kind,
    pred: impl Fn(&Row) -> bool,
) -> usize {
    let (base, rows) = tx.scan(fixed(kind)).await.unwrap();
    let ids: Vec<i64> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| pred(r))
        .map(|(i, _)| base + i as i64)
        .collect();
    tx.stage_delete(fixed(kind), &ids).await.unwrap();
    ids.len()
}

/// DuckLake's `DeleteSnapshots` cascade for the expired set, in its order,
/// with the dead-row rule evaluated through the transaction's own view.
pub async fn expire(store: &Arc<Store>, expired: &[i64]) -> CommitOutcome {
    let mut tx = StagedTransaction::new(store.clone());
    let named = |r: &Row| expired.contains(&r[0].as_int().unwrap());
    delete_where(&mut tx, Kind::Snapshot, named).await;
    delete_where(&mut tx, Kind::SnapshotChanges, named).await;
    // Dead-row rule: no surviving snapshot lies in [begin, end).
    let survivors: Vec<i64> = tx
        .visible_rows(fixed(Kind::Snapshot))
        .await
        .unwrap()
        .iter()
        .map(|r| r[0].as_int().unwrap())
        .collect();
    let dead =
        |b: i64, e: Option<i64>| e.is_some_and(|e| !survivors.iter().any(|s| *s >= b && *s < e));
    let files = tx.visible_rows(fixed(Kind::DataFile)).await.unwrap();
    let dead_files: Vec<Row> = files
        .iter()
        .filter(|r| dead(r[2].as_int().unwrap(), r[3].as_int()))
        .cloned()
        .collect();
    delete_where(&mut tx, Kind::DataFile, |r| dead_files.contains(r)).await;
    let schedule: Vec<Row> = dead_files
        .iter()
        .map(|f| {
            vec![
                f[0].clone(),
                f[5].clone(),
                f[6].clone(),
                int(1_800_000_000_000_000),
            ]
        })
        .collect();
    tx.stage_insert(fixed(Kind::FilesScheduledForDeletion), schedule)
        .await
        .unwrap();
    tx.commit().await.unwrap()
}

pub fn inline_columns() -> Vec<ColumnDesc> {
    let mut cols = moraine::inline::data_columns(&[]);
    cols.push(ColumnDesc {
        name: "v".into(),
        type_name: "INTEGER".into(),
        transfer: Transfer::Value,
    });
    cols
}

pub fn inline_row(row_id: i64, begin: i64) -> Row {
    vec![int(row_id), int(begin), NULL, inline_value(row_id, begin)]
}

/// The user value of an inlined row: distinct per row, and not the row id,
/// so a rewrite that kept the ids but moved or dropped values shows.
pub fn inline_value(row_id: i64, begin: i64) -> Cell {
    Cell::Blob(vec![0xa5, begin as u8, row_id as u8, 0x5a])
}

pub const INLINED: &str = "ducklake_inlined_data_1_1";

/// One chunk of rows 0..=5 at snapshot 1, one of rows 6..=7 at snapshot 2.
pub async fn inline_history(store: &Arc<Store>) {
    bootstrap(store).await;
    for (snapshot, rows) in [(1, (0..6).collect::<Vec<_>>()), (2, vec![6, 7])] {
        let create = (snapshot == 1).then(inline_columns);
        let rows = rows.iter().map(|r| inline_row(*r, snapshot)).collect();
        commit_inline_rows(store, INLINED, create, snapshot, rows).await;
    }
}

/// Every key and value the store holds: what "nothing of it landed" is
/// checked against.
pub async fn store_contents(store: &Arc<Store>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let view = store.snapshot().await.unwrap();
    store
        .scan_prefix(&view, b"")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

/// Whether an error's text, as DuckDB shows it, makes DuckLake retry.
pub fn carries_retry_words(err: &moraine::Error) -> bool {
    let text = err.message().to_lowercase();
    moraine::error::RETRY_WORDS.iter().any(|w| text.contains(w))
}

/// The value of counter `name` in a counter snapshot.
pub fn counter(pairs: &[(&'static str, u64)], name: &str) -> u64 {
    pairs.iter().find(|(n, _)| *n == name).map_or(0, |p| p.1)
}

/// Commits snapshot `next` on top of snapshot `next - 1`, which must be the head.
pub async fn commit_next(store: &Arc<Store>, next: i64) {
    let mut tx = StagedTransaction::new(store.clone());
    let head = tx.premise().await.unwrap().unwrap().snapshot_id;
    assert_eq!(head, next - 1, "a writer saw a stale head");
    stage_snapshot(&mut tx, snapshot_row(next, 1, 1, 0), "created_table:x").await;
    tx.commit().await.unwrap();
}

/// Stages a snapshot row and its changes row.
pub async fn stage_snapshot(tx: &mut StagedTransaction, snapshot: Row, changes: &str) {
    let id = match snapshot.first() {
        Some(Cell::Int(id)) => *id,
        other => panic!("a snapshot row starts with its id, not {other:?}"),
    };
    tx.stage_insert(fixed(Kind::Snapshot), vec![snapshot])
        .await
        .unwrap();
    tx.stage_insert(fixed(Kind::SnapshotChanges), vec![changes_row(id, changes)])
        .await
        .unwrap();
}
