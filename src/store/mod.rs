//! The store: SlateDB over `object_store`, keys and value codecs.
//!
//! This layer knows bytes, keys and framed values. It knows nothing of
//! DuckLake: the catalog above it decides which kinds live where.

/// `Debug` and `Display` for an object store that wraps another: its name
/// around the wrapped store, and the wrapped store's own text, which
/// `object_store` and SlateDB put in their error messages.
macro_rules! wrapping_store_text {
    ($wrapper:ident, $inner:ident) => {
        impl std::fmt::Debug for $wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($wrapper), self.$inner)
            }
        }

        impl std::fmt::Display for $wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.$inner, f)
            }
        }
    };
}

pub mod counted;
mod fences;
mod journal;
pub mod keys;
pub mod layout;
pub mod lease;
mod local;
pub mod objects;
mod remembered;
pub mod settings;
mod spares;
pub mod turn;
pub mod upkeep;
pub mod uri;
pub mod value;
pub mod writes;

use crate::error::{panic_text, slate, Error, Result};
use bytes::Bytes;
use futures_util::FutureExt;
use object_store::path::Path;
use object_store::ObjectStore;
use slatedb::config::{FlushOptions, FlushType, ScanOptions, SstBlockSize};
use slatedb::{Db, DbIterator, DbReader, DbSnapshot, DbTransaction, IsolationLevel};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use settings::StoreSettings;
pub use uri::StoreUri;

/// How many commits the WAL may hold before the memtable goes to L0: a
/// reader's attach, and a writer taking the turn, replays at most this many
/// WAL objects.
const MEMTABLE_FLUSH_COMMITS: u64 = 128;

/// A cold attach reads whole tables: larger blocks mean fewer GETs per table
/// (on S3 a request costs more than its bytes), and a catalog is small.
const WRITER_BLOCK_SIZE: SstBlockSize = SstBlockSize::Block64Kib;

/// Bulk scans fetch widely: the default (one block, one fetch) turns a cold
/// scan on S3 into thousands of sequential GETs. They keep the blocks they
/// read, as point reads do: a cold attach scans the inline tables and then
/// reads the image's stamp from the same block.
fn bulk_scan() -> ScanOptions {
    ScanOptions {
        read_ahead_bytes: 8 << 20,
        max_fetch_tasks: 16,
        cache_blocks: true,
        ..ScanOptions::default()
    }
}

enum Handle {
    /// A read-write attach: SlateDB's writer, open while this process holds
    /// the writer turn.
    Writer(Arc<turn::WriterTurn>),
    Reader(Box<DbReader>),
}

/// An opened store: one SlateDB database under one object-store prefix.
pub struct Store {
    handle: Handle,
    object_store: Arc<dyn ObjectStore>,
    root: Path,
    uri: StoreUri,
    /// Keys returned by reads through this handle and its transactions,
    /// for load accounting.
    keys_read: Arc<AtomicU64>,
    /// Commits tried through this handle and how they ended.
    commits: CommitCounters,
    /// Object-store requests made through this handle.
    requests: Arc<counted::RequestCounts>,
    /// Commits through this handle since the memtable last went to an L0
    /// SST, for commits without a batch number.
    unflushed_commits: AtomicU64,
    upkeep_holds: upkeep::UpkeepHolds,
}

pub type KeyValues = Vec<(Bytes, Bytes)>;

/// How the commits tried through one handle ended: with a host that retries
/// lost races (DuckLake does), attempts per landed commit measure contention.
#[derive(Debug, Default)]
pub struct CommitCounters {
    attempted: AtomicU64,
    landed: AtomicU64,
    conflicts: AtomicU64,
}

impl CommitCounters {
    pub fn record<T>(&self, outcome: &Result<T>) {
        self.attempted.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(_) => self.landed.fetch_add(1, Ordering::Relaxed),
            Err(Error::Conflict(_)) => self.conflicts.fetch_add(1, Ordering::Relaxed),
            Err(_) => 0,
        };
    }

    /// `(name, value)` pairs: attempted, landed, conflicts.
    pub fn snapshot(&self) -> [(&'static str, u64); 3] {
        [
            ("commits_attempted", self.attempted.load(Ordering::Relaxed)),
            ("commits_landed", self.landed.load(Ordering::Relaxed)),
            ("commit_conflicts", self.conflicts.load(Ordering::Relaxed)),
        ]
    }
}

impl Store {
    pub async fn open(uri: &StoreUri, settings: &StoreSettings) -> Result<Store> {
        // Opening a local store makes its folders; a reader makes nothing.
        if let StoreUri::Local(dir) = uri {
            if settings.read_only && !dir.exists() {
                return Err(no_store_to_read(uri));
            }
        }
        Store::open_on(uri, uri.object_store(&settings.s3)?, settings).await
    }

    /// Opens the store at `uri` through a given object store: a wrapper that
    /// counts, delays or cuts off writes, for tests and tools.
    pub async fn open_on(
        uri: &StoreUri,
        object_store: Arc<dyn ObjectStore>,
        settings: &StoreSettings,
    ) -> Result<Store> {
        let root = uri.root_path();
        let (object_store, requests) = counted::Counted::wrap(object_store);
        let object_store =
            remembered::Remembered::wrap(object_store, root.clone(), requests.clone());
        let existing = check_location(uri, &object_store, &root).await?;
        let upkeep_holds = upkeep::UpkeepHolds::default();
        let handle = if settings.read_only {
            if !existing {
                return Err(no_store_to_read(uri));
            }
            let reader = DbReader::builder(root.clone(), object_store.clone())
                .with_options(settings.reader_options())
                .build()
                .await
                .map_err(|e| slate(&format!("opening {uri} read-only"), e))?;
            Handle::Reader(Box::new(reader))
        } else {
            let open_writer: turn::OpenWriter = {
                let (root, object_store) = (root.clone(), object_store.clone());
                let (uri, settings) = (uri.clone(), settings.clone());
                let last_collection = Arc::new(upkeep::LastCollection::default());
                let upkeep_holds = upkeep_holds.clone();
                Box::new(move || {
                    let (root, object_store) = (root.clone(), object_store.clone());
                    let (uri, settings) = (uri.clone(), settings.clone());
                    let last_collection = last_collection.clone();
                    let upkeep_holds = upkeep_holds.clone();
                    Box::pin(async move {
                        open_writer(
                            root,
                            object_store,
                            &uri,
                            &settings,
                            last_collection,
                            upkeep_holds,
                        )
                        .await
                    })
                })
            };
            let policy = turn::TurnPolicy {
                exclusive: settings.exclusive_writer,
                force_takeover: settings.force_takeover,
                wait: settings.turn_wait,
            };
            let writer = turn::WriterTurn::new(
                object_store.clone(),
                root.clone(),
                uri,
                policy,
                settings.close_collection_options(uri),
                open_writer,
            );
            // Take the turn now: an exclusive writer keeps it from here on,
            // and an attach that cannot write fails at ATTACH.
            drop(writer.pin().await?);
            Handle::Writer(writer)
        };
        Ok(Store {
            handle,
            object_store,
            root,
            uri: uri.clone(),
            keys_read: Arc::default(),
            commits: CommitCounters::default(),
            requests,
            unflushed_commits: AtomicU64::new(0),
            upkeep_holds,
        })
    }

    /// Whether a store exists at `uri`, without creating anything there.
    pub async fn exists(uri: &StoreUri, settings: &StoreSettings) -> Result<bool> {
        if let StoreUri::Local(dir) = uri {
            if !dir.exists() {
                return Ok(false);
            }
        }
        let object_store = uri.object_store(&settings.s3)?;
        check_location(uri, &object_store, &uri.root_path()).await
    }

    /// Holds the idle upkeep off until the returned hold drops: for work
    /// that will write to the store soon.
    pub fn hold_upkeep(&self) -> upkeep::UpkeepHold {
        self.upkeep_holds.hold()
    }

    pub fn commits(&self) -> &CommitCounters {
        &self.commits
    }

    pub fn requests(&self) -> &counted::RequestCounts {
        &self.requests
    }

    /// How many keys reads through this handle have returned so far.
    pub fn keys_read(&self) -> u64 {
        self.keys_read.load(Ordering::Relaxed)
    }

    pub fn uri(&self) -> &StoreUri {
        &self.uri
    }

    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.object_store
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many journals a local store holds ([`journal`], one per folder of
    /// [`layout::JOURNALED`] that was written) and their bytes, files no
    /// listing shows; `None` on other back-ends or before the first write.
    pub fn journal_files(&self) -> Option<(u64, u64)> {
        let StoreUri::Local(dir) = &self.uri else {
            return None;
        };
        let root = dir.join(self.root.as_ref());
        let sizes: Vec<u64> = layout::JOURNALED
            .iter()
            .filter_map(|folder| {
                std::fs::metadata(root.join(folder).join(journal::JOURNAL_NAME)).ok()
            })
            .map(|m| m.len())
            .collect();
        (!sizes.is_empty()).then(|| (sizes.len() as u64, sizes.iter().sum()))
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self.handle, Handle::Reader(_))
    }

    fn writer_turn(&self) -> Result<&Arc<turn::WriterTurn>> {
        match &self.handle {
            Handle::Writer(turn) => Ok(turn),
            Handle::Reader(_) => Err(Error::InvalidArgument(
                "this moraine catalog is attached READ_ONLY; writes are refused".into(),
            )),
        }
    }

    /// Refuses writes on a READ_ONLY attach.
    pub fn check_writable(&self) -> Result<()> {
        self.writer_turn().map(|_| ())
    }

    /// Holds the writer turn and returns SlateDB's writer, for work outside a
    /// transaction (reclaim, flushes). The turn stays with this process
    /// while the pin lives.
    pub async fn hold_writer(&self) -> Result<turn::TurnPin> {
        self.writer_turn()?.pin().await
    }

    /// The writer turn's counters, on a read-write attach.
    pub fn turn_counters(&self) -> Option<&turn::TurnCounters> {
        match &self.handle {
            Handle::Writer(turn) => Some(turn.counters()),
            Handle::Reader(_) => None,
        }
    }

    /// A consistent read view: every read through it sees one point in time.
    /// On a read-write attach it holds the writer turn until dropped.
    pub async fn snapshot(&self) -> Result<ReadView> {
        match &self.handle {
            // A snapshot fails only on a writer SlateDB closed: fenced, or
            // after a failure that no commit of this process saw (a
            // background flush's), when a writer opened afresh serves it.
            Handle::Writer(turn) => match writer_view(turn.pin().await?) {
                Err(e @ Error::Store(_)) => {
                    turn.writer_erred(&e).await;
                    writer_view(turn.pin().await?)
                }
                Err(e) => {
                    turn.writer_erred(&e).await;
                    Err(e)
                }
                view => view,
            },
            Handle::Reader(_) => Ok(ReadView::Reader),
        }
    }

    /// A read view on the writer, only if this process holds the turn now
    /// and nobody asks for it: for work that must not wait for a turn.
    pub async fn snapshot_if_writing(&self) -> Result<Option<ReadView>> {
        let Handle::Writer(turn) = &self.handle else {
            return Ok(None);
        };
        turn.pin_if_held().await.map(writer_view).transpose()
    }

    pub async fn get(&self, view: &ReadView, key: &[u8]) -> Result<Option<Bytes>> {
        let ctx = || format!("reading key {key:02x?}");
        self.keys_read.fetch_add(1, Ordering::Relaxed);
        match (view, &self.handle) {
            (ReadView::Snapshot { snapshot, .. }, _) => {
                snapshot.get(key).await.map_err(|e| slate(&ctx(), e))
            }
            (ReadView::Reader, Handle::Reader(r)) => r.get(key).await.map_err(|e| slate(&ctx(), e)),
            (ReadView::Reader, Handle::Writer(_)) => Err(reader_view_on_writer()),
        }
    }

    pub async fn scan_prefix(&self, view: &ReadView, prefix: &[u8]) -> Result<KeyValues> {
        let ctx = format!("scanning prefix {prefix:02x?}");
        let iter = self.prefix_iter(view, prefix, &bulk_scan(), &ctx).await?;
        let out = drain(iter, &ctx).await?;
        self.keys_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Whether the store holds no key at all.
    pub async fn is_empty(&self, view: &ReadView) -> Result<bool> {
        let ctx = "looking for any key";
        let mut iter = self
            .prefix_iter(view, b"", &ScanOptions::default(), ctx)
            .await?;
        Ok(iter.next().await.map_err(|e| slate(ctx, e))?.is_none())
    }

    async fn prefix_iter(
        &self,
        view: &ReadView,
        prefix: &[u8],
        options: &ScanOptions,
        ctx: &str,
    ) -> Result<DbIterator> {
        match (view, &self.handle) {
            (ReadView::Snapshot { snapshot, .. }, _) => {
                snapshot.scan_prefix_with_options(prefix, .., options).await
            }
            (ReadView::Reader, Handle::Reader(r)) => {
                r.scan_prefix_with_options(prefix, .., options).await
            }
            (ReadView::Reader, Handle::Writer(_)) => return Err(reader_view_on_writer()),
        }
        .map_err(|e| slate(ctx, e))
    }

    /// Starts a write transaction on the writer that `view` pinned. Its
    /// reads see its own writes.
    pub fn begin(&self, view: &ReadView) -> Result<StoreTxn> {
        self.check_writable()?;
        let ReadView::Snapshot { pin, .. } = view else {
            return Err(reader_view_on_writer());
        };
        let tx = pin
            .db()
            .begin(IsolationLevel::Snapshot)
            .map_err(|e| slate("beginning a transaction", e))?;
        Ok(StoreTxn {
            tx,
            pin: pin.clone(),
            batch: None,
            keys_read: self.keys_read.clone(),
        })
    }

    /// Commits and waits until the batch is durable in object storage, so an
    /// acknowledged commit survives a crash.
    ///
    /// Returns the stamp a view taken right after the commit carries when
    /// nothing else was written in between (`None` for a transaction that
    /// wrote nothing): a caller that knows what its commit left can then
    /// skip reading it back.
    pub async fn commit(&self, txn: StoreTxn) -> Result<Option<ViewStamp>> {
        let StoreTxn { tx, pin, batch, .. } = txn;
        let (db, writes) = (pin.db(), pin.writes());
        let landed = async {
            let handle = writes
                .run(tx.commit())
                .await
                .map_err(|e| slate("committing", e))?;
            let Some(handle) = handle else {
                return Ok(None);
            };
            writes
                .run(db.flush())
                .await
                .map_err(|e| slate("flushing the commit", e))?;
            handle
                .await_durable()
                .await
                .map_err(|e| slate("awaiting durability", e))?;
            self.flush_memtable_now_and_then(db, batch);
            Ok(Some(ViewStamp {
                writer: pin.opened(),
                seq: handle.seqnum(),
            }))
        }
        .await;
        // A write that failed for good closes SlateDB's writer, though not
        // always before the commit hears of it; a writer that survived is
        // reopened at no loss, its commits durable already.
        if let Err(e) = &landed {
            pin.writer_erred(e).await;
        }
        landed
    }

    /// Moves the memtable into an L0 SST every `MEMTABLE_FLUSH_COMMITS`
    /// commits, in the background. A catalog's commits are small, so
    /// SlateDB's size threshold (64 MiB) would let thousands of WAL objects
    /// pile up, and every reader attach and every recovery replays them all.
    /// A numbered commit counts the store's commits, whichever process made
    /// them: a writer that took the turn replayed the others' WAL into its
    /// memtable, so its flush covers theirs too.
    fn flush_memtable_now_and_then(&self, db: &Db, batch: Option<u64>) {
        let due = match batch {
            Some(batch) => batch % MEMTABLE_FLUSH_COMMITS == 0,
            None => {
                let since = self.unflushed_commits.fetch_add(1, Ordering::Relaxed) + 1;
                since >= MEMTABLE_FLUSH_COMMITS
            }
        };
        if !due {
            return;
        }
        self.unflushed_commits.store(0, Ordering::Relaxed);
        let db = db.clone();
        tokio::spawn(async move {
            // A failed flush leaves the data in the WAL, where it is durable.
            let _ = db
                .flush_with_options(FlushOptions {
                    flush_type: FlushType::MemTable,
                })
                .await;
        });
    }

    /// Writes everything pending into a new L0 SST and the manifest, so it
    /// no longer depends on the WAL.
    pub async fn flush_to_l0(&self) -> Result<()> {
        upkeep::flush_to_l0(self.hold_writer().await?.db()).await
    }

    pub async fn close(&self) -> Result<()> {
        match &self.handle {
            Handle::Writer(turn) => turn.close().await,
            Handle::Reader(r) => r.close().await.map_err(|e| slate("closing", e)),
        }
    }
}

/// A snapshot of the writer `pin` holds, holding the turn as long as it lives.
fn writer_view(pin: turn::TurnPin) -> Result<ReadView> {
    let snapshot = pin
        .db()
        .snapshot()
        .map_err(|e| slate("taking a snapshot", e))?;
    Ok(ReadView::Snapshot {
        snapshot,
        pin: Arc::new(pin),
    })
}

fn no_store_to_read(uri: &StoreUri) -> Error {
    Error::NotFound(format!(
        "no moraine store at {uri}: a READ_ONLY attach opens an existing store and cannot create one. \
         Attach it read-write to create it (DuckDB attaches remote paths such as s3:// READ_ONLY \
         unless the ATTACH says READ_WRITE)"
    ))
}

fn reader_view_on_writer() -> Error {
    Error::Internal("a read-write store was read without a pinned view".into())
}

/// Opens SlateDB's writer, which fences any earlier writer of the store,
/// and starts the compactor and idle upkeep moraine runs beside it.
async fn open_writer(
    root: Path,
    object_store: Arc<dyn ObjectStore>,
    uri: &StoreUri,
    settings: &StoreSettings,
    last_collection: Arc<upkeep::LastCollection>,
    upkeep_holds: upkeep::UpkeepHolds,
) -> Result<turn::OpenedWriter> {
    let writes = writes::Writes::for_store(uri);
    let db = open_db(root.clone(), object_store.clone(), uri, settings, writes).await?;
    let compaction = upkeep::Compaction::start(
        root.clone(),
        object_store.clone(),
        settings.compactor_options(),
        WRITER_BLOCK_SIZE,
        upkeep::urgent_poll(uri),
    );
    let collection = upkeep::spawn_collection(
        root.clone(),
        object_store.clone(),
        settings.collection_options(uri),
        settings.gc_interval,
        last_collection,
    );
    let idle = settings.idle_upkeep_after().map(|after| {
        upkeep::spawn_idle_upkeep(
            db.clone(),
            compaction.clone(),
            root.clone(),
            object_store.clone(),
            after,
            upkeep_holds,
        )
    });
    Ok(turn::OpenedWriter {
        opened_manifest: db.manifest().id(),
        db,
        writes,
        compaction,
        collection,
        idle,
    })
}

async fn open_db(
    root: Path,
    object_store: Arc<dyn ObjectStore>,
    uri: &StoreUri,
    settings: &StoreSettings,
    writes: writes::Writes,
) -> Result<Db> {
    let context = format!("opening {uri}");
    let builder = Db::builder(root, object_store)
        .with_settings(settings.slatedb_settings())
        .with_sst_block_size(WRITER_BLOCK_SIZE);
    // SlateDB panics on some damaged manifests; that is an error here.
    let opened = AssertUnwindSafe(writes.open(builder)).catch_unwind().await;
    let built = opened.map_err(|panic| {
        Error::Corruption(format!(
            "{context}: SlateDB could not decode the store ({}); an object of the store is damaged",
            panic_text(&*panic)
        ))
    })?;
    built.map_err(|e| slate(&context, e))
}

/// Every key and value an iterator yields.
async fn drain(mut iter: DbIterator, ctx: &str) -> Result<KeyValues> {
    let mut out = Vec::new();
    while let Some(kv) = iter.next().await.map_err(|e| slate(ctx, e))? {
        out.push((kv.key, kv.value));
    }
    Ok(out)
}

/// What SlateDB and moraine keep at a store's root.
const STORE_ENTRIES: [&str; 8] = [
    layout::MANIFEST,
    layout::WAL,
    layout::COMPACTED,
    layout::COMPACTIONS,
    layout::CHECKPOINTS,
    layout::GC,
    lease::LEASE_FILE,
    lease::TURN_DIR,
];

/// Refuses a location that holds something other than a moraine store,
/// before anything is written there. Returns whether a store exists.
///
/// A location with a SlateDB manifest is a store (whatever else lies beside
/// it); one without a manifest must hold nothing but what a store's first
/// open leaves behind, or SlateDB would start a new database among foreign
/// objects. SlateDB's own objects without a manifest are a store whose
/// manifests were lost (a copy or sync that left them out): opened, it
/// would look like a new, empty lake, and its first writes would bury what
/// the restored manifests should find.
async fn check_location(
    uri: &StoreUri,
    object_store: &Arc<dyn ObjectStore>,
    root: &Path,
) -> Result<bool> {
    let listing = object_store
        .list_with_delimiter(Some(root))
        .await
        .map_err(|e| Error::store(format!("listing {uri}"), e))?;
    let names: Vec<String> = listing
        .common_prefixes
        .iter()
        .chain(listing.objects.iter().map(|o| &o.location))
        .filter_map(|p| p.filename().map(str::to_string))
        .collect();
    let present = |folder: &str| names.iter().any(|n| n == folder);
    if present(layout::MANIFEST) && holds_objects(uri, object_store, root, layout::MANIFEST).await?
    {
        return Ok(true);
    }
    if let Some(name) = names.iter().find(|n| !STORE_ENTRIES.contains(&n.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "{uri} is not a moraine store: it holds {root}/{name} but no SlateDB manifest. Point the \
             ATTACH at an empty location or an existing moraine store"
        )));
    }
    for folder in [
        layout::WAL,
        layout::COMPACTED,
        layout::COMPACTIONS,
        layout::CHECKPOINTS,
    ] {
        if present(folder) && holds_objects(uri, object_store, root, folder).await? {
            return Err(Error::Corruption(format!(
                "{uri} holds a moraine store's {folder} objects but no manifest: its {root}/{} folder is \
                 missing or empty, as after a copy that left it out. Nothing was written. Restore the \
                 manifests from a whole copy of the lake",
                layout::MANIFEST
            )));
        }
    }
    Ok(false)
}

/// Whether `folder` under `root` holds an object. On a local store a folder
/// can be there and empty; on an object store a prefix is there only while
/// an object is, so the listing already said so.
async fn holds_objects(
    uri: &StoreUri,
    object_store: &Arc<dyn ObjectStore>,
    root: &Path,
    folder: &str,
) -> Result<bool> {
    if !matches!(uri, StoreUri::Local(_)) {
        return Ok(true);
    }
    use futures_util::StreamExt;
    let prefix = root.clone().join(folder);
    match object_store.list(Some(&prefix)).next().await {
        None => Ok(false),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(Error::store(format!("listing {uri}/{prefix}"), e)),
    }
}

pub enum ReadView {
    /// A SlateDB snapshot, and the writer turn held while it is read.
    Snapshot {
        snapshot: Arc<DbSnapshot>,
        pin: Arc<turn::TurnPin>,
    },
    /// Read-only attaches read the reader's latest state.
    Reader,
}

impl ReadView {
    /// Which committed state this view shows; `None` for a reader's view,
    /// which moves on by itself.
    pub fn stamp(&self) -> Option<ViewStamp> {
        match self {
            ReadView::Snapshot { snapshot, pin } => Some(ViewStamp {
                writer: pin.opened(),
                seq: snapshot.seq(),
            }),
            ReadView::Reader => None,
        }
    }
}

/// Two views of one store with equal stamps show the same keys and values:
/// one writer's snapshots at one sequence number. A writer opened again
/// (after another process wrote) stamps its views apart from the last one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewStamp {
    writer: u64,
    seq: u64,
}

/// A SlateDB transaction: buffered writes, reads through itself, and
/// write-write conflict detection at commit.
pub struct StoreTxn {
    tx: DbTransaction,
    pin: Arc<turn::TurnPin>,
    /// The store-wide number of this commit, when the caller keeps one.
    batch: Option<u64>,
    keys_read: Arc<AtomicU64>,
}

impl StoreTxn {
    /// Numbers this commit in the store's sequence of commits (the head's
    /// batch count), which paces memtable flushes across writers.
    pub fn set_batch_number(&mut self, batch: u64) {
        self.batch = Some(batch);
    }

    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.keys_read.fetch_add(1, Ordering::Relaxed);
        self.tx
            .get(key)
            .await
            .map_err(|e| slate(&format!("reading key {key:02x?}"), e))
    }

    pub async fn scan_prefix(&self, prefix: &[u8]) -> Result<KeyValues> {
        let ctx = format!("scanning prefix {prefix:02x?}");
        let iter = self
            .tx
            .scan_prefix_with_options(prefix, .., &bulk_scan())
            .await
            .map_err(|e| slate(&ctx, e))?;
        let out = drain(iter, &ctx).await?;
        self.keys_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tx
            .put(key, value)
            .map_err(|e| slate("staging a put", e))
    }

    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.tx
            .delete(key)
            .map_err(|e| slate("staging a delete", e))
    }
}

impl Drop for Store {
    /// A handle dropped without `close` stops renewing its lease but leaves it
    /// in place, exactly as a crash would: the lease then expires.
    fn drop(&mut self) {
        if let Handle::Writer(turn) = &self.handle {
            turn.abandon();
        }
    }
}
