//! A local directory as an object store, whose small reads run on the
//! thread that asks.
//!
//! `object_store`'s `LocalFileSystem` hands every request to tokio's
//! blocking pool: a read is two hand-offs (open, then read) and a thread
//! wake-up each way. On these machines a hand-off costs 50 to 100 µs, while
//! the read of a catalog block from the page cache costs a few: a cold
//! attach makes about thirty such reads one after another, and waited two
//! milliseconds for threads to wake. Reads up to [`INLINE_READ_BYTES`] and
//! writes up to [`INLINE_WRITE_BYTES`] run here, on the caller's thread;
//! larger ones (a compaction's input and output) go to `LocalFileSystem` as
//! before, and so do deletes outside the folders that keep spares. Listings
//! of up to [`INLINE_LIST_ENTRIES`] entries run here too: an open lists the
//! store's root and its manifests.
//!
//! Both paths do the same thing on disk, so that either may meet the other's
//! objects: a write goes to a staged file beside its destination (`<name>#<n>`,
//! which listings skip), then is published by a rename, or by a hard link
//! when it must not replace an object (create-if-absent, on which SlateDB's
//! fencing rests). An object's metadata is the one `LocalFileSystem`
//! reports, e-tag included, so that a precondition taken from one holds
//! against the other. A write here stages into a spare, a file deleted
//! earlier from its folder and emptied, when there is one
//! ([`super::spares`]).
//!
//! A write is durable when it returns, as a PUT to S3 is and as DuckDB's own
//! commit is (it syncs its WAL): the staged file's data is synced before it
//! is published, and its folder after, so a power cut leaves either no
//! object or the whole one under its name, never a name without its bytes.
//! `LocalFileSystem` does the same for the writes it takes (`with_fsync`).

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};
use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{ErrorKind, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::journal::{Journal, ObjectWriters, WriteObject, JOURNALED_OBJECT_BYTES};
use super::spares::{is_journaled, Deleted, Spares};

/// Reads up to this many bytes run on the caller's thread: a block, an
/// index, a manifest or a WAL object of a catalog. A larger read would hold
/// an async worker for as long as the disk takes.
const INLINE_READ_BYTES: u64 = 4 << 20;

/// Writes up to this many bytes run on the caller's thread: a commit's WAL
/// object, a manifest, the writer lease.
const INLINE_WRITE_BYTES: usize = 1 << 20;

/// A listing that meets more entries than this goes to `LocalFileSystem`.
const INLINE_LIST_ENTRIES: usize = 1024;

pub struct DirectLocal {
    fs: LocalFileSystem,
    /// The directory `fs` serves, as `LocalFileSystem` resolves it.
    root: PathBuf,
    /// `root` as an object path, to turn file names back into locations.
    root_location: Path,
    spares: Arc<Spares>,
    journals: Arc<Journals>,
}

impl Drop for DirectLocal {
    fn drop(&mut self) {
        // The journals publish what they hold as they close, into spares.
        self.journals.close();
        self.spares.close();
    }
}

impl DirectLocal {
    pub fn new(dir: &std::path::Path) -> object_store::Result<DirectLocal> {
        let fs = LocalFileSystem::new_with_prefix(dir)?.with_fsync(true);
        let root = std::fs::canonicalize(dir).map_err(|e| generic(dir, e))?;
        let root_location = Path::from_absolute_path(&root)?;
        let spares = Arc::new(Spares::new());
        Ok(DirectLocal {
            fs,
            root,
            root_location,
            journals: Arc::new(Journals {
                opened: Mutex::default(),
                spares: spares.clone(),
            }),
            spares,
        })
    }

    /// Restores what a crash of the machine lost of the journaled objects
    /// under `location` (a store's `wal` or `manifest` folder), before
    /// anything reads them.
    pub fn restore(&self, location: &Path) -> object_store::Result<()> {
        let folder = self.fs.path_to_filesystem(location)?;
        self.journals.journal(&folder, false).map(drop)
    }

    /// Journals a WAL object or a manifest with one cache flush, its file
    /// made with a later batch; `None` where the folder has no journal to
    /// write.
    fn write_journaled(
        &self,
        path: &std::path::Path,
        payload: &PutPayload,
    ) -> object_store::Result<Option<PutResult>> {
        let (Some(folder), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Ok(None);
        };
        let Some(journal) = self.journals.journal(folder, true)? else {
            return Ok(None);
        };
        let body: Vec<u8> = payload
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .collect();
        journal.write(name, &body)?;
        // No file yet, so no e-tag: SlateDB reads none of a WAL object's or a
        // manifest's.
        Ok(Some(PutResult {
            e_tag: None,
            version: None,
            extensions: Default::default(),
        }))
    }

    /// Publishes what the journals of the journaled folders at or under
    /// `prefix` hold, before a listing reads the folders.
    fn publish_within(&self, prefix: Option<&Path>) -> object_store::Result<()> {
        self.journals.publish_within(&self.folder(prefix)?)
    }

    /// [`Journals::publish_beside`] for an object's location.
    fn publish_beside(&self, location: &Path) -> object_store::Result<()> {
        self.journals
            .publish_beside(&self.fs.path_to_filesystem(location)?)
    }

    fn folder(&self, prefix: Option<&Path>) -> object_store::Result<PathBuf> {
        match prefix {
            Some(prefix) if prefix.as_ref() != "" => self.fs.path_to_filesystem(prefix),
            _ => Ok(self.root.clone()),
        }
    }

    fn location(&self, file: &std::path::Path) -> object_store::Result<Path> {
        let absolute = Path::from_absolute_path(file)?;
        let location = absolute
            .prefix_match(&self.root_location)
            .map(Path::from_iter);
        location.ok_or_else(|| generic(file, std::io::Error::other("outside the store")))
    }

    /// The objects under `prefix`, at any depth; `None` when there are too
    /// many to list here.
    fn list_here(&self, prefix: Option<&Path>) -> object_store::Result<Option<Vec<ObjectMeta>>> {
        let mut folders = vec![self.folder(prefix)?];
        let mut objects = Vec::new();
        let mut budget = INLINE_LIST_ENTRIES;
        while let Some(folder) = folders.pop() {
            let Some(found) = entries(&folder, budget)? else {
                return Ok(None);
            };
            budget -= found.len();
            for (path, metadata) in found {
                if metadata.is_dir() {
                    folders.push(path);
                } else if let Some(meta) = self.object(&path, &metadata)? {
                    objects.push(meta);
                }
            }
        }
        Ok(Some(objects))
    }

    /// One folder's objects and subfolders; `None` when it has too many
    /// entries to list here.
    fn list_folder_here(&self, prefix: Option<&Path>) -> object_store::Result<Option<ListResult>> {
        let prefix_location = prefix.cloned().unwrap_or_default();
        let Some(found) = entries(&self.folder(prefix)?, INLINE_LIST_ENTRIES)? else {
            return Ok(None);
        };
        let mut common_prefixes = std::collections::BTreeSet::new();
        let mut objects = Vec::new();
        for (path, metadata) in found {
            if metadata.is_dir() {
                if let Some(name) = self.location(&path)?.filename() {
                    common_prefixes.insert(prefix_location.clone().join(name));
                }
            } else if let Some(meta) = self.object(&path, &metadata)? {
                objects.push(meta);
            }
        }
        Ok(Some(ListResult {
            common_prefixes: common_prefixes.into_iter().collect(),
            objects,
            extensions: Default::default(),
        }))
    }

    /// A file's metadata as a listing reports it; `None` for a staged
    /// write (`<name>#<n>`), which `LocalFileSystem` does not list either.
    fn object(
        &self,
        path: &std::path::Path,
        metadata: &Metadata,
    ) -> object_store::Result<Option<ObjectMeta>> {
        let location = self.location(path)?;
        let staged = location
            .filename()
            .and_then(|name| name.split_once('#'))
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        Ok((!staged).then(|| object_meta(metadata, location)))
    }

    /// The object at `location` (the file `path`), read here when it is
    /// small enough; `None` when the read is to go to `LocalFileSystem`.
    fn read_here(
        &self,
        location: &Path,
        path: &std::path::Path,
        options: &GetOptions,
    ) -> object_store::Result<Option<GetResult>> {
        let file = File::open(path).map_err(|e| io_error(path, e))?;
        let metadata = file.metadata().map_err(|e| generic(path, e))?;
        if metadata.is_dir() {
            let source = std::io::Error::new(ErrorKind::NotFound, "is a directory");
            return Err(io_error(path, source));
        }
        let meta = object_meta(&metadata, location.clone());
        options.check_preconditions(&meta)?;
        let range = match &options.range {
            Some(r) => r.as_range(meta.size).map_err(|e| {
                generic(
                    path,
                    std::io::Error::other(format!("Requested range was invalid: {e}")),
                )
            })?,
            None => 0..meta.size,
        };
        let bytes = if options.head {
            Bytes::new()
        } else if range.end - range.start > INLINE_READ_BYTES {
            return Ok(None);
        } else {
            read_range(&file, path, range.clone())?
        };
        let stream = futures_util::stream::once(async move { Ok(bytes) });
        Ok(Some(GetResult {
            payload: GetResultPayload::Stream(Box::pin(stream)),
            meta,
            range,
            attributes: Attributes::default(),
            extensions: Default::default(),
        }))
    }
}

/// The journal of each journaled folder a store has written or opened
/// ([`super::journal`], [`super::layout::JOURNALED`]).
struct Journals {
    opened: Mutex<HashMap<PathBuf, Arc<Journal>>>,
    /// What a journal's publications write into.
    spares: Arc<Spares>,
}

impl Journals {
    /// The journal of the journaled folder `folder`, opened on first use; made
    /// there when `make` and it has none.
    fn journal(
        &self,
        folder: &std::path::Path,
        make: bool,
    ) -> object_store::Result<Option<Arc<Journal>>> {
        let mut opened = self.opened()?;
        if let Some(journal) = opened.get(folder) {
            return Ok(Some(journal.clone()));
        }
        if super::journal::boot().is_none() {
            return Ok(None);
        }
        let journal = if make {
            create_folders(folder)?;
            Journal::create(folder, self.writers()).map(Some)
        } else {
            Journal::open(folder, self.writers())
        };
        let journal = journal.map_err(|e| generic(folder, e))?.map(Arc::new);
        if let Some(journal) = &journal {
            opened.insert(folder.to_path_buf(), journal.clone());
        }
        Ok(journal)
    }

    fn opened(
        &self,
    ) -> object_store::Result<std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<Journal>>>> {
        self.opened.lock().map_err(|_| {
            generic(
                std::path::Path::new("wal"),
                std::io::Error::other("journals lock poisoned"),
            )
        })
    }

    /// How a journal writes an object: synced over what is there when it
    /// restores one that was acknowledged, unsynced and create-if-absent
    /// when it publishes one its synced records hold.
    fn writers(&self) -> ObjectWriters {
        let write = |create: bool, durable: bool| -> WriteObject {
            let spares = self.spares.clone();
            Arc::new(move |path: &std::path::Path, body: &[u8]| {
                let payload = PutPayload::from(Bytes::copy_from_slice(body));
                match write_here(path, &payload, create, durable, &spares) {
                    Ok(_) => Ok(()),
                    Err(object_store::Error::AlreadyExists { path, .. }) => {
                        Err(std::io::Error::new(ErrorKind::AlreadyExists, path))
                    }
                    Err(e) => Err(std::io::Error::other(e)),
                }
            })
        };
        ObjectWriters {
            restore: write(false, true),
            publish: write(true, false),
        }
    }

    /// Publishes what the journal of `folder` holds, if it is a journaled
    /// folder with one.
    fn publish_in(&self, folder: &std::path::Path) -> object_store::Result<()> {
        if !is_journaled(folder) {
            return Ok(());
        }
        match self.journal(folder, false)? {
            Some(journal) => journal.publish(),
            None => Ok(()),
        }
    }

    /// Publishes what the journal of the file `path`'s folder holds, before
    /// the object is read, deleted, copied or written other than by a
    /// journal.
    fn publish_beside(&self, path: &std::path::Path) -> object_store::Result<()> {
        match path.parent() {
            Some(folder) => self.publish_in(folder),
            None => Ok(()),
        }
    }

    /// Publishes what the journals of the journaled folders at or under
    /// `folder` hold, each once: `folder` itself, a store's `wal` and
    /// `manifest` in it, and any this store opened deeper.
    fn publish_within(&self, folder: &std::path::Path) -> object_store::Result<()> {
        let mut folders = vec![folder.to_path_buf()];
        folders.extend(super::layout::JOURNALED.map(|name| folder.join(name)));
        for at in self.opened()?.keys() {
            if at.starts_with(folder) && !folders.contains(at) {
                folders.push(at.clone());
            }
        }
        folders.iter().try_for_each(|wal| self.publish_in(wal))
    }

    /// Closes every journal this store opened, each publishing what it
    /// holds.
    fn close(&self) {
        if let Ok(mut opened) = self.opened.lock() {
            opened.clear();
        }
    }
}

/// Marks a put whose object only processes running at the same time read:
/// the writer lease, a turn's ask, a takeover marker. A power cut ends every
/// process that could read one, and what a crash leaves of one (an old
/// version, no object, or a name without its bytes) reads as stale, so a
/// local store does not sync it; each sync is a disk cache flush, and a
/// read-write attach writes the lease before anything else.
#[derive(Clone, Copy, Debug)]
pub struct ForLiveProcesses;

/// `mode` for an object marked [`ForLiveProcesses`].
pub fn for_live_processes(mode: PutMode) -> PutOptions {
    let mut options = PutOptions::from(mode);
    options.extensions.insert(ForLiveProcesses);
    options
}

/// Writes `payload` to `path` as `LocalFileSystem` does with `fsync`:
/// staged and synced, then published by rename (`Overwrite`) or hard link
/// (`Create`), then the folder synced. Not `durable`, nothing is synced.
fn write_here(
    path: &std::path::Path,
    payload: &PutPayload,
    create: bool,
    durable: bool,
    spares: &Arc<Spares>,
) -> object_store::Result<PutResult> {
    let spare = path.parent().and_then(|folder| spares.take(folder));
    let (mut file, staged) = match spare {
        Some(spare) => spare,
        None => staged_file(path)?,
    };
    let written = payload
        .iter()
        .try_for_each(|chunk| file.write_all(chunk))
        // A spare an earlier version made ahead holds a block of zeros.
        .and_then(|()| file.set_len(payload.content_length() as u64))
        .and_then(|()| if durable { file.sync_data() } else { Ok(()) })
        .and_then(|()| file.metadata());
    drop(file);
    let published = written
        .map_err(|e| generic(&staged, e))
        .and_then(|metadata| {
            publish(&staged, path, create)?;
            if durable {
                sync_folder_of(path)?;
            }
            Ok(metadata)
        });
    match published {
        Ok(metadata) => {
            if let Some(folder) = path.parent() {
                spares.published(folder);
            }
            Ok(PutResult {
                e_tag: Some(e_tag(&metadata)),
                version: None,
                extensions: Default::default(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_file(&staged);
            Err(e)
        }
    }
}

/// A new file beside `path`, named `<path>#<n>` for the first free `n`,
/// with `path`'s folders created as needed.
fn staged_file(path: &std::path::Path) -> object_store::Result<(File, PathBuf)> {
    let mut n = 1u64;
    loop {
        let mut staged = path.as_os_str().to_owned();
        staged.push(format!("#{n}"));
        let staged = PathBuf::from(staged);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staged)
        {
            Ok(file) => return Ok((file, staged)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let parent = staged.parent().ok_or_else(|| generic(&staged, e))?;
                create_folders(parent)?;
            }
            Err(e) => return Err(generic(&staged, e)),
        }
    }
}

/// Creates `folder` and its missing ancestors, each one's entry synced in
/// its parent, so that an object published in it outlives a power cut.
pub(super) fn create_folders(folder: &std::path::Path) -> object_store::Result<()> {
    let existing = folder.ancestors().find(|a| a.is_dir());
    std::fs::create_dir_all(folder).map_err(|e| generic(folder, e))?;
    for created in folder.ancestors().take_while(|a| Some(*a) != existing) {
        sync_folder_of(created)?;
    }
    Ok(())
}

/// Syncs the folder that holds `path`, making a rename, link or creation of
/// `path` durable.
fn sync_folder_of(path: &std::path::Path) -> object_store::Result<()> {
    let Some(folder) = path.parent() else {
        return Ok(());
    };
    File::open(folder)
        .and_then(|f| f.sync_all())
        .map_err(|e| generic(folder, e))
}

fn publish(
    staged: &std::path::Path,
    path: &std::path::Path,
    create: bool,
) -> object_store::Result<()> {
    if !create {
        return std::fs::rename(staged, path).map_err(|e| generic(path, e));
    }
    match std::fs::hard_link(staged, path) {
        Ok(()) => {
            let _ = std::fs::remove_file(staged);
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(object_store::Error::AlreadyExists {
            path: path.display().to_string(),
            source: Box::new(e),
        }),
        Err(e) => Err(generic(path, e)),
    }
}

/// A folder's entries with their metadata, links followed, or `None` when
/// it has more than `most`; a folder that does not exist has none, and an
/// entry removed while it is read is skipped, as in `LocalFileSystem`.
fn entries(
    folder: &std::path::Path,
    most: usize,
) -> object_store::Result<Option<Vec<(PathBuf, Metadata)>>> {
    let listing = match std::fs::read_dir(folder) {
        Ok(listing) => listing,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Some(Vec::new())),
        Err(e) => return Err(generic(folder, e)),
    };
    let mut out = Vec::new();
    for entry in listing {
        if out.len() == most {
            return Ok(None);
        }
        let entry = entry.map_err(|e| generic(folder, e))?;
        let path = entry.path();
        // Stat the entry relative to the open folder: a path from the root
        // costs a lookup of every component, for every entry of every
        // listing an open and a close make. Only a link needs following.
        let metadata = match entry.file_type() {
            Ok(kind) if !kind.is_symlink() => entry.metadata(),
            _ => std::fs::metadata(&path),
        };
        match metadata {
            Ok(metadata) => out.push((path, metadata)),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(generic(&path, e)),
        }
    }
    Ok(Some(out))
}

/// An I/O error on `path` as `LocalFileSystem` reports it: a missing file is
/// `NotFound`, anything else generic.
fn io_error(path: &std::path::Path, source: std::io::Error) -> object_store::Error {
    match source.kind() {
        ErrorKind::NotFound => object_store::Error::NotFound {
            path: path.display().to_string(),
            source: Box::new(source),
        },
        _ => generic(path, source),
    }
}

fn generic(path: &std::path::Path, source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: format!("{}: {source}", path.display()).into(),
    }
}

fn read_range(
    file: &File,
    path: &std::path::Path,
    range: Range<u64>,
) -> object_store::Result<Bytes> {
    let len = usize::try_from(range.end - range.start)
        .map_err(|_| generic(path, std::io::Error::other("range too large")))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, range.start)
        .map_err(|e| generic(path, e))?;
    Ok(buf.into())
}

/// The metadata `LocalFileSystem` reports for a file.
fn object_meta(metadata: &Metadata, location: Path) -> ObjectMeta {
    ObjectMeta {
        location,
        last_modified: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH).into(),
        size: metadata.len(),
        e_tag: Some(e_tag(metadata)),
        version: None,
    }
}

/// `LocalFileSystem`'s e-tag: the inode, the modification time in
/// microseconds and the size.
fn e_tag(metadata: &Metadata) -> String {
    let mtime = metadata
        .modified()
        .unwrap_or(SystemTime::UNIX_EPOCH)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    let (inode, size) = (metadata.ino(), metadata.len());
    format!("\"{inode:x}-{mtime:x}-{size:x}\"")
}

wrapping_store_text!(DirectLocal, fs);

#[async_trait]
impl ObjectStore for DirectLocal {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let create = match opts.mode {
            PutMode::Overwrite => false,
            PutMode::Create => true,
            PutMode::Update(_) => {
                self.publish_beside(location)?;
                return self.fs.put_opts(location, payload, opts).await;
            }
        };
        if !opts.attributes.is_empty() {
            // Refused before anything is touched: SlateDB tries every create
            // with its put-id attribute first, then again without.
            return self.fs.put_opts(location, payload, opts).await;
        }
        let path = self.fs.path_to_filesystem(location)?;
        if payload.content_length() > INLINE_WRITE_BYTES {
            self.journals.publish_beside(&path)?;
            return self.fs.put_opts(location, payload, opts).await;
        }
        let durable = opts.extensions.get::<ForLiveProcesses>().is_none();
        let journaled = create
            && durable
            && payload.content_length() <= JOURNALED_OBJECT_BYTES
            && path.parent().is_some_and(is_journaled);
        if journaled {
            if let Some(result) = self.write_journaled(&path, &payload)? {
                return Ok(result);
            }
        }
        self.journals.publish_beside(&path)?;
        write_here(&path, &payload, create, durable, &self.spares)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.publish_beside(location)?;
        self.fs.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let path = self.fs.path_to_filesystem(location)?;
        self.journals.publish_beside(&path)?;
        match self.read_here(location, &path, &options)? {
            Some(result) => Ok(result),
            None => self.fs.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let (spares, fs, journals) = (self.spares.clone(), self.fs.clone(), self.journals.clone());
        // A rename and a truncate here, or `LocalFileSystem`'s removal.
        locations
            .then(move |location| {
                let (spares, fs, journals) = (spares.clone(), fs.clone(), journals.clone());
                async move {
                    let location = location?;
                    let path = fs.path_to_filesystem(&location)?;
                    journals.publish_beside(&path)?;
                    match spares.delete(&path) {
                        Ok(Deleted::Recycled) => Ok(location),
                        Ok(Deleted::NotKept) => fs.delete(&location).await.map(|()| location),
                        Err(e) => Err(io_error(&path, e)),
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self.publish_within(prefix) {
            return futures_util::stream::once(async move { Err(e) }).boxed();
        }
        match self.list_here(prefix) {
            Ok(Some(objects)) => futures_util::stream::iter(objects.into_iter().map(Ok)).boxed(),
            Ok(None) => self.fs.list(prefix),
            Err(e) => futures_util::stream::once(async move { Err(e) }).boxed(),
        }
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self.publish_within(prefix) {
            return futures_util::stream::once(async move { Err(e) }).boxed();
        }
        self.fs.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.publish_within(prefix)?;
        match self.list_folder_here(prefix)? {
            Some(listing) => Ok(listing),
            None => self.fs.list_with_delimiter(prefix).await,
        }
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.publish_beside(from)?;
        self.publish_beside(to)?;
        self.fs.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::spares::tests::files_in;
    use super::super::spares::SPARES_AHEAD;
    use super::*;
    use object_store::GetRange;
    use std::sync::Arc;

    /// The same folder, through moraine's store and through `LocalFileSystem`.
    fn both() -> (tempfile::TempDir, DirectLocal, LocalFileSystem) {
        let dir = tempfile::tempdir().unwrap();
        let direct = DirectLocal::new(dir.path()).unwrap();
        let fs = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        (dir, direct, fs)
    }

    async fn read(store: &dyn ObjectStore, location: &Path, range: Option<GetRange>) -> Bytes {
        let options = GetOptions {
            range,
            ..GetOptions::default()
        };
        store
            .get_opts(location, options)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn what_one_writes_the_other_reads_with_the_same_metadata() {
        let (_dir, direct, fs) = both();
        let mine = Path::from("wal/00000000000000000001.sst");
        let theirs = Path::from("manifest/00000000000000000001.manifest");
        let put = direct.put(&mine, PutPayload::from("mine")).await.unwrap();
        fs.put(&theirs, PutPayload::from("theirs")).await.unwrap();
        for location in [&mine, &theirs] {
            let (a, b) = (
                direct.head(location).await.unwrap(),
                fs.head(location).await.unwrap(),
            );
            assert_eq!(a, b, "{location}");
            assert_eq!(
                read(&direct, location, None).await,
                read(&fs, location, None).await
            );
        }
        assert_eq!(put.e_tag, fs.head(&mine).await.unwrap().e_tag);
        let part = Some(GetRange::Bounded(1..3));
        assert_eq!(
            read(&direct, &theirs, part.clone()).await,
            Bytes::from("he")
        );
        let suffix = Some(GetRange::Suffix(2));
        assert_eq!(read(&direct, &mine, suffix).await, Bytes::from("ne"));
        let past = GetOptions {
            range: Some(GetRange::Bounded(10..20)),
            ..GetOptions::default()
        };
        let refused = direct.get_opts(&mine, past).await.unwrap_err().to_string();
        assert!(refused.contains("Requested range was invalid"), "{refused}");
    }

    #[tokio::test]
    async fn create_if_absent_refuses_an_existing_object_and_leaves_nothing_staged() {
        let (dir, direct, _fs) = both();
        // A folder without a journal: this is the staged write's create.
        let location = Path::from("compacted/00000000000000000007.sst");
        let create = || PutOptions::from(PutMode::Create);
        direct
            .put_opts(&location, PutPayload::from("first"), create())
            .await
            .unwrap();
        let again = direct
            .put_opts(&location, PutPayload::from("second"), create())
            .await;
        assert!(
            matches!(again, Err(object_store::Error::AlreadyExists { .. })),
            "{again:?}"
        );
        assert_eq!(read(&direct, &location, None).await, Bytes::from("first"));
        let names: Vec<_> = std::fs::read_dir(dir.path().join("compacted"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["00000000000000000007.sst"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn of_racing_creates_exactly_one_lands() {
        let (_dir, direct, _fs) = both();
        let direct = Arc::new(direct);
        let location = Path::from("wal/00000000000000000009.sst");
        let racers: Vec<_> = (0..16)
            .map(|i| {
                let (direct, location) = (direct.clone(), location.clone());
                tokio::spawn(async move {
                    let body = PutPayload::from(format!("writer {i}"));
                    direct
                        .put_opts(&location, body, PutOptions::from(PutMode::Create))
                        .await
                })
            })
            .collect();
        let mut landed = 0;
        for racer in racers {
            match racer.await.unwrap() {
                Ok(_) => landed += 1,
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(landed, 1);
    }

    #[tokio::test]
    async fn listings_match_local_file_system_and_skip_staged_writes() {
        let (dir, direct, fs) = both();
        for name in [
            "manifest/1.manifest",
            "wal/1.sst",
            "wal/2.sst",
            "compacted/x.sst",
            "compacted/01M96Q6W88ET0PEJJVDB2R6ZPD.sst",
            "compacted/y z+ü.sst",
            "lease",
        ] {
            direct
                .put(&Path::from(name), PutPayload::from("x"))
                .await
                .unwrap();
        }
        // A write that stopped before it was published.
        std::fs::write(dir.path().join("wal/3.sst#1"), "partial").unwrap();
        let sorted = |mut v: Vec<ObjectMeta>| {
            v.sort_by(|a, b| a.location.cmp(&b.location));
            v
        };
        for prefix in [
            None,
            Some(Path::from("wal")),
            Some(Path::from("compacted")),
            Some(Path::from("missing")),
        ] {
            let mine: Vec<ObjectMeta> = direct
                .list(prefix.as_ref())
                .map(|m| m.unwrap())
                .collect()
                .await;
            let theirs: Vec<ObjectMeta> =
                fs.list(prefix.as_ref()).map(|m| m.unwrap()).collect().await;
            assert_eq!(sorted(mine), sorted(theirs), "{prefix:?}");
            let mine = direct.list_with_delimiter(prefix.as_ref()).await.unwrap();
            let theirs = fs.list_with_delimiter(prefix.as_ref()).await.unwrap();
            assert_eq!(mine.common_prefixes, theirs.common_prefixes, "{prefix:?}");
            assert_eq!(sorted(mine.objects), sorted(theirs.objects), "{prefix:?}");
        }
    }

    #[tokio::test]
    async fn a_listing_too_long_to_make_here_is_local_file_system_s() {
        let (dir, direct, fs) = both();
        let wal = dir.path().join("wal");
        std::fs::create_dir_all(&wal).unwrap();
        for n in 0..=INLINE_LIST_ENTRIES {
            std::fs::write(wal.join(format!("{n:020}.sst")), "").unwrap();
        }
        let prefix = Path::from("wal");
        let mine: Vec<ObjectMeta> = direct
            .list(Some(&prefix))
            .map(|m| m.unwrap())
            .collect()
            .await;
        let theirs: Vec<ObjectMeta> = fs.list(Some(&prefix)).map(|m| m.unwrap()).collect().await;
        assert_eq!(mine.len(), INLINE_LIST_ENTRIES + 1);
        assert_eq!(mine.len(), theirs.len());
        let listing = direct.list_with_delimiter(Some(&prefix)).await.unwrap();
        assert_eq!(listing.objects.len(), INLINE_LIST_ENTRIES + 1);
    }

    #[tokio::test]
    async fn a_missing_object_or_a_folder_is_not_found() {
        let (_dir, direct, _fs) = both();
        direct
            .put(&Path::from("wal/1.sst"), PutPayload::from("x"))
            .await
            .unwrap();
        for location in ["wal/2.sst", "wal", "nothing/here"] {
            let got = direct.head(&Path::from(location)).await;
            assert!(
                matches!(got, Err(object_store::Error::NotFound { .. })),
                "{location}: {got:?}"
            );
        }
    }

    #[tokio::test]
    async fn large_objects_go_through_local_file_system_whole() {
        let (_dir, direct, fs) = both();
        let location = Path::from("compacted/big.sst");
        let body: Vec<u8> = (0..(INLINE_READ_BYTES as usize + 4096))
            .map(|i| (i % 251) as u8)
            .collect();
        direct
            .put(&location, PutPayload::from(body.clone()))
            .await
            .unwrap();
        assert_eq!(
            read(&direct, &location, None).await,
            Bytes::from(body.clone())
        );
        assert_eq!(
            direct.head(&location).await.unwrap(),
            fs.head(&location).await.unwrap()
        );
        let tail = Some(GetRange::Offset(INLINE_READ_BYTES));
        assert_eq!(
            read(&direct, &location, tail).await,
            Bytes::from(body[INLINE_READ_BYTES as usize..].to_vec())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deleted_files_become_empty_spares_that_later_writes_take() {
        let (dir, direct, fs) = both();
        let folder = dir.path().join("wal");
        let wal = |i: u32| Path::from(format!("wal/{i:020}.sst"));
        let body = |i: u32| format!("commit {i} ").repeat(100);
        let put = |i: u32| {
            let mode = if i.is_multiple_of(2) {
                PutMode::Create
            } else {
                PutMode::Overwrite
            };
            let (direct, location) = (&direct, wal(i));
            async move {
                let options = PutOptions::from(mode);
                direct
                    .put_opts(&location, PutPayload::from(body(i)), options)
                    .await
            }
        };
        for i in 0..6 {
            put(i).await.unwrap();
        }
        // A folder written again and again gets new files made ahead.
        let ahead = SPARES_AHEAD;
        for _ in 0..400 {
            if direct.spares.ready(&folder) == ahead {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(direct.spares.ready(&folder), ahead);
        let gone: Vec<_> = direct
            .delete_stream(futures_util::stream::iter((0..4).map(wal).map(Ok)).boxed())
            .collect()
            .await;
        assert!(gone.iter().all(|r| r.is_ok()), "{gone:?}");
        assert_eq!(direct.spares.ready(&folder), ahead + 4);
        // Deleted files and files made ahead keep no bytes, and neither
        // listing shows them.
        let names = files_in(&folder);
        let spares: Vec<_> = names.iter().filter(|n| n.starts_with("spare#")).collect();
        assert_eq!(spares.len(), ahead + 4, "{names:?}");
        let sizes: Vec<u64> = spares
            .iter()
            .map(|spare| std::fs::metadata(folder.join(spare)).unwrap().len())
            .collect();
        assert!(sizes.iter().all(|&size| size == 0), "{sizes:?}");
        for store in [&direct as &dyn ObjectStore, &fs] {
            let mut listed: Vec<_> = store
                .list(Some(&Path::from("wal")))
                .map(|m| m.unwrap().location)
                .collect()
                .await;
            listed.sort();
            assert_eq!(listed, vec![wal(4), wal(5)]);
            assert!(matches!(
                store.head(&wal(0)).await,
                Err(object_store::Error::NotFound { .. })
            ));
        }
        // Writes take the spares, and the folder's inodes are reused.
        let inodes = |names: &[String]| -> std::collections::BTreeSet<u64> {
            names
                .iter()
                .map(|n| std::fs::metadata(folder.join(n)).unwrap().ino())
                .collect()
        };
        let before = inodes(&names);
        for i in 6..9 {
            put(i).await.unwrap();
        }
        // Their files are made when the folder is next looked at.
        direct.head(&wal(8)).await.unwrap();
        assert_eq!(direct.spares.ready(&folder), ahead + 1);
        assert_eq!(inodes(&files_in(&folder)), before);
        for i in 4..9 {
            assert_eq!(read(&fs, &wal(i), None).await, Bytes::from(body(i)));
            assert_eq!(
                direct.head(&wal(i)).await.unwrap(),
                fs.head(&wal(i)).await.unwrap()
            );
        }
        // A create still refuses an object that exists.
        let again = direct
            .put_opts(
                &wal(6),
                PutPayload::from("late"),
                PutOptions::from(PutMode::Create),
            )
            .await;
        assert!(
            matches!(again, Err(object_store::Error::AlreadyExists { .. })),
            "{again:?}"
        );
        assert_eq!(read(&fs, &wal(6), None).await, Bytes::from(body(6)));
        // Deleting what is not there says so, whichever path deletes.
        for location in [wal(0), Path::from("elsewhere/missing")] {
            let missing = direct
                .delete_stream(futures_util::stream::once(async move { Ok(location) }).boxed())
                .next()
                .await
                .unwrap();
            assert!(
                matches!(missing, Err(object_store::Error::NotFound { .. })),
                "{missing:?}"
            );
        }
        // A dropped store leaves the next one its spares ahead, and no more,
        // beside the WAL's journal.
        drop(direct);
        let (kept, objects): (Vec<_>, Vec<_>) = files_in(&folder)
            .into_iter()
            .filter(|n| n != super::super::journal::JOURNAL_NAME)
            .partition(|n| n.starts_with("kept#"));
        let expected: Vec<_> = (4..9).map(|i| format!("{i:020}.sst")).collect();
        assert_eq!(objects, expected);
        assert_eq!(kept.len(), ahead);
    }

    #[tokio::test]
    async fn a_lease_rewritten_under_one_name_is_never_recycled_under_its_reader() {
        let (dir, direct, _fs) = both();
        let lease = Path::from("catalog/writer.lease");
        let path = dir.path().join("catalog/writer.lease");
        for turn in 0..6 {
            let holder = format!("holder {turn}");
            let create = PutOptions::from(PutMode::Create);
            direct
                .put_opts(&lease, PutPayload::from(holder.clone()), create)
                .await
                .unwrap();
            // Another writer opened the lease just before this one let go.
            let mut reader = File::open(&path).unwrap();
            let gone: Vec<_> = direct
                .delete_stream(futures_util::stream::iter([Ok(lease.clone())]).boxed())
                .collect()
                .await;
            assert!(gone.iter().all(|r| r.is_ok()), "{gone:?}");
            direct
                .put(&lease, PutPayload::from(format!("next of {turn}")))
                .await
                .unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
            assert_eq!(text, holder, "turn {turn}");
            direct.delete(&lease).await.unwrap();
        }
        assert!(files_in(&dir.path().join("catalog")).is_empty());
    }
}
