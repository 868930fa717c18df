//! The writer lease: the object `<root>/writer.lease` that says which
//! process may write a store now, and until when.
//!
//! SlateDB fences by "newest opener wins", so two processes that each open
//! a writer would take turns killing each other's commits. The lease makes
//! the order explicit. Two policies share it ([design 0010]):
//! - *exclusive* (`META_EXCLUSIVE_WRITER 1`): the holder keeps the lease
//!   while attached and a second read-write attach fails fast;
//! - *turn* (the default): the lease is the writer turn of
//!   [`super::turn`], short and handed over when another process asks.
//!
//! Takeover rule: a writer that crashed leaves its lease behind. When the
//! lease names a process on this same host that no longer runs (or whose
//! pid now belongs to a later process), a new writer takes over at once;
//! a holder on another host must let the lease expire, or the attach says
//! `force_takeover 1`. Every way of taking the lease is a create-if-absent
//! write, which the local filesystem supports as well as S3, so of two
//! processes racing for one lease exactly one wins: an absent lease is
//! created, and a stale one is first claimed through a takeover marker
//! named after that very lease, which only one process can create. SlateDB's
//! fencing stays the safety net: a fenced writer writes nothing.
//!
//! [design 0010]: ../../docs/design/0010-writer-turn.md

use super::local::for_live_processes;
use crate::error::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Who holds a lease: enough to tell, on the same host, whether the
/// holder still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pid: u32,
    /// Distinguishes processes that reuse a pid and attaches within one.
    instance: String,
    /// Host name and boot id: pids mean something only on the same boot.
    host: String,
    /// The process's start time in clock ticks since boot (Linux), so a
    /// recycled pid is not mistaken for the holder.
    started: u64,
}

impl Holder {
    pub fn render(&self) -> String {
        format!(
            "pid {} ({}) on {} started {}",
            self.pid, self.instance, self.host, self.started
        )
    }

    /// Reads `render`'s output; leases of older builds (no host) parse as
    /// a holder on an unknown host.
    pub fn parse(text: &str) -> Option<Holder> {
        let rest = text.strip_prefix("pid ")?;
        let (pid, rest) = rest.split_once(" (")?;
        let (instance, rest) = rest.split_once(')')?;
        let (host, started) = match rest.strip_prefix(" on ") {
            Some(tail) => {
                let (host, started) = tail.rsplit_once(" started ")?;
                (host.to_string(), started.trim().parse().ok()?)
            }
            None => (String::new(), 0),
        };
        Some(Holder {
            pid: pid.parse().ok()?,
            instance: instance.to_string(),
            host,
            started,
        })
    }

    /// Whether this holder is a process of this host that no longer runs.
    fn is_gone_from_this_host(&self) -> bool {
        let me = this_process();
        if self.host.is_empty() || self.host != me.host {
            return false;
        }
        match process_start(self.pid) {
            None => true,
            Some(started) => started != self.started,
        }
    }
}

/// This process as a lease names it. Each writer of the process takes
/// the lease under an instance of its own ([`Holder::new_instance`]), so
/// two stores of one process that name one location are two writers.
fn this_process() -> &'static Holder {
    static ME: OnceLock<Holder> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = std::process::id();
        Holder {
            pid,
            instance: String::new(),
            host: host_identity(),
            started: process_start(pid).unwrap_or(0),
        }
    })
}

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The host name and boot id; empty where neither can be read, which turns
/// the same-host rule off.
fn host_identity() -> String {
    let name = read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    match read_trimmed("/proc/sys/kernel/random/boot_id") {
        Some(boot) if !name.is_empty() => format!("{name}/{boot}"),
        _ => String::new(),
    }
}

/// A process's start time from `/proc/<pid>/stat` (field 22), or `None`
/// when no such process runs. A zombie runs no more: killed, it holds
/// nothing but its exit status until its parent reaps it, which a parent
/// busy elsewhere may not do for a long time.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // fields after its closing parenthesis.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

pub const LEASE_FILE: &str = "writer.lease";

pub fn lease_path(root: &Path) -> Path {
    root.clone().join(LEASE_FILE)
}

/// Where the turn's other objects live: asks and takeover markers.
pub const TURN_DIR: &str = "turn";

impl Holder {
    /// A writer of this process, with an instance of its own.
    pub fn new_instance() -> Holder {
        Holder {
            instance: uuid::Uuid::new_v4().to_string(),
            ..this_process().clone()
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }
}

/// How long a lease lasts without renewal, by policy. An exclusive holder
/// renews every third of it; a turn is short so that a holder that stopped
/// (paused, partitioned, crashed on another host) holds up the others for
/// seconds, not half a minute.
pub const LEASE_SECONDS: u64 = 30;
pub const TURN_SECONDS: u64 = 6;

/// A lease as stored: `<holder> until <unix seconds> <policy>`.
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    /// The holder as written, for messages; `holder` is its parsed form.
    pub holder_text: String,
    pub holder: Option<Holder>,
    pub until: u64,
    pub exclusive: bool,
}

impl LeaseRecord {
    fn render(holder: &Holder, exclusive: bool) -> String {
        let seconds = if exclusive {
            LEASE_SECONDS
        } else {
            TURN_SECONDS
        };
        LeaseRecord::render_until(holder, exclusive, now_seconds() + seconds)
    }

    /// A lease valid until `until`, in Unix seconds: [`expire`] writes one
    /// that has already passed.
    fn render_until(holder: &Holder, exclusive: bool, until: u64) -> String {
        let policy = if exclusive { "exclusive" } else { "turn" };
        format!("{} until {until} {policy}", holder.render())
    }

    /// Reads `render`'s output. Leases of builds before the writer turn have
    /// no policy and were always exclusive.
    pub fn parse(text: &str) -> Option<LeaseRecord> {
        let (holder_text, rest) = text.rsplit_once(" until ")?;
        let mut words = rest.split_whitespace();
        let until = words.next()?.parse().ok()?;
        let exclusive = words.next() != Some("turn");
        Some(LeaseRecord {
            holder_text: holder_text.to_string(),
            holder: Holder::parse(holder_text),
            until,
            exclusive,
        })
    }

    pub fn is_held_by(&self, me: &Holder) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|h| h.instance == me.instance)
    }

    /// Whether the holder may still write: not expired, and not a process of
    /// this host that has ended.
    pub fn is_live(&self) -> bool {
        self.until > now_seconds()
            && !self
                .holder
                .as_ref()
                .is_some_and(Holder::is_gone_from_this_host)
    }

    pub fn seconds_left(&self) -> u64 {
        self.until.saturating_sub(now_seconds())
    }
}

/// What one attempt to take the lease found.
#[derive(Debug)]
pub enum Take {
    /// This writer holds the lease now; renewals build on this version.
    Taken(Taken),
    /// Another live writer holds it, as a turn this writer may ask for.
    Busy(LeaseRecord),
}

/// A lease this writer has just taken.
#[derive(Debug)]
pub struct Taken {
    pub version: UpdateVersion,
    /// The lease was absent: the writer before this one released it after
    /// its own writer had stopped (or there was none), so nothing is left
    /// that the WAL fence of this writer's open could turn away
    /// ([design 0025]). A lease taken over from a stale or live holder, or
    /// this writer's own lease left behind, is not free.
    ///
    /// [design 0025]: ../../docs/design/0025-fences-that-turn-nobody-away.md
    pub free: bool,
}

/// One writer's claim on one store's lease: who asks, where, and on what
/// terms.
pub struct LeaseClaim<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub root: &'a Path,
    /// The store as users name it, for messages.
    pub uri: &'a str,
    pub me: &'a Holder,
    pub exclusive: bool,
    pub force: bool,
}

impl LeaseClaim<'_> {
    /// One attempt to take the lease. A live exclusive holder, or a live
    /// holder of any kind when this writer wants exclusivity, refuses at
    /// once.
    pub async fn try_take(&self) -> Result<Take> {
        for _ in 0..LEASE_READ_ATTEMPTS {
            if let Some(outcome) = self.attempt().await? {
                return Ok(outcome);
            }
        }
        Err(Error::Conflict(format!(
            "the writer lease of {} kept changing while this writer read it",
            self.uri
        )))
    }

    /// `None` when the lease changed under this attempt and was released
    /// again before it could be read: the caller tries once more.
    async fn attempt(&self) -> Result<Option<Take>> {
        let (store, root, me) = (self.store, self.root, self.me);
        let path = lease_path(root);
        let found = match store.get(&path).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => {
                let written = write(store, &path, me, self.exclusive, PutMode::Create).await;
                return self.settle(written, true).await;
            }
            Err(e) => return Err(Error::store("reading the writer lease", e)),
        };
        let seen = UpdateVersion {
            e_tag: found.meta.e_tag.clone(),
            version: found.meta.version.clone(),
        };
        // Another writer may replace the lease while this one reads it (a
        // short read on the local filesystem): the attempt starts over.
        let Ok(text) = found.bytes().await else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&text).to_string();
        let record = LeaseRecord::parse(&text);
        let mine = record.as_ref().is_some_and(|r| r.is_held_by(me));
        if let Some(record) = record
            .as_ref()
            .filter(|r| !mine && r.is_live() && !self.force)
        {
            if record.exclusive || self.exclusive {
                return Err(in_use(
                    self.uri,
                    &format!(
                        "{}, lease valid for {} more seconds",
                        record.holder_text,
                        record.seconds_left()
                    ),
                ));
            }
            return Ok(Some(Take::Busy(record.clone())));
        }
        // This writer's own lease, a stale one, or a forced takeover: claim
        // this very lease first, so that of two processes replacing it one
        // wins.
        let marker = takeover_marker(root, &text);
        if !mine {
            let claimed = claim_takeover(store, &marker, &text).await?;
            // A claim made after the previous claimer finished (and removed
            // its marker) finds that claimer's lease in place: it is not stale.
            let unchanged =
                claimed && read_text(store, root).await?.as_deref() == Some(text.as_str());
            if !unchanged {
                if claimed {
                    let _ = store.delete(&marker).await;
                }
                return Ok(match read(store, root).await? {
                    Some(record) if !record.is_held_by(me) => Some(Take::Busy(record)),
                    _ => None,
                });
            }
        }
        let written = match write(store, &path, me, self.exclusive, PutMode::Update(seen)).await {
            // No If-Match here (the local filesystem): the claim above
            // settled who replaces this lease.
            Err(Error::Unsupported(_)) => {
                write_unconditionally(store, &path, me, self.exclusive).await
            }
            other => other,
        };
        if !mine {
            // The lease it claimed is replaced: its text never comes back.
            let _ = store.delete(&marker).await;
        }
        self.settle(written, false).await
    }

    /// What a write of this writer's lease ended in: the lease is taken, or
    /// another writer moved first and holds it, or took and released it
    /// already (`None`: try again).
    async fn settle(&self, written: Result<UpdateVersion>, free: bool) -> Result<Option<Take>> {
        match written {
            Ok(version) => {
                release_at_exit(self.store, self.root, self.me);
                Ok(Some(Take::Taken(Taken { version, free })))
            }
            Err(Error::Conflict(_)) => Ok(read(self.store, self.root).await?.map(Take::Busy)),
            Err(e) => Err(e),
        }
    }
}

/// The marker that claims the replacement of one lease, named by a digest
/// of the lease's text.
fn takeover_marker(root: &Path, lease: &str) -> Path {
    use std::hash::{Hash, Hasher};
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    lease.hash(&mut digest);
    root.clone()
        .join(TURN_DIR)
        .join(format!("takeover-{:016x}", digest.finish()))
}

/// Creates `marker`, claiming the replacement of the lease `lease`: `false`
/// when another process claimed it first.
async fn claim_takeover(store: &Arc<dyn ObjectStore>, marker: &Path, lease: &str) -> Result<bool> {
    let put = store
        .put_opts(
            marker,
            PutPayload::from(lease.as_bytes().to_vec()),
            for_live_processes(PutMode::Create),
        )
        .await;
    match put {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => {
            // A claimer that died between its claim and its lease write
            // would block every later takeover: its claim expires.
            if let Ok(meta) = store.head(marker).await {
                let age = now_seconds() as i64 - meta.last_modified.timestamp();
                if age > 2 * TURN_SECONDS as i64 {
                    let _ = store.delete(marker).await;
                }
            }
            Ok(false)
        }
        Err(e) => Err(Error::store("claiming a stale writer lease", e)),
    }
}

/// How many times a writer reads the lease again when it changed under the
/// read before it gives up with a `conflict` (which DuckLake retries).
const LEASE_READ_ATTEMPTS: usize = 16;

/// The lease as stored now, if any.
pub async fn read(store: &Arc<dyn ObjectStore>, root: &Path) -> Result<Option<LeaseRecord>> {
    Ok(read_text(store, root)
        .await?
        .and_then(|text| LeaseRecord::parse(&text)))
}

async fn read_text(store: &Arc<dyn ObjectStore>, root: &Path) -> Result<Option<String>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match store.get(&lease_path(root)).await {
            Ok(found) => match found.bytes().await {
                Ok(text) => return Ok(Some(String::from_utf8_lossy(&text).to_string())),
                // Replaced by another writer while being read: read again.
                Err(_) if attempt < LEASE_READ_ATTEMPTS => continue,
                Err(e) => return Err(Error::store("reading the writer lease", e)),
            },
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Error::store("reading the writer lease", e)),
        }
    }
}

/// Extends `me`'s lease. `Error::Conflict` means another writer took it:
/// this writer must stop (SlateDB has fenced it, or will at its next write).
pub async fn renew(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    me: &Holder,
    exclusive: bool,
    last: &UpdateVersion,
) -> Result<UpdateVersion> {
    let path = lease_path(root);
    match write(store, &path, me, exclusive, PutMode::Update(last.clone())).await {
        Err(Error::Unsupported(_)) => {
            // No If-Match here (the local filesystem): look before writing.
            match read(store, root).await? {
                Some(record) if record.is_held_by(me) => {}
                _ => return Err(Error::Conflict("the writer lease was taken over".into())),
            }
            write_unconditionally(store, &path, me, exclusive).await
        }
        other => other,
    }
}

/// A lease this process holds: the store it is in, the store's root, and
/// the writer holding it.
type HeldLease = (Arc<dyn ObjectStore>, Path, Holder);

/// Leases this process holds, released by the exit handler.
fn held() -> &'static Mutex<Vec<HeldLease>> {
    static HELD: OnceLock<Mutex<Vec<HeldLease>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(Vec::new()))
}

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

fn release_at_exit(store: &Arc<dyn ObjectStore>, root: &Path, me: &Holder) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a plain function with the C runtime; it never unwinds.
        unsafe { atexit(release_all_at_exit) };
    });
    if let Ok(mut held) = held().lock() {
        if !held.iter().any(|(_, r, h)| r == root && h == me) {
            held.push((store.clone(), root.clone(), me.clone()));
        }
    }
}

/// Runs when the process exits without closing its databases: removes
/// every lease still held, within a short deadline. The exiting thread's
/// thread-locals (tokio's context among them) may already be gone, so the
/// work runs on a fresh thread with a runtime of its own.
extern "C" fn release_all_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let leases = match held().lock() {
            Ok(mut held) => std::mem::take(&mut *held),
            Err(_) => return,
        };
        if leases.is_empty() {
            return;
        }
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("moraine-lease-release".into())
            .spawn(move || {
                if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    runtime.block_on(async {
                        for (store, root, me) in leases {
                            let _ = tokio::time::timeout(
                                Duration::from_secs(2),
                                release(&store, &root, &me),
                            )
                            .await;
                        }
                    });
                }
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = finished.recv_timeout(Duration::from_secs(5));
        }
    });
}

pub fn in_use(uri: &str, holder: &str) -> Error {
    Error::InvalidArgument(format!(
        "moraine store {uri} is in use by another writer ({holder}); attach it with READ_ONLY to read, \
         or wait for the writer to detach. After a crash the lease expires within {LEASE_SECONDS} s; the \
         attach option force_takeover 1 takes over at once. A writer attached with exclusive_writer 1 \
         shares the store with no other writer"
    ))
}

/// Writes `me`'s lease with the given precondition. A lease that changed
/// since it was read means another writer moved first (`Error::Conflict`);
/// a store without If-Match says `Error::Unsupported` for an update.
async fn write(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    me: &Holder,
    exclusive: bool,
    mode: PutMode,
) -> Result<UpdateVersion> {
    let body = PutPayload::from(LeaseRecord::render(me, exclusive).into_bytes());
    let update = matches!(mode, PutMode::Update(_));
    match store.put_opts(path, body, for_live_processes(mode)).await {
        Ok(result) => Ok(UpdateVersion {
            e_tag: result.e_tag,
            version: result.version,
        }),
        Err(object_store::Error::NotImplemented { .. }) if update => Err(Error::Unsupported(
            "this object store has no conditional update".into(),
        )),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Err(Error::Conflict("the writer lease changed".into())),
        Err(e) => Err(Error::store("writing the writer lease", e)),
    }
}

/// Writes `me`'s lease with no precondition, where the store has none to
/// offer and the caller has settled who may write.
async fn write_unconditionally(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    me: &Holder,
    exclusive: bool,
) -> Result<UpdateVersion> {
    let body = PutPayload::from(LeaseRecord::render(me, exclusive).into_bytes());
    let put = store
        .put_opts(path, body, for_live_processes(PutMode::Overwrite))
        .await
        .map_err(|e| Error::store("writing the writer lease", e))?;
    Ok(UpdateVersion {
        e_tag: put.e_tag,
        version: put.version,
    })
}

/// Removes the lease if `me` holds it: a lease another writer took over is
/// theirs.
pub async fn release(store: &Arc<dyn ObjectStore>, root: &Path, me: &Holder) {
    if give_up(store, root, me).await {
        let _ = store.delete(&lease_path(root)).await;
    }
}

/// Stops holding the lease at exit, and says whether `me` still holds it.
async fn give_up(store: &Arc<dyn ObjectStore>, root: &Path, me: &Holder) -> bool {
    if let Ok(mut held) = held().lock() {
        held.retain(|(_, r, h)| !(r == root && h == me));
    }
    matches!(read(store, root).await, Ok(Some(record)) if record.is_held_by(me))
}

/// Gives up a lease that `me` took over but whose writer never opened,
/// without making it free: the lease is rewritten as expired, so the next
/// writer takes it over at once and keeps its fence. Removing the lease
/// would tell that writer the holder before `me` had stopped, and that
/// holder may be a stalled writer whose fence `me` never wrote.
pub async fn expire(store: &Arc<dyn ObjectStore>, root: &Path, me: &Holder, exclusive: bool) {
    if !give_up(store, root, me).await {
        return;
    }
    let body = LeaseRecord::render_until(me, exclusive, 0);
    let _ = store
        .put_opts(
            &lease_path(root),
            PutPayload::from(body.into_bytes()),
            for_live_processes(PutMode::Overwrite),
        )
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn memory() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    /// The in-memory store, which has If-Match, and the local filesystem,
    /// which has only create-if-absent: `(local, store, its directory)`.
    fn stores_with_and_without_if_match() -> Vec<(bool, Arc<dyn ObjectStore>, tempfile::TempDir)> {
        [false, true]
            .into_iter()
            .map(|local| {
                let dir = tempfile::tempdir().unwrap();
                let store: Arc<dyn ObjectStore> = if local {
                    Arc::new(
                        object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap(),
                    )
                } else {
                    memory()
                };
                (local, store, dir)
            })
            .collect()
    }

    async fn put_lease(store: &Arc<dyn ObjectStore>, root: &Path, text: String) {
        store
            .put(&lease_path(root), text.into_bytes().into())
            .await
            .unwrap();
    }

    fn other_host_holder() -> Holder {
        Holder {
            pid: 1,
            instance: "other".into(),
            host: "another-host/0".into(),
            started: 1,
        }
    }

    async fn take(
        store: &Arc<dyn ObjectStore>,
        root: &Path,
        me: &Holder,
        exclusive: bool,
        force: bool,
    ) -> Result<Take> {
        LeaseClaim {
            store,
            root,
            uri: "memory://t",
            me,
            exclusive,
            force,
        }
        .try_take()
        .await
    }

    #[tokio::test]
    async fn a_live_exclusive_lease_refuses_every_writer_until_forced() {
        let (store, root) = (memory(), Path::from("catalog"));
        let until = now_seconds() + 20;
        // A lease of a build before the writer turn names no policy: exclusive.
        put_lease(&store, &root, format!("pid 1 (x) until {until}")).await;
        for exclusive in [false, true] {
            let err = take(&store, &root, &Holder::new_instance(), exclusive, false)
                .await
                .unwrap_err();
            assert!(
                err.to_string()
                    .contains("in use by another writer (pid 1 (x)"),
                "{err}"
            );
        }
        let forced = take(&store, &root, &Holder::new_instance(), false, true).await;
        assert_eq!(taken_free(&forced), Some(false), "{forced:?}");
    }

    #[tokio::test]
    async fn a_live_turn_is_asked_for_by_a_turn_writer_and_refused_to_an_exclusive_one() {
        let (store, root) = (memory(), Path::from("catalog"));
        let holder = other_host_holder();
        put_lease(&store, &root, LeaseRecord::render(&holder, false)).await;
        let busy = take(&store, &root, &Holder::new_instance(), false, false).await;
        assert!(
            matches!(&busy, Ok(Take::Busy(r)) if r.is_held_by(&holder) && !r.exclusive),
            "{busy:?}"
        );
        let refused = take(&store, &root, &Holder::new_instance(), true, false).await;
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("in use")),
            "{refused:?}"
        );
    }

    /// Whether a take took the lease, and then whether it was free.
    fn taken_free(take: &Result<Take>) -> Option<bool> {
        match take {
            Ok(Take::Taken(taken)) => Some(taken.free),
            _ => None,
        }
    }

    /// A store's root holding the lease of a writer on another host that
    /// expired long ago.
    async fn with_a_stale_lease(store: &Arc<dyn ObjectStore>) -> Path {
        let root = Path::from("catalog");
        let stale = format!("{} until 1 turn", other_host_holder().render());
        put_lease(store, &root, stale).await;
        root
    }

    #[tokio::test]
    async fn of_two_writers_replacing_one_stale_lease_exactly_one_wins() {
        for (local, store, _dir) in stores_with_and_without_if_match() {
            let root = with_a_stale_lease(&store).await;
            let (a, b) = (Holder::new_instance(), Holder::new_instance());
            let (ta, tb) = tokio::join!(
                take(&store, &root, &a, false, false),
                take(&store, &root, &b, false, false)
            );
            let won = [&ta, &tb]
                .iter()
                .filter(|t| matches!(t, Ok(Take::Taken(_))))
                .count();
            assert_eq!(won, 1, "local {local}: {ta:?} {tb:?}");
            let record = read(&store, &root).await.unwrap().unwrap();
            let winner = if matches!(ta, Ok(Take::Taken(_))) {
                &a
            } else {
                &b
            };
            assert!(record.is_held_by(winner), "local {local}: {record:?}");
        }
    }

    #[tokio::test]
    async fn a_dead_holder_on_this_host_is_taken_over_at_once() {
        let (store, root) = (memory(), Path::from("catalog"));
        let dead = Holder {
            pid: u32::MAX - 1,
            instance: "dead".into(),
            ..this_process().clone()
        };
        let until = now_seconds() + 25;
        put_lease(&store, &root, format!("{} until {until}", dead.render())).await;
        let me = Holder::new_instance();
        let taken = take(&store, &root, &me, true, false).await;
        assert_eq!(taken_free(&taken), Some(false), "{taken:?}");
        release(&store, &root, &me).await;
        assert!(read(&store, &root).await.unwrap().is_none(), "released");
        let next = take(&store, &root, &Holder::new_instance(), false, false).await;
        assert_eq!(
            taken_free(&next),
            Some(true),
            "a released lease is free: {next:?}"
        );
    }

    #[tokio::test]
    async fn a_lease_given_up_unopened_after_a_takeover_is_taken_over_again_not_free() {
        for (local, store, _dir) in stores_with_and_without_if_match() {
            let root = with_a_stale_lease(&store).await;
            let me = Holder::new_instance();
            let taken = take(&store, &root, &me, false, false).await;
            assert_eq!(taken_free(&taken), Some(false), "local {local}: {taken:?}");
            expire(&store, &root, &me, false).await;
            let next = take(&store, &root, &Holder::new_instance(), false, false).await;
            assert_eq!(
                taken_free(&next),
                Some(false),
                "local {local}: taken over at once, and not free: {next:?}"
            );
        }
    }

    #[tokio::test]
    async fn release_leaves_a_lease_another_writer_took_over() {
        let (store, root) = (memory(), Path::from("catalog"));
        let me = Holder::new_instance();
        take(&store, &root, &me, false, false).await.unwrap();
        put_lease(
            &store,
            &root,
            LeaseRecord::render(&other_host_holder(), false),
        )
        .await;
        release(&store, &root, &me).await;
        assert!(read(&store, &root).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_renewal_after_a_takeover_fails_and_writes_nothing() {
        for (local, store, _dir) in stores_with_and_without_if_match() {
            let root = Path::from("catalog");
            let me = Holder::new_instance();
            let Take::Taken(Taken { version, .. }) =
                take(&store, &root, &me, false, false).await.unwrap()
            else {
                panic!("an empty store's lease is free");
            };
            let newer = LeaseRecord::render(&other_host_holder(), false);
            put_lease(&store, &root, newer.clone()).await;
            let renewed = renew(&store, &root, &me, false, &version).await;
            assert!(
                matches!(renewed, Err(Error::Conflict(_))),
                "local {local}: {renewed:?}"
            );
            assert_eq!(read_text(&store, &root).await.unwrap(), Some(newer));
        }
    }

    #[test]
    fn a_holder_round_trips_and_old_leases_parse() {
        let me = Holder::new_instance();
        assert_eq!(Holder::parse(&me.render()).as_ref(), Some(&me));
        let old = Holder::parse("pid 7 (abc)").unwrap();
        assert_eq!((old.pid, old.host.as_str()), (7, ""));
        assert!(
            !old.is_gone_from_this_host(),
            "an unknown host is never judged"
        );
        let record = LeaseRecord::parse(&LeaseRecord::render(&me, false)).unwrap();
        assert!(record.is_held_by(&me) && !record.exclusive && record.is_live());
        assert!(LeaseRecord::parse("pid 7 (abc) until 5").unwrap().exclusive);
    }

    #[test]
    fn only_a_holder_of_this_host_that_no_longer_runs_is_gone() {
        let me = Holder::new_instance();
        assert!(!me.is_gone_from_this_host(), "this process runs");
        let recycled = Holder {
            started: me.started + 1,
            ..me.clone()
        };
        assert!(
            recycled.is_gone_from_this_host(),
            "a pid reused by a later process"
        );
        let elsewhere = Holder {
            host: "another-host/0".into(),
            pid: u32::MAX,
            ..me.clone()
        };
        assert!(!elsewhere.is_gone_from_this_host());
        let ended = Holder {
            pid: u32::MAX - 1,
            ..me
        };
        assert!(ended.is_gone_from_this_host(), "no such process");
    }

    #[test]
    fn a_holder_that_died_and_waits_to_be_reaped_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let holder = Holder {
            pid: child.id(),
            started: process_start(child.id()).expect("the child runs"),
            ..Holder::new_instance()
        };
        assert!(!holder.is_gone_from_this_host(), "the child still runs");
        let state = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while state(child.id()) != 'Z' {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(holder.is_gone_from_this_host(), "a zombie runs no more");
        child.wait().unwrap();
    }
}
