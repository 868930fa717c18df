//! Giving bytes back, and showing where they are.
//!
//! A delete in an LSM only writes a tombstone; the bucket shrinks after
//! compaction drops tombstones and superseded versions into the last sorted
//! run and garbage collection deletes the objects no manifest references.
//! [`reclaim`] drives both to completion on demand; [`audit`] reports live
//! logical bytes against physical bytes and flags unbounded growth.

pub mod audit;

use crate::error::{slate, Error, Result};
use crate::store::Store;
use object_store::ObjectStore;
use slatedb::compactor::{CompactionSpec, SourceId};
use slatedb::config::{GarbageCollectorDirectoryOptions, GarbageCollectorOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Bytes and objects under the store's root, by object type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhysicalUsage {
    /// (object type → (objects, bytes)); types: wal, sst, manifest, compactions, other.
    pub by_type: BTreeMap<String, (u64, u64)>,
}

impl PhysicalUsage {
    pub fn bytes(&self) -> u64 {
        self.by_type.values().map(|(_, b)| b).sum()
    }

    pub fn objects(&self) -> u64 {
        self.by_type.values().map(|(n, _)| n).sum()
    }
}

fn object_type(path: &str) -> &'static str {
    if path.contains("/wal/") {
        "wal"
    } else if path.contains("/compacted/") {
        "sst"
    } else if path.contains("/manifest/") {
        "manifest"
    } else if path.contains("/compactions/") {
        "compactions"
    } else {
        "other"
    }
}

pub async fn physical_usage(store: &Store) -> Result<PhysicalUsage> {
    use futures_util::StreamExt;
    let mut usage = PhysicalUsage::default();
    let mut listing = store.object_store().list(Some(store.root()));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(|e| Error::store(format!("listing {}", store.root()), e))?;
        let entry = usage
            .by_type
            .entry(object_type(meta.location.as_ref()).to_string())
            .or_default();
        entry.0 += 1;
        entry.1 += meta.size;
    }
    Ok(usage)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub objects_deleted: u64,
    pub elapsed: Duration,
}

/// Makes the writer adopt the latest manifest now rather than at its next poll.
async fn refresh(db: &slatedb::Db) -> Result<()> {
    db.refresh_manifest()
        .await
        .map_err(|e| slate("refreshing the manifest", e))
}

/// Writes the reclaim marker and flushes it into a fresh L0.
async fn nudge(db: &slatedb::Db, started: Instant) -> Result<()> {
    db.put(
        crate::store::keys::SYS_RECLAIM,
        started.elapsed().as_millis().to_string().as_bytes(),
    )
    .await
    .map_err(|e| slate("writing the reclaim marker", e))?;
    crate::store::flush_writer_to_l0(db).await
}

/// Submits every L0 and sorted run into the oldest run and waits (bounded)
/// until the tree is one run. Returns whether there was anything to merge.
async fn full_compaction(
    db: &slatedb::Db,
    admin: &slatedb::admin::Admin,
    started: Instant,
    deadline: Duration,
) -> Result<bool> {
    let manifest = db.manifest();
    let mut sources: Vec<SourceId> = manifest
        .l0()
        .iter()
        .map(|view| SourceId::SstView(view.id))
        .collect();
    sources.extend(
        manifest
            .compacted()
            .iter()
            .map(|run| SourceId::SortedRun(run.id)),
    );
    // One sorted run and no L0: nothing to merge.
    if manifest.l0().is_empty() && sources.len() <= 1 {
        return Ok(false);
    }
    let destination = manifest
        .compacted()
        .iter()
        .map(|run| run.id)
        .min()
        .unwrap_or(0);
    admin
        .submit_compaction(CompactionSpec::new(sources, destination))
        .await
        .map_err(|e| slate("submitting a full compaction", e))?;
    while started.elapsed() < deadline {
        refresh(db).await?;
        let manifest = db.manifest();
        if manifest.l0().is_empty() && manifest.compacted().len() <= 1 {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(true)
}

/// Flushes, compacts every run into the last one, collects garbage, and
/// waits (bounded by `deadline`) until the physical size stops shrinking.
pub async fn reclaim(store: &Store, deadline: Duration) -> Result<ReclaimReport> {
    let started = Instant::now();
    let before = physical_usage(store).await?;
    // Holding the writer turn for the whole reclaim: its compactions and
    // collection run beside this process's writer, not another's.
    let pin = store.hold_writer().await?;
    let db = pin.db();
    crate::store::flush_writer_to_l0(db).await?;
    let admin =
        slatedb::admin::Admin::builder(store.root().clone(), store.object_store().clone()).build();
    // Two full compactions: the first folds everything into the last run and
    // drops tombstones; by the second, the manifest's record of the oldest
    // live read has moved past the deletes, so the versions the first had to
    // keep for readers go too. Each pass after the first starts from a fresh
    // L0, so it always merges; the first has nothing to do when the
    // background compactor already left one run, so then a third pass runs.
    let mut merged = 0;
    let mut pass = 0;
    while merged < 2 && pass < 3 {
        if pass > 0 {
            nudge(db, started).await?;
        }
        if full_compaction(db, &admin, started, deadline).await? {
            merged += 1;
        }
        pass += 1;
    }
    let now = GarbageCollectorDirectoryOptions {
        interval: None,
        min_age: Duration::from_secs(1),
        dry_run: false,
    };
    let gc = GarbageCollectorOptions {
        manifest_options: Some(now),
        wal_options: Some(now),
        wal_fence_options: None,
        compacted_options: Some(now),
        compactions_options: Some(now),
        boundary_files_enabled: !store.uri().is_local(),
        ..GarbageCollectorOptions::default()
    };
    let mut last = before.bytes();
    let mut stable_rounds = 0;
    while started.elapsed() < deadline && stable_rounds < 3 {
        // A later L0 releases the newest compaction outputs to collection,
        // and merging it in again drops versions kept for a read that has
        // ended since the last merge (how soon the manifest records that
        // varies, so a fixed number of merges is not always enough).
        nudge(db, started).await?;
        full_compaction(db, &admin, started, deadline).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        // Collect only what the writer's own view no longer references: its
        // manifest can lag the compactor's by a poll interval.
        refresh(db).await?;
        admin
            .run_gc_once(gc.clone())
            .await
            .map_err(|e| slate("collecting garbage", e))?;
        let now_bytes = physical_usage(store).await?.bytes();
        stable_rounds = if now_bytes >= last {
            stable_rounds + 1
        } else {
            0
        };
        last = now_bytes;
    }
    let after = physical_usage(store).await?;
    Ok(ReclaimReport {
        bytes_before: before.bytes(),
        bytes_after: after.bytes(),
        objects_deleted: before.objects().saturating_sub(after.objects()),
        elapsed: started.elapsed(),
    })
}
