//! The records one commit touches, read through its store transaction.
//!
//! Translation reads a record, changes it and may read it again (a snapshot
//! row and then its changes row, a parent and then each embedded child), so
//! every record it puts or removes is kept here, decoded, and later reads see
//! it. Nothing reaches the store transaction until [`WriteSet::write_into`],
//! which encodes each record once.

use crate::error::{Error, Result};
use crate::store::keys;
use crate::store::value::{decode_record, encode_record, Record};
use crate::store::StoreTxn;
use bytes::Bytes;
use foldhash::fast::RandomState;
use std::collections::{BTreeMap, HashMap};

/// The records found under one prefix read ahead, by key. Keys are hashed
/// with foldhash: an expiry looks up thousands, and SipHash showed in its
/// profile.
type ReadAhead = HashMap<Vec<u8>, Bytes, RandomState>;

/// Every key under some prefixes at a commit's premise, known without a
/// read: the committing transaction derived them from rows it read at its
/// pinned head, and the premise check proves that head is still the
/// store's. Each known prefix holds keys of one integer cell after it (a
/// snapshot's id), kept as the sorted integers: an expiry knows thousands,
/// and building a key for each cost its commit half a millisecond. A key
/// under a known prefix that is not one of them does not exist.
#[derive(Debug, Default)]
pub struct KnownKeys {
    prefixes: Vec<(Vec<u8>, Vec<i64>)>,
}

impl KnownKeys {
    /// Declares `prefix` followed by each of `ids` to be every key under
    /// `prefix`.
    pub fn add_ints(&mut self, prefix: Vec<u8>, mut ids: Vec<i64>) {
        ids.sort_unstable();
        self.prefixes.push((prefix, ids));
    }

    /// Whether `key` exists, when it lies under a known prefix.
    fn exists(&self, key: &[u8]) -> Option<bool> {
        let (prefix, ids) = self
            .prefixes
            .iter()
            .find(|(prefix, _)| key.starts_with(prefix))?;
        Some(keys::sole_int(key, prefix.len()).is_some_and(|id| ids.binary_search(&id).is_ok()))
    }

    /// Whether every key under `prefix` is known.
    pub fn covers(&self, prefix: &[u8]) -> bool {
        self.prefixes
            .iter()
            .any(|(known, _)| prefix.starts_with(known))
    }
}

pub struct WriteSet<'a> {
    txn: &'a StoreTxn,
    known: &'a KnownKeys,
    /// Every key this commit touches: `None` deletes it.
    touched: BTreeMap<Vec<u8>, Option<(u8, Record)>>,
    /// Whole key ranges read ahead for commits that touch many existing
    /// records of one kind (an expiry deletes thousands): one scan instead of
    /// a point read per record. A key under a prefix here that the map lacks
    /// does not exist.
    read_ahead: Vec<(Vec<u8>, ReadAhead)>,
}

impl<'a> WriteSet<'a> {
    pub fn new(txn: &'a StoreTxn, known: &'a KnownKeys) -> Self {
        WriteSet {
            txn,
            known,
            touched: BTreeMap::new(),
            read_ahead: Vec::new(),
        }
    }

    /// The keys this commit knows without reading.
    pub fn known(&self) -> &KnownKeys {
        self.known
    }

    /// Reads every record under `prefix` in one scan; later reads under it
    /// are served from memory.
    pub async fn read_ahead(&mut self, prefix: Vec<u8>) -> Result<()> {
        let found = self
            .txn
            .scan_prefix(&prefix)
            .await?
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v))
            .collect();
        self.read_ahead.push((prefix, found));
        Ok(())
    }

    async fn stored(&self, key: &[u8]) -> Result<Option<Bytes>> {
        for (prefix, found) in &self.read_ahead {
            if key.starts_with(prefix) {
                return Ok(found.get(key).cloned());
            }
        }
        self.txn.get(key).await
    }

    /// Whether a record exists at `key` as this commit sees it, without
    /// decoding it, and without a read where the key is known.
    pub async fn exists(&self, key: &[u8]) -> Result<bool> {
        if let Some(exists) = self.exists_in_memory(key) {
            return Ok(exists);
        }
        Ok(self.stored(key).await?.is_some())
    }

    /// [`WriteSet::exists`] when this commit touched `key` or knows it.
    pub fn exists_in_memory(&self, key: &[u8]) -> Option<bool> {
        match self.touched.get(key) {
            Some(entry) => Some(entry.is_some()),
            None => self.known.exists(key),
        }
    }

    /// The record at `key` as this commit sees it, framed with `tag`.
    pub async fn load(&self, key: &[u8], tag: u8) -> Result<Option<Record>> {
        if let Some(entry) = self.touched.get(key) {
            return Ok(entry.as_ref().map(|(_, r)| r.clone()));
        }
        match self.stored(key).await? {
            Some(bytes) => {
                Ok(Some(decode_record(tag, &bytes).map_err(|e| {
                    Error::corruption(format!("key {key:02x?}: {e}"))
                })?))
            }
            None => Ok(None),
        }
    }

    pub fn put(&mut self, key: Vec<u8>, tag: u8, record: Record) {
        self.touched.insert(key, Some((tag, record)));
    }

    pub fn remove(&mut self, key: Vec<u8>) {
        self.touched.insert(key, None);
    }

    /// Whether this commit removes `key`.
    pub fn removes(&self, key: &[u8]) -> bool {
        matches!(self.touched.get(key), Some(None))
    }

    /// Keys under `prefix` that exist in this commit's view of the store.
    pub async fn live_keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut found: BTreeMap<Vec<u8>, bool> = self
            .txn
            .scan_prefix(prefix)
            .await?
            .into_iter()
            .map(|(k, _)| (k.to_vec(), true))
            .collect();
        let end = keys::prefix_end(prefix);
        for (k, v) in self.touched.range(prefix.to_vec()..end) {
            found.insert(k.clone(), v.is_some());
        }
        Ok(found
            .into_iter()
            .filter(|(_, live)| *live)
            .map(|(k, _)| k)
            .collect())
    }

    /// Stages every put and delete into the store transaction, encoding each
    /// record once.
    pub fn write_into(self) -> Result<()> {
        for (key, entry) in &self.touched {
            match entry {
                Some((tag, record)) => self.txn.put(key, &encode_record(*tag, record))?,
                None => self.txn.delete(key)?,
            }
        }
        Ok(())
    }
}
