//! Cells, rows and the framed binary encoding of stored values.
//!
//! Every stored value starts with a 5-byte frame: the magic `MRN`, the encoding
//! version, and the tag of the record kind it belongs to. Decoding checks all
//! three, so garbage, a value from another kind, or a value written by a newer
//! format fails as [`Error::Corruption`] instead of being misread.

use crate::error::{Error, Result};
use std::cmp::Ordering;

pub const MAGIC: &[u8; 3] = b"MRN";
/// Version 2 added the record's insertion ordinal; version 1 values read
/// with ordinal 0.
pub const ENCODING_VERSION: u8 = 2;

/// One value of a catalog row. DuckLake's catalog columns are BIGINT,
/// VARCHAR, BOOLEAN, TIMESTAMPTZ (microseconds) and UUID (canonical text).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Cell {
    Null,
    Int(i64),
    Bool(bool),
    Text(String),
    /// An opaque DuckDB value (DuckDB's own binary serialization), used for
    /// user columns of inlined data whose types moraine does not interpret.
    Blob(Vec<u8>),
}

pub type Row = Vec<Cell>;

/// A cell read in place from its encoded bytes, without an allocation.
/// Text is not checked to be UTF-8 here: whoever stores the bytes checks
/// them once ([`Reader::cell`], the packed rows of an image).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CellRef<'a> {
    Null,
    Int(i64),
    Bool(bool),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

impl CellRef<'_> {
    pub fn as_int(self) -> Option<i64> {
        match self {
            CellRef::Int(v) => Some(v),
            _ => None,
        }
    }

    pub fn to_cell(self) -> Cell {
        match self {
            CellRef::Null => Cell::Null,
            CellRef::Int(v) => Cell::Int(v),
            CellRef::Bool(b) => Cell::Bool(b),
            CellRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
            CellRef::Blob(b) => Cell::Blob(b.to_vec()),
        }
    }
}

impl Cell {
    pub fn as_cell_ref(&self) -> CellRef<'_> {
        match self {
            Cell::Null => CellRef::Null,
            Cell::Int(v) => CellRef::Int(*v),
            Cell::Bool(b) => CellRef::Bool(*b),
            Cell::Text(t) => CellRef::Text(t.as_bytes()),
            Cell::Blob(b) => CellRef::Blob(b),
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Cell::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Cell::Text(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Cell::Null)
    }
}

impl PartialOrd for Cell {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Cell {
    fn cmp(&self, other: &Self) -> Ordering {
        fn rank(c: &Cell) -> u8 {
            match c {
                Cell::Null => 0,
                Cell::Int(_) => 1,
                Cell::Bool(_) => 2,
                Cell::Text(_) => 3,
                Cell::Blob(_) => 4,
            }
        }
        match (self, other) {
            (Cell::Int(a), Cell::Int(b)) => a.cmp(b),
            (Cell::Bool(a), Cell::Bool(b)) => a.cmp(b),
            (Cell::Text(a), Cell::Text(b)) => a.cmp(b),
            (Cell::Blob(a), Cell::Blob(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

/// A stored record: the row itself plus the rows of kinds that ride inside
/// it, grouped by their kind tag.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub row: Row,
    pub children: Vec<(u8, Vec<Row>)>,
    /// Where the record sits in its table's insertion order. A scan serves
    /// records by ordinal, as a SQL catalog serves a heap: an insert goes
    /// last, an update keeps its place. 0 (records written before ordinals
    /// existed) sorts first, in key order.
    pub ordinal: i64,
}

impl Record {
    pub fn new(row: Row) -> Self {
        Record {
            row,
            children: Vec::new(),
            ordinal: 0,
        }
    }

    pub fn children_of(&self, tag: u8) -> &[Row] {
        self.children
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|(_, rows)| rows.as_slice())
            .unwrap_or(&[])
    }

    pub fn push_child(&mut self, tag: u8, row: Row) {
        match self.children.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, rows)) => rows.push(row),
            None => self.children.push((tag, vec![row])),
        }
    }
}

pub fn frame(tag: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(MAGIC);
    out.push(ENCODING_VERSION);
    out.push(tag);
    out
}

/// Checks the frame and returns the encoding version and the payload after it.
pub fn unframe(expected_tag: u8, bytes: &[u8]) -> Result<(u8, &[u8])> {
    if bytes.len() < 5 || &bytes[..3] != MAGIC {
        return Err(Error::corruption("value has no moraine frame"));
    }
    if bytes[3] > ENCODING_VERSION {
        return Err(Error::corruption(format!(
            "value written by a newer moraine (encoding {}, this build reads up to {ENCODING_VERSION})",
            bytes[3]
        )));
    }
    if bytes[4] != expected_tag {
        return Err(Error::corruption(format!(
            "value tagged {} where kind {expected_tag} was expected",
            bytes[4]
        )));
    }
    Ok((bytes[3], &bytes[5..]))
}

pub fn encode_record(tag: u8, record: &Record) -> Vec<u8> {
    let mut out = frame(tag);
    put_varint(&mut out, record.ordinal as u64);
    put_row(&mut out, &record.row);
    put_varint(&mut out, record.children.len() as u64);
    for (child_tag, rows) in &record.children {
        out.push(*child_tag);
        put_varint(&mut out, rows.len() as u64);
        for row in rows {
            put_row(&mut out, row);
        }
    }
    out
}

pub fn decode_record(tag: u8, bytes: &[u8]) -> Result<Record> {
    let (version, payload) = unframe(tag, bytes)?;
    let mut r = Reader::new(payload);
    let ordinal = if version >= 2 { r.varint()? as i64 } else { 0 };
    let row = r.row()?;
    let groups = r.length()?;
    let mut children = Vec::with_capacity(groups.min(16));
    for _ in 0..groups {
        let child_tag = r.byte()?;
        let n = r.length()?;
        let mut rows = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            rows.push(r.row()?);
        }
        children.push((child_tag, rows));
    }
    r.finish()?;
    Ok(Record {
        row,
        children,
        ordinal,
    })
}

pub fn put_row(out: &mut Vec<u8>, row: &[Cell]) {
    put_varint(out, row.len() as u64);
    for cell in row {
        put_cell(out, cell);
    }
}

pub fn put_cell(out: &mut Vec<u8>, cell: &Cell) {
    put_cell_ref(out, cell.as_cell_ref());
}

pub fn put_cell_ref(out: &mut Vec<u8>, cell: CellRef<'_>) {
    match cell {
        CellRef::Null => out.push(0),
        CellRef::Int(v) => {
            out.push(1);
            put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
        }
        CellRef::Bool(false) => out.push(2),
        CellRef::Bool(true) => out.push(3),
        CellRef::Text(s) => {
            out.push(4);
            put_bytes(out, s);
        }
        CellRef::Blob(b) => {
            out.push(5);
            put_bytes(out, b);
        }
    }
}

pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A bounds-checked cursor over an encoded payload.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    #[inline]
    pub fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| Error::corruption("value ends early"))?;
        self.at += 1;
        Ok(b)
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corruption("varint longer than 10 bytes"))
    }

    /// A length that must fit in what is left of the payload.
    #[inline]
    pub fn length(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > (self.bytes.len() - self.at) as u64 {
            return Err(Error::corruption("length exceeds value size"));
        }
        Ok(n as usize)
    }

    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.length()?;
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    /// How many bytes are left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn cell(&mut self) -> Result<Cell> {
        Ok(match self.cell_ref()? {
            CellRef::Text(b) => Cell::Text(
                String::from_utf8(b.to_vec())
                    .map_err(|_| Error::corruption("text cell is not UTF-8"))?,
            ),
            other => other.to_cell(),
        })
    }

    #[inline]
    pub fn cell_ref(&mut self) -> Result<CellRef<'a>> {
        Ok(match self.byte()? {
            0 => CellRef::Null,
            1 => {
                let z = self.varint()?;
                CellRef::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            2 => CellRef::Bool(false),
            3 => CellRef::Bool(true),
            4 => CellRef::Text(self.bytes()?),
            5 => CellRef::Blob(self.bytes()?),
            t => return Err(Error::corruption(format!("unknown cell tag {t}"))),
        })
    }

    pub fn row(&mut self) -> Result<Row> {
        let n = self.length()?;
        let mut row = Vec::with_capacity(n);
        for _ in 0..n {
            row.push(self.cell()?);
        }
        Ok(row)
    }

    pub fn finish(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(Error::corruption("trailing bytes after value"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cell_strategy() -> impl Strategy<Value = Cell> {
        prop_oneof![
            Just(Cell::Null),
            any::<i64>().prop_map(Cell::Int),
            any::<bool>().prop_map(Cell::Bool),
            ".*".prop_map(Cell::Text),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(Cell::Blob),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(row in proptest::collection::vec(cell_strategy(), 0..12),
                              child in proptest::collection::vec(cell_strategy(), 0..6)) {
            let mut record = Record::new(row);
            record.push_child(9, child.clone());
            record.push_child(9, child);
            let bytes = encode_record(3, &record);
            prop_assert_eq!(decode_record(3, &bytes).unwrap(), record);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_record(3, &bytes);
            let mut framed = frame(3);
            framed.extend_from_slice(&bytes);
            let _ = decode_record(3, &framed);
        }
    }

    #[test]
    fn wrong_kind_and_newer_version_are_corruption() {
        let bytes = encode_record(3, &Record::new(vec![Cell::Int(1)]));
        assert!(matches!(
            decode_record(4, &bytes),
            Err(Error::Corruption(_))
        ));
        let mut newer = bytes.clone();
        newer[3] = ENCODING_VERSION + 1;
        let err = decode_record(3, &newer).unwrap_err();
        assert!(err.to_string().contains("newer moraine"));
    }
}
