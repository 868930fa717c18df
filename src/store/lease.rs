//! The writer lease: a second read-write attach fails fast instead of
//! fencing the first.
//!
//! SlateDB fences by "newest opener wins", so two read-write processes would
//! take turns killing each other. Before opening a writer, moraine reads
//! `<root>/writer.lease`; a lease held by another process that has not
//! expired refuses the attach with a message that says how to read instead.
//! A live writer renews its lease every third of the lease time, and removes
//! it on close. Takeover rule: a writer that crashed leaves its lease behind,
//! and a new writer may take over once it expires (`LEASE_SECONDS`), or at
//! once with the attach option `force_takeover 1`. Lease writes are
//! conditional (If-None-Match / If-Match) where the store supports them, so of
//! two processes attaching at the same moment one loses at once; on the local
//! filesystem, which has no If-Match, they are not. Either way SlateDB's
//! fencing stays the safety net: a fenced writer writes nothing.

use crate::error::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const LEASE_SECONDS: u64 = 30;

/// This process's identity in a lease: re-attaching in the same process is
/// not a second writer.
fn owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| format!("pid {} ({})", std::process::id(), uuid::Uuid::new_v4()))
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
                if !force && holder != owner() && expires > now_seconds() {
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
        written => written,
    }
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
        let text = format!("{} until {}", owner(), now_seconds() + LEASE_SECONDS);
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

pub async fn release(store: &Arc<dyn ObjectStore>, root: &Path) {
    let _ = store.delete(&lease_path(root)).await;
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
        assert!(String::from_utf8_lossy(&text).starts_with(owner()));
    }
}
