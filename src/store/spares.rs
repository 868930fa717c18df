//! Deleted files kept, emptied, as the next writes' files: one pool per
//! folder of a local store.
//!
//! Every commit writes a new WAL object and SlateDB's garbage collector
//! later deletes it, so on the local file system a catalog frees one inode
//! and allocates another per commit. ext4 without a journal (these
//! machines) will not hand out an inode freed in the last one to six
//! minutes: its allocator steps over each one, reading its inode block, so
//! once a few thousand deletions have piled up in a block group, by the
//! collector or by any other program there, creating a file costs 0.3 to
//! 1.5 ms instead of 15 µs (profiled: `recently_deleted` under
//! `ext4_create`).
//!
//! So a delete in one of SlateDB's folders that is written to again and
//! again renames the file into the folder's pool as `spare#<n>`, which
//! listings skip as they skip a staged write, and truncates it: the bytes go
//! back to the file system at once and only the inode is kept. A write
//! there takes a spare instead of creating a file, as databases recycle
//! their log segments.
//! Until the collector has deleted something (five minutes at the default
//! minimum age), and whenever the pool runs low, a write tops its folder up
//! to [`SPARES_AHEAD`] new files on tokio's blocking pool once it has
//! published, so the create runs between commits instead of inside one, as
//! databases make their next log file ahead. A pool holds at most
//! [`MOST_SPARES_PER_FOLDER`].
//!
//! A store that is dropped leaves [`SPARES_AHEAD`] spares of each folder
//! behind as `kept#0` to `kept#3` and removes the rest; the next store of
//! the location adopts them by renaming each to a spare name of its own, so
//! that of two processes one gets each file. The names are fixed so that
//! adopting them takes four renames, not a listing of the folder: the WAL
//! folder holds a fence from every session's open until the fences' minimum
//! age (a day), and listing it made the attach's cost follow the sessions.
//! A read-write attach writes a manifest and a WAL object before its first
//! commit, and without a spare each would create a file (1 ms instead of
//! 0.5 on these machines). A process that dies leaves
//! its spares behind, empty or zeros, under names nothing lists; no other process
//! takes a `spare#` name, which may be a live process's.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Enough for the WAL objects of one collector pass at a few hundred
/// commits a second; each costs an inode and no data.
pub const MOST_SPARES_PER_FOLDER: usize = 16_384;

/// New files a write keeps ready in its folder: one commit's worth, with
/// room for a flush's manifest and SST writes that come in a burst.
pub const SPARES_AHEAD: usize = 4;

/// Whether `folder` is one whose small creates go through its journal.
pub(super) fn is_journaled(folder: &Path) -> bool {
    folder_name(folder).is_some_and(|name| super::layout::JOURNALED.contains(&name))
}

fn folder_name(folder: &Path) -> Option<&str> {
    folder.file_name().and_then(|name| name.to_str())
}

/// A folder keeps spares, recycled or made ahead, once this many writes
/// have published in it: the WAL is written at every commit, a folder of
/// SST or manifest objects that took one write may never take another.
const WRITES_BEFORE_RECYCLING: u32 = 2;

/// Whether `folder` is one of SlateDB's write-once folders: only there,
/// where an object is deleted by the collector after its minimum age, when
/// nothing reads it, can a deleted file's inode become another object's
/// without a reader seeing it.
/// moraine's writer lease and turn objects are rewritten under fixed names
/// and read while another writer replaces or deletes them, so a reader
/// that opened one before a recycle would read it short, or as the next
/// lease (fresh-clone CI failed two many-writer tests so).
fn holds_write_once_objects(folder: &Path) -> bool {
    folder_name(folder).is_some_and(|name| super::layout::WRITE_ONCE.contains(&name))
}

#[derive(Default)]
struct Folder {
    writes: u32,
    ready: Vec<PathBuf>,
    topping_up: bool,
    /// Whether the spares an earlier store left here were looked for.
    adopted: bool,
}

/// The name of the spare a dropped store left for the next one in slot
/// `slot`, one of [`SPARES_AHEAD`].
fn kept_name(slot: usize) -> String {
    format!("kept#{slot}")
}

impl Folder {
    fn hot(&self) -> bool {
        self.writes >= WRITES_BEFORE_RECYCLING
    }
}

pub struct Spares {
    folders: Mutex<HashMap<PathBuf, Folder>>,
    /// The numbers in spare names: distinct in this process, and started from
    /// the process id so two processes rarely try the same name.
    next: AtomicU64,
    closed: AtomicBool,
}

/// What a delete did with its file.
pub enum Deleted {
    Recycled,
    /// The folder keeps no spares: the caller removes the file.
    NotKept,
}

impl Spares {
    pub fn new() -> Spares {
        Spares {
            folders: Mutex::default(),
            next: AtomicU64::new(u64::from(std::process::id()) << 32),
            closed: AtomicBool::new(false),
        }
    }

    /// A spare of `folder`, open for writing (empty, or, left by a version
    /// that made them with a block, zeros that the write cuts off), or
    /// `None` when it has none.
    pub fn take(&self, folder: &Path) -> Option<(File, PathBuf)> {
        self.adopt_kept(folder);
        let spare = self.with_folder(folder, |f| f.ready.pop())??;
        // Someone may have removed it; the write then stages a file of its own.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&spare)
            .ok()?;
        Some((file, spare))
    }

    /// Counts a write that published in `folder`, and tops the folder's
    /// pool up to [`SPARES_AHEAD`] in the background. Called after the
    /// publish: a create holds the folder's lock, which the write's rename or
    /// link would wait for.
    pub fn published(self: &Arc<Self>, folder: &Path) {
        if !holds_write_once_objects(folder) {
            return;
        }
        let start = {
            let Ok(mut folders) = self.folders.lock() else {
                return;
            };
            let f = folders.entry(folder.to_path_buf()).or_default();
            f.writes = f.writes.saturating_add(1);
            let start = f.hot() && !f.topping_up && f.ready.len() < SPARES_AHEAD;
            f.topping_up |= start;
            start
        };
        if !start {
            return;
        }
        let (spares, folder) = (self.clone(), folder.to_path_buf());
        let work = move || spares.make_ahead(&folder);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(work)),
            Err(_) => work(),
        }
    }

    /// Takes the spares a dropped store left in `folder`, the first time
    /// this store writes there.
    fn adopt_kept(&self, folder: &Path) {
        if !holds_write_once_objects(folder) || self.closed.load(Ordering::SeqCst) {
            return;
        }
        {
            let Ok(mut folders) = self.folders.lock() else {
                return;
            };
            // Every write comes here: the folder's path is copied only once.
            match folders.get_mut(folder) {
                Some(f) => {
                    if std::mem::replace(&mut f.adopted, true) {
                        return;
                    }
                }
                None => {
                    let f = Folder {
                        adopted: true,
                        ..Folder::default()
                    };
                    folders.insert(folder.to_path_buf(), f);
                }
            }
        }
        for slot in 0..SPARES_AHEAD {
            let Some(spare) = self.fresh_name(folder) else {
                return;
            };
            // Another store of this location may have taken it first, or
            // none was left there.
            if std::fs::rename(folder.join(kept_name(slot)), &spare).is_ok()
                && self
                    .with_folder(folder, |f| f.ready.push(spare.clone()))
                    .is_none()
            {
                let _ = std::fs::remove_file(&spare);
            }
        }
    }

    fn make_ahead(&self, folder: &Path) {
        while self.with_folder(folder, |f| f.ready.len() < SPARES_AHEAD) == Some(true) {
            let Some(spare) = self.fresh_name(folder) else {
                break;
            };
            let made = OpenOptions::new().write(true).create_new(true).open(&spare);
            if made.is_err() {
                let _ = std::fs::remove_file(&spare);
                break;
            }
            if self.closed.load(Ordering::SeqCst)
                || self
                    .with_folder(folder, |f| f.ready.push(spare.clone()))
                    .is_none()
            {
                let _ = std::fs::remove_file(&spare);
                break;
            }
        }
        self.with_folder(folder, |f| f.topping_up = false);
    }

    /// A spare name in `folder` that nothing holds now.
    fn fresh_name(&self, folder: &Path) -> Option<PathBuf> {
        for _ in 0..64 {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let spare = folder.join(format!("spare#{n}"));
            match std::fs::symlink_metadata(&spare) {
                Err(e) if e.kind() == ErrorKind::NotFound => return Some(spare),
                _ => continue,
            }
        }
        None
    }

    fn with_folder<T>(&self, folder: &Path, f: impl FnOnce(&mut Folder) -> T) -> Option<T> {
        let mut folders = self.folders.lock().ok()?;
        folders.get_mut(folder).map(f)
    }

    /// Deletes the file at `path` into its folder's pool, if the folder
    /// keeps spares and has room. The object is gone once this returns
    /// `Recycled`; a missing file is `NotFound`, as a removal says.
    pub fn delete(&self, path: &Path) -> std::io::Result<Deleted> {
        let Some(folder) = path.parent() else {
            return Ok(Deleted::NotKept);
        };
        if !self.keeps(folder) || !std::fs::symlink_metadata(path)?.is_file() {
            return Ok(Deleted::NotKept);
        }
        // A name another process holds is skipped: rename would replace it.
        let Some(spare) = self.fresh_name(folder) else {
            return Ok(Deleted::NotKept);
        };
        std::fs::rename(path, &spare)?;
        // Emptied, so its bytes go back now; it cannot be the object any more.
        let emptied = OpenOptions::new()
            .write(true)
            .open(&spare)
            .and_then(|file| file.set_len(0));
        let kept = emptied.is_ok()
            && !self.closed.load(Ordering::SeqCst)
            && self
                .with_folder(folder, |f| f.ready.push(spare.clone()))
                .is_some();
        if !kept {
            let _ = std::fs::remove_file(&spare);
        }
        Ok(Deleted::Recycled)
    }

    fn keeps(&self, folder: &Path) -> bool {
        let Ok(folders) = self.folders.lock() else {
            return false;
        };
        folders
            .get(folder)
            .is_some_and(|f| f.hot() && f.ready.len() < MOST_SPARES_PER_FOLDER)
    }

    /// Leaves [`SPARES_AHEAD`] spares of each folder for the next store and
    /// removes the rest; one made in the background after this removes
    /// itself.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let ready: Vec<Vec<PathBuf>> = match self.folders.lock() {
            Ok(mut folders) => folders
                .values_mut()
                .map(|f| std::mem::take(&mut f.ready))
                .collect(),
            Err(_) => return,
        };
        for mut spares in ready {
            let leave = spares.split_off(spares.len().saturating_sub(SPARES_AHEAD));
            for spare in leave {
                if !self.leave(&spare) {
                    spares.push(spare);
                }
            }
            for spare in spares {
                let _ = std::fs::remove_file(spare);
            }
        }
    }

    /// Renames `spare` to the first kept slot nothing holds, without
    /// replacing a file (a link fails where a rename would not): another
    /// store of the location may have left its own there.
    fn leave(&self, spare: &Path) -> bool {
        let Some(folder) = spare.parent() else {
            return false;
        };
        (0..SPARES_AHEAD).any(|slot| {
            std::fs::hard_link(spare, folder.join(kept_name(slot))).is_ok()
                && std::fs::remove_file(spare).is_ok()
        })
    }

    #[cfg(test)]
    pub fn ready(&self, folder: &Path) -> usize {
        self.with_folder(folder, |f| f.ready.len()).unwrap_or(0)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Files in `folder`, staged, spare and published alike.
    pub(in crate::store) fn files_in(folder: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A pool with `SPARES_AHEAD` spares ready in a `wal` folder.
    fn hot_pool(wal: &Path) -> Arc<Spares> {
        let spares = Arc::new(Spares::new());
        // Outside a runtime the files made ahead are made on this thread.
        spares.published(wal);
        spares.published(wal);
        assert_eq!(spares.ready(wal), SPARES_AHEAD);
        spares
    }

    #[test]
    fn a_closed_pool_leaves_its_spares_ahead_and_keeps_no_deleted_file() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        std::fs::create_dir(&wal).unwrap();
        let spares = hot_pool(&wal);
        // More ready than a store leaves behind: a burst of deletes.
        for n in 0..3 {
            let object = wal.join(format!("0000000000000000000{n}.sst"));
            std::fs::write(&object, "commit").unwrap();
            assert!(matches!(spares.delete(&object), Ok(Deleted::Recycled)));
        }
        spares.close();
        let object = wal.join("00000000000000000009.sst");
        std::fs::write(&object, "commit").unwrap();
        assert!(matches!(spares.delete(&object), Ok(Deleted::Recycled)));
        let left = files_in(&wal);
        assert_eq!(left.len(), SPARES_AHEAD, "{left:?}");
        let slots: Vec<String> = (0..SPARES_AHEAD).map(kept_name).collect();
        assert!(left.iter().all(|n| slots.contains(n)), "{left:?}");
    }

    #[test]
    fn two_closed_pools_share_the_kept_slots_without_replacing_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        std::fs::create_dir(&wal).unwrap();
        let (first, second) = (hot_pool(&wal), hot_pool(&wal));
        first.close();
        // The slots are full: the second pool's spares are removed, not
        // put over the first's.
        second.close();
        let left = files_in(&wal);
        assert_eq!(left.len(), SPARES_AHEAD, "{left:?}");
        let adopting = Spares::new();
        assert!(adopting.take(&wal).is_some());
        assert_eq!(adopting.ready(&wal), SPARES_AHEAD - 1);
    }

    #[test]
    fn the_next_pool_adopts_what_a_closed_one_left_and_only_once() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        std::fs::create_dir(&wal).unwrap();
        hot_pool(&wal).close();
        let (first, second) = (Spares::new(), Spares::new());
        let (file, spare) = first.take(&wal).expect("an adopted spare");
        drop(file);
        assert!(spare
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("spare#"));
        assert_eq!(first.ready(&wal), SPARES_AHEAD - 1);
        // Every kept file went to the first pool that looked.
        assert!(second.take(&wal).is_none());
        assert!(files_in(&wal).iter().all(|n| n.starts_with("spare#")));
    }
}
