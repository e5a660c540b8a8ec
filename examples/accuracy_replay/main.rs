//! The replay of `bench/accuracy`: a bursty synthetic trace (thousands of keys, Pareto-distributed
//! per-key rates, bursts straddling window edges) decided by both algorithms on a real Redis,
//! through the crate's own `RedisStore`, so the real scripts decide. Each request carries its own
//! instant (the `clock = "local"` path), so the trace replays faster than real time. It reports how
//! the sliding window counter's decisions differ from the exact sliding log's, how far the
//! counter over-admits in any window, and the Redis bytes each algorithm keeps per key.
//!
//! `cargo run --release --example accuracy_replay -- --port PORT [--keys N] [--windows N]
//!  [--limit N] [--window-secs N] [--tick-ms N] [--median-share X] [--burst-chance P] [--seed N]`
//!
//! `settings.rs` the flags, `trace.rs` the trace, `measure.rs` the comparison, `report.rs` the
//! printed table, `memory.rs` the Redis bytes per key; this file the replay itself.

mod measure;
mod memory;
mod report;
mod settings;
mod trace;

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::algorithm::AlgorithmId;
use slidegate::config::{Backend, ClockSource, OnError, StoreConfig};
use slidegate::store::{layout, DecisionRequest, LimitSet, RedisStore, StoreError};

use measure::{compare, Report};
use memory::MemoryProbe;
use settings::Settings;
use trace::{trace, Event};

/// The one limit both routes apply.
const LIMIT_NAME: &str = "per-window";
/// Decisions submitted before their answers are awaited (they queue in order on the lane).
const CHUNK: usize = 20_000;
/// The replay's key prefix in Redis.
const PREFIX: &str = "accuracy";

/// The one-limit set of `algorithm`.
fn limit_set(s: &Settings, algorithm: AlgorithmId) -> Arc<LimitSet> {
    Arc::new(LimitSet::simple(&[(
        LIMIT_NAME,
        s.limit,
        s.window_us(),
        algorithm,
    )]))
}

/// The base of every key of `route` (one key slot each: the route's own key).
fn bases(s: &Settings, route: &str) -> Vec<String> {
    (0..s.keys)
        .map(|k| layout::base(PREFIX, route, "", &format!("user-{k}")))
        .collect()
}

/// Every request of the trace, decided in order at its own instant; true where allowed.
async fn replay(
    store: &RedisStore,
    set: &Arc<LimitSet>,
    bases: &[String],
    trace: &[Event],
) -> Vec<bool> {
    let mut allowed = Vec::with_capacity(trace.len());
    for chunk in trace.chunks(CHUNK) {
        let answers: Vec<_> = chunk
            .iter()
            .map(|e| {
                let slots = std::slice::from_ref(&bases[e.key as usize]);
                store.submit(DecisionRequest::charge(set, slots, 1), Some(e.at))
            })
            .collect();
        for answer in answers {
            allowed.push(answer.await.expect("Redis decides").allowed());
        }
    }
    allowed
}

/// The trace replayed through both algorithms at once: (log, counter) decisions, and seconds.
async fn replay_both(
    s: &Settings,
    store: &RedisStore,
    trace: &[Event],
) -> (Vec<bool>, Vec<bool>, f64) {
    let (log_bases, counter_bases) = (bases(s, "log"), bases(s, "counter"));
    let log_set = limit_set(s, AlgorithmId::SLIDING_LOG);
    let counter_set = limit_set(s, AlgorithmId::SLIDING_WINDOW_COUNTER);
    let started = Instant::now();
    let (log, counter) = tokio::join!(
        replay(store, &log_set, &log_bases, trace),
        replay(store, &counter_set, &counter_bases, trace)
    );
    (log, counter, started.elapsed().as_secs_f64())
}

/// Every Redis key of `route`'s keys under `algorithm` (`<base>#log`, `<base>#swc`).
fn state_keys(s: &Settings, route: &str, algorithm: AlgorithmId) -> Vec<String> {
    let set = limit_set(s, algorithm);
    bases(s, route)
        .iter()
        .flat_map(|b| set.keys(std::slice::from_ref(b)))
        .collect()
}

/// Bytes per key of both algorithms' Redis keys: (log, counter).
fn memory(s: &Settings) -> ((f64, usize), (f64, usize)) {
    let mut probe = MemoryProbe::connect(s.port);
    (
        probe.bytes_per_key(&state_keys(s, "log", AlgorithmId::SLIDING_LOG)),
        probe.bytes_per_key(&state_keys(
            s,
            "counter",
            AlgorithmId::SLIDING_WINDOW_COUNTER,
        )),
    )
}

async fn connect(port: u16) -> RedisStore {
    let config = StoreConfig {
        backend: Backend::Redis,
        url: format!("redis://127.0.0.1:{port}"),
        // Decisions queue by the chunk; none should give up while it waits its turn.
        timeout: Duration::from_secs(120),
        on_error: OnError::Deny,
        max_keys: 1_000_000,
        key_prefix: PREFIX.into(),
        clock: ClockSource::Local,
        replica_acks: 0,
        scripts: slidegate::config::ScriptsMode::Auto,
    };
    let on_error = Arc::new(|e: &StoreError| eprintln!("store error: {e}"));
    let store = RedisStore::connect(&config, on_error, &[])
        .await
        .expect("store");
    store
        .wait_until_ready(Duration::from_secs(10))
        .await
        .expect("Redis is ready");
    store
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let s = Settings::from_args();
    let trace = trace(&s);
    eprintln!("trace: {} requests over {} keys", trace.len(), s.keys);
    let store = connect(s.port).await;
    let (log, counter, replay_secs) = replay_both(&s, &store, &trace).await;
    eprintln!("replayed both algorithms in {replay_secs:.1} s");
    let (log_bytes, counter_bytes) = memory(&s);
    let report = Report {
        log_bytes,
        counter_bytes,
        replay_secs,
        ..compare(&s, &trace, &counter, &log)
    };
    report::print_table(&s, &report);
    report::print_verdicts(&report);
}
