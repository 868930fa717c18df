//! Where a writer's SlateDB tasks run: on the thread that commits.
//!
//! A SlateDB write is a message to its batch-writer task, and a flush a
//! message on to its WAL task, which writes the WAL object. On the
//! multi-thread runtime a commit's DuckDB thread sent each message, parked,
//! a worker woke to run the task, and the answer woke the DuckDB thread
//! again. A commit made three such hops (its transaction, the flush, the
//! WAL write), and on these machines they came to 0.5-1 ms of a 5-6 ms
//! commit, almost all of it waiting for a sleeping thread to be scheduled:
//! the DuckDB thread's CPU time per commit was the file catalog's, its wall
//! time was not.
//!
//! So on a local or in-memory store every task of a writer (batch writer,
//! WAL writer, memtable flusher) runs on one current-thread runtime per
//! process, [`WriteRuntime`], and a commit drives that runtime itself with
//! [`Writes::run`]: each message is a task switch on the committing thread,
//! and the WAL object is written there, as the local store writes on the
//! calling thread anyway ([design 0016]).
//!
//! Everything else that writes (the memtable flush every few hundred
//! commits, idle upkeep, a detach, a handover) awaits as before. A driver
//! thread runs the write runtime whenever no commit has for
//! [`DRIVER_IDLE`], and steps aside when a commit comes: nothing waits for a
//! commit that may never come, and a busy session's commits find the
//! runtime free. An S3 writer keeps SlateDB's default, since its tasks do
//! network I/O, which needs the multi-thread runtime's I/O driver, and a
//! round trip dwarfs a hop there.
//!
//! [design 0016]: ../../docs/design/0016-local-io-on-the-calling-thread.md

use super::uri::StoreUri;
use slatedb::{Db, DbBuilder};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::sync::Notify;

/// How long the write runtime must go undriven by a commit before the
/// driver thread takes it. Longer than the gap between a busy session's
/// commits (5-10 ms of DuckDB's own work), so those commits never wait for
/// the driver to step aside; short enough that a write nobody drives (a
/// detach's close) waits no longer than this.
pub const DRIVER_IDLE: Duration = Duration::from_millis(20);

/// The process's write runtime and the thread that drives it when no
/// commit does.
pub struct WriteRuntime {
    runtime: Runtime,
    state: Mutex<Drivers>,
    changed: Condvar,
    /// Asks the driver thread to give the runtime back to a commit.
    step_aside: Notify,
    on_caller: AtomicU64,
    by_driver: AtomicU64,
}

#[derive(Default)]
struct Drivers {
    /// Commits driving the runtime now.
    callers: usize,
    last_caller: Option<Instant>,
}

static SHARED: OnceLock<Option<&'static WriteRuntime>> = OnceLock::new();

/// The write runtime's counters for the whole process, `(name, value)`:
/// how many writes a commit drove on its own thread, and how many times the
/// driver thread took the runtime over between them. Zero before a writer
/// has opened.
pub fn counters() -> [(&'static str, u64); 2] {
    let count = |pick: fn(&WriteRuntime) -> &AtomicU64| {
        SHARED
            .get()
            .copied()
            .flatten()
            .map_or(0, |shared| pick(shared).load(Ordering::Relaxed))
    };
    [
        ("writes_on_caller", count(|w| &w.on_caller)),
        ("writes_by_driver", count(|w| &w.by_driver)),
    ]
}

impl WriteRuntime {
    /// The process's write runtime, started on first use; `None` if it
    /// cannot start (no threads left), and SlateDB then writes on the
    /// multi-thread runtime as it does by default.
    pub fn get() -> Option<&'static WriteRuntime> {
        *SHARED.get_or_init(|| {
            // Time only: the writer's tasks reach a local store's files on
            // the calling thread, or memory, and an I/O driver would cost a
            // syscall each time the runtime parks.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .ok()?;
            let shared: &'static WriteRuntime = Box::leak(Box::new(WriteRuntime {
                runtime,
                state: Mutex::default(),
                changed: Condvar::new(),
                step_aside: Notify::new(),
                on_caller: AtomicU64::new(0),
                by_driver: AtomicU64::new(0),
            }));
            std::thread::Builder::new()
                .name("moraine-writes".into())
                .spawn(move || shared.drive_when_idle())
                .ok()?;
            Some(shared)
        })
    }

    pub fn handle(&self) -> &Handle {
        self.runtime.handle()
    }

    fn drive_when_idle(&self) {
        loop {
            let Ok(mut state) = self.state.lock() else {
                return;
            };
            loop {
                let quiet = state.last_caller.map_or(DRIVER_IDLE, |at| at.elapsed());
                state = if state.callers > 0 {
                    // The last commit to leave wakes this thread.
                    match self.changed.wait(state) {
                        Ok(state) => state,
                        Err(_) => return,
                    }
                } else if quiet < DRIVER_IDLE {
                    match self.changed.wait_timeout(state, DRIVER_IDLE - quiet) {
                        Ok((state, _)) => state,
                        Err(_) => return,
                    }
                } else {
                    break;
                };
            }
            drop(state);
            self.by_driver.fetch_add(1, Ordering::Relaxed);
            // Runs every task of the runtime until a commit wants it back.
            self.runtime.block_on(self.step_aside.notified());
        }
    }

    /// Runs `future` on the calling thread, with this runtime's tasks.
    fn run_here<F: Future>(&'static self, future: F) -> F::Output {
        let _caller = Caller::enter(self);
        self.runtime.block_on(future)
    }
}

/// A commit driving the write runtime; the driver thread waits while one
/// lives, and for [`DRIVER_IDLE`] after the last one ends.
struct Caller(&'static WriteRuntime);

impl Caller {
    fn enter(shared: &'static WriteRuntime) -> Caller {
        if let Ok(mut state) = shared.state.lock() {
            state.callers += 1;
        }
        // A stored permit if the driver is not waiting yet: it then hands
        // the runtime back as soon as it takes it.
        shared.step_aside.notify_one();
        shared.on_caller.fetch_add(1, Ordering::Relaxed);
        Caller(shared)
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        if let Ok(mut state) = self.0.state.lock() {
            state.callers = state.callers.saturating_sub(1);
            state.last_caller = Some(Instant::now());
        }
        self.0.changed.notify_one();
    }
}

/// Where one SlateDB writer's tasks run.
#[derive(Clone, Copy)]
pub enum Writes {
    /// SlateDB's default: on the runtime the writer was opened on.
    OnOpeningRuntime,
    /// On the write runtime, driven by commits and the driver thread.
    OnWriteRuntime(&'static WriteRuntime),
}

impl Writes {
    /// The write runtime for a local or in-memory store opened from a
    /// multi-thread runtime (moraine's, or a multi-thread test's): a
    /// current-thread runtime cannot lend its thread to another runtime.
    pub fn for_store(uri: &StoreUri) -> Writes {
        let no_network = !matches!(uri, StoreUri::S3 { .. });
        if !no_network || current_flavor() != Some(RuntimeFlavor::MultiThread) {
            return Writes::OnOpeningRuntime;
        }
        WriteRuntime::get().map_or(Writes::OnOpeningRuntime, Writes::OnWriteRuntime)
    }

    /// Builds the writer with its tasks where `self` says.
    pub async fn open<P>(self, builder: DbBuilder<P>) -> std::result::Result<Db, slatedb::Error>
    where
        P: Into<object_store::path::Path>,
    {
        match self {
            Writes::OnOpeningRuntime => builder.build().await,
            Writes::OnWriteRuntime(shared) => {
                let built = builder.with_write_runtime(shared.handle().clone()).build();
                // SlateDB starts the writer's other tasks on the current
                // runtime, so the build is polled with the write runtime
                // entered. It is driven on this thread, as a commit is: the
                // open writes the fence through those tasks, and left to the
                // driver thread an attach right after a detach waited out
                // `DRIVER_IDLE` (22 ms against 5 ms after a pause).
                let entered = WithRuntime {
                    handle: shared.handle(),
                    future: std::pin::pin!(built),
                };
                self.run(entered).await
            }
        }
    }

    /// Runs a write (a commit, a flush) with the writer's tasks on this
    /// thread. Where this thread cannot block (a current-thread runtime's),
    /// the write just waits, and the driver thread runs the tasks.
    pub async fn run<F: Future>(self, future: F) -> F::Output {
        let Writes::OnWriteRuntime(shared) = self else {
            return future.await;
        };
        if current_flavor() == Some(RuntimeFlavor::CurrentThread) {
            return future.await;
        }
        // Lets the multi-thread runtime move its other work off this thread
        // while it blocks; on a thread outside the runtime's workers (a
        // DuckDB thread in `block_on`) it costs nothing.
        tokio::task::block_in_place(|| shared.run_here(future))
    }
}

/// The flavor of the runtime this thread is in, if any.
fn current_flavor() -> Option<RuntimeFlavor> {
    Handle::try_current()
        .ok()
        .map(|handle| handle.runtime_flavor())
}

/// A future polled with `handle` as the current runtime.
struct WithRuntime<'a, F> {
    handle: &'a Handle,
    future: std::pin::Pin<&'a mut F>,
}

impl<F: Future> Future for WithRuntime<'_, F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use std::sync::Arc;

    fn multi_thread() -> Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn memory() -> StoreUri {
        StoreUri::Memory("writes-test".into())
    }

    async fn open(writes: Writes) -> Db {
        let store: Arc<dyn object_store::ObjectStore> = Arc::new(InMemory::new());
        writes.open(Db::builder("db", store)).await.unwrap()
    }

    fn counter(name: &str) -> u64 {
        counters().into_iter().find(|(n, _)| *n == name).unwrap().1
    }

    /// A commit's transaction and flush run with the writer's tasks on the
    /// committing thread, and what they wrote reads back.
    #[test]
    fn a_commit_drives_its_writers_tasks_itself() {
        multi_thread().block_on(async {
            let writes = Writes::for_store(&memory());
            assert!(matches!(writes, Writes::OnWriteRuntime(_)));
            let db = open(writes).await;
            let before = counter("writes_on_caller");
            let tx = db.begin(slatedb::IsolationLevel::Snapshot).unwrap();
            tx.put(b"k", b"v").unwrap();
            writes.run(tx.commit()).await.unwrap();
            writes.run(db.flush()).await.unwrap();
            assert!(counter("writes_on_caller") >= before + 2);
            assert_eq!(db.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));
            db.close().await.unwrap();
        });
    }

    /// Writes that no commit drives (an upkeep flush, a detach's close) are
    /// run by the driver thread once the runtime has been idle.
    #[test]
    fn writes_no_commit_drives_finish_through_the_driver() {
        multi_thread().block_on(async {
            let db = open(Writes::for_store(&memory())).await;
            let put = tokio::time::timeout(Duration::from_secs(5), db.put(b"k", b"v"));
            put.await.expect("the driver ran the batch writer").unwrap();
            let flush = tokio::time::timeout(Duration::from_secs(5), db.flush());
            flush.await.expect("the driver ran the flush").unwrap();
            assert!(counter("writes_by_driver") >= 1);
            let close = tokio::time::timeout(Duration::from_secs(5), db.close());
            close.await.expect("the driver ran the close").unwrap();
        });
    }

    /// A commit whose writer is on a current-thread runtime, or on S3, keeps
    /// SlateDB's default; `run` then just awaits.
    #[tokio::test]
    async fn a_current_thread_runtime_keeps_slatedbs_default() {
        let writes = Writes::for_store(&memory());
        assert!(matches!(writes, Writes::OnOpeningRuntime));
        let db = open(writes).await;
        writes.run(db.put(b"k", b"v")).await.unwrap();
        db.close().await.unwrap();
    }

    #[test]
    fn an_s3_writer_keeps_slatedbs_default() {
        multi_thread().block_on(async {
            let s3 = StoreUri::S3 {
                bucket: "b".into(),
                prefix: "p".into(),
            };
            assert!(matches!(Writes::for_store(&s3), Writes::OnOpeningRuntime));
        });
    }
}
