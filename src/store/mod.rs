//! The store: SlateDB over `object_store`, keys and value codecs.
//!
//! This layer knows bytes, keys and framed values. It knows nothing of
//! DuckLake: the catalog above it decides which kinds live where.

pub mod keys;
pub mod lease;
pub mod settings;
pub mod uri;
pub mod value;

use crate::error::{slate, Error, Result};
use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use slatedb::config::ScanOptions;
use slatedb::{Db, DbReader, DbSnapshot, DbTransaction, IsolationLevel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use settings::StoreSettings;
pub use uri::StoreUri;

/// Bulk scans fetch widely: the default (one block, one fetch) turns a cold
/// scan on S3 into thousands of sequential GETs.
fn bulk_scan() -> ScanOptions {
    ScanOptions {
        read_ahead_bytes: 8 << 20,
        max_fetch_tasks: 16,
        ..ScanOptions::default()
    }
}

enum Handle {
    Writer(Db),
    Reader(Box<DbReader>),
}

/// An opened store: one SlateDB database under one object-store prefix.
pub struct Store {
    handle: Handle,
    object_store: Arc<dyn ObjectStore>,
    root: Path,
    uri: StoreUri,
    /// Keys returned by reads through this handle, for load accounting.
    keys_read: AtomicU64,
    /// Renews the writer lease while a writer is open.
    lease: Option<tokio::task::JoinHandle<()>>,
}

pub type KeyValues = Vec<(Bytes, Bytes)>;

impl Store {
    pub async fn open(uri: &StoreUri, settings: &StoreSettings) -> Result<Store> {
        let object_store = uri.object_store()?;
        let root = uri.root_path();
        let handle = if settings.read_only {
            let reader = DbReader::builder(root.clone(), object_store.clone())
                .build()
                .await
                .map_err(|e| slate(&format!("opening {uri} read-only"), e))?;
            Handle::Reader(Box::new(reader))
        } else {
            lease::acquire(
                &object_store,
                &root,
                &uri.to_string(),
                settings.force_takeover,
            )
            .await?;
            let db = Db::builder(root.clone(), object_store.clone())
                .with_settings(settings.slatedb_settings(uri))
                .build()
                .await
                .map_err(|e| slate(&format!("opening {uri}"), e))?;
            Handle::Writer(db)
        };
        let lease =
            (!settings.read_only).then(|| lease::keep_alive(object_store.clone(), root.clone()));
        Ok(Store {
            handle,
            object_store,
            root,
            uri: uri.clone(),
            keys_read: AtomicU64::new(0),
            lease,
        })
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

    pub fn is_read_only(&self) -> bool {
        matches!(self.handle, Handle::Reader(_))
    }

    pub fn writer(&self) -> Result<&Db> {
        match &self.handle {
            Handle::Writer(db) => Ok(db),
            Handle::Reader(_) => Err(Error::InvalidArgument(
                "this moraine catalog is attached READ_ONLY; writes are refused".into(),
            )),
        }
    }

    /// A consistent read view: every read through it sees one point in time.
    pub fn snapshot(&self) -> Result<ReadView> {
        match &self.handle {
            Handle::Writer(db) => Ok(ReadView::Snapshot(
                db.snapshot().map_err(|e| slate("taking a snapshot", e))?,
            )),
            Handle::Reader(_) => Ok(ReadView::Reader),
        }
    }

    pub async fn get(&self, view: &ReadView, key: &[u8]) -> Result<Option<Bytes>> {
        let ctx = || format!("reading key {key:02x?}");
        self.keys_read.fetch_add(1, Ordering::Relaxed);
        match (view, &self.handle) {
            (ReadView::Snapshot(s), _) => s.get(key).await.map_err(|e| slate(&ctx(), e)),
            (ReadView::Reader, Handle::Reader(r)) => r.get(key).await.map_err(|e| slate(&ctx(), e)),
            (ReadView::Reader, Handle::Writer(db)) => {
                db.get(key).await.map_err(|e| slate(&ctx(), e))
            }
        }
    }

    pub async fn scan_prefix(&self, view: &ReadView, prefix: &[u8]) -> Result<KeyValues> {
        let ctx = || format!("scanning prefix {prefix:02x?}");
        let mut iter = match (view, &self.handle) {
            (ReadView::Snapshot(s), _) => {
                s.scan_prefix_with_options(prefix, .., &bulk_scan()).await
            }
            (ReadView::Reader, Handle::Reader(r)) => {
                r.scan_prefix_with_options(prefix, .., &bulk_scan()).await
            }
            (ReadView::Reader, Handle::Writer(db)) => {
                db.scan_prefix_with_options(prefix, .., &bulk_scan()).await
            }
        }
        .map_err(|e| slate(&ctx(), e))?;
        let mut out = Vec::new();
        while let Some(kv) = iter.next().await.map_err(|e| slate(&ctx(), e))? {
            out.push((kv.key, kv.value));
        }
        self.keys_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Starts a write transaction. Its reads see its own writes.
    pub fn begin(&self) -> Result<StoreTxn> {
        let tx = self
            .writer()?
            .begin(IsolationLevel::Snapshot)
            .map_err(|e| slate("beginning a transaction", e))?;
        Ok(StoreTxn { tx })
    }

    /// Commits and waits until the batch is durable in object storage, so an
    /// acknowledged commit survives a crash.
    pub async fn commit(&self, txn: StoreTxn) -> Result<()> {
        let db = self.writer()?;
        let handle = txn.tx.commit().await.map_err(|e| slate("committing", e))?;
        if let Some(handle) = handle {
            db.flush()
                .await
                .map_err(|e| slate("flushing the commit", e))?;
            handle
                .await_durable()
                .await
                .map_err(|e| slate("awaiting durability", e))?;
        }
        Ok(())
    }

    pub async fn close(&self) -> Result<()> {
        match &self.handle {
            Handle::Writer(db) => {
                let closed = db.close().await.map_err(|e| slate("closing", e));
                if let Some(renewal) = &self.lease {
                    renewal.abort();
                }
                lease::release(&self.object_store, &self.root).await;
                closed
            }
            Handle::Reader(r) => r.close().await.map_err(|e| slate("closing", e)),
        }
    }
}

pub enum ReadView {
    Snapshot(Arc<DbSnapshot>),
    /// Read-only attaches read the reader's latest state.
    Reader,
}

/// A SlateDB transaction: buffered writes, reads through itself, and
/// write-write conflict detection at commit.
pub struct StoreTxn {
    tx: DbTransaction,
}

impl StoreTxn {
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.tx
            .get(key)
            .await
            .map_err(|e| slate(&format!("reading key {key:02x?}"), e))
    }

    pub async fn scan_prefix(&self, prefix: &[u8]) -> Result<KeyValues> {
        let ctx = || format!("scanning prefix {prefix:02x?}");
        let mut iter = self
            .tx
            .scan_prefix_with_options(prefix, .., &bulk_scan())
            .await
            .map_err(|e| slate(&ctx(), e))?;
        let mut out = Vec::new();
        while let Some(kv) = iter.next().await.map_err(|e| slate(&ctx(), e))? {
            out.push((kv.key, kv.value));
        }
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
        if let Some(renewal) = &self.lease {
            renewal.abort();
        }
    }
}
