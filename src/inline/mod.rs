//! Inlined data: DuckLake's `ducklake_inlined_data_<table>_<version>` and
//! `ducklake_inlined_delete_<table>` tables, stored in the `inline` subspace.
//!
//! Layout (all keys under `Subspace::Inline`):
//! - `schema (table_id, schema_version)`: the column names and DuckDB types
//!   DuckLake created the table with; its presence means the table exists.
//! - `chunk (table_id, schema_version, begin_snapshot, seq)`: the rows one
//!   commit inserted, each `[row_id, user values…]`, in insertion order. User values are opaque
//!   DuckDB values serialized by the shim, so every type DuckLake inlines,
//!   nested ones included, round-trips exactly.
//! - `ended (table_id, schema_version, row_id, begin_snapshot)`: the
//!   `end_snapshot` DuckLake set on a row version.
//! - `delete_table (table_id)`: marker that `ducklake_inlined_delete_<t>` exists.
//! - `deleted_row (table_id, file_id, row_id)`: one inlined file deletion,
//!   valued by its `begin_snapshot`.

pub mod translate;

use crate::catalog::{Cell, ColumnDesc, Row, Transfer};
use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use crate::store::value::{decode_record, Record};
use crate::store::{ReadView, Store};
use std::collections::HashMap;

pub const SCHEMA: u8 = 1;
pub const CHUNK: u8 = 2;
pub const ENDED: u8 = 3;
pub const DELETE_TABLE: u8 = 4;
pub const DELETED_ROW: u8 = 5;

/// The system columns DuckLake declares first in every inlined data table.
const SYSTEM_COLUMN_NAMES: [&str; 3] = ["row_id", "begin_snapshot", "end_snapshot"];

/// The inline record types, each with its reclamation path: the inline
/// families' counterpart of [`crate::catalog::Kind::reclaim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineRecord {
    Schema,
    Chunk,
    Ended,
    DeleteTable,
    DeletedRow,
}

impl InlineRecord {
    pub const ALL: [InlineRecord; 5] = [
        InlineRecord::Schema,
        InlineRecord::Chunk,
        InlineRecord::Ended,
        InlineRecord::DeleteTable,
        InlineRecord::DeletedRow,
    ];

    /// The record type byte after the `inline` subspace.
    pub fn byte(self) -> u8 {
        match self {
            InlineRecord::Schema => SCHEMA,
            InlineRecord::Chunk => CHUNK,
            InlineRecord::Ended => ENDED,
            InlineRecord::DeleteTable => DELETE_TABLE,
            InlineRecord::DeletedRow => DELETED_ROW,
        }
    }

    pub fn from_byte(byte: u8) -> Option<InlineRecord> {
        InlineRecord::ALL.into_iter().find(|r| r.byte() == byte)
    }

    pub fn name(self) -> &'static str {
        match self {
            InlineRecord::Schema => "schema",
            InlineRecord::Chunk => "chunk",
            InlineRecord::Ended => "ended",
            InlineRecord::DeleteTable => "delete_table",
            InlineRecord::DeletedRow => "deleted_row",
        }
    }

    /// How this record type's bytes are reclaimed. Exhaustive on purpose.
    /// Every one goes when DuckLake flushes the inlined rows, expires their
    /// versions, or drops the inlined table (a DROP of an inlined data or
    /// deletion table removes all of its keys).
    pub fn reclaim(self) -> crate::catalog::Reclaim {
        match self {
            InlineRecord::Schema
            | InlineRecord::Chunk
            | InlineRecord::Ended
            | InlineRecord::DeleteTable
            | InlineRecord::DeletedRow => crate::catalog::Reclaim::InlineFlush,
        }
    }
}

/// Number of leading system columns in an inlined data row.
pub const SYSTEM_COLUMNS: usize = SYSTEM_COLUMN_NAMES.len();
/// Positions of the system columns in an inlined data row.
pub const ROW_ID: usize = 0;
pub const BEGIN_SNAPSHOT: usize = 1;
pub const END_SNAPSHOT: usize = 2;

/// The columns of `ducklake_inlined_delete_<t>`, and their positions.
const DELETE_COLUMN_NAMES: [&str; 3] = ["file_id", "row_id", "begin_snapshot"];
pub const DELETED_FILE_ID: usize = 0;
pub const DELETED_ROW_ID: usize = 1;
pub const DELETED_BEGIN_SNAPSHOT: usize = 2;

pub fn schema_key(table_id: i64, schema_version: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(SCHEMA),
        &[Cell::Int(table_id), Cell::Int(schema_version)],
    )
}

pub fn chunk_prefix(table_id: i64, schema_version: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(CHUNK),
        &[Cell::Int(table_id), Cell::Int(schema_version)],
    )
}

pub fn chunk_key(table_id: i64, schema_version: i64, begin: i64, seq: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(CHUNK),
        &[
            Cell::Int(table_id),
            Cell::Int(schema_version),
            Cell::Int(begin),
            Cell::Int(seq),
        ],
    )
}

pub fn ended_prefix(table_id: i64, schema_version: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(ENDED),
        &[Cell::Int(table_id), Cell::Int(schema_version)],
    )
}

pub fn ended_key(table_id: i64, schema_version: i64, row_id: i64, begin: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(ENDED),
        &[
            Cell::Int(table_id),
            Cell::Int(schema_version),
            Cell::Int(row_id),
            Cell::Int(begin),
        ],
    )
}

pub fn delete_table_key(table_id: i64) -> Vec<u8> {
    keys::key(Subspace::Inline, Some(DELETE_TABLE), &[Cell::Int(table_id)])
}

pub fn deleted_row_prefix(table_id: i64) -> Vec<u8> {
    keys::key(Subspace::Inline, Some(DELETED_ROW), &[Cell::Int(table_id)])
}

pub fn deleted_row_key(table_id: i64, file_id: i64, row_id: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(DELETED_ROW),
        &[Cell::Int(table_id), Cell::Int(file_id), Cell::Int(row_id)],
    )
}

/// The record that marks an inlined data table as existing, with its user
/// columns.
pub fn schema_record(table_id: i64, schema_version: i64, user_columns: &[ColumnDesc]) -> Record {
    let mut record = Record::new(vec![Cell::Int(table_id), Cell::Int(schema_version)]);
    for c in user_columns {
        record.push_child(
            SCHEMA,
            vec![Cell::Text(c.name.clone()), Cell::Text(c.type_name.clone())],
        );
    }
    record
}

pub fn decode_schema(bytes: &[u8]) -> Result<Vec<ColumnDesc>> {
    let record = decode_record(SCHEMA, bytes)?;
    record
        .children_of(SCHEMA)
        .iter()
        .map(|r| match r.as_slice() {
            [Cell::Text(name), Cell::Text(ty)] => Ok(ColumnDesc {
                name: name.clone(),
                type_name: ty.clone(),
                transfer: Transfer::Value,
            }),
            _ => Err(Error::corruption(
                "inline schema column has an unexpected shape",
            )),
        })
        .collect()
}

/// The full column list of an inlined data table: the three system columns
/// DuckLake declares, then the user columns.
pub fn data_columns(user_columns: &[ColumnDesc]) -> Vec<ColumnDesc> {
    let mut cols: Vec<ColumnDesc> = SYSTEM_COLUMN_NAMES
        .iter()
        .map(|n| ColumnDesc::catalog(n, crate::catalog::ColumnType::BigInt))
        .collect();
    cols.extend(user_columns.iter().cloned());
    cols
}

pub fn delete_columns() -> Vec<ColumnDesc> {
    DELETE_COLUMN_NAMES
        .iter()
        .map(|n| ColumnDesc::catalog(n, crate::catalog::ColumnType::BigInt))
        .collect()
}

/// A chunk: rows `[row_id, user values…]` one commit inserted.
pub fn chunk_record(rows: &[Row]) -> Record {
    let mut record = Record::default();
    for r in rows {
        record.push_child(CHUNK, r.clone());
    }
    record
}

pub fn decode_chunk(bytes: &[u8]) -> Result<Vec<Row>> {
    Ok(decode_record(CHUNK, bytes)?.children_of(CHUNK).to_vec())
}

/// An end mark or an inlined deletion: one snapshot id.
pub fn int_record(v: i64) -> Record {
    Record::new(vec![Cell::Int(v)])
}

pub fn decode_int(tag: u8, bytes: &[u8]) -> Result<i64> {
    decode_record(tag, bytes)?
        .row
        .first()
        .and_then(Cell::as_int)
        .ok_or_else(|| Error::corruption("inline integer record has an unexpected shape"))
}

/// The begin snapshot and sequence a chunk key ends with.
pub fn chunk_coordinates(key: &[u8]) -> Result<(i64, i64)> {
    let cells = keys::decode_cells(key, 2)?;
    match cells.as_slice() {
        [_, _, Cell::Int(begin), Cell::Int(seq)] => Ok((*begin, *seq)),
        _ => Err(Error::corruption(
            "inline chunk key has an unexpected shape",
        )),
    }
}

/// Assembles full rows `[row_id, begin, end, user…]` from chunks and end marks.
pub fn assemble_rows(chunks: &[(i64, Vec<Row>)], ended: &HashMap<(i64, i64), i64>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (begin, chunk_rows) in chunks {
        for r in chunk_rows {
            let Some(row_id) = r.first().and_then(Cell::as_int) else {
                continue;
            };
            let end = ended
                .get(&(row_id, *begin))
                .map_or(Cell::Null, |e| Cell::Int(*e));
            let mut full = vec![Cell::Int(row_id), Cell::Int(*begin), end];
            full.extend(r[1..].iter().cloned());
            rows.push(full);
        }
    }
    rows
}

pub fn ended_coordinates(key: &[u8]) -> Result<(i64, i64)> {
    let cells = keys::decode_cells(key, 2)?;
    match cells.as_slice() {
        [_, _, Cell::Int(row_id), Cell::Int(begin)] => Ok((*row_id, *begin)),
        _ => Err(Error::corruption(
            "inline end-mark key has an unexpected shape",
        )),
    }
}

pub async fn committed_data_rows(
    store: &Store,
    view: &ReadView,
    table_id: i64,
    schema_version: i64,
) -> Result<Vec<Row>> {
    let mut chunks = Vec::new();
    for (key, value) in store
        .scan_prefix(view, &chunk_prefix(table_id, schema_version))
        .await?
    {
        let (begin, _) = chunk_coordinates(&key)?;
        chunks.push((begin, decode_chunk(&value)?));
    }
    let mut ended = HashMap::new();
    for (key, value) in store
        .scan_prefix(view, &ended_prefix(table_id, schema_version))
        .await?
    {
        ended.insert(ended_coordinates(&key)?, decode_int(ENDED, &value)?);
    }
    let mut rows = assemble_rows(&chunks, &ended);
    sort_data_rows(&mut rows);
    Ok(rows)
}

/// Inlined rows in insertion order, the order a DuckDB table keeps them in.
/// The store serves them by begin snapshot, then by chunk sequence and
/// position, which is that order because a commit's rows all begin at its
/// own snapshot and a partial delete rewrites a chunk in place. The sort is
/// stable, so it only moves rows that began earlier ahead of later ones.
pub fn sort_data_rows(rows: &mut [Row]) {
    rows.sort_by(|a, b| order_by(&DATA_ROW_ORDER, a, b));
}

/// The columns [`sort_data_rows`] orders by; rows equal in them keep their
/// insertion order (not their row ids: an UPDATE inserts row versions in the
/// order it meets them).
pub const DATA_ROW_ORDER: [usize; 1] = [BEGIN_SNAPSHOT];

/// The order of rows by the cells of `columns`, a missing one first.
pub fn order_by(columns: &[usize], a: &Row, b: &Row) -> std::cmp::Ordering {
    let a = columns.iter().map(|&c| a.get(c));
    a.cmp(columns.iter().map(|&c| b.get(c)))
}

/// Inlined deletions in insertion order: by the snapshot that deleted them,
/// then by file and row.
pub fn sort_delete_rows(rows: &mut [Row]) {
    rows.sort_by(|a, b| order_by(&DELETE_ROW_ORDER, a, b));
}

/// The columns [`sort_delete_rows`] orders by.
pub const DELETE_ROW_ORDER: [usize; 3] = [DELETED_BEGIN_SNAPSHOT, DELETED_FILE_ID, DELETED_ROW_ID];

pub async fn committed_delete_rows(
    store: &Store,
    view: &ReadView,
    table_id: i64,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (key, value) in store
        .scan_prefix(view, &deleted_row_prefix(table_id))
        .await?
    {
        let cells = keys::decode_cells(&key, 2)?;
        let [_, file_id, row_id] = cells.as_slice() else {
            return Err(Error::corruption(
                "inline deletion key has an unexpected shape",
            ));
        };
        rows.push(vec![
            file_id.clone(),
            row_id.clone(),
            Cell::Int(decode_int(DELETED_ROW, &value)?),
        ]);
    }
    sort_delete_rows(&mut rows);
    Ok(rows)
}

/// Every inlined data table that exists at a view, with its user columns.
pub async fn committed_schemas(
    store: &Store,
    view: &ReadView,
) -> Result<Vec<((i64, i64), Vec<ColumnDesc>)>> {
    let mut out = Vec::new();
    for (key, value) in store
        .scan_prefix(view, &keys::prefix(Subspace::Inline, Some(SCHEMA)))
        .await?
    {
        let cells = keys::decode_cells(&key, 2)?;
        let [Cell::Int(t), Cell::Int(v)] = cells.as_slice() else {
            return Err(Error::corruption(
                "inline schema key has an unexpected shape",
            ));
        };
        out.push(((*t, *v), decode_schema(&value)?));
    }
    Ok(out)
}

pub async fn committed_delete_tables(store: &Store, view: &ReadView) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for (key, _) in store
        .scan_prefix(view, &keys::prefix(Subspace::Inline, Some(DELETE_TABLE)))
        .await?
    {
        if let Some(Cell::Int(t)) = keys::decode_cells(&key, 2)?.first() {
            out.push(*t);
        }
    }
    Ok(out)
}
