//! Commit translation: staged row operations become one store transaction.
//!
//! The rules are DuckLake's lifecycle and nothing more. A row's location is
//! derived from its cells ([`catalog::location`]): a live version lives under
//! `current`, an ended one under `history`, so `UPDATE … SET end_snapshot`
//! moves a record from one to the other and `SET begin_snapshot` rebases it in
//! place. Deletes are hard prunes of the exact version named. Each lifecycle
//! has one function below; the inline families translate beside their key
//! layout ([`inline::translate`]). The premise (the head the transaction read)
//! is re-read through the store transaction, so a commit that lost a race
//! fails with a `conflict` DuckLake retries.

use super::{CommitOutcome, StagedOp};
use crate::catalog::expiring::{self, Expiring};
use crate::catalog::writes::{KnownKeys, WriteSet};
use crate::catalog::{self, Cell, DeletedRowCounts, Head, Kind, Lifecycle, Row, TableRef};
use crate::column;
use crate::error::{Error, Result};
use crate::inline::{self, translate::InlineCommit};
use crate::store::keys;
use crate::store::value::Record;
use crate::store::{ReadView, Store, StoreTxn, ViewStamp};
use std::collections::{BTreeMap, BTreeSet};

/// DuckDB's reserved field id for row ids; DuckLake may backfill file
/// statistics for it without a snapshot.
pub const ROW_ID_FIELD_ID: i64 = 2147483540;

/// How many existing records of one kind a commit must touch before the
/// kind's whole range is read in one scan rather than key by key.
const PREFETCH_THRESHOLD: usize = 64;

/// A commit's records take ordinals `batch_count << ORDINAL_BITS` upward, so
/// every record of a later commit sorts after every record of an earlier one.
/// A commit with more new records than this shares its last ordinal among
/// the rest, which then sort by key.
const ORDINAL_BITS: u32 = 24;

/// Translates and commits `ops` as one durable store transaction.
pub async fn commit(
    store: &Store,
    view: &ReadView,
    premise: Option<Head>,
    ops: &[StagedOp],
    facts: &CommitFacts,
) -> Result<Landed> {
    prepare(store, view, premise, ops, facts)
        .await?
        .commit(store)
        .await
}

/// A durable commit: what it did, and the stamp of the state it left.
#[derive(Debug, Clone, Copy)]
pub struct Landed {
    pub outcome: CommitOutcome,
    pub stamp: Option<ViewStamp>,
}

/// A commit translated into an open store transaction and not yet
/// committed. Two of these prepared from one head both pass the premise
/// check; the store transaction's write-write conflict detection then fails
/// whichever commits second (both rewrite `sys/head`).
pub struct PreparedCommit {
    txn: StoreTxn,
    outcome: CommitOutcome,
}

/// What a commit is told beside its operations.
#[derive(Debug, Default)]
pub struct CommitFacts {
    /// Keys that exist at the premise, which translation then neither reads
    /// nor reads ahead.
    pub known: KnownKeys,
    /// The counts `sys/head` holds once the commit lands.
    pub deleted_rows: DeletedRowCounts,
}

/// Opens a store transaction, checks the premise through it and writes the
/// translated operations into it.
pub async fn prepare(
    store: &Store,
    view: &ReadView,
    premise: Option<Head>,
    ops: &[StagedOp],
    facts: &CommitFacts,
) -> Result<PreparedCommit> {
    let mut txn = store.begin(view)?;
    let head = match txn.get(keys::SYS_HEAD).await? {
        Some(bytes) => Some(Head::decode(&bytes)?),
        None => None,
    };
    txn.set_batch_number(head.map_or(0, |h| h.batch_count).unsigned_abs() + 1);
    if head != premise {
        return Err(Error::Conflict(format!(
            "the catalog moved from {} to {} while this transaction ran",
            describe(premise),
            describe(head)
        )));
    }
    let outcome = Translator::new(&txn, head, facts).translate(ops).await?;
    Ok(PreparedCommit { txn, outcome })
}

impl PreparedCommit {
    /// What the commit will do once it lands.
    pub fn outcome(&self) -> CommitOutcome {
        self.outcome
    }

    /// Commits the store transaction and waits until it is durable.
    pub async fn commit(self, store: &Store) -> Result<Landed> {
        let stamp = store.commit(self.txn).await?;
        Ok(Landed {
            outcome: self.outcome,
            stamp,
        })
    }
}

fn describe(head: Option<Head>) -> String {
    match head {
        Some(h) => format!("snapshot {} (batch {})", h.snapshot_id, h.batch_count),
        None => "an empty store".into(),
    }
}

fn with_context(err: Error, op: &StagedOp) -> Error {
    let what = match op {
        StagedOp::Insert { .. } => "INSERT into",
        StagedOp::Delete { .. } => "DELETE from",
        StagedOp::Update { .. } => "UPDATE of",
        StagedOp::CreateTable { .. } => "CREATE TABLE",
        StagedOp::DropTable { .. } => "DROP TABLE",
    };
    let context = format!("{what} {}", op.table().name());
    match err {
        Error::Conflict(m) => Error::Conflict(format!("{context}: {m}")),
        Error::NotFound(m) => Error::NotFound(format!("{context}: {m}")),
        Error::Constraint(m) => Error::Constraint(format!("{context}: {m}")),
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{context}: {m}")),
        Error::Unsupported(m) => Error::Unsupported(format!("{context}: {m}")),
        other => other,
    }
}

/// Operations that may land without minting a snapshot: DuckLake's expiry,
/// cleanup, option changes and inline-table housekeeping. A row-id
/// statistics insert qualifies by its shape here and by its file at commit
/// ([`Translator::check_row_id_statistics`]).
pub fn is_maintenance(op: &StagedOp) -> bool {
    match op {
        StagedOp::Delete { .. } | StagedOp::DropTable { .. } => true,
        StagedOp::CreateTable { table, .. } => !matches!(table, TableRef::Fixed(_)),
        StagedOp::Insert {
            table: TableRef::Fixed(kind),
            row,
        }
        | StagedOp::Update {
            table: TableRef::Fixed(kind),
            new: row,
            ..
        } => match kind {
            Kind::FilesScheduledForDeletion | Kind::Metadata => true,
            Kind::FileColumnStats => {
                matches!(op, StagedOp::Insert { .. }) && is_row_id_statistic(row)
            }
            _ => false,
        },
        _ => false,
    }
}

fn is_row_id_statistic(row: &Row) -> bool {
    row.get(column!(FileColumnStats, column_id)) == Some(&Cell::Int(ROW_ID_FIELD_ID))
}

/// A `ducklake_snapshot_changes` delete is a validated no-op once its
/// snapshot is gone: the changes live in the snapshot's record.
fn delete_snapshot_changes(id: i64, snapshot_lives: bool) -> Result<()> {
    if snapshot_lives {
        return Err(Error::Constraint(format!(
            "snapshot changes of {id} can only be deleted together with their snapshot"
        )));
    }
    Ok(())
}

/// The snapshot id a deleted row names; -1, which no snapshot has, for
/// none.
fn snapshot_id_of(row: &Row, column: usize) -> i64 {
    row.get(column).and_then(Cell::as_int).unwrap_or(-1)
}

/// A row operation on a fixed kind; table DDL is dispatched before it.
#[derive(Clone, Copy)]
enum RowOp<'r> {
    Insert(&'r Row),
    Delete(&'r Row),
    Update { old: &'r Row, new: &'r Row },
}

struct Translator<'a> {
    txn: &'a StoreTxn,
    writes: WriteSet<'a>,
    /// The snapshots earlier expiries committed away whose records the
    /// purge has not deleted yet, read at the first snapshot delete.
    expiring: Option<Expiring>,
    /// The snapshots this commit expires.
    expired: BTreeSet<i64>,
    inline: InlineCommit,
    head: Option<Head>,
    deleted_rows: &'a DeletedRowCounts,
    minted: Option<i64>,
    bootstrap: bool,
    /// The insertion ordinal the next new record gets.
    next_ordinal: i64,
    /// Keys of the records this commit inserts: the only parents an
    /// embedded row may join.
    inserted: BTreeSet<Vec<u8>>,
    /// Parents an embedded delete found live: each must be deleted by this
    /// commit too (RFC 0007: an embedded delete rides its parent's).
    orphaning: Vec<(Kind, Vec<u8>)>,
}

impl<'a> Translator<'a> {
    fn new(txn: &'a StoreTxn, head: Option<Head>, facts: &'a CommitFacts) -> Self {
        Translator {
            txn,
            writes: WriteSet::new(txn, &facts.known),
            expiring: None,
            expired: BTreeSet::new(),
            inline: InlineCommit::default(),
            head,
            deleted_rows: &facts.deleted_rows,
            minted: None,
            bootstrap: false,
            next_ordinal: (head.map_or(0, |h| h.batch_count) + 1) << ORDINAL_BITS,
            inserted: BTreeSet::new(),
            orphaning: Vec::new(),
        }
    }

    /// Translates every operation, checks what only the whole commit can
    /// show, stamps the head and stages the writes into the transaction.
    async fn translate(mut self, ops: &[StagedOp]) -> Result<CommitOutcome> {
        self.read_ahead(ops).await?;
        for op in ops {
            let applied = match self.apply_in_memory(op) {
                Some(applied) => applied,
                None => self.apply(op).await,
            };
            applied.map_err(|e| with_context(e, op))?;
        }
        self.check_embedded_deletes()?;
        let inline = std::mem::take(&mut self.inline);
        let newest = self.minted.or(self.head.map(|h| h.snapshot_id));
        let first_unwritten = self.first_unwritten_snapshot();
        inline
            .finish(&mut self.writes, first_unwritten, newest)
            .await?;
        let outcome = self.advance_head(ops).await?;
        self.writes.write_into()?;
        Ok(outcome)
    }

    /// Reads ahead the key ranges of kinds whose existing records this
    /// commit touches in bulk.
    async fn read_ahead(&mut self, ops: &[StagedOp]) -> Result<()> {
        let mut per_kind: BTreeMap<Kind, usize> = BTreeMap::new();
        for op in ops {
            if let StagedOp::Delete {
                table: TableRef::Fixed(kind),
                ..
            }
            | StagedOp::Update {
                table: TableRef::Fixed(kind),
                ..
            } = op
            {
                if !matches!(kind.def().lifecycle, Lifecycle::Embedded { .. }) {
                    *per_kind.entry(*kind).or_default() += 1;
                }
            }
        }
        // Snapshots and their changes share one range: read it once.
        let prefixes: BTreeSet<Vec<u8>> = per_kind
            .into_iter()
            .filter(|(_, count)| *count >= PREFETCH_THRESHOLD)
            .flat_map(|(kind, _)| catalog::record_prefixes(kind))
            .filter(|prefix| !self.writes.known().covers(prefix))
            .collect();
        for prefix in prefixes {
            self.writes.read_ahead(prefix).await?;
        }
        Ok(())
    }

    /// The lowest snapshot id that nothing stored belongs to. Every commit
    /// mints at most the snapshot one above the head it read
    /// ([`Translator::advance_head`]) and writes nothing that begins after
    /// its own snapshot, so no record names a snapshot above the head.
    fn first_unwritten_snapshot(&self) -> i64 {
        self.head.map_or(0, |h| h.snapshot_id + 1)
    }

    /// A new record, placed after every record already in its table.
    fn fresh(&mut self, row: Row) -> Record {
        let mut record = Record::new(row);
        record.ordinal = self.next_ordinal;
        let last = (self.next_ordinal >> ORDINAL_BITS << ORDINAL_BITS) + (1 << ORDINAL_BITS) - 1;
        self.next_ordinal = (self.next_ordinal + 1).min(last);
        record
    }

    /// Applies `op` without a read when all it must know is in memory: an
    /// expiry's thousands of snapshot deletes, whose keys are known, cost
    /// the commit a future each through [`Translator::apply`]. `None` when
    /// `op` needs the store.
    fn apply_in_memory(&mut self, op: &StagedOp) -> Option<Result<()>> {
        let StagedOp::Delete {
            table: TableRef::Fixed(kind),
            row,
        } = op
        else {
            return None;
        };
        match kind.def().lifecycle {
            Lifecycle::Snapshot => {
                let id = snapshot_id_of(row, column!(Snapshot, snapshot_id));
                let lives = self.snapshot_lives_in_memory(id)?;
                Some(self.expire_snapshot(id, lives))
            }
            Lifecycle::SnapshotChanges => {
                let id = snapshot_id_of(row, column!(SnapshotChanges, snapshot_id));
                let lives = self.snapshot_lives_in_memory(id)?;
                Some(delete_snapshot_changes(id, lives))
            }
            _ => None,
        }
    }

    async fn apply(&mut self, op: &StagedOp) -> Result<()> {
        match op.table() {
            TableRef::Fixed(kind) => self.apply_fixed(kind, op).await,
            TableRef::InlineData {
                table_id,
                schema_version,
            } => self.apply_inline_data(table_id, schema_version, op).await,
            TableRef::InlineDelete { table_id } => self.apply_inline_delete(table_id, op).await,
        }
    }

    async fn apply_fixed(&mut self, kind: Kind, op: &StagedOp) -> Result<()> {
        let row_op = match op {
            StagedOp::CreateTable { .. } => {
                self.bootstrap = true;
                return Ok(());
            }
            StagedOp::DropTable { .. } => {
                return Err(Error::Unsupported(
                    "metadata tables cannot be dropped".into(),
                ))
            }
            StagedOp::Insert { row, .. } => RowOp::Insert(row),
            StagedOp::Delete { row, .. } => RowOp::Delete(row),
            StagedOp::Update { old, new, .. } => RowOp::Update { old, new },
        };
        match kind.def().lifecycle {
            Lifecycle::Snapshot => self.apply_snapshot(row_op).await,
            Lifecycle::SnapshotChanges => self.apply_snapshot_changes(row_op).await,
            Lifecycle::Versioned { .. } => self.apply_versioned(kind, row_op).await,
            Lifecycle::Unversioned => self.apply_unversioned(kind, row_op).await,
            Lifecycle::Embedded { parent, link } => {
                self.apply_embedded(kind, parent, link, row_op).await
            }
        }
    }

    /// `ducklake_snapshot`: an insert mints the commit's snapshot (one per
    /// commit, never an existing id); a delete is expiry, refused for the head.
    async fn apply_snapshot(&mut self, op: RowOp<'_>) -> Result<()> {
        const SNAPSHOT_ID: usize = column!(Snapshot, snapshot_id);
        let kind = Kind::Snapshot;
        let tag = catalog::record_tag(kind);
        match op {
            RowOp::Insert(row) => {
                let id = row[SNAPSHOT_ID]
                    .as_int()
                    .ok_or_else(|| Error::Constraint("snapshot_id must not be NULL".into()))?;
                let key = catalog::location(kind, row)?;
                // Above the head nothing is stored, and a commit's snapshot
                // is always there: the common case needs no read.
                if id < self.first_unwritten_snapshot() && self.writes.exists(&key).await? {
                    return Err(Error::Conflict(format!("snapshot {id} already exists")));
                }
                if let Some(previous) = self.minted.replace(id) {
                    return Err(Error::Unsupported(format!(
                        "one commit inserted snapshots {previous} and {id}"
                    )));
                }
                let record = self.fresh(row.clone());
                self.writes.put(key, tag, record);
                Ok(())
            }
            RowOp::Delete(row) => {
                let id = snapshot_id_of(row, SNAPSHOT_ID);
                let lives = self.snapshot_lives(id).await?;
                self.expire_snapshot(id, lives)
            }
            RowOp::Update { .. } => Err(no_update(kind)),
        }
    }

    /// A snapshot delete is expiry, refused for the head and for a snapshot
    /// that does not live.
    fn expire_snapshot(&mut self, id: i64, lives: bool) -> Result<()> {
        if self.head.is_some_and(|h| h.snapshot_id == id) {
            return Err(Error::Constraint(format!(
                "snapshot {id} is the head snapshot and cannot be deleted"
            )));
        }
        if !lives {
            return Err(Error::NotFound(format!("snapshot {id} does not exist")));
        }
        // The record stays until the purge; the commit's expiring entry
        // hides it from every reader (design 0015).
        self.expired.insert(id);
        Ok(())
    }

    /// `ducklake_snapshot_changes`: merged into its snapshot's record. An
    /// insert joins the snapshot this commit writes; a delete is a validated
    /// no-op once the snapshot delete removed the record.
    async fn apply_snapshot_changes(&mut self, op: RowOp<'_>) -> Result<()> {
        const SNAPSHOT_ID: usize = column!(SnapshotChanges, snapshot_id);
        let kind = Kind::SnapshotChanges;
        let tag = catalog::record_tag(kind);
        match op {
            RowOp::Insert(row) => {
                let key = catalog::location(kind, row)?;
                let Some(mut record) = self.writes.load(&key, tag).await? else {
                    return Err(Error::Constraint(format!(
                        "changes for snapshot {:?}, which this commit does not write",
                        row[SNAPSHOT_ID]
                    )));
                };
                record.children.retain(|(t, _)| *t != kind.tag());
                record.push_child(kind.tag(), row.clone());
                self.writes.put(key, tag, record);
                Ok(())
            }
            RowOp::Delete(row) => {
                let id = snapshot_id_of(row, SNAPSHOT_ID);
                let lives = self.snapshot_lives(id).await?;
                delete_snapshot_changes(id, lives)
            }
            RowOp::Update { .. } => Err(no_update(kind)),
        }
    }

    /// Whether snapshot `id` has a record that neither this commit nor an
    /// earlier expiry expired.
    async fn snapshot_lives(&mut self, id: i64) -> Result<bool> {
        if let Some(lives) = self.snapshot_lives_in_memory(id) {
            return Ok(lives);
        }
        if !self.writes.exists(&catalog::snapshot_key(id)).await? {
            return Ok(false);
        }
        if self.expiring.is_none() {
            self.expiring = Some(expiring::read_in(self.txn).await?);
        }
        Ok(!self.expiring.as_ref().is_some_and(|e| e.contains(id)))
    }

    /// [`Translator::snapshot_lives`] when memory answers it: the snapshot
    /// was expired, or its key is known and the earlier expiries are read.
    fn snapshot_lives_in_memory(&self, id: i64) -> Option<bool> {
        if self.expired.contains(&id) {
            return Some(false);
        }
        match self.writes.exists_in_memory(&catalog::snapshot_key(id))? {
            false => Some(false),
            true => Some(!self.expiring.as_ref()?.contains(id)),
        }
    }

    /// Versioned entities: [`catalog::location`] puts a live version under
    /// `current` and an ended one under `history`, so an update that sets
    /// `end_snapshot` moves the record, and a delete prunes exactly the
    /// version it names.
    async fn apply_versioned(&mut self, kind: Kind, op: RowOp<'_>) -> Result<()> {
        match op {
            RowOp::Insert(row) => self.insert_record(kind, row).await,
            RowOp::Delete(row) => self.delete_record(kind, row).await,
            RowOp::Update { old, new } => self.update_record(kind, old, new).await,
        }
    }

    /// Unversioned records: overwritten or removed by key.
    async fn apply_unversioned(&mut self, kind: Kind, op: RowOp<'_>) -> Result<()> {
        match op {
            RowOp::Insert(row) => self.insert_record(kind, row).await,
            RowOp::Delete(row) if kind == Kind::SchemaVersions => {
                // A floor row the read side derived has nothing stored.
                let key = catalog::location(kind, row)?;
                if self.writes.load(&key, kind.tag()).await?.is_some() {
                    self.writes.remove(key);
                }
                Ok(())
            }
            RowOp::Delete(row) => self.delete_record(kind, row).await,
            RowOp::Update { old, new } => self.update_record(kind, old, new).await,
        }
    }

    /// Rows that ride their parent's record: an insert joins a parent this
    /// commit inserts; a delete is a no-op once the parent is gone, and
    /// otherwise valid only if the parent goes in this commit too.
    async fn apply_embedded(
        &mut self,
        kind: Kind,
        parent: Kind,
        link: &[(usize, usize)],
        op: RowOp<'_>,
    ) -> Result<()> {
        match op {
            RowOp::Insert(row) => {
                let found = self.find_parent(parent, link, row).await?;
                let Some((key, mut record)) = found.filter(|(key, _)| self.inserted.contains(key))
                else {
                    return Err(Error::Constraint(format!(
                        "the row names a {} this commit does not insert; {} rows are written together \
                         with their parent",
                        parent.def().name,
                        kind.def().name
                    )));
                };
                record.push_child(kind.tag(), row.clone());
                self.writes.put(key, parent.tag(), record);
                Ok(())
            }
            RowOp::Delete(row) => {
                if let Some((key, mut record)) = self.find_parent(parent, link, row).await? {
                    self.orphaning.push((parent, key.clone()));
                    if let Some((_, rows)) =
                        record.children.iter_mut().find(|(t, _)| *t == kind.tag())
                    {
                        if let Some(at) = rows.iter().position(|r| r == row) {
                            rows.remove(at);
                        }
                    }
                    self.writes.put(key, parent.tag(), record);
                }
                Ok(())
            }
            RowOp::Update { .. } => Err(no_update(kind)),
        }
    }

    async fn insert_record(&mut self, kind: Kind, row: &Row) -> Result<()> {
        let tag = catalog::record_tag(kind);
        let key = catalog::location(kind, row)?;
        if self.writes.load(&key, tag).await?.is_some() {
            return Err(duplicate(kind, row));
        }
        let record = self.fresh(row.clone());
        self.inserted.insert(key.clone());
        self.writes.put(key, tag, record);
        Ok(())
    }

    async fn delete_record(&mut self, kind: Kind, row: &Row) -> Result<()> {
        let key = catalog::location(kind, row)?;
        if !self.writes.exists(&key).await? {
            return Err(Error::NotFound(format!("no row {}", render_key(kind, row))));
        }
        self.writes.remove(key);
        Ok(())
    }

    /// Moves the record from the old row's location to the new one's,
    /// keeping its place in insertion order.
    async fn update_record(&mut self, kind: Kind, old: &Row, new: &Row) -> Result<()> {
        let tag = catalog::record_tag(kind);
        let from = catalog::location(kind, old)?;
        let to = catalog::location(kind, new)?;
        let Some(mut record) = self.writes.load(&from, tag).await? else {
            return Err(Error::NotFound(format!("no row {}", render_key(kind, old))));
        };
        if from != to && self.writes.load(&to, tag).await?.is_some() {
            return Err(duplicate(kind, new));
        }
        self.writes.remove(from);
        record.row = new.clone();
        self.writes.put(to, tag, record);
        Ok(())
    }

    /// Every parent an embedded delete found live is deleted by this commit.
    fn check_embedded_deletes(&self) -> Result<()> {
        for (parent, key) in &self.orphaning {
            if !self.writes.removes(key) {
                return Err(Error::Constraint(format!(
                    "a row embedded in a live {} was deleted without it: such rows are deleted together \
                     with their parent",
                    parent.def().name
                )));
            }
        }
        Ok(())
    }

    /// The current parent record an embedded row belongs to.
    async fn find_parent(
        &mut self,
        parent: Kind,
        link: &[(usize, usize)],
        child: &[Cell],
    ) -> Result<Option<(Vec<u8>, Record)>> {
        let pdef = parent.def();
        let mut prefix_cells = Vec::new();
        for &k in pdef.key {
            match link.iter().find(|&&(_, pc)| pc == k) {
                Some(&(c, _)) => prefix_cells.push(child[c].clone()),
                None => break,
            }
        }
        let prefix = keys::key(keys::Subspace::Current, Some(parent.tag()), &prefix_cells);
        for key in self.writes.live_keys(&prefix).await? {
            if let Some(record) = self.writes.load(&key, parent.tag()).await? {
                if link
                    .iter()
                    .all(|&(c, pc)| child.get(c) == record.row.get(pc))
                {
                    return Ok(Some((key, record)));
                }
            }
        }
        Ok(None)
    }

    async fn apply_inline_data(
        &mut self,
        table_id: i64,
        version: i64,
        op: &StagedOp,
    ) -> Result<()> {
        let writes = &mut self.writes;
        match op {
            StagedOp::CreateTable { columns, .. } => {
                self.inline
                    .create_data_table(writes, table_id, version, columns);
                Ok(())
            }
            StagedOp::DropTable { .. } => {
                self.inline.drop_data_table(writes, table_id, version).await
            }
            StagedOp::Insert { row, .. } => {
                self.inline.insert_data_row(writes, table_id, version, row)
            }
            StagedOp::Update { old, new, .. } => self
                .inline
                .update_data_row(writes, table_id, version, old, new),
            StagedOp::Delete { row, .. } => {
                self.inline.delete_data_row(writes, table_id, version, row)
            }
        }
    }

    async fn apply_inline_delete(&mut self, table_id: i64, op: &StagedOp) -> Result<()> {
        let writes = &mut self.writes;
        match op {
            StagedOp::CreateTable { .. } => {
                inline::translate::create_delete_table(writes, table_id);
                Ok(())
            }
            StagedOp::DropTable { .. } => {
                inline::translate::drop_delete_table(writes, table_id).await
            }
            StagedOp::Insert { row, .. } => {
                inline::translate::insert_deleted_row(writes, table_id, row)
            }
            StagedOp::Delete { row, .. } => {
                inline::translate::delete_deleted_row(writes, table_id, row).await
            }
            StagedOp::Update { .. } => Err(Error::Unsupported(
                "inlined deletions cannot be updated".into(),
            )),
        }
    }

    /// A row-id statistics backfill without a snapshot derives from an
    /// immutable active data file (RFC 0007): one this commit's view holds
    /// live under `current`. Statistics for an ended or unknown file would
    /// be a catalog change, and those mint a snapshot.
    async fn check_row_id_statistics(&mut self, ops: &[StagedOp]) -> Result<()> {
        for op in ops {
            let StagedOp::Insert {
                table: TableRef::Fixed(Kind::FileColumnStats),
                row,
            } = op
            else {
                continue;
            };
            let mut file = vec![Cell::Null; Kind::DataFile.def().columns.len()];
            file[column!(DataFile, data_file_id)] =
                row[column!(FileColumnStats, data_file_id)].clone();
            file[column!(DataFile, table_id)] = row[column!(FileColumnStats, table_id)].clone();
            let key = catalog::location(Kind::DataFile, &file)?;
            if self
                .writes
                .load(&key, Kind::DataFile.tag())
                .await?
                .is_none()
            {
                return Err(Error::Constraint(format!(
                    "ducklake_file_column_stats: row-id statistics for data file {:?} of table {:?} \
                     without a snapshot are accepted only for an active data file, and this one is \
                     ended or does not exist",
                    row[column!(FileColumnStats, data_file_id)],
                    row[column!(FileColumnStats, table_id)]
                )));
            }
        }
        Ok(())
    }

    async fn advance_head(&mut self, ops: &[StagedOp]) -> Result<CommitOutcome> {
        let batch_count = self.head.map_or(0, |h| h.batch_count) + 1;
        if self.bootstrap {
            if self.head.is_some() {
                return Err(Error::Conflict(
                    "another writer initialised this catalog first".into(),
                ));
            }
            self.writes.put(
                keys::SYS_FORMAT.to_vec(),
                catalog::FORMAT_TAG,
                catalog::format_record(),
            );
        }
        let snapshot_id = match (self.minted, self.head) {
            (Some(id), head) => {
                let expected = head.map_or(0, |h| h.snapshot_id + 1);
                if id != expected {
                    return Err(Error::Conflict(format!(
                        "snapshot {id} is not the successor of the head snapshot {}",
                        expected - 1
                    )));
                }
                id
            }
            (None, None) => {
                return Err(Error::Constraint(
                    "the catalog is not initialised: the first commit must insert snapshot 0"
                        .into(),
                ))
            }
            (None, Some(head)) => {
                if let Some(op) = ops.iter().find(|op| !is_maintenance(op)) {
                    return Err(Error::Constraint(format!(
                        "{} changes catalog entities but the commit inserts no ducklake_snapshot row. \
                         moraine ties every change of the catalog to a snapshot, so that time travel, the \
                         change feed and expiry stay exact; a hand edit of a metadata table is refused. Make \
                         the change through DuckLake (DDL, COMMENT ON, CALL ducklake_set_option, ...), or, to \
                         repair the catalog by hand, insert the next ducklake_snapshot row (snapshot_id one \
                         above the newest) and its ducklake_snapshot_changes row in the same transaction as \
                         the edit",
                        op.table().name()
                    )));
                }
                self.check_row_id_statistics(ops).await?;
                head.snapshot_id
            }
        };
        let head = Head {
            snapshot_id,
            batch_count,
        };
        self.writes.put(
            keys::SYS_HEAD.to_vec(),
            catalog::HEAD_TAG,
            head.record(self.deleted_rows),
        );
        if !self.expired.is_empty() {
            let (key, value) = expiring::entry(batch_count, &self.expired);
            self.txn.put(&key, &value)?;
        }
        self.head = Some(head);
        Ok(match self.minted {
            Some(id) => CommitOutcome::Snapshot(id),
            None => CommitOutcome::HeadPreserving(head),
        })
    }
}

fn no_update(kind: Kind) -> Error {
    Error::Unsupported(format!(
        "moraine does not translate UPDATE on {}",
        kind.def().name
    ))
}

fn render_key(kind: Kind, row: &Row) -> String {
    let def = kind.def();
    let mut parts: Vec<String> = def
        .key
        .iter()
        .map(|&i| format!("{}={:?}", def.columns[i].name, row[i]))
        .collect();
    if let Some((b, e)) = def.begin_end() {
        parts.push(format!("begin_snapshot={:?}", row[b]));
        parts.push(format!("end_snapshot={:?}", row[e]));
    }
    format!("{}({})", def.name, parts.join(", "))
}

fn duplicate(kind: Kind, row: &Row) -> Error {
    if kind.def().primary_key.is_some() {
        Error::Conflict(format!(
            "duplicate key {} violates its primary key",
            render_key(kind, row)
        ))
    } else {
        Error::Constraint(format!("{} already exists", render_key(kind, row)))
    }
}
