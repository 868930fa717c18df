//! A folder's journal on a local store: one cache flush per commit, and no
//! file made per commit. The WAL folder has one, and so does the manifest
//! folder, whose manifest every read-write attach writes to fence the
//! writer before it ([design 0029](../../docs/design/0029-manifests-journaled.md)).
//! What follows says WAL object; a manifest goes the same way.
//!
//! Publishing a WAL object durably takes two flushes of the disk's cache:
//! the object's bytes, then the folder that gained its name. DuckDB's own
//! catalog takes one, an append to a log file whose name is durable
//! already. So a commit's WAL object is appended, name and bytes, to this
//! journal (`wal/journal#0`, a file of [`JOURNAL_BYTES`] whose blocks were
//! written and synced when it was made) and the journal alone is synced.
//! The journal's write lands in a block the file owns, so its sync writes
//! no metadata ([design 0022](../../docs/design/0022-the-wal-journal.md)).
//!
//! The object's file is made later, in a batch, by whoever next looks at
//! the folder: a read, a listing, a delete or another write there, a close,
//! or the append that finds the journal full ([design
//! 0027](../../docs/design/0027-wal-objects-published-in-batches.md)). A
//! file made per commit cost an inode and a folder entry, which the next
//! commit's sync then had to write; in a batch, the folder's metadata is
//! written once for all of them. The header block keeps a mark, unsynced,
//! of where the records not yet published begin; every reader of the
//! folder publishes them first, under the journal's lock, so no reader
//! sees a WAL without an object the journal holds.
//!
//! What this risks is only what a crash of the machine loses: the page
//! cache. A process that dies leaves its files to the kernel, which writes
//! them, and its unpublished records to the next process that looks. So
//! the journal's header names the boot it was written in, and the first
//! open in a later boot restores every journaled object that is missing or
//! differs from its record, synced, before anything reads the folder. A
//! full journal publishes what it holds and starts a new epoch once
//! `syncfs` has made every object it covered durable.
//!
//! Every process that writes the folder appends under an `flock` on the
//! journal and checks that the name is free, as a file or as a record not
//! yet published, before it appends, so of two writers racing for one WAL
//! id (SlateDB's fencing) only one journals it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The journal's name in the WAL folder. Both listings skip a name that
/// ends in `#` and digits, as they skip a staged write.
pub const JOURNAL_NAME: &str = "journal#0";

/// The journal's size, made once: about 450 single-row commits between two
/// `syncfs`, for bytes that a small catalog's audit would otherwise notice.
pub const JOURNAL_BYTES: u64 = 256 << 10;

/// Objects up to this size are journaled; a larger one (a commit of many
/// rows) is published synced, as every object was before the journal.
pub const JOURNALED_OBJECT_BYTES: usize = 64 << 10;

/// The header's block: magic, epoch, boot, checksum, then the publication
/// mark. Records follow it.
const HEADER_BYTES: u64 = 4096;
/// Journals whose records are published in batches (design 0027).
const HEADER_MAGIC: &[u8; 8] = b"MORJRNL2";
/// Journals whose records were each published as they were appended, by
/// moraine before design 0027: every object they name has its file.
const PUBLISHED_AT_APPEND_MAGIC: &[u8; 8] = b"MORJRNL1";
const HEADER_LEN: usize = 36;

/// Where the header block keeps the publication mark: epoch, offset,
/// checksum. It is written without a sync: a crash of the machine that
/// loses it restores the whole epoch anyway, and a process that dies
/// before it writes one leaves records that are published again, where
/// their names are free.
const MARK_AT: usize = 64;
const MARK_LEN: usize = 20;

const RECORD_MAGIC: u32 = 0x4d4a_5231;
/// Records start at multiples of this, their lengths padded to it.
const RECORD_ALIGN: usize = 8;
/// magic, epoch, kind, three zero bytes, name length, body length, checksum.
const RECORD_HEAD: usize = 28;

/// What a record says of its name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// The object under the name holds the record's bytes.
    Object = 1,
    /// The object journaled before under the name was never published: a
    /// journal of the first version wrote this when a publish failed.
    Cancelled = 2,
}

/// The kernel's boot id, which changes when the machine restarts and so when
/// the page cache may have lost what it held; `None` where there is none,
/// and then nothing is journaled.
pub fn boot() -> Option<[u8; 16]> {
    static BOOT: OnceLock<Option<[u8; 16]>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        uuid::Uuid::parse_str(text.trim())
            .ok()
            .map(|id| *id.as_bytes())
    })
}

/// Writes one object into the folder.
pub type WriteObject = Arc<dyn Fn(&Path, &[u8]) -> std::io::Result<()> + Send + Sync>;

/// How a journal writes its objects as files.
#[derive(Clone)]
pub struct ObjectWriters {
    /// Synced, over whatever is there: a recovery's, for objects that were
    /// acknowledged.
    pub restore: WriteObject,
    /// Unsynced, failing with `AlreadyExists` where the name is taken: a
    /// publication's, whose bytes the synced journal holds.
    pub publish: WriteObject,
}

pub struct Journal {
    file: File,
    folder: PathBuf,
    boot: [u8; 16],
    writers: ObjectWriters,
    /// What this process believes of the journal, under the epoch it last
    /// read; another process's appends, publications and new epochs are
    /// read again under the lock.
    tail: Mutex<Tail>,
}

struct Tail {
    epoch: u64,
    /// Where the next record goes.
    offset: u64,
    /// Where the records of `epoch` that have no file yet begin.
    published: u64,
    /// The offset and name of each object record in `published..offset`.
    unpublished: Vec<(u64, String)>,
}

impl Tail {
    /// Before any record of `epoch` is known: the first refresh finds them.
    fn of_epoch(epoch: u64) -> Tail {
        Tail {
            epoch,
            offset: HEADER_BYTES,
            published: HEADER_BYTES,
            unpublished: Vec::new(),
        }
    }
}

#[derive(Clone, Copy)]
struct Header {
    epoch: u64,
    boot: [u8; 16],
}

/// A header as it was read: its version tells whether its records may lack
/// their files.
#[derive(Clone, Copy)]
struct ReadHeader {
    header: Header,
    published_at_append: bool,
    /// Where the publication mark says unpublished records of `header`'s
    /// epoch begin; `None` when it is of another epoch or unreadable.
    mark: Option<u64>,
}

impl Journal {
    /// The journal of `folder` if it has one, with what a crash of the
    /// machine lost restored; `None` without one or where it cannot be
    /// written (a read-only mount).
    pub fn open(folder: &Path, writers: ObjectWriters) -> std::io::Result<Option<Journal>> {
        let Some(boot) = boot() else {
            return Ok(None);
        };
        let path = folder.join(JOURNAL_NAME);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => return Ok(None),
            Err(e) => return Err(context(&path, e)),
        };
        // A journal is made whole before it gets its name, so any other
        // size is damage; read as it is, it failed on a short read.
        let size = file.metadata().map_err(|e| context(&path, e))?.len();
        if size != JOURNAL_BYTES {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!(
                    "the journal {} holds {size} bytes, not {JOURNAL_BYTES}: it was cut short or \
                     replaced, and the objects it holds cannot be read. Restore the lake's folder \
                     from a copy",
                    path.display()
                ),
            ));
        }
        let journal = Journal {
            file,
            folder: folder.to_path_buf(),
            boot,
            writers,
            // Epoch 0 is no journal's: the first refresh finds the tail.
            tail: Mutex::new(Tail::of_epoch(0)),
        };
        {
            let mut tail = journal.lock()?;
            let _held = journal.flock()?;
            journal.refresh(&mut tail)?;
        }
        Ok(Some(journal))
    }

    /// The journal of `folder`, made (its blocks written and synced, then
    /// linked in and the folder synced) unless another process made it first.
    pub fn create(folder: &Path, writers: ObjectWriters) -> std::io::Result<Journal> {
        if let Some(journal) = Journal::open(folder, writers.clone())? {
            return Ok(journal);
        }
        let boot = boot().ok_or_else(|| std::io::Error::other("this system has no boot id"))?;
        let path = folder.join(JOURNAL_NAME);
        let staged = folder.join(format!("journal-new#{}", std::process::id()));
        let made = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&staged)?;
            file.write_all(&header_block(Header { epoch: 1, boot }))?;
            let zeros = vec![0u8; 64 << 10];
            let mut left = JOURNAL_BYTES - HEADER_BYTES;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                file.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            file.sync_all()?;
            match std::fs::hard_link(&staged, &path) {
                Ok(()) => File::open(folder)?.sync_all(),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            }
        })();
        let _ = std::fs::remove_file(&staged);
        made.map_err(|e| context(&path, e))?;
        Journal::open(folder, writers)?
            .ok_or_else(|| context(&path, std::io::Error::other("made, then not found")))
    }

    /// Journals `name` in the journal's folder with `body`, synced; its
    /// file is made with the next batch. A name that exists already, as a
    /// file or as a record not yet published, is refused as
    /// `AlreadyExists` before anything is journaled.
    pub fn write(&self, name: &str, body: &[u8]) -> object_store::Result<()> {
        let mut tail = self.lock().map_err(|e| self.error(e))?;
        let _held = self.flock().map_err(|e| self.error(e))?;
        self.refresh(&mut tail).map_err(|e| self.error(e))?;
        let path = self.folder.join(name);
        let journaled = tail.unpublished.iter().any(|(_, n)| n == name);
        let exists = journaled
            || match std::fs::symlink_metadata(&path) {
                Ok(_) => true,
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(self.error(context(&path, e))),
            };
        if exists {
            return Err(object_store::Error::AlreadyExists {
                path: path.display().to_string(),
                source: "a WAL object of that name exists".into(),
            });
        }
        let at = self
            .append(&mut tail, Kind::Object, name, body)
            .map_err(|e| self.error(e))?;
        tail.unpublished.push((at, name.to_string()));
        Ok(())
    }

    /// Makes the file of every journaled object that has none yet, so the
    /// folder shows every object the journal holds: what a read, a listing
    /// or a delete in the folder does first.
    pub fn publish(&self) -> object_store::Result<()> {
        let mut tail = self.lock().map_err(|e| self.error(e))?;
        let _held = self.flock().map_err(|e| self.error(e))?;
        self.refresh(&mut tail)
            .and_then(|()| self.publish_unpublished(&mut tail))
            .map_err(|e| self.error(e))
    }

    fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, Tail>> {
        self.tail
            .lock()
            .map_err(|_| std::io::Error::other("the journal's lock is poisoned"))
    }

    /// The lock every process takes around an append or a batch.
    fn flock(&self) -> std::io::Result<Flock<'_>> {
        // SAFETY: `file` is an open descriptor for as long as the guard lives.
        let locked = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX) };
        if locked != 0 {
            return Err(context(&self.path(), std::io::Error::last_os_error()));
        }
        Ok(Flock(&self.file))
    }

    /// Reads the header and the records other processes appended, and
    /// restores the journaled objects if it was written in an earlier boot.
    /// Takes the flock's holder.
    fn refresh(&self, tail: &mut Tail) -> std::io::Result<()> {
        let read = self.header()?;
        if read.header.boot != self.boot {
            self.recover(read.header)?;
            *tail = Tail::of_epoch(read.header.epoch + 1);
            return Ok(());
        }
        if read.published_at_append {
            // Every object has its file; `syncfs` makes them durable before
            // the records that would restore them are given up.
            self.checkpoint(tail, read.header.epoch)?;
            return Ok(());
        }
        if read.header.epoch != tail.epoch {
            *tail = Tail::of_epoch(read.header.epoch);
        }
        if tail.offset == HEADER_BYTES || self.record_begins_at(tail.epoch, tail.offset)? {
            let (end, objects) = self.records_after(tail.epoch, tail.offset)?;
            tail.offset = end;
            tail.unpublished.extend(objects);
        }
        tail.published = read
            .mark
            .unwrap_or(HEADER_BYTES)
            .clamp(HEADER_BYTES, tail.offset);
        let published = tail.published;
        tail.unpublished.retain(|(at, _)| *at >= published);
        Ok(())
    }

    /// Restores every object the records of `header`'s epoch name, unless
    /// cancelled or already holding the record's bytes, then starts the
    /// next epoch in this boot.
    fn recover(&self, header: Header) -> std::io::Result<()> {
        // Refuses a journal damaged in the middle before restoring from it.
        self.records_after(header.epoch, HEADER_BYTES)?;
        let mut latest: HashMap<String, Option<Vec<u8>>> = HashMap::new();
        for record in self.records_from(header.epoch, HEADER_BYTES, JOURNAL_BYTES)? {
            let body = (record.kind == Kind::Object).then_some(record.body);
            latest.insert(record.name, body);
        }
        for (name, body) in latest {
            let Some(body) = body else { continue };
            let path = self.folder.join(&name);
            let held = match std::fs::read(&path) {
                Ok(bytes) => bytes == body,
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(context(&path, e)),
            };
            if !held {
                (self.writers.restore)(&path, &body).map_err(|e| context(&path, e))?;
            }
        }
        self.start_epoch(Header {
            epoch: header.epoch + 1,
            boot: self.boot,
        })
    }

    /// Appends a record at the tail and syncs it, first starting a new
    /// epoch when it does not fit; returns where it went.
    fn append(&self, tail: &mut Tail, kind: Kind, name: &str, body: &[u8]) -> std::io::Result<u64> {
        let len = padded(RECORD_HEAD + name.len() + body.len()) as u64;
        if HEADER_BYTES + len > JOURNAL_BYTES {
            return Err(std::io::Error::other(format!(
                "a record of {len} bytes does not fit a journal of {JOURNAL_BYTES}"
            )));
        }
        if tail.offset + len > JOURNAL_BYTES {
            self.publish_unpublished(tail)?;
            self.checkpoint(tail, tail.epoch)?;
        }
        let at = tail.offset;
        self.file
            .write_all_at(&record_bytes(tail.epoch, kind, name, body), at)?;
        self.file.sync_data()?;
        tail.offset += len;
        Ok(at)
    }

    /// Makes the files of the records in `tail.published..tail.offset`,
    /// unsynced, then moves the mark past them.
    fn publish_unpublished(&self, tail: &mut Tail) -> std::io::Result<()> {
        if tail.published >= tail.offset {
            return Ok(());
        }
        if !tail.unpublished.is_empty() {
            for record in self.records_from(tail.epoch, tail.published, tail.offset)? {
                if record.kind != Kind::Object {
                    continue;
                }
                let path = self.folder.join(&record.name);
                match (self.writers.publish)(&path, &record.body) {
                    // Published before by a process that died before it
                    // moved the mark.
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    other => other.map_err(|e| context(&path, e))?,
                }
            }
        }
        tail.published = tail.offset;
        tail.unpublished.clear();
        self.file
            .write_all_at(&mark_bytes(tail.epoch, tail.offset), MARK_AT as u64)
    }

    /// Makes every object of the file system durable, then starts the
    /// epoch after `epoch`: the records before it are no longer needed.
    /// Every record must have its file.
    fn checkpoint(&self, tail: &mut Tail, epoch: u64) -> std::io::Result<()> {
        // SAFETY: `file` is an open descriptor.
        if unsafe { libc::syncfs(self.file.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.start_epoch(Header {
            epoch: epoch + 1,
            boot: self.boot,
        })?;
        *tail = Tail::of_epoch(epoch + 1);
        Ok(())
    }

    fn start_epoch(&self, header: Header) -> std::io::Result<()> {
        self.file.write_all_at(&header_block(header), 0)?;
        self.file.sync_data()
    }

    fn header(&self) -> std::io::Result<ReadHeader> {
        let mut bytes = [0u8; MARK_AT + MARK_LEN];
        self.file.read_exact_at(&mut bytes, 0)?;
        parse_header(&bytes).ok_or_else(|| {
            std::io::Error::other(format!(
                "the journal {} has a damaged header, or one of a newer moraine: the commits \
                 it holds cannot be read",
                self.path().display()
            ))
        })
    }

    /// Whether a record of `epoch` begins at `offset` (its head alone read).
    fn record_begins_at(&self, epoch: u64, offset: u64) -> std::io::Result<bool> {
        if offset + RECORD_HEAD as u64 > JOURNAL_BYTES {
            return Ok(false);
        }
        let mut head = [0u8; RECORD_HEAD];
        self.file.read_exact_at(&mut head, offset)?;
        Ok(parse_record_head(&head, epoch).is_some())
    }

    /// Where the whole records of `epoch` from `offset` on end, and the
    /// offset and name of each object record among them. Every process's
    /// first look finds the tail, so the records are checked where they
    /// lie, a window at a time, and their bodies never copied out.
    fn records_after(&self, epoch: u64, offset: u64) -> std::io::Result<(u64, Vec<(u64, String)>)> {
        let mut window = vec![0u8; SCAN_WINDOW_BYTES];
        let mut start = offset;
        let mut objects = Vec::new();
        loop {
            let len = (JOURNAL_BYTES.saturating_sub(start) as usize).min(window.len());
            let bytes = &mut window[..len];
            self.file.read_exact_at(bytes, start)?;
            let mut at = 0;
            while let Some(record) = checked_record(&bytes[at..], epoch) {
                if record.kind == Kind::Object {
                    let name = String::from_utf8_lossy(record.name).into_owned();
                    objects.push((start + at as u64, name));
                }
                at += record.padded_len;
            }
            let window_ends_the_file = start + len as u64 == JOURNAL_BYTES;
            // A record cut by the window's end is read again from its start;
            // anything else that stops the walk ends the records.
            if at == 0 || window_ends_the_file || !cut_by_window(&bytes[at..], epoch) {
                let end = start + at as u64;
                self.refuse_damage_at(epoch, end)?;
                return Ok((end, objects));
            }
            start += at as u64;
        }
    }

    /// Refuses a journal whose records of `epoch` stop at `end` with a
    /// record that does not check, yet go on after it. A crash tears only
    /// the last record, so whole records after a broken one are damage: read
    /// as the journal's end, it would hide the commits after it and every
    /// reader would open a lake that silently lacks them. Only a head of
    /// this epoch at `end` calls for the search; a clean end holds zeros or
    /// an older epoch's records.
    fn refuse_damage_at(&self, epoch: u64, end: u64) -> std::io::Result<()> {
        if !self.record_begins_at(epoch, end)? {
            return Ok(());
        }
        let mut rest = vec![0u8; (JOURNAL_BYTES - end) as usize];
        self.file.read_exact_at(&mut rest, end)?;
        let whole_after = (RECORD_ALIGN..rest.len())
            .step_by(RECORD_ALIGN)
            .any(|at| checked_record(&rest[at..], epoch).is_some());
        if whole_after {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!(
                    "the journal {} is damaged at byte {end}: the record there fails its checksum, yet \
                     whole records follow it, so the objects it holds cannot all be read. Restore the \
                     lake's folder from a copy",
                    self.path().display()
                ),
            ));
        }
        Ok(())
    }

    /// The whole records of `epoch` in `offset..until`, read at once: what
    /// a recovery restores and a batch publishes.
    fn records_from(&self, epoch: u64, offset: u64, until: u64) -> std::io::Result<Vec<Record>> {
        let mut bytes = vec![0u8; until.min(JOURNAL_BYTES).saturating_sub(offset) as usize];
        self.file.read_exact_at(&mut bytes, offset)?;
        let (mut records, mut at) = (Vec::new(), 0);
        while let Some((record, len)) = record_in(&bytes[at..], epoch) {
            records.push(record);
            at += len;
        }
        Ok(records)
    }

    fn path(&self) -> PathBuf {
        self.folder.join(JOURNAL_NAME)
    }

    fn error(&self, source: std::io::Error) -> object_store::Error {
        object_store::Error::Generic {
            store: "LocalFileSystem",
            source: format!("journal {}: {source}", self.path().display()).into(),
        }
    }
}

impl Drop for Journal {
    /// A store that closes leaves its folder whole: every journaled object
    /// has its file, for a copy of the folder or a moraine that reads the
    /// folder without the journal. A failure leaves the records to the
    /// next process that looks.
    fn drop(&mut self) {
        let _ = self.publish();
    }
}

/// Holds the journal's `flock` until dropped.
struct Flock<'a>(&'a File);

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // SAFETY: the descriptor outlives the guard.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

struct Record {
    kind: Kind,
    name: String,
    body: Vec<u8>,
}

/// How much of the journal one read of a tail search takes: a whole record
/// of the largest journaled object fits.
const SCAN_WINDOW_BYTES: usize = 2 * JOURNALED_OBJECT_BYTES;

/// A whole record of some epoch, as it lies in the journal.
struct CheckedRecord<'a> {
    kind: Kind,
    name: &'a [u8],
    body: &'a [u8],
    padded_len: usize,
}

/// The record of `epoch` at the start of `bytes`, if it is there whole and
/// its checksum holds.
fn checked_record(bytes: &[u8], epoch: u64) -> Option<CheckedRecord<'_>> {
    let head = bytes.first_chunk::<RECORD_HEAD>()?;
    let (kind, name_len, body_len, sum) = parse_record_head(head, epoch)?;
    let rest = bytes.get(RECORD_HEAD..RECORD_HEAD + name_len + body_len)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&head[4..24]);
    hasher.update(rest);
    (hasher.finalize() == sum).then(|| CheckedRecord {
        kind,
        name: &rest[..name_len],
        body: &rest[name_len..],
        padded_len: padded(RECORD_HEAD + name_len + body_len),
    })
}

/// Whether `bytes`, the end of a window, begin a record of `epoch` that the
/// window cuts short: its head is cut, or names more bytes than are left.
fn cut_by_window(bytes: &[u8], epoch: u64) -> bool {
    let Some(head) = bytes.first_chunk::<RECORD_HEAD>() else {
        return true;
    };
    parse_record_head(head, epoch)
        .is_some_and(|(_, name_len, body_len, _)| RECORD_HEAD + name_len + body_len > bytes.len())
}

/// The record of `epoch` at the start of `bytes` if it is there whole, and
/// its length padded.
fn record_in(bytes: &[u8], epoch: u64) -> Option<(Record, usize)> {
    let checked = checked_record(bytes, epoch)?;
    let record = Record {
        kind: checked.kind,
        name: std::str::from_utf8(checked.name).ok()?.to_string(),
        body: checked.body.to_vec(),
    };
    Some((record, checked.padded_len))
}

fn padded(len: usize) -> usize {
    len.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// The header block of a new epoch: its header, and a mark that nothing
/// of it is published yet.
fn header_block(header: Header) -> Vec<u8> {
    let mut block = vec![0u8; HEADER_BYTES as usize];
    block[..HEADER_LEN].copy_from_slice(&header_bytes(header));
    block[MARK_AT..MARK_AT + MARK_LEN].copy_from_slice(&mark_bytes(header.epoch, HEADER_BYTES));
    block
}

fn header_bytes(header: Header) -> [u8; HEADER_LEN] {
    let mut bytes = [0u8; HEADER_LEN];
    bytes[..8].copy_from_slice(HEADER_MAGIC);
    bytes[8..16].copy_from_slice(&header.epoch.to_le_bytes());
    bytes[16..32].copy_from_slice(&header.boot);
    let sum = crc32fast::hash(&bytes[..32]);
    bytes[32..].copy_from_slice(&sum.to_le_bytes());
    bytes
}

fn parse_header(bytes: &[u8; MARK_AT + MARK_LEN]) -> Option<ReadHeader> {
    let sum = u32::from_le_bytes(bytes[32..HEADER_LEN].try_into().ok()?);
    let magic = &bytes[..8];
    let published_at_append = magic == PUBLISHED_AT_APPEND_MAGIC;
    if !(magic == HEADER_MAGIC || published_at_append) || crc32fast::hash(&bytes[..32]) != sum {
        return None;
    }
    let header = Header {
        epoch: u64::from_le_bytes(bytes[8..16].try_into().ok()?),
        boot: bytes[16..32].try_into().ok()?,
    };
    Some(ReadHeader {
        header,
        published_at_append,
        mark: parse_mark(&bytes[MARK_AT..], header.epoch),
    })
}

fn mark_bytes(epoch: u64, offset: u64) -> [u8; MARK_LEN] {
    let mut bytes = [0u8; MARK_LEN];
    bytes[..8].copy_from_slice(&epoch.to_le_bytes());
    bytes[8..16].copy_from_slice(&offset.to_le_bytes());
    let sum = crc32fast::hash(&bytes[..16]);
    bytes[16..].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// The offset a mark of `epoch` holds.
fn parse_mark(bytes: &[u8], epoch: u64) -> Option<u64> {
    let bytes: &[u8; MARK_LEN] = bytes.get(..MARK_LEN)?.try_into().ok()?;
    let sum = u32::from_le_bytes(bytes[16..].try_into().ok()?);
    let their_epoch = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let offset = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    (crc32fast::hash(&bytes[..16]) == sum && their_epoch == epoch).then_some(offset)
}

fn record_bytes(epoch: u64, kind: Kind, name: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(padded(RECORD_HEAD + name.len() + body.len()));
    bytes.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    bytes.extend_from_slice(&epoch.to_le_bytes());
    bytes.extend_from_slice(&[kind as u8, 0, 0, 0]);
    bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[4..24]);
    hasher.update(name.as_bytes());
    hasher.update(body);
    bytes.extend_from_slice(&hasher.finalize().to_le_bytes());
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(body);
    bytes.resize(padded(bytes.len()), 0);
    bytes
}

/// A record head's kind, name and body lengths and checksum, when it is
/// one of `epoch`.
fn parse_record_head(head: &[u8; RECORD_HEAD], epoch: u64) -> Option<(Kind, usize, usize, u32)> {
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let their_epoch = u64::from_le_bytes(head[4..12].try_into().ok()?);
    if word(0) != RECORD_MAGIC || their_epoch != epoch {
        return None;
    }
    let kind = match head[12] {
        1 => Kind::Object,
        2 => Kind::Cancelled,
        _ => return None,
    };
    let (name_len, body_len) = (word(16) as usize, word(20) as usize);
    (name_len + body_len <= JOURNAL_BYTES as usize).then_some((kind, name_len, body_len, word(24)))
}

fn context(path: &Path, source: std::io::Error) -> std::io::Error {
    std::io::Error::new(source.kind(), format!("{}: {source}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::local::DirectLocal;
    use super::*;
    use futures_util::StreamExt;
    use object_store::path::Path as Location;
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

    fn store() -> (tempfile::TempDir, DirectLocal) {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectLocal::new(dir.path()).unwrap();
        (dir, store)
    }

    fn wal(n: u64) -> Location {
        Location::from(format!("wal/{n:020}.sst"))
    }

    fn body(n: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (n as usize * 31 + i) as u8).collect()
    }

    async fn create(
        store: &DirectLocal,
        location: &Location,
        bytes: Vec<u8>,
    ) -> object_store::Result<()> {
        let options = PutOptions::from(PutMode::Create);
        store
            .put_opts(location, PutPayload::from(bytes), options)
            .await
            .map(drop)
    }

    fn header_of(folder: &Path) -> Header {
        let mut bytes = [0u8; MARK_AT + MARK_LEN];
        File::open(folder.join(JOURNAL_NAME))
            .unwrap()
            .read_exact_at(&mut bytes, 0)
            .unwrap();
        parse_header(&bytes).unwrap().header
    }

    /// What the next boot finds: the journal as it was, under another boot id.
    fn as_after_a_reboot(folder: &Path) {
        let header = header_of(folder);
        let file = OpenOptions::new()
            .write(true)
            .open(folder.join(JOURNAL_NAME))
            .unwrap();
        let other = Header {
            boot: [0xa5; 16],
            ..header
        };
        file.write_all_at(&header_bytes(other), 0).unwrap();
    }

    /// Writers that write a file plainly, for a journal used without a store.
    fn plain_writers() -> ObjectWriters {
        ObjectWriters {
            restore: Arc::new(|path: &Path, body: &[u8]| std::fs::write(path, body)),
            publish: Arc::new(|path: &Path, body: &[u8]| std::fs::write(path, body)),
        }
    }

    /// An empty WAL folder, for a journal used without a store.
    fn wal_folder() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("wal");
        std::fs::create_dir(&folder).unwrap();
        (dir, folder)
    }

    /// A store of `dir` opened in the next boot, its WAL restored.
    fn opened_after_a_reboot(dir: &Path) -> DirectLocal {
        as_after_a_reboot(&dir.join("wal"));
        let next = DirectLocal::new(dir).unwrap();
        next.restore(&Location::from("wal")).unwrap();
        next
    }

    /// Each WAL object of `ids` holds the bytes `body` gave it.
    async fn assert_holds(store: &DirectLocal, ids: std::ops::RangeInclusive<u64>, len: usize) {
        for n in ids {
            let bytes = store.get(&wal(n)).await.unwrap().bytes().await.unwrap();
            assert_eq!(bytes.as_ref(), body(n, len).as_slice(), "object {n}");
        }
    }

    #[tokio::test]
    async fn what_a_machine_crash_loses_of_journaled_objects_the_next_open_restores() {
        let (dir, first) = store();
        for n in 1..=4 {
            create(&first, &wal(n), body(n, 600)).await.unwrap();
        }
        let folder = dir.path().join("wal");
        let epoch = header_of(&folder).epoch;
        drop(first);
        // The page cache's losses: a name without its object, an object
        // cut short, one whose block held an older object's bytes.
        std::fs::remove_file(folder.join(format!("{:020}.sst", 1))).unwrap();
        std::fs::write(folder.join(format!("{:020}.sst", 2)), b"").unwrap();
        std::fs::write(folder.join(format!("{:020}.sst", 3)), body(9, 600)).unwrap();
        let next = opened_after_a_reboot(dir.path());
        assert_holds(&next, 1..=4, 600).await;
        let header = header_of(&folder);
        assert_eq!(header.boot, boot().unwrap());
        assert_eq!(
            header.epoch,
            epoch + 1,
            "the restored records are done with"
        );
    }

    #[tokio::test]
    async fn a_name_that_exists_is_refused_whether_published_or_only_journaled() {
        let (dir, first) = store();
        let second = DirectLocal::new(dir.path()).unwrap();
        create(&first, &wal(1), body(1, 100)).await.unwrap();
        // Not yet a file: the record alone holds the name (SlateDB's fencing).
        let folder = dir.path().join("wal");
        assert!(!folder.join(format!("{:020}.sst", 1)).exists());
        for store in [&first, &second] {
            let again = create(store, &wal(1), body(2, 100)).await;
            assert!(
                matches!(again, Err(object_store::Error::AlreadyExists { .. })),
                "{again:?}"
            );
        }
        drop((first, second));
        std::fs::remove_file(folder.join(format!("{:020}.sst", 1))).unwrap();
        // The winner's bytes, not the loser's.
        assert_holds(&opened_after_a_reboot(dir.path()), 1..=1, 100).await;
    }

    #[tokio::test]
    async fn a_journaled_object_gets_its_file_when_anyone_looks_at_the_folder() {
        let (dir, writer) = store();
        let folder = dir.path().join("wal");
        let file = |n: u64| folder.join(format!("{n:020}.sst"));
        for n in 1..=3 {
            create(&writer, &wal(n), body(n, 500)).await.unwrap();
        }
        assert!(
            (1..=3).all(|n| !file(n).exists()),
            "no file made per commit"
        );
        // Another process's read of one publishes them all.
        let reader = DirectLocal::new(dir.path()).unwrap();
        assert_holds(&reader, 2..=2, 500).await;
        assert!((1..=3).all(|n| file(n).exists()));
        // A listing from the root, and a delete, see the ones journaled since.
        create(&writer, &wal(4), body(4, 500)).await.unwrap();
        let listed: Vec<_> = reader
            .list(None)
            .map(|meta| meta.unwrap().location.to_string())
            .collect::<Vec<_>>()
            .await;
        assert!(listed.contains(&wal(4).to_string()), "{listed:?}");
        create(&writer, &wal(5), body(5, 500)).await.unwrap();
        reader.delete(&wal(5)).await.unwrap();
        assert!(matches!(
            reader.get(&wal(5)).await,
            Err(object_store::Error::NotFound { .. })
        ));
        // A create that loses its race to a record refuses, a write of
        // another kind in the folder finds the name taken.
        create(&writer, &wal(6), body(6, 500)).await.unwrap();
        let large = create(&reader, &wal(6), body(6, JOURNALED_OBJECT_BYTES + 1)).await;
        assert!(
            matches!(large, Err(object_store::Error::AlreadyExists { .. })),
            "{large:?}"
        );
        assert_holds(&writer, 6..=6, 500).await;
    }

    #[tokio::test]
    async fn a_process_that_dies_leaves_its_records_to_the_next_that_looks() {
        let (dir, writer) = store();
        for n in 1..=3 {
            create(&writer, &wal(n), body(n, 700)).await.unwrap();
        }
        // Killed: no close publishes.
        std::mem::forget(writer);
        let folder = dir.path().join("wal");
        assert!(!folder.join(format!("{:020}.sst", 3)).exists());
        let next = DirectLocal::new(dir.path()).unwrap();
        let listed = next
            .list_with_delimiter(Some(&Location::from("wal")))
            .await
            .unwrap();
        assert_eq!(listed.objects.len(), 3, "{listed:?}");
        assert_holds(&next, 1..=3, 700).await;
        // And a machine crash after it restores them, published or not.
        create(&next, &wal(4), body(4, 700)).await.unwrap();
        std::mem::forget(next);
        for n in 1..=3 {
            std::fs::remove_file(folder.join(format!("{n:020}.sst"))).unwrap();
        }
        assert_holds(&opened_after_a_reboot(dir.path()), 1..=4, 700).await;
    }

    #[tokio::test]
    async fn a_journal_of_the_first_version_is_taken_over_at_its_next_epoch() {
        let (dir, first) = store();
        create(&first, &wal(1), body(1, 300)).await.unwrap();
        drop(first);
        let folder = dir.path().join("wal");
        let header = header_of(&folder);
        // As the first version left it: its header's magic, no mark.
        let journal = OpenOptions::new()
            .write(true)
            .open(folder.join(JOURNAL_NAME))
            .unwrap();
        let mut old = header_bytes(header);
        old[..8].copy_from_slice(PUBLISHED_AT_APPEND_MAGIC);
        let sum = crc32fast::hash(&old[..32]);
        old[32..].copy_from_slice(&sum.to_le_bytes());
        journal.write_all_at(&old, 0).unwrap();
        journal
            .write_all_at(&[0u8; MARK_LEN], MARK_AT as u64)
            .unwrap();
        let next = DirectLocal::new(dir.path()).unwrap();
        create(&next, &wal(2), body(2, 300)).await.unwrap();
        assert_eq!(header_of(&folder).epoch, header.epoch + 1);
        assert_holds(&next, 1..=2, 300).await;
    }

    #[test]
    fn a_broken_record_with_whole_records_after_it_is_damage_not_the_end() {
        let (_dir, folder) = wal_folder();
        let writers = plain_writers();
        let journal = Journal::create(&folder, writers.clone()).unwrap();
        journal.write("00000000000000000001.sst", b"one").unwrap();
        let second = journal.lock().unwrap().offset;
        journal
            .write("00000000000000000002.sst", &[7u8; 600])
            .unwrap();
        journal.write("00000000000000000003.sst", b"three").unwrap();
        std::mem::forget(journal);
        // Bytes of the second record's body flipped: the third is whole.
        let at = second + RECORD_HEAD as u64 + 100;
        let file = OpenOptions::new()
            .write(true)
            .open(folder.join(JOURNAL_NAME))
            .unwrap();
        file.write_all_at(&[0xff; 16], at).unwrap();
        for reboot in [false, true] {
            if reboot {
                as_after_a_reboot(&folder);
            }
            let Err(refused) = Journal::open(&folder, writers.clone()) else {
                panic!("a damaged journal was opened (after a reboot: {reboot})")
            };
            assert!(
                refused.to_string().contains("is damaged at byte"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_journal_cut_short_is_refused_by_name() {
        let (_dir, folder) = wal_folder();
        let journal = Journal::create(&folder, plain_writers()).unwrap();
        journal.write("00000000000000000001.sst", b"one").unwrap();
        std::mem::forget(journal);
        let file = OpenOptions::new()
            .write(true)
            .open(folder.join(JOURNAL_NAME))
            .unwrap();
        file.set_len(JOURNAL_BYTES / 2).unwrap();
        let Err(refused) = Journal::open(&folder, plain_writers()) else {
            panic!("a journal cut short was opened")
        };
        assert!(refused.to_string().contains("was cut short"), "{refused}");
    }

    #[test]
    fn a_record_torn_by_a_crash_ends_the_journal_and_the_next_write_takes_its_place() {
        let (_dir, folder) = wal_folder();
        let writers = plain_writers();
        let journal = Journal::create(&folder, writers.clone()).unwrap();
        let first = "00000000000000000001.sst";
        journal.write(first, b"one").unwrap();
        // Another process's record, its head written and its body not.
        let tail = journal.lock().unwrap().offset;
        let torn = record_bytes(header_of(&folder).epoch, Kind::Object, "x.sst", b"torn");
        journal
            .file
            .write_all_at(&torn[..RECORD_HEAD], tail)
            .unwrap();
        let second = "00000000000000000002.sst";
        journal.write(second, b"two").unwrap();
        let written = record_bytes(0, Kind::Object, second, b"two").len() as u64;
        assert_eq!(
            journal.lock().unwrap().offset,
            tail + written,
            "written over the torn one"
        );
        std::mem::forget(journal);
        as_after_a_reboot(&folder);
        Journal::open(&folder, writers).unwrap().unwrap();
        assert_eq!(std::fs::read(folder.join(first)).unwrap(), b"one");
        assert_eq!(std::fs::read(folder.join(second)).unwrap(), b"two");
        assert!(!folder.join("x.sst").exists());
    }

    #[tokio::test]
    async fn a_full_journal_makes_its_objects_durable_and_starts_a_new_epoch() {
        let (dir, store) = store();
        let folder = dir.path().join("wal");
        let big = JOURNALED_OBJECT_BYTES - 64;
        let per_epoch = (JOURNAL_BYTES - HEADER_BYTES) as usize / big;
        for n in 1..=(per_epoch as u64 + 2) {
            create(&store, &wal(n), body(n, big)).await.unwrap();
        }
        assert_eq!(header_of(&folder).epoch, 2);
        drop(store);
        // Only the new epoch's objects can still be in the page cache alone.
        for n in [per_epoch as u64 + 1, per_epoch as u64 + 2] {
            std::fs::remove_file(folder.join(format!("{n:020}.sst"))).unwrap();
        }
        assert_holds(
            &opened_after_a_reboot(dir.path()),
            1..=per_epoch as u64 + 2,
            big,
        )
        .await;
    }

    #[tokio::test]
    async fn two_stores_of_one_folder_append_after_each_other() {
        let (dir, first) = store();
        let second = DirectLocal::new(dir.path()).unwrap();
        for n in 1..=20 {
            let writer = if n % 3 == 0 { &second } else { &first };
            create(writer, &wal(n), body(n, 300)).await.unwrap();
        }
        drop((first, second));
        let folder = dir.path().join("wal");
        for n in 1..=20 {
            std::fs::remove_file(folder.join(format!("{n:020}.sst"))).unwrap();
        }
        let next = opened_after_a_reboot(dir.path());
        assert_holds(&next, 1..=20, 300).await;
    }

    #[tokio::test]
    async fn a_new_store_finds_the_tail_past_records_a_window_cuts() {
        // Records of two sizes, so that windows end inside a large one.
        let len = |n: u64| if n.is_multiple_of(3) { 40_000 } else { 700 };
        let (dir, first) = store();
        let ids = 1..=12u64;
        for n in ids.clone() {
            create(&first, &wal(n), body(n, len(n))).await.unwrap();
        }
        drop(first);
        let folder = dir.path().join("wal");
        assert_eq!(header_of(&folder).epoch, 1, "one epoch holds them all");
        let second = DirectLocal::new(dir.path()).unwrap();
        for n in 13..=14 {
            create(&second, &wal(n), body(n, len(n))).await.unwrap();
        }
        drop(second);
        for n in 1..=14u64 {
            std::fs::remove_file(folder.join(format!("{n:020}.sst"))).unwrap();
        }
        let next = opened_after_a_reboot(dir.path());
        for n in 1..=14u64 {
            let bytes = next.get(&wal(n)).await.unwrap().bytes().await.unwrap();
            assert_eq!(bytes.as_ref(), body(n, len(n)).as_slice(), "object {n}");
        }
    }

    #[tokio::test]
    async fn a_manifest_is_journaled_and_what_a_crash_loses_of_it_restored() {
        let (dir, first) = store();
        let manifest = Location::from("manifest/00000000000000000001.manifest");
        create(&first, &manifest, body(1, 900)).await.unwrap();
        let folder = dir.path().join("manifest");
        assert!(folder.join(JOURNAL_NAME).exists());
        // Published by the next look at the folder, unsynced.
        let read = first.get(&manifest).await.unwrap().bytes().await.unwrap();
        assert_eq!(read.as_ref(), body(1, 900).as_slice());
        drop(first);
        // A power cut left the name without its bytes.
        std::fs::write(folder.join("00000000000000000001.manifest"), b"").unwrap();
        as_after_a_reboot(&folder);
        let next = DirectLocal::new(dir.path()).unwrap();
        next.restore(&Location::from("manifest")).unwrap();
        let restored = next.get(&manifest).await.unwrap().bytes().await.unwrap();
        assert_eq!(restored.as_ref(), body(1, 900).as_slice());
    }

    #[tokio::test]
    async fn objects_outside_the_journaled_folders_and_large_ones_are_not_journaled() {
        let (dir, store) = store();
        let sst = Location::from("compacted/01JAAAAAAAAAAAAAAAAAAAAAAA.sst");
        create(&store, &sst, body(1, 100)).await.unwrap();
        assert!(!dir.path().join("compacted").join(JOURNAL_NAME).exists());
        create(&store, &wal(1), body(1, JOURNALED_OBJECT_BYTES + 1))
            .await
            .unwrap();
        assert!(!dir.path().join("wal").join(JOURNAL_NAME).exists());
        let listed: Vec<_> = store
            .list(None)
            .map(|meta| meta.unwrap().location.to_string())
            .collect::<Vec<_>>()
            .await;
        assert_eq!(listed.len(), 2, "{listed:?}");
        create(&store, &wal(2), body(2, 100)).await.unwrap();
        assert!(dir.path().join("wal").join(JOURNAL_NAME).exists());
        let mut listed: Vec<_> = store
            .list(Some(&Location::from("wal")))
            .map(|meta| meta.unwrap().location.to_string())
            .collect::<Vec<_>>()
            .await;
        listed.sort();
        assert_eq!(listed, vec![wal(1).to_string(), wal(2).to_string()]);
    }
}
