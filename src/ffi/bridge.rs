//! The async bridge: one process-wide tokio runtime that DuckDB's threads
//! block on. DuckDB's catalog hooks are synchronous and an operation is an
//! object-store round trip, so `block_on` costs microseconds against
//! milliseconds of I/O.

use crate::error::{Error, Result};
use std::future::Future;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
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
    let runtime = runtime()?;
    let mut future = std::pin::pin!(future);
    // Most calls are answered from memory (the head image, the staged
    // overlay) and finish on their first poll. Entering the runtime only as
    // its context costs a fraction of `block_on`'s set-up, which a commit
    // would otherwise pay about eighty times; a future that has to wait is
    // then driven by `block_on` as before, which polls it again with a
    // waker that works.
    {
        let _context = runtime.enter();
        let mut first = Context::from_waker(Waker::noop());
        if let Poll::Ready(output) = future.as_mut().poll(&mut first) {
            return Ok(output);
        }
    }
    Ok(runtime.block_on(future))
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
