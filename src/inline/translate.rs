//! Commit translation for the two inline families, beside their key layout
//! ([`super`]).
//!
//! Inserted rows are gathered per (table, schema version, begin snapshot)
//! and become one chunk each when the commit finishes. Row-version deletes
//! (RFC 0007: expiry of inlined versions, and the flush drain) are gathered
//! per (table, schema version) and applied chunk by chunk when the commit
//! finishes, after every insert and drain of the same commit is known: a
//! wholly selected chunk is removed, a partly selected one is rewritten in
//! place with the rows that stay, in their order. `end_snapshot` lives
//! apart, as an end mark.

use super::{
    chunk_coordinates, chunk_key, chunk_prefix, chunk_record, delete_table_key, deleted_row_key,
    deleted_row_prefix, ended_key, ended_prefix, int_record, schema_key, schema_record,
    BEGIN_SNAPSHOT, CHUNK, DELETED_BEGIN_SNAPSHOT, DELETED_FILE_ID, DELETED_ROW, DELETED_ROW_ID,
    DELETE_COLUMN_NAMES, DELETE_TABLE, ENDED, END_SNAPSHOT, ROW_ID, SCHEMA, SYSTEM_COLUMNS,
};
use crate::catalog::writes::WriteSet;
use crate::catalog::{Cell, ColumnDesc, Row};
use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use std::collections::{BTreeMap, BTreeSet};

/// What one commit does to inlined data beyond single keys.
#[derive(Default)]
pub struct InlineCommit {
    /// Inlined rows `[row_id, user values…]` inserted by this commit, per
    /// (table, schema version, begin snapshot).
    new_chunks: BTreeMap<(i64, i64, i64), Vec<Row>>,
    /// Inlined row versions this commit deletes, per (table, schema
    /// version): `(row_id, begin_snapshot)`, deduplicated.
    deletes: BTreeMap<(i64, i64), BTreeSet<(i64, i64)>>,
}

impl InlineCommit {
    /// `CREATE TABLE ducklake_inlined_data_<t>_<v>`: `columns` are all of
    /// them, the system columns first.
    pub fn create_data_table(
        &mut self,
        writes: &mut WriteSet<'_>,
        table_id: i64,
        version: i64,
        columns: &[ColumnDesc],
    ) {
        let user = columns.get(SYSTEM_COLUMNS..).unwrap_or_default();
        writes.put(
            schema_key(table_id, version),
            SCHEMA,
            schema_record(table_id, version, user),
        );
    }

    /// `DROP TABLE ducklake_inlined_data_<t>_<v>`: the table, its chunks and
    /// end marks, and whatever this commit inserted into it.
    pub async fn drop_data_table(
        &mut self,
        writes: &mut WriteSet<'_>,
        table_id: i64,
        version: i64,
    ) -> Result<()> {
        writes.remove(schema_key(table_id, version));
        for prefix in [
            chunk_prefix(table_id, version),
            ended_prefix(table_id, version),
        ] {
            for key in writes.live_keys(&prefix).await? {
                writes.remove(key);
            }
        }
        self.new_chunks
            .retain(|(t, v, _), _| (*t, *v) != (table_id, version));
        Ok(())
    }

    pub fn insert_data_row(
        &mut self,
        writes: &mut WriteSet<'_>,
        table_id: i64,
        version: i64,
        row: &Row,
    ) -> Result<()> {
        let (row_id, begin) = identity(row)?;
        let mut stored = vec![Cell::Int(row_id)];
        stored.extend(row[SYSTEM_COLUMNS..].iter().cloned());
        self.new_chunks
            .entry((table_id, version, begin))
            .or_default()
            .push(stored);
        if let Cell::Int(end) = row[END_SNAPSHOT] {
            writes.put(
                ended_key(table_id, version, row_id, begin),
                ENDED,
                int_record(end),
            );
        }
        Ok(())
    }

    /// Only `end_snapshot` of an inlined row changes (DuckLake's inlined
    /// deletes): it sets or clears the row's end mark.
    pub fn update_data_row(
        &mut self,
        writes: &mut WriteSet<'_>,
        table_id: i64,
        version: i64,
        old: &Row,
        new: &Row,
    ) -> Result<()> {
        let (row_id, begin) = identity(old)?;
        if identity(new)? != (row_id, begin) || old[SYSTEM_COLUMNS..] != new[SYSTEM_COLUMNS..] {
            return Err(Error::Unsupported(
                "only end_snapshot of inlined rows can be updated".into(),
            ));
        }
        let key = ended_key(table_id, version, row_id, begin);
        match new[END_SNAPSHOT] {
            Cell::Int(end) => writes.put(key, ENDED, int_record(end)),
            _ => writes.remove(key),
        }
        Ok(())
    }

    /// Deletes one row version. A row this commit inserted simply goes;
    /// a stored one joins the selection applied when the commit finishes.
    pub fn delete_data_row(
        &mut self,
        writes: &mut WriteSet<'_>,
        table_id: i64,
        version: i64,
        row: &Row,
    ) -> Result<()> {
        let (row_id, begin) = identity(row)?;
        writes.remove(ended_key(table_id, version, row_id, begin));
        if let Some(rows) = self.new_chunks.get_mut(&(table_id, version, begin)) {
            if let Some(at) = rows.iter().position(|r| r[0] == Cell::Int(row_id)) {
                rows.remove(at);
                return Ok(());
            }
        }
        self.deletes
            .entry((table_id, version))
            .or_default()
            .insert((row_id, begin));
        Ok(())
    }

    /// Applies the gathered deletes, then writes the new chunks.
    /// `first_unwritten` is the lowest snapshot id nothing stored begins at;
    /// `newest` is the snapshot this commit leaves as the head, after which
    /// no inserted row may begin.
    pub async fn finish(
        mut self,
        writes: &mut WriteSet<'_>,
        first_unwritten: i64,
        newest: Option<i64>,
    ) -> Result<()> {
        self.apply_deletes(writes).await?;
        self.write_new_chunks(writes, first_unwritten, newest).await
    }

    /// A wholly selected chunk is removed; a partly selected one is
    /// rewritten with the rows that stay, under its own key, so they keep
    /// their place in insertion order. A selected version that no chunk
    /// holds fails the commit.
    async fn apply_deletes(&mut self, writes: &mut WriteSet<'_>) -> Result<()> {
        for ((table_id, version), mut wanted) in std::mem::take(&mut self.deletes) {
            let begins: BTreeSet<i64> = wanted.iter().map(|(_, b)| *b).collect();
            for begin in begins {
                for key in writes
                    .live_keys(&begin_prefix(table_id, version, begin))
                    .await?
                {
                    let Some(chunk) = writes.load(&key, CHUNK).await? else {
                        continue;
                    };
                    let rows = chunk.children_of(CHUNK);
                    let (gone, kept): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| {
                        stored_row_id(r).is_some_and(|id| wanted.contains(&(id, begin)))
                    });
                    if gone.is_empty() {
                        continue;
                    }
                    for r in &gone {
                        if let Some(id) = stored_row_id(r) {
                            wanted.remove(&(id, begin));
                        }
                    }
                    match kept.is_empty() {
                        true => writes.remove(key),
                        false => {
                            let kept: Vec<Row> = kept.into_iter().cloned().collect();
                            writes.put(key, CHUNK, chunk_record(&kept));
                        }
                    }
                }
            }
            if let Some((row_id, begin)) = wanted.into_iter().next() {
                return Err(Error::NotFound(format!(
                    "DELETE from ducklake_inlined_data_{table_id}_{version}: inlined row {row_id} \
                     (begin snapshot {begin}) does not exist"
                )));
            }
        }
        Ok(())
    }

    /// One chunk per (table, schema version, begin snapshot) this commit
    /// inserted, numbered after the chunks already there. A chunk beginning
    /// at a snapshot nothing stored belongs to is the first of its begin,
    /// which spares the usual insert (rows of the commit's own snapshot) a
    /// scan.
    async fn write_new_chunks(
        &mut self,
        writes: &mut WriteSet<'_>,
        first_unwritten: i64,
        newest: Option<i64>,
    ) -> Result<()> {
        for ((table_id, version, begin), rows) in std::mem::take(&mut self.new_chunks) {
            if rows.is_empty() {
                continue;
            }
            if let Some(newest) = newest.filter(|newest| begin > *newest) {
                return Err(Error::Constraint(format!(
                    "ducklake_inlined_data_{table_id}_{version}: rows begin at snapshot {begin}, \
                     after this commit's snapshot {newest}"
                )));
            }
            let mut seq = 0;
            if begin < first_unwritten {
                for key in writes
                    .live_keys(&begin_prefix(table_id, version, begin))
                    .await?
                {
                    seq = seq.max(chunk_coordinates(&key)?.1 + 1);
                }
            }
            writes.put(
                chunk_key(table_id, version, begin, seq),
                CHUNK,
                chunk_record(&rows),
            );
        }
        Ok(())
    }
}

/// `CREATE TABLE ducklake_inlined_delete_<t>`.
pub fn create_delete_table(writes: &mut WriteSet<'_>, table_id: i64) {
    writes.put(
        delete_table_key(table_id),
        DELETE_TABLE,
        int_record(table_id),
    );
}

/// `DROP TABLE ducklake_inlined_delete_<t>`: the table and its rows.
pub async fn drop_delete_table(writes: &mut WriteSet<'_>, table_id: i64) -> Result<()> {
    writes.remove(delete_table_key(table_id));
    for key in writes.live_keys(&deleted_row_prefix(table_id)).await? {
        writes.remove(key);
    }
    Ok(())
}

pub fn insert_deleted_row(writes: &mut WriteSet<'_>, table_id: i64, row: &Row) -> Result<()> {
    let key = deleted_row_location(table_id, row)?;
    let begin = row[DELETED_BEGIN_SNAPSHOT]
        .as_int()
        .ok_or_else(|| Error::InvalidArgument("begin_snapshot must not be NULL".into()))?;
    writes.put(key, DELETED_ROW, int_record(begin));
    Ok(())
}

pub async fn delete_deleted_row(writes: &mut WriteSet<'_>, table_id: i64, row: &Row) -> Result<()> {
    let key = deleted_row_location(table_id, row)?;
    if writes.load(&key, DELETED_ROW).await?.is_none() {
        return Err(Error::NotFound(format!(
            "inlined deletion {row:?} does not exist"
        )));
    }
    writes.remove(key);
    Ok(())
}

fn deleted_row_location(table_id: i64, row: &Row) -> Result<Vec<u8>> {
    if row.len() != DELETE_COLUMN_NAMES.len() {
        return Err(Error::InvalidArgument(format!(
            "ducklake_inlined_delete_{table_id} rows have {} columns, not {}",
            DELETE_COLUMN_NAMES.len(),
            row.len()
        )));
    }
    match (&row[DELETED_FILE_ID], &row[DELETED_ROW_ID]) {
        (Cell::Int(file_id), Cell::Int(row_id)) => Ok(deleted_row_key(table_id, *file_id, *row_id)),
        _ => Err(Error::InvalidArgument(
            "file_id and row_id must not be NULL".into(),
        )),
    }
}

/// The chunks of one begin snapshot of an inlined data table.
fn begin_prefix(table_id: i64, version: i64, begin: i64) -> Vec<u8> {
    keys::key(
        Subspace::Inline,
        Some(CHUNK),
        &[Cell::Int(table_id), Cell::Int(version), Cell::Int(begin)],
    )
}

/// The row id of a row as a chunk stores it (`[row_id, user values…]`).
fn stored_row_id(row: &Row) -> Option<i64> {
    row.first().and_then(Cell::as_int)
}

/// `(row_id, begin_snapshot)` of a full inlined data row.
fn identity(row: &Row) -> Result<(i64, i64)> {
    if row.len() < SYSTEM_COLUMNS {
        return Err(Error::InvalidArgument(format!(
            "an inlined data row has at least {SYSTEM_COLUMNS} columns, not {}",
            row.len()
        )));
    }
    match (&row[ROW_ID], &row[BEGIN_SNAPSHOT]) {
        (Cell::Int(row_id), Cell::Int(begin)) => Ok((*row_id, *begin)),
        _ => Err(Error::InvalidArgument(
            "row_id and begin_snapshot of an inlined row must not be NULL".into(),
        )),
    }
}
