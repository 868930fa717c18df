//! Write-once objects, kept in memory after their first read.
//!
//! SlateDB names its WAL objects, manifests and compaction records by a
//! number it creates with create-if-absent, so the bytes at such a path never
//! change once they exist. A writer that takes the turn (design 0010) opens
//! SlateDB again and replays every WAL object after the manifest's replay
//! point, most of which this process read at its previous open; on S3 that
//! was a HEAD, a second HEAD and a GET per object, about 190 requests per
//! turn with three writers. Serving those reads from memory leaves only the
//! objects written since this process last looked.
//!
//! Only whole reads of positive results are kept: a miss ("not found") goes
//! to the store every time, because the fencing protocol and the discovery of
//! the next WAL id depend on it; and conditional or versioned reads pass
//! through. Deleting or overwriting a path through this wrapper forgets it.

use super::counted::RequestCounts;
use super::layout;
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// Whether objects of `folder`, under a store's root, are kept: SlateDB's
/// write-once folders but the compacted SSTs, which can be large and are
/// read a block at a time through SlateDB's own block cache.
fn keeps_objects_of(folder: &str) -> bool {
    folder != layout::COMPACTED && layout::WRITE_ONCE.contains(&folder)
}

/// Objects larger than this are not kept, and later reads of them go to the
/// store as asked: a catalog's WAL object is one commit, usually a few
/// kilobytes.
const LARGEST_KEPT_OBJECT: usize = 1 << 20;

/// How many large objects' paths are remembered as large before the list
/// starts again.
const LARGE_PATHS: usize = 4096;

/// What one attach keeps at most. WAL objects are read in id order and left
/// behind once the replay point passes them, so the oldest goes first.
const KEPT_BYTES: usize = 32 << 20;

struct TooLarge;

struct Object {
    meta: ObjectMeta,
    attributes: Attributes,
    bytes: Bytes,
}

#[derive(Default)]
struct Kept {
    by_path: HashMap<Path, Arc<Object>>,
    oldest_first: VecDeque<Path>,
    bytes: usize,
    /// Objects read whole once and found too large to keep.
    large: HashSet<Path>,
}

impl Kept {
    fn keep(&mut self, path: Path, object: Arc<Object>) {
        if object.bytes.len() > LARGEST_KEPT_OBJECT {
            if self.large.len() >= LARGE_PATHS {
                self.large.clear();
            }
            self.large.insert(path);
            return;
        }
        self.bytes += object.bytes.len();
        if let Some(old) = self.by_path.insert(path.clone(), object) {
            self.bytes -= old.bytes.len();
        } else {
            self.oldest_first.push_back(path);
        }
        while self.bytes > KEPT_BYTES {
            let Some(oldest) = self.oldest_first.pop_front() else {
                break;
            };
            if let Some(gone) = self.by_path.remove(&oldest) {
                self.bytes -= gone.bytes.len();
            }
        }
    }

    fn forget(&mut self, path: &Path) {
        self.large.remove(path);
        if let Some(gone) = self.by_path.remove(path) {
            self.bytes -= gone.bytes.len();
            self.oldest_first.retain(|p| p != path);
        }
    }
}

/// An object store that answers repeated reads of write-once objects from
/// memory.
pub struct Remembered {
    inner: Arc<dyn ObjectStore>,
    root: Path,
    kept: Arc<Mutex<Kept>>,
    counts: Arc<RequestCounts>,
}

impl Remembered {
    pub fn wrap(
        inner: Arc<dyn ObjectStore>,
        root: Path,
        counts: Arc<RequestCounts>,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(Remembered {
            inner,
            root,
            kept: Arc::default(),
            counts,
        })
    }

    fn is_write_once(&self, location: &Path) -> bool {
        let Some(mut rest) = location.prefix_match(&self.root) else {
            return false;
        };
        let folder = rest.next();
        let name = rest.next();
        match (folder, name, rest.next()) {
            (Some(folder), Some(_), None) => keeps_objects_of(folder.as_ref()),
            _ => false,
        }
    }

    /// The kept object, or whether the object is known to be too large to
    /// keep.
    fn kept(&self, location: &Path) -> Result<Option<Arc<Object>>, TooLarge> {
        let Ok(kept) = self.kept.lock() else {
            return Ok(None);
        };
        if kept.large.contains(location) {
            return Err(TooLarge);
        }
        Ok(kept.by_path.get(location).cloned())
    }

    fn forget(&self, location: &Path) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.forget(location);
        }
    }

    /// Reads the whole object once, keeps it, and answers from it.
    async fn read_whole(
        &self,
        location: &Path,
        options: &GetOptions,
    ) -> object_store::Result<Arc<Object>> {
        let whole = GetOptions {
            extensions: options.extensions.clone(),
            ..GetOptions::default()
        };
        let found = self.inner.get_opts(location, whole).await?;
        let (meta, attributes) = (found.meta.clone(), found.attributes.clone());
        let bytes = found.bytes().await?;
        let object = Arc::new(Object {
            meta,
            attributes,
            bytes,
        });
        if let Ok(mut kept) = self.kept.lock() {
            kept.keep(location.clone(), object.clone());
        }
        Ok(object)
    }
}

/// Whether a read asks for the object as it is, whatever version it is.
fn is_plain_read(options: &GetOptions) -> bool {
    options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

/// Answers a read from a kept object, or `None` when the range does not fit
/// it (the store then gives its own error).
fn answer(object: &Object, options: &GetOptions) -> Option<GetResult> {
    let size = object.bytes.len() as u64;
    let range = match &options.range {
        Some(range) => range.as_range(size).ok()?,
        None => 0..size,
    };
    let body = if options.head {
        Bytes::new()
    } else {
        object.bytes.slice(range.start as usize..range.end as usize)
    };
    Some(GetResult {
        payload: GetResultPayload::Stream(
            futures_util::stream::once(async move { Ok(body) }).boxed(),
        ),
        meta: object.meta.clone(),
        range,
        attributes: object.attributes.clone(),
        extensions: Default::default(),
    })
}

wrapping_store_text!(Remembered, inner);

#[async_trait]
impl ObjectStore for Remembered {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.forget(location);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.forget(location);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if !(self.is_write_once(location) && is_plain_read(&options)) {
            return self.inner.get_opts(location, options).await;
        }
        let object = match self.kept(location) {
            Ok(Some(object)) => {
                self.counts.bump_remembered();
                object
            }
            Ok(None) => self.read_whole(location, &options).await?,
            Err(TooLarge) => return self.inner.get_opts(location, options).await,
        };
        match answer(&object, &options) {
            Some(result) => Ok(result),
            None => self.inner.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let kept = self.kept.clone();
        let forgetting = locations
            .inspect(move |location| {
                if let (Ok(location), Ok(mut kept)) = (location, kept.lock()) {
                    kept.forget(location);
                }
            })
            .boxed();
        self.inner.delete_stream(forgetting)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.forget(to);
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{GetRange, ObjectStoreExt, PutMode};

    fn stores() -> (
        Arc<dyn ObjectStore>,
        Arc<dyn ObjectStore>,
        Arc<RequestCounts>,
    ) {
        let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (counted, counts) = super::super::counted::Counted::wrap(backend.clone());
        let remembered = Remembered::wrap(counted, Path::from("lake/catalog"), counts.clone());
        (backend, remembered, counts)
    }

    async fn last_bytes(
        store: &Arc<dyn ObjectStore>,
        path: &Path,
        n: u64,
    ) -> (std::ops::Range<u64>, Bytes) {
        let suffix = GetOptions {
            range: Some(GetRange::Suffix(n)),
            ..GetOptions::default()
        };
        let read = store.get_opts(path, suffix).await.expect("range");
        let range = read.range.clone();
        (range, read.bytes().await.expect("bytes"))
    }

    fn gets(counts: &RequestCounts) -> u64 {
        counts.snapshot()[1].1
    }

    #[tokio::test]
    async fn a_write_once_object_is_read_from_the_store_once() {
        let (_, store, counts) = stores();
        let wal = Path::from("lake/catalog/wal/00000000000000000007.sst");
        store
            .put_opts(
                &wal,
                PutPayload::from_static(b"0123456789"),
                PutMode::Create.into(),
            )
            .await
            .expect("put");
        let head = store.head(&wal).await.expect("head");
        assert_eq!(head.size, 10);
        let (range, tail) = last_bytes(&store, &wal, 4).await;
        assert_eq!(range, 6..10);
        assert_eq!(tail.as_ref(), b"6789");
        let whole = store.get(&wal).await.expect("get");
        assert_eq!(whole.bytes().await.expect("bytes").as_ref(), b"0123456789");
        assert_eq!(
            gets(&counts),
            1,
            "the head, the range and the read share one GET"
        );
        assert_eq!(counts.snapshot()[5].1, 2);
    }

    #[tokio::test]
    async fn misses_mutable_objects_and_conditional_reads_go_to_the_store() {
        let (backend, store, counts) = stores();
        let wal = Path::from("lake/catalog/wal/00000000000000000008.sst");
        assert!(store.head(&wal).await.is_err());
        backend
            .put(&wal, PutPayload::from_static(b"fence"))
            .await
            .expect("put");
        assert_eq!(store.head(&wal).await.expect("found after a miss").size, 5);
        let lease = Path::from("lake/catalog/writer.lease");
        backend
            .put(&lease, PutPayload::from_static(b"a"))
            .await
            .expect("put");
        store.get(&lease).await.expect("get");
        backend
            .put(&lease, PutPayload::from_static(b"bb"))
            .await
            .expect("put");
        assert_eq!(store.head(&lease).await.expect("head").size, 2);
        let before = gets(&counts);
        let conditional = GetOptions {
            if_none_match: Some("\"other\"".into()),
            ..GetOptions::default()
        };
        store.get_opts(&wal, conditional).await.expect("get");
        assert_eq!(gets(&counts), before + 1);
    }

    #[tokio::test]
    async fn a_large_object_is_read_once_whole_then_as_asked() {
        let (_, store, counts) = stores();
        let wal = Path::from("lake/catalog/wal/00000000000000000009.sst");
        let large = vec![7u8; LARGEST_KEPT_OBJECT + 1];
        store.put(&wal, PutPayload::from(large)).await.expect("put");
        assert_eq!(
            store.head(&wal).await.expect("head").size as usize,
            LARGEST_KEPT_OBJECT + 1
        );
        let (_, tail) = last_bytes(&store, &wal, 3).await;
        assert_eq!(tail.as_ref(), &[7, 7, 7]);
        assert_eq!(gets(&counts), 2, "the range went to the store");
        assert_eq!(counts.snapshot()[5].1, 0);
    }

    #[tokio::test]
    async fn a_deleted_or_overwritten_object_is_forgotten() {
        let (backend, store, _) = stores();
        let manifest = Path::from("lake/catalog/manifest/00000000000000000003.manifest");
        store
            .put(&manifest, PutPayload::from_static(b"one"))
            .await
            .expect("put");
        store.get(&manifest).await.expect("get");
        store.delete(&manifest).await.expect("delete");
        assert!(store.head(&manifest).await.is_err());
        backend
            .put(&manifest, PutPayload::from_static(b"again"))
            .await
            .expect("put");
        store.get(&manifest).await.expect("get");
        store
            .put(&manifest, PutPayload::from_static(b"third"))
            .await
            .expect("put");
        let read = store.get(&manifest).await.expect("get");
        assert_eq!(read.bytes().await.expect("bytes").as_ref(), b"third");
    }
}
