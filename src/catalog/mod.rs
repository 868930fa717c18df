//! DuckLake's catalog tables as stored records.
//!
//! This layer maps the 28 `ducklake_*` kinds and the two dynamic inline
//! families onto store keys, and materializes committed rows from a read
//! view. It knows DuckLake's table shapes; it knows key bytes only through
//! `store::keys`.

pub mod columns;
pub mod expiring;
pub mod image;
pub mod kinds;
pub mod rows;
pub mod types;
pub mod writes;

use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use crate::store::value::{decode_record, Record};
use crate::store::{ReadView, Store, StoreSettings, StoreUri};
use crate::{catalog_row, column};
pub use kinds::{Kind, Lifecycle, Reclaim, SysRecord, TableDef, TABLES};
pub use rows::Rows;
use std::sync::{Arc, OnceLock};
pub use types::{Cell, ColumnType, Row};

/// A table the shim can bind: one of the fixed kinds or an instance of an
/// inline family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableRef {
    Fixed(Kind),
    /// `ducklake_inlined_data_<table_id>_<schema_version>`
    InlineData {
        table_id: i64,
        schema_version: i64,
    },
    /// `ducklake_inlined_delete_<table_id>`
    InlineDelete {
        table_id: i64,
    },
}

impl TableRef {
    pub fn parse(name: &str) -> Option<TableRef> {
        let lower = name.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("ducklake_inlined_data_") {
            if let Some((t, v)) = rest.split_once('_') {
                if let (Ok(table_id), Ok(schema_version)) = (t.parse(), v.parse()) {
                    return Some(TableRef::InlineData {
                        table_id,
                        schema_version,
                    });
                }
            }
        }
        if let Some(rest) = lower.strip_prefix("ducklake_inlined_delete_") {
            if let Ok(table_id) = rest.parse() {
                return Some(TableRef::InlineDelete { table_id });
            }
        }
        Kind::by_name(&lower).map(TableRef::Fixed)
    }

    pub fn name(&self) -> String {
        match self {
            TableRef::Fixed(kind) => kind.def().name.to_string(),
            TableRef::InlineData {
                table_id,
                schema_version,
            } => {
                format!("ducklake_inlined_data_{table_id}_{schema_version}")
            }
            TableRef::InlineDelete { table_id } => format!("ducklake_inlined_delete_{table_id}"),
        }
    }
}

/// How a column's cells cross the C ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Transfer {
    Int64 = 0,
    Bool = 1,
    Text = 2,
    Uuid = 3,
    TimestampTz = 4,
    /// An opaque DuckDB value, serialized by the shim.
    Value = 5,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDesc {
    pub name: String,
    /// The DuckDB type name the shim binds the column with.
    pub type_name: String,
    pub transfer: Transfer,
}

impl ColumnDesc {
    pub fn catalog(name: &str, ty: ColumnType) -> Self {
        let transfer = match ty {
            ColumnType::BigInt => Transfer::Int64,
            ColumnType::Boolean => Transfer::Bool,
            ColumnType::Varchar => Transfer::Text,
            ColumnType::Uuid => Transfer::Uuid,
            ColumnType::TimestampTz => Transfer::TimestampTz,
        };
        ColumnDesc {
            name: name.to_string(),
            type_name: ty.sql_name().to_string(),
            transfer,
        }
    }
}

/// The columns of a fixed kind's table, described once per process: every
/// lookup of a metadata table by a statement's binder names them.
pub fn fixed_columns(kind: Kind) -> Arc<[ColumnDesc]> {
    static DESCRIBED: OnceLock<Vec<Arc<[ColumnDesc]>>> = OnceLock::new();
    let described = DESCRIBED.get_or_init(|| {
        Kind::ALL
            .iter()
            .map(|k| {
                k.def()
                    .columns
                    .iter()
                    .map(|c| ColumnDesc::catalog(c.name, c.ty))
                    .collect()
            })
            .collect()
    });
    // In kind order, as `Kind::def` indexes TABLES.
    described[kind as usize].clone()
}

/// Where a row of a fixed kind is stored.
pub fn location(kind: Kind, row: &[Cell]) -> Result<Vec<u8>> {
    let def = kind.def();
    let ident: Vec<Cell> = def
        .key
        .iter()
        .map(|&i| row.get(i).cloned().unwrap_or(Cell::Null))
        .collect();
    Ok(match def.lifecycle {
        Lifecycle::Snapshot | Lifecycle::SnapshotChanges => {
            keys::key(Subspace::Snapshot, None, &ident)
        }
        Lifecycle::Versioned { begin, end } => match row.get(end) {
            None | Some(Cell::Null) => keys::key(Subspace::Current, Some(kind.tag()), &ident),
            Some(end_cell) => {
                let mut cells = ident;
                cells.push(end_cell.clone());
                cells.push(row.get(begin).cloned().unwrap_or(Cell::Null));
                keys::key(Subspace::History, Some(kind.tag()), &cells)
            }
        },
        Lifecycle::Unversioned if kind == Kind::SchemaVersions => {
            keys::key(Subspace::SchemaVersion, None, &ident)
        }
        Lifecycle::Unversioned => keys::key(Subspace::Current, Some(kind.tag()), &ident),
        Lifecycle::Embedded { .. } => {
            return Err(Error::Internal(format!(
                "{} rows have no location of their own",
                def.name
            )))
        }
    })
}

/// The key prefixes that hold a kind's records (for embedded kinds: the
/// parent's), in scan order.
pub fn record_prefixes(kind: Kind) -> Vec<Vec<u8>> {
    let def = kind.def();
    match def.lifecycle {
        Lifecycle::Snapshot | Lifecycle::SnapshotChanges => {
            vec![keys::prefix(Subspace::Snapshot, None)]
        }
        Lifecycle::Versioned { .. } => vec![
            keys::prefix(Subspace::Current, Some(kind.tag())),
            keys::prefix(Subspace::History, Some(kind.tag())),
        ],
        Lifecycle::Unversioned if kind == Kind::SchemaVersions => {
            vec![keys::prefix(Subspace::SchemaVersion, None)]
        }
        Lifecycle::Unversioned => vec![keys::prefix(Subspace::Current, Some(kind.tag()))],
        Lifecycle::Embedded { parent, .. } => record_prefixes(parent),
    }
}

/// The key of snapshot `id`'s record (its changes ride inside it).
pub fn snapshot_key(id: i64) -> Vec<u8> {
    keys::key(Subspace::Snapshot, None, &[Cell::Int(id)])
}

/// The tag a kind's record values are framed with.
pub fn record_tag(kind: Kind) -> u8 {
    match kind.def().lifecycle {
        Lifecycle::Embedded { parent, .. } => parent.tag(),
        Lifecycle::SnapshotChanges => Kind::Snapshot.tag(),
        _ => kind.tag(),
    }
}

/// The rows a record contributes to a kind's table.
pub fn rows_of_record(kind: Kind, record: &Record) -> Vec<Row> {
    match kind.def().lifecycle {
        Lifecycle::Embedded { .. } | Lifecycle::SnapshotChanges => {
            record.children_of(kind.tag()).to_vec()
        }
        _ => vec![record.row.clone()],
    }
}

/// The head record: the latest snapshot and a count every batch advances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub snapshot_id: i64,
    pub batch_count: i64,
}

pub const HEAD_TAG: u8 = 0xf0;
pub const FORMAT_TAG: u8 = 0xf1;
/// The layout version this build writes and reads.
pub const FORMAT_VERSION: i64 = 1;

impl Head {
    /// The record `sys/head` holds, framed with [`HEAD_TAG`].
    pub fn record(&self, deleted_rows: &DeletedRowCounts) -> Record {
        let mut record = Record::new(vec![
            Cell::Int(self.snapshot_id),
            Cell::Int(self.batch_count),
        ]);
        deleted_rows.add_to(&mut record);
        record
    }

    pub fn decode(bytes: &[u8]) -> Result<Head> {
        let record = decode_record(HEAD_TAG, bytes)?;
        match record.row.as_slice() {
            [Cell::Int(snapshot_id), Cell::Int(batch_count)] => Ok(Head {
                snapshot_id: *snapshot_id,
                batch_count: *batch_count,
            }),
            _ => Err(Error::corruption("sys/head has an unexpected shape")),
        }
    }
}

/// The rows DuckLake deleted from each table since it was last empty.
///
/// DuckDB's planner estimates a table's rows by what its storage holds, and
/// a DuckDB table keeps counting deleted rows until a checkpoint drops a
/// row group all of whose rows are gone. DuckLake deletes rows of
/// `ducklake_delete_file` (a delete file another replaces), of its inlined
/// tables (a flush) and of every history table (an expiry), so on the file
/// catalog those estimates run above the live rows, and they decide the
/// probe side of a hash join, and so the order of DuckLake's unordered file
/// lists. moraine adds these counts to its estimates so DuckDB plans the
/// same joins. They ride in `sys/head` as children, which a build without
/// them ignores, and a table leaves the list when a commit empties or
/// drops it (DuckDB forgets at its next checkpoint instead).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletedRowCounts(std::collections::BTreeMap<TableRef, u64>);

/// The tag of [`DeletedRowCounts`]' children in `sys/head`.
const DELETED_ROWS_TAG: u8 = 1;

impl DeletedRowCounts {
    /// The counts a `sys/head` value holds; none in one written before them.
    pub fn of_head(bytes: &[u8]) -> Result<DeletedRowCounts> {
        let record = decode_record(HEAD_TAG, bytes)?;
        let mut counts = std::collections::BTreeMap::new();
        for row in record.children_of(DELETED_ROWS_TAG) {
            match row.as_slice() {
                [Cell::Text(name), Cell::Int(count)] => {
                    if let (Some(table), Ok(count)) = (TableRef::parse(name), u64::try_from(*count))
                    {
                        counts.insert(table, count);
                    }
                }
                _ => {
                    return Err(Error::corruption(
                        "a deleted-row count in sys/head has an unexpected shape",
                    ))
                }
            }
        }
        Ok(DeletedRowCounts(counts))
    }

    pub fn get(&self, table: TableRef) -> u64 {
        self.0.get(&table).copied().unwrap_or(0)
    }

    /// The counts after a commit that deleted `deleted` committed rows from
    /// each table, and emptied or dropped those in `gone`.
    pub fn after(
        &self,
        deleted: impl IntoIterator<Item = (TableRef, u64)>,
        gone: impl IntoIterator<Item = TableRef>,
    ) -> DeletedRowCounts {
        let mut counts = self.0.clone();
        for (table, n) in deleted {
            *counts.entry(table).or_default() += n;
        }
        for table in gone {
            counts.remove(&table);
        }
        counts.retain(|_, n| *n > 0);
        DeletedRowCounts(counts)
    }

    fn add_to(&self, record: &mut Record) {
        for (table, count) in &self.0 {
            let count = i64::try_from(*count).unwrap_or(i64::MAX);
            record.push_child(
                DELETED_ROWS_TAG,
                vec![Cell::Text(table.name()), Cell::Int(count)],
            );
        }
    }
}

/// The record `sys/format` holds, framed with [`FORMAT_TAG`]: the layout
/// version and the moraine that wrote it.
pub fn format_record() -> Record {
    Record::new(vec![
        Cell::Int(FORMAT_VERSION),
        Cell::Text(crate::VERSION.to_string()),
    ])
}

pub fn check_format(bytes: &[u8]) -> Result<()> {
    let record = decode_record(FORMAT_TAG, bytes)?;
    match record.row.first() {
        Some(Cell::Int(v)) if *v <= FORMAT_VERSION => Ok(()),
        Some(Cell::Int(v)) => Err(Error::corruption(format!(
            "this store has layout version {v}, written by a newer moraine; this build reads up to {FORMAT_VERSION}"
        ))),
        _ => Err(Error::corruption("sys/format has an unexpected shape")),
    }
}

/// Opens a store as a catalog: what an attach does.
pub async fn open_store(uri: &StoreUri, settings: &StoreSettings) -> Result<Store> {
    let store = Store::open(uri, settings).await?;
    if let Err(e) = check_layout(&store).await {
        let _ = store.close().await;
        return Err(e);
    }
    Ok(store)
}

/// Refuses, at attach, a SlateDB database that is not a moraine catalog and
/// one written by a newer layout, rather than failing at the first statement.
pub async fn check_layout(store: &Store) -> Result<()> {
    let view = store.snapshot().await?;
    match store.get(&view, keys::SYS_FORMAT).await? {
        Some(format) => check_format(&format),
        None if store.is_empty(&view).await? => Ok(()),
        None => Err(Error::InvalidArgument(format!(
            "{} holds a SlateDB database that is not a moraine catalog (it has keys but no moraine layout record)",
            store.uri()
        ))),
    }
}

/// Reads the head at a view; `None` means a store DuckLake has not initialised.
pub async fn read_head(store: &Store, view: &ReadView) -> Result<Option<Head>> {
    if let Some(format) = store.get(view, keys::SYS_FORMAT).await? {
        check_format(&format)?;
    }
    match store.get(view, keys::SYS_HEAD).await? {
        Some(bytes) => Ok(Some(Head::decode(&bytes)?)),
        None => Ok(None),
    }
}

/// Materializes the committed rows of a fixed kind at a view: every version,
/// current and ended, as DuckLake's own queries filter by snapshot.
pub async fn committed_rows(store: &Store, view: &ReadView, kind: Kind) -> Result<Vec<Row>> {
    rows_under(store, view, kind, &record_prefixes(kind)).await
}

/// Rows of a fixed kind visible at snapshot `at`: current rows with
/// `begin <= at`, history rows with `begin <= at < end`; unversioned kinds
/// serve their current rows.
pub fn visible_at(kind: Kind, rows: Vec<Row>, at: i64) -> Vec<Row> {
    match kind.def().lifecycle {
        Lifecycle::Versioned { begin, end } => rows
            .into_iter()
            .filter(|r| {
                let b = r[begin].as_int().unwrap_or(i64::MAX);
                let e = r[end].as_int();
                b <= at && e.is_none_or(|e| at < e)
            })
            .collect(),
        Lifecycle::Snapshot => rows
            .into_iter()
            .filter(|r| {
                r[column!(Snapshot, snapshot_id)]
                    .as_int()
                    .is_some_and(|s| s <= at)
            })
            .collect(),
        _ => rows,
    }
}

/// Checks a row against its table's column types.
pub fn check_row(kind: Kind, row: &[Cell]) -> Result<()> {
    let def = kind.def();
    if row.len() != def.columns.len() {
        return Err(Error::InvalidArgument(format!(
            "{} expects {} columns, got {}",
            def.name,
            def.columns.len(),
            row.len()
        )));
    }
    for (i, (cell, col)) in row.iter().zip(def.columns).enumerate() {
        if !col.ty.accepts(cell) {
            return Err(Error::InvalidArgument(format!(
                "{}.{} cannot hold {cell:?}",
                def.name, col.name
            )));
        }
        if cell.is_null() && def.not_null.contains(&i) {
            return Err(Error::Constraint(format!(
                "{}.{} must not be NULL",
                def.name, col.name
            )));
        }
    }
    Ok(())
}

/// The catalog as DuckLake would see it at one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    pub head: Head,
    pub snapshot_id: i64,
    pub tables: std::collections::BTreeMap<Kind, Vec<Row>>,
}

async fn rows_under(
    store: &Store,
    view: &ReadView,
    kind: Kind,
    prefixes: &[Vec<u8>],
) -> Result<Vec<Row>> {
    let tag = record_tag(kind);
    let mut records = Vec::new();
    for prefix in prefixes {
        for (key, value) in store.scan_prefix(view, prefix).await? {
            records.push(decode_record(tag, &value).map_err(|e| {
                Error::corruption(format!("{} record {key:02x?}: {e}", kind.def().name))
            })?);
        }
    }
    if matches!(
        kind.def().lifecycle,
        Lifecycle::Snapshot | Lifecycle::SnapshotChanges
    ) {
        let expiring = expiring::read(store, view).await?;
        if !expiring.is_empty() {
            records.retain(|r| {
                !r.row
                    .first()
                    .and_then(Cell::as_int)
                    .is_some_and(|id| expiring.contains(id))
            });
        }
    }
    // Insertion order, as a SQL catalog's heap serves it; the sort is stable,
    // so records without an ordinal keep key order.
    records.sort_by_key(|r| r.ordinal);
    Ok(records
        .iter()
        .flat_map(|record| rows_of_record(kind, record))
        .collect())
}

/// The live catalog at head. Reads `current` and the head snapshot record
/// only, so its cost follows the live catalog, not the length of history.
pub async fn dump_head(store: &Store) -> Result<Dump> {
    let view = store.snapshot().await?;
    let head = read_head(store, &view)
        .await?
        .ok_or_else(|| Error::NotFound("the catalog is not initialised".into()))?;
    let head_record = match store.get(&view, &snapshot_key(head.snapshot_id)).await? {
        Some(bytes) => decode_record(Kind::Snapshot.tag(), &bytes)?,
        None => {
            return Err(Error::corruption(format!(
                "head snapshot {} has no record",
                head.snapshot_id
            )))
        }
    };
    let mut tables = std::collections::BTreeMap::new();
    for kind in Kind::ALL {
        let rows = match kind.def().lifecycle {
            Lifecycle::Snapshot | Lifecycle::SnapshotChanges => rows_of_record(kind, &head_record),
            _ => {
                let current: Vec<Vec<u8>> = record_prefixes(kind)
                    .into_iter()
                    .filter(|p| p[0] != Subspace::History as u8)
                    .collect();
                rows_under(store, &view, kind, &current).await?
            }
        };
        tables.insert(kind, rows);
    }
    Ok(Dump {
        head,
        snapshot_id: head.snapshot_id,
        tables,
    })
}

/// The catalog at a retained snapshot: current rows with `begin <= at` and
/// history rows with `begin <= at < end`.
pub async fn dump_at(store: &Store, at: i64) -> Result<Dump> {
    let view = store.snapshot().await?;
    let head = read_head(store, &view)
        .await?
        .ok_or_else(|| Error::NotFound("the catalog is not initialised".into()))?;
    let expired = expiring::read(store, &view).await?.contains(at);
    if expired || store.get(&view, &snapshot_key(at)).await?.is_none() {
        return Err(Error::NotFound(format!(
            "snapshot {at} does not exist or has been expired"
        )));
    }
    let mut tables = std::collections::BTreeMap::new();
    for kind in Kind::ALL {
        let rows = rows_under(store, &view, kind, &record_prefixes(kind)).await?;
        let rows = match kind.def().lifecycle {
            Lifecycle::SnapshotChanges => rows
                .into_iter()
                .filter(|r| {
                    r[column!(SnapshotChanges, snapshot_id)]
                        .as_int()
                        .is_some_and(|s| s <= at)
                })
                .collect(),
            _ => visible_at(kind, rows, at),
        };
        tables.insert(kind, rows);
    }
    Ok(Dump {
        head,
        snapshot_id: at,
        tables,
    })
}

/// Repairs `ducklake_schema_versions` for a store that lost rows to an
/// older expiry: a table whose oldest data file predates its oldest known
/// schema version gets a floor row at that file's begin snapshot, carrying
/// the oldest schema version still known. DuckLake's compaction planner
/// needs every file to resolve the schema version it was written under.
///
/// The data files are read cell by cell, so packed ones stay packed.
pub fn repair_schema_versions(rows: &mut Vec<Row>, data_files: &Rows) {
    use std::collections::BTreeMap;
    let mut oldest_file: BTreeMap<i64, i64> = BTreeMap::new();
    for file in 0..data_files.len() {
        if let (Some(table), Some(begin)) = (
            data_files.cell(file, column!(DataFile, table_id)).as_int(),
            data_files
                .cell(file, column!(DataFile, begin_snapshot))
                .as_int(),
        ) {
            let slot = oldest_file.entry(table).or_insert(begin);
            *slot = (*slot).min(begin);
        }
    }
    let mut oldest_known: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for row in rows.iter() {
        if let (Some(begin), Some(version), Some(table)) = (
            row[column!(SchemaVersions, begin_snapshot)].as_int(),
            row[column!(SchemaVersions, schema_version)].as_int(),
            row[column!(SchemaVersions, table_id)].as_int(),
        ) {
            let slot = oldest_known.entry(table).or_insert((begin, version));
            if begin < slot.0 {
                *slot = (begin, version);
            }
        }
    }
    for (table, file_begin) in oldest_file {
        if let Some((known_begin, version)) = oldest_known.get(&table) {
            if file_begin < *known_begin {
                rows.push(catalog_row!(SchemaVersions {
                    begin_snapshot: Cell::Int(file_begin),
                    schema_version: Cell::Int(*version),
                    table_id: Cell::Int(table),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::value::encode_record;

    #[test]
    fn deleted_row_counts_ride_in_the_head_and_an_older_head_has_none() {
        let head = Head {
            snapshot_id: 7,
            batch_count: 9,
        };
        let older = encode_record(HEAD_TAG, &Record::new(vec![Cell::Int(7), Cell::Int(9)]));
        assert_eq!(
            DeletedRowCounts::of_head(&older).unwrap(),
            DeletedRowCounts::default()
        );

        let snapshots = TableRef::Fixed(Kind::Snapshot);
        let inlined = TableRef::InlineData {
            table_id: 3,
            schema_version: 2,
        };
        let counts = DeletedRowCounts::default().after([(snapshots, 4), (inlined, 2)], []);
        let bytes = encode_record(HEAD_TAG, &head.record(&counts));
        assert_eq!(Head::decode(&bytes).unwrap(), head);
        let read = DeletedRowCounts::of_head(&bytes).unwrap();
        assert_eq!(read, counts);
        assert_eq!((read.get(snapshots), read.get(inlined)), (4, 2));

        let later = read.after([(snapshots, 1)], [inlined]);
        assert_eq!((later.get(snapshots), later.get(inlined)), (5, 0));
    }
}
