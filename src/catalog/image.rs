//! The head image: a packed copy of committed tables, for cold attaches.
//!
//! A store keeps one record per catalog row, so reading a table costs one
//! SlateDB entry per row: after 5,000 commits, a cold attach iterates
//! 10,000 entries before DuckLake's first query can answer, at about two
//! microseconds each. The image packs the rows of a table, exactly as a scan
//! serves them, into a few large values under `image/<table>/<part>`.
//!
//! The image is derived, never authoritative. Every part is stamped with the
//! head it was taken at; a transaction uses a table's image only when every
//! part carries the transaction's own head and the rows have the table's
//! shape, and reads the records otherwise. A writer takes the image when it
//! detaches, from the rows its transactions already hold, and the same
//! write deletes the parts of every earlier image; between detaches the
//! image simply goes stale ([design 0012](../../docs/design/0012-head-image.md)).

use super::rows::PackedBuilder;
use super::{Head, Rows, TableRef};
use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use crate::store::value::{frame, put_cell, put_varint, unframe, Reader};
use crate::store::{ReadView, Store};
use bytes::Bytes;
use std::collections::HashMap;
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

/// The frame tag of an image part.
pub const IMAGE_TAG: u8 = 0xf2;

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

/// What a stamp says: the head, and each imaged table's part count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    head: Head,
    contents: HashMap<String, u32>,
}

/// An image value's frame and the head it was taken at: how the stamp and
/// every part begin ([`read_head_cells`] reads it back).
fn framed_with_head(head: Head) -> Vec<u8> {
    let mut value = frame(IMAGE_TAG);
    put_cell(&mut value, &super::Cell::Int(head.snapshot_id));
    put_cell(&mut value, &super::Cell::Int(head.batch_count));
    value
}

fn encode_stamp(stamp: &Stamp) -> Vec<u8> {
    let mut value = framed_with_head(stamp.head);
    let mut names: Vec<(&String, &u32)> = stamp.contents.iter().collect();
    names.sort();
    put_varint(&mut value, names.len() as u64);
    for (name, parts) in names {
        put_cell(&mut value, &super::Cell::Text(name.clone()));
        put_varint(&mut value, u64::from(*parts));
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

/// A stamp, or `None` for one whose image predates the table of contents
/// (a head alone): that image is whole, and stale to this layout.
fn decode_stamp(value: &[u8]) -> Result<Option<Stamp>> {
    let (_, payload) = unframe(IMAGE_TAG, value)?;
    let mut r = Reader::new(payload);
    let head = read_head_cells(&mut r)?;
    if r.remaining() == 0 {
        return Ok(None);
    }
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
        let parts = u32::try_from(r.varint()?)
            .map_err(|_| Error::corruption("image part count out of range"))?;
        contents.insert(name, parts);
    }
    r.finish()?;
    Ok(Some(Stamp { head, contents }))
}

async fn read_stamp(store: &Store, view: &ReadView) -> Result<Option<Stamp>> {
    let value = store.get(view, &stamp_key()).await?;
    Ok(value.and_then(|v| decode_stamp(&v).ok().flatten()))
}

/// The head the store's image was taken at; `None` without an image, or
/// with a stamp that does not decode or that an earlier layout wrote: such
/// an image is stale, and the next detach replaces it.
pub async fn stamp(store: &Store, view: &ReadView) -> Result<Option<Head>> {
    Ok(read_stamp(store, view).await?.map(|stamp| stamp.head))
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

/// The head and part count a part carries, and its rows' bytes.
struct PartHeader<'a> {
    head: Head,
    parts: u32,
    rows: usize,
    payload: Reader<'a>,
}

fn read_header(value: &[u8]) -> Result<PartHeader<'_>> {
    let (_, payload) = unframe(IMAGE_TAG, value)?;
    let mut r = Reader::new(payload);
    let head = read_head_cells(&mut r)?;
    let parts = u32::try_from(r.varint()?)
        .map_err(|_| Error::corruption("image part count out of range"))?;
    let rows = r.length()?;
    Ok(PartHeader {
        head,
        parts,
        rows,
        payload: r,
    })
}

/// The parts of `table`'s image at `head`: `(key, value)` pairs.
pub fn encode(table: TableRef, head: Head, rows: &Rows) -> Vec<Entry> {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut current = Vec::new();
    let mut in_current = 0;
    for row in 0..rows.len() {
        rows.put_row(row, &mut current);
        in_current += 1;
        if current.len() >= PART_BYTES {
            chunks.push(std::mem::take(&mut current));
            counts.push(std::mem::take(&mut in_current));
        }
    }
    if in_current > 0 || chunks.is_empty() {
        chunks.push(current);
        counts.push(in_current);
    }
    let parts = chunks.len() as u64;
    chunks
        .into_iter()
        .zip(counts)
        .enumerate()
        .map(|(i, (body, count))| {
            let mut value = framed_with_head(head);
            put_varint(&mut value, parts);
            put_varint(&mut value, count as u64);
            value.extend_from_slice(&body);
            (part_key(table, i as u32), value)
        })
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
    contents: HashMap<String, u32>,
    read: Mutex<HashMap<String, Arc<[Bytes]>>>,
    /// The head the parts were taken at, when the image was carried to a
    /// later head across commits that changed none of the tables it keeps.
    taken_at: Option<Head>,
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

    /// This image at the head after a commit, keeping only the tables
    /// `unchanged` accepts: their rows at the new head are the ones taken.
    pub fn carried(&self, taken_at: Head, unchanged: impl Fn(&str) -> bool) -> Images {
        let read = self
            .read_parts()
            .iter()
            .filter(|(name, _)| unchanged(name))
            .map(|(name, parts)| (name.clone(), parts.clone()))
            .collect();
        Images {
            contents: self
                .contents
                .iter()
                .filter(|(name, _)| unchanged(name))
                .map(|(name, parts)| (name.clone(), *parts))
                .collect(),
            read: Mutex::new(read),
            taken_at: Some(self.taken_at.unwrap_or(taken_at)),
        }
    }

    /// Whether the image has parts of `table`.
    pub fn holds(&self, table: TableRef) -> bool {
        self.contents.contains_key(&table.name())
    }

    /// `table`'s rows, packed, when its image is whole, taken at `head`,
    /// and every row has `width` cells; `None` otherwise. The parts are read
    /// through `view` the first time. An image that fails to decode, or
    /// whose parts another writer's image has since replaced, is not an
    /// error: the records are the truth.
    pub async fn rows(
        &self,
        store: &Store,
        view: &ReadView,
        table: TableRef,
        head: Head,
        width: usize,
    ) -> Result<Option<Rows>> {
        let name = table.name();
        let Some(&count) = self.contents.get(&name) else {
            return Ok(None);
        };
        let known = self.read_parts().get(&name).cloned();
        let parts = match known {
            Some(parts) => parts,
            None => {
                let mut parts = Vec::new();
                for part in 0..count {
                    match store.get(view, &part_key(table, part)).await? {
                        Some(value) => parts.push(value),
                        None => return Ok(None),
                    }
                }
                let parts: Arc<[Bytes]> = parts.into();
                self.read_parts().insert(name, parts.clone());
                parts
            }
        };
        Ok(decode_parts(&parts, self.taken_at.unwrap_or(head), width)
            .ok()
            .flatten())
    }
}

/// Whether one image value decodes whole: the stamp, or a part's key,
/// header and rows.
pub fn check_part(key: &[u8], value: &[u8]) -> Result<()> {
    if key == stamp_key().as_slice() {
        return decode_stamp(value).map(|_| ());
    }
    decode_key(key)?;
    let mut header = read_header(value)?;
    for _ in 0..header.rows {
        header.payload.row()?;
    }
    header.payload.finish()
}

/// A table's rows from its parts, in part order.
fn decode_parts(parts: &[Bytes], head: Head, width: usize) -> Result<Option<Rows>> {
    let mut rows = PackedBuilder::new(width);
    for value in parts {
        let header = read_header(value)?;
        if header.head != head || header.parts as usize != parts.len() {
            return Ok(None);
        }
        let at = value.len() - header.payload.remaining();
        if !rows.add_part(value.clone(), at, header.rows)? {
            return Ok(None);
        }
    }
    Ok(Some(rows.finish()))
}

/// What taking an image at `head` writes: its stamp and the parts of
/// every table of `tables`, and deletes of every other part `existing`
/// holds.
pub fn replacement(head: Head, tables: &[TableRows], existing: &[Vec<u8>]) -> Replacement {
    let mut stamp = Stamp {
        head,
        contents: HashMap::new(),
    };
    let mut parts = Vec::new();
    for (table, rows) in tables {
        let encoded = encode(*table, head, rows);
        stamp.contents.insert(table.name(), encoded.len() as u32);
        parts.extend(encoded);
    }
    let puts: Vec<Entry> = std::iter::once((stamp_key(), encode_stamp(&stamp)))
        .chain(parts)
        .collect();
    let written: std::collections::HashSet<&[u8]> =
        puts.iter().map(|(key, _)| key.as_slice()).collect();
    let deletes = existing
        .iter()
        .filter(|key| !written.contains(key.as_slice()))
        .cloned()
        .collect();
    Replacement { puts, deletes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Cell, Kind, Row};

    fn head(batch_count: i64) -> Head {
        Head {
            snapshot_id: batch_count - 1,
            batch_count,
        }
    }

    fn rows(n: i64) -> Vec<Row> {
        (0..n)
            .map(|i| vec![Cell::Int(i), Cell::Text(format!("row {i}")), Cell::Null])
            .collect()
    }

    /// `table`'s rows from the parts among `entries`, in key order, as an
    /// attach reads them.
    fn decoded(entries: Vec<Entry>, table: TableRef, head: Head, width: usize) -> Option<Rows> {
        let mut parts: Vec<(u32, Bytes)> = entries
            .into_iter()
            .filter_map(|(key, value)| match decode_key(&key) {
                Ok((name, part)) if name == table.name() => Some((part, Bytes::from(value))),
                _ => None,
            })
            .collect();
        parts.sort_by_key(|(part, _)| *part);
        if parts.is_empty()
            || parts
                .iter()
                .enumerate()
                .any(|(i, (part, _))| *part as usize != i)
        {
            return None;
        }
        let parts: Vec<Bytes> = parts.into_iter().map(|(_, value)| value).collect();
        decode_parts(&parts, head, width).ok().flatten()
    }

    #[test]
    fn an_image_round_trips_across_parts() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let many = rows(100_000);
        let parts = encode(table, head(7), &Rows::from(many.clone()));
        assert!(parts.len() > 1, "{} parts", parts.len());
        assert_eq!(decoded(parts, table, head(7), 3), Some(Rows::from(many)));
    }

    #[test]
    fn an_image_of_another_head_a_missing_part_or_another_shape_is_not_used() {
        let table = TableRef::InlineData {
            table_id: 1,
            schema_version: 2,
        };
        let many = Rows::from(rows(100_000));
        assert_eq!(
            decoded(encode(table, head(7), &many), table, head(8), 3),
            None
        );
        assert_eq!(
            decoded(encode(table, head(7), &many), table, head(7), 4),
            None
        );
        let mut parts = encode(table, head(7), &many);
        parts.remove(0);
        assert_eq!(decoded(parts, table, head(7), 3), None);
        let other = TableRef::InlineDelete { table_id: 1 };
        assert_eq!(
            decoded(encode(table, head(7), &many), other, head(7), 3),
            None
        );
    }

    #[test]
    fn an_empty_table_has_one_empty_part() {
        let table = TableRef::Fixed(Kind::Tag);
        let parts = encode(table, head(3), &Rows::from(Vec::new()));
        assert_eq!(parts.len(), 1);
        assert_eq!(
            decoded(parts, table, head(3), 5),
            Some(Rows::from(Vec::new()))
        );
    }

    #[test]
    fn a_new_image_deletes_the_parts_it_does_not_rewrite() {
        let big = TableRef::Fixed(Kind::Snapshot);
        let small = TableRef::Fixed(Kind::Schema);
        let gone = TableRef::InlineData {
            table_id: 9,
            schema_version: 1,
        };
        let existing = vec![part_key(big, 0), part_key(big, 1), part_key(gone, 0)];
        let tables = vec![
            (big, std::sync::Arc::new(Rows::from(rows(100)))),
            (small, std::sync::Arc::new(Rows::from(rows(2)))),
        ];
        let Replacement { puts, deletes } = replacement(head(4), &tables, &existing);
        assert_eq!(
            puts.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            vec![stamp_key(), part_key(big, 0), part_key(small, 0)]
        );
        assert_eq!(deletes, vec![part_key(big, 1), part_key(gone, 0)]);
    }

    #[test]
    fn a_stamp_names_each_table_and_its_parts_and_an_older_one_reads_as_stale() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let tables = vec![(table, Arc::new(Rows::from(rows(100_000))))];
        let Replacement { puts, .. } = replacement(head(4), &tables, &[]);
        assert!(puts.len() > 2, "{} parts", puts.len() - 1);
        let stamp = decode_stamp(&puts[0].1).unwrap().unwrap();
        assert_eq!(stamp.head, head(4));
        assert_eq!(
            stamp.contents,
            HashMap::from([(table.name(), (puts.len() - 1) as u32)])
        );
        // Before the table of contents, a stamp held the head alone.
        let older = framed_with_head(head(4));
        assert_eq!(decode_stamp(&older).unwrap(), None);
        assert!(check_part(&stamp_key(), &older).is_ok());
    }

    #[test]
    fn garbage_is_never_used_and_never_panics() {
        let table = TableRef::Fixed(Kind::Snapshot);
        let junk = vec![(part_key(table, 0), b"MRN\x02\xf2\xff\xff".to_vec())];
        assert_eq!(decoded(junk, table, head(1), 3), None);
        assert!(decode_stamp(b"MRN\x02\xf2\xff").is_err());
        assert!(decode_key(b"\x07garbage").is_err());
    }
}
