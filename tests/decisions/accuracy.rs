//! Accuracy: both stores decide as the plain reference models (`support/reference.rs`) say, for
//! both algorithms, one or two limits, costs above 1, and random traces that cross window
//! boundaries. Every answer is compared whole: outcome, Retry-After, and per limit the units
//! used, the reset and the limit's own wait.
//!
//! Two clocks: traces at chosen instants (the memory store, and Redis with `clock = "local"`,
//! where the test passes the instant), which also hold the Retry-After promise to the
//! microsecond; and Redis with the default `clock = "redis"`, where the script reads `TIME` and
//! the test cannot choose instants, so it sleeps between requests and asks the model about the
//! instant each reply says the script decided at.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseResult, TestRunner};
use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Store};
use support::redis::RedisServer;
use support::reference::Reference;
use support::store::{algorithm_of_limit, bases, decide_at, limit_sets, redis_store};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
const SEC: u64 = 1_000_000;
const MS: u64 = 1_000;

const ALGORITHMS: [&str; 4] = ["sliding_log", "sliding_window_counter", "gcra", "mixed"];

/// A route of one or two limits (`limit`, `window`) under one algorithm (or several, `"mixed"`),
/// as the gateway compiles it.
fn limit_set(route_algorithm: &str, limits: &[(u64, &str)]) -> Arc<LimitSet> {
    let mut toml = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n".to_string();
    for (i, (limit, window)) in limits.iter().enumerate() {
        let algorithm = algorithm_of_limit(route_algorithm, i);
        toml.push_str(&format!(
            "[[routes.limits]]\nname = \"l{i}\"\nlimit = {limit}\nwindow = \"{window}\"\nalgorithm = \"{algorithm}\"\n"
        ));
    }
    limit_sets(&toml).remove(0)
}

/// One request at `now_us`, or at the store's own clock when `None`.
async fn decide(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    now_us: Option<u64>,
    cost: u64,
) -> Decision {
    decide_at(store, limits, bases, now_us, cost).await
}

/// Runs `test` on `cases` values of `strategy`, shrinking a failure to a smaller trace in at
/// most `shrink_iters` steps.
fn check<S: Strategy>(
    cases: u32,
    shrink_iters: u32,
    strategy: S,
    test: impl Fn(S::Value) -> TestCaseResult,
) {
    let config = RunnerConfig {
        cases,
        max_shrink_iters: shrink_iters,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    if let Err(e) = TestRunner::new(config).run(&strategy, test) {
        panic!("{e}");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A trace at chosen instants: a route, where the trace starts inside the fixed windows, and
/// requests `(gap µs, cost, come back at exactly Retry-After when refused)`.
#[derive(Debug, Clone)]
struct Trace {
    algorithm: &'static str,
    limits: Vec<(u64, &'static str)>,
    start: u64,
    steps: Vec<(u64, u64, bool)>,
}

/// Gaps that keep requests together (bursts), a few ms apart, or seconds apart (across
/// window boundaries).
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(0), 2 => 0..5 * MS, 5 => 0..4 * SEC]
}

/// Mostly windows that gaps of seconds cross; some long ones, where a microsecond is a tiny
/// share of a unit (a tolerance in units would let a request through early there).
fn window() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => prop::sample::select(vec!["1s", "3s", "10s"]),
        1 => prop::sample::select(vec!["1h", "1d", "7d"]),
    ]
}

fn trace() -> impl Strategy<Value = Trace> {
    let limit = (1u64..7, window());
    (
        prop::sample::select(ALGORITHMS.to_vec()),
        prop::collection::vec(limit, 1..=2),
        0..7 * 86_400 * SEC,
        prop::collection::vec((gap(), 1u64..4, any::<bool>()), 1..40),
    )
        .prop_map(|(algorithm, limits, start, steps)| Trace {
            algorithm,
            limits,
            start,
            steps,
        })
}

/// Plays `trace` on `store` at the trace's instants and holds every answer to the model's.
/// After a refusal that could ever fit, the step may come back 1 µs before Retry-After (still
/// refused) and then exactly on it (allowed): the wait is exact for both algorithms.
async fn follows_the_reference(store: &Store, trace: &Trace) -> TestCaseResult {
    let set = limit_set(trace.algorithm, &trace.limits);
    let base = bases(&unique_prefix("acc"), "r", "k");
    let mut model = Reference::of(&set);
    let smallest = set.limits.iter().map(|l| l.limit).min().unwrap_or(0);
    let mut now = T0 + trace.start;
    for &(gap, cost, come_back) in &trace.steps {
        now += gap;
        let d = decide(store, &set, &base, Some(now), cost).await;
        prop_assert_eq!(
            &d,
            &model.decide(now, cost),
            "at +{} µs, cost {}",
            now - T0,
            cost
        );
        if d.allowed() || !come_back || cost > smallest {
            continue;
        }
        let retry = d.retry_after.as_micros() as u64;
        let early = decide(store, &set, &base, Some(now + retry - 1), cost).await;
        prop_assert!(!early.allowed(), "allowed 1 µs before Retry-After");
        prop_assert_eq!(&early, &model.decide(now + retry - 1, cost));
        now += retry;
        let on_time = decide(store, &set, &base, Some(now), cost).await;
        prop_assert!(on_time.allowed(), "refused at exactly Retry-After");
        prop_assert_eq!(&on_time, &model.decide(now, cost));
    }
    Ok(())
}

#[test]
fn memory_store_decides_as_the_reference() {
    let rt = runtime();
    let store = Store::Memory(MemoryStore::new(1_000_000));
    check(256, 4096, trace(), |t| {
        rt.block_on(follows_the_reference(&store, &t))
    });
}

#[test]
fn redis_store_decides_as_the_reference_at_given_instants() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Local,
    ));
    check(64, 1024, trace(), |t| {
        rt.block_on(follows_the_reference(&store, &t))
    });
}

/// A trace on the Redis clock: a route with windows of a few hundred ms, and requests
/// `(pause before it, cost)`; a pause of `None` waits the previous refusal's Retry-After and
/// asks again with the same cost.
#[derive(Debug, Clone)]
struct LiveTrace {
    limits: Vec<(u64, &'static str)>,
    steps: Vec<(Option<u64>, u64)>,
}

/// The most a live trace sleeps in all, so a case stays under a second.
const LIVE_BUDGET: Duration = Duration::from_millis(900);

fn live_trace() -> impl Strategy<Value = LiveTrace> {
    let limit = (
        1u64..6,
        prop::sample::select(vec!["200ms", "300ms", "500ms"]),
    );
    let pause = prop_oneof![3 => Just(Some(0)), 3 => (5u64..120).prop_map(Some), 1 => Just(None)];
    (
        prop::collection::vec(limit, 1..=2),
        prop::collection::vec((pause, 1u64..4), 1..30),
    )
        .prop_map(|(limits, steps)| LiveTrace { limits, steps })
}

/// Plays `trace` on a store that reads the Redis clock, and holds every answer to the model's
/// answer at the instant the reply says the script decided at.
async fn follows_the_reference_on_the_redis_clock(
    store: &Store,
    algorithm: &str,
    trace: &LiveTrace,
) -> TestCaseResult {
    let set = limit_set(algorithm, &trace.limits);
    let base = bases(&unique_prefix("live"), "r", "k");
    let mut model = Reference::of(&set);
    let mut budget = LIVE_BUDGET;
    let mut last: Option<(Decision, u64)> = None;
    for &(pause, cost) in &trace.steps {
        // Come back after a refusal's Retry-After with the same request, or pause as told.
        let (pause, cost, fits_at) = match (pause, &last) {
            (None, Some((refused, cost))) if !refused.allowed() => {
                let wait = refused.retry_after;
                let fits_at = refused.decided_at_us + wait.as_micros() as u64;
                let can_fit = refused.limits.iter().all(|l| l.limit >= *cost);
                (wait, *cost, can_fit.then_some(fits_at))
            }
            (pause, _) => (Duration::from_millis(pause.unwrap_or(0)), cost, None),
        };
        let pause = pause.min(budget);
        budget -= pause;
        tokio::time::sleep(pause).await;
        let d = decide(store, &set, &base, None, cost).await;
        let at = d.decided_at_us;
        if let Some((previous, _)) = &last {
            prop_assert!(at >= previous.decided_at_us, "the Redis clock went back");
        }
        prop_assert_eq!(
            &d,
            &model.decide(at, cost),
            "decided at {} µs, cost {}",
            at,
            cost
        );
        if let Some(fits_at) = fits_at.filter(|&t| at >= t) {
            prop_assert!(
                d.allowed(),
                "refused {} µs after its Retry-After",
                at - fits_at
            );
        }
        last = Some((d, cost));
    }
    Ok(())
}

fn on_the_redis_clock(algorithm: &'static str) {
    let server = RedisServer::start();
    let rt = runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Redis,
    ));
    // Each shrinking step replays a trace in real time: a few dozen are enough to read it.
    check(10, 32, live_trace(), |t| {
        rt.block_on(follows_the_reference_on_the_redis_clock(
            &store, algorithm, &t,
        ))
    });
}

#[test]
fn sliding_log_on_the_redis_clock_decides_as_the_reference() {
    on_the_redis_clock("sliding_log");
}

#[test]
fn sliding_window_counter_on_the_redis_clock_decides_as_the_reference() {
    on_the_redis_clock("sliding_window_counter");
}

#[test]
fn a_route_mixing_the_algorithms_on_the_redis_clock_decides_as_the_reference() {
    on_the_redis_clock("mixed");
}

#[test]
fn gcra_on_the_redis_clock_decides_as_the_reference() {
    on_the_redis_clock("gcra");
}
