//! Expiring snapshots: snapshots an expiry has committed away whose records
//! are not yet deleted ([design 0015]).
//!
//! `ducklake_expire_snapshots` deletes thousands of `ducklake_snapshot` rows
//! in one statement. Deleting each record before the acknowledgement cost
//! the statement a SlateDB tombstone per snapshot, most of the catalog's
//! share of an expiry. Instead the expiry's commit writes one entry under
//! `expiring/<batch>` naming the expired snapshot ids as ranges, and every
//! reader of the snapshot subspace skips the ids an entry names; the purge
//! deletes the records and the entry together, in one batch, after the
//! commit is durable. An entry is written once and only the purge deletes
//! it, so a purge never conflicts with a commit.
//!
//! [design 0015]: ../../docs/design/0015-expiring-snapshots.md

use super::Cell;
use crate::error::{Error, Result};
use crate::store::keys::{self, Subspace};
use crate::store::value::{frame, put_cell, unframe, Reader};
use crate::store::{ReadView, Store, StoreTxn};
use std::collections::BTreeSet;

/// The frame tag of an entry's value.
pub const EXPIRING_TAG: u8 = 0xf3;

/// Snapshot ids as sorted, disjoint, inclusive ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiring {
    ranges: Vec<(i64, i64)>,
}

impl Expiring {
    /// The runs of consecutive ids in `ids`.
    pub fn from_ids(ids: &BTreeSet<i64>) -> Expiring {
        let mut ranges: Vec<(i64, i64)> = Vec::new();
        for &id in ids {
            match ranges.last_mut() {
                Some((_, hi)) if hi.checked_add(1) == Some(id) => *hi = id,
                _ => ranges.push((id, id)),
            }
        }
        Expiring { ranges }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn contains(&self, id: i64) -> bool {
        let after = self.ranges.partition_point(|&(lo, _)| lo <= id);
        after > 0 && self.ranges[after - 1].1 >= id
    }

    /// Whether every id named lies in `lo..=hi`.
    pub fn within(&self, lo: i64, hi: i64) -> bool {
        match (self.ranges.first(), self.ranges.last()) {
            (Some(&(first, _)), Some(&(_, last))) => lo <= first && last <= hi,
            _ => true,
        }
    }

    /// Every id named, in order.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    /// How many ids are named.
    pub fn len(&self) -> u64 {
        self.ranges
            .iter()
            .map(|&(lo, hi)| hi.abs_diff(lo) + 1)
            .sum()
    }

    /// Every id either names.
    pub fn union(mut self, other: Expiring) -> Expiring {
        self.ranges.extend(other.ranges);
        self.ranges.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(self.ranges.len());
        for (lo, hi) in self.ranges {
            match merged.last_mut() {
                Some((_, last)) if lo <= last.saturating_add(1) => *last = (*last).max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        Expiring { ranges: merged }
    }

    fn encode(&self) -> Vec<u8> {
        let mut value = frame(EXPIRING_TAG);
        put_cell(&mut value, &Cell::Int(self.ranges.len() as i64));
        for &(lo, hi) in &self.ranges {
            put_cell(&mut value, &Cell::Int(lo));
            put_cell(&mut value, &Cell::Int(hi));
        }
        value
    }

    /// Decodes an entry's value, refusing one whose ranges are not sorted
    /// and disjoint.
    pub fn decode(value: &[u8]) -> Result<Expiring> {
        let (_, payload) = unframe(EXPIRING_TAG, value)?;
        let mut r = Reader::new(payload);
        let mut int = || {
            r.cell()?
                .as_int()
                .ok_or_else(|| Error::corruption("an expiring entry holds a non-integer"))
        };
        let count = int()?;
        let mut ranges = Vec::new();
        for _ in 0..count {
            let (lo, hi) = (int()?, int()?);
            if lo > hi || ranges.last().is_some_and(|&(_, last)| lo <= last) {
                return Err(Error::corruption(
                    "an expiring entry's ranges are not sorted and disjoint",
                ));
            }
            ranges.push((lo, hi));
        }
        r.finish()?;
        Ok(Expiring { ranges })
    }
}

/// The prefix every entry lies under.
pub fn prefix() -> Vec<u8> {
    keys::prefix(Subspace::Expiring, None)
}

/// The entry an expiry writes with the head of batch `batch`, naming `ids`.
pub fn entry(batch: i64, ids: &BTreeSet<i64>) -> (Vec<u8>, Vec<u8>) {
    let key = keys::key(Subspace::Expiring, None, &[Cell::Int(batch)]);
    (key, Expiring::from_ids(ids).encode())
}

fn union_of(entries: &[(bytes::Bytes, bytes::Bytes)]) -> Result<Expiring> {
    entries
        .iter()
        .try_fold(Expiring::default(), |all, (key, value)| {
            Expiring::decode(value)
                .map(|one| all.union(one))
                .map_err(|e| Error::corruption(format!("expiring entry {key:02x?}: {e}")))
        })
}

/// Every snapshot id the entries at `view` name.
pub async fn read(store: &Store, view: &ReadView) -> Result<Expiring> {
    union_of(&store.scan_prefix(view, &prefix()).await?)
}

/// Every snapshot id the entries name, read through a commit's transaction.
pub async fn read_in(txn: &StoreTxn) -> Result<Expiring> {
    union_of(&txn.scan_prefix(&prefix()).await?)
}

/// One purge at a time in a process: the background purge after an expiry
/// and the one a detach or a reclaim runs would otherwise delete the same
/// entry twice and fail the second on the conflict.
static PURGING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Deletes the records of every expiring snapshot and the entries naming
/// them, in one durable batch. Returns how many snapshot records it deleted.
/// Runs only while this process holds the writer turn and nobody asks for
/// it: the purge is upkeep and never takes the turn from another writer,
/// whose own detach purges instead.
pub async fn purge(store: &Store) -> Result<u64> {
    let _one = PURGING.lock().await;
    let Some(view) = store.snapshot_if_writing().await? else {
        return Ok(0);
    };
    let entries = store.scan_prefix(&view, &prefix()).await?;
    if entries.is_empty() {
        return Ok(0);
    }
    let expiring = union_of(&entries)?;
    // An expiry names only snapshots below the head. A range past it is
    // damage, and deleting key by key across it might not end.
    let newest_expired = super::read_head(store, &view)
        .await?
        .map_or(-1, |head| head.snapshot_id - 1);
    if !expiring.within(0, newest_expired) {
        return Err(Error::corruption(format!(
            "expiring entries name snapshots outside 0..={newest_expired}, below the head: {:?}",
            expiring.ranges
        )));
    }
    let txn = store.begin(&view)?;
    for id in expiring.ids() {
        txn.delete(&super::snapshot_key(id))?;
    }
    for (key, _) in &entries {
        txn.delete(key)?;
    }
    store.commit(txn).await?;
    Ok(expiring.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[i64]) -> Expiring {
        Expiring::from_ids(&ids.iter().copied().collect())
    }

    #[test]
    fn ids_pack_into_runs_and_round_trip() {
        let e = set(&[0, 1, 2, 5, 7, 8]);
        assert_eq!(e.ranges, vec![(0, 2), (5, 5), (7, 8)]);
        assert_eq!(Expiring::decode(&e.encode()).unwrap(), e);
        assert_eq!(e.len(), 6);
        assert_eq!(e.ids().collect::<Vec<_>>(), vec![0, 1, 2, 5, 7, 8]);
        for (id, named) in [
            (-1, false),
            (0, true),
            (2, true),
            (3, false),
            (5, true),
            (6, false),
            (8, true),
            (9, false),
        ] {
            assert_eq!(e.contains(id), named, "{id}");
        }
    }

    #[test]
    fn entries_union_into_one_set() {
        let all = set(&[1, 2]).union(set(&[3, 9])).union(set(&[0]));
        assert_eq!(all.ranges, vec![(0, 3), (9, 9)]);
    }

    #[test]
    fn a_damaged_entry_is_an_error_not_a_panic() {
        assert!(Expiring::decode(b"").is_err());
        let mut unsorted = frame(EXPIRING_TAG);
        for v in [2, 5, 6, 1, 2] {
            put_cell(&mut unsorted, &Cell::Int(v));
        }
        assert!(Expiring::decode(&unsorted).is_err());
        let mut value = set(&[1, 2, 3]).encode();
        value.truncate(value.len() - 1);
        assert!(Expiring::decode(&value).is_err());
    }
}
