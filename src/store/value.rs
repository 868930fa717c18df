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

impl Cell {
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
    match cell {
        Cell::Null => out.push(0),
        Cell::Int(v) => {
            out.push(1);
            put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
        }
        Cell::Bool(false) => out.push(2),
        Cell::Bool(true) => out.push(3),
        Cell::Text(s) => {
            out.push(4);
            put_bytes(out, s.as_bytes());
        }
        Cell::Blob(b) => {
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
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    pub fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| Error::corruption("value ends early"))?;
        self.at += 1;
        Ok(b)
    }

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
    pub fn length(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > (self.bytes.len() - self.at) as u64 {
            return Err(Error::corruption("length exceeds value size"));
        }
        Ok(n as usize)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.length()?;
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    pub fn cell(&mut self) -> Result<Cell> {
        Ok(match self.byte()? {
            0 => Cell::Null,
            1 => {
                let z = self.varint()?;
                Cell::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            2 => Cell::Bool(false),
            3 => Cell::Bool(true),
            4 => {
                let b = self.bytes()?;
                Cell::Text(
                    String::from_utf8(b.to_vec())
                        .map_err(|_| Error::corruption("text cell is not UTF-8"))?,
                )
            }
            5 => Cell::Blob(self.bytes()?.to_vec()),
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
