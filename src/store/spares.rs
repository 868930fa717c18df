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
//! [`MOST_SPARES_PER_FOLDER`]; the store removes its spares when it is
//! dropped, and a process that dies leaves them behind, empty, under names
//! nothing lists.

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

/// A folder keeps spares, recycled or made ahead, once this many writes
/// have published in it: the WAL is written at every commit, a folder of
/// SST or manifest objects that took one write may never take another.
const WRITES_BEFORE_RECYCLING: u32 = 2;

/// The folders SlateDB writes its objects to. Each object there is written
/// once under a name never used again, and deleted only by the collector
/// after its minimum age, when nothing reads it: only there can a deleted
/// file's inode become another object's without a reader seeing it.
/// moraine's writer lease and turn objects are rewritten under fixed names
/// and read while another writer replaces or deletes them, so a reader
/// that opened one before a recycle would read it short, or as the next
/// lease (fresh-clone CI failed two many-writer tests so).
const WRITE_ONCE_FOLDERS: [&str; 4] = ["wal", "compacted", "manifest", "compactions"];

fn holds_write_once_objects(folder: &Path) -> bool {
    folder
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| WRITE_ONCE_FOLDERS.contains(&name))
}

#[derive(Default)]
struct Folder {
    writes: u32,
    ready: Vec<PathBuf>,
    topping_up: bool,
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

    /// A spare of `folder`, empty and open for writing, or `None` when it
    /// has none.
    pub fn take(&self, folder: &Path) -> Option<(File, PathBuf)> {
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

    fn make_ahead(&self, folder: &Path) {
        while self.with_folder(folder, |f| f.ready.len() < SPARES_AHEAD) == Some(true) {
            let Some(spare) = self.fresh_name(folder) else {
                break;
            };
            let made = OpenOptions::new().write(true).create_new(true).open(&spare);
            if made.is_err() {
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

    /// Removes every spare; one made in the background after this removes
    /// itself.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let ready: Vec<PathBuf> = match self.folders.lock() {
            Ok(mut folders) => folders
                .values_mut()
                .flat_map(|f| std::mem::take(&mut f.ready))
                .collect(),
            Err(_) => return,
        };
        for spare in ready {
            let _ = std::fs::remove_file(spare);
        }
    }

    #[cfg(test)]
    pub fn ready(&self, folder: &Path) -> usize {
        self.with_folder(folder, |f| f.ready.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_after_close_keeps_no_spare() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        std::fs::create_dir(&wal).unwrap();
        let spares = Arc::new(Spares::new());
        let object = wal.join("00000000000000000001.sst");
        std::fs::write(&object, "commit").unwrap();
        // Outside a runtime the files made ahead are made on this thread.
        spares.published(&wal);
        spares.published(&wal);
        assert_eq!(spares.ready(&wal), SPARES_AHEAD);
        spares.close();
        assert!(matches!(spares.delete(&object), Ok(Deleted::Recycled)));
        let left: Vec<_> = std::fs::read_dir(&wal).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
