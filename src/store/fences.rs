//! WAL fences that turn nobody away, deleted by the writers that pass them
//! ([design 0025]).
//!
//! Every SlateDB writer's open writes an empty WAL object, a fence, at the
//! next WAL position, so that the writer before it fails if it still meant
//! to write there. That writer can only still be running when the lease was
//! taken over from it; a lease that was free was released by a holder whose
//! writer had stopped. So a writer that took a free lease wrote a fence that
//! guards nothing, and so did every such writer since the replay point last
//! moved:
//! - a writer that takes over a stale lease moves the replay point past its
//!   own fence as soon as it opens (`WriterTurn::open_writer_for`), so a fence that
//!   guards a stalled writer never lies after the replay point;
//! - a writer that took a free lease, when it closes, deletes the empty WAL
//!   objects that lay between the replay point and the next WAL position at
//!   its open, once the replay point has passed them. Above the replay point
//!   nothing is deleted: SlateDB finds the next WAL position by probing for
//!   the last object after it, and a gap there would hide the objects after
//!   the gap.
//!
//! What this leaves is one fence per takeover, which the collection takes
//! after `META_WAL_FENCE_MIN_AGE_SECONDS` (design 0024), and the fences of
//! the sessions since the replay point last moved. Without it a lake kept a
//! fence per session for a day, and every open and close listed them all.
//!
//! [design 0025]: ../../docs/design/0025-fences-that-turn-nobody-away.md

use super::layout;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use slatedb::Db;
use std::sync::Arc;

/// The WAL positions a writer that took a free lease found between the
/// replay point and the next position when it opened: its own fence, the
/// fences of the sessions before it that wrote nothing, and the WAL
/// objects it replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpentFences {
    /// The replay point at the open; positions after it are candidates.
    after: u64,
    /// The last position the open may have written: SlateDB's next WAL
    /// position once it opened, which is the fence's own (the fence is not
    /// counted until the first write after it), or the position after it.
    through: u64,
}

impl SpentFences {
    /// What a writer just opened, having found the lease free, may later
    /// delete.
    pub fn at_open(db: &Db) -> SpentFences {
        let manifest = db.manifest();
        SpentFences {
            after: manifest.replay_after_wal_id(),
            through: manifest.next_wal_sst_id(),
        }
    }

    /// These positions without those `earlier` holds already: a writer
    /// opened before the replay point moved finds the same ones again.
    pub fn beyond(self, earlier: &SpentFences) -> Option<SpentFences> {
        let after = self.after.max(earlier.through);
        (after < self.through).then_some(SpentFences {
            after,
            through: self.through,
        })
    }

    /// Deletes the empty WAL objects among these positions that lie at or
    /// before `replay_after`, the replay point once the writer has closed,
    /// and returns the positions the replay point has not passed yet: they
    /// wait for a later close of this process, or for whichever writer
    /// passes them next. Failures are left to the collection: a fence that
    /// stays costs a listing entry, not correctness.
    pub async fn retire(
        self,
        object_store: &Arc<dyn ObjectStore>,
        root: &Path,
        replay_after: u64,
    ) -> Option<SpentFences> {
        let last = replay_after.min(self.through);
        let first = self
            .after
            .saturating_add(1)
            .max(last.saturating_sub(MOST_POSITIONS - 1));
        futures_util::stream::iter(first..=last)
            .for_each_concurrent(CONCURRENT_LOOKS, |position| async move {
                let path = wal_object(root, position);
                let is_fence = matches!(object_store.head(&path).await, Ok(meta) if meta.size == 0);
                if is_fence {
                    let _ = object_store.delete(&path).await;
                }
            })
            .await;
        (replay_after < self.through).then_some(SpentFences {
            after: self.after.max(replay_after),
            through: self.through,
        })
    }
}

/// How many positions before the replay point one close looks at, nearest
/// first: the fences of sessions that wrote nothing gather there, at most
/// about as many as a close lets wait before it moves the replay point, and
/// anything older is left to the collection.
const MOST_POSITIONS: u64 = 64;

/// Looks and deletes in flight at once: on S3 each is a request.
const CONCURRENT_LOOKS: usize = 8;

/// SlateDB's name for the WAL object at `position`.
fn wal_object(root: &Path, position: u64) -> Path {
    root.clone()
        .join(layout::WAL)
        .join(format!("{position:020}.sst"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    async fn objects(store: &Arc<dyn ObjectStore>, root: &Path) -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        for position in 1..=12 {
            if let Ok(meta) = store.head(&wal_object(root, position)).await {
                found.push((position, meta.size));
            }
        }
        found
    }

    #[tokio::test]
    async fn only_empty_objects_the_replay_point_has_passed_go() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let root = Path::from("catalog");
        for position in 5..=10 {
            let body = if position == 7 {
                vec![1u8; 40]
            } else {
                Vec::new()
            };
            store
                .put(&wal_object(&root, position), PutPayload::from(body))
                .await
                .unwrap();
        }
        let spent = SpentFences {
            after: 4,
            through: 10,
        };
        let left = spent.retire(&store, &root, 8).await;
        assert_eq!(
            objects(&store, &root).await,
            vec![(7, 40), (9, 0), (10, 0)],
            "a commit's object stays, and so does every position after the replay point"
        );
        assert_eq!(
            left,
            Some(SpentFences {
                after: 8,
                through: 10
            })
        );
        let left = left.unwrap().retire(&store, &root, 12).await;
        assert_eq!(objects(&store, &root).await, vec![(7, 40)]);
        assert_eq!(left, None);
    }

    #[test]
    fn a_later_open_notes_only_the_positions_an_earlier_one_did_not() {
        let earlier = SpentFences {
            after: 4,
            through: 10,
        };
        let again = SpentFences {
            after: 4,
            through: 12,
        };
        let beyond = again.beyond(&earlier);
        assert_eq!(
            beyond,
            Some(SpentFences {
                after: 10,
                through: 12
            })
        );
        assert_eq!(earlier.beyond(&earlier), None);
    }
}
