//! Read-your-writes: staged operations applied to committed rows.
//!
//! One function serves every table. Staged rows are DuckLake's own cells, so
//! applying them needs no translation: an insert appends, a delete removes
//! the exact row the scan emitted, an update replaces it in place, and a
//! dropped inline table shows no rows. That is the order a SQL catalog's heap
//! keeps, and the order the store serves (records carry insertion ordinals),
//! so the rows a transaction saw are the rows the next one reads. Kinds that
//! ride a parent record (embedded rows, snapshot changes) show only rows
//! whose parent is still visible, so a transaction that deleted a data file
//! no longer sees its partition values. The overlay validates nothing;
//! refusals belong to commit translation.
//!
//! Applying costs time in the rows and operations involved, never their
//! product: deletes and updates find their row through a hash index, and the
//! parent filter through a hash set.

use super::StagedOp;
use crate::catalog::{Cell, Kind, Lifecycle, Row, Rows, TableRef};
use crate::inline;
use crate::store::value::CellRef;
use foldhash::fast::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

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

/// Whether an operation can take rows away from `table`'s parent, which
/// hides the children linked to them (an insert never can).
pub fn can_hide_children(op: &StagedOp) -> bool {
    !matches!(op, StagedOp::Insert { .. } | StagedOp::CreateTable { .. })
}

/// `committed` with the operations on `table` applied, in order.
pub fn apply(
    table: TableRef,
    committed: &[Row],
    ops: &[StagedOp],
    parent_rows: Option<&[Row]>,
) -> Vec<Row> {
    let mut rows = committed.to_vec();
    apply_in_place(table, &mut rows, ops);
    if let Some(parents) = parent_rows {
        retain_linked(table, &mut rows, parents);
    }
    rows
}

/// Applies the operations on `table` to `rows`, in order.
pub fn apply_in_place(table: TableRef, rows: &mut Vec<Row>, ops: &[StagedOp]) {
    let mine: Vec<&StagedOp> = ops.iter().filter(|op| op.table() == table).collect();
    if mine.is_empty() {
        return;
    }
    let finds_rows = mine
        .iter()
        .any(|op| matches!(op, StagedOp::Delete { .. } | StagedOp::Update { .. }));
    if !finds_rows {
        for op in mine {
            match op {
                StagedOp::Insert { row, .. } => rows.push(row.clone()),
                StagedOp::DropTable { .. } => rows.clear(),
                _ => {}
            }
        }
    } else {
        let mut slots = Slots::new(std::mem::take(rows));
        for op in mine {
            match op {
                StagedOp::Insert { row, .. } => slots.push(row.clone()),
                StagedOp::Delete { row, .. } => {
                    slots.take(row);
                }
                StagedOp::Update { old, new, .. } => slots.replace(old, new.clone()),
                StagedOp::DropTable { .. } => slots = Slots::new(Vec::new()),
                StagedOp::CreateTable { .. } => {}
            }
        }
        *rows = slots.into_rows();
    }
    canonical_order(table, rows);
}

/// `rows` with the operations on `table` applied, in order: packed rows
/// stay packed where [`edited`] can apply the operations to them; any
/// others are decoded into a copy, which leaves `rows` as they were.
pub fn applied(table: TableRef, rows: &Rows, ops: &[StagedOp]) -> Rows {
    edited(table, rows, ops).unwrap_or_else(|| {
        let mut rows = rows.clone();
        rows.change(|rows| apply_in_place(table, rows, ops));
        rows
    })
}

/// `committed` with the operations on `table` applied, when packed rows
/// take them as they are ([`Rows::edited`]): an expiry deletes thousands of
/// snapshots, and an update of inlined data ends one row of thousands, and
/// neither decodes, hashes or sorts the rest. That is so when the rows are
/// packed, no operation but inserts, deletes and updates touches the table,
/// no update or delete is of a row the operations bring themselves (then it
/// might find that one), and the rows brought leave the table in the order
/// [`canonical_order`] keeps. Deletes alone keep the order of the rest.
pub fn edited(table: TableRef, committed: &Rows, ops: &[StagedOp]) -> Option<Rows> {
    let (mut edits, mut added) = (Vec::new(), Vec::new());
    for op in ops.iter().filter(|op| op.table() == table) {
        match op {
            StagedOp::Delete { row, .. } => edits.push((row, None)),
            StagedOp::Update { old, new, .. } => edits.push((old, Some(new))),
            StagedOp::Insert { row, .. } => added.push(row),
            StagedOp::CreateTable { .. } | StagedOp::DropTable { .. } => return None,
        }
    }
    let brought: HashSet<&Row, RandomState> = edits
        .iter()
        .filter_map(|&(_, new)| new)
        .chain(added.iter().copied())
        .collect();
    if edits.iter().any(|(old, _)| brought.contains(old)) {
        return None;
    }
    let rows = committed.edited(&edits, &added)?;
    let in_order = brought.is_empty()
        || order_columns(table).is_none_or(|columns| {
            let packed = &rows;
            let key = |at: usize| columns.iter().map(move |&c| packed.cell(at, c).to_cell());
            (1..rows.len()).all(|at| key(at - 1).le(key(at)))
        });
    in_order.then_some(rows)
}

/// The rows `ops` add to `table` after `last`, when adding them is all the
/// operations do to it and appending keeps the order the store serves: then
/// carrying the table across the commit is an append.
pub fn only_appended(
    table: TableRef,
    ops: &[StagedOp],
    last: impl FnOnce() -> Option<Row>,
) -> Option<Vec<&Row>> {
    let added = inserted_only(table, ops)?;
    if order_columns(table).is_none() {
        return Some(added);
    }
    in_store_order(table, last().as_ref(), &added).then_some(added)
}

/// The rows `ops` insert into `table`, when inserting is all they do to it.
pub fn inserted_only(table: TableRef, ops: &[StagedOp]) -> Option<Vec<&Row>> {
    ops.iter()
        .filter(|op| op.table() == table)
        .map(|op| match op {
            StagedOp::Insert { row, .. } => Some(row),
            _ => None,
        })
        .collect()
}

/// Whether `added`, after `last`, keep the order the store serves `table`.
pub fn in_store_order(table: TableRef, last: Option<&Row>, added: &[&Row]) -> bool {
    let Some(columns) = order_columns(table) else {
        return true;
    };
    last.into_iter()
        .chain(added.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .all(|pair| inline::order_by(columns, pair[0], pair[1]).is_le())
}

/// Keeps the order the store serves for tables whose order is derived from
/// their cells rather than kept by ordinals.
pub fn canonical_order(table: TableRef, rows: &mut [Row]) {
    if let Some(columns) = order_columns(table) {
        rows.sort_by(|a, b| inline::order_by(columns, a, b));
    }
}

/// The columns the store serves `table`'s rows in the order of; `None` for
/// tables kept in the order of their records' ordinals.
fn order_columns(table: TableRef) -> Option<&'static [usize]> {
    match table {
        TableRef::InlineData { .. } => Some(&inline::DATA_ROW_ORDER),
        TableRef::InlineDelete { .. } => Some(&inline::DELETE_ROW_ORDER),
        TableRef::Fixed(_) => None,
    }
}

/// `rows` with the operations on child `table` applied ([`applied`]) and
/// only the children whose parent row is among `parents` kept. Packed rows
/// stay packed: an expiry that deletes thousands of snapshots hides their
/// changes this way on every scan of `ducklake_snapshot_changes`, without
/// decoding or copying a row.
pub fn linked(table: TableRef, rows: &Rows, ops: &[StagedOp], parents: &Rows) -> Rows {
    // A child no operation touches itself is filtered as it is, not copied.
    let touched = ops.iter().any(|op| op.table() == table);
    let own = match touched {
        true => std::borrow::Cow::Owned(applied(table, rows, ops)),
        false => std::borrow::Cow::Borrowed(rows),
    };
    let parents = ParentKeys::new(table, parents.len(), |p, c| parents.cell(p, c));
    own.kept(|row| parents.hold(|c| own.cell(row, c)))
}

/// Keeps the children whose parent row is among `parents`.
pub fn retain_linked(table: TableRef, rows: &mut Vec<Row>, parents: &[Row]) {
    fn cell(row: &Row, column: usize) -> CellRef<'_> {
        row.get(column).map_or(CellRef::Null, Cell::as_cell_ref)
    }
    let parents = ParentKeys::new(table, parents.len(), |p, c| cell(&parents[p], c));
    rows.retain(|child| parents.hold(|c| cell(child, c)));
}

/// The link cells of a child table's visible parents: a child is visible
/// when its own link cells are among them.
struct ParentKeys<'a> {
    link: &'static [(usize, usize)],
    keys: LinkKeys<'a>,
}

/// Most links are one cell (a snapshot's id, a data file's id), looked up
/// without building a key for each of thousands of children.
enum LinkKeys<'a> {
    One(HashSet<CellRef<'a>, RandomState>),
    Many(HashSet<Vec<CellRef<'a>>, RandomState>),
}

impl<'a> ParentKeys<'a> {
    /// From the `count` parents that `cell(parent, column)` reads.
    fn new(table: TableRef, count: usize, cell: impl Fn(usize, usize) -> CellRef<'a>) -> Self {
        let link = link(table);
        let keys = match link {
            [(_, pc)] => LinkKeys::One((0..count).map(|p| cell(p, *pc)).collect()),
            _ => LinkKeys::Many(
                (0..count)
                    .map(|p| link.iter().map(|&(_, pc)| cell(p, pc)).collect())
                    .collect(),
            ),
        };
        ParentKeys { link, keys }
    }

    /// Whether the child whose cells `cell(column)` reads has its parent here.
    fn hold<'c>(&'c self, cell: impl Fn(usize) -> CellRef<'c>) -> bool
    where
        'a: 'c,
    {
        match (&self.keys, self.link) {
            (LinkKeys::One(keys), [(c, _)]) => {
                let keys: &HashSet<CellRef<'c>, RandomState> = keys;
                keys.contains(&cell(*c))
            }
            (LinkKeys::Many(keys), _) => {
                let keys: &HashSet<Vec<CellRef<'c>>, RandomState> = keys;
                keys.contains(&self.link.iter().map(|&(c, _)| cell(c)).collect::<Vec<_>>())
            }
            (LinkKeys::One(_), _) => false,
        }
    }
}

/// Rows with a hash index, so a delete or update finds the first equal row
/// without a linear search.
struct Slots {
    rows: Vec<Option<Row>>,
    index: HashMap<u64, Vec<usize>, RandomState>,
    hasher: RandomState,
}

impl Slots {
    fn new(rows: Vec<Row>) -> Self {
        let mut slots = Slots {
            rows: Vec::with_capacity(rows.len()),
            index: HashMap::with_capacity_and_hasher(rows.len(), RandomState::default()),
            hasher: RandomState::default(),
        };
        for row in rows {
            slots.push(row);
        }
        slots
    }

    fn push(&mut self, row: Row) {
        let at = self.rows.len();
        self.index
            .entry(self.hasher.hash_one(&row))
            .or_default()
            .push(at);
        self.rows.push(Some(row));
    }

    /// The position of the first live row equal to `row`.
    fn find(&self, row: &Row) -> Option<usize> {
        self.index
            .get(&self.hasher.hash_one(row))?
            .iter()
            .copied()
            .filter(|&at| self.rows[at].as_ref() == Some(row))
            .min()
    }

    fn unindex(&mut self, hash: u64, at: usize) {
        if let Some(positions) = self.index.get_mut(&hash) {
            positions.retain(|&p| p != at);
        }
    }

    fn take(&mut self, row: &Row) -> Option<Row> {
        let at = self.find(row)?;
        self.unindex(self.hasher.hash_one(row), at);
        self.rows[at].take()
    }

    fn replace(&mut self, old: &Row, new: Row) {
        let Some(at) = self.find(old) else {
            return;
        };
        self.unindex(self.hasher.hash_one(old), at);
        self.index
            .entry(self.hasher.hash_one(&new))
            .or_default()
            .push(at);
        self.rows[at] = Some(new);
    }

    fn into_rows(self) -> Vec<Row> {
        self.rows.into_iter().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[i64]) -> Row {
        v.iter().map(|&i| Cell::Int(i)).collect()
    }

    const T: TableRef = TableRef::Fixed(Kind::Column);

    #[test]
    fn updates_stay_in_place_and_inserts_go_last() {
        let committed = vec![row(&[1]), row(&[2]), row(&[3])];
        let ops = vec![
            StagedOp::Update {
                table: T,
                old: row(&[1]),
                new: row(&[10]),
            },
            StagedOp::Insert {
                table: T,
                row: row(&[4]),
            },
            StagedOp::Delete {
                table: T,
                row: row(&[2]),
            },
            StagedOp::Update {
                table: T,
                old: row(&[10]),
                new: row(&[11]),
            },
        ];
        assert_eq!(
            apply(T, &committed, &ops, None),
            vec![row(&[11]), row(&[3]), row(&[4])]
        );
    }

    #[test]
    fn a_delete_removes_one_of_equal_rows() {
        let committed = vec![row(&[1]), row(&[1]), row(&[2])];
        let ops = vec![StagedOp::Delete {
            table: T,
            row: row(&[1]),
        }];
        assert_eq!(apply(T, &committed, &ops, None), vec![row(&[1]), row(&[2])]);
    }

    #[test]
    fn children_follow_their_visible_parents() {
        let changes = TableRef::Fixed(Kind::SnapshotChanges);
        let mut children = vec![row(&[1, 7]), row(&[2, 8]), row(&[3, 9])];
        retain_linked(changes, &mut children, &[row(&[1]), row(&[3])]);
        assert_eq!(children, vec![row(&[1, 7]), row(&[3, 9])]);
    }

    #[test]
    fn packed_children_follow_their_visible_parents_as_decoded_ones_do() {
        let changes = TableRef::Fixed(Kind::SnapshotChanges);
        let children = vec![row(&[1, 7]), row(&[2, 8]), row(&[3, 9]), row(&[3, 10])];
        let parents = Rows::packed(vec![row(&[1]), row(&[3])]);
        let packed = Rows::packed(children.clone());
        // The children's own deletes apply first, then the parent filter.
        let own = vec![StagedOp::Delete {
            table: changes,
            row: row(&[3, 9]),
        }];
        for ops in [vec![], own] {
            let mut expected = children.clone();
            apply_in_place(changes, &mut expected, &ops);
            retain_linked(changes, &mut expected, &parents);
            for rows in [&packed, &Rows::from(children.clone())] {
                assert_eq!(linked(changes, rows, &ops, &parents), expected);
            }
        }
    }

    #[test]
    fn packed_rows_take_updates_deletes_and_inserts_as_decoded_ones_do() {
        let inline = TableRef::InlineData {
            table_id: 1,
            schema_version: 1,
        };
        // row_id, begin_snapshot, end_snapshot, a user column; served by
        // begin snapshot, then row id.
        let data = |id: i64, begin: i64, end: Option<i64>| -> Row {
            vec![
                Cell::Int(id),
                Cell::Int(begin),
                end.map_or(Cell::Null, Cell::Int),
                Cell::Text(format!("v{id}")),
            ]
        };
        let committed: Vec<Row> = (0..40).map(|i| data(i, 1 + i / 4, None)).collect();
        let update = |old: Row, new: Row| StagedOp::Update {
            table: inline,
            old,
            new,
        };
        let insert = |row: Row| StagedOp::Insert { table: inline, row };
        let delete = |row: Row| StagedOp::Delete { table: inline, row };
        let ended = |i: i64| data(i, 1 + i / 4, Some(20));
        // (operations, whether packed rows take them without the general path)
        let cases: Vec<(Vec<StagedOp>, bool)> = vec![
            // DuckLake's UPDATE of an inlined row: the old version ends, the new one follows.
            (
                vec![
                    update(committed[7].clone(), ended(7)),
                    insert(data(40, 20, None)),
                ],
                true,
            ),
            (
                vec![delete(committed[3].clone()), delete(committed[39].clone())],
                true,
            ),
            (vec![update(data(99, 1, None), ended(99))], true),
            // An update of the row an earlier one brought.
            (
                vec![
                    update(committed[7].clone(), ended(7)),
                    update(ended(7), data(7, 1, Some(21))),
                ],
                false,
            ),
            // A delete of the row an insert brought.
            (
                vec![insert(data(40, 20, None)), delete(data(40, 20, None))],
                false,
            ),
            // A row brought out of the served order.
            (vec![insert(data(41, 0, None))], false),
            (vec![update(committed[7].clone(), data(7, 30, None))], false),
            (vec![StagedOp::DropTable { table: inline }], false),
        ];
        let packed = Rows::packed(committed.clone());
        for (ops, stays_packed) in cases {
            let expected = apply(inline, &committed, &ops, None);
            assert_eq!(applied(inline, &packed, &ops), expected, "{ops:?}");
            assert_eq!(
                edited(inline, &packed, &ops).is_some(),
                stays_packed,
                "{ops:?}"
            );
            let decoded = Rows::from(committed.clone());
            assert_eq!(applied(inline, &decoded, &ops), expected, "{ops:?}");
        }
        // A table kept in ordinal order takes rows brought anywhere.
        let fixed = vec![row(&[5]), row(&[1]), row(&[5])];
        let ops = vec![
            StagedOp::Update {
                table: T,
                old: row(&[5]),
                new: row(&[9]),
            },
            StagedOp::Insert {
                table: T,
                row: row(&[0]),
            },
        ];
        let packed = Rows::packed(fixed.clone());
        assert!(edited(T, &packed, &ops).is_some());
        assert_eq!(applied(T, &packed, &ops), apply(T, &fixed, &ops, None));
    }

    #[test]
    fn inserts_alone_are_an_append_unless_they_would_break_the_served_order() {
        let insert = |table, row| StagedOp::Insert { table, row };
        let ops = vec![insert(T, row(&[5])), insert(T, row(&[4]))];
        let added = only_appended(T, &ops, || None).unwrap();
        assert_eq!(added, vec![&row(&[5]), &row(&[4])]);
        let mut deleting = ops.clone();
        deleting.push(StagedOp::Delete {
            table: T,
            row: row(&[1]),
        });
        assert_eq!(only_appended(T, &deleting, || None), None);

        // Inlined rows are served by begin snapshot, then in insertion order.
        let inline = TableRef::InlineData {
            table_id: 1,
            schema_version: 1,
        };
        let later = vec![insert(inline, row(&[8, 3])), insert(inline, row(&[7, 3]))];
        assert_eq!(
            only_appended(inline, &later, || Some(row(&[9, 3]))).map(|a| a.len()),
            Some(2)
        );
        assert_eq!(only_appended(inline, &later, || Some(row(&[6, 4]))), None);
    }
}
