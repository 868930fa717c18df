//! The writer turn: several processes write one store, one at a time, with
//! no server between them ([design 0010]).
//!
//! SlateDB admits one writer per store, and a new writer fences the old
//! one. The turn makes that a hand-over instead of a fight: a process opens
//! its SlateDB writer only while it holds the writer lease, and closes it
//! when another process asks for the turn. Every object-store write of the
//! protocol is a plain put, a delete, or a create-if-absent, so it works on
//! the local filesystem as on S3.
//!
//! - A transaction *pins* the turn from its first read to its end; while
//!   any pin is open this process keeps the turn, so a transaction reads
//!   and commits against one writer, and the premise check on `sys/head`
//!   sees every commit of every process.
//! - A process that needs the turn while another holds it writes the ask
//!   object `turn/ask` and polls the lease. The holder's watcher sees the
//!   ask, lets its open pins finish (new ones get in only beside an open
//!   one, so a transaction opened inside another does not deadlock), closes
//!   its writer and deletes the lease; the asker creates the lease and
//!   opens its writer, which fences anything the old one might still send.
//! - A holder that stops renewing (crash on another host, pause, network
//!   partition) loses the turn after [`lease::TURN_SECONDS`]; a holder that
//!   is a dead process of this host loses it at once. If it comes back, its
//!   writer is fenced: its next commit fails and lands nothing.
//! - With `exclusive_writer 1` the lease is never handed over and a second
//!   writer is refused at attach, as before the turn existed.
//!
//! [design 0010]: ../../docs/design/0010-writer-turn.md

use super::fences::SpentFences;
use super::lease::{self, Holder, Take, TURN_DIR, TURN_SECONDS};
use super::local::for_live_processes;
use super::upkeep::Compaction;
use super::uri::StoreUri;
use super::writes::Writes;
use crate::error::{Error, Result};
use futures_util::future::BoxFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use slatedb::config::GarbageCollectorOptions;
use slatedb::Db;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often a waiting process renews its ask, and how old an ask may be
/// before a holder ignores it (its asker gave up or died).
const ASK_REFRESH: Duration = Duration::from_millis(200);
/// The ask object's name in the turn directory.
const ASK: &str = "ask";
const ASK_LIFETIME_SECONDS: i64 = 3 * TURN_SECONDS as i64;

/// How many WAL objects a closing writer leaves for the next open to read
/// before it moves the replay point past them (see `close`).
const WAL_OBJECTS_LEFT_TO_REPLAY: u64 = 8;

/// Of the closes of writers that changed nothing, how many make one
/// collection ([`OpenedWriter::collects_at_close`]).
const READ_ONLY_CLOSES_PER_COLLECTION: u64 = 4;

/// How long a holder waits between looks at the ask object, by store: a
/// read costs microseconds on a local store and money on S3. Recently
/// active holders look often, so that a waiting writer gets the turn soon
/// after the holder's last transaction; idle ones seldom, since an idle
/// holder costs one small read per interval.
#[derive(Debug, Clone, Copy)]
struct Watch {
    active: Duration,
    idle: Duration,
}
const WATCH_FAST_STORE: Watch = Watch {
    active: Duration::from_millis(5),
    idle: Duration::from_millis(250),
};
const WATCH_REMOTE_STORE: Watch = Watch {
    active: Duration::from_millis(100),
    idle: Duration::from_secs(1),
};
const ACTIVE_WINDOW: Duration = Duration::from_secs(2);

/// How many writers' spent fences a process remembers while the replay
/// point has not passed them: a turn handed over often leaves one each.
const MOST_NOTED_SPENT_FENCES: usize = 256;

/// How long each step of a detach (the final flush, closing the writer) may
/// take before the detach gives up on it.
const CLOSE_STEP_LIMIT: Duration = Duration::from_secs(15);

/// Opens this store's SlateDB writer (fencing any earlier one) with the
/// compactor and idle upkeep that run beside it.
pub type OpenWriter = Box<dyn Fn() -> BoxFuture<'static, Result<OpenedWriter>> + Send + Sync>;

/// A SlateDB writer and what moraine runs beside it while it is open.
pub struct OpenedWriter {
    pub db: Db,
    /// The manifest's version once the writer was open: a close that finds
    /// it unchanged knows the session flushed, merged and wrote nothing.
    pub opened_manifest: u64,
    pub writes: Writes,
    pub compaction: Arc<Compaction>,
    pub collection: tokio::task::JoinHandle<()>,
    pub idle: Option<tokio::task::JoinHandle<()>>,
}

impl OpenedWriter {
    /// Whether a closing writer collects the logs it made obsolete. One that
    /// left the manifest as its open wrote it (a session that only read)
    /// replaced nothing but the manifest before its own, a few hundred bytes;
    /// its collection was a third of such a detach. It collects at one close
    /// in [`READ_ONLY_CLOSES_PER_COLLECTION`], by writer epoch, which every
    /// open advances, so a lake read by many short sessions keeps a handful
    /// of old manifests, never more.
    fn collects_at_close(&self) -> bool {
        let manifest = self.db.manifest();
        manifest.id() != self.opened_manifest
            || manifest
                .writer_epoch()
                .is_multiple_of(READ_ONLY_CLOSES_PER_COLLECTION)
    }

    /// Ends the garbage collection and the idle upkeep, which need no
    /// waiting for.
    fn abort_tasks(&self) {
        self.collection.abort();
        if let Some(idle) = &self.idle {
            idle.abort();
        }
    }

    /// Stops the garbage collection, the idle upkeep and the compactor,
    /// before the writer closes.
    async fn stop_upkeep(&self) {
        self.abort_tasks();
        self.compaction.shutdown().await;
    }

    /// Stops the upkeep and closes the writer. Everything it acknowledged is
    /// durable in the WAL already, and the next writer replays it, so the
    /// memtable is not flushed: with the compactor stopped, a flush that
    /// finds L0 full would wait for a compaction that never comes (SlateDB
    /// holds flushes back while L0 is over its limit), and a flush per
    /// handover would fill L0 faster than the compactor drains it.
    async fn close(&self) -> Result<()> {
        self.stop_upkeep().await;
        self.db
            .close_with_options(slatedb::config::CloseOptions {
                flush_type: Some(slatedb::config::FlushType::Wal),
            })
            .await
            .map_err(|e| crate::error::slate("closing", e))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TurnPolicy {
    /// Never hand the lease over; refuse other writers at once.
    pub exclusive: bool,
    /// Take the lease from a live holder.
    pub force_takeover: bool,
    /// How long a transaction waits for the turn before it fails.
    pub wait: Duration,
}

/// How the turn of one store went in this process, for `moraine_stats`.
#[derive(Debug, Default)]
pub struct TurnCounters {
    taken: AtomicU64,
    handed_over: AtomicU64,
    waited_ms: AtomicU64,
    fenced: AtomicU64,
    /// The holder's looks at the ask object: what the turn costs a writer
    /// nobody asks.
    ask_reads: AtomicU64,
    /// Time spent opening SlateDB's writer on taking the turn, and closing
    /// it on handing over: what a handover costs beyond the lease.
    open_ms: AtomicU64,
    close_ms: AtomicU64,
}

impl TurnCounters {
    pub fn snapshot(&self) -> [(&'static str, u64); 7] {
        [
            ("turns_taken", self.taken.load(Ordering::Relaxed)),
            (
                "turns_handed_over",
                self.handed_over.load(Ordering::Relaxed),
            ),
            ("turn_wait_ms", self.waited_ms.load(Ordering::Relaxed)),
            ("turns_lost_to_fencing", self.fenced.load(Ordering::Relaxed)),
            ("turn_ask_reads", self.ask_reads.load(Ordering::Relaxed)),
            ("turn_open_ms", self.open_ms.load(Ordering::Relaxed)),
            ("turn_close_ms", self.close_ms.load(Ordering::Relaxed)),
        ]
    }
}

struct Holding {
    writer: OpenedWriter,
    watcher: tokio::task::JoinHandle<()>,
    /// Which of this turn's writers it is: the first one opened is 1.
    opened: u64,
}

pub struct WriterTurn {
    object_store: Arc<dyn ObjectStore>,
    root: Path,
    uri: String,
    policy: TurnPolicy,
    /// Whether the next take overrides a live holder: the attach's first,
    /// when it says `force_takeover`. Later takes wait their turn, or the
    /// writer that was forced out would be fenced again at every handover.
    force_pending: AtomicBool,
    /// What a closing writer collects
    /// (`StoreSettings::close_collection_options`).
    close_collection: GarbageCollectorOptions,
    /// The ask object's file, on a local store: a holder that finds no file
    /// there knows nobody asks, with one `stat` instead of a read through
    /// the blocking pool, which at the active watch pace cost the holder's
    /// process as much CPU as translating its commits.
    ask_file: Option<PathBuf>,
    me: Holder,
    open_writer: OpenWriter,
    /// Between an asker's looks at the lease: quick on a local or in-memory
    /// store, where a request costs microseconds; slower where it costs money.
    poll: Duration,
    watch: Watch,
    holding: tokio::sync::Mutex<Option<Holding>>,
    pins: AtomicUsize,
    /// Whether the holder saw another process ask for the turn.
    asked: AtomicBool,
    /// Wakes the watcher when the last pin ends while someone asks.
    drained: tokio::sync::Notify,
    last_active: Mutex<Instant>,
    counters: TurnCounters,
    /// What this process's writers that found the lease free may delete
    /// once the replay point passes it, oldest first.
    spent_fences: Mutex<VecDeque<SpentFences>>,
}

/// A transaction's hold on the turn: while it lives, this process keeps
/// the turn and `db` stays open.
pub struct TurnPin {
    db: Db,
    writes: Writes,
    compaction: Arc<Compaction>,
    opened: u64,
    turn: Arc<WriterTurn>,
}

impl TurnPin {
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Which of this turn's writers holds it: a writer opened again after
    /// another process wrote has a new number.
    pub fn opened(&self) -> u64 {
        self.opened
    }

    /// Where this writer's SlateDB tasks run, and so how a commit drives them.
    pub fn writes(&self) -> Writes {
        self.writes
    }

    /// The compactor running beside this writer.
    pub fn compaction(&self) -> &Compaction {
        &self.compaction
    }

    /// [`WriterTurn::writer_erred`] for this pin's writer.
    pub async fn writer_erred(&self, error: &Error) {
        self.turn.writer_erred(error).await;
    }
}

impl Drop for TurnPin {
    fn drop(&mut self) {
        self.turn.touch();
        if self.turn.pins.fetch_sub(1, Ordering::SeqCst) == 1 && self.turn.is_asked() {
            self.turn.drained.notify_one();
        }
    }
}

impl WriterTurn {
    pub fn new(
        object_store: Arc<dyn ObjectStore>,
        root: Path,
        uri: &StoreUri,
        policy: TurnPolicy,
        close_collection: GarbageCollectorOptions,
        open_writer: OpenWriter,
    ) -> Arc<WriterTurn> {
        let fast_store = !matches!(uri, StoreUri::S3 { .. });
        let ask_file = match uri {
            StoreUri::Local(dir) => Some(dir.join(ask_path(&root).as_ref())),
            _ => None,
        };
        Arc::new(WriterTurn {
            object_store,
            uri: uri.to_string(),
            ask_file,
            root,
            policy,
            force_pending: AtomicBool::new(policy.force_takeover),
            close_collection,
            me: Holder::new_instance(),
            open_writer,
            poll: if fast_store {
                Duration::from_millis(4)
            } else {
                Duration::from_millis(25)
            },
            watch: if fast_store {
                WATCH_FAST_STORE
            } else {
                WATCH_REMOTE_STORE
            },
            holding: tokio::sync::Mutex::new(None),
            pins: AtomicUsize::new(0),
            asked: AtomicBool::new(false),
            drained: tokio::sync::Notify::new(),
            last_active: Mutex::new(Instant::now()),
            counters: TurnCounters::default(),
            spent_fences: Mutex::new(VecDeque::new()),
        })
    }

    pub fn counters(&self) -> &TurnCounters {
        &self.counters
    }

    /// Holds the turn for one transaction, taking it first if another
    /// process has it.
    pub async fn pin(self: &Arc<Self>) -> Result<TurnPin> {
        let started = Instant::now();
        loop {
            {
                let mut holding = self.holding.lock().await;
                match holding.as_ref() {
                    Some(held) if self.admits_new_pins() => return Ok(self.new_pin(held)),
                    Some(_) => {}
                    None => {
                        self.take(&mut holding, started).await?;
                        continue;
                    }
                }
            }
            // Handing over: wait until the writer is closed, then ask back.
            if started.elapsed() > self.policy.wait {
                return Err(self.timed_out(None));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Holds the turn if this process has it and nobody asks for it; never
    /// waits for it.
    pub async fn pin_if_held(self: &Arc<Self>) -> Option<TurnPin> {
        let holding = self.holding.lock().await;
        let held = holding.as_ref()?;
        (!self.is_asked()).then(|| self.new_pin(held))
    }

    fn new_pin(self: &Arc<Self>, held: &Holding) -> TurnPin {
        self.pins.fetch_add(1, Ordering::SeqCst);
        TurnPin {
            db: held.writer.db.clone(),
            writes: held.writer.writes,
            compaction: held.writer.compaction.clone(),
            opened: held.opened,
            turn: self.clone(),
        }
    }

    fn is_asked(&self) -> bool {
        self.asked.load(Ordering::SeqCst)
    }

    /// While another process asks, a new pin gets in only beside an open
    /// one: DuckLake may open a metadata transaction inside another, and
    /// refusing the inner one would leave the outer waiting on itself.
    fn admits_new_pins(&self) -> bool {
        !self.is_asked() || self.pins.load(Ordering::SeqCst) > 0
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last_active.lock() {
            *last = Instant::now();
        }
    }

    fn recently_active(&self) -> bool {
        self.pins.load(Ordering::SeqCst) > 0
            || self
                .last_active
                .lock()
                .map(|l| l.elapsed() < ACTIVE_WINDOW)
                .unwrap_or(true)
    }

    async fn take(self: &Arc<Self>, holding: &mut Option<Holding>, started: Instant) -> Result<()> {
        let mut asked_at: Option<Instant> = None;
        loop {
            let taken = lease::LeaseClaim {
                store: &self.object_store,
                root: &self.root,
                uri: &self.uri,
                me: &self.me,
                exclusive: self.policy.exclusive,
                force: self.force_pending.load(Ordering::SeqCst),
            }
            .try_take()
            .await;
            let record = match taken {
                Ok(Take::Taken(taken)) => {
                    self.force_pending.store(false, Ordering::SeqCst);
                    let opening = Instant::now();
                    let writer = match self.open_writer_for(taken.free).await {
                        Ok(writer) => writer,
                        Err(e) => {
                            // A store that cannot open must not stay locked.
                            // A lease taken over stays taken over: the
                            // stalled writer it was taken from may still
                            // be turned away only by the next one's fence.
                            if taken.free {
                                lease::release(&self.object_store, &self.root, &self.me).await;
                            } else {
                                lease::expire(
                                    &self.object_store,
                                    &self.root,
                                    &self.me,
                                    self.policy.exclusive,
                                )
                                .await;
                            }
                            return Err(e);
                        }
                    };
                    let version = taken.version;
                    if taken.free {
                        self.note_spent_fences(SpentFences::at_open(&writer.db));
                    }
                    if asked_at.is_some() {
                        self.withdraw_ask().await;
                    }
                    let opened = self.counters.taken.fetch_add(1, Ordering::Relaxed) + 1;
                    self.counters
                        .open_ms
                        .fetch_add(opening.elapsed().as_millis() as u64, Ordering::Relaxed);
                    self.counters
                        .waited_ms
                        .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    self.asked.store(false, Ordering::SeqCst);
                    self.touch();
                    let watcher = tokio::spawn(watch(Arc::downgrade(self), version));
                    *holding = Some(Holding {
                        writer,
                        watcher,
                        opened,
                    });
                    return Ok(());
                }
                Ok(Take::Busy(record)) => record,
                Err(e) => {
                    if asked_at.is_some() {
                        self.withdraw_ask().await;
                    }
                    return Err(e);
                }
            };
            if started.elapsed() > self.policy.wait {
                self.withdraw_ask().await;
                return Err(self.timed_out(Some(&record.holder_text)));
            }
            if asked_at.is_none_or(|at| at.elapsed() > ASK_REFRESH) {
                self.ask().await?;
                asked_at = Some(Instant::now());
            }
            tokio::time::sleep(self.poll + jitter(self.poll)).await;
        }
    }

    /// Opens SlateDB's writer. One that took the lease over from a stale
    /// holder, which may be a stalled writer, moves the replay point past
    /// its own fence at once: a fence after the replay point is then always
    /// one that guards nothing, and writers that took a free lease may
    /// delete it once they pass it ([`SpentFences`]).
    async fn open_writer_for(&self, lease_was_free: bool) -> Result<OpenedWriter> {
        let writer = (self.open_writer)().await?;
        if !lease_was_free {
            if let Err(e) = writer.writes.run(super::upkeep::nudge(&writer.db)).await {
                let _ = writer.close().await;
                return Err(e);
            }
        }
        Ok(writer)
    }

    fn note_spent_fences(&self, spent: SpentFences) {
        if let Ok(mut noted) = self.spent_fences.lock() {
            let spent = match noted.back() {
                Some(last) => spent.beyond(last),
                None => Some(spent),
            };
            if let Some(spent) = spent {
                if noted.len() >= MOST_NOTED_SPENT_FENCES {
                    noted.pop_front();
                }
                noted.push_back(spent);
            }
        }
    }

    /// Deletes the spent fences of this process's writers that the replay
    /// point of `db`, a writer just closed, has passed.
    async fn retire_spent_fences(&self, db: &Db) {
        let replay_after = db.manifest().replay_after_wal_id();
        let noted = match self.spent_fences.lock() {
            Ok(mut noted) => std::mem::take(&mut *noted),
            Err(_) => return,
        };
        for spent in noted {
            if let Some(left) = spent
                .retire(&self.object_store, &self.root, replay_after)
                .await
            {
                self.note_spent_fences(left);
            }
        }
    }

    fn timed_out(&self, holder: Option<&str>) -> Error {
        let holder = holder.map_or_else(String::new, |h| format!(", held by {h}"));
        Error::Store(format!(
            "waited {} s for the writer turn of moraine store {}{holder}: a transaction there stayed open \
             the whole time. Raise the attach option turn_wait_seconds, or keep transactions short",
            self.policy.wait.as_secs(),
            self.uri
        ))
    }

    fn ask_path(&self) -> Path {
        ask_path(&self.root)
    }

    async fn ask(&self) -> Result<()> {
        let text = format!("{} at {}", self.me.render(), unix_seconds());
        self.object_store
            .put_opts(
                &self.ask_path(),
                PutPayload::from(text.into_bytes()),
                for_live_processes(PutMode::Overwrite),
            )
            .await
            .map_err(|e| Error::store("asking for the writer turn", e))?;
        Ok(())
    }

    /// Removes the ask if it is still this writer's own.
    async fn withdraw_ask(&self) {
        if let Some((asker, _)) = self.read_ask().await {
            if asker == self.me.instance() {
                let _ = self.object_store.delete(&self.ask_path()).await;
            }
        }
    }

    /// The asking writer's instance and when it asked, if anyone asks.
    async fn read_ask(&self) -> Option<(String, i64)> {
        let found = self.object_store.get(&self.ask_path()).await.ok()?;
        let text = found.bytes().await.ok()?;
        let text = String::from_utf8_lossy(&text);
        let (asker, at) = text.rsplit_once(" at ")?;
        let asker = Holder::parse(asker)?;
        Some((asker.instance().to_string(), at.trim().parse().ok()?))
    }

    /// Whether another writer asks for the turn now.
    async fn someone_asks(&self) -> bool {
        self.counters.ask_reads.fetch_add(1, Ordering::Relaxed);
        if self.ask_file.as_ref().is_some_and(|file| !file.exists()) {
            return false;
        }
        match self.read_ask().await {
            Some((asker, at)) => {
                asker != self.me.instance() && unix_seconds() - at <= ASK_LIFETIME_SECONDS
            }
            None => false,
        }
    }

    /// What an error of the writer's commit or snapshot does to the turn.
    /// A fenced writer is forgotten, so the next transaction asks for the
    /// turn again with a fresh writer. A write that failed for good (a full
    /// disk, say) leaves SlateDB's writer closed: it is forgotten and its
    /// lease given back, so the next transaction opens a writer afresh,
    /// replaying what is durable, and other processes need not wait for the
    /// lease to run out.
    pub async fn writer_erred(&self, error: &Error) {
        match error {
            Error::Fenced => self.lose().await,
            Error::Store(_) => self.forget_failed_writer().await,
            _ => {}
        }
    }

    /// This writer was fenced or lost its lease: forget the writer.
    async fn lose(&self) {
        if self.forget_writer().await {
            self.counters.fenced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// SlateDB closed the writer: forget it and release the lease it held.
    async fn forget_failed_writer(&self) {
        if self.forget_writer().await {
            lease::release(&self.object_store, &self.root, &self.me).await;
        }
    }

    /// Drops the writer without closing it; whether there was one.
    async fn forget_writer(&self) -> bool {
        let mut holding = self.holding.lock().await;
        let Some(held) = holding.take() else {
            return false;
        };
        held.watcher.abort();
        held.writer.stop_upkeep().await;
        true
    }

    /// Gives the turn up: closes the writer (its commits are all durable
    /// already) and deletes the lease.
    async fn hand_over(&self) -> bool {
        let mut holding = self.holding.lock().await;
        if self.pins.load(Ordering::SeqCst) > 0 {
            return false;
        }
        if let Some(held) = holding.take() {
            let closing = Instant::now();
            // Driven here, as a detach's close is: left to the write
            // runtime's driver thread, the asker waited out `DRIVER_IDLE`
            // after this process's last commit.
            if held.writer.writes.run(held.writer.close()).await.is_ok() {
                self.retire_spent_fences(&held.writer.db).await;
            }
            self.counters
                .close_ms
                .fetch_add(closing.elapsed().as_millis() as u64, Ordering::Relaxed);
            lease::release(&self.object_store, &self.root, &self.me).await;
            self.counters.handed_over.fetch_add(1, Ordering::Relaxed);
        }
        self.asked.store(false, Ordering::SeqCst);
        true
    }

    /// Detaches: closes the writer and releases the lease.
    pub async fn close(&self) -> Result<()> {
        let mut holding = self.holding.lock().await;
        let Some(held) = holding.take() else {
            return Ok(());
        };
        held.watcher.abort();
        // A detach leaves the store in SSTs, not only in the WAL, so a reader
        // or the next writer replays little. The flush runs while the
        // compactor still does, which drains L0 if it is over its limit.
        //
        // A session that wrote nothing has no memtable to flush, so the WAL
        // fence its open wrote stays after the manifest's replay point, with
        // those of every such session before it, and every open reads them
        // all. Past a few, the close writes the upkeep marker, and the flush
        // moves the replay point past them.
        let db = &held.writer.db;
        let flush = async {
            if super::upkeep::wal_objects_to_replay(db) > WAL_OBJECTS_LEFT_TO_REPLAY {
                super::upkeep::nudge(db).await.map(|_| ())
            } else {
                super::upkeep::flush_to_l0(db).await
            }
        };
        // The flush and the close are driven on this thread, as a commit
        // drives its writes: the last commit has just left the write runtime,
        // and its driver thread would take it over only after `DRIVER_IDLE`,
        // which each of them waited out.
        let flushed = held
            .writer
            .writes
            .run(self.bounded("moving the memtable into an L0 SST", flush))
            .await;
        if flushed.is_ok() {
            super::upkeep::merge_at_close(
                &held.writer.db,
                &held.writer.compaction,
                &self.root,
                &self.object_store,
            )
            .await;
        }
        let closed = held
            .writer
            .writes
            .run(self.bounded("closing SlateDB's writer", held.writer.close()))
            .await
            .and(flushed);
        if closed.is_ok() {
            self.retire_spent_fences(&held.writer.db).await;
        }
        // The collection waits for the writer's close: run beside it, it
        // left the compacted SSTs of earlier merges in place (e2e
        // `test_short_sessions_give_back_merged_ssts_and_fences`).
        if closed.is_ok() && held.writer.collects_at_close() {
            super::upkeep::collect_history_at_close(
                &self.root,
                &self.object_store,
                self.close_collection.clone(),
            )
            .await;
        }
        lease::release(&self.object_store, &self.root, &self.me).await;
        closed
    }

    /// Runs one step of a close, failing it after [`CLOSE_STEP_LIMIT`]: a
    /// detach must not hang, and every commit it acknowledged is durable in
    /// the WAL already, where the next writer replays it.
    async fn bounded(
        &self,
        step: &str,
        work: impl std::future::Future<Output = Result<()>>,
    ) -> Result<()> {
        tokio::time::timeout(CLOSE_STEP_LIMIT, work)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Store(format!(
                    "closing moraine store {}: {step} did not finish within {} s; every acknowledged \
                     commit is durable in the log, and the next writer replays it",
                    self.uri,
                    CLOSE_STEP_LIMIT.as_secs()
                )))
            })
    }

    /// Stops renewing without releasing, as a crash would: the lease
    /// expires or, on this host, is taken over at once.
    pub fn abandon(&self) {
        let Ok(mut holding) = self.holding.try_lock() else {
            return;
        };
        let Some(held) = holding.take() else { return };
        held.watcher.abort();
        held.writer.abort_tasks();
        // Stopping a compactor is async; a dropped handle has no caller left
        // to wait for it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let compaction = held.writer.compaction.clone();
            runtime.spawn(async move { compaction.shutdown().await });
        }
    }
}

/// The holder's side: renews the lease and hands the turn over when asked.
async fn watch(turn: Weak<WriterTurn>, mut lease_version: UpdateVersion) {
    let mut renewed = Instant::now();
    loop {
        let (pause, renew_every, drained) = {
            let Some(turn) = turn.upgrade() else { return };
            let renew_every = if turn.policy.exclusive {
                Duration::from_secs(lease::LEASE_SECONDS / 3)
            } else {
                Duration::from_secs(TURN_SECONDS / 3)
            };
            let pause = if turn.policy.exclusive {
                renew_every
            } else if turn.recently_active() {
                turn.watch.active
            } else {
                turn.watch.idle
            };
            (pause, renew_every, Arc::clone(&turn))
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = drained.drained.notified() => {}
        }
        drop(drained);
        let Some(turn) = turn.upgrade() else { return };
        if renewed.elapsed() >= renew_every {
            match lease::renew(
                &turn.object_store,
                &turn.root,
                &turn.me,
                turn.policy.exclusive,
                &lease_version,
            )
            .await
            {
                Ok(version) => {
                    lease_version = version;
                    renewed = Instant::now();
                }
                Err(Error::Conflict(_)) => {
                    turn.lose().await;
                    return;
                }
                // A failed renewal is retried at the next tick.
                Err(_) => {}
            }
        }
        if turn.policy.exclusive {
            continue;
        }
        if !turn.is_asked() {
            if !turn.someone_asks().await {
                continue;
            }
            turn.asked.store(true, Ordering::SeqCst);
        }
        if turn.pins.load(Ordering::SeqCst) == 0 && turn.hand_over().await {
            return;
        }
    }
}

/// The ask object of the store at `root`.
fn ask_path(root: &Path) -> Path {
    root.clone().join(TURN_DIR).join(ASK)
}

fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Up to `span` more, so that waiting processes do not poll in lockstep.
fn jitter(span: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    Duration::from_micros(random % (span.as_micros() as u64).max(1))
}
