//! Store locations: a local directory (`/path`, `file:///path`), a named
//! in-process store (`memory://name`) or an S3 prefix (`s3://bucket/prefix`).

use super::settings::S3Options;
use crate::error::{Error, Result};
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUri {
    Local(PathBuf),
    Memory(String),
    S3 { bucket: String, prefix: String },
}

impl fmt::Display for StoreUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUri::Local(p) => write!(f, "{}", p.display()),
            StoreUri::Memory(name) => write!(f, "memory://{name}"),
            StoreUri::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// `memory://` stores live as long as the process, so a DETACH followed by an
/// ATTACH of the same name sees the same catalog.
fn memory_stores() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    STORES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl StoreUri {
    pub fn parse(text: &str) -> Result<StoreUri> {
        let text = text.trim();
        let invalid = |why: &str| {
            Error::InvalidArgument(format!("invalid moraine store URI '{text}': {why}"))
        };
        if text.is_empty() {
            return Err(invalid(
                "it is empty; expected a directory, file://, memory://name or s3://bucket/prefix",
            ));
        }
        if let Some(name) = text.strip_prefix("memory://") {
            if name.is_empty() || name.contains('/') {
                return Err(invalid(
                    "memory:// needs a name without '/', e.g. memory://lake",
                ));
            }
            return Ok(StoreUri::Memory(name.to_string()));
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("s3:// needs a bucket"));
            }
            return Ok(StoreUri::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        let path = match text.strip_prefix("file://") {
            Some(p) if p.starts_with('/') => p,
            Some(_) => {
                return Err(invalid(
                    "file:// needs an absolute path, e.g. file:///data/lake",
                ))
            }
            None => text,
        };
        if let Some((scheme, _)) = path.split_once("://") {
            return Err(invalid(&format!("unsupported scheme '{scheme}://'")));
        }
        let path = PathBuf::from(path);
        let absolute = if path.is_absolute() {
            path
        } else {
            std::env::current_dir()
                .map_err(|e| invalid(&format!("cannot resolve a relative path: {e}")))?
                .join(path)
        };
        Ok(StoreUri::Local(absolute))
    }

    pub fn object_store(&self, s3: &S3Options) -> Result<Arc<dyn ObjectStore>> {
        match self {
            StoreUri::Local(dir) => {
                if dir.exists() && !dir.is_dir() {
                    return Err(Error::InvalidArgument(format!(
                        "{} is a file, not a moraine store: a moraine store is a directory (or memory://, s3://)",
                        dir.display()
                    )));
                }
                super::local::create_folders(dir)
                    .map_err(|e| Error::store(format!("creating {}", dir.display()), e))?;
                let fs = super::local::DirectLocal::new(dir)
                    .map_err(|e| Error::store(format!("opening {}", dir.display()), e))?;
                for folder in super::layout::JOURNALED {
                    fs.restore(&self.root_path().join(folder)).map_err(|e| {
                        Error::store(
                            format!("restoring the {folder} journal of {}", dir.display()),
                            e,
                        )
                    })?;
                }
                Ok(Arc::new(fs))
            }
            StoreUri::Memory(name) => {
                let mut stores = memory_stores()
                    .lock()
                    .map_err(|_| Error::Internal("memory store registry poisoned".into()))?;
                Ok(stores
                    .entry(name.clone())
                    .or_insert_with(|| Arc::new(InMemory::new()))
                    .clone())
            }
            StoreUri::S3 { bucket, .. } => {
                Ok(Arc::new(s3_client(bucket, s3).map_err(|e| {
                    Error::InvalidArgument(format!("cannot reach {self}: {e}"))
                })?))
            }
        }
    }

    /// The SlateDB path inside the object store.
    pub fn root_path(&self) -> Path {
        match self {
            StoreUri::S3 { prefix, .. } if !prefix.is_empty() => {
                Path::from(format!("{prefix}/catalog"))
            }
            _ => Path::from("catalog"),
        }
    }

    /// The store of schema `schema` beside this one: a catalog schema is a
    /// lake of its own (DuckLake's `METADATA_SCHEMA`), with its own SlateDB
    /// database under `schemas/<hex of the lower-case name>`, so any name a
    /// schema can have makes a safe path.
    pub fn with_schema(&self, schema: &str) -> StoreUri {
        let hex: String = schema
            .to_lowercase()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = format!("schemas/{hex}");
        match self {
            StoreUri::Local(path) => StoreUri::Local(path.join(dir)),
            StoreUri::Memory(name) => StoreUri::Memory(format!("{name}/{dir}")),
            StoreUri::S3 { bucket, prefix } => StoreUri::S3 {
                bucket: bucket.clone(),
                prefix: if prefix.is_empty() {
                    dir
                } else {
                    format!("{prefix}/{dir}")
                },
            },
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, StoreUri::Local(_))
    }

    /// Whether SlateDB's garbage collection may write boundary files here:
    /// they need If-Match, which the local filesystem lacks, and there they
    /// would stop manifest and compaction-record collection.
    pub fn gc_boundary_files(&self) -> bool {
        !self.is_local()
    }
}

/// How long the S3 client retries one request before it reports the error.
const S3_RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// An S3 client: the `AWS_*` environment first, then whatever DuckDB's
/// secret says on top. Conditional PUTs (If-Match / If-None-Match) are what
/// SlateDB's manifest and fencing rely on; object_store uses them by default.
fn s3_client(
    bucket: &str,
    s3: &S3Options,
) -> std::result::Result<object_store::aws::AmazonS3, object_store::Error> {
    // The client's own retries last up to three minutes by default: an
    // endpoint that never answers held the ATTACH that long. SlateDB's
    // bounded retries (`object_store_retries`) come on top of these.
    let retry = object_store::RetryConfig {
        retry_timeout: S3_RETRY_TIMEOUT,
        ..Default::default()
    };
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry);
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(key_id) = &s3.key_id {
        builder = builder.with_access_key_id(key_id);
    }
    if let Some(secret) = &s3.secret {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(token) = &s3.session_token {
        builder = builder.with_token(token);
    }
    // DuckDB secrets name AWS's global endpoint by default; AWS itself is
    // better reached through the region's own endpoint, which object_store
    // derives.
    let endpoint = s3.endpoint.as_ref().filter(|e| *e != "s3.amazonaws.com");
    if let Some(endpoint) = endpoint {
        let url = if endpoint.contains("://") {
            endpoint.clone()
        } else {
            let scheme = if s3.use_ssl.unwrap_or(true) {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{endpoint}")
        };
        builder = builder
            .with_allow_http(url.starts_with("http://"))
            .with_endpoint(url);
    }
    if let Some(style) = &s3.url_style {
        builder = builder.with_virtual_hosted_style_request(style == "vhost");
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_supported_forms() {
        assert_eq!(
            StoreUri::parse("/tmp/x").unwrap(),
            StoreUri::Local("/tmp/x".into())
        );
        assert_eq!(
            StoreUri::parse("file:///tmp/x").unwrap(),
            StoreUri::Local("/tmp/x".into())
        );
        assert_eq!(
            StoreUri::parse("memory://a").unwrap(),
            StoreUri::Memory("a".into())
        );
        assert_eq!(
            StoreUri::parse("s3://b/p/q/").unwrap(),
            StoreUri::S3 {
                bucket: "b".into(),
                prefix: "p/q".into()
            }
        );
    }

    #[test]
    fn malformed_uris_are_clear_errors() {
        for bad in [
            "",
            "memory://",
            "memory://a/b",
            "s3://",
            "file://rel",
            "gs://b/x",
        ] {
            let err = StoreUri::parse(bad).unwrap_err().to_string();
            assert!(err.contains("invalid moraine store URI"), "{bad}: {err}");
        }
    }
}
