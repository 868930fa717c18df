//! Object-store requests, counted by kind.
//!
//! Every store talks to its object store through this wrapper, so an
//! operator (`moraine_stats`), a test and the benchmark can see what a
//! commit or an attach costs in requests: on S3 that is money and latency.

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests made so far, by kind.
#[derive(Debug, Default)]
pub struct RequestCounts {
    puts: AtomicU64,
    gets: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    copies: AtomicU64,
    /// Reads answered from memory (`store::remembered`), which reached no store.
    remembered: AtomicU64,
}

impl RequestCounts {
    /// `(name, value)` pairs in a fixed order.
    pub fn snapshot(&self) -> [(&'static str, u64); 6] {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("object_store_puts", load(&self.puts)),
            ("object_store_gets", load(&self.gets)),
            ("object_store_lists", load(&self.lists)),
            ("object_store_deletes", load(&self.deletes)),
            ("object_store_copies", load(&self.copies)),
            ("object_store_reads_remembered", load(&self.remembered)),
        ]
    }

    pub(super) fn bump_remembered(&self) {
        Self::bump(&self.remembered);
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// An object store that counts the requests passing through it.
pub struct Counted {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<RequestCounts>,
}

impl Counted {
    pub fn wrap(inner: Arc<dyn ObjectStore>) -> (Arc<dyn ObjectStore>, Arc<RequestCounts>) {
        let counts = Arc::new(RequestCounts::default());
        let store = Counted {
            inner,
            counts: counts.clone(),
        };
        (Arc::new(store), counts)
    }
}

wrapping_store_text!(Counted, inner);

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let result = self.inner.put_opts(location, payload, opts).await;
        // SlateDB tries each create-if-absent put with its put-id attribute first; the local file
        // system refuses attributes before touching a file, and SlateDB puts again without them.
        // The refusal reached no store, so it is not a request.
        if !matches!(result, Err(object_store::Error::NotImplemented { .. })) {
            RequestCounts::bump(&self.counts.puts);
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        RequestCounts::bump(&self.counts.puts);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        RequestCounts::bump(&self.counts.gets);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counts = self.counts.clone();
        let counted = locations
            .inspect(move |_| RequestCounts::bump(&counts.deletes))
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        RequestCounts::bump(&self.counts.lists);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        RequestCounts::bump(&self.counts.lists);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        RequestCounts::bump(&self.counts.lists);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        RequestCounts::bump(&self.counts.copies);
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::local::LocalFileSystem;
    use object_store::{Attribute, Attributes, PutMode};

    #[tokio::test]
    async fn a_put_the_store_refuses_unsent_is_not_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = LocalFileSystem::new_with_prefix(dir.path()).expect("local store");
        let (store, counts) = Counted::wrap(Arc::new(local));
        let path = Path::from("wal/00000000000000000001.sst");
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::Metadata("put-id".into()), "a".into());
        let with_attributes = PutOptions {
            mode: PutMode::Create,
            attributes,
            ..PutOptions::default()
        };
        let refused = store
            .put_opts(&path, PutPayload::from_static(b"wal"), with_attributes)
            .await;
        assert!(
            matches!(refused, Err(object_store::Error::NotImplemented { .. })),
            "{refused:?}"
        );
        store
            .put_opts(
                &path,
                PutPayload::from_static(b"wal"),
                PutMode::Create.into(),
            )
            .await
            .expect("a plain put");
        assert_eq!(counts.snapshot()[0], ("object_store_puts", 1));
    }
}
