//! Read-your-writes: staged operations applied to committed rows.
//!
//! One function serves every table. Staged rows are DuckLake's own cells, so
//! applying them needs no translation: an insert appends, a delete removes
//! the exact row the scan emitted, an update replaces it, and a dropped
//! inline table shows no rows. Kinds that ride a parent record (embedded
//! rows, snapshot changes) show only rows whose parent is still visible, so a
//! transaction that deleted a data file no longer sees its partition values.
//! The overlay validates nothing; refusals belong to commit translation.

use super::StagedOp;
use crate::catalog::{Kind, Lifecycle, Row, TableRef};

/// The table whose visible rows decide which of `table`'s rows survive.
pub fn parent_table(table: TableRef) -> Option<TableRef> {
    let TableRef::Fixed(kind) = table else {
        return None;
    };
    match kind.def().lifecycle {
        Lifecycle::Embedded { parent, .. } => Some(TableRef::Fixed(parent)),
        Lifecycle::SnapshotChanges => Some(TableRef::Fixed(Kind::Snapshot)),
        _ => None,
    }
}

fn link(table: TableRef) -> &'static [(usize, usize)] {
    let TableRef::Fixed(kind) = table else {
        return &[];
    };
    match kind.def().lifecycle {
        Lifecycle::Embedded { link, .. } => link,
        Lifecycle::SnapshotChanges => &[(0, 0)],
        _ => &[],
    }
}

/// Whether a staged operation can change what a scan of `table` shows.
pub fn affects(op: &StagedOp, table: TableRef) -> bool {
    op.table() == table || parent_table(table).is_some_and(|p| affects(op, p))
}

pub fn apply(
    table: TableRef,
    committed: &[Row],
    ops: &[StagedOp],
    parent_rows: Option<&[Row]>,
) -> Vec<Row> {
    let mut rows = committed.to_vec();
    for op in ops.iter().filter(|op| op.table() == table) {
        match op {
            StagedOp::Insert { row, .. } => rows.push(row.clone()),
            StagedOp::Delete { row, .. } => {
                if let Some(at) = rows.iter().position(|r| r == row) {
                    rows.remove(at);
                }
            }
            StagedOp::Update { old, new, .. } => {
                if let Some(r) = rows.iter_mut().find(|r| *r == old) {
                    *r = new.clone();
                }
            }
            StagedOp::DropTable { .. } => rows.clear(),
            StagedOp::CreateTable { .. } => {}
        }
    }
    if let Some(parents) = parent_rows {
        let link = link(table);
        rows.retain(|child| {
            parents
                .iter()
                .any(|p| link.iter().all(|&(c, pc)| child.get(c) == p.get(pc)))
        });
    }
    rows
}
