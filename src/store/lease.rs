//! The writer lease: a second read-write attach fails fast instead of
//! fencing the first.
//!
//! SlateDB fences by "newest opener wins", so two read-write processes would
//! take turns killing each other. Before opening a writer, moraine reads
//! `<root>/writer.lease`; a lease held by another live process that has not
//! expired refuses the attach with a message that says how to read instead.
//! A live writer renews its lease every third of the lease time, and removes
//! it on close and when the process exits (an exit handler: DuckDB's CLI
//! exits after a failed statement without closing its databases).
//!
//! Takeover rule: a writer that crashed leaves its lease behind. When the
//! lease names a process on this same host that no longer runs (or whose
//! pid now belongs to a later process), a new writer takes over at once;
//! a holder on another host must let the lease expire (`LEASE_SECONDS`), or
//! the attach says `force_takeover 1`. Lease writes are conditional
//! (If-None-Match / If-Match) where the store supports them, so of two
//! processes attaching at the same moment one loses at once; on the local
//! filesystem, which has no If-Match, they are not. Either way SlateDB's
//! fencing stays the safety net: a fenced writer writes nothing.

use crate::error::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const LEASE_SECONDS: u64 = 30;

/// Who holds a lease: enough to tell, on the same host, whether the
/// holder still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
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
    fn render(&self) -> String {
        format!(
            "pid {} ({}) on {} started {}",
            self.pid, self.instance, self.host, self.started
        )
    }

    /// Reads `render`'s output; leases of older builds (no host) parse as
    /// a holder on an unknown host.
    fn parse(text: &str) -> Option<Holder> {
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

/// This process's identity in a lease: re-attaching in the same process is
/// not a second writer.
fn this_process() -> &'static Holder {
    static ME: OnceLock<Holder> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = std::process::id();
        Holder {
            pid,
            instance: uuid::Uuid::new_v4().to_string(),
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
/// when no such process runs.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // fields after its closing parenthesis.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
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

/// Takes the lease, or fails when another live writer holds it. Returns the
/// version written, which renewals build on.
pub async fn acquire(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    uri: &str,
    force: bool,
) -> Result<UpdateVersion> {
    let path = lease_path(root);
    let mode = match store.get(&path).await {
        Ok(found) => {
            let seen = UpdateVersion {
                e_tag: found.meta.e_tag.clone(),
                version: found.meta.version.clone(),
            };
            let text = found
                .bytes()
                .await
                .map_err(|e| Error::store("reading the writer lease", e))?;
            let text = String::from_utf8_lossy(&text);
            if let Some((holder, expires)) = text.rsplit_once(" until ") {
                let expires: u64 = expires.trim().parse().unwrap_or(0);
                let parsed = Holder::parse(holder);
                let mine = parsed
                    .as_ref()
                    .is_some_and(|h| h.instance == this_process().instance);
                let gone = parsed.as_ref().is_some_and(Holder::is_gone_from_this_host);
                if !force && !mine && !gone && expires > now_seconds() {
                    return Err(in_use(
                        uri,
                        &format!(
                            "{holder}, lease valid for {} more seconds",
                            expires - now_seconds()
                        ),
                    ));
                }
            }
            PutMode::Update(seen)
        }
        Err(object_store::Error::NotFound { .. }) => PutMode::Create,
        Err(e) => return Err(Error::store("reading the writer lease", e)),
    };
    match write(store, &path, mode).await {
        Err(Error::Conflict(_)) => Err(in_use(uri, "it attached at this same moment")),
        Ok(version) => {
            release_at_exit(store, root);
            Ok(version)
        }
        Err(e) => Err(e),
    }
}

/// A lease this process holds: the store it is in and the store's root.
type HeldLease = (Arc<dyn ObjectStore>, Path);

/// Leases this process holds, released by the exit handler.
fn held() -> &'static Mutex<Vec<HeldLease>> {
    static HELD: OnceLock<Mutex<Vec<HeldLease>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(Vec::new()))
}

extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

fn release_at_exit(store: &Arc<dyn ObjectStore>, root: &Path) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a plain function with the C runtime; it never unwinds.
        unsafe { atexit(release_all_at_exit) };
    });
    if let Ok(mut held) = held().lock() {
        held.push((store.clone(), root.clone()));
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
                        for (store, root) in leases {
                            let _ = tokio::time::timeout(
                                Duration::from_secs(2),
                                release(&store, &root),
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

fn in_use(uri: &str, holder: &str) -> Error {
    Error::InvalidArgument(format!(
        "moraine store {uri} is in use by another writer ({holder}); attach it with READ_ONLY to read, \
         or wait for the writer to detach. After a crash the lease expires within {LEASE_SECONDS} s; the \
         attach option force_takeover 1 takes over at once"
    ))
}

/// Writes this process's lease, conditionally where the store can: a lease
/// that changed since it was read means another writer moved first
/// (`Error::Conflict`). The local filesystem has no If-Match, so there the
/// write is unconditional and SlateDB's fencing settles a race.
async fn write(store: &Arc<dyn ObjectStore>, path: &Path, mode: PutMode) -> Result<UpdateVersion> {
    let body = || {
        let text = format!(
            "{} until {}",
            this_process().render(),
            now_seconds() + LEASE_SECONDS
        );
        PutPayload::from(text.into_bytes())
    };
    let written = match store.put_opts(path, body(), PutOptions::from(mode)).await {
        Err(object_store::Error::NotImplemented { .. }) => store.put(path, body()).await,
        other => other,
    };
    match written {
        Ok(result) => Ok(UpdateVersion {
            e_tag: result.e_tag,
            version: result.version,
        }),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Err(Error::Conflict("the writer lease changed".into())),
        Err(e) => Err(Error::store("writing the writer lease", e)),
    }
}

/// Removes the lease if this process holds it: a lease another writer took
/// over is theirs.
pub async fn release(store: &Arc<dyn ObjectStore>, root: &Path) {
    if let Ok(mut held) = held().lock() {
        let same = |s: &Arc<dyn ObjectStore>| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(store));
        held.retain(|(s, r)| !(same(s) && r == root));
    }
    let path = lease_path(root);
    if let Ok(found) = store.get(&path).await {
        if let Ok(text) = found.bytes().await {
            let text = String::from_utf8_lossy(&text);
            let holder = text
                .rsplit_once(" until ")
                .and_then(|(h, _)| Holder::parse(h));
            if holder.is_some_and(|h| h.instance != this_process().instance) {
                return;
            }
        }
    }
    let _ = store.delete(&path).await;
}

/// Renews the lease until the returned handle is aborted, or until another
/// writer has taken it over (then fencing ends this writer's commits).
pub fn keep_alive(
    store: Arc<dyn ObjectStore>,
    root: Path,
    written: UpdateVersion,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let path = lease_path(&root);
        let mut last = written;
        loop {
            tokio::time::sleep(Duration::from_secs(LEASE_SECONDS / 3)).await;
            match write(&store, &path, PutMode::Update(last.clone())).await {
                Ok(version) => last = version,
                Err(Error::Conflict(_)) => return,
                // A failed renewal is retried at the next tick.
                Err(_) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn memory() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[tokio::test]
    async fn a_live_lease_of_another_process_refuses_the_attach() {
        let store = memory();
        let root = Path::from("catalog");
        let until = now_seconds() + 20;
        store
            .put(
                &lease_path(&root),
                format!("pid 1 (x) until {until}").into_bytes().into(),
            )
            .await
            .unwrap();
        let err = acquire(&store, &root, "memory://t", false)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("in use by another writer (pid 1 (x)"),
            "{err}"
        );
        assert!(acquire(&store, &root, "memory://t", true).await.is_ok());
    }

    #[tokio::test]
    async fn a_lease_written_between_read_and_write_loses_the_race() {
        let store = memory();
        let root = Path::from("catalog");
        let path = lease_path(&root);
        // Both saw no lease; the other process wrote first.
        store.put(&path, "pid 2 (y) until 0".into()).await.unwrap();
        let lost = write(&store, &path, PutMode::Create).await;
        assert!(matches!(lost, Err(Error::Conflict(_))), "{lost:?}");
        // A renewal on a version someone else replaced also loses.
        let stale = UpdateVersion {
            e_tag: Some("stale".into()),
            version: None,
        };
        let lost = write(&store, &path, PutMode::Update(stale)).await;
        assert!(matches!(lost, Err(Error::Conflict(_))), "{lost:?}");
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over() {
        let store = memory();
        let root = Path::from("catalog");
        store
            .put(&lease_path(&root), "pid 3 (z) until 1".into())
            .await
            .unwrap();
        acquire(&store, &root, "memory://t", false).await.unwrap();
        let text = store
            .get(&lease_path(&root))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&text).starts_with(&this_process().render()));
    }

    #[test]
    fn a_holder_round_trips_and_old_leases_parse() {
        let me = this_process();
        assert_eq!(Holder::parse(&me.render()).as_ref(), Some(me));
        let old = Holder::parse("pid 7 (abc)").unwrap();
        assert_eq!((old.pid, old.host.as_str()), (7, ""));
        assert!(
            !old.is_gone_from_this_host(),
            "an unknown host is never judged"
        );
    }

    #[test]
    fn only_a_holder_of_this_host_that_no_longer_runs_is_gone() {
        let me = this_process().clone();
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

    #[tokio::test]
    async fn a_dead_holder_on_this_host_is_taken_over_at_once() {
        let store = memory();
        let root = Path::from("catalog");
        let dead = Holder {
            pid: u32::MAX - 1,
            instance: "dead".into(),
            ..this_process().clone()
        };
        let until = now_seconds() + 25;
        store
            .put(
                &lease_path(&root),
                format!("{} until {until}", dead.render())
                    .into_bytes()
                    .into(),
            )
            .await
            .unwrap();
        acquire(&store, &root, "memory://t", false).await.unwrap();
        release(&store, &root).await;
        assert!(store.get(&lease_path(&root)).await.is_err(), "released");
    }

    #[tokio::test]
    async fn release_leaves_a_lease_another_writer_took_over() {
        let store = memory();
        let root = Path::from("catalog");
        acquire(&store, &root, "memory://t", false).await.unwrap();
        store
            .put(&lease_path(&root), "pid 1 (other) until 1".into())
            .await
            .unwrap();
        release(&store, &root).await;
        assert!(store.get(&lease_path(&root)).await.is_ok());
    }
}
