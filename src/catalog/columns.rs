//! Image parts laid out a column at a time, and the rows read from them.
//!
//! A cold attach's first query reads few columns of a big table: DuckLake's
//! `count(*)` over a lake of 5,000 Parquet commits reads 5 of
//! `ducklake_data_file`'s 17 columns, 5,000 rows each. Parts that held
//! whole rows had to be decoded whole, every cell checked and packed,
//! before the first of them could be read, and that work grew with history:
//! about a millisecond of that query after 5,000 commits.
//!
//! So a part holds its rows' cells column by column, and each column is
//! laid out by what it holds ([design 0023](../../docs/design/0023-image-parts-by-column.md)):
//! - a column of integers and NULLs, most of every catalog table, at a
//!   fixed width: each value as its distance from the block's least, in as
//!   few little-endian bytes as the greatest distance needs (none for a
//!   constant column, two for ids that count up through a part), and a byte
//!   per cell for NULL (0) or not when some are. A cell is found by
//!   arithmetic, and no byte needs checking before it is read: any byte
//!   reads as NULL or an integer. Reading such a column costs only the
//!   cells asked for, and the part stays small, which matters as much: a
//!   cold attach reads the whole part from the store, and with every
//!   integer in eight bytes `ducklake_data_file`'s part after 5,000
//!   commits was 910 KB and took 1.2 ms to read, where this layout's
//!   355 KB took 44 µs.
//! - any other column as cells ([`put_cell_ref`]), packed and checked when
//!   the part is read, as whole parts were before: paths, UUIDs, booleans.
//!
//! Rows read this way serve scans, statistics and single rows in place.
//! Anything that needs them row by row (a commit that changes the table,
//! taking the next image's plan) derives the row-wise packed form once.

use super::image::{PartId, ReadPart};
use super::rows::{pack_cells, unpack, CellKind, Packed, Rows};
use crate::error::{Error, Result};
use crate::store::value::{put_bytes, put_cell_ref, put_varint, CellRef, Reader};
use bytes::Bytes;
use std::ops::Range;
use std::sync::OnceLock;

/// How a column's cells are laid out in a part: as encoded cells.
const LAID_AS_CELLS: u64 = 0;
/// As integers ([`Integers`]).
const LAID_AS_INTEGERS: u64 = 1;

/// Which cells of a column laid out as integers are NULL.
const NO_NULLS: u8 = 0;
const ALL_NULL: u8 = 1;
/// A byte per cell, 0 for NULL.
const SOME_NULLS: u8 = 2;

/// The head of a column laid out as integers: NULLs, least value, width.
const INTEGERS_HEAD_BYTES: usize = 10;

/// A column laid out as integers: `nulls`, then (unless every cell is NULL)
/// the least value in eight little-endian bytes and the width of each
/// value's distance from it, then a NULL byte per cell if `nulls` says so,
/// then the distances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Integers {
    /// Where the NULL bytes start in the part, when there are some; with
    /// `all_null`, no cell has a value.
    nulls_at: Option<usize>,
    all_null: bool,
    least: i64,
    width: usize,
    /// Where the distances start in the part.
    values_at: usize,
}

/// The bytes that hold every distance up to `greatest`.
fn width_for(greatest: u64) -> usize {
    match greatest {
        0 => 0,
        1..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    }
}

/// Appends a column's cells, each an integer or NULL, laid out as integers.
fn put_integers(cells: &[Option<i64>], block: &mut Vec<u8>) {
    let values = || cells.iter().flatten().copied();
    let nulls = match values().count() {
        0 => ALL_NULL,
        n if n == cells.len() => NO_NULLS,
        _ => SOME_NULLS,
    };
    block.push(nulls);
    if nulls == ALL_NULL {
        return;
    }
    let least = values().min().unwrap_or(0);
    let distance = |v: i64| (v as u64).wrapping_sub(least as u64);
    let width = width_for(values().map(distance).max().unwrap_or(0));
    block.extend_from_slice(&least.to_le_bytes());
    block.push(width as u8);
    if nulls == SOME_NULLS {
        block.extend(cells.iter().map(|cell| u8::from(cell.is_some())));
    }
    for cell in cells {
        let bytes = distance(cell.unwrap_or(least)).to_le_bytes();
        block.extend_from_slice(&bytes[..width]);
    }
}

/// The layout of a column of `count` cells laid out as integers, whose
/// block is `bytes`, starting `at` bytes into its part.
fn read_integers(bytes: &[u8], at: usize, count: usize) -> Result<Integers> {
    let wrong = || Error::corruption("image integer column of the wrong shape");
    let nulls = *bytes.first().ok_or_else(wrong)?;
    if nulls == ALL_NULL {
        return match bytes.len() {
            1 => Ok(Integers {
                nulls_at: None,
                all_null: true,
                least: 0,
                width: 0,
                values_at: at,
            }),
            _ => Err(wrong()),
        };
    }
    let head = bytes.get(..INTEGERS_HEAD_BYTES).ok_or_else(wrong)?;
    let mut least = [0u8; 8];
    least.copy_from_slice(&head[1..9]);
    let width = usize::from(head[9]);
    let null_bytes = match nulls {
        NO_NULLS => 0,
        SOME_NULLS => count,
        _ => return Err(wrong()),
    };
    if ![0, 1, 2, 4, 8].contains(&width)
        || Some(bytes.len())
            != count
                .checked_mul(width + usize::from(nulls == SOME_NULLS))
                .map(|n| n + INTEGERS_HEAD_BYTES)
    {
        return Err(wrong());
    }
    let start = at + INTEGERS_HEAD_BYTES;
    Ok(Integers {
        nulls_at: (nulls == SOME_NULLS).then_some(start),
        all_null: false,
        least: i64::from_le_bytes(least),
        width,
        values_at: start + null_bytes,
    })
}

impl Integers {
    /// Appends the `count` cells, as packed rows hold them, to `kinds` and
    /// `values`; `part` is the block's part, its length checked when read.
    fn gather(&self, part: &[u8], count: usize, kinds: &mut Vec<CellKind>, values: &mut Vec<u64>) {
        if self.all_null {
            kinds.resize(kinds.len() + count, CellKind::Null);
            values.resize(values.len() + count, 0);
            return;
        }
        let distances = part
            .get(self.values_at..self.values_at + count * self.width)
            .unwrap_or_default();
        let nulls = self.nulls_at.and_then(|at| part.get(at..at + count));
        for row in 0..count {
            let present = nulls.is_none_or(|nulls| nulls.get(row).is_some_and(|&b| b != 0));
            if !present {
                kinds.push(CellKind::Null);
                values.push(0);
                continue;
            }
            let mut le = [0u8; 8];
            if let Some(bytes) = distances.get(row * self.width..(row + 1) * self.width) {
                le[..self.width].copy_from_slice(bytes);
            }
            kinds.push(CellKind::Int);
            values.push((self.least as u64).wrapping_add(u64::from_le_bytes(le)));
        }
    }
}

/// Appends rows `range` of `rows`, `width` cells each, column by column.
pub fn put_columns(rows: &Rows, range: Range<usize>, width: usize, out: &mut Vec<u8>) {
    put_varint(out, width as u64);
    let mut block = Vec::new();
    for column in 0..width {
        block.clear();
        let cells = || range.clone().map(|row| rows.cell(row, column));
        let integers: Option<Vec<Option<i64>>> = cells()
            .map(|cell| match cell {
                CellRef::Null => Some(None),
                CellRef::Int(v) => Some(Some(v)),
                _ => None,
            })
            .collect();
        match integers {
            Some(integers) => {
                put_varint(out, LAID_AS_INTEGERS);
                put_integers(&integers, &mut block);
            }
            None => {
                put_varint(out, LAID_AS_CELLS);
                for cell in cells() {
                    put_cell_ref(&mut block, cell);
                }
            }
        }
        put_bytes(out, &block);
    }
}

/// One column of one part.
enum Block {
    Integers(Integers),
    /// Cells packed and checked when the part was read.
    Cells {
        kinds: Vec<CellKind>,
        values: Vec<u64>,
    },
}

/// The width of the columns laid out from `at` bytes into `part` to its
/// end, `count` cells each, and their blocks; every block is checked.
fn read_blocks(part: &[u8], at: usize, count: usize) -> Result<(usize, Vec<Block>)> {
    let body = part
        .get(at..)
        .ok_or_else(|| Error::corruption("image part ends early"))?;
    let mut reader = Reader::new(body);
    let width = usize::try_from(reader.varint()?)
        .map_err(|_| Error::corruption("image part width out of range"))?;
    let mut blocks = Vec::new();
    for _ in 0..width {
        let layout = reader.varint()?;
        let bytes = reader.bytes()?;
        let block = match layout {
            LAID_AS_INTEGERS => Block::Integers(read_integers(
                bytes,
                bytes.as_ptr() as usize - part.as_ptr() as usize,
                count,
            )?),
            LAID_AS_CELLS => {
                let (mut kinds, mut values) =
                    (Vec::with_capacity(count), Vec::with_capacity(count));
                let mut cells = Reader::new(bytes);
                pack_cells(part, &mut cells, count, &mut kinds, &mut values)?;
                cells.finish()?;
                Block::Cells { kinds, values }
            }
            other => {
                return Err(Error::corruption(format!(
                    "image column laid out as {other}, which this build does not know"
                )))
            }
        };
        blocks.push(block);
    }
    reader.finish()?;
    Ok((width, blocks))
}

/// Whether the `count` rows laid out by column from `at` bytes into `part`
/// decode whole.
pub fn check(part: &[u8], at: usize, count: usize) -> Result<()> {
    read_blocks(part, at, count).map(drop)
}

/// Rows of a fixed width read from image parts laid out by column.
pub(super) struct Columns {
    parts: Vec<Bytes>,
    from_image: Vec<ReadPart>,
    width: usize,
    /// The part each row is in.
    row_part: Vec<u32>,
    /// The first row of each part.
    first_row: Vec<usize>,
    /// Column `column` of part `part` is `blocks[part * width + column]`.
    blocks: Vec<Block>,
    /// Each column's cells over every part, gathered the first time one is
    /// read: a scan reads a column's cells in turn, many times over (three
    /// scans of `ducklake_data_file` in one `count(*)`), and finds each
    /// here as in packed rows.
    gathered: Vec<OnceLock<Column>>,
    /// The same rows packed row by row, once something needs them so.
    packed: OnceLock<Packed>,
}

/// One column's cells, in row order, as [`Packed`] holds a row's.
struct Column {
    kinds: Vec<CellKind>,
    values: Vec<u64>,
}

impl Columns {
    pub(super) fn len(&self) -> usize {
        self.row_part.len()
    }

    pub(super) fn width(&self) -> usize {
        self.width
    }

    pub(super) fn image_parts(&self) -> &[ReadPart] {
        &self.from_image
    }

    /// Column `column`'s cells, gathered from every part the first time.
    #[inline]
    fn column(&self, column: usize) -> Option<&Column> {
        let gathered = self.gathered.get(column)?;
        Some(gathered.get_or_init(|| self.gather(column)))
    }

    fn gather(&self, column: usize) -> Column {
        let (mut kinds, mut values) = (
            Vec::with_capacity(self.len()),
            Vec::with_capacity(self.len()),
        );
        for (part, bytes) in self.parts.iter().enumerate() {
            let first = self.first_row.get(part).copied().unwrap_or(0);
            let end = self.first_row.get(part + 1).copied().unwrap_or(self.len());
            let count = end - first;
            match self.blocks.get(part * self.width + column) {
                Some(Block::Integers(integers)) => {
                    integers.gather(bytes, count, &mut kinds, &mut values)
                }
                Some(Block::Cells {
                    kinds: block_kinds,
                    values: block_values,
                }) => {
                    kinds.extend_from_slice(block_kinds);
                    values.extend_from_slice(block_values);
                }
                None => {}
            }
            // Whatever a part lacked reads as NULL, so rows stay aligned.
            kinds.resize(end, CellKind::Null);
            values.resize(end, 0);
        }
        Column { kinds, values }
    }

    /// Column `column`'s cells in row order; none past the last column.
    pub(super) fn cells(&self, column: usize) -> impl Iterator<Item = CellRef<'_>> {
        let gathered = self.column(column);
        let kinds = gathered.map_or(&[][..], |c| c.kinds.as_slice());
        let values = gathered.map_or(&[][..], |c| c.values.as_slice());
        kinds
            .iter()
            .zip(values)
            .zip(&self.row_part)
            .map(
                |((&kind, &value), &part)| match self.parts.get(part as usize) {
                    Some(part) => unpack(kind, value, part),
                    None => CellRef::Null,
                },
            )
    }

    /// Cell `column` of row `row`, read in place; NULL past the row's end.
    #[inline]
    pub(super) fn cell(&self, row: usize, column: usize) -> CellRef<'_> {
        let (Some(column), Some(&part)) = (self.column(column), self.row_part.get(row)) else {
            return CellRef::Null;
        };
        match (
            column.kinds.get(row),
            column.values.get(row),
            self.parts.get(part as usize),
        ) {
            (Some(&kind), Some(&value), Some(part)) => unpack(kind, value, part),
            _ => CellRef::Null,
        }
    }

    /// The rows packed row by row, derived the first time.
    pub(super) fn packed(&self) -> &Packed {
        self.packed.get_or_init(|| self.derive_packed())
    }

    /// The rows packed row by row, taken out of these.
    pub(super) fn into_packed(mut self) -> Packed {
        match self.packed.take() {
            Some(packed) => packed,
            None => self.derive_packed(),
        }
    }

    fn derive_packed(&self) -> Packed {
        let cells = self.len() * self.width;
        let (mut kinds, mut values) = (vec![CellKind::Null; cells], vec![0; cells]);
        if self.width > 0 {
            for column in 0..self.width {
                let Some(gathered) = self.column(column) else {
                    continue;
                };
                let rows = kinds
                    .chunks_exact_mut(self.width)
                    .zip(values.chunks_exact_mut(self.width));
                let cells = gathered.kinds.iter().zip(&gathered.values);
                for ((row_kinds, row_values), (&kind, &value)) in rows.zip(cells) {
                    row_kinds[column] = kind;
                    row_values[column] = value;
                }
            }
        }
        Packed {
            parts: self.parts.clone(),
            from_image: self.from_image.clone(),
            width: self.width,
            row_part: self.row_part.clone(),
            kinds,
            values,
        }
    }
}

/// Builds rows from image parts laid out by column, checking every part.
pub struct ColumnsBuilder {
    columns: Columns,
}

impl ColumnsBuilder {
    pub fn new(width: usize) -> Self {
        ColumnsBuilder {
            columns: Columns {
                parts: Vec::new(),
                from_image: Vec::new(),
                width,
                row_part: Vec::new(),
                first_row: Vec::new(),
                blocks: Vec::new(),
                gathered: (0..width).map(|_| OnceLock::new()).collect(),
                packed: OnceLock::new(),
            },
        }
    }

    /// Adds the `count` rows laid out by column from `at` bytes into image
    /// part `id` to its end. `Ok(false)`: they are not of the builder's
    /// width. Either way, a part that is not added leaves the rows as they
    /// were.
    pub fn add_part(&mut self, id: PartId, part: Bytes, at: usize, count: usize) -> Result<bool> {
        let (width, mut blocks) = read_blocks(&part, at, count)?;
        let columns = &mut self.columns;
        if count == 0 {
            // No cells, so any width: an empty table's part is written
            // without knowing its columns. Its blocks are never read.
            let none = read_integers(&[ALL_NULL], at, 0)?;
            blocks = (0..columns.width).map(|_| Block::Integers(none)).collect();
        } else if width != columns.width {
            return Ok(false);
        }
        let index = u32::try_from(columns.parts.len())
            .map_err(|_| Error::corruption("too many image parts"))?;
        columns.first_row.push(columns.row_part.len());
        columns
            .row_part
            .resize(columns.row_part.len() + count, index);
        columns.blocks.extend(blocks);
        columns.from_image.push(ReadPart {
            id,
            rows: count,
            bytes: part.len(),
        });
        columns.parts.push(part);
        Ok(true)
    }

    pub fn finish(self) -> Rows {
        Rows::from_columns(self.columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::rows::tests::assert_reads_as;
    use crate::catalog::{Cell, Head, Row};

    fn id(number: u32) -> PartId {
        PartId {
            number,
            head: Head {
                snapshot_id: 0,
                batch_count: 1,
            },
        }
    }

    /// The rows' tests' sample with NULLs and wide integers in its first
    /// column, and a column of NULLs only after its last.
    fn sample() -> Vec<Row> {
        let rows = crate::catalog::rows::tests::sample()
            .into_iter()
            .zip(0i64..);
        rows.map(|(mut row, i)| {
            row[0] = match i % 7 {
                0 => Cell::Null,
                _ => Cell::Int(i * 1_000_003 - 150_000_000),
            };
            row.push(Cell::Null);
            row
        })
        .collect()
    }

    /// `rows` laid out by column in parts of at most `per_part` rows, each
    /// behind a few bytes of header.
    fn read(rows: &[Row], per_part: usize) -> Rows {
        let source = Rows::from(rows.to_vec());
        let mut builder = ColumnsBuilder::new(5);
        for (number, start) in (0..rows.len()).step_by(per_part).enumerate() {
            let end = (start + per_part).min(rows.len());
            let mut part = b"head".to_vec();
            put_columns(&source, start..end, 5, &mut part);
            assert!(builder
                .add_part(id(number as u32), Bytes::from(part), 4, end - start)
                .unwrap());
        }
        builder.finish()
    }

    #[test]
    fn rows_laid_out_by_column_read_as_the_rows_they_hold() {
        let rows = sample();
        let read = read(&rows, 70);
        assert_eq!(read.image_parts().len(), 5);
        assert_reads_as(&read, &rows);
    }

    #[test]
    fn integer_columns_round_trip_at_every_width() {
        let extremes = [i64::MIN, i64::MAX, -1, 0, 1];
        let rows: Vec<Row> = (0..300i64)
            .map(|i| {
                vec![
                    Cell::Int(7),
                    Cell::Int(1_000 + i),
                    Cell::Int(extremes[i as usize % extremes.len()]),
                    if i % 2 == 0 {
                        Cell::Null
                    } else {
                        Cell::Int(-i * 70_000)
                    },
                    Cell::Int(i * 1_000_000_000),
                ]
            })
            .collect();
        let read = read(&rows, 128);
        assert_reads_as(&read, &rows);
        let stats = read.int_stats(2).unwrap();
        assert_eq!(stats.range, Some((i64::MIN, i64::MAX)));
        // A constant column takes no bytes per cell; ids that count up take one or two.
        let source = Rows::from(rows);
        let mut constant = Vec::new();
        let column = |c| {
            (0..300)
                .map(|row| source.cell(row, c).as_int())
                .collect::<Vec<_>>()
        };
        put_integers(&column(0), &mut constant);
        assert_eq!(constant.len(), INTEGERS_HEAD_BYTES);
        let mut counting = Vec::new();
        put_integers(&column(1), &mut counting);
        assert_eq!(counting.len(), INTEGERS_HEAD_BYTES + 2 * 300);
    }

    #[test]
    fn reading_cells_and_statistics_derives_no_row_wise_form() {
        let rows = sample();
        let read = read(&rows, 70);
        let stats = read.int_stats(0).unwrap();
        assert_eq!(stats.rows, 300);
        assert_eq!(stats.nulls, 43);
        assert_eq!(
            read.int_stats(4).map(|s| (s.nulls, s.range)),
            Some((300, None))
        );
        assert_eq!(read.int_stats(1), None);
        assert!(!read.is_row_wise());
        // A commit that appends derives it once and keeps the image's parts.
        let mut appended = read;
        appended.extend(&rows[..2]);
        assert!(appended.is_row_wise());
        assert_eq!(appended.image_parts().len(), 5);
        let mut expected = rows.clone();
        expected.extend_from_slice(&rows[..2]);
        assert_eq!(&*appended, expected.as_slice());
    }

    #[test]
    fn changes_keep_and_edit_rows_read_by_column() {
        let rows = sample();
        let read = read(&rows, 64);
        let kept = read.kept(|at| at % 2 == 0);
        let expected: Vec<Row> = rows.iter().step_by(2).cloned().collect();
        assert_eq!(&*kept, expected.as_slice());
        let edited = read.edited(&[(&rows[3], None)], &[&rows[0]]).unwrap();
        let mut expected = rows.clone();
        expected.remove(3);
        expected.push(rows[0].clone());
        assert_eq!(&*edited, expected.as_slice());
        let mut changed = read;
        changed.change(|rows| rows.truncate(2));
        assert_eq!(&*changed, &rows[..2]);
    }

    #[test]
    fn a_part_of_another_width_or_a_damaged_part_is_refused() {
        let rows = sample();
        let source = Rows::from(rows.clone());
        let mut part = Vec::new();
        put_columns(&source, 0..3, 5, &mut part);
        assert!(!ColumnsBuilder::new(4)
            .add_part(id(0), Bytes::from(part.clone()), 0, 3)
            .unwrap());
        assert!(ColumnsBuilder::new(5)
            .add_part(id(0), Bytes::from(part.clone()), 0, 4)
            .is_err());
        let short = Bytes::from(part[..part.len() - 1].to_vec());
        assert!(ColumnsBuilder::new(5).add_part(id(0), short, 0, 3).is_err());
        assert!(ColumnsBuilder::new(5)
            .add_part(id(0), Bytes::from_static(b"x"), 5, 0)
            .is_err());
        let text = part.iter().position(|&b| b == b'f').unwrap();
        part[text] = 0xff;
        assert!(ColumnsBuilder::new(5)
            .add_part(id(0), Bytes::from(part.clone()), 0, 3)
            .is_err());
        assert!(check(&Bytes::from(part), 0, 3).is_err());
    }
}
