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
//! once with the attach option `force_takeover 1`. SlateDB's fencing stays the
//! safety net: a fenced writer writes nothing.

use crate::error::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
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

/// Takes the lease, or fails when another live writer holds it.
pub async fn acquire(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    uri: &str,
    force: bool,
) -> Result<()> {
    let path = lease_path(root);
    if !force {
        if let Ok(found) = store.get(&path).await {
            let text = found
                .bytes()
                .await
                .map_err(|e| Error::store("reading the writer lease", e))?;
            let text = String::from_utf8_lossy(&text);
            if let Some((holder, expires)) = text.rsplit_once(" until ") {
                let expires: u64 = expires.trim().parse().unwrap_or(0);
                if holder != owner() && expires > now_seconds() {
                    return Err(Error::InvalidArgument(format!(
                        "moraine store {uri} is in use by another writer ({holder}, lease valid for {} more seconds); \
                         attach it with READ_ONLY to read, or wait for the writer to detach. After a crash the lease \
                         expires within {LEASE_SECONDS} s; the attach option force_takeover 1 takes over at once",
                        expires - now_seconds()
                    )));
                }
            }
        }
    }
    renew(store, root).await
}

pub async fn renew(store: &Arc<dyn ObjectStore>, root: &Path) -> Result<()> {
    let body = format!("{} until {}", owner(), now_seconds() + LEASE_SECONDS);
    store
        .put(&lease_path(root), PutPayload::from(body.into_bytes()))
        .await
        .map(|_| ())
        .map_err(|e| Error::store("writing the writer lease", e))
}

pub async fn release(store: &Arc<dyn ObjectStore>, root: &Path) {
    let _ = store.delete(&lease_path(root)).await;
}

/// Renews the lease until the returned handle is aborted.
pub fn keep_alive(store: Arc<dyn ObjectStore>, root: Path) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(LEASE_SECONDS / 3)).await;
            let _ = renew(&store, &root).await;
        }
    })
}
