//! Rows that open transactions of one attach have deleted or updated.
//!
//! On DuckDB's own tables a second transaction that deletes or updates a
//! row another open transaction already changed fails at that statement
//! ("Conflict on tuple deletion"), and DuckLake, seeing `conflict`, retries
//! it. A store commit would catch the race only at COMMIT, after the loser
//! did all its work; claims catch it at the statement, as DuckDB does. Across
//! processes the premise check at commit stays the safety net.
//!
//! A claim names its row by a 128-bit fingerprint of the table and the
//! row's cells, not by a copy of the row: an expiry claims ten thousand rows,
//! and copying each into the registry and dropping it again cost the
//! statement and its commit a millisecond. Two different rows would have to
//! share a fingerprint for a claim to be wrong, and even then the loser gets
//! a `conflict` DuckLake retries, never a lost change.

use crate::catalog::{Cell, Row, TableRef};
use crate::error::{Error, Result};
use foldhash::fast::{FixedState, RandomState};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub struct RowClaims {
    /// Which transaction changed each row, by the fingerprint of its table
    /// and the row as it was read.
    held: Mutex<HashMap<u128, u64, RandomState>>,
    next_id: AtomicU64,
}

/// Two independently seeded 64-bit hashes of `table` and `row`.
fn fingerprint(table: TableRef, row: &Row) -> u128 {
    let half = |seed: u64| {
        let mut state = FixedState::with_seed(seed).build_hasher();
        table.hash(&mut state);
        row.iter()
            .map(Cell::as_cell_ref)
            .for_each(|cell| cell.hash(&mut state));
        state.finish()
    };
    (u128::from(half(0x6d6f_7261_696e_6531)) << 64) | u128::from(half(0x636c_6169_6d73_3232))
}

/// What a transaction does to a claimed row, for the error's wording.
#[derive(Debug, Clone, Copy)]
pub enum Change {
    Deletion,
    Update,
}

impl RowClaims {
    /// A new claimant id for one transaction.
    pub fn claimant(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Claims `rows` of `table` for `claimant`, or fails at the first that
    /// another open transaction holds. One lock for a statement's rows: an
    /// expiry deletes thousands.
    pub fn claim<'a>(
        &self,
        claimant: u64,
        table: TableRef,
        rows: impl IntoIterator<Item = &'a Row>,
        change: Change,
    ) -> Result<()> {
        let mut held = self
            .held
            .lock()
            .map_err(|_| Error::Internal("row claims poisoned by an earlier panic".into()))?;
        let rows = rows.into_iter();
        held.reserve(rows.size_hint().0);
        for row in rows {
            let holder = *held.entry(fingerprint(table, row)).or_insert(claimant);
            if holder != claimant {
                return Err(Error::Conflict(format!(
                    "Conflict on tuple {}: another open transaction already changed this row of {}",
                    match change {
                        Change::Deletion => "deletion",
                        Change::Update => "update",
                    },
                    table.name()
                )));
            }
        }
        Ok(())
    }

    /// Gives up every claim of a transaction that ended.
    pub fn release(&self, claimant: u64) {
        if let Ok(mut held) = self.held.lock() {
            held.retain(|_, c| *c != claimant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Cell, Kind};

    #[test]
    fn a_row_changed_by_an_open_transaction_conflicts_until_it_ends() {
        let claims = RowClaims::default();
        let (a, b) = (claims.claimant(), claims.claimant());
        let table = TableRef::Fixed(Kind::TableStats);
        let row = vec![Cell::Int(1)];
        claims.claim(a, table, [&row], Change::Update).unwrap();
        claims.claim(a, table, [&row], Change::Deletion).unwrap();
        let lost = claims
            .claim(b, table, [&row], Change::Deletion)
            .unwrap_err();
        assert!(matches!(lost, Error::Conflict(_)));
        assert!(
            lost.to_string().contains("Conflict on tuple deletion"),
            "{lost}"
        );
        claims
            .claim(b, table, [&vec![Cell::Int(2)]], Change::Update)
            .unwrap();
        claims.release(a);
        claims.claim(b, table, [&row], Change::Deletion).unwrap();
    }

    #[test]
    fn equal_rows_of_different_tables_are_different_claims() {
        let claims = RowClaims::default();
        let (a, b) = (claims.claimant(), claims.claimant());
        let row = vec![Cell::Int(7), Cell::Text("x".into())];
        claims
            .claim(a, TableRef::Fixed(Kind::Snapshot), [&row], Change::Deletion)
            .unwrap();
        claims
            .claim(
                b,
                TableRef::Fixed(Kind::SnapshotChanges),
                [&row],
                Change::Deletion,
            )
            .unwrap();
        let other = vec![Cell::Int(7), Cell::Text("y".into())];
        claims
            .claim(
                b,
                TableRef::Fixed(Kind::Snapshot),
                [&other],
                Change::Deletion,
            )
            .unwrap();
    }
}
