//! Crash consistency: for every commit path, stop the world after the N-th
//! object write of the commit, for every N the commit makes, then reopen the
//! store without the wrapper. The store must hold exactly the state before
//! the commit or exactly the state after it, and a commit that reported
//! success must have landed.
//!
//! "Stopping the world" freezes every later write forever (its future never
//! completes), as a killed process would: nothing after the cut reaches the
//! store, and the commit either already returned or never does.

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use futures_util::stream::{BoxStream, StreamExt};
use moraine::catalog::{Kind, TableRef};
use moraine::staged::StagedTransaction;
use moraine::store::keys;
use moraine::store::{Store, StoreSettings, StoreUri};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts writes and, once the budget is spent, holds every later write
/// forever; or, while `failing`, refuses every write of new bytes as a full
/// disk does.
#[derive(Debug)]
struct Gate {
    writes: AtomicU64,
    limit: AtomicU64,
    /// Set once a write has been held back: from then on the world is stopped.
    frozen: AtomicBool,
    failing: AtomicBool,
}

impl Gate {
    /// A write of new bytes; a full disk still lets deletes through.
    async fn pass_new_bytes(&self) -> object_store::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "freezer",
                source: Box::new(std::io::Error::from(std::io::ErrorKind::StorageFull)),
            });
        }
        self.pass().await
    }

    async fn pass(&self) -> object_store::Result<()> {
        let index = self.writes.fetch_add(1, Ordering::SeqCst);
        if index >= self.limit.load(Ordering::SeqCst) {
            self.frozen.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// An object store that passes every call through until its write budget is
/// spent, then never completes another write.
#[derive(Debug)]
struct Freezer {
    inner: Arc<dyn ObjectStore>,
    gate: Arc<Gate>,
}

impl fmt::Display for Freezer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Freezer({})", self.inner)
    }
}

impl Freezer {
    fn new(inner: Arc<dyn ObjectStore>) -> Arc<Freezer> {
        Arc::new(Freezer {
            inner,
            gate: Arc::new(Gate {
                writes: AtomicU64::new(0),
                limit: AtomicU64::new(u64::MAX),
                frozen: AtomicBool::new(false),
                failing: AtomicBool::new(false),
            }),
        })
    }

    /// Lets `budget` more writes through (all of them when `None`).
    fn arm(&self, budget: Option<u64>) -> u64 {
        let now = self.writes();
        let limit = budget.map_or(u64::MAX, |b| now + b);
        self.gate.limit.store(limit, Ordering::SeqCst);
        now
    }

    fn writes(&self) -> u64 {
        self.gate.writes.load(Ordering::SeqCst)
    }

    fn frozen(&self) -> bool {
        self.gate.frozen.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ObjectStore for Freezer {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.gate.pass_new_bytes().await?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.gate.pass_new_bytes().await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // Each delete is one write: gate them one by one, in order.
        let gate = self.gate.clone();
        let inner = self.inner.clone();
        locations
            .then(move |location| {
                let gate = gate.clone();
                let inner = inner.clone();
                async move {
                    gate.pass().await?;
                    let location = location?;
                    let mut done =
                        inner.delete_stream(futures_util::stream::iter([Ok(location)]).boxed());
                    done.next().await.unwrap_or_else(|| {
                        Err(object_store::Error::Generic {
                            store: "freezer",
                            source: "delete returned nothing".into(),
                        })
                    })
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.gate.pass_new_bytes().await?;
        self.inner.copy_opts(from, to, options).await
    }
}

type Step = for<'a> fn(&'a Arc<Store>) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One commit path: the state it starts from and the commit itself.
struct CommitPath {
    name: &'static str,
    /// `None`: genesis, where opening the store is part of the cut window.
    setup: Option<Step>,
    commit: Step,
    /// Whether the commit changes what the store holds (reclaim does not).
    changes_contents: bool,
    /// At most this many cut points, spread evenly over the writes: `None`
    /// tries every one. Reclaim makes 15 to 60 writes, each cut costing
    /// seconds of compaction and garbage collection.
    max_cuts: Option<u64>,
    backends: &'static [Backend],
}

const BOTH: &[Backend] = &[Backend::Memory, Backend::Local];

impl CommitPath {
    /// What an ordinary commit path shares; each path names itself and
    /// supplies its own setup and commit.
    const ONE_COMMIT: CommitPath = CommitPath {
        name: "",
        setup: None,
        commit: |_| boxed(async {}),
        changes_contents: true,
        max_cuts: None,
        backends: BOTH,
    };
}

/// Where a sweep runs: the in-process store and the local filesystem (the
/// default back-end, whose puts are write-then-rename).
#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    Local,
}

/// A fresh, empty store location; the directory lives as long as the guard.
fn fresh_location(backend: Backend) -> (StoreUri, Option<tempfile::TempDir>) {
    match backend {
        Backend::Memory => {
            let name = format!("memory://crash-sweep-{}", uuid::Uuid::new_v4());
            (StoreUri::parse(&name).unwrap(), None)
        }
        Backend::Local => {
            let dir = tempfile::tempdir().unwrap();
            let uri = StoreUri::parse(dir.path().to_str().unwrap()).unwrap();
            (uri, Some(dir))
        }
    }
}
/// How long a run may go on after a write froze before it counts as stuck:
/// in-memory work finishes in milliseconds, and nothing that needs a write
/// can finish at all.
const GRACE: Duration = Duration::from_millis(300);
/// A bound on any one run, so a bug cannot hang the suite.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// A bound on reopening, reading and closing the store after a cut.
const REOPEN_LIMIT: Duration = Duration::from_secs(60);

fn settings(force_takeover: bool) -> StoreSettings {
    StoreSettings {
        force_takeover,
        // A quick compactor, so reclaim's compactions (and any background
        // one) happen inside the sweep's window.
        compactor_poll: Duration::from_millis(100),
        ..StoreSettings::default()
    }
}

/// Every key and value in the store, as a reopened writer sees it, but
/// reclaim's own progress marker.
async fn contents(store: &Store) -> Vec<(Bytes, Bytes)> {
    let view = store.snapshot().await.unwrap();
    let mut all = store.scan_prefix(&view, b"").await.unwrap();
    all.retain(|(key, _)| key.as_ref() != keys::SYS_RECLAIM);
    all
}

struct Attempt {
    acknowledged: bool,
    writes: u64,
    before: Vec<(Bytes, Bytes)>,
    after_reopen: Vec<(Bytes, Bytes)>,
}

/// Runs `path` on a fresh store, cutting the world off after `budget` writes
/// of the commit, and reopens the store without the cut.
async fn attempt(path: &CommitPath, backend: Backend, budget: Option<u64>) -> Attempt {
    let (uri, _dir) = fresh_location(backend);
    let inner = uri.object_store(&Default::default()).unwrap();
    let freezer = Freezer::new(inner.clone());
    let mut before = Vec::new();
    let mut store = None;
    if let Some(setup) = path.setup {
        let opened = Arc::new(
            Store::open_on(&uri, freezer.clone(), &settings(false))
                .await
                .unwrap(),
        );
        setup(&opened).await;
        before = contents(&opened).await;
        store = Some(opened);
    }
    let start = freezer.arm(budget);
    let commit = path.commit;
    let acknowledged = Arc::new(AtomicBool::new(false));
    let run = {
        let acknowledged = acknowledged.clone();
        let freezer = freezer.clone();
        let uri = uri.clone();
        async move {
            let store = match store {
                Some(store) => store,
                None => match Store::open_on(&uri, freezer, &settings(false)).await {
                    Ok(store) => Arc::new(store),
                    Err(_) => return None,
                },
            };
            commit(&store).await;
            acknowledged.store(true, Ordering::SeqCst);
            // What follows an acknowledged commit: its batch moves from the
            // WAL into an L0 SST and the manifest.
            let _ = store.flush_to_l0().await;
            Some(store)
        }
    };
    let run = tokio::spawn(run);
    let started = std::time::Instant::now();
    let mut frozen_since = None;
    while !run.is_finished() && started.elapsed() < RUN_LIMIT {
        if freezer.frozen() {
            let since = *frozen_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() > GRACE {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        run.is_finished() || freezer.frozen(),
        "cut after {budget:?} writes: the run neither finished nor froze within {RUN_LIMIT:?}"
    );
    // A stuck run stays parked on its frozen write; its store is fenced below.
    let acknowledged = acknowledged.load(Ordering::SeqCst);
    let writes = freezer.writes() - start;
    if run.is_finished() {
        if let Ok(Some(store)) = run.await {
            if budget.is_none() {
                // The uncut run's writer is done and nothing is frozen: it
                // stops as a finished process would, so that it does not
                // compete with the reopened writer. The product never opens
                // one location twice in a process (`ffi`'s open stores).
                store.close().await.unwrap();
            } else {
                // A close would reach the cut and never finish.
                std::mem::forget(store);
            }
        }
    }
    // Keep the freezer (and the frozen store's background tasks) alive.
    std::mem::forget(freezer.clone());
    // Which step of the reopen is under way, for the message if it stalls.
    let step = std::sync::Mutex::new("opening");
    let at = |name| *step.lock().unwrap() = name;
    let reopen = async {
        let reopened = Store::open_on(&uri, inner, &settings(true)).await.unwrap();
        at("reading the contents");
        let after_reopen = contents(&reopened).await;
        // The reopened store is usable: an empty one bootstraps, any other
        // yields its head to a new transaction.
        let reopened = Arc::new(reopened);
        at("starting a transaction");
        if after_reopen.is_empty() {
            bootstrap(&reopened).await;
        } else {
            let mut tx = StagedTransaction::new(reopened.clone());
            tx.premise().await.unwrap();
        }
        at("closing");
        reopened.close().await.unwrap();
        after_reopen
    };
    let after_reopen = tokio::time::timeout(REOPEN_LIMIT, reopen)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "cut after {budget:?} writes: reopening did not finish within {REOPEN_LIMIT:?} \
                 (stalled {})",
                step.lock().unwrap()
            )
        });
    Attempt {
        acknowledged,
        writes,
        before,
        after_reopen,
    }
}

/// A runtime of the test's own, let go without waiting for a parked thread.
fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Sweeps `path` on every back-end it names, on a runtime of its own. A
/// frozen commit stays parked on its write for good, as a crashed process's
/// would: with the writer's tasks on the committing thread (`store::writes`)
/// that parks a thread, so the runtime is let go without waiting for it.
fn sweep_on_a_runtime(path: CommitPath) {
    let runtime = test_runtime();
    runtime.block_on(async {
        for backend in path.backends {
            sweep_on(&path, *backend).await;
        }
    });
    runtime.shutdown_background();
}

/// Sweeps every cut point of `path` and reports how many it tried.
async fn sweep_on(path: &CommitPath, backend: Backend) {
    let whole = attempt(path, backend, None).await;
    assert!(
        whole.acknowledged,
        "{}: the uncut commit did not finish",
        path.name
    );
    assert_eq!(
        whole.before != whole.after_reopen,
        path.changes_contents,
        "{}: the commit's effect on the contents is not what the path declares",
        path.name
    );
    let after = whole.after_reopen;
    let (mut interrupted, mut landed, mut lost) = (0, 0, 0);
    let mut tried = 0;
    let stride = path
        .max_cuts
        .map_or(1, |cuts| whole.writes.div_ceil(cuts.max(1)).max(1));
    for cut in (0..whole.writes).step_by(stride as usize) {
        tried += 1;
        let run = attempt(path, backend, Some(cut)).await;
        assert_eq!(
            run.before, whole.before,
            "{}: setup is not deterministic",
            path.name
        );
        let is_after = run.after_reopen == after;
        let is_before = run.after_reopen == run.before;
        assert!(
            is_after || is_before,
            "{}: cut after {cut} writes left a state that is neither before nor after the commit",
            path.name
        );
        if run.acknowledged {
            assert!(
                is_after,
                "{}: cut after {cut} writes: acknowledged but not landed",
                path.name
            );
        } else {
            interrupted += 1;
        }
        if is_after {
            landed += 1;
        } else {
            lost += 1;
        }
    }
    println!(
        "crash sweep {} ({backend:?}): {tried} cut points tried over {} object writes; \
         {interrupted} interrupted commits; reopened wholly after {landed}, wholly before {lost}",
        path.name, whole.writes
    );
    assert!(
        interrupted >= 1,
        "{}: no cut interrupted the commit",
        path.name
    );
}

fn boxed<'a>(
    f: impl Future<Output = ()> + Send + 'a,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    Box::pin(f)
}

#[test]
fn genesis() {
    sweep_on_a_runtime(CommitPath {
        name: "genesis",
        setup: None,
        commit: |store| boxed(bootstrap(store)),
        ..CommitPath::ONE_COMMIT
    });
}

/// An initialised catalog with table 1, `t`, at snapshot 1.
async fn table_t(store: &Arc<Store>) {
    bootstrap(store).await;
    create_table(store, 1, 1, "t").await;
}

/// Snapshot 2: a data file for table 1.
async fn insert_a_data_file(store: &Arc<Store>) {
    a_data_file_inserted(store).await.unwrap();
}

async fn a_data_file_inserted(store: &Arc<Store>) -> moraine::Result<()> {
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(2, 1, 3, 11)).await;
    stage(&mut tx, Kind::DataFile, data_file_row(10, 1, 2)).await;
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(2, "inserted_into_table:1"),
    )
    .await;
    tx.commit().await.map(drop)
}

#[test]
fn ordinary_commit() {
    sweep_on_a_runtime(CommitPath {
        name: "ordinary commit",
        setup: Some(|store| boxed(table_t(store))),
        commit: |store| boxed(insert_a_data_file(store)),
        ..CommitPath::ONE_COMMIT
    });
}

/// A second writer of the same store asks for the writer turn and commits:
/// the cut falls anywhere in the holder's hand-over (its close and lease
/// release), the asker's ask, lease and SlateDB open (which fences the
/// holder), or the asker's commit.
#[test]
fn commit_after_a_turn_handover() {
    sweep_on_a_runtime(CommitPath {
        name: "commit after a turn handover",
        setup: Some(|store| boxed(table_t(store))),
        commit: |holder| {
            boxed(async move {
                let asker = Store::open_on(
                    holder.uri(),
                    holder.object_store().clone(),
                    &settings(false),
                )
                .await
                .unwrap();
                let asker = Arc::new(asker);
                insert_a_data_file(&asker).await;
                std::mem::forget(asker);
            })
        },
        ..CommitPath::ONE_COMMIT
    });
}

/// Writes that fail for a while (a full disk) close SlateDB's writer. Once
/// they work again, the next transaction of the same attach commits, on a
/// writer opened afresh, with every acknowledged commit in it; and the
/// failed writer gave its lease back, so another process need not wait for
/// it to run out.
#[test]
fn a_writer_whose_writes_failed_serves_again_once_they_work() {
    let runtime = test_runtime();
    runtime.block_on(async {
        for backend in [Backend::Memory, Backend::Local] {
            let (uri, _dir) = fresh_location(backend);
            let freezer = Freezer::new(uri.object_store(&Default::default()).unwrap());
            let store = Arc::new(
                Store::open_on(&uri, freezer.clone(), &settings(false))
                    .await
                    .unwrap(),
            );
            table_t(&store).await;
            let before = contents(&store).await;
            freezer.gate.failing.store(true, Ordering::SeqCst);
            let failed = a_data_file_inserted(&store).await;
            assert!(failed.is_err(), "{backend:?}: a write failed: {failed:?}");
            let lease = moraine::store::lease::lease_path(store.root());
            assert!(
                object_store::ObjectStoreExt::head(&freezer.inner, &lease)
                    .await
                    .is_err(),
                "{backend:?}: the failed writer still holds the lease"
            );
            freezer.gate.failing.store(false, Ordering::SeqCst);
            assert_eq!(contents(&store).await, before, "{backend:?}");
            insert_a_data_file(&store).await;
            assert_ne!(contents(&store).await, before, "{backend:?}");
        }
    });
    runtime.shutdown_background();
}

/// A table with 20 columns and 20 data files.
async fn wide_table(store: &Arc<Store>) {
    bootstrap(store).await;
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(1, 1, 30, 120)).await;
    stage(&mut tx, Kind::Table, table_row(1, 1, "wide")).await;
    for c in 0..20 {
        stage(
            &mut tx,
            Kind::Column,
            column_row(2 + c, 1, 1, &format!("c{c}")),
        )
        .await;
    }
    for f in 0..20 {
        stage(&mut tx, Kind::DataFile, data_file_row(100 + f, 1, 1)).await;
    }
    let changes = changes_row(1, "created_table:\"main\".\"wide\"");
    stage(&mut tx, Kind::SnapshotChanges, changes).await;
    tx.commit().await.unwrap();
}

/// DROP TABLE wide: ends the table, its 20 columns and its 20 files.
async fn drop_wide_table(store: &Arc<Store>) {
    let mut tx = StagedTransaction::new(store.clone());
    stage(&mut tx, Kind::Snapshot, snapshot_row(2, 2, 30, 120)).await;
    for (kind, end) in [(Kind::Table, 3), (Kind::Column, 2), (Kind::DataFile, 3)] {
        let (base, rows) = tx.scan(fixed(kind)).await.unwrap();
        let ids: Vec<i64> = (0..rows.len() as i64).map(|i| base + i).collect();
        let values = vec![vec![int(2)]; ids.len()];
        tx.stage_update(fixed(kind), &ids, &[end], values)
            .await
            .unwrap();
    }
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(2, "dropped_table:1"),
    )
    .await;
    tx.commit().await.unwrap();
}

#[test]
fn drop_ending_many_records() {
    sweep_on_a_runtime(CommitPath {
        name: "drop",
        setup: Some(|store| boxed(wide_table(store))),
        commit: |store| boxed(drop_wide_table(store)),
        ..CommitPath::ONE_COMMIT
    });
}

/// `moraine_reclaim` after that DROP: compaction and garbage collection
/// rewrite and delete objects but never change what the store holds.
#[test]
fn reclaim_after_drop() {
    sweep_on_a_runtime(CommitPath {
        name: "reclaim",
        setup: Some(|store| {
            boxed(async move {
                wide_table(store).await;
                drop_wide_table(store).await;
            })
        }),
        commit: |store| {
            boxed(async move {
                let report =
                    moraine::reclaim::reclaim(store, Duration::from_secs(10), &Default::default())
                        .await;
                if report.is_err() {
                    // Not an acknowledgement: park like a run stuck on a write.
                    std::future::pending::<()>().await;
                }
            })
        },
        changes_contents: false,
        max_cuts: Some(5),
        backends: &[Backend::Memory],
    });
}

/// `ducklake_cleanup_old_files`: forgets scheduled files without a snapshot.
#[test]
fn head_preserving_maintenance() {
    sweep_on_a_runtime(CommitPath {
        name: "maintenance",
        setup: Some(|store| {
            boxed(async move {
                history(store).await;
                expire(store, &[2]).await;
            })
        }),
        commit: |store| {
            boxed(async move {
                let mut tx = StagedTransaction::new(store.clone());
                let forgotten =
                    delete_where(&mut tx, Kind::FilesScheduledForDeletion, |_| true).await;
                assert!(forgotten > 0);
                tx.commit().await.unwrap();
            })
        },
        ..CommitPath::ONE_COMMIT
    });
}

/// `ducklake_flush_inlined_data`: a data file replaces the inlined rows.
#[test]
fn inline_flush() {
    sweep_on_a_runtime(CommitPath {
        name: "inline flush",
        setup: Some(|store| boxed(inline_history(store))),
        commit: |store| {
            boxed(async move {
                let mut tx = StagedTransaction::new(store.clone());
                stage(&mut tx, Kind::Snapshot, snapshot_row(3, 1, 2, 1)).await;
                stage(&mut tx, Kind::DataFile, data_file_row(0, 1, 3)).await;
                let table = TableRef::parse(INLINED).unwrap();
                let (base, rows) = tx.scan(table).await.unwrap();
                let ids: Vec<i64> = (0..rows.len() as i64).map(|i| base + i).collect();
                tx.stage_delete(table, &ids).await.unwrap();
                stage(
                    &mut tx,
                    Kind::SnapshotChanges,
                    changes_row(3, "flushed_inlined:1"),
                )
                .await;
                tx.commit().await.unwrap();
            })
        },
        ..CommitPath::ONE_COMMIT
    });
}

/// `ducklake_expire_snapshots`: the cascade that prunes snapshots and files.
#[test]
fn expiry_cascade() {
    sweep_on_a_runtime(CommitPath {
        name: "expiry cascade",
        setup: Some(|store| boxed(history(store))),
        commit: |store| {
            boxed(async move {
                expire(store, &[1, 2]).await;
            })
        },
        ..CommitPath::ONE_COMMIT
    });
}
