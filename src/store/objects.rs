//! Reading every object of a store on its own, so that a damaged one is
//! named. A read through the database only says that *some* object failed to
//! decode; an operator needs to know which one to restore.
//!
//! Only reads: manifests through SlateDB's admin reader, compacted SSTs block
//! by block through its SST reader, WAL objects entry by entry through its
//! WAL reader. An object that disappears between the listing and the read was
//! collected by the writer's garbage collector and is not damage.

use super::layout;
use crate::error::{panic_text, Error, Result};
use futures_util::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use slatedb::admin::Admin;
use slatedb::{SstReader, WalReader};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// An object of the store that SlateDB cannot read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedObject {
    /// The object's full path in the object store.
    pub path: String,
    pub problem: String,
}

/// What a check of the objects saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectReport {
    pub manifests: u64,
    pub ssts: u64,
    pub wal_objects: u64,
    pub damaged: Vec<DamagedObject>,
}

/// The object kinds a check reads, told apart by the folder SlateDB keeps
/// them in and the number in their name.
enum Object {
    Manifest(u64),
    Sst(ulid::Ulid),
    Wal(u64),
}

fn classify(root: &Path, path: &Path) -> Option<Object> {
    let relative: Vec<_> = path.prefix_match(root)?.collect();
    let [folder, file] = relative.as_slice() else {
        return None;
    };
    let (stem, extension) = file.as_ref().rsplit_once('.')?;
    match (folder.as_ref(), extension) {
        (layout::MANIFEST, "manifest") => stem.parse().ok().map(Object::Manifest),
        (layout::COMPACTED, "sst") => ulid::Ulid::from_string(stem).ok().map(Object::Sst),
        (layout::WAL, "sst") => stem.parse().ok().map(Object::Wal),
        _ => None,
    }
}

/// Reads every manifest, compacted SST and WAL object under `root`.
pub async fn check_objects(
    object_store: &Arc<dyn ObjectStore>,
    root: &Path,
) -> Result<ObjectReport> {
    let mut paths = Vec::new();
    let mut listing = object_store.list(Some(root));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(|e| Error::store(format!("listing {root}"), e))?;
        paths.push(meta.location);
    }
    let admin = Admin::builder(root.clone(), object_store.clone()).build();
    let ssts = SstReader::new(root.clone(), object_store.clone(), None, None);
    let wal = WalReader::new(root.clone(), object_store.clone());
    let mut report = ObjectReport::default();
    for path in paths {
        let Some(object) = classify(root, &path) else {
            continue;
        };
        // SlateDB panics on some damaged manifests; that is damage, not a crash.
        let read = AssertUnwindSafe(async {
            match object {
                Object::Manifest(id) => {
                    report.manifests += 1;
                    admin.read_manifest(Some(id)).await.map(|_| ())
                }
                Object::Sst(id) => {
                    report.ssts += 1;
                    read_sst(&ssts, id).await
                }
                Object::Wal(id) => {
                    report.wal_objects += 1;
                    read_wal(&wal, id).await
                }
            }
        })
        .catch_unwind()
        .await;
        let problem = match read {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("SlateDB could not decode it ({})", panic_text(&*panic)),
        };
        if collected(object_store, &path).await {
            continue;
        }
        report.damaged.push(DamagedObject {
            path: path.to_string(),
            problem,
        });
    }
    Ok(report)
}

async fn read_sst(reader: &SstReader, id: ulid::Ulid) -> std::result::Result<(), slatedb::Error> {
    let sst = reader.open(id).await?;
    let blocks = sst.index().await?.len();
    for block in 0..blocks {
        sst.read_block(block).await?;
    }
    Ok(())
}

async fn read_wal(reader: &WalReader, id: u64) -> std::result::Result<(), slatedb::Error> {
    let mut entries = reader.get(id).iterator().await?;
    while entries.next().await?.is_some() {}
    Ok(())
}

/// Whether an object that failed to read is simply gone (garbage-collected
/// after the listing).
async fn collected(object_store: &Arc<dyn ObjectStore>, path: &Path) -> bool {
    matches!(
        object_store.head(path).await,
        Err(object_store::Error::NotFound { .. })
    )
}
