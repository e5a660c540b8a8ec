//! One `current_thread` tokio runtime per core ("workers"), none stealing work from another.
//! Each worker accepts on a listener of its own (`SO_REUSEPORT`: the kernel spreads connections
//! over them), and keeps what a request touches on its own thread: its Redis connection and
//! decision lanes, its idle upstream connections. So the hops of one request (to the lane's
//! driver, to the Redis client and back) wake tasks on the same thread, never another core.
//!
//! Differences from tokio's multi-thread runtime: no work stealing, so a busy worker does not
//! hand tasks to an idle one; connections are spread by the kernel instead. State that must be
//! shared (the route table, the deny cache, the memory store, metrics) stays shared.
//!
//! Code that runs outside the workers (tests that start a gateway inside their own runtime,
//! blocking reload threads) sees one worker, index 0.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Handle, Runtime};
use tokio::sync::watch;

thread_local! {
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

static COUNT: AtomicUsize = AtomicUsize::new(1);

/// The index of the worker this thread runs (0 outside the workers).
pub fn index() -> usize {
    INDEX.get()
}

/// How many workers run (1 until [`Workers::new`] starts more).
pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// One value per worker; each worker thread sees its own.
pub struct PerWorker<T> {
    slots: Box<[T]>,
}

impl<T> PerWorker<T> {
    /// One value per worker, made by `make(index)`.
    pub fn new(make: impl FnMut(usize) -> T) -> PerWorker<T> {
        PerWorker {
            slots: (0..count()).map(make).collect(),
        }
    }

    /// This thread's worker's value.
    pub fn get(&self) -> &T {
        &self.slots[index() % self.slots.len()]
    }

    /// Every worker's value.
    pub fn all(&self) -> &[T] {
        &self.slots
    }
}

/// The worker runtimes. Worker 0 runs on the thread that calls [`Workers::run`]; the others on
/// threads of their own.
pub struct Workers {
    runtimes: Vec<Runtime>,
}

impl Workers {
    /// Builds `n` (at least 1) worker runtimes, not yet running.
    pub fn new(n: usize) -> std::io::Result<Workers> {
        let n = n.max(1);
        let runtimes = (0..n)
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        COUNT.store(n, Ordering::Relaxed);
        Ok(Workers { runtimes })
    }

    /// The number of workers: `TOKIO_WORKER_THREADS` when set, else the cores available.
    pub fn default_count() -> usize {
        std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Every worker's handle, by index (to spawn a task onto a given worker).
    pub fn handles(&self) -> Vec<Handle> {
        self.runtimes.iter().map(|r| r.handle().clone()).collect()
    }

    /// Runs `main` on worker 0 and keeps the other workers running their tasks until it
    /// returns.
    pub fn run<F: Future>(self, main: F) -> F::Output {
        let (stop, stopped) = watch::channel(false);
        let mut runtimes = self.runtimes.into_iter();
        let first = runtimes.next().expect("at least one worker");
        let threads: Vec<_> = runtimes
            .enumerate()
            .map(|(i, runtime)| {
                let mut stopped = stopped.clone();
                std::thread::Builder::new()
                    .name(format!("slidegate-worker-{}", i + 1))
                    .spawn(move || {
                        INDEX.set(i + 1);
                        runtime.block_on(async move {
                            let _ = stopped.wait_for(|s| *s).await;
                        });
                    })
                    .expect("a worker thread starts")
            })
            .collect();
        INDEX.set(0);
        let output = first.block_on(main);
        let _ = stop.send(true);
        for thread in threads {
            let _ = thread.join();
        }
        output
    }
}
