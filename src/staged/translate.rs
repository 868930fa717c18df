//! Commit translation: staged row operations become one store transaction.
//!
//! The rules are DuckLake's lifecycle and nothing more. A row's location is
//! derived from its cells ([`catalog::location`]): a live version lives under
//! `current`, an ended one under `history`, so `UPDATE … SET end_snapshot`
//! moves a record from one to the other and `SET begin_snapshot` rebases it in
//! place. Deletes are hard prunes of the exact version named. The premise
//! (the head the transaction read) is re-read through the store transaction,
//! so a commit that lost a race fails with a `conflict` DuckLake retries.

use super::{CommitOutcome, StagedOp};
use crate::catalog::{self, Cell, Head, Kind, Lifecycle, Row, TableRef};
use crate::column;
use crate::error::{Error, Result};
use crate::inline;
use crate::store::keys::{self, Subspace};
use crate::store::value::{decode_record, encode_record, Record};
use crate::store::{Store, StoreTxn};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// DuckDB's reserved field id for row ids; DuckLake may backfill file
/// statistics for it without a snapshot.
pub const ROW_ID_FIELD_ID: i64 = 2147483540;

struct Translator<'a> {
    txn: &'a StoreTxn,
    /// Every key this commit touches: `None` deletes it.
    working: BTreeMap<Vec<u8>, Option<(u8, Record)>>,
    /// Inlined rows inserted by this commit, per (table, version, begin).
    new_chunks: BTreeMap<(i64, i64, i64), Vec<Row>>,
    /// Inlined row versions this commit deletes, per (table, version):
    /// `(row_id, begin_snapshot)`, deduplicated, applied chunk by chunk.
    inline_deletes: BTreeMap<(i64, i64), BTreeSet<(i64, i64)>>,
    head: Option<Head>,
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
    /// Whole key ranges read ahead for commits that touch many existing
    /// records of one kind (an expiry deletes thousands): one scan instead of
    /// a point read per record. A key under a prefix here that the map lacks
    /// does not exist.
    prefetched: Vec<(Vec<u8>, Prefetched)>,
}

/// The records found under one prefix read ahead, by key.
type Prefetched = HashMap<Vec<u8>, Bytes>;

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
    premise: Option<Head>,
    ops: &[StagedOp],
) -> Result<CommitOutcome> {
    prepare(store, premise, ops).await?.commit(store).await
}

/// A commit translated into an open store transaction and not yet
/// committed. Two of these prepared from one head both pass the premise
/// check; the store transaction's write-write conflict detection then fails
/// whichever commits second (both rewrite `sys/head`).
pub struct PreparedCommit {
    txn: StoreTxn,
    outcome: CommitOutcome,
}

/// Opens a store transaction, checks the premise through it and writes the
/// translated operations into it.
pub async fn prepare(
    store: &Store,
    premise: Option<Head>,
    ops: &[StagedOp],
) -> Result<PreparedCommit> {
    let txn = store.begin()?;
    let head = match txn.get(keys::SYS_HEAD).await? {
        Some(bytes) => Some(Head::decode(&bytes)?),
        None => None,
    };
    if head != premise {
        return Err(Error::Conflict(format!(
            "the catalog moved from {} to {} while this transaction ran",
            describe(premise),
            describe(head)
        )));
    }
    let mut t = Translator {
        txn: &txn,
        working: BTreeMap::new(),
        new_chunks: BTreeMap::new(),
        inline_deletes: BTreeMap::new(),
        head,
        minted: None,
        bootstrap: false,
        next_ordinal: (head.map_or(0, |h| h.batch_count) + 1) << ORDINAL_BITS,
        inserted: BTreeSet::new(),
        orphaning: Vec::new(),
        prefetched: Vec::new(),
    };
    t.prefetch(ops).await?;
    for op in ops {
        t.apply(op).await.map_err(|e| with_context(e, op))?;
    }
    t.check_embedded_deletes()?;
    t.apply_inline_deletes().await?;
    t.write_new_chunks().await?;
    let outcome = t.advance_head(ops).await?;
    for (key, entry) in &t.working {
        match entry {
            Some((tag, record)) => txn.put(key, &encode_record(*tag, record))?,
            None => txn.delete(key)?,
        }
    }
    Ok(PreparedCommit { txn, outcome })
}

impl PreparedCommit {
    /// What the commit will do once it lands.
    pub fn outcome(&self) -> CommitOutcome {
        self.outcome
    }

    /// Commits the store transaction and waits until it is durable.
    pub async fn commit(self, store: &Store) -> Result<CommitOutcome> {
        store.commit(self.txn).await?;
        Ok(self.outcome)
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
/// cleanup, option changes and inline-table housekeeping.
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
                matches!(op, StagedOp::Insert { .. })
                    && row.get(2) == Some(&Cell::Int(ROW_ID_FIELD_ID))
            }
            _ => false,
        },
        _ => false,
    }
}

impl Translator<'_> {
    /// Reads ahead the key ranges of kinds whose existing records this
    /// commit touches in bulk.
    async fn prefetch(&mut self, ops: &[StagedOp]) -> Result<()> {
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
            .collect();
        for prefix in prefixes {
            let found = self
                .txn
                .scan_prefix(&prefix)
                .await?
                .into_iter()
                .map(|(k, v)| (k.to_vec(), v))
                .collect();
            self.prefetched.push((prefix, found));
        }
        Ok(())
    }

    async fn stored(&self, key: &[u8]) -> Result<Option<Bytes>> {
        for (prefix, found) in &self.prefetched {
            if key.starts_with(prefix) {
                return Ok(found.get(key).cloned());
            }
        }
        self.txn.get(key).await
    }

    async fn load(&mut self, key: &[u8], tag: u8) -> Result<Option<Record>> {
        if let Some(entry) = self.working.get(key) {
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

    /// A new record, placed after every record already in its table.
    fn fresh(&mut self, row: Row) -> Record {
        let mut record = Record::new(row);
        record.ordinal = self.next_ordinal;
        let last = (self.next_ordinal >> ORDINAL_BITS << ORDINAL_BITS) + (1 << ORDINAL_BITS) - 1;
        self.next_ordinal = (self.next_ordinal + 1).min(last);
        record
    }

    fn put(&mut self, key: Vec<u8>, tag: u8, record: Record) {
        self.working.insert(key, Some((tag, record)));
    }

    fn remove(&mut self, key: Vec<u8>) {
        self.working.insert(key, None);
    }

    /// Keys under `prefix` that exist in this commit's view of the store.
    async fn live_keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut found: BTreeMap<Vec<u8>, bool> = self
            .txn
            .scan_prefix(prefix)
            .await?
            .into_iter()
            .map(|(k, _)| (k.to_vec(), true))
            .collect();
        let end = keys::prefix_end(prefix);
        for (k, v) in self.working.range(prefix.to_vec()..end) {
            found.insert(k.clone(), v.is_some());
        }
        Ok(found
            .into_iter()
            .filter(|(_, live)| *live)
            .map(|(k, _)| k)
            .collect())
    }

    async fn apply(&mut self, op: &StagedOp) -> Result<()> {
        match (op.table(), op) {
            (TableRef::Fixed(kind), _) => self.apply_fixed(kind, op).await,
            (
                TableRef::InlineData {
                    table_id,
                    schema_version,
                },
                _,
            ) => self.apply_inline_data(table_id, schema_version, op).await,
            (TableRef::InlineDelete { table_id }, _) => {
                self.apply_inline_delete(table_id, op).await
            }
        }
    }

    async fn apply_fixed(&mut self, kind: Kind, op: &StagedOp) -> Result<()> {
        let def = kind.def();
        let tag = catalog::record_tag(kind);
        match (def.lifecycle, op) {
            (_, StagedOp::CreateTable { .. }) => {
                self.bootstrap = true;
                Ok(())
            }
            (_, StagedOp::DropTable { .. }) => Err(Error::Unsupported(
                "metadata tables cannot be dropped".into(),
            )),
            (Lifecycle::Snapshot, StagedOp::Insert { row, .. }) => {
                let id = row[0]
                    .as_int()
                    .ok_or_else(|| Error::Constraint("snapshot_id must not be NULL".into()))?;
                let key = catalog::location(kind, row)?;
                if self.load(&key, tag).await?.is_some() {
                    return Err(Error::Conflict(format!("snapshot {id} already exists")));
                }
                if let Some(previous) = self.minted.replace(id) {
                    return Err(Error::Unsupported(format!(
                        "one commit inserted snapshots {previous} and {id}"
                    )));
                }
                let record = self.fresh(row.clone());
                self.put(key, tag, record);
                Ok(())
            }
            (Lifecycle::Snapshot, StagedOp::Delete { row, .. }) => {
                let id = row[0].as_int().unwrap_or(-1);
                if self.head.is_some_and(|h| h.snapshot_id == id) {
                    return Err(Error::Constraint(format!(
                        "snapshot {id} is the head snapshot and cannot be deleted"
                    )));
                }
                let key = catalog::location(kind, row)?;
                if self.load(&key, tag).await?.is_none() {
                    return Err(Error::NotFound(format!("snapshot {id} does not exist")));
                }
                self.remove(key);
                Ok(())
            }
            (Lifecycle::SnapshotChanges, StagedOp::Insert { row, .. }) => {
                let key = catalog::location(kind, row)?;
                let Some(mut record) = self.load(&key, tag).await? else {
                    return Err(Error::Constraint(format!(
                        "changes for snapshot {:?}, which this commit does not write",
                        row[0]
                    )));
                };
                record.children.retain(|(t, _)| *t != kind.tag());
                record.push_child(kind.tag(), row.clone());
                self.put(key, tag, record);
                Ok(())
            }
            (Lifecycle::SnapshotChanges, StagedOp::Delete { row, .. }) => {
                // One record holds both tables: the snapshot delete removes it.
                let key = catalog::location(kind, row)?;
                if self.load(&key, tag).await?.is_some() {
                    return Err(Error::Constraint(format!(
                        "snapshot changes of {:?} can only be deleted together with their snapshot",
                        row[0]
                    )));
                }
                Ok(())
            }
            (Lifecycle::Embedded { parent, link }, StagedOp::Insert { row, .. }) => {
                let found = self.find_parent(parent, link, row).await?;
                let Some((key, mut record)) = found.filter(|(key, _)| self.inserted.contains(key))
                else {
                    return Err(Error::Constraint(format!(
                        "the row names a {} this commit does not insert; {} rows are written together \
                         with their parent",
                        parent.def().name,
                        def.name
                    )));
                };
                record.push_child(kind.tag(), row.clone());
                self.put(key, parent.tag(), record);
                Ok(())
            }
            (Lifecycle::Embedded { parent, link }, StagedOp::Delete { row, .. }) => {
                // Rides its parent: a no-op once the parent is gone, and
                // otherwise valid only if the parent goes in this commit too.
                if let Some((key, mut record)) = self.find_parent(parent, link, row).await? {
                    self.orphaning.push((parent, key.clone()));
                    if let Some((_, rows)) =
                        record.children.iter_mut().find(|(t, _)| *t == kind.tag())
                    {
                        if let Some(at) = rows.iter().position(|r| r == row) {
                            rows.remove(at);
                        }
                    }
                    self.put(key, parent.tag(), record);
                }
                Ok(())
            }
            (_, StagedOp::Insert { row, .. }) => {
                let key = catalog::location(kind, row)?;
                if self.load(&key, tag).await?.is_some() {
                    return Err(duplicate(kind, row));
                }
                let record = self.fresh(row.clone());
                self.inserted.insert(key.clone());
                self.put(key, tag, record);
                Ok(())
            }
            (_, StagedOp::Delete { row, .. }) => {
                let key = catalog::location(kind, row)?;
                if self.load(&key, tag).await?.is_none() {
                    if kind == Kind::SchemaVersions {
                        return Ok(()); // a floor row the read side derived; nothing is stored
                    }
                    return Err(Error::NotFound(format!("no row {}", render_key(kind, row))));
                }
                self.remove(key);
                Ok(())
            }
            (
                Lifecycle::Embedded { .. } | Lifecycle::SnapshotChanges | Lifecycle::Snapshot,
                StagedOp::Update { .. },
            ) => Err(Error::Unsupported(format!(
                "moraine does not translate UPDATE on {}",
                def.name
            ))),
            (_, StagedOp::Update { old, new, .. }) => {
                let from = catalog::location(kind, old)?;
                let to = catalog::location(kind, new)?;
                let Some(mut record) = self.load(&from, tag).await? else {
                    return Err(Error::NotFound(format!("no row {}", render_key(kind, old))));
                };
                if from != to && self.load(&to, tag).await?.is_some() {
                    return Err(duplicate(kind, new));
                }
                self.remove(from);
                record.row = new.clone();
                self.put(to, tag, record);
                Ok(())
            }
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
            if self.load(&key, Kind::DataFile.tag()).await?.is_none() {
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

    /// Every parent an embedded delete found live is deleted by this commit.
    fn check_embedded_deletes(&self) -> Result<()> {
        for (parent, key) in &self.orphaning {
            if !matches!(self.working.get(key), Some(None)) {
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
        let prefix = keys::key(Subspace::Current, Some(parent.tag()), &prefix_cells);
        for key in self.live_keys(&prefix).await? {
            if let Some(record) = self.load(&key, parent.tag()).await? {
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
        match op {
            StagedOp::CreateTable { columns, .. } => {
                let user = &columns[inline::SYSTEM_COLUMNS..];
                let key = inline::schema_key(table_id, version);
                let record = decode_record(
                    inline::SCHEMA,
                    &inline::encode_schema(table_id, version, user),
                )?;
                self.put(key, inline::SCHEMA, record);
                Ok(())
            }
            StagedOp::DropTable { .. } => {
                self.remove(inline::schema_key(table_id, version));
                for prefix in [
                    inline::chunk_prefix(table_id, version),
                    inline::ended_prefix(table_id, version),
                ] {
                    for key in self.live_keys(&prefix).await? {
                        self.remove(key);
                    }
                }
                self.new_chunks
                    .retain(|(t, v, _), _| (*t, *v) != (table_id, version));
                Ok(())
            }
            StagedOp::Insert { row, .. } => {
                let (row_id, begin) = inline_identity(row)?;
                let mut stored = vec![Cell::Int(row_id)];
                stored.extend(row[inline::SYSTEM_COLUMNS..].iter().cloned());
                self.new_chunks
                    .entry((table_id, version, begin))
                    .or_default()
                    .push(stored);
                if let Cell::Int(end) = row[2] {
                    let record = Record::new(vec![Cell::Int(end)]);
                    self.put(
                        inline::ended_key(table_id, version, row_id, begin),
                        inline::ENDED,
                        record,
                    );
                }
                Ok(())
            }
            StagedOp::Update { old, new, .. } => {
                let (row_id, begin) = inline_identity(old)?;
                if inline_identity(new)? != (row_id, begin)
                    || old[inline::SYSTEM_COLUMNS..] != new[inline::SYSTEM_COLUMNS..]
                {
                    return Err(Error::Unsupported(
                        "only end_snapshot of inlined rows can be updated".into(),
                    ));
                }
                let key = inline::ended_key(table_id, version, row_id, begin);
                match new[2] {
                    Cell::Int(end) => {
                        self.put(key, inline::ENDED, Record::new(vec![Cell::Int(end)]))
                    }
                    _ => self.remove(key),
                }
                Ok(())
            }
            StagedOp::Delete { row, .. } => {
                let (row_id, begin) = inline_identity(row)?;
                self.remove(inline::ended_key(table_id, version, row_id, begin));
                if let Some(rows) = self.new_chunks.get_mut(&(table_id, version, begin)) {
                    if let Some(at) = rows.iter().position(|r| r[0] == Cell::Int(row_id)) {
                        rows.remove(at);
                        return Ok(());
                    }
                }
                self.inline_deletes
                    .entry((table_id, version))
                    .or_default()
                    .insert((row_id, begin));
                Ok(())
            }
        }
    }

    /// Applies the grouped inline deletions: a wholly selected chunk is
    /// removed; a partly selected one is rewritten as contiguous runs of
    /// surviving row ids, the first run under the chunk's own sequence and
    /// further runs under sequences above every chunk of that begin snapshot.
    async fn apply_inline_deletes(&mut self) -> Result<()> {
        let groups = std::mem::take(&mut self.inline_deletes);
        for ((table_id, version), mut wanted) in groups {
            let begins: BTreeSet<i64> = wanted.iter().map(|(_, b)| *b).collect();
            for begin in begins {
                let prefix = keys::key(
                    Subspace::Inline,
                    Some(inline::CHUNK),
                    &[Cell::Int(table_id), Cell::Int(version), Cell::Int(begin)],
                );
                let chunk_keys = self.live_keys(&prefix).await?;
                let mut next_seq = 0;
                for key in &chunk_keys {
                    next_seq = next_seq.max(inline::chunk_coordinates(key)?.1 + 1);
                }
                for key in chunk_keys {
                    let Some(chunk) = self.load(&key, inline::CHUNK).await? else {
                        continue;
                    };
                    let rows = chunk.children_of(inline::CHUNK);
                    let (gone, kept): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| {
                        r.first()
                            .and_then(Cell::as_int)
                            .is_some_and(|id| wanted.contains(&(id, begin)))
                    });
                    if gone.is_empty() {
                        continue;
                    }
                    for r in &gone {
                        if let Some(id) = r.first().and_then(Cell::as_int) {
                            wanted.remove(&(id, begin));
                        }
                    }
                    let (_, seq) = inline::chunk_coordinates(&key)?;
                    self.remove(key);
                    for (i, run) in contiguous_runs(kept).into_iter().enumerate() {
                        let run_seq = if i == 0 {
                            seq
                        } else {
                            next_seq += 1;
                            next_seq - 1
                        };
                        let record = decode_record(inline::CHUNK, &inline::encode_chunk(&run))?;
                        self.put(
                            inline::chunk_key(table_id, version, begin, run_seq),
                            inline::CHUNK,
                            record,
                        );
                    }
                }
            }
            if let Some((row_id, begin)) = wanted.into_iter().next() {
                return Err(Error::NotFound(format!(
                    "DELETE from ducklake_inlined_data_{table_id}_{version}: inlined row {row_id} (begin snapshot {begin}) does not exist"
                )));
            }
        }
        Ok(())
    }

    async fn apply_inline_delete(&mut self, table_id: i64, op: &StagedOp) -> Result<()> {
        let row_key = |row: &Row| -> Result<Vec<u8>> {
            match row.as_slice() {
                [Cell::Int(file_id), Cell::Int(row_id), _] => {
                    Ok(inline::deleted_row_key(table_id, *file_id, *row_id))
                }
                _ => Err(Error::InvalidArgument(
                    "file_id and row_id must not be NULL".into(),
                )),
            }
        };
        match op {
            StagedOp::CreateTable { .. } => {
                self.put(
                    inline::delete_table_key(table_id),
                    inline::DELETE_TABLE,
                    Record::new(vec![Cell::Int(table_id)]),
                );
                Ok(())
            }
            StagedOp::DropTable { .. } => {
                self.remove(inline::delete_table_key(table_id));
                for key in self
                    .live_keys(&inline::deleted_row_prefix(table_id))
                    .await?
                {
                    self.remove(key);
                }
                Ok(())
            }
            StagedOp::Insert { row, .. } => {
                let begin = row[2].as_int().ok_or_else(|| {
                    Error::InvalidArgument("begin_snapshot must not be NULL".into())
                })?;
                self.put(
                    row_key(row)?,
                    inline::DELETED_ROW,
                    Record::new(vec![Cell::Int(begin)]),
                );
                Ok(())
            }
            StagedOp::Delete { row, .. } => {
                let key = row_key(row)?;
                if self.load(&key, inline::DELETED_ROW).await?.is_none() {
                    return Err(Error::NotFound(format!(
                        "inlined deletion {row:?} does not exist"
                    )));
                }
                self.remove(key);
                Ok(())
            }
            StagedOp::Update { .. } => Err(Error::Unsupported(
                "inlined deletions cannot be updated".into(),
            )),
        }
    }

    /// One chunk per (table, schema version, begin snapshot) this commit
    /// inserted, numbered after the chunks already there.
    async fn write_new_chunks(&mut self) -> Result<()> {
        let chunks = std::mem::take(&mut self.new_chunks);
        for ((table_id, version, begin), rows) in chunks {
            if rows.is_empty() {
                continue;
            }
            let prefix = keys::key(
                Subspace::Inline,
                Some(inline::CHUNK),
                &[Cell::Int(table_id), Cell::Int(version), Cell::Int(begin)],
            );
            let mut seq = 0;
            for key in self.live_keys(&prefix).await? {
                seq = seq.max(inline::chunk_coordinates(&key)?.1 + 1);
            }
            let record = decode_record(inline::CHUNK, &inline::encode_chunk(&rows))?;
            self.put(
                inline::chunk_key(table_id, version, begin, seq),
                inline::CHUNK,
                record,
            );
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
            self.working.insert(
                keys::SYS_FORMAT.to_vec(),
                Some((
                    catalog::FORMAT_TAG,
                    decode_record(catalog::FORMAT_TAG, &catalog::encode_format())?,
                )),
            );
        }
        let outcome = match (self.minted, self.head) {
            (Some(id), head) => {
                let expected = head.map_or(0, |h| h.snapshot_id + 1);
                if id != expected {
                    return Err(Error::Conflict(format!(
                        "snapshot {id} is not the successor of the head snapshot {}",
                        expected - 1
                    )));
                }
                CommitOutcome::Snapshot(id)
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
                CommitOutcome::HeadPreserving(Head {
                    snapshot_id: head.snapshot_id,
                    batch_count,
                })
            }
        };
        let snapshot_id = match outcome {
            CommitOutcome::Snapshot(id) => id,
            CommitOutcome::HeadPreserving(h) => h.snapshot_id,
            CommitOutcome::Empty => return Ok(outcome),
        };
        let head = Head {
            snapshot_id,
            batch_count,
        };
        self.working.insert(
            keys::SYS_HEAD.to_vec(),
            Some((
                catalog::HEAD_TAG,
                decode_record(catalog::HEAD_TAG, &head.encode())?,
            )),
        );
        self.head = Some(head);
        Ok(outcome)
    }
}

/// Splits rows (ordered by row id) into runs of consecutive row ids.
fn contiguous_runs(rows: Vec<&Row>) -> Vec<Vec<Row>> {
    let mut runs: Vec<Vec<Row>> = Vec::new();
    let mut last: Option<i64> = None;
    for row in rows {
        let id = row.first().and_then(Cell::as_int);
        match (runs.last_mut(), last, id) {
            (Some(run), Some(prev), Some(id)) if id == prev + 1 => run.push(row.clone()),
            _ => runs.push(vec![row.clone()]),
        }
        last = id;
    }
    runs
}

fn inline_identity(row: &Row) -> Result<(i64, i64)> {
    match (row.first(), row.get(1)) {
        (Some(Cell::Int(row_id)), Some(Cell::Int(begin))) => Ok((*row_id, *begin)),
        _ => Err(Error::InvalidArgument(
            "row_id and begin_snapshot of an inlined row must not be NULL".into(),
        )),
    }
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
