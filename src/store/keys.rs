//! Order-preserving key encoding.
//!
//! A key is a subspace byte, then (outside `sys`) a kind tag, then the
//! identity cells. Integers are 8 big-endian bytes with the sign bit flipped,
//! text is NUL-escaped and terminated, so byte order equals tuple order and a
//! key prefix selects exactly one kind or one entity.

use super::value::Cell;
use crate::error::{Error, Result};

/// The first byte of every key. Declaration order is permanent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Subspace {
    /// Singletons: `sys/head`, `sys/format`.
    Sys = 1,
    /// One record per snapshot.
    Snapshot = 2,
    /// Live versions and unversioned records.
    Current = 3,
    /// Ended versions; the key ends with `end_snapshot, begin_snapshot`.
    History = 4,
    /// `ducklake_schema_versions`, which outlives the snapshots that wrote it.
    SchemaVersion = 5,
    /// Inlined data: chunk schemas, chunks, row tombstones, markers.
    Inline = 6,
    /// The head image: packed copies of committed tables, derived from the
    /// subspaces above (`catalog::image`).
    Image = 7,
    /// Snapshots an expiry committed away whose records are not yet
    /// deleted (`catalog::expiring`).
    Expiring = 8,
}

impl Subspace {
    pub const ALL: [Subspace; 8] = [
        Subspace::Sys,
        Subspace::Snapshot,
        Subspace::Current,
        Subspace::History,
        Subspace::SchemaVersion,
        Subspace::Inline,
        Subspace::Image,
        Subspace::Expiring,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Subspace::Sys => "sys",
            Subspace::Snapshot => "snapshot",
            Subspace::Current => "current",
            Subspace::History => "history",
            Subspace::SchemaVersion => "schema_version",
            Subspace::Inline => "inline",
            Subspace::Image => "image",
            Subspace::Expiring => "expiring",
        }
    }

    pub fn from_byte(b: u8) -> Option<Subspace> {
        Subspace::ALL.iter().copied().find(|s| *s as u8 == b)
    }
}

pub const SYS_HEAD: &[u8] = &[Subspace::Sys as u8, 1];
pub const SYS_FORMAT: &[u8] = &[Subspace::Sys as u8, 2];
/// Written by `moraine_reclaim` so a quiet store flushes one more L0.
pub const SYS_RECLAIM: &[u8] = &[Subspace::Sys as u8, 3];

pub fn prefix(subspace: Subspace, tag: Option<u8>) -> Vec<u8> {
    let mut out = vec![subspace as u8];
    out.extend(tag);
    out
}

pub fn key(subspace: Subspace, tag: Option<u8>, cells: &[Cell]) -> Vec<u8> {
    let mut out = prefix(subspace, tag);
    for cell in cells {
        push_cell(&mut out, cell);
    }
    out
}

pub fn push_cell(out: &mut Vec<u8>, cell: &Cell) {
    match cell {
        Cell::Null => out.push(0),
        Cell::Int(v) => {
            out.push(1);
            out.extend_from_slice(&((*v as u64) ^ (1 << 63)).to_be_bytes());
        }
        Cell::Bool(b) => {
            out.push(2);
            out.push(u8::from(*b));
        }
        Cell::Text(s) => push_escaped(out, 3, s.as_bytes()),
        Cell::Blob(b) => push_escaped(out, 4, b),
    }
}

fn push_escaped(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// The integer a key ends with, when its bytes after `skip` are exactly one
/// integer cell.
pub fn sole_int(key: &[u8], skip: usize) -> Option<i64> {
    match key.get(skip..)? {
        [1, raw @ ..] => Some((u64::from_be_bytes(raw.try_into().ok()?) ^ (1 << 63)) as i64),
        _ => None,
    }
}

/// Decodes the cells after a key's prefix of `skip` bytes.
pub fn decode_cells(key: &[u8], skip: usize) -> Result<Vec<Cell>> {
    let bad = || Error::corruption(format!("malformed key {key:02x?}"));
    let mut cells = Vec::new();
    let mut at = skip;
    while at < key.len() {
        let tag = key[at];
        at += 1;
        cells.push(match tag {
            0 => Cell::Null,
            1 => {
                let raw: [u8; 8] = key
                    .get(at..at + 8)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                at += 8;
                Cell::Int((u64::from_be_bytes(raw) ^ (1 << 63)) as i64)
            }
            2 => {
                let b = *key.get(at).ok_or_else(bad)?;
                at += 1;
                Cell::Bool(b != 0)
            }
            3 | 4 => {
                let mut text = Vec::new();
                loop {
                    let b = *key.get(at).ok_or_else(bad)?;
                    at += 1;
                    if b != 0 {
                        text.push(b);
                        continue;
                    }
                    match *key.get(at).ok_or_else(bad)? {
                        0xff => text.push(0),
                        1 => {}
                        _ => return Err(bad()),
                    }
                    at += 1;
                    if key[at - 1] == 1 {
                        break;
                    }
                }
                if tag == 4 {
                    Cell::Blob(text)
                } else {
                    Cell::Text(String::from_utf8(text).map_err(|_| bad())?)
                }
            }
            _ => return Err(bad()),
        });
    }
    Ok(cells)
}

/// The smallest key greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cell() -> impl Strategy<Value = Cell> {
        prop_oneof![
            Just(Cell::Null),
            any::<i64>().prop_map(Cell::Int),
            any::<bool>().prop_map(Cell::Bool),
            ".{0,8}".prop_map(Cell::Text),
            proptest::collection::vec(any::<u8>(), 0..6)
                .prop_map(|b| Cell::Text(String::from_utf8_lossy(&b).into_owned())),
        ]
    }

    proptest! {
        #[test]
        fn keys_round_trip(cells in proptest::collection::vec(cell(), 0..5)) {
            let k = key(Subspace::Current, Some(7), &cells);
            prop_assert_eq!(decode_cells(&k, 2).unwrap(), cells);
        }

        #[test]
        fn key_order_is_tuple_order(a in (any::<i64>(), ".{0,6}", any::<i64>()),
                                    b in (any::<i64>(), ".{0,6}", any::<i64>())) {
            // Keys of one kind share a shape: compare same-shaped tuples.
            let cells = |t: &(i64, String, i64)| vec![Cell::Int(t.0), Cell::Text(t.1.clone()), Cell::Int(t.2)];
            let (ca, cb) = (cells(&a), cells(&b));
            let ka = key(Subspace::History, Some(1), &ca);
            let kb = key(Subspace::History, Some(1), &cb);
            prop_assert_eq!(ka.cmp(&kb), ca.cmp(&cb));
        }

        #[test]
        fn garbage_keys_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_cells(&bytes, 0);
            let _ = sole_int(&bytes, 1);
        }

        #[test]
        fn sole_int_reads_exactly_one_integer_cell(cells in proptest::collection::vec(cell(), 0..3)) {
            let k = key(Subspace::Snapshot, None, &cells);
            let expected = match cells.as_slice() {
                [Cell::Int(id)] => Some(*id),
                _ => None,
            };
            prop_assert_eq!(sole_int(&k, 1), expected);
        }
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        let p = key(Subspace::Current, Some(3), &[Cell::Int(5)]);
        let inside = key(
            Subspace::Current,
            Some(3),
            &[Cell::Int(5), Cell::Int(i64::MAX)],
        );
        assert!(inside < prefix_end(&p) && inside > p);
    }
}
