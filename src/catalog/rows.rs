//! A table's committed rows: decoded, or still packed as the image stores
//! them.
//!
//! A cold transaction reads its big tables from the head image: after 5,000
//! Parquet commits `ducklake_snapshot` and `ducklake_data_file` hold 5,000
//! rows each. Decoding such a table into [`Row`]s costs a heap allocation
//! per row and per text cell, and about six times the image's bytes in fresh
//! memory, whose page faults were most of the cost (about 5 ms for
//! `ducklake_data_file`, against 2.3 ms for DuckDB to answer the whole
//! statement from its own file). A scan needs no `Row`: it hands DuckDB one
//! cell at a time. So rows read from an image stay packed, the part's bytes
//! plus each cell's kind and value, and are decoded whole only when something
//! needs them as rows: a transaction's overlay, a commit that changes them
//! other than by appending, a rowid resolved for DELETE or UPDATE (that one
//! row only).
//!
//! Rows kept across transactions are packed too, whether they came from an
//! image or from the records, and stay packed: a commit that only inserts
//! appends its rows as a part of their own, one that only deletes keeps the
//! other rows' cells (an expiry deletes thousands of snapshots), and one that
//! changes them otherwise packs them again. A scan then reads each column as a run of
//! nine-byte cells rather than one heap block per row: the head query reads
//! every `ducklake_snapshot` row in every transaction, and on decoded rows
//! that cost grew with history (2.2 % of a commit at 4,800 snapshots).

use super::columns::Columns;
use super::image::ReadPart;
use super::{Cell, Row};
use crate::error::{Error, Result};
use crate::store::value::{put_cell_ref, put_row, put_varint, CellRef, Reader};
use bytes::Bytes;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};

/// The rows of one table, in scan order. Dereferencing to `[Row]` decodes
/// packed rows, once; [`Rows::cell`], [`Rows::row`] and [`Rows::len`] never
/// decode more than they return.
pub struct Rows {
    packed: Option<Packed>,
    /// Rows read from image parts laid out by column, while nothing has
    /// needed them row by row ([`super::columns`]); `packed` is then `None`.
    columns: Option<Arc<Columns>>,
    decoded: OnceLock<Vec<Row>>,
    /// The integer columns' statistics asked for so far: DuckDB's optimizer
    /// asks for every integer column of every scan, and kept rows serve many
    /// transactions.
    stats: ColumnStats,
}

/// What one integer column of a table holds, exactly. DuckLake asks for
/// `MAX(snapshot_id)` in every commit; answered from these, the aggregate
/// costs one pass in the core instead of every row of the table crossing
/// into DuckDB, and its snapshot filters are dropped where these prove them
/// true of every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntStats {
    pub rows: u64,
    pub nulls: u64,
    /// The least and greatest non-NULL value; `None` when every cell is NULL.
    pub range: Option<(i64, i64)>,
    /// Whether every cell is an integer no smaller than the one before it.
    /// A scan then finds the rows inside a bound by bisection instead of
    /// reading every row: `ducklake_snapshot` and `ducklake_snapshot_changes`
    /// grow by a row a commit, in `snapshot_id` order, and every commit looks
    /// one snapshot up in each.
    pub ascending: bool,
}

/// Statistics by column, computed on first request; a clone starts empty.
#[derive(Default)]
struct ColumnStats(std::sync::Mutex<Vec<(usize, Option<IntStats>)>>);

impl IntStats {
    /// Counts one more cell: `None` once the column holds a non-integer.
    fn count(self, cell: CellRef<'_>) -> Option<IntStats> {
        let mut stats = IntStats {
            rows: self.rows + 1,
            ..self
        };
        match cell {
            CellRef::Null => {
                stats.nulls += 1;
                stats.ascending = false;
            }
            CellRef::Int(v) => {
                // While the cells ascend, the greatest is the last.
                stats.ascending &= stats.range.is_none_or(|(_, hi)| hi <= v);
                stats.range = Some(
                    stats
                        .range
                        .map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))),
                )
            }
            _ => return None,
        }
        Some(stats)
    }
}

impl ColumnStats {
    /// Counts appended rows into what is known, so a table a commit appends
    /// to keeps its counts (every commit appends to `ducklake_snapshot`).
    fn count_in(&mut self, added: &[&Row]) {
        let Ok(known) = self.0.get_mut() else {
            *self = ColumnStats::default();
            return;
        };
        for (column, stats) in known.iter_mut() {
            for row in added {
                let cell = row.get(*column).map_or(CellRef::Null, Cell::as_cell_ref);
                *stats = stats.and_then(|s| s.count(cell));
            }
        }
    }
}

/// Rows of a fixed width read once from encoded parts: each cell's kind
/// and value, text and bytes as a span of their part. Nine bytes a cell,
/// where a decoded cell takes 32 and its text a heap block of its own.
#[derive(Clone)]
pub(super) struct Packed {
    pub(super) parts: Vec<Bytes>,
    /// The image parts the leading rows were read from, in order, while
    /// those rows are still exactly what the parts hold: appends keep it,
    /// any other change makes rows without it.
    pub(super) from_image: Vec<ReadPart>,
    pub(super) width: usize,
    /// The part each row is in.
    pub(super) row_part: Vec<u32>,
    /// Cell `column` of row `row` is at `row * width + column` of both.
    pub(super) kinds: Vec<CellKind>,
    /// The integer, the boolean as 0 or 1, or a span: its start in the
    /// part in the high 32 bits and its length in the low 32.
    pub(super) values: Vec<u64>,
}

/// How many parts packed rows may reach by appends before they are packed
/// into one again: a commit appends one, so this bounds their overhead
/// (a few dozen bytes each) while the rewrite costs a commit 1/256 of the
/// table.
const MAX_APPENDED_PARTS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CellKind {
    Null,
    Int,
    Bool,
    Text,
    Blob,
}

impl Rows {
    /// How many rows there are.
    pub fn len(&self) -> usize {
        match (self.decoded.get(), &self.packed, &self.columns) {
            (Some(rows), _, _) => rows.len(),
            (None, Some(packed), _) => packed.len(),
            (None, None, Some(columns)) => columns.len(),
            (None, None, None) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cell `column` of row `row`, read in place; NULL past the row's end.
    #[inline]
    pub fn cell(&self, row: usize, column: usize) -> CellRef<'_> {
        match (self.decoded.get(), &self.packed, &self.columns) {
            (Some(rows), _, _) => rows
                .get(row)
                .and_then(|r| r.get(column))
                .map_or(CellRef::Null, |c| c.as_cell_ref()),
            (None, Some(packed), _) => packed.cell(row, column),
            (None, None, Some(columns)) => columns.cell(row, column),
            (None, None, None) => CellRef::Null,
        }
    }

    /// The cells a row has: the packed rows' width, or the widest decoded
    /// row's.
    pub fn width(&self) -> usize {
        match (self.decoded.get(), &self.packed, &self.columns) {
            (Some(rows), _, _) => rows.iter().map(Vec::len).max().unwrap_or(0),
            (None, Some(packed), _) => packed.width,
            (None, None, Some(columns)) => columns.width(),
            (None, None, None) => 0,
        }
    }

    /// Whether the rows are held row by row, decoded or packed, rather than
    /// as the image's columns.
    #[cfg(test)]
    pub(super) fn is_row_wise(&self) -> bool {
        self.columns.is_none()
    }

    /// The rows packed row by row, derived from the image's columns if they
    /// are held so; `None` for decoded rows.
    fn row_wise(&self) -> Option<&Packed> {
        match (self.decoded.get(), &self.packed, &self.columns) {
            (None, Some(packed), _) => Some(packed),
            (None, None, Some(columns)) => Some(columns.packed()),
            _ => None,
        }
    }

    /// Rows read from the image's columns.
    pub(super) fn from_columns(columns: Columns) -> Rows {
        Rows {
            packed: None,
            columns: Some(Arc::new(columns)),
            decoded: OnceLock::new(),
            stats: ColumnStats::default(),
        }
    }

    /// The statistics of `column`, or `None` when a cell there is neither an
    /// integer nor NULL: statistics DuckDB relies on must be exact or absent.
    pub fn int_stats(&self, column: usize) -> Option<IntStats> {
        if let Ok(known) = self.stats.0.lock() {
            if let Some((_, stats)) = known.iter().find(|(c, _)| *c == column) {
                return *stats;
            }
        }
        let stats = self.count_column(column);
        if let Ok(mut known) = self.stats.0.lock() {
            known.push((column, stats));
        }
        stats
    }

    /// Whether `column` holds only integers, each no smaller than the one
    /// before it ([`IntStats::ascending`]).
    pub fn ascending(&self, column: usize) -> bool {
        self.int_stats(column).is_some_and(|s| s.ascending)
    }

    fn count_column(&self, column: usize) -> Option<IntStats> {
        let none = IntStats {
            rows: 0,
            nulls: 0,
            range: None,
            ascending: true,
        };
        if let (None, None, Some(columns)) = (self.decoded.get(), &self.packed, &self.columns) {
            if column < columns.width() {
                // A column's cells in turn, without finding each one's row.
                return columns.cells(column).try_fold(none, IntStats::count);
            }
        }
        (0..self.len()).try_fold(none, |stats, row| stats.count(self.cell(row, column)))
    }

    /// Row `row`, decoded on its own.
    pub fn row(&self, row: usize) -> Option<Row> {
        if let Some(rows) = self.decoded.get() {
            return rows.get(row).cloned();
        }
        (row < self.len()).then(|| {
            (0..self.width())
                .map(|column| self.cell(row, column).to_cell())
                .collect()
        })
    }

    /// Changes the rows in place, decoding them first if they were packed.
    pub fn change<R>(&mut self, f: impl FnOnce(&mut Vec<Row>) -> R) -> R {
        let mut rows = match self.decoded.take() {
            Some(rows) => rows,
            None => self.decode(),
        };
        let result = f(&mut rows);
        self.packed = None;
        self.columns = None;
        self.decoded = OnceLock::from(rows);
        self.stats = ColumnStats::default();
        result
    }

    /// `rows`, packed: what a table kept for many transactions is held as,
    /// since a scan reads packed cells in order without chasing a heap
    /// block per row. Rows of unequal width stay decoded.
    pub fn packed(rows: Vec<Row>) -> Rows {
        let Some(width) = rows.first().map(Vec::len) else {
            return Rows::from(rows);
        };
        let mut packed = Packed::empty(width);
        if !packed.append(&rows.iter().collect::<Vec<_>>()) {
            return Rows::from(rows);
        }
        Rows::from_packed(packed)
    }

    fn from_packed(packed: Packed) -> Rows {
        Rows {
            packed: Some(packed),
            columns: None,
            decoded: OnceLock::new(),
            stats: ColumnStats::default(),
        }
    }

    /// The image parts the leading rows were read from, unchanged since;
    /// empty for rows that were not read from the image or have changed
    /// other than by appends. A writer taking the next image keeps those
    /// parts and writes only what follows them.
    pub fn image_parts(&self) -> &[ReadPart] {
        match (self.decoded.get(), &self.packed, &self.columns) {
            (None, Some(packed), _) => &packed.from_image,
            (None, None, Some(columns)) => columns.image_parts(),
            _ => &[],
        }
    }

    /// Packs decoded rows again, after [`Rows::change`].
    pub fn repack(&mut self) {
        if let Some(rows) = self.decoded.take() {
            *self = Rows::packed(rows);
        }
    }

    /// Appends `added` to the rows. Packed rows stay packed: the added ones
    /// are encoded into a part of their own, so carrying a big table across
    /// a commit that only inserts costs the inserted rows, not the table.
    pub fn extend<'a>(&mut self, added: impl IntoIterator<Item = &'a Row>) {
        let added: Vec<&Row> = added.into_iter().collect();
        if added.is_empty() {
            return;
        }
        self.stats.count_in(&added);
        if let Some(columns) = self.columns.take() {
            // Appended rows go into parts of their own beside the image's.
            self.packed = Some(match Arc::try_unwrap(columns) {
                Ok(columns) => columns.into_packed(),
                Err(shared) => shared.packed().clone(),
            });
        }
        if let (None, Some(packed)) = (self.decoded.get(), self.packed.as_mut()) {
            // Rows of another width are decoded with the rest instead.
            if packed.append(&added) {
                if packed.parts.len() > MAX_APPENDED_PARTS {
                    packed.consolidate();
                }
                return;
            }
        }
        self.change(|rows| rows.extend(added.into_iter().cloned()));
    }

    /// The rows after `edits` and `added`: each edit takes the first row
    /// still equal to its old row (one equal to none takes nothing) and puts
    /// its new row, if any, in that row's place; `added` follow the rest.
    /// That is what the overlay's updates, deletes and inserts do when no
    /// edit's old row is one that another edit or `added` brings. Packed rows
    /// stay packed and nothing is decoded: the rest keep their cells and
    /// parts, and the new rows are encoded into parts of their own, so a
    /// commit that updates one row of a big table makes one pass over its
    /// packed cells instead of decoding, hashing and sorting every row.
    /// When fewer than half the rows stay, they are packed into one part, so
    /// the parts of the rows gone are freed (an expiry deletes thousands of
    /// snapshots). `None` for rows held decoded, or a new row of another
    /// width.
    pub fn edited(&self, edits: &[(&Row, Option<&Row>)], added: &[&Row]) -> Option<Rows> {
        let packed = self.row_wise()?;
        if edits.is_empty() && added.is_empty() {
            return Some(self.clone());
        }
        let olds: Vec<&Row> = edits.iter().map(|&(old, _)| old).collect();
        let mut edit_at: Vec<Option<Option<&Row>>> = vec![None; packed.len()];
        for (at, &(_, new)) in packed.first_equal_each(&olds).into_iter().zip(edits) {
            if let Some(at) = at {
                edit_at[at] = Some(new);
            }
        }
        let mut edited = packed.edited(&edit_at, added)?;
        // Fewer than half left: the parts of the rows gone are freed.
        if edited.parts.len() > MAX_APPENDED_PARTS || edited.len() * 2 < packed.len() {
            edited.consolidate();
        }
        Some(Rows::from_packed(edited))
    }

    /// The rows `keep` names, in order. Packed rows stay packed and nothing
    /// is decoded, as in [`Rows::edited`]; decoded rows are copied.
    pub fn kept(&self, keep: impl Fn(usize) -> bool) -> Rows {
        let Some(packed) = self.row_wise() else {
            let kept = self.iter().enumerate().filter(|&(at, _)| keep(at));
            return Rows::from(kept.map(|(_, row)| row.clone()).collect::<Vec<_>>());
        };
        let mut kept = packed.keep(keep);
        if kept.len() * 2 < packed.len() {
            kept.consolidate();
        }
        Rows::from_packed(kept)
    }

    /// Appends row `row` as the image stores it ([`put_row`]); packed rows
    /// are encoded from their cells without being decoded.
    pub fn put_row(&self, row: usize, out: &mut Vec<u8>) {
        match self.decoded.get() {
            Some(rows) => {
                if let Some(r) = rows.get(row) {
                    put_row(out, r);
                }
            }
            None if row < self.len() => {
                let width = self.width();
                put_varint(out, width as u64);
                for column in 0..width {
                    put_cell_ref(out, self.cell(row, column));
                }
            }
            None => {}
        }
    }

    /// Every row, decoded from the packed rows or the image's columns.
    fn decode(&self) -> Vec<Row> {
        (0..self.len()).filter_map(|row| self.row(row)).collect()
    }

    fn decode_all(&self) -> &Vec<Row> {
        self.decoded.get_or_init(|| self.decode())
    }
}

impl Packed {
    fn empty(width: usize) -> Packed {
        Packed {
            parts: Vec::new(),
            from_image: Vec::new(),
            width,
            row_part: Vec::new(),
            kinds: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Adds the `count` rows `part` holds ([`put_row`]). `Ok(false)`: a row
    /// is not of this width. Either way, a part that is not added leaves the
    /// rows as they were.
    fn add_part(&mut self, part: Bytes, count: usize) -> Result<bool> {
        let (rows, cells) = (self.row_part.len(), self.kinds.len());
        let added = self.add_cells(&part, count);
        match added {
            Ok(true) => self.parts.push(part),
            _ => {
                self.row_part.truncate(rows);
                self.kinds.truncate(cells);
                self.values.truncate(cells);
            }
        }
        added
    }

    /// The cells of [`Packed::add_part`], as they are read.
    fn add_cells(&mut self, part: &Bytes, count: usize) -> Result<bool> {
        let width = self.width;
        let index =
            u32::try_from(self.parts.len()).map_err(|_| Error::corruption("too many parts"))?;
        let mut reader = Reader::new(part);
        self.row_part.reserve(count);
        self.kinds.reserve(count * width);
        self.values.reserve(count * width);
        for _ in 0..count {
            if reader.length()? != width {
                return Ok(false);
            }
            pack_cells(part, &mut reader, width, &mut self.kinds, &mut self.values)?;
            self.row_part.push(index);
        }
        reader.finish()?;
        Ok(true)
    }

    /// Encodes `rows` into a part of their own and adds it; `false` (and
    /// nothing added) when a row is not of this width.
    fn append(&mut self, rows: &[&Row]) -> bool {
        let mut part = Vec::new();
        for row in rows {
            put_row(&mut part, row);
        }
        matches!(self.add_part(Bytes::from(part), rows.len()), Ok(true))
    }

    fn len(&self) -> usize {
        self.row_part.len()
    }

    /// The same rows in one part, which frees the small parts appends left.
    fn consolidate(&mut self) {
        let mut part = Vec::new();
        for row in 0..self.len() {
            self.put_row(row, &mut part);
        }
        let mut one = Packed::empty(self.width);
        // Cells that were read once read again; should they not, the rows
        // stay as they are.
        if matches!(one.add_part(Bytes::from(part), self.len()), Ok(true)) {
            *self = one;
        }
    }

    #[inline]
    fn cell(&self, row: usize, column: usize) -> CellRef<'_> {
        if column >= self.width {
            return CellRef::Null;
        }
        let at = row * self.width + column;
        let (Some(&kind), Some(&value)) = (self.kinds.get(at), self.values.get(at)) else {
            return CellRef::Null;
        };
        let part = self
            .row_part
            .get(row)
            .and_then(|&part| self.parts.get(part as usize));
        match part {
            Some(part) => unpack(kind, value, part),
            None => CellRef::Null,
        }
    }

    /// Whether row `at` holds exactly `row`'s cells.
    fn holds(&self, at: usize, row: &Row) -> bool {
        row.len() == self.width
            && row
                .iter()
                .enumerate()
                .all(|(column, cell)| self.cell(at, column) == cell.as_cell_ref())
    }

    /// The rows `keep` names, sharing these rows' parts.
    fn keep(&self, keep: impl Fn(usize) -> bool) -> Packed {
        let mut kept = Packed {
            parts: self.parts.clone(),
            ..Packed::empty(self.width)
        };
        for at in (0..self.len()).filter(|&at| keep(at)) {
            kept.copy_row(self, at);
        }
        kept
    }

    /// Appends row `at` of `from`, whose parts these rows share.
    fn copy_row(&mut self, from: &Packed, at: usize) {
        let cells = at * from.width..(at + 1) * from.width;
        if let (Some(&part), Some(kinds), Some(values)) = (
            from.row_part.get(at),
            from.kinds.get(cells.clone()),
            from.values.get(cells),
        ) {
            self.row_part.push(part);
            self.kinds.extend_from_slice(kinds);
            self.values.extend_from_slice(values);
        }
    }

    /// For each of `wanted` in turn, the position of the first row still
    /// equal to it that an earlier one has not taken.
    fn first_equal_each(&self, wanted: &[&Row]) -> Vec<Option<usize>> {
        if wanted.is_empty() {
            return Vec::new();
        }
        let hasher = RandomState::default();
        let hash_of = |cells: &mut dyn Iterator<Item = CellRef<'_>>| {
            let mut state = hasher.build_hasher();
            cells.for_each(|cell| cell.hash(&mut state));
            state.finish()
        };
        let mut positions: HashMap<u64, Vec<usize>, RandomState> = HashMap::default();
        for at in 0..self.len() {
            let hash = hash_of(&mut (0..self.width).map(|c| self.cell(at, c)));
            positions.entry(hash).or_default().push(at);
        }
        wanted
            .iter()
            .map(|row| {
                if row.len() != self.width {
                    return None;
                }
                let equal = positions.get_mut(&hash_of(&mut row.iter().map(Cell::as_cell_ref)))?;
                // Positions are in row order: the first match is the first row.
                let k = equal.iter().position(|&at| self.holds(at, row))?;
                Some(equal.remove(k))
            })
            .collect()
    }

    /// These rows with row `at` dropped where `edit_at[at]` is `Some(None)`
    /// and replaced where it is `Some(Some(new))`, then `added`; the new rows
    /// go into parts of their own. `None` when one is not of this width.
    fn edited(&self, edit_at: &[Option<Option<&Row>>], added: &[&Row]) -> Option<Packed> {
        let mut edited = Packed {
            parts: self.parts.clone(),
            ..Packed::empty(self.width)
        };
        for (at, edit) in edit_at.iter().enumerate() {
            match edit {
                None => edited.copy_row(self, at),
                Some(None) => {}
                Some(Some(new)) => {
                    if !edited.append(&[new]) {
                        return None;
                    }
                }
            }
        }
        if !added.is_empty() && !edited.append(added) {
            return None;
        }
        // Rows only appended to are still the image's rows first.
        if edit_at.iter().all(Option::is_none) {
            edited.from_image = self.from_image.clone();
        }
        Some(edited)
    }

    fn put_row(&self, row: usize, out: &mut Vec<u8>) {
        put_varint(out, self.width as u64);
        for column in 0..self.width {
            put_cell_ref(out, self.cell(row, column));
        }
    }
}

/// Reads `count` cells from `reader`, which reads from `part`, into their
/// kinds and values: text and bytes as spans of `part`, text checked to be
/// UTF-8 once here.
pub(super) fn pack_cells(
    part: &[u8],
    reader: &mut Reader<'_>,
    count: usize,
    kinds: &mut Vec<CellKind>,
    values: &mut Vec<u64>,
) -> Result<()> {
    let span = |bytes: &[u8]| -> Result<u64> {
        let start = bytes.as_ptr() as usize - part.as_ptr() as usize;
        match (u32::try_from(start), u32::try_from(bytes.len())) {
            (Ok(start), Ok(len)) => Ok(u64::from(start) << 32 | u64::from(len)),
            _ => Err(Error::corruption("image part larger than 4 GiB")),
        }
    };
    for _ in 0..count {
        let (kind, value) = match reader.cell_ref()? {
            CellRef::Null => (CellKind::Null, 0),
            CellRef::Int(v) => (CellKind::Int, v as u64),
            CellRef::Bool(b) => (CellKind::Bool, u64::from(b)),
            CellRef::Text(text) => {
                std::str::from_utf8(text)
                    .map_err(|_| Error::corruption("text cell is not UTF-8"))?;
                (CellKind::Text, span(text)?)
            }
            CellRef::Blob(bytes) => (CellKind::Blob, span(bytes)?),
        };
        kinds.push(kind);
        values.push(value);
    }
    Ok(())
}

/// The cell a packed kind and value stand for; a span is of `part`.
#[inline]
pub(super) fn unpack(kind: CellKind, value: u64, part: &[u8]) -> CellRef<'_> {
    let span = || {
        let start = (value >> 32) as usize;
        let end = start + (value & 0xffff_ffff) as usize;
        // The span was read from this part when it was packed.
        part.get(start..end).unwrap_or_default()
    };
    match kind {
        CellKind::Null => CellRef::Null,
        CellKind::Int => CellRef::Int(value as i64),
        CellKind::Bool => CellRef::Bool(value != 0),
        CellKind::Text => CellRef::Text(span()),
        CellKind::Blob => CellRef::Blob(span()),
    }
}

impl Clone for Rows {
    fn clone(&self) -> Self {
        match self.decoded.get() {
            Some(rows) => Rows::from(rows.clone()),
            None => Rows {
                packed: self.packed.clone(),
                columns: self.columns.clone(),
                decoded: OnceLock::new(),
                stats: ColumnStats::default(),
            },
        }
    }
}

impl From<Vec<Row>> for Rows {
    fn from(rows: Vec<Row>) -> Self {
        Rows {
            packed: None,
            columns: None,
            decoded: OnceLock::from(rows),
            stats: ColumnStats::default(),
        }
    }
}

impl std::ops::Deref for Rows {
    type Target = [Row];

    fn deref(&self) -> &[Row] {
        self.decode_all()
    }
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Rows {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<Row>> for Rows {
    fn eq(&self, other: &Vec<Row>) -> bool {
        **self == **other
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::catalog::Cell;

    /// Integers, text, booleans or NULLs, and blobs.
    pub(in crate::catalog) fn sample() -> Vec<Row> {
        (0..300)
            .map(|i| {
                vec![
                    Cell::Int(i),
                    Cell::Text(format!("file {i}.parquet")),
                    if i % 3 == 0 {
                        Cell::Null
                    } else {
                        Cell::Bool(i % 2 == 0)
                    },
                    Cell::Blob(vec![i as u8; (i % 5) as usize]),
                ]
            })
            .collect()
    }

    /// `rows` packed into parts of at most `per_part` rows, as appends
    /// leave them.
    fn packed(rows: &[Row], per_part: usize) -> Rows {
        let mut chunks = rows.chunks(per_part);
        let mut packed = Rows::packed(chunks.next().unwrap_or_default().to_vec());
        for chunk in chunks {
            packed.extend(chunk);
        }
        assert!(packed.decoded.get().is_none());
        packed
    }

    /// That `read` serves `rows` cell by cell, row by row, as the image
    /// encodes them and whole, and NULL or nothing past their ends.
    pub(in crate::catalog) fn assert_reads_as(read: &Rows, rows: &[Row]) {
        assert_eq!(read.len(), rows.len());
        for (i, row) in rows.iter().enumerate() {
            for (j, cell) in row.iter().enumerate() {
                assert_eq!(read.cell(i, j), cell.as_cell_ref(), "row {i} column {j}");
            }
            assert_eq!(read.row(i).as_ref(), Some(row));
            let (mut a, mut b) = (Vec::new(), Vec::new());
            read.put_row(i, &mut a);
            put_row(&mut b, row);
            assert_eq!(a, b);
        }
        assert_eq!(read.cell(0, 9), CellRef::Null);
        assert_eq!(read.cell(rows.len(), 0), CellRef::Null);
        assert_eq!(read.row(rows.len()), None);
        assert_eq!(&**read, rows);
    }

    #[test]
    fn packed_rows_read_as_the_rows_they_pack() {
        let rows = sample();
        assert_reads_as(&packed(&rows, 70), &rows);
    }

    #[test]
    fn changing_packed_rows_decodes_them_first() {
        let rows = sample();
        let mut packed = packed(&rows, 1000);
        let copy = packed.clone();
        packed.change(|rows| rows.remove(0));
        assert_eq!(packed.len(), rows.len() - 1);
        assert_eq!(packed.cell(0, 0), CellRef::Int(1));
        assert_eq!(copy.len(), rows.len());
        assert_eq!(copy.cell(0, 0), CellRef::Int(0));
    }

    #[test]
    fn a_row_of_another_width_or_a_damaged_part_is_refused() {
        let mut part = Vec::new();
        put_row(&mut part, &[Cell::Int(1)]);
        let mut packed = Packed::empty(4);
        assert!(!packed.add_part(Bytes::from(part), 1).unwrap());
        let mut part = Vec::new();
        put_row(&mut part, &sample()[1]);
        part.truncate(part.len() - 1);
        assert!(packed.add_part(Bytes::from(part), 1).is_err());
        let mut part = Vec::new();
        put_row(
            &mut part,
            &[
                Cell::Int(1),
                Cell::Text("ok".into()),
                Cell::Null,
                Cell::Null,
            ],
        );
        let text = part.iter().position(|&b| b == b'o').unwrap();
        part[text] = 0xff;
        assert!(packed.add_part(Bytes::from(part), 1).is_err());
        assert_eq!(packed.len(), 0);
    }

    #[test]
    fn packed_rows_take_appends_without_being_decoded() {
        let rows = sample();
        let mut packed = packed(&rows, 100);
        let copy = packed.clone();
        packed.extend(&rows[..2]);
        assert!(packed.decoded.get().is_none());
        assert_eq!(packed.len(), rows.len() + 2);
        let mut expected = rows.clone();
        expected.extend_from_slice(&rows[..2]);
        assert_eq!(&*packed, expected.as_slice());

        // A row of another width cannot be packed beside them: the rows are
        // decoded, and nothing of the refused part stays.
        let mut copy = copy;
        assert_eq!(copy.len(), rows.len());
        let odd = vec![Cell::Int(1)];
        copy.extend([&rows[0], &odd]);
        let mut expected = rows.clone();
        expected.push(rows[0].clone());
        expected.push(odd);
        assert_eq!(&*copy, expected.as_slice());
    }

    #[test]
    fn decoded_rows_pack_and_repack_to_the_same_rows() {
        let rows = sample();
        let packed = Rows::packed(rows.clone());
        assert!(packed.decoded.get().is_none());
        assert_eq!(&*packed, rows.as_slice());
        let mut changed = packed.clone();
        changed.change(|rows| rows.truncate(3));
        changed.repack();
        assert!(changed.decoded.get().is_none());
        assert_eq!(&*changed, &rows[..3]);
        let uneven = vec![vec![Cell::Int(1)], vec![Cell::Int(1), Cell::Null]];
        assert_eq!(&*Rows::packed(uneven.clone()), uneven.as_slice());
        assert!(Rows::packed(Vec::new()).is_empty());
    }

    /// The rows left when each of `deleted` takes away the first row still
    /// equal to it, as the overlay's deletes do.
    fn without(rows: &Rows, deleted: &[&Row]) -> Option<Rows> {
        let edits: Vec<(&Row, Option<&Row>)> = deleted.iter().map(|&row| (row, None)).collect();
        rows.edited(&edits, &[])
    }

    #[test]
    fn deletes_from_packed_rows_keep_the_rest_packed_in_order() {
        let mut rows = sample();
        rows.push(rows[7].clone());
        let packed = packed(&rows, 70);
        let other_width = vec![Cell::Int(7)];
        let absent = vec![Cell::Int(-1), Cell::Null, Cell::Null, Cell::Null];
        // Row 7 twice takes both copies; row 8 twice takes the one there is.
        let deleted = [
            &rows[7],
            &rows[8],
            &rows[7],
            &rows[8],
            &other_width,
            &absent,
        ];
        let left = without(&packed, &deleted).unwrap();
        assert!(left.decoded.get().is_none());
        let mut expected = rows.clone();
        let mut decoded = packed.clone();
        decoded.change(|_| {});
        expected.retain(|row| row != &rows[7] && row != &rows[8]);
        assert_eq!(&*left, expected.as_slice());
        assert_eq!(
            without(&decoded, &deleted),
            None,
            "decoded rows take the general path"
        );

        // Most rows gone: the few left are packed into a part of their own.
        let most: Vec<&Row> = rows[10..rows.len() - 1].iter().collect();
        let few = without(&packed, &most).unwrap();
        assert_eq!(few.packed.as_ref().map(|p| p.parts.len()), Some(1));
        assert_eq!(
            &*few,
            &rows[..10]
                .iter()
                .chain([&rows[7]])
                .cloned()
                .collect::<Vec<_>>()
        );
        assert_eq!(&*without(&packed, &[]).unwrap(), rows.as_slice());
    }

    #[test]
    fn appends_one_at_a_time_are_packed_into_one_part_now_and_then() {
        let rows = sample();
        let mut packed = Rows::packed(rows[..1].to_vec());
        for row in &rows[1..] {
            packed.extend([row]);
        }
        let parts = packed.packed.as_ref().map(|p| p.parts.len());
        assert!(
            parts.is_some_and(|n| n <= MAX_APPENDED_PARTS),
            "{parts:?} parts"
        );
        assert!(packed.decoded.get().is_none());
        for (i, row) in rows.iter().enumerate() {
            for (j, cell) in row.iter().enumerate() {
                assert_eq!(packed.cell(i, j), cell.as_cell_ref());
            }
        }
    }
}
