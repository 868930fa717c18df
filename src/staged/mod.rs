//! The staged transaction: what one DuckDB transaction on a moraine catalog
//! read, and what it wrote.
//!
//! Reads materialize each table at most once per transaction from one pinned
//! read view; a scan registers the exact rows it emitted as a *run*, and the
//! rowids it hands DuckDB index into that run, so the write sink resolves a
//! rowid against the very rows the scan produced. Writes are staged
//! untranslated (DuckLake's own cells) and every later scan overlays them
//! ([`overlay`]), which is what DuckLake's expiry cascade and commit retries
//! rely on. COMMIT translates the staged operations into one store
//! transaction ([`translate`]).

pub mod claims;
pub mod overlay;
pub mod pushdown;
pub mod shared;
pub mod translate;

use crate::catalog::expiring;
use crate::catalog::image::Images;
use crate::catalog::writes::KnownKeys;
use crate::catalog::{self, ColumnDesc, DeletedRowCounts, Head, Kind, Row, Rows, TableRef};
use crate::error::{Error, Result};
use crate::inline;
use crate::store::value::CellRef;
use crate::store::{ReadView, Store, ViewStamp};
use claims::{Change, RowClaims};
pub use shared::{InlineTables, SharedRows};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One row operation DuckLake issued, kept exactly as it arrived.
#[derive(Debug, Clone, PartialEq)]
pub enum StagedOp {
    Insert {
        table: TableRef,
        row: Row,
    },
    Delete {
        table: TableRef,
        row: Row,
    },
    Update {
        table: TableRef,
        old: Row,
        new: Row,
    },
    CreateTable {
        table: TableRef,
        columns: Vec<ColumnDesc>,
    },
    DropTable {
        table: TableRef,
    },
}

impl StagedOp {
    pub fn table(&self) -> TableRef {
        match self {
            StagedOp::Insert { table, .. }
            | StagedOp::Delete { table, .. }
            | StagedOp::Update { table, .. }
            | StagedOp::CreateTable { table, .. }
            | StagedOp::DropTable { table } => *table,
        }
    }
}

struct Run {
    base: i64,
    rows: Arc<Rows>,
}

/// What one scan hands DuckDB: the rows of its run, and which of them it
/// emits. Row `i` of the run has rowid `base + i` whether or not it is
/// emitted, so a rowid names the same row with or without pushdown.
pub struct Scan {
    pub base: i64,
    pub rows: Arc<Rows>,
    /// The indices of the emitted rows, ascending; `None` emits every row.
    pub selected: Option<Vec<u32>>,
}

impl Scan {
    /// How many rows the scan emits.
    pub fn len(&self) -> usize {
        self.selected.as_ref().map_or(self.rows.len(), Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The run index of the `n`th emitted row.
    fn index(&self, n: usize) -> Option<usize> {
        match &self.selected {
            Some(selected) => selected.get(n).map(|&i| i as usize),
            None => (n < self.rows.len()).then_some(n),
        }
    }

    /// The run index of the `n`th emitted row and its rowid.
    pub fn emitted(&self, n: usize) -> Option<(usize, i64)> {
        let i = self.index(n)?;
        Some((i, self.base + i as i64))
    }
}

/// The committed state one transaction reads: pinned at its first access.
struct Pinned {
    view: ReadView,
    head: Option<Head>,
    rows: HashMap<TableRef, Arc<Rows>>,
    inline: Arc<InlineTables>,
    /// The head's deleted-row counts, read when first asked for.
    deleted_rows: Option<Arc<DeletedRowCounts>>,
}

/// What the transactions of one attach share: the committed rows they read,
/// and the rows open ones have changed.
#[derive(Default)]
pub struct AttachShared {
    pub rows: SharedRows,
    pub claims: RowClaims,
    /// Tables read from their records rather than kept rows or the image:
    /// each costs a SlateDB scan, so a cold attach from a whole image
    /// reads none.
    pub tables_read_from_records: AtomicU64,
    /// The purge of expiring snapshots this attach's last expiry started
    /// (design 0015).
    purge: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Counts the reads and writes of this attach's transactions: a purge
    /// waits for it to stand still.
    activity: AtomicU64,
    /// Tells a waiting purge to start now: the attach is closing.
    purge_now: tokio::sync::Notify,
    /// The head the last pinned view showed, and that view's stamp: most
    /// transactions pin the state the one before them did.
    head_seen: std::sync::Mutex<Option<(ViewStamp, Option<Head>)>>,
}

/// How long an attach's transactions must leave the store alone before a
/// purge starts: DuckLake follows an expiry with more statements (a cleanup
/// reloads its catalog), and a purge beside them took their CPU. 100 ms was
/// too short: the expiry statement itself goes on for 50-100 ms after its
/// commit while DuckLake returns a row per expired snapshot, so the purge
/// still met the cleanup. The idle upkeep waits for the purge (an
/// [`UpkeepHold`](crate::store::upkeep::UpkeepHold)), so a longer quiet
/// does not split an idle writer's tidying in two.
const PURGE_QUIET: std::time::Duration = std::time::Duration::from_millis(500);

/// The longest a purge waits for quiet: a busy attach still gets its
/// bytes back.
const PURGE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

impl AttachShared {
    /// The head `view` shows, read from the store (two keys) only when the
    /// view shows another committed state than the last one asked about.
    pub async fn head_at(&self, store: &Store, view: &ReadView) -> Result<Option<Head>> {
        let stamp = view.stamp();
        let seen = |stamp| {
            let seen = self.head_seen.lock().ok()?;
            seen.filter(|(s, _)| *s == stamp).map(|(_, head)| head)
        };
        if let Some(head) = stamp.and_then(seen) {
            return Ok(head);
        }
        let head = catalog::read_head(store, view).await?;
        if let (Some(stamp), Ok(mut seen)) = (stamp, self.head_seen.lock()) {
            *seen = Some((stamp, head));
        }
        Ok(head)
    }

    /// Remembers the head this attach's own commit left, so the next
    /// transaction that pins the state right after it reads nothing back.
    fn head_left(&self, stamp: ViewStamp, head: Head) {
        if let Ok(mut seen) = self.head_seen.lock() {
            *seen = Some((stamp, Some(head)));
        }
    }

    /// Starts the purge of the snapshots an expiry just committed away, on
    /// the runtime, once the attach's transactions leave the store alone for
    /// [`PURGE_QUIET`] (or after [`PURGE_WAIT_LIMIT`]). A purge that fails
    /// leaves its entries for the next one.
    pub fn purge_soon(self: &Arc<Self>, store: Arc<Store>) {
        let attach = self.clone();
        // The idle upkeep tidies after the purge, not just before it.
        let hold = store.hold_upkeep();
        let task = tokio::spawn(async move {
            attach.wait_for_quiet().await;
            let _ = expiring::purge(&store).await;
            drop(hold);
        });
        if let Ok(mut pending) = self.purge.lock() {
            // One still running goes on unwatched; the purges take turns.
            *pending = Some(task);
        }
    }

    /// Returns once the attach's transactions have left the store alone for
    /// [`PURGE_QUIET`], after [`PURGE_WAIT_LIMIT`], or when it closes.
    async fn wait_for_quiet(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < PURGE_WAIT_LIMIT {
            let before = self.activity.load(Ordering::Relaxed);
            tokio::select! {
                _ = tokio::time::sleep(PURGE_QUIET) => {}
                _ = self.purge_now.notified() => return,
            }
            if self.activity.load(Ordering::Relaxed) == before {
                return;
            }
        }
    }

    /// Waits for the purge this attach started, then purges whatever is
    /// left: entries of a purge that failed, or of a process that stopped
    /// before its purge ran.
    pub async fn finish_purge(&self, store: &Store) -> Result<u64> {
        let pending = self
            .purge
            .lock()
            .ok()
            .and_then(|mut pending| pending.take());
        if let Some(task) = pending {
            self.purge_now.notify_one();
            let _ = task.await;
        }
        expiring::purge(store).await
    }
}

pub struct StagedTransaction {
    store: Arc<Store>,
    shared: Arc<AttachShared>,
    /// This transaction's name in the attach's row claims.
    claimant: u64,
    pinned: Option<Pinned>,
    runs: Vec<Run>,
    next_rowid: i64,
    ops: StagedOps,
    /// Each table's overlaid rows as of the first `n` staged operations, so
    /// a statement that scans a table again, or after a few more operations,
    /// does not apply every operation of the transaction again (an expiry
    /// stages thousands of deletes, then scans the same tables many times).
    overlaid: HashMap<TableRef, (usize, Arc<Rows>)>,
}

/// A transaction's staged operations, and where each table last changed:
/// whether a table changed after some operation is then a lookup, not a
/// pass over every operation (an expiry stages thousands of deletes, then
/// DuckLake scans a dozen tables many times).
#[derive(Default)]
struct StagedOps {
    ops: Vec<StagedOp>,
    /// Per table, how many operations were staged with its last one.
    last_on: HashMap<TableRef, usize>,
    /// Per table, the same for its last one that can hide its children.
    last_hiding: HashMap<TableRef, usize>,
    /// Per table whose every staged operation deleted a committed row the
    /// transaction scanned, which positions of the committed rows went: the
    /// overlay keeps the rest without matching each deleted row against
    /// the committed ones (an expiry deletes thousands of snapshots). `None`
    /// once anything else was staged on the table.
    deleted_at: HashMap<TableRef, Option<Vec<bool>>>,
    /// Per table, how many rows the staged operations delete: the planner
    /// asks for every table of every statement, and an expiry stages
    /// thousands of operations.
    deletes: HashMap<TableRef, u64>,
}

impl StagedOps {
    /// Stages deletes of `table`'s rows, each with its place among the
    /// `committed` rows when the scan that emitted it read those rows.
    fn push_deletes(
        &mut self,
        table: TableRef,
        deletes: impl IntoIterator<Item = (Row, Option<usize>)>,
        committed: usize,
    ) {
        let before = self.ops.len();
        let gone = self
            .deleted_at
            .entry(table)
            .or_insert_with(|| Some(vec![false; committed]));
        for (row, at) in deletes {
            self.ops.push(StagedOp::Delete { table, row });
            *self.deletes.entry(table).or_default() += 1;
            match (gone.as_mut(), at) {
                (Some(positions), Some(at)) if at < positions.len() && !positions[at] => {
                    positions[at] = true;
                }
                _ => *gone = None,
            }
        }
        if self.ops.len() > before {
            self.note_last(table, true);
        }
    }

    /// Which committed rows of `table` its staged deletes removed, when
    /// that is all that was staged on it ([`StagedOps::push_deletes`]).
    fn deleted_from_committed(&self, table: TableRef) -> Option<&[bool]> {
        self.deleted_at.get(&table)?.as_deref()
    }

    fn push(&mut self, op: StagedOp) {
        let table = op.table();
        // Only push_deletes keeps a table's positions.
        self.deleted_at.insert(table, None);
        let hides = overlay::can_hide_children(&op);
        if let StagedOp::Delete { .. } = op {
            *self.deletes.entry(table).or_default() += 1;
        }
        self.ops.push(op);
        self.note_last(table, hides);
    }

    /// Records that the operation just staged was `table`'s last, and its
    /// last that can hide children when it `hides`.
    fn note_last(&mut self, table: TableRef, hides: bool) {
        self.last_on.insert(table, self.ops.len());
        if hides {
            self.last_hiding.insert(table, self.ops.len());
        }
    }

    /// Whether an operation after the first `since` can change what a scan
    /// of `table` shows: one on the table itself, or one that can hide
    /// children ([`overlay::can_hide_children`]) on any of its ancestors.
    fn changed_since(&self, table: TableRef, since: usize) -> bool {
        let after = |map: &HashMap<TableRef, usize>, t| map.get(&t).is_some_and(|&n| n > since);
        if after(&self.last_on, table) {
            return true;
        }
        let mut ancestor = overlay::parent_table(table);
        while let Some(parent) = ancestor {
            if after(&self.last_hiding, parent) {
                return true;
            }
            ancestor = overlay::parent_table(parent);
        }
        false
    }

    fn clear(&mut self) {
        *self = StagedOps::default();
    }
}

impl std::ops::Deref for StagedOps {
    type Target = [StagedOp];

    fn deref(&self) -> &[StagedOp] {
        &self.ops
    }
}

/// Where a table stands inside a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    pub table: TableRef,
    pub columns: Arc<[ColumnDesc]>,
}

impl StagedTransaction {
    /// A transaction that shares committed rows with no other.
    pub fn new(store: Arc<Store>) -> Self {
        Self::sharing(store, Arc::default())
    }

    /// A transaction that reads and carries forward the committed rows the
    /// other transactions of this attach share.
    pub fn sharing(store: Arc<Store>, shared: Arc<AttachShared>) -> Self {
        StagedTransaction {
            store,
            claimant: shared.claims.claimant(),
            shared,
            pinned: None,
            runs: Vec::new(),
            next_rowid: 0,
            ops: StagedOps::default(),
            overlaid: HashMap::new(),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn ops(&self) -> &[StagedOp] {
        &self.ops
    }

    async fn pin(&mut self) -> Result<&mut Pinned> {
        self.shared.activity.fetch_add(1, Ordering::Relaxed);
        if self.pinned.is_none() {
            let view = self.store.snapshot().await?;
            let head = self.shared.head_at(&self.store, &view).await?;
            let inline = match self.shared.rows.inline_tables(head) {
                Some(kept) => kept,
                None => {
                    let read = Arc::new(committed_inline_tables(&self.store, &view).await?);
                    self.shared.rows.offer_inline_tables(head, &read);
                    read
                }
            };
            self.pinned = Some(Pinned {
                view,
                head,
                rows: HashMap::new(),
                inline,
                deleted_rows: None,
            });
        }
        self.pinned
            .as_mut()
            .ok_or_else(|| Error::Internal("read view missing after pinning".into()))
    }

    /// The head this transaction's reads are based on.
    pub async fn premise(&mut self) -> Result<Option<Head>> {
        Ok(self.pin().await?.head)
    }

    fn staged_fixed_created(&self, kind: Kind) -> bool {
        self.ops.iter().any(|op| matches!(op, StagedOp::CreateTable { table: TableRef::Fixed(k), .. } if *k == kind))
    }

    /// Resolves a table name the way DuckDB binds it inside this transaction.
    pub async fn lookup(&mut self, name: &str) -> Result<Option<TableInfo>> {
        let Some(table) = TableRef::parse(name) else {
            return Ok(None);
        };
        let initialized = self.pin().await?.head.is_some();
        let pinned = self
            .pinned
            .as_ref()
            .ok_or_else(|| Error::Internal("unpinned".into()))?;
        let mut columns = match table {
            TableRef::Fixed(kind) => (initialized || self.staged_fixed_created(kind))
                .then(|| catalog::fixed_columns(kind)),
            TableRef::InlineData {
                table_id,
                schema_version,
            } => pinned
                .inline
                .schemas
                .get(&(table_id, schema_version))
                .map(|user| inline::data_columns(user).into()),
            TableRef::InlineDelete { table_id } => pinned
                .inline
                .delete_tables
                .contains(&table_id)
                .then(|| inline::delete_columns().into()),
        };
        if matches!(table, TableRef::Fixed(_)) {
            return Ok(columns.map(|columns| TableInfo { table, columns }));
        }
        for op in self.ops.iter() {
            match op {
                StagedOp::CreateTable {
                    table: t,
                    columns: c,
                } if *t == table => columns = Some(c.as_slice().into()),
                StagedOp::DropTable { table: t } if *t == table => columns = None,
                _ => {}
            }
        }
        Ok(columns.map(|columns| TableInfo { table, columns }))
    }

    /// Every table name visible in this transaction.
    pub async fn list_tables(&mut self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for kind in Kind::ALL {
            if self.lookup(kind.def().name).await?.is_some() {
                names.push(kind.def().name.to_string());
            }
        }
        let pinned = self.pin().await?;
        let mut dynamic: Vec<String> = pinned
            .inline
            .schemas
            .keys()
            .map(|(t, v)| {
                TableRef::InlineData {
                    table_id: *t,
                    schema_version: *v,
                }
                .name()
            })
            .chain(
                pinned
                    .inline
                    .delete_tables
                    .iter()
                    .map(|t| TableRef::InlineDelete { table_id: *t }.name()),
            )
            .collect();
        dynamic.extend(self.ops.iter().filter_map(|op| match op {
            StagedOp::CreateTable { table, .. } if !matches!(table, TableRef::Fixed(_)) => {
                Some(table.name())
            }
            _ => None,
        }));
        dynamic.sort();
        dynamic.dedup();
        for name in dynamic {
            if self.lookup(&name).await?.is_some() {
                names.push(name);
            }
        }
        Ok(names)
    }

    pub async fn create_table(
        &mut self,
        name: &str,
        columns: Vec<ColumnDesc>,
        if_not_exists: bool,
    ) -> Result<()> {
        self.writable()?;
        let table = TableRef::parse(name).ok_or_else(|| {
            Error::Unsupported(format!(
                "CREATE TABLE {name}: a moraine catalog holds only DuckLake's metadata tables"
            ))
        })?;
        if self.lookup(name).await?.is_some() {
            if if_not_exists {
                return Ok(());
            }
            return Err(Error::InvalidArgument(format!(
                "table {name} already exists"
            )));
        }
        let columns = match table {
            TableRef::Fixed(kind) => {
                let fixed = catalog::fixed_columns(kind);
                validate_columns(name, &columns, &fixed)?;
                fixed.to_vec()
            }
            TableRef::InlineData { .. } => {
                let system = inline::data_columns(&[]);
                if columns.len() < system.len() {
                    return Err(Error::InvalidArgument(format!(
                        "{name} needs the columns row_id, begin_snapshot, end_snapshot"
                    )));
                }
                validate_columns(name, &columns[..system.len()], &system)?;
                columns
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if i < system.len() {
                            system[i].clone()
                        } else {
                            ColumnDesc {
                                transfer: catalog::Transfer::Value,
                                ..c
                            }
                        }
                    })
                    .collect()
            }
            TableRef::InlineDelete { .. } => {
                validate_columns(name, &columns, &inline::delete_columns())?;
                inline::delete_columns()
            }
        };
        self.ops.push(StagedOp::CreateTable { table, columns });
        Ok(())
    }

    pub async fn drop_table(&mut self, name: &str, if_exists: bool) -> Result<()> {
        self.writable()?;
        let Some(info) = self.lookup(name).await? else {
            if if_exists {
                return Ok(());
            }
            return Err(Error::NotFound(format!("table {name} does not exist")));
        };
        if matches!(info.table, TableRef::Fixed(_)) {
            return Err(Error::Unsupported(format!(
                "DROP TABLE {name}: DuckLake's metadata tables cannot be dropped"
            )));
        }
        self.ops.push(StagedOp::DropTable { table: info.table });
        Ok(())
    }

    async fn committed(&mut self, table: TableRef) -> Result<Arc<Rows>> {
        let store = self.store.clone();
        let shared = self.shared.clone();
        let pinned = self.pin().await?;
        if let Some(rows) = pinned.rows.get(&table) {
            return Ok(rows.clone());
        }
        if let Some(rows) = shared.rows.rows(pinned.head, table) {
            pinned.rows.insert(table, rows.clone());
            return Ok(rows);
        }
        if let Some(rows) = image_rows(&store, &shared, pinned, table).await? {
            let rows = Arc::new(rows);
            pinned.rows.insert(table, rows.clone());
            shared.rows.offer(pinned.head, table, &rows);
            return Ok(rows);
        }
        let rows = Arc::new(Rows::packed(
            committed_records(&store, &pinned.view, table).await?,
        ));
        shared
            .tables_read_from_records
            .fetch_add(1, Ordering::Relaxed);
        pinned.rows.insert(table, rows.clone());
        shared.rows.offer(pinned.head, table, &rows);
        Ok(rows)
    }

    /// The deleted-row counts of the pinned head: kept by this attach, or
    /// read from `sys/head`.
    async fn deleted_rows(&mut self) -> Result<Arc<DeletedRowCounts>> {
        let store = self.store.clone();
        let shared = self.shared.clone();
        let pinned = self.pin().await?;
        if let Some(counts) = &pinned.deleted_rows {
            return Ok(counts.clone());
        }
        let counts = match shared.rows.deleted_rows(pinned.head) {
            Some(kept) => kept,
            None => {
                let read = match store
                    .get(&pinned.view, crate::store::keys::SYS_HEAD)
                    .await?
                {
                    Some(bytes) => DeletedRowCounts::of_head(&bytes)?,
                    None => DeletedRowCounts::default(),
                };
                let read = Arc::new(read);
                shared.rows.offer_deleted_rows(pinned.head, &read);
                read
            }
        };
        pinned.deleted_rows = Some(counts.clone());
        Ok(counts)
    }

    /// How many rows a scan of `table` sees now, and how many DuckDB's own
    /// table would count, for the planner's estimates: those rows, the ones
    /// this transaction deleted, and those deleted before that the table
    /// still counts ([`DeletedRowCounts`]).
    pub async fn row_counts(&mut self, table: TableRef) -> Result<(u64, u64)> {
        let visible = self.visible_rows(table).await?.len() as u64;
        let deleting = self.ops.deletes.get(&table).copied().unwrap_or(0);
        let estimate = visible + deleting + self.deleted_rows().await?.get(table);
        Ok((visible, estimate))
    }

    /// The deleted-row counts once this transaction commits: its deletes of
    /// committed rows are added, and the tables it empties or drops leave.
    async fn deleted_rows_after_commit(&mut self) -> Result<DeletedRowCounts> {
        let before = self.deleted_rows().await?;
        let mut deleted = self.ops.deletes.clone();
        let mut gone: Vec<TableRef> = self
            .ops
            .iter()
            .filter_map(|op| match op {
                StagedOp::DropTable { table } => Some(*table),
                _ => None,
            })
            .collect();
        if deleted.is_empty() && gone.is_empty() {
            return Ok(before.as_ref().clone());
        }
        for (table, count) in deleted.iter_mut() {
            // A row this transaction inserted never reached the table.
            let inserted: std::collections::HashSet<&Row> = self
                .ops
                .iter()
                .filter_map(|op| match op {
                    StagedOp::Insert { table: t, row } if t == table => Some(row),
                    _ => None,
                })
                .collect();
            if !inserted.is_empty() {
                let own = self.ops.iter().filter(|op| {
                    matches!(op, StagedOp::Delete { table: t, row } if t == table && inserted.contains(row))
                });
                *count = count.saturating_sub(own.count() as u64);
            }
        }
        let tables: Vec<TableRef> = deleted.keys().copied().collect();
        for table in tables {
            if !gone.contains(&table) && self.visible_rows(table).await?.is_empty() {
                gone.push(table);
            }
        }
        Ok(before.after(deleted, gone))
    }

    /// The rows a scan of `table` sees now: committed rows with this
    /// transaction's staged operations applied.
    pub async fn visible_rows(&mut self, table: TableRef) -> Result<Arc<Rows>> {
        if table == TableRef::Fixed(Kind::SchemaVersions) {
            let mut rows = self.overlaid(table).await?.as_ref().clone();
            let files = self.overlaid(TableRef::Fixed(Kind::DataFile)).await?;
            rows.change(|rows| catalog::repair_schema_versions(rows, &files));
            return Ok(Arc::new(rows));
        }
        self.overlaid(table).await
    }

    async fn overlaid(&mut self, table: TableRef) -> Result<Arc<Rows>> {
        let committed = self.committed(table).await?;
        if !self.ops.changed_since(table, 0) {
            return Ok(committed);
        }
        let staged = self.ops.len();
        let parent_table = overlay::parent_table(table);
        // Deletes by position apply to the committed rows whole: a child
        // table's parent filter needs the parents' rows, so it goes below.
        let positions = match parent_table {
            None => self.ops.deleted_from_committed(table),
            Some(_) => None,
        };
        let rows = match (self.overlaid.get(&table), positions) {
            // Nothing staged since (or only operations on other tables)
            // changed these rows.
            (Some((applied, rows)), _) if !self.ops.changed_since(table, *applied) => {
                let rows = rows.clone();
                self.overlaid.insert(table, (staged, rows.clone()));
                return Ok(rows);
            }
            (_, Some(gone)) => committed.kept(|at| !gone[at]),
            // Operations apply one after another, so the later ones can go
            // on top of what the earlier ones made. A child table is applied
            // whole instead: its parent filter is not incremental.
            (Some((applied, rows)), None) if parent_table.is_none() => {
                overlay::applied(table, rows, &self.ops[*applied..])
            }
            _ => match parent_table {
                None => overlay::applied(table, &committed, &self.ops),
                Some(parent) => {
                    let parent = Box::pin(self.visible_rows(parent)).await?;
                    overlay::linked(table, &committed, &self.ops, &parent)
                }
            },
        };
        let rows = Arc::new(rows);
        self.overlaid.insert(table, (staged, rows.clone()));
        Ok(rows)
    }

    /// Materializes a table for one scan and registers the run; returns the
    /// first rowid and the rows.
    pub async fn scan(&mut self, table: TableRef) -> Result<(i64, Arc<Rows>)> {
        let scan = self.scan_within(table, &[]).await?;
        Ok((scan.base, scan.rows))
    }

    /// A scan that may leave out the rows outside `bounds`
    /// ([`pushdown`]); the run still holds every visible row.
    pub async fn scan_within(
        &mut self,
        table: TableRef,
        bounds: &[pushdown::IntBound],
    ) -> Result<Scan> {
        let rows = self.visible_rows(table).await?;
        let base = self.next_rowid;
        self.next_rowid += rows.len() as i64;
        self.runs.push(Run {
            base,
            rows: rows.clone(),
        });
        let selected = pushdown::select(&rows, bounds);
        Ok(Scan {
            base,
            rows,
            selected,
        })
    }

    /// The row a scan of this transaction emitted as `rowid`, the rows of
    /// that scan, and the row's place among them.
    fn resolve_in_run(&self, rowid: i64) -> Result<(Row, &Arc<Rows>, usize)> {
        let run = self
            .runs
            .iter()
            .rev()
            .find(|r| rowid >= r.base && rowid < r.base + r.rows.len() as i64)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "rowid {rowid} was not emitted by a scan in this transaction"
                ))
            })?;
        let at = (rowid - run.base) as usize;
        let row = run
            .rows
            .row(at)
            .ok_or_else(|| Error::Internal(format!("rowid {rowid} is outside its run")))?;
        Ok((row, &run.rows, at))
    }

    fn resolve(&self, rowid: i64) -> Result<Row> {
        self.resolve_in_run(rowid).map(|(row, _, _)| row)
    }

    fn writable(&self) -> Result<()> {
        self.store.check_writable()
    }

    pub async fn stage_insert(&mut self, table: TableRef, rows: Vec<Row>) -> Result<()> {
        self.writable()?;
        self.pin().await?;
        for row in rows {
            if let TableRef::Fixed(kind) = table {
                catalog::check_row(kind, &row)?;
            }
            self.ops.push(StagedOp::Insert { table, row });
        }
        Ok(())
    }

    pub async fn stage_delete(&mut self, table: TableRef, rowids: &[i64]) -> Result<()> {
        self.writable()?;
        let committed = self.committed(table).await?;
        let mut rows = Vec::with_capacity(rowids.len());
        let mut positions = Vec::with_capacity(rowids.len());
        for &rowid in rowids {
            let (row, run, at) = self.resolve_in_run(rowid)?;
            positions.push(Arc::ptr_eq(run, &committed).then_some(at));
            rows.push(row);
        }
        self.shared
            .claims
            .claim(self.claimant, table, &rows, Change::Deletion)?;
        self.ops
            .push_deletes(table, rows.into_iter().zip(positions), committed.len());
        Ok(())
    }

    /// `columns[i]` is the table column that `values[r][i]` sets.
    pub async fn stage_update(
        &mut self,
        table: TableRef,
        rowids: &[i64],
        columns: &[usize],
        values: Vec<Row>,
    ) -> Result<()> {
        self.writable()?;
        self.pin().await?;
        if values.len() != rowids.len() {
            return Err(Error::Internal(
                "update values and rowids differ in length".into(),
            ));
        }
        for (&rowid, set) in rowids.iter().zip(values) {
            let old = self.resolve(rowid)?;
            self.shared
                .claims
                .claim(self.claimant, table, [&old], Change::Update)?;
            let mut new = old.clone();
            for (&c, v) in columns.iter().zip(set) {
                let slot = new.get_mut(c).ok_or_else(|| {
                    Error::Internal(format!("update of column {c} beyond the row"))
                })?;
                *slot = v;
            }
            if let TableRef::Fixed(kind) = table {
                catalog::check_row(kind, &new)?;
            }
            self.ops.push(StagedOp::Update { table, old, new });
        }
        Ok(())
    }

    fn pinned_view(&self) -> Result<&crate::store::ReadView> {
        self.pinned
            .as_ref()
            .map(|p| &p.view)
            .ok_or_else(|| Error::Internal("read view missing at commit".into()))
    }

    /// Translates the staged operations into an open store transaction on
    /// this transaction's view, without committing it.
    pub async fn prepare(&mut self) -> Result<translate::PreparedCommit> {
        let premise = self.premise().await?;
        let facts = self.commit_facts().await?;
        let view = self.pinned_view()?;
        translate::prepare(&self.store, view, premise, &self.ops, &facts).await
    }

    async fn commit_facts(&mut self) -> Result<translate::CommitFacts> {
        Ok(translate::CommitFacts {
            deleted_rows: self.deleted_rows_after_commit().await?,
            known: self.known_keys()?,
        })
    }

    /// The keys a commit need not read: when it deletes snapshots (an expiry
    /// deletes thousands) and this transaction read `ducklake_snapshot` at
    /// its pinned head, every snapshot record's key follows from those rows.
    fn known_keys(&self) -> Result<KnownKeys> {
        let mut known = KnownKeys::default();
        let expires = self.deletes_from(&[Kind::Snapshot, Kind::SnapshotChanges]);
        let snapshots = self
            .pinned
            .as_ref()
            .and_then(|pinned| pinned.rows.get(&TableRef::Fixed(Kind::Snapshot)));
        let (true, Some(snapshots)) = (expires, snapshots) else {
            return Ok(known);
        };
        // Read in place: decoding thousands of packed rows only to take
        // their ids cost the commit a millisecond.
        const SNAPSHOT_ID: usize = crate::column!(Snapshot, snapshot_id);
        let ids = (0..snapshots.len())
            .map(|row| match snapshots.cell(row, SNAPSHOT_ID) {
                CellRef::Int(id) => Ok(id),
                other => Err(Error::corruption(format!(
                    "a kept ducklake_snapshot row has the id {other:?}"
                ))),
            })
            .collect::<Result<Vec<i64>>>()?;
        // Every snapshot record lies under the one snapshot prefix, its key
        // the prefix and the id; were there more, nothing would be known and
        // the commit would read.
        let mut prefixes = catalog::record_prefixes(Kind::Snapshot).into_iter();
        if let (Some(prefix), None) = (prefixes.next(), prefixes.next()) {
            known.add_ints(prefix, ids);
        }
        Ok(known)
    }

    /// Takes the overlays that hold every staged operation on their table
    /// (none came after them that can change it), each with the committed
    /// rows it was built on.
    fn finished_overlays(&mut self) -> HashMap<TableRef, shared::Finished> {
        let ops = &self.ops;
        let Some(pinned) = &self.pinned else {
            self.overlaid.clear();
            return HashMap::new();
        };
        self.overlaid
            .drain()
            .filter(|(table, (applied, _))| !ops.changed_since(*table, *applied))
            .filter_map(|(table, (_, rows))| {
                let base = pinned.rows.get(&table)?.clone();
                Some((table, shared::Finished { base, rows }))
            })
            .collect()
    }

    /// Whether the staged operations expire snapshots: their records wait
    /// for [`AttachShared::purge_soon`] once the commit lands.
    pub fn expires_snapshots(&self) -> bool {
        self.deletes_from(&[Kind::Snapshot])
    }

    /// Whether the staged operations delete rows of any of `kinds`.
    fn deletes_from(&self, kinds: &[Kind]) -> bool {
        self.ops.iter().any(|op| {
            matches!(op, StagedOp::Delete { table: TableRef::Fixed(kind), .. } if kinds.contains(kind))
        })
    }

    pub fn shared(&self) -> &Arc<AttachShared> {
        &self.shared
    }

    /// Translates the staged operations into one store transaction and waits
    /// until it is durable.
    pub async fn commit(&mut self) -> Result<CommitOutcome> {
        if self.ops.is_empty() {
            return Ok(CommitOutcome::Empty);
        }
        let premise = self.premise().await?;
        let facts = self.commit_facts().await?;
        let view = self.pinned_view()?;
        let landed = translate::commit(&self.store, view, premise, &self.ops, &facts).await;
        self.store.commits().record(&landed);
        if let Err(e) = &landed {
            if !matches!(
                e,
                Error::Conflict(_)
                    | Error::Constraint(_)
                    | Error::NotFound(_)
                    | Error::InvalidArgument(_)
                    | Error::Unsupported(_)
            ) {
                // The batch may or may not have landed.
                self.shared.rows.clear();
            }
        }
        let translate::Landed { outcome, stamp } = landed?;
        // A finished transaction must not keep its read view: an open SlateDB
        // snapshot makes compaction keep every version it could see. Its rows
        // go too, so the shared tables are carried forward in place.
        let finished = self.finished_overlays();
        self.pinned = None;
        self.runs.clear();
        if let Some(head) = outcome.head(premise) {
            if let Some(stamp) = stamp {
                self.shared.head_left(stamp, head);
            }
            self.shared.rows.committed(
                premise,
                head,
                &self.ops,
                finished,
                Arc::new(facts.deleted_rows),
            );
        }
        self.shared.claims.release(self.claimant);
        self.ops.clear();
        Ok(outcome)
    }
}

impl Drop for StagedTransaction {
    fn drop(&mut self) {
        self.shared.claims.release(self.claimant);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    Empty,
    /// A commit that minted this snapshot.
    Snapshot(i64),
    /// A maintenance batch: head keeps its snapshot, the batch count advances.
    HeadPreserving(Head),
}

impl CommitOutcome {
    /// The head a commit from `premise` left (every batch advances the
    /// batch count by one).
    fn head(self, premise: Option<Head>) -> Option<Head> {
        match self {
            CommitOutcome::Empty => None,
            CommitOutcome::Snapshot(snapshot_id) => Some(Head {
                snapshot_id,
                batch_count: premise.map_or(0, |h| h.batch_count) + 1,
            }),
            CommitOutcome::HeadPreserving(head) => Some(head),
        }
    }
}

/// `table`'s committed rows read from its records (never from the image).
pub async fn committed_records(
    store: &Store,
    view: &ReadView,
    table: TableRef,
) -> Result<Vec<Row>> {
    match table {
        TableRef::Fixed(kind) => catalog::committed_rows(store, view, kind).await,
        TableRef::InlineData {
            table_id,
            schema_version,
        } => inline::committed_data_rows(store, view, table_id, schema_version).await,
        TableRef::InlineDelete { table_id } => {
            inline::committed_delete_rows(store, view, table_id).await
        }
    }
}

/// The inline tables that exist at `view`, read from their records.
///
/// The two scans run together: each waits for SlateDB's block fetches on
/// the runtime's workers, and a cold attach's first query waits for both.
async fn committed_inline_tables(store: &Store, view: &ReadView) -> Result<InlineTables> {
    let (schemas, delete_tables) = futures_util::try_join!(
        inline::committed_schemas(store, view),
        inline::committed_delete_tables(store, view)
    )?;
    Ok(InlineTables {
        schemas: schemas.into_iter().collect(),
        delete_tables,
    })
}

/// `table`'s committed rows from the store's head image, when it holds one
/// taken at the pinned head ([`catalog::image`]).
async fn image_rows(
    store: &Store,
    shared: &AttachShared,
    pinned: &Pinned,
    table: TableRef,
) -> Result<Option<Rows>> {
    let Some(head) = pinned.head else {
        return Ok(None);
    };
    image_rows_at(store, shared, &pinned.view, head, &pinned.inline, table).await
}

/// `table`'s rows at `head` from the image this attach holds for that head
/// (read through `view` if it holds none yet); `inline` names the inlined
/// tables at `head`.
async fn image_rows_at(
    store: &Store,
    shared: &AttachShared,
    view: &ReadView,
    head: Head,
    inline: &InlineTables,
    table: TableRef,
) -> Result<Option<Rows>> {
    let width = match table {
        TableRef::Fixed(kind) => kind.def().columns.len(),
        TableRef::InlineData {
            table_id,
            schema_version,
        } => match inline.schemas.get(&(table_id, schema_version)) {
            Some(user) => inline::data_columns(user).len(),
            None => return Ok(None),
        },
        TableRef::InlineDelete { .. } => inline::delete_columns().len(),
    };
    let images = match shared.rows.images(head) {
        Some(images) => images,
        None => {
            let read = Arc::new(Images::read_at(store, view, head).await?);
            shared.rows.offer_images(head, &read);
            read
        }
    };
    images
        .rows(store, view, table, width, |last, added| {
            overlay::in_store_order(table, last.as_ref(), added)
        })
        .await
}

/// Kinds whose rows are one per data file and column (or partition key):
/// in a lake of many Parquet files they dwarf every other table, and only
/// some queries read them. The image holds them when the session read them.
const IMAGED_WHEN_READ: [Kind; 3] = [
    Kind::FileColumnStats,
    Kind::FileVariantStats,
    Kind::FilePartitionValue,
];

/// The tables the image holds even when the session never read them: every
/// fixed kind but the [`IMAGED_WHEN_READ`] ones, and every inlined table at
/// the head. A cold attach and its first query read all of them: DuckLake
/// loads the catalog whole (`ducklake_metadata` and the snapshots too),
/// a query of a table reads its files and its inlined rows whole, and an
/// expiry and a change feed read the snapshot tables. A session that only
/// inserts reads few of them, and a table left out is one SlateDB scan at
/// the next attach (about half a millisecond, more while SlateDB's caches
/// are cold) and makes that attach's read-only session take the image again.
fn always_imaged(inline: &InlineTables) -> Vec<TableRef> {
    let fixed = Kind::ALL
        .into_iter()
        .filter(|kind| !IMAGED_WHEN_READ.contains(kind))
        .map(TableRef::Fixed);
    let data = inline
        .schemas
        .keys()
        .map(|(table_id, schema_version)| TableRef::InlineData {
            table_id: *table_id,
            schema_version: *schema_version,
        });
    let deletes = inline
        .delete_tables
        .iter()
        .map(|table_id| TableRef::InlineDelete {
            table_id: *table_id,
        });
    fixed.chain(data).chain(deletes).collect()
}

/// Writes the head image of the tables this attach's transactions hold
/// (and of the [`always_imaged`] ones) when they hold at least `min_rows`
/// rows together, this process holds the writer turn and the kept rows are
/// at the store's head; a store it cannot take one of is left as it is.
/// Returns whether an image was written.
pub async fn take_image(store: &Store, shared: &AttachShared, min_rows: usize) -> Result<bool> {
    let Some(view) = store.snapshot_if_writing().await? else {
        return Ok(false);
    };
    let Some((head, mut tables)) = shared.rows.kept() else {
        return Ok(false);
    };
    if shared.head_at(store, &view).await? != Some(head) {
        return Ok(false);
    }
    let inline = match shared.rows.inline_tables(Some(head)) {
        Some(kept) => kept,
        None => Arc::new(committed_inline_tables(store, &view).await?),
    };
    let unread: Vec<TableRef> = always_imaged(&inline)
        .into_iter()
        .filter(|table| !tables.iter().any(|(kept, _)| kept == table))
        .collect();
    let current = catalog::image::current(store, &view).await?;
    let imaged = current.as_ref().map(catalog::image::Stamp::head) == Some(head);
    if imaged
        && image_holds(
            shared,
            head,
            tables.iter().map(|(t, _)| *t).chain(unread.iter().copied()),
        )
    {
        // The image of this head is taken, with every table read since.
        return Ok(false);
    }
    // A table the session never read is its image's parts, with the rows
    // its commits appended, when the image still holds it: its parts are
    // then kept, not written again.
    for table in unread {
        let rows = match image_rows_at(store, shared, &view, head, &inline, table).await? {
            Some(rows) => rows,
            None => Rows::from(committed_records(store, &view, table).await?),
        };
        tables.push((table, Arc::new(rows)));
    }
    if tables.iter().map(|(_, rows)| rows.len()).sum::<usize>() < min_rows {
        return Ok(false);
    }
    let existing: Vec<Vec<u8>> = store
        .scan_prefix(&view, &catalog::image::stamp_key())
        .await?
        .into_iter()
        .map(|(key, _)| key.to_vec())
        .collect();
    let image = catalog::image::replacement(head, &tables, &existing, current.as_ref());
    if image.bytes() > catalog::image::MAX_IMAGE_BYTES {
        // The stale image stays; its stamp keeps it from being used.
        return Ok(false);
    }
    let txn = store.begin(&view)?;
    for (key, value) in &image.puts {
        txn.put(key, value)?;
    }
    for key in &image.deletes {
        txn.delete(key)?;
    }
    store.commit(txn).await?;
    Ok(true)
}

/// Whether the image this attach read at `head` holds every one of
/// `tables`; false when it never read one.
fn image_holds(
    shared: &AttachShared,
    head: Head,
    mut tables: impl Iterator<Item = TableRef>,
) -> bool {
    shared
        .rows
        .images(head)
        .is_some_and(|images| tables.all(|table| images.holds(table)))
}

fn validate_columns(name: &str, given: &[ColumnDesc], expected: &[ColumnDesc]) -> Result<()> {
    let render = |cols: &[ColumnDesc]| {
        cols.iter()
            .map(|c| format!("{} {}", c.name, c.type_name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = given.len() == expected.len()
        && given.iter().zip(expected).all(|(g, e)| {
            g.name.eq_ignore_ascii_case(&e.name)
                && catalog::ColumnType::parse(&g.type_name)
                    == catalog::ColumnType::parse(&e.type_name)
        });
    if same {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "CREATE TABLE {name}({}) does not match DuckLake 1.5.5's schema ({})",
            render(given),
            render(expected)
        )))
    }
}
