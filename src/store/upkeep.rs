//! Compaction that moraine drives, and the idle upkeep.
//!
//! SlateDB's compactor only acts when L0 grows, and an idle writer's memtable
//! never flushes, so deleted keys stayed in the WAL, the memtable and L0 for
//! as long as the writer sat idle, and garbage collection could drop nothing
//! they referenced ([design 0010](../../docs/design/0011-idle-upkeep-and-urgent-compaction.md)).
//! Here moraine runs the compactor itself instead of SlateDB's embedded one:
//!
//! - a *background* compactor with the attach's poll interval, as before;
//! - an *urgent* one it swaps in while it compacts on purpose (`moraine_reclaim`
//!   and the idle upkeep), which polls every few milliseconds, so a full
//!   compaction costs its own work and not a poll interval;
//! - the idle upkeep: once the writer has gone one idle period without a
//!   commit, and something changed since the last upkeep, it flushes the
//!   memtable and merges every L0 and sorted run into the last run, twice.
//!   SlateDB's garbage collector then deletes what no manifest references on
//!   its own schedule. Nothing of this runs on the commit path.

use super::keys;
use crate::error::{slate, Error, Result};
use object_store::path::Path;
use object_store::ObjectStore;
use slatedb::admin::Admin;
use slatedb::compactor::{
    Compaction as CompactionJob, CompactionScheduler, CompactionSchedulerSupplier, CompactionSpec,
    CompactionStatus, Compactor, CompactorStateView, SizeTieredCompactionSchedulerSupplier,
    SourceId,
};
use slatedb::config::{
    CompactionWorkerOptions, CompactorOptions, FlushOptions, FlushType, GarbageCollectorOptions,
};
use slatedb::{CompactorBuilder, Db, SstBlockSize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard};
use tokio::task::JoinHandle;
use ulid::Ulid;

/// How often the urgent compactor looks for work, and how often a caller
/// waiting for a compaction looks at the manifest. On S3 each look is a
/// request.
const URGENT_POLL: Duration = Duration::from_millis(20);

/// The same on a local or in-memory store, where a look reads a small file
/// or nothing: a detach's merge waits out three or four of these whatever
/// it merges (about 60 ms at 20 ms).
const URGENT_POLL_NEARBY: Duration = Duration::from_millis(5);

/// How often the urgent compactor of the store at `uri` polls.
pub fn urgent_poll(uri: &super::StoreUri) -> Duration {
    match uri {
        super::StoreUri::S3 { .. } => URGENT_POLL,
        _ => URGENT_POLL_NEARBY,
    }
}

/// The longest the idle upkeep waits for one full compaction.
const UPKEEP_COMPACTION_DEADLINE: Duration = Duration::from_secs(60);

/// The compactor moraine runs beside a writer.
pub struct Compaction {
    root: Path,
    object_store: Arc<dyn ObjectStore>,
    background: CompactorOptions,
    block_size: SstBlockSize,
    /// The urgent compactor's poll ([`urgent_poll`]).
    poll: Duration,
    /// The compactor now running. The lock also keeps the idle upkeep and
    /// `moraine_reclaim` from compacting at the same time.
    running: Mutex<Option<Running>>,
    /// Set, under `running`'s lock, by [`Compaction::shutdown`]: nothing
    /// launches a compactor after it.
    shut_down: AtomicBool,
}

struct Running {
    compactor: Compactor,
    task: JoinHandle<()>,
}

/// The urgent compactor, swapped in until [`Urgent::end`] brings the
/// background one back.
pub struct Urgent<'a> {
    compaction: &'a Compaction,
    running: MutexGuard<'a, Option<Running>>,
}

impl Urgent<'_> {
    /// Stops the urgent compactor and restarts the background one.
    pub async fn end(mut self) -> Result<()> {
        stop(self.running.take()).await;
        *self.running = Some(self.compaction.launch(None));
        Ok(())
    }
}

/// The background options with every poll shortened to a few milliseconds.
/// A stopped compactor's job is taken over after the heartbeat timeout, so
/// that is short too.
fn urgent_options(
    background: &CompactorOptions,
    poll: Duration,
    checkpoint_lifetime: Duration,
) -> CompactorOptions {
    let worker = background.worker.clone().unwrap_or_default();
    CompactorOptions {
        poll_interval: poll,
        checkpoint_lifetime,
        commit_compacted_interval: poll,
        worker_heartbeat_timeout: Duration::from_secs(2),
        worker: Some(CompactionWorkerOptions {
            compactions_poll_interval: poll,
            heartbeat_interval: Duration::from_millis(200),
            ..worker
        }),
        ..background.clone()
    }
}

/// The urgent compactor's scheduler: it runs only the jobs moraine submits,
/// one at a time. SlateDB checks a submitted job against the manifest but
/// not against the jobs in flight, so a full merge into run 0 submitted
/// while the compactor's own job into run 0 ran would be started beside it
/// (its executor asserts on that and the compactor dies). Here a submitted
/// job fails while any other is in flight, and [`compact_fully`] plans
/// again once it is done.
struct SubmittedOnly;

impl CompactionSchedulerSupplier for SubmittedOnly {
    fn compaction_scheduler(
        &self,
        options: &CompactorOptions,
    ) -> Box<dyn CompactionScheduler + Send + Sync> {
        Box::new(SubmittedOnlyScheduler {
            // Its rules for which sources may merge together still hold.
            rules: SizeTieredCompactionSchedulerSupplier::new().compaction_scheduler(options),
        })
    }
}

struct SubmittedOnlyScheduler {
    rules: Box<dyn CompactionScheduler + Send + Sync>,
}

impl CompactionScheduler for SubmittedOnlyScheduler {
    fn propose(&self, _state: &CompactorStateView) -> Vec<CompactionSpec> {
        Vec::new()
    }

    fn validate(
        &self,
        state: &CompactorStateView,
        spec: &CompactionSpec,
    ) -> std::result::Result<(), slatedb::Error> {
        // SlateDB validates a job twice: when it is submitted, and once it
        // is compacted, before it commits the output to the manifest; either
        // time the job itself is listed.
        let in_flight = state
            .compactions()
            .into_iter()
            .flat_map(|c| c.recent_compactions())
            .any(|job| {
                job.active() && job.status() != CompactionStatus::Submitted && job.spec() != spec
            });
        if in_flight {
            return Err(slatedb::Error::invalid(
                "another compaction is in flight".into(),
            ));
        }
        self.rules.validate(state, spec)
    }
}

async fn stop(running: Option<Running>) {
    let Some(mut running) = running else {
        return;
    };
    // A stop that arrives while the compactor is still starting finds no task
    // to stop, and the compactor then runs on: ask again until it has ended.
    // A compactor that failed has already ended.
    for _ in 0..STOP_ATTEMPTS {
        // A stop request can itself wait on the compactor's work; it is
        // asked again rather than waited for.
        let _ = tokio::time::timeout(URGENT_POLL * 5, running.compactor.stop()).await;
        if tokio::time::timeout(URGENT_POLL * 5, &mut running.task)
            .await
            .is_ok()
        {
            return;
        }
    }
    running.task.abort();
}

/// How often [`stop`] asks a compactor to stop before it gives up on it.
const STOP_ATTEMPTS: u32 = 50;

/// How long after a writer opens its background compactor starts.
///
/// A compactor's start loads the manifest and writes a compaction record
/// (its fence), on threads beside the attach's: inside a cold ATTACH that
/// was a third of its work, and a session that only reads, or ends within
/// a second, needs no compactor at all. Nothing waits on it meanwhile:
/// SlateDB flushes the memtable into L0 without one, and only an L0 over
/// its limit, which takes hundreds of commits to reach, holds flushes
/// back until it starts.
const COMPACTOR_START_DELAY: Duration = Duration::from_secs(1);

impl Compaction {
    /// The compaction of the store at `root`; its background compactor
    /// starts after [`COMPACTOR_START_DELAY`] unless the compaction is shut
    /// down first, or something compacts on purpose sooner.
    pub fn start(
        root: Path,
        object_store: Arc<dyn ObjectStore>,
        background: CompactorOptions,
        block_size: SstBlockSize,
        poll: Duration,
    ) -> Arc<Compaction> {
        let compaction = Arc::new(Compaction {
            root,
            object_store,
            background,
            block_size,
            poll,
            running: Mutex::new(None),
            shut_down: AtomicBool::new(false),
        });
        let later = Arc::downgrade(&compaction);
        tokio::spawn(async move {
            tokio::time::sleep(COMPACTOR_START_DELAY).await;
            if let Some(compaction) = later.upgrade() {
                compaction.revive().await;
            }
        });
        compaction
    }

    /// Starts a compactor: the background one, or an urgent one whose
    /// merges keep their inputs readable for `urgent_checkpoint`.
    fn launch(&self, urgent_checkpoint: Option<Duration>) -> Running {
        let builder = CompactorBuilder::new(self.root.clone(), self.object_store.clone())
            // Rewritten SSTs keep the writer's block size.
            .with_sst_block_size(self.block_size);
        let compactor = match urgent_checkpoint {
            Some(checkpoint) => builder
                .with_options(urgent_options(&self.background, self.poll, checkpoint))
                .with_scheduler_supplier(Arc::new(SubmittedOnly)),
            None => builder.with_options(self.background.clone()),
        }
        .build();
        let runner = compactor.clone();
        // A compactor that fails stops compacting; the idle upkeep notices and
        // starts a new one.
        let task = tokio::spawn(async move {
            let _ = runner.run().await;
        });
        Running { compactor, task }
    }

    /// Swaps in the urgent compactor. Waits while another caller holds it.
    pub async fn urgent(&self) -> Urgent<'_> {
        self.urgent_keeping(self.background.checkpoint_lifetime)
            .await
    }

    /// The urgent compactor of a closing writer. A merge's checkpoint keeps
    /// what it replaced readable for this process's read transactions, and
    /// at the close none is left (a reader of another process keeps its own
    /// checkpoint). Kept for the usual lifetime, each close's checkpoint
    /// held a manifest and the merge's inputs, and every collection read
    /// them all: a detach slowed from 3.7 to 5.8 ms over 400 short sessions
    /// in a minute, and to 12.5 ms over 1,000.
    pub async fn urgent_at_close(&self) -> Urgent<'_> {
        self.urgent_keeping(CLOSE_MERGE_CHECKPOINT).await
    }

    async fn urgent_keeping(&self, checkpoint: Duration) -> Urgent<'_> {
        let mut running = self.running.lock().await;
        stop(running.take()).await;
        *running = Some(self.launch(Some(checkpoint)));
        Urgent {
            compaction: self,
            running,
        }
    }

    /// Starts the background compactor if none runs: the first time, or
    /// after one stopped on an error.
    async fn revive(&self) {
        let mut running = self.running.lock().await;
        if self.shut_down.load(Ordering::SeqCst) {
            return;
        }
        if running.as_ref().is_none_or(|r| r.task.is_finished()) {
            stop(running.take()).await;
            *running = Some(self.launch(None));
        }
    }

    /// Stops whichever compactor runs, for good.
    pub async fn shutdown(&self) {
        let mut running = self.running.lock().await;
        self.shut_down.store(true, Ordering::SeqCst);
        stop(running.take()).await;
    }
}

/// Makes the writer adopt the latest manifest now rather than at its next poll.
pub async fn refresh(db: &Db) -> Result<()> {
    db.refresh_manifest()
        .await
        .map_err(|e| slate("refreshing the manifest", e))
}

/// Whether the tree is more than one sorted run: something a full
/// compaction would merge.
pub fn untidy(db: &Db) -> bool {
    !is_one_run(&db.manifest())
}

/// Whether the tree is a single sorted run (or empty) with no L0.
fn is_one_run(manifest: &slatedb::VersionedManifest) -> bool {
    manifest.l0().is_empty() && manifest.compacted().len() <= 1
}

/// Writes everything pending into a new L0 SST and the manifest, so it no
/// longer depends on the WAL.
pub async fn flush_to_l0(db: &Db) -> Result<()> {
    db.flush().await.map_err(|e| slate("flushing the WAL", e))?;
    db.flush_with_options(FlushOptions {
        flush_type: FlushType::MemTable,
    })
    .await
    .map_err(|e| slate("flushing the memtable", e))
}

/// The WAL objects after the manifest's replay point: what the next open of
/// the store reads before it serves anything.
pub fn wal_objects_to_replay(db: &Db) -> u64 {
    let manifest = db.manifest();
    manifest
        .next_wal_sst_id()
        .saturating_sub(manifest.replay_after_wal_id() + 1)
}

/// Writes the upkeep marker (`sys/reclaim`) and flushes it into a fresh L0.
/// A fresh L0 does two things: merging it records the newest oldest-live-read
/// in the manifest, so a compaction can drop versions kept for reads that
/// have ended; and garbage collection keeps every compaction output newer than
/// the last compacted L0, so the outputs of earlier merges go only after it.
/// Returns the marker's sequence number: the flushed L0 holds every write up
/// to it, and a later one (a purge that landed during the flush) may not be.
pub async fn nudge(db: &Db) -> Result<u64> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let marker = db
        .put(keys::SYS_RECLAIM, stamp.to_string().as_bytes())
        .await
        .map_err(|e| slate("writing the upkeep marker", e))?;
    flush_to_l0(db).await?;
    Ok(marker.seqnum())
}

/// Submits every L0 and sorted run into the oldest run and waits (until
/// `deadline` from `started`) until the writer sees one run. Returns whether
/// there was anything to merge.
///
/// The running compactor may have scheduled some of the same sources a moment
/// earlier; SlateDB then fails this job when it validates it. So a job that
/// failed, or whose sources another job took, is planned again from the
/// manifest as it now is, until the deadline.
pub async fn compact_fully(
    db: &Db,
    admin: &Admin,
    started: Instant,
    deadline: Duration,
) -> Result<bool> {
    compact(db, admin, started, deadline, Merge::whole, URGENT_POLL).await
}

/// Submits the merge `plan` makes of the manifest and waits for it, as
/// [`compact_fully`] does; `plan` returning `None` means nothing is left to
/// merge.
async fn compact(
    db: &Db,
    admin: &Admin,
    started: Instant,
    deadline: Duration,
    plan: fn(&slatedb::VersionedManifest) -> Option<Merge>,
    poll: Duration,
) -> Result<bool> {
    let mut merged = false;
    while started.elapsed() < deadline {
        refresh(db).await?;
        let Some(merge) = plan(&db.manifest()) else {
            return Ok(merged);
        };
        let job = submit_compaction(admin, merge.spec()).await?;
        merged = true;
        if merge
            .wait(db, admin, job.id(), started, deadline, poll)
            .await?
            == Waited::Merged
        {
            return Ok(true);
        }
    }
    Err(Error::Store(format!(
        "a compaction of the store did not finish within {deadline:?}"
    )))
}

/// One job that merges the newer part of a tree, or all of it, into one
/// sorted run.
struct Merge {
    sources: Vec<SourceId>,
    destination: u32,
    /// The L0s it merges: a job leaves the manifest all at once, so once one
    /// of them left while another stays, a different job took it.
    l0: Vec<Ulid>,
    /// The sorted runs the tree has once the job is done: one, or two when
    /// the oldest run is left out of it.
    runs_after: usize,
}

#[derive(Debug, PartialEq)]
enum Waited {
    /// The merged L0s left and the runs the job leaves are left (L0s
    /// flushed meanwhile by new commits may stay).
    Merged,
    /// The job failed or lost its sources: plan again.
    Superseded,
}

/// How many manifest polls pass between two reads of the job's status: a
/// job's failure shows nowhere else, but each read costs a list and a get.
const POLLS_PER_STATUS_READ: u32 = 5;

/// How many times the rest of the tree the oldest sorted run must hold for
/// a closing writer to leave it out of its merge. The oldest run is the
/// catalog: merging into it rewrites the whole catalog, so a detach that did
/// it every time paid for the lake's history (90 ms after 5,000 commits, on
/// every other detach). Left out until the newer runs reach a quarter of
/// it, each byte a session writes is rewritten a bounded number of times,
/// and the tree a cold attach opens stays at two runs.
const OLDEST_RUN_LEFT_BELOW: u64 = 4;

impl Merge {
    /// The merge of every L0 and sorted run into the oldest run, or `None`
    /// when the tree is already one run.
    fn whole(manifest: &slatedb::VersionedManifest) -> Option<Merge> {
        if is_one_run(manifest) {
            return None;
        }
        let destination = manifest
            .compacted()
            .iter()
            .map(|run| run.id)
            .min()
            .unwrap_or(0);
        Some(Merge::of(
            manifest,
            manifest.compacted().len(),
            destination,
            1,
        ))
    }

    /// What a closing writer merges: every L0 and sorted run except the
    /// oldest run while that holds [`OLDEST_RUN_LEFT_BELOW`] times the rest,
    /// otherwise the whole tree. `None` when that leaves nothing to merge.
    fn at_close(manifest: &slatedb::VersionedManifest) -> Option<Merge> {
        let runs = manifest.compacted();
        // SlateDB lists runs newest first and wants a job's sources
        // consecutive, newest first, merged into the lowest id among them.
        let Some((oldest, newer)) = runs.split_last() else {
            return Merge::whole(manifest);
        };
        let newer_bytes: u64 = manifest
            .l0()
            .iter()
            .map(|view| view.estimate_size())
            .chain(newer.iter().map(|run| run.estimate_size()))
            .sum();
        if oldest.estimate_size() < OLDEST_RUN_LEFT_BELOW.saturating_mul(newer_bytes) {
            return Merge::whole(manifest);
        }
        if manifest.l0().len() + newer.len() < 2 {
            return None;
        }
        // L0s alone go into a run above every run there is.
        let destination = match newer.iter().map(|run| run.id).min() {
            Some(lowest) => lowest,
            None => runs.iter().map(|run| run.id).max().map_or(0, |id| id + 1),
        };
        Some(Merge::of(manifest, newer.len(), destination, 2))
    }

    /// Every L0 and the newest `runs` sorted runs, into `destination`.
    fn of(
        manifest: &slatedb::VersionedManifest,
        runs: usize,
        destination: u32,
        runs_after: usize,
    ) -> Merge {
        let l0: Vec<Ulid> = manifest.l0().iter().map(|view| view.id).collect();
        let mut sources: Vec<SourceId> = l0.iter().map(|id| SourceId::SstView(*id)).collect();
        sources.extend(
            manifest
                .compacted()
                .iter()
                .take(runs)
                .map(|run| SourceId::SortedRun(run.id)),
        );
        Merge {
            sources,
            destination,
            l0,
            runs_after,
        }
    }

    fn spec(&self) -> CompactionSpec {
        CompactionSpec::new(self.sources.clone(), self.destination)
    }

    async fn wait(
        &self,
        db: &Db,
        admin: &Admin,
        job: Ulid,
        started: Instant,
        deadline: Duration,
        poll: Duration,
    ) -> Result<Waited> {
        let mut polls = 0;
        while started.elapsed() < deadline {
            tokio::time::sleep(poll).await;
            polls += 1;
            refresh(db).await?;
            let manifest = db.manifest();
            let left = self
                .l0
                .iter()
                .filter(|id| manifest.l0().iter().any(|view| view.id == **id))
                .count();
            if left == 0 && manifest.compacted().len() <= self.runs_after {
                return Ok(Waited::Merged);
            }
            if left > 0 && left < self.l0.len() {
                return Ok(Waited::Superseded);
            }
            if polls % POLLS_PER_STATUS_READ == 0 && failed(admin, job).await? {
                return Ok(Waited::Superseded);
            }
        }
        Ok(Waited::Superseded)
    }
}

/// Whether the compactor failed job `id`. A job no longer listed has ended,
/// and the manifest tells how.
async fn failed(admin: &Admin, id: Ulid) -> Result<bool> {
    let job = admin
        .read_compaction(id, None)
        .await
        .map_err(|e| slate("reading a compaction's status", e))?;
    Ok(job.is_some_and(|job| job.status() == CompactionStatus::Failed))
}

/// How often a full compaction is resubmitted after SlateDB refused its job
/// id as older than a job the running compactor scheduled meanwhile.
const SUBMIT_ATTEMPTS: u32 = 5;

/// How long a submission waits for a just-started compactor to write the
/// store's first compaction record.
const FIRST_RECORD_WAIT: Duration = Duration::from_secs(2);

/// Submits `spec`. SlateDB draws the job id from the clock before it reads the
/// job list, and refuses an id older than the newest job there; when the
/// running compactor schedules a job in that millisecond, the submission is
/// refused although nothing is wrong, so it is retried with a fresh id. A
/// store with no compaction record yet refuses every job until a compactor
/// writes one ([`is_before_first_record`]), so that is waited for.
async fn submit_compaction(admin: &Admin, spec: CompactionSpec) -> Result<CompactionJob> {
    let mut attempt = 1;
    let started = Instant::now();
    loop {
        match admin.submit_compaction(spec.clone()).await {
            Ok(job) => return Ok(job),
            Err(e) if attempt < SUBMIT_ATTEMPTS && is_job_id_race(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e) if is_before_first_record(&e) && started.elapsed() < FIRST_RECORD_WAIT => {
                tokio::time::sleep(URGENT_POLL).await;
            }
            Err(e) => return Err(slate("submitting a full compaction", e)),
        }
    }
}

/// Whether SlateDB refused a job because the store has no compaction record
/// yet. A compactor writes the first one when it starts; the background
/// compactor starts late ([`COMPACTOR_START_DELAY`]), so in a store's first
/// short session the urgent one swapped in at its close is the first.
fn is_before_first_record(error: &slatedb::Error) -> bool {
    error.to_string().contains("invalid DB state")
}

/// Whether SlateDB refused a compaction job because its id is older than a
/// job already listed (its monotonic-clock invariant).
fn is_job_id_race(error: &slatedb::Error) -> bool {
    error.to_string().contains("invalid clock tick")
}

/// One tidy-up: flush, then two full compactions into the last run, the
/// second after a fresh L0 (see [`nudge`]). Run with the urgent compactor.
pub async fn tidy(
    db: &Db,
    admin: &Admin,
    started: Instant,
    deadline: Duration,
    mut progress: impl FnMut(u32),
) -> Result<u64> {
    flush_to_l0(db).await?;
    progress(1);
    compact_fully(db, admin, started, deadline).await?;
    progress(2);
    let covered = nudge(db).await?;
    compact_fully(db, admin, started, deadline).await?;
    progress(3);
    Ok(covered)
}

/// How long a closing writer waits for its final merge.
const CLOSE_COMPACTION_DEADLINE: Duration = Duration::from_secs(3);

/// The sorted runs and L0s from which a closing writer merges its tree: a
/// session that left fewer is cheap to open as it is. A merge costs a
/// closing writer three or four polls whatever it merges, and one leaves
/// two runs ([`Merge::at_close`]), so detaches that each add an L0 merge
/// every third time.
const CLOSE_MERGE_MIN_SOURCES: usize = 5;

/// The closing writers of this process whose final merge left one sorted
/// run, and those whose merge failed or missed its deadline (the next
/// writer's compactor picks such a tree up where it is). Counted for the
/// process, not the attach: an attach's writer closes when it detaches.
static CLOSE_MERGES: AtomicU64 = AtomicU64::new(0);
static CLOSE_MERGES_UNFINISHED: AtomicU64 = AtomicU64::new(0);

/// The process's close-merge counters, by name.
pub fn close_merge_counts() -> [(&'static str, u64); 2] {
    [
        ("close_merges", CLOSE_MERGES.load(Ordering::Relaxed)),
        (
            "close_merges_unfinished",
            CLOSE_MERGES_UNFINISHED.load(Ordering::Relaxed),
        ),
    ]
}

/// Merges the L0s and newer sorted runs before a writer closes, so the next
/// attach opens at most two runs instead of the L0s the session left (one
/// per 128 commits and one per detach): on S3 each costs requests. The
/// oldest run joins the merge only once the rest is a quarter of its size
/// ([`Merge::at_close`]). The whole merge, the swap to the urgent compactor
/// included, is bounded by a deadline.
pub async fn merge_at_close(
    db: &Db,
    compaction: &Compaction,
    root: &Path,
    object_store: &Arc<dyn ObjectStore>,
) {
    let manifest = db.manifest();
    if manifest.l0().len() + manifest.compacted().len() < CLOSE_MERGE_MIN_SOURCES {
        return;
    }
    let merge = async {
        // The urgent compactor stays until the writer's close stops it.
        let _urgent = compaction.urgent_at_close().await;
        let admin = admin(root, object_store);
        compact(
            db,
            &admin,
            Instant::now(),
            CLOSE_COMPACTION_DEADLINE,
            Merge::at_close,
            compaction.poll,
        )
        .await
    };
    let counter = match tokio::time::timeout(CLOSE_COMPACTION_DEADLINE, merge).await {
        Ok(Ok(_)) => &CLOSE_MERGES,
        _ => &CLOSE_MERGES_UNFINISHED,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// How long a closing writer's merge keeps what it replaced readable: the
/// shortest lifetime SlateDB's checkpoints take.
const CLOSE_MERGE_CHECKPOINT: Duration = Duration::from_secs(1);

/// How long a closing writer spends deleting the logs its final flush made
/// obsolete; what is left goes with the next collection.
const CLOSE_COLLECTION_DEADLINE: Duration = Duration::from_secs(2);

/// Deletes the WAL objects, manifests and compaction records a closed writer
/// leaves behind, at once rather than after garbage collection's minimum age,
/// and the compacted SSTs and WAL fences old enough to go
/// (`StoreSettings::close_collection_options`). Without this the next attach
/// lists every WAL object of the session (5,000 after 5,000 commits), and
/// every manifest and compaction record (one per flush and per compaction:
/// over a hundred after 5,000 commits, listed several times by every open);
/// and a lake used only by short sessions, which end before the collection
/// beside their writer first runs, keeps every SST its merges replaced and
/// a fence per session. Readers are safe: collection keeps the latest of
/// each, and everything a checkpoint names; the closing writer still holds
/// the lease, so no other writer's compactor runs.
pub async fn collect_history_at_close(
    root: &Path,
    object_store: &Arc<dyn ObjectStore>,
    options: GarbageCollectorOptions,
) {
    let admin = admin(root, object_store);
    // A failed or unfinished collection only leaves objects for the next one.
    let _ = tokio::time::timeout(CLOSE_COLLECTION_DEADLINE, admin.run_gc_once(options)).await;
}

/// When this process first opened a writer of one store, and when it last
/// started a garbage collection of it, over all the writers it opened on it.
#[derive(Debug, Default)]
pub struct LastCollection(std::sync::Mutex<Collections>);

#[derive(Debug, Default)]
struct Collections {
    first_open: Option<Instant>,
    last: Option<Instant>,
}

/// How soon after a process first opens a writer of a store it collects
/// the store's garbage (sooner when the interval is shorter). A pass lists
/// the manifests, the WAL and the compacted SSTs; made at once, it ran
/// inside the cold ATTACH, on threads beside the attach's own. The delay
/// runs from the first open, so a process whose writer turns are each
/// shorter than it still collects, at its first turn after the delay.
const FIRST_COLLECTION_DELAY: Duration = Duration::from_secs(2);

impl LastCollection {
    /// How long until the next pass is due: `interval` after the last, or
    /// the first delay after the first open if this process never
    /// collected the store.
    fn due_in(&self, interval: Duration) -> Duration {
        let Ok(mut state) = self.0.lock() else {
            return interval;
        };
        match state.last {
            Some(at) => interval.saturating_sub(at.elapsed()),
            None => {
                let opened = *state.first_open.get_or_insert_with(Instant::now);
                FIRST_COLLECTION_DELAY
                    .min(interval)
                    .saturating_sub(opened.elapsed())
            }
        }
    }

    fn start(&self) {
        if let Ok(mut state) = self.0.lock() {
            state.last = Some(Instant::now());
        }
    }
}

/// Garbage collection beside a writer, one pass every `interval`. SlateDB's
/// own collector makes its first pass the moment a writer opens, and a
/// process that takes the writer turn opens a writer at every turn: on S3
/// that was a dozen listings and reads per turn. Here the interval runs over
/// all of a process's writers of one store, so a process collects soon
/// after its first open and a turn taken again soon after does not. The
/// task is aborted with its writer; a pass cut short leaves its objects for
/// the next.
pub fn spawn_collection(
    root: Path,
    object_store: Arc<dyn ObjectStore>,
    options: GarbageCollectorOptions,
    interval: Duration,
    last: Arc<LastCollection>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let admin = admin(&root, &object_store);
        loop {
            tokio::time::sleep(last.due_in(interval)).await;
            last.start();
            // A failed pass is retried at the next interval.
            let _ = admin.run_gc_once(options.clone()).await;
        }
    })
}

pub fn admin(root: &Path, object_store: &Arc<dyn ObjectStore>) -> Admin {
    Admin::builder(root.clone(), object_store.clone()).build()
}

/// Writes a store expects soon, after which the idle upkeep should tidy,
/// rather than before them: a purge waiting for its attach to go quiet
/// (design 0015) would otherwise land just after a tidy, and its tombstones
/// would wait for another idle period. Shared by every writer a store opens.
#[derive(Clone, Default)]
pub struct UpkeepHolds(Arc<AtomicU64>);

/// Keeps the idle upkeep from starting a tidy until it drops.
pub struct UpkeepHold(Arc<AtomicU64>);

impl UpkeepHolds {
    pub fn hold(&self) -> UpkeepHold {
        self.0.fetch_add(1, Ordering::AcqRel);
        UpkeepHold(self.0.clone())
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

impl Drop for UpkeepHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The idle upkeep of one writer: every quarter idle period (at most every
/// five seconds) it looks at the writer's durable sequence number; once that
/// has not moved for `idle_after`, nothing holds the upkeep off, and the
/// store changed since the last tidy covered it (or the tree is more than
/// one run, as after a restart), it tidies the store with the urgent
/// compactor.
pub fn spawn_idle_upkeep(
    db: Db,
    compaction: Arc<Compaction>,
    root: Path,
    object_store: Arc<dyn ObjectStore>,
    idle_after: Duration,
    holds: UpkeepHolds,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let tick = (idle_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let admin = admin(&root, &object_store);
        let mut seen = db.status().durable_seq;
        let mut tidied = if untidy(&db) { None } else { Some(seen) };
        let mut quiet_since = Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            if db.status().close_reason.is_some() {
                return;
            }
            compaction.revive().await;
            let now = db.status().durable_seq;
            if now != seen || holds.any() {
                seen = now;
                quiet_since = Instant::now();
                continue;
            }
            if quiet_since.elapsed() < idle_after || (tidied == Some(now) && !untidy(&db)) {
                continue;
            }
            let urgent = compaction.urgent().await;
            let outcome = tidy(
                &db,
                &admin,
                Instant::now(),
                UPKEEP_COMPACTION_DEADLINE,
                |_| {},
            )
            .await;
            let _ = urgent.end().await;
            // The upkeep's own marker moved the sequence number; a write
            // after the tidy's last flush moved it further and is tidied
            // after another idle period. After a failure, wait a whole idle
            // period before trying again.
            seen = db.status().durable_seq;
            quiet_since = Instant::now();
            tidied = outcome.ok();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_is_due_soon_after_the_first_open_then_once_per_interval_over_all_writers() {
        let last = LastCollection::default();
        let minute = Duration::from_secs(60);
        let first = last.due_in(minute);
        assert!(
            first <= FIRST_COLLECTION_DELAY && first > FIRST_COLLECTION_DELAY / 2,
            "a first writer collects soon: {first:?}"
        );
        assert!(last.due_in(Duration::from_millis(500)) <= Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            last.due_in(minute) < first,
            "a later writer's wait counts from the first open"
        );
        last.start();
        let due = last.due_in(minute);
        assert!(due > Duration::from_secs(59) && due <= minute, "{due:?}");
        assert_eq!(last.due_in(Duration::ZERO), Duration::ZERO);
    }
}
