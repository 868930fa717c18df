//! Shared helpers: a store on a real object store, and DuckLake-shaped
//! staged commits (the rows DuckLake 1.5.5 writes for its bootstrap and for
//! ordinary commits).

#![allow(dead_code)]

use moraine::catalog::{fixed_columns, Cell, Kind, Row, TableRef};
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
        tx.create_table(kind.def().name, fixed_columns(kind), false)
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
