//! The head image: a packed copy of committed tables, for cold attaches.
//!
//! A store keeps one record per catalog row, so reading a table costs one
//! SlateDB entry per row: after 5,000 commits, a cold attach iterates
//! 10,000 entries before DuckLake's first query can answer, at about two
//! microseconds each. The image packs the rows of a table, exactly as a scan
//! serves them, into a few large values under `image/<table>/<part>`.
//!
//! The image is derived, never authoritative. Its stamp carries the head it
//! was taken at and names every part with the head that part was written at;
//! a transaction uses a table's image only when the stamp is of its own head,
//! every part named is there with the head named, and the rows have the
//! table's shape, and reads the records otherwise. A writer takes the image
//! when it detaches, from the rows its transactions already hold: it keeps
//! the parts of tables its session only appended to and writes what follows
//! them, writes other tables whole, and deletes every part the new stamp does
//! not name; between detaches the image simply goes stale
//! ([design 0012](../../docs/design/0012-head-image.md),
//! [design 0021](../../docs/design/0021-a-detach-writes-what-the-session-added.md)).

use super::columns::{self, ColumnsBuilder};
use super::{Head, Row, Rows, TableRef};
use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use crate::store::value::{frame, put_cell, put_varint, unframe, Reader};
use crate::store::{ReadView, Store};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// A key and the value written under it.
pub type Entry = (Vec<u8>, Vec<u8>);

/// One table's committed rows, as an attach keeps them.
pub type TableRows = (TableRef, Arc<Rows>);

/// What taking an image writes and deletes.
#[derive(Debug, Default)]
pub struct Replacement {
    pub puts: Vec<Entry>,
    pub deletes: Vec<Vec<u8>>,
}

impl Replacement {
    /// The bytes the image's parts and stamp write.
    pub fn bytes(&self) -> usize {
        self.puts.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// The frame tag of an image part of the earlier layout, which held whole
/// rows one after another; such parts read as stale.
pub const IMAGE_TAG: u8 = 0xf2;

/// The frame tag of an image part: its rows laid out column by column
/// ([`columns`]).
pub const COLUMNS_TAG: u8 = 0xf5;

/// The most rows an attach keeps as appended to an imaged table it has not
/// read; past them the table is read from its records when asked for, and
/// imaged whole at the detach.
const MAX_APPENDED_ROWS: usize = 4096;

/// A part holds rows up to about this many bytes, so that no single value
/// grows with the catalog.
const PART_BYTES: usize = 1 << 20;

/// An image larger than this is not taken: writing it at every detach
/// would cost more than the records it saves reading, and the batch would
/// be larger than anything else a catalog writes.
pub const MAX_IMAGE_BYTES: usize = 64 << 20;

/// A catalog whose read tables hold fewer rows than this together gets no
/// image when a writer detaches: its records are as quick to read. Above
/// it, the image holds every table the session read, empty ones too: each
/// table read from its records costs a SlateDB scan (about half a
/// millisecond, even for no rows), and a cold attach reads twenty of them.
pub const MIN_IMAGE_ROWS: usize = 64;

/// The key of the image's stamp: the head the parts were taken at and the
/// tables they hold. A reader looks at it first, so a stale image costs one
/// point read, and a fresh one tells which parts to read, table by table,
/// when a transaction first asks for the table.
pub fn stamp_key() -> Vec<u8> {
    keys::prefix(Subspace::Image, None)
}

/// One part of a table's image as the stamp names it: the number in its key
/// and the head it was written at, which its header repeats. A part is used
/// only under a stamp that names it so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartId {
    pub number: u32,
    pub head: Head,
}

/// A part that rows were read from, and what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPart {
    pub id: PartId,
    pub rows: usize,
    /// The part's whole value.
    pub bytes: usize,
}

/// What a stamp says: the head it was written at, and each imaged table's
/// parts in row order. Parts written at earlier heads stay named as long as
/// the rows they hold are the table's leading rows: a writer whose session
/// only appended to a table writes the appended rows, not the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    head: Head,
    contents: HashMap<String, Vec<PartId>>,
}

impl Stamp {
    /// The head the image was taken at.
    pub fn head(&self) -> Head {
        self.head
    }
}

/// The frame tag of the stamp, whose parts are laid out by column. Stamps
/// of the earlier layouts read as stale, so that the next detach replaces
/// their images: [`ROWS_STAMP_TAG`] named parts of whole rows, and before
/// it a stamp held a part count per table, every part at the stamp's head,
/// under [`IMAGE_TAG`].
pub const STAMP_TAG: u8 = 0xf6;

/// The frame tag of a stamp whose parts hold whole rows.
pub const ROWS_STAMP_TAG: u8 = 0xf4;

/// A value's frame and the head it was taken at: how the stamp and every
/// part begin ([`read_head_cells`] reads it back).
fn framed_with_head(tag: u8, head: Head) -> Vec<u8> {
    let mut value = frame(tag);
    put_head(&mut value, head);
    value
}

fn put_head(value: &mut Vec<u8>, head: Head) {
    put_cell(value, &super::Cell::Int(head.snapshot_id));
    put_cell(value, &super::Cell::Int(head.batch_count));
}

fn encode_stamp(stamp: &Stamp) -> Vec<u8> {
    let mut value = framed_with_head(STAMP_TAG, stamp.head);
    let mut names: Vec<(&String, &Vec<PartId>)> = stamp.contents.iter().collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    put_varint(&mut value, names.len() as u64);
    for (name, parts) in names {
        put_cell(&mut value, &super::Cell::Text(name.clone()));
        put_varint(&mut value, parts.len() as u64);
        for part in parts {
            put_varint(&mut value, u64::from(part.number));
            put_head(&mut value, part.head);
        }
    }
    value
}

fn read_head_cells(r: &mut Reader<'_>) -> Result<Head> {
    let mut int = || {
        r.cell()?
            .as_int()
            .ok_or_else(|| Error::corruption("image value without its head"))
    };
    Ok(Head {
        snapshot_id: int()?,
        batch_count: int()?,
    })
}

fn read_u32(r: &mut Reader<'_>, what: &str) -> Result<u32> {
    u32::try_from(r.varint()?).map_err(|_| Error::corruption(format!("image {what} out of range")))
}

fn decode_stamp(value: &[u8]) -> Result<Stamp> {
    decode_stamp_tagged(STAMP_TAG, value)
}

fn decode_stamp_tagged(tag: u8, value: &[u8]) -> Result<Stamp> {
    let (_, payload) = unframe(tag, value)?;
    let mut r = Reader::new(payload);
    let head = read_head_cells(&mut r)?;
    let tables = r.varint()?;
    let mut contents = HashMap::new();
    for _ in 0..tables {
        let name = match r.cell()? {
            super::Cell::Text(name) => name,
            _ => {
                return Err(Error::corruption(
                    "image stamp names a table by a non-text cell",
                ))
            }
        };
        let count = read_u32(&mut r, "part count")?;
        let mut parts = Vec::new();
        for _ in 0..count {
            let number = read_u32(&mut r, "part number")?;
            parts.push(PartId {
                number,
                head: read_head_cells(&mut r)?,
            });
        }
        contents.insert(name, parts);
    }
    r.finish()?;
    Ok(Stamp { head, contents })
}

async fn read_stamp(store: &Store, view: &ReadView) -> Result<Option<Stamp>> {
    let value = store.get(view, &stamp_key()).await?;
    Ok(value.and_then(|v| decode_stamp(&v).ok()))
}

/// The store's stamp; `None` without an image, or with a stamp that does
/// not decode or that an earlier layout wrote: such an image is stale, and
/// the next detach replaces it.
pub async fn current(store: &Store, view: &ReadView) -> Result<Option<Stamp>> {
    read_stamp(store, view).await
}

/// The prefix of every part of `table`'s image.
pub fn table_prefix(table: TableRef) -> Vec<u8> {
    keys::key(Subspace::Image, None, &[super::Cell::Text(table.name())])
}

fn part_key(table: TableRef, part: u32) -> Vec<u8> {
    let mut key = table_prefix(table);
    keys::push_cell(&mut key, &super::Cell::Int(i64::from(part)));
    key
}

/// The table a part's key names, and the part's number.
pub fn decode_key(key: &[u8]) -> Result<(String, u32)> {
    match keys::decode_cells(key, 1)?.as_slice() {
        [super::Cell::Text(name), super::Cell::Int(part)] => {
            let part = u32::try_from(*part)
                .map_err(|_| Error::corruption(format!("image part {part} out of range")))?;
            Ok((name.clone(), part))
        }
        _ => Err(Error::corruption(format!("malformed image key {key:02x?}"))),
    }
}

/// The head a part was written at, and its rows' bytes.
struct PartHeader<'a> {
    head: Head,
    rows: usize,
    payload: Reader<'a>,
}

fn read_header(tag: u8, value: &[u8]) -> Result<PartHeader<'_>> {
    let (_, payload) = unframe(tag, value)?;
    let mut r = Reader::new(payload);
    let head = read_head_cells(&mut r)?;
    let rows = r.length()?;
    Ok(PartHeader {
        head,
        rows,
        payload: r,
    })
}

/// Rows `range` of `rows` as parts of `table`'s image written at `head`,
/// numbered from `first`: each part's id and its `(key, value)`.
fn encode_range(
    table: TableRef,
    head: Head,
    rows: &Rows,
    range: Range<usize>,
    first: u32,
) -> Vec<(PartId, Entry)> {
    // Parts are cut where the rows' encoded bytes reach PART_BYTES.
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let (mut start, mut bytes) = (range.start, 0);
    let mut encoded = Vec::new();
    for row in range.clone() {
        encoded.clear();
        rows.put_row(row, &mut encoded);
        bytes += encoded.len();
        if bytes >= PART_BYTES {
            chunks.push(start..row + 1);
            (start, bytes) = (row + 1, 0);
        }
    }
    if start < range.end || chunks.is_empty() {
        chunks.push(start..range.end);
    }
    let width = rows.width();
    chunks
        .into_iter()
        .zip(first..)
        .map(|(chunk, number)| {
            let id = PartId { number, head };
            let mut value = framed_with_head(COLUMNS_TAG, head);
            put_varint(&mut value, chunk.len() as u64);
            columns::put_columns(rows, chunk, width, &mut value);
            (id, (part_key(table, number), value))
        })
        .collect()
}

/// The parts of `table`'s image at `head`: `(key, value)` pairs.
#[cfg(test)]
fn encode(table: TableRef, head: Head, rows: &Rows) -> Vec<Entry> {
    encode_range(table, head, rows, 0..rows.len(), 0)
        .into_iter()
        .map(|(_, entry)| entry)
        .collect()
}

/// The image a read view holds: its stamp's table of contents, and the
/// parts of each table read so far, not yet decoded. A table's parts are
/// read the first time a transaction asks for the table, by point reads: a
/// cold attach's first query wants `ducklake_metadata` alone, and reading
/// the snapshots, the changes and the inlined rows with it (most of the
/// image's bytes) would hold it up.
#[derive(Debug, Default)]
pub struct Images {
    contents: HashMap<String, Vec<PartId>>,
    read: Mutex<HashMap<String, Arc<[Bytes]>>>,
    /// The rows this process's commits appended to a table since the image
    /// was taken, while appending is all they did to it: the table is its
    /// parts' rows and these.
    appended: HashMap<String, Vec<Row>>,
    /// Tables whose parts were read and could not be used (damaged, of
    /// another shape or layout): the image does not hold them, so the next
    /// detach writes them again.
    unusable: Mutex<HashSet<String>>,
}

impl Images {
    /// The image taken at `head`, if the store holds one: one point read
    /// of the stamp. Empty when the image is stale or missing.
    pub async fn read_at(store: &Store, view: &ReadView, head: Head) -> Result<Images> {
        Ok(match read_stamp(store, view).await? {
            Some(stamp) if stamp.head == head => Images {
                contents: stamp.contents,
                ..Images::default()
            },
            _ => Images::default(),
        })
    }

    fn read_parts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[Bytes]>>> {
        // The map only caches reads: one a panicking reader left is whole.
        self.read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This image at the head after a commit. `added` tells, for each
    /// table, the rows the commit appended to it (none for a table it left
    /// alone), or `None` when it changed the table otherwise: such a table
    /// is dropped, as is one appended to past [`MAX_APPENDED_ROWS`]. Taken
    /// whole when no reader shares it, so a commit costs what it appended.
    pub fn carried(images: Arc<Images>, added: impl Fn(&str) -> Option<Vec<Row>>) -> Images {
        let mut carried = Arc::try_unwrap(images).unwrap_or_else(|shared| Images {
            contents: shared.contents.clone(),
            read: Mutex::new(shared.read_parts().clone()),
            appended: shared.appended.clone(),
            unusable: Mutex::new(shared.unusable_tables().clone()),
        });
        let mut dropped = Vec::new();
        for name in carried.contents.keys() {
            match added(name) {
                Some(added) if added.is_empty() => {}
                Some(added) => {
                    let appended = carried.appended.entry(name.clone()).or_default();
                    appended.extend(added);
                    if appended.len() > MAX_APPENDED_ROWS {
                        dropped.push(name.clone());
                    }
                }
                None => dropped.push(name.clone()),
            }
        }
        let read = carried.read.get_mut().unwrap_or_else(|p| p.into_inner());
        for name in &dropped {
            carried.contents.remove(name);
            carried.appended.remove(name);
            read.remove(name);
        }
        carried
    }

    fn unusable_tables(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // The set only grows: one a panicking reader left is whole.
        self.unusable
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the image has parts of `table` that were not found unusable.
    pub fn holds(&self, table: TableRef) -> bool {
        let name = table.name();
        self.contents.contains_key(&name) && !self.unusable_tables().contains(&name)
    }

    /// `table`'s rows, packed, when every part the stamp names for it is
    /// there as named, every row has `width` cells and `in_order` accepts
    /// the rows appended since after the parts' last row; `None` otherwise.
    /// The parts are read through `view` the first time. An image that
    /// fails to decode, or whose parts another writer's image has since
    /// replaced, is not an error: the records are the truth.
    pub async fn rows(
        &self,
        store: &Store,
        view: &ReadView,
        table: TableRef,
        width: usize,
        in_order: impl FnOnce(Option<Row>, &[&Row]) -> bool,
    ) -> Result<Option<Rows>> {
        let name = table.name();
        let Some(ids) = self.contents.get(&name) else {
            return Ok(None);
        };
        let known = self.read_parts().get(&name).cloned();
        let parts = match known {
            Some(parts) => parts,
            None => {
                let mut parts = Vec::new();
                for id in ids {
                    match store.get(view, &part_key(table, id.number)).await? {
                        Some(value) => parts.push(value),
                        None => return Ok(None),
                    }
                }
                let parts: Arc<[Bytes]> = parts.into();
                self.read_parts().insert(name.clone(), parts.clone());
                parts
            }
        };
        let Some(mut rows) = decode_parts(&parts, ids, width).ok().flatten() else {
            self.unusable_tables().insert(name);
            return Ok(None);
        };
        if let Some(appended) = self.appended.get(&name) {
            let appended: Vec<&Row> = appended.iter().collect();
            let last = rows.len().checked_sub(1).and_then(|at| rows.row(at));
            if !in_order(last, &appended) {
                return Ok(None);
            }
            rows.extend(appended);
        }
        Ok(Some(rows))
    }
}

/// Whether one image value decodes whole: the stamp, or a part's key,
/// header and rows.
/// Values of the earlier layout (design 0012) decode too: they are stale,
/// not damaged, and the next detach replaces them.
pub fn check_part(key: &[u8], value: &[u8]) -> Result<()> {
    if key == stamp_key().as_slice() {
        return decode_stamp(value).map(|_| ()).or_else(|error| {
            match decode_stamp_tagged(ROWS_STAMP_TAG, value) {
                Ok(_) => Ok(()),
                Err(_) => check_earlier_stamp(value).map_err(|_| error),
            }
        });
    }
    decode_key(key)?;
    if let Ok(header) = read_header(COLUMNS_TAG, value) {
        let at = value.len() - header.payload.remaining();
        return columns::check(value, at, header.rows);
    }
    let rows = |mut r: Reader<'_>, count: usize| -> Result<()> {
        for _ in 0..count {
            r.row()?;
        }
        r.finish()
    };
    let header = read_header(IMAGE_TAG, value)?;
    rows(header.payload, header.rows).or_else(|error| {
        // The earlier layout put the table's part count before the rows'.
        let (_, payload) = unframe(IMAGE_TAG, value)?;
        let mut r = Reader::new(payload);
        read_head_cells(&mut r)?;
        r.varint()?;
        let count = r.length()?;
        rows(r, count).map_err(|_| error)
    })
}

/// A stamp of the earlier layout: a head, then a part count per table.
fn check_earlier_stamp(value: &[u8]) -> Result<()> {
    let (_, payload) = unframe(IMAGE_TAG, value)?;
    let mut r = Reader::new(payload);
    read_head_cells(&mut r)?;
    if r.remaining() > 0 {
        for _ in 0..r.varint()? {
            r.cell()?;
            r.varint()?;
        }
    }
    r.finish()
}

/// A table's rows from the parts `ids` name, in their order; `None` when a
/// part is not the one named.
fn decode_parts(parts: &[Bytes], ids: &[PartId], width: usize) -> Result<Option<Rows>> {
    if parts.len() != ids.len() {
        return Ok(None);
    }
    let mut rows = ColumnsBuilder::new(width);
    for (value, id) in parts.iter().zip(ids) {
        let header = read_header(COLUMNS_TAG, value)?;
        if header.head != id.head {
            return Ok(None);
        }
        let at = value.len() - header.payload.remaining();
        if !rows.add_part(*id, value.clone(), at, header.rows)? {
            return Ok(None);
        }
    }
    Ok(Some(rows.finish()))
}

/// How many times a part must hold the bytes of the one after it to stay
/// apart from it when a writer appends. Appended parts merge like a binary
/// counter: each appended row is rewritten a few times at most, a table's
/// image is a few parts beyond its full ones, and a detach after one commit
/// writes about what the commit added, not the table.
const TAIL_PART_RATIO: usize = 2;

/// How `table`'s next image is made: the parts of the present one its
/// leading rows were read from, when `current` (the stamp's list) still
/// names exactly those, less the smaller parts at their end, then the rows
/// after what is kept, to write; otherwise no part kept and every row
/// written.
fn plan(rows: &Rows, current: Option<&Vec<PartId>>) -> (Vec<ReadPart>, Range<usize>) {
    let read = rows.image_parts();
    let read_rows: usize = read.iter().map(|part| part.rows).sum();
    let reusable = current.is_some_and(|current| {
        read.len() == current.len() && read.iter().zip(current).all(|(part, id)| part.id == *id)
    });
    if read.is_empty() || !reusable || read_rows > rows.len() {
        return (Vec::new(), 0..rows.len());
    }
    let mut kept = read.to_vec();
    let mut start = read_rows;
    let mut tail_bytes: usize = (start..rows.len())
        .map(|row| {
            let mut encoded = Vec::new();
            rows.put_row(row, &mut encoded);
            encoded.len()
        })
        .sum();
    if tail_bytes == 0 {
        return (kept, start..start);
    }
    while let Some(before) = kept.last() {
        if before.bytes >= PART_BYTES || before.bytes >= TAIL_PART_RATIO * tail_bytes {
            break;
        }
        start -= before.rows;
        tail_bytes += before.bytes;
        kept.pop();
    }
    (kept, start..rows.len())
}

/// What taking an image at `head` writes: its stamp and the parts of every
/// table of `tables` that `current` (the store's stamp) does not already
/// hold, and deletes of every other part `existing` holds.
pub fn replacement(
    head: Head,
    tables: &[TableRows],
    existing: &[Vec<u8>],
    current: Option<&Stamp>,
) -> Replacement {
    let mut stamp = Stamp {
        head,
        contents: HashMap::new(),
    };
    let mut parts = Vec::new();
    let mut kept: HashSet<Vec<u8>> = HashSet::new();
    for (table, rows) in tables {
        let name = table.name();
        let (kept_parts, written) = plan(rows, current.and_then(|stamp| stamp.contents.get(&name)));
        let mut ids = Vec::new();
        for part in &kept_parts {
            kept.insert(part_key(*table, part.id.number));
            ids.push(part.id);
        }
        // An unchanged table keeps its parts, and an empty one has none: the
        // stamp's empty list says all there is, so reading it costs no point
        // read (DuckLake's attach reads a dozen empty tables, and the first
        // statement after an expiry the one it never read).
        if !written.is_empty() {
            let first = kept_parts
                .iter()
                .map(|part| part.id.number + 1)
                .max()
                .unwrap_or(0);
            for (id, entry) in encode_range(*table, head, rows, written, first) {
                ids.push(id);
                parts.push(entry);
            }
        }
        stamp.contents.insert(name, ids);
    }
    let puts: Vec<Entry> = std::iter::once((stamp_key(), encode_stamp(&stamp)))
        .chain(parts)
        .collect();
    let written: HashSet<&[u8]> = puts.iter().map(|(key, _)| key.as_slice()).collect();
    let deletes = existing
        .iter()
        .filter(|key| !written.contains(key.as_slice()) && !kept.contains(*key))
        .cloned()
        .collect();
    Replacement { puts, deletes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Cell, Kind, Row};
    use std::collections::BTreeMap;

    fn head(batch_count: i64) -> Head {
        Head {
            snapshot_id: batch_count - 1,
            batch_count,
        }
    }

    fn rows(n: i64) -> Vec<Row> {
        (0..n).map(row).collect()
    }

    fn row(i: i64) -> Row {
        vec![Cell::Int(i), Cell::Text(format!("row {i}")), Cell::Null]
    }

    /// The image values a store holds, as detaches write and delete them.
    #[derive(Default)]
    struct Stored(BTreeMap<Vec<u8>, Vec<u8>>);

    impl Stored {
        /// Takes an image of `tables` at `head` over what is stored; returns
        /// the bytes it wrote.
        fn take(&mut self, head: Head, tables: &[TableRows]) -> usize {
            let existing: Vec<Vec<u8>> = self.0.keys().cloned().collect();
            let current = self.0.get(&stamp_key()).and_then(|v| decode_stamp(v).ok());
            let image = replacement(head, tables, &existing, current.as_ref());
            let bytes = image.bytes();
            for key in image.deletes {
                self.0.remove(&key);
            }
            self.0.extend(image.puts);
            bytes
        }

        fn stamp(&self) -> Stamp {
            decode_stamp(&self.0[&stamp_key()]).unwrap()
        }

        /// `table`'s rows as an attach reads them.
        fn read(&self, table: TableRef, width: usize) -> Option<Rows> {
            let ids = self.stamp().contents.get(&table.name())?.clone();
            let parts: Option<Vec<Bytes>> = ids
                .iter()
                .map(|id| {
                    self.0
                        .get(&part_key(table, id.number))
                        .map(|v| Bytes::from(v.clone()))
                })
                .collect();
            decode_parts(&parts?, &ids, width).ok().flatten()
        }

        fn parts_of(&self, table: TableRef) -> usize {
            self.stamp().contents[&table.name()].len()
        }
    }

    fn one(table: TableRef, rows: Rows) -> Vec<TableRows> {
        vec![(table, Arc::new(rows))]
    }

    #[test]
    fn an_image_round_trips_across_parts() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let many = rows(100_000);
        let mut stored = Stored::default();
        stored.take(head(7), &one(table, Rows::from(many.clone())));
        assert!(
            stored.parts_of(table) > 1,
            "{} parts",
            stored.parts_of(table)
        );
        assert_eq!(stored.read(table, 3), Some(Rows::from(many)));
    }

    #[test]
    fn a_part_of_another_head_a_missing_part_or_another_shape_is_not_used() {
        let table = TableRef::InlineData {
            table_id: 1,
            schema_version: 2,
        };
        let many = Rows::from(rows(100_000));
        let parts = encode(table, head(7), &many);
        let ids = |head: Head| -> Vec<PartId> {
            (0..parts.len() as u32)
                .map(|number| PartId { number, head })
                .collect()
        };
        let values: Vec<Bytes> = parts.iter().map(|(_, v)| Bytes::from(v.clone())).collect();
        assert!(decode_parts(&values, &ids(head(7)), 3).unwrap().is_some());
        assert_eq!(decode_parts(&values, &ids(head(8)), 3).unwrap(), None);
        assert_eq!(decode_parts(&values, &ids(head(7)), 4).unwrap(), None);
        assert_eq!(decode_parts(&values[1..], &ids(head(7)), 3).unwrap(), None);
    }

    #[test]
    fn an_empty_table_has_no_part_and_reads_back_empty() {
        let table = TableRef::Fixed(Kind::Tag);
        let mut stored = Stored::default();
        stored.take(head(3), &one(table, Rows::from(Vec::new())));
        assert_eq!(stored.parts_of(table), 0);
        assert_eq!(stored.read(table, 5), Some(Rows::from(Vec::new())));
        // Rows appended later go into a part of their own, and read back.
        stored.take(head(4), &one(table, Rows::from(rows(3))));
        assert_eq!(stored.parts_of(table), 1);
        assert_eq!(stored.read(table, 3), Some(Rows::from(rows(3))));
    }

    #[test]
    fn a_new_image_deletes_the_parts_it_does_not_keep() {
        let big = TableRef::Fixed(Kind::Snapshot);
        let small = TableRef::Fixed(Kind::Schema);
        let gone = TableRef::InlineData {
            table_id: 9,
            schema_version: 1,
        };
        let existing = vec![part_key(big, 0), part_key(big, 1), part_key(gone, 0)];
        let tables = vec![
            (big, Arc::new(Rows::from(rows(100)))),
            (small, Arc::new(Rows::from(rows(2)))),
        ];
        let Replacement { puts, deletes } = replacement(head(4), &tables, &existing, None);
        assert_eq!(
            puts.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            vec![stamp_key(), part_key(big, 0), part_key(small, 0)]
        );
        assert_eq!(deletes, vec![part_key(big, 1), part_key(gone, 0)]);
    }

    #[test]
    fn a_stamp_names_each_tables_parts_and_an_earlier_layout_reads_as_stale() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let tables = vec![(table, Arc::new(Rows::from(rows(100_000))))];
        let Replacement { puts, .. } = replacement(head(4), &tables, &[], None);
        assert!(puts.len() > 2, "{} parts", puts.len() - 1);
        let stamp = decode_stamp(&puts[0].1).unwrap();
        assert_eq!(stamp.head, head(4));
        let named: Vec<PartId> = (0..puts.len() as u32 - 1)
            .map(|number| PartId {
                number,
                head: head(4),
            })
            .collect();
        assert_eq!(stamp.contents, HashMap::from([(table.name(), named)]));
        // Before parts were named one by one, a stamp held a part count per
        // table under the parts' own tag.
        let mut earlier = framed_with_head(IMAGE_TAG, head(4));
        put_varint(&mut earlier, 1);
        put_cell(&mut earlier, &Cell::Text(table.name()));
        put_varint(&mut earlier, 2);
        assert!(decode_stamp(&earlier).is_err());
        // Stale, not damaged: `moraine verify` passes it.
        assert!(check_part(&stamp_key(), &earlier).is_ok());
        assert!(check_part(&stamp_key(), &puts[0].1).is_ok());
        assert!(check_part(&stamp_key(), &puts[0].1[..puts[0].1.len() - 1]).is_err());
        // A part of the earlier layout, whose header also held the table's part count.
        let mut part = framed_with_head(IMAGE_TAG, head(4));
        put_varint(&mut part, 2);
        put_varint(&mut part, 1);
        crate::store::value::put_row(&mut part, &row(1));
        assert!(check_part(&part_key(table, 0), &part).is_ok());
        assert!(check_part(&part_key(table, 0), &puts[1].1).is_ok());
        assert!(check_part(&part_key(table, 0), &part[..part.len() - 1]).is_err());
        // Then parts held whole rows, under a stamp of their own tag: stale
        // too, so the next detach lays them out by column.
        let mut rows_stamp = encode_stamp(&stamp);
        rows_stamp[4] = ROWS_STAMP_TAG;
        assert!(decode_stamp(&rows_stamp).is_err());
        assert!(check_part(&stamp_key(), &rows_stamp).is_ok());
        let mut rows_part = framed_with_head(IMAGE_TAG, head(4));
        put_varint(&mut rows_part, 2);
        crate::store::value::put_row(&mut rows_part, &row(1));
        crate::store::value::put_row(&mut rows_part, &row(2));
        assert!(check_part(&part_key(table, 0), &rows_part).is_ok());
        let id = PartId {
            number: 0,
            head: head(4),
        };
        assert!(decode_parts(&[Bytes::from(rows_part)], &[id], 3).is_err());
    }

    /// A session that only appends to a table read from the image writes
    /// what it appended, merged with the smaller parts before it, and the
    /// image reads back as the whole table.
    #[test]
    fn an_appended_table_keeps_its_parts_and_writes_about_what_was_added() {
        let table = TableRef::Fixed(Kind::DataFile);
        let mut stored = Stored::default();
        let first = stored.take(head(1), &one(table, Rows::from(rows(20_000))));
        let mut expected = rows(20_000);
        let mut largest_append = 0;
        for session in 0..200i64 {
            let mut rows = stored.read(table, 3).unwrap();
            assert!(!rows.image_parts().is_empty());
            let added: Vec<Row> = (0..3).map(|k| row(1_000_000 + session * 3 + k)).collect();
            rows.extend(added.iter());
            expected.extend(added);
            let written = stored.take(head(session + 2), &one(table, rows));
            largest_append = largest_append.max(written);
            assert_eq!(stored.read(table, 3), Some(Rows::from(expected.clone())));
            assert!(
                stored.parts_of(table) <= 16,
                "{} parts",
                stored.parts_of(table)
            );
        }
        // A binary counter's carries: at most the whole tail at once, never
        // the table's full parts.
        assert!(largest_append < first, "{largest_append} of {first}");
        // No stray parts are left behind.
        let named = stored.parts_of(table);
        assert_eq!(stored.0.len(), named + 1);
    }

    /// Rows changed other than by appends, rows not read from the image,
    /// and an image another writer replaced are written whole.
    #[test]
    fn a_table_changed_otherwise_or_read_elsewhere_is_written_whole() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let mut stored = Stored::default();
        stored.take(head(1), &one(table, Rows::from(rows(50_000))));
        let whole = stored.take(head(2), &one(table, Rows::from(rows(50_000))));
        let read = stored.read(table, 3).unwrap();
        let kept = read.kept(|at| at != 7);
        let after_delete = stored.take(head(3), &one(table, kept.clone()));
        assert!(after_delete * 10 > whole * 9, "{after_delete} of {whole}");
        assert_eq!(stored.read(table, 3), Some(kept));
        // Read before the image was replaced: its parts are no longer named.
        let mut stale = Stored::default();
        stale.take(head(3), &one(table, Rows::from(rows(50_000))));
        let mut old = stale.read(table, 3).unwrap();
        stored.take(head(4), &one(table, Rows::from(rows(10))));
        old.extend([row(99)].iter());
        let rewritten = stored.take(head(5), &one(table, old.clone()));
        assert!(rewritten * 10 > whole * 9, "{rewritten} of {whole}");
        assert_eq!(stored.read(table, 3), Some(old));
    }

    #[test]
    fn an_unchanged_table_writes_only_the_stamp() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let mut stored = Stored::default();
        stored.take(head(1), &one(table, Rows::from(rows(50_000))));
        let read = stored.read(table, 3).unwrap();
        let parts = stored.parts_of(table);
        let written = stored.take(head(2), &one(table, read));
        assert!(written < 1_000, "{written}");
        assert_eq!(stored.parts_of(table), parts);
        assert_eq!(stored.read(table, 3), Some(Rows::from(rows(50_000))));
    }

    #[test]
    fn garbage_is_never_used_and_never_panics() {
        let junk = Bytes::from_static(b"MRN\x02\xf2\xff\xff");
        let id = PartId {
            number: 0,
            head: head(1),
        };
        assert!(decode_parts(&[junk], &[id], 3).map_or(true, |rows| rows.is_none()));
        assert!(decode_stamp(b"MRN\x02\xf4\xff").is_err());
        assert!(decode_key(b"\x07garbage").is_err());
    }
}
