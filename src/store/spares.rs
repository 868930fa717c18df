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
//! `ext4_create`). Making the files ahead on another thread only moves
//! that cost onto whatever else runs then.
//!
//! So a delete in a folder that is written to again and again renames the
//! file into the folder's pool as `spare#<n>`, which listings skip as they
//! skip a staged write, and truncates it: the bytes go back to the file
//! system at once and only the inode is kept. A write there takes a spare
//! instead of creating a file, as databases recycle their log segments. A
//! pool holds at most [`MOST_SPARES_PER_FOLDER`]; the store removes its
//! spares when it is dropped, and a process that dies leaves them behind,
//! empty, under names nothing lists.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Enough for the WAL objects of one collector pass at a few hundred
/// commits a second; each costs an inode and no data.
pub const MOST_SPARES_PER_FOLDER: usize = 16_384;

/// A folder keeps what is deleted from it once it has been written to this
/// often: the store's root and the lease folder are written to once or
/// twice, the WAL at every commit.
const WRITES_BEFORE_RECYCLING: u32 = 2;

#[derive(Default)]
struct Folder {
    writes: u32,
    ready: Vec<PathBuf>,
}

pub struct Spares {
    folders: Mutex<HashMap<PathBuf, Folder>>,
    /// The numbers in spare names: distinct in this process, and started from
    /// the process id so two processes rarely try the same name.
    next: AtomicU64,
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
        }
    }

    /// A spare of `folder`, empty and open for writing, or `None` when it
    /// has none. Counts the write either way.
    pub fn take(&self, folder: &Path) -> Option<(File, PathBuf)> {
        let spare = {
            let mut folders = self.folders.lock().ok()?;
            let entry = folders.entry(folder.to_path_buf()).or_default();
            entry.writes = entry.writes.saturating_add(1);
            entry.ready.pop()?
        };
        // Someone may have removed it; the write then stages a file of its own.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&spare)
            .ok()?;
        Some((file, spare))
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
        let spare = loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let spare = folder.join(format!("spare#{n}"));
            // A name another process holds is skipped: rename would replace it.
            match std::fs::symlink_metadata(&spare) {
                Err(e) if e.kind() == ErrorKind::NotFound => break spare,
                _ => continue,
            }
        };
        std::fs::rename(path, &spare)?;
        // Emptied, so its bytes go back now; it cannot be the object any more.
        let emptied = OpenOptions::new()
            .write(true)
            .open(&spare)
            .and_then(|file| file.set_len(0));
        let kept = emptied.is_ok()
            && self
                .folders
                .lock()
                .ok()
                .and_then(|mut folders| {
                    folders.get_mut(folder).map(|f| f.ready.push(spare.clone()))
                })
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
        folders.get(folder).is_some_and(|f| {
            f.writes >= WRITES_BEFORE_RECYCLING && f.ready.len() < MOST_SPARES_PER_FOLDER
        })
    }

    /// Removes every spare.
    pub fn close(&self) {
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
        self.folders
            .lock()
            .ok()
            .and_then(|folders| folders.get(folder).map(|f| f.ready.len()))
            .unwrap_or(0)
    }
}
