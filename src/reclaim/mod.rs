//! Giving bytes back, and showing where they are.
//!
//! A delete in an LSM only writes a tombstone; the bucket shrinks after
//! compaction drops tombstones and superseded versions into the last sorted
//! run and garbage collection deletes the objects no manifest references.
//! [`reclaim`] drives both to completion on demand; [`audit`] reports live
//! logical bytes against physical bytes and flags unbounded growth.

pub mod audit;

use crate::error::{slate, Error, Result};
use crate::store::{layout, settings, upkeep, Store};
use object_store::ObjectStore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
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

    /// The bytes history can grow and collection can give back: all but the
    /// journals', files of a fixed size.
    pub fn history_bytes(&self) -> u64 {
        self.bytes() - self.by_type.get(JOURNAL_TYPE).map_or(0, |(_, b)| *b)
    }
}

/// The physical type of a local store's journals, the WAL's and the
/// manifests'.
const JOURNAL_TYPE: &str = "journal";

/// An object's physical type: by the SlateDB folder it lies in.
fn object_type(path: &str) -> &'static str {
    let folder = path.rsplit('/').nth(1);
    match folder {
        Some(layout::WAL) => "wal",
        Some(layout::COMPACTED) => "sst",
        Some(layout::MANIFEST) => "manifest",
        Some(layout::COMPACTIONS) => "compactions",
        _ => "other",
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
    if let Some(files) = store.journal_files() {
        usage.by_type.insert(JOURNAL_TYPE.to_string(), files);
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

/// How far a running [`reclaim`] has come, from 0 to 1000, for DuckDB's
/// progress bar. Written by the reclaim, read from any thread.
#[derive(Debug, Default)]
pub struct Progress(AtomicU32);

impl Progress {
    /// Done so far, as a fraction from 0 to 1.
    pub fn fraction(&self) -> f64 {
        f64::from(self.0.load(Ordering::Relaxed)) / 1000.0
    }

    fn reach(&self, permille: u32) {
        self.0.fetch_max(permille.min(1000), Ordering::Relaxed);
    }
}

/// How old an unreferenced object must be before reclaim's own collection
/// deletes it: the same floor the tests' attach options give SlateDB's.
const RECLAIM_MIN_AGE: Duration = Duration::from_secs(1);

/// Collection rounds after the tidy-up; one that frees nothing ends it.
const MAX_COLLECTION_ROUNDS: u32 = 4;

/// Flushes, compacts every run into the last one (with the urgent
/// compactor, so no step waits for a poll), collects garbage, and repeats
/// (bounded by `deadline`) until a round frees nothing.
pub async fn reclaim(
    store: &Store,
    deadline: Duration,
    progress: &Progress,
) -> Result<ReclaimReport> {
    let started = Instant::now();
    let before = physical_usage(store).await?;
    // The writer turn is held for the whole reclaim: its compactions and
    // collection run beside this process's writer, not another's.
    let pin = store.hold_writer().await?;
    // Expired snapshots' records still waiting for their purge go first,
    // so their bytes come back in this reclaim.
    crate::catalog::expiring::purge(store).await?;
    let db = pin.db();
    let admin = upkeep::admin(store.root(), store.object_store());
    let urgent = pin.compaction().urgent().await;
    let outcome = compact_and_collect(store, db, &admin, started, deadline, progress).await;
    urgent.end().await?;
    outcome?;
    let after = physical_usage(store).await?;
    progress.reach(1000);
    Ok(ReclaimReport {
        bytes_before: before.bytes(),
        bytes_after: after.bytes(),
        objects_deleted: before.objects().saturating_sub(after.objects()),
        elapsed: started.elapsed(),
    })
}

async fn compact_and_collect(
    store: &Store,
    db: &slatedb::Db,
    admin: &slatedb::admin::Admin,
    started: Instant,
    deadline: Duration,
    progress: &Progress,
) -> Result<()> {
    progress.reach(20);
    // Two full compactions: the first folds everything into the last run and
    // drops tombstones; by the second, the manifest's record of the oldest
    // live read has moved past the deletes, so the versions the first had to
    // keep for readers go too.
    upkeep::tidy(db, admin, started, deadline, |step| {
        progress.reach(20 + step * 100)
    })
    .await?;
    let mut compacted_at = Instant::now();
    let gc = settings::collection(store.uri(), None, RECLAIM_MIN_AGE, RECLAIM_MIN_AGE, None);
    let mut last = physical_usage(store).await?.bytes();
    for round in 0..MAX_COLLECTION_ROUNDS {
        // What the last merge replaced becomes collectable once it is older
        // than the collection's minimum age.
        let wait =
            (RECLAIM_MIN_AGE + Duration::from_millis(50)).saturating_sub(compacted_at.elapsed());
        if started.elapsed() + wait >= deadline {
            break;
        }
        tokio::time::sleep(wait).await;
        // Collect only what the writer's own view no longer references: its
        // manifest can lag the compactor's.
        upkeep::refresh(db).await?;
        admin
            .run_gc_once(gc.clone())
            .await
            .map_err(|e| slate("collecting garbage", e))?;
        progress.reach(400 + (round + 1) * 550 / MAX_COLLECTION_ROUNDS);
        let now_bytes = physical_usage(store).await?.bytes();
        if now_bytes >= last {
            break;
        }
        last = now_bytes;
        // A later L0 releases the newest compaction outputs to collection,
        // and merging it in again drops versions kept for a read that has
        // ended since the last merge.
        upkeep::nudge(db).await?;
        upkeep::compact_fully(db, admin, started, deadline).await?;
        compacted_at = Instant::now();
    }
    Ok(())
}
