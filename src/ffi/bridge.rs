//! The async bridge: one process-wide tokio runtime that DuckDB's threads
//! block on. DuckDB's catalog hooks are synchronous and an operation is an
//! object-store round trip, so `block_on` costs microseconds against
//! milliseconds of I/O.

use crate::error::{Error, Result};
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::Runtime;

fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("moraine")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))
}

pub fn block_on<F: Future>(future: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Internal(
            "moraine was called from inside its own runtime".into(),
        ));
    }
    Ok(runtime()?.block_on(future))
}

/// Runs `future` on the runtime in the background; the caller polls the
/// handle with `block_on`.
pub fn spawn<F>(future: F) -> Result<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime()?.spawn(future))
}
