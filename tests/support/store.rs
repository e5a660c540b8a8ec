//! Stores built the way a gateway builds them, for tests that call `Store` directly: a Redis
//! store on a test server, the limit sets of routes written as config text, and requests.

use std::sync::Arc;
use std::time::Duration;

use slidegate::config::{Backend, ClockSource, Config, OnError, Purpose, ScriptsMode, StoreConfig};
use slidegate::store::{
    layout, Decision, DecisionRequest, LimitSet, RedisStore, Settlement, Store,
};

use super::redis::RedisServer;

/// A Redis store on `server` with `store.timeout` and `store.clock`, scripts loaded
/// (`store.scripts` from the environment: [`super::gateway::SCRIPTS_ENV`]).
pub async fn redis_store(server: &RedisServer, timeout: Duration, clock: ClockSource) -> Store {
    let scripts = match std::env::var(super::gateway::SCRIPTS_ENV).as_deref() {
        Ok("eval") => ScriptsMode::Eval,
        Ok("functions") => ScriptsMode::Functions,
        _ => ScriptsMode::Auto,
    };
    redis_store_with(server, timeout, clock, scripts).await
}

/// A Redis store on `server` with `store.timeout`, `store.clock` and `store.scripts`, the
/// decision code loaded.
pub async fn redis_store_with(
    server: &RedisServer,
    timeout: Duration,
    clock: ClockSource,
    scripts: ScriptsMode,
) -> Store {
    redis_store_at(&server.url(), timeout, clock, scripts).await
}

/// A Redis store on `url` (credentials, database) with `store.timeout`, `store.clock` and
/// `store.scripts`, the decision code loaded.
pub async fn redis_store_at(
    url: &str,
    timeout: Duration,
    clock: ClockSource,
    scripts: ScriptsMode,
) -> Store {
    let config = StoreConfig {
        backend: Backend::Redis,
        url: url.to_string(),
        timeout,
        on_error: OnError::Deny,
        max_keys: 1_000_000,
        key_prefix: "unused".into(),
        clock,
        replica_acks: 0,
        scripts,
    };
    let store = RedisStore::connect(&config, Arc::new(|_| {}), &[])
        .await
        .expect("the store connects");
    store
        .wait_until_ready(Duration::from_secs(5))
        .await
        .expect("the scripts load");
    Store::Redis(store)
}

/// The limit sets of `routes` (`[[routes]]` TOML with an upstream named `up`), in file order,
/// as the gateway compiles them (their own values).
pub fn limit_sets(routes: &str) -> Vec<Arc<LimitSet>> {
    let toml = format!("[upstreams.up]\nurl = \"http://127.0.0.1:1\"\n{routes}");
    let config = Config::from_toml(
        std::path::Path::new("test.toml"),
        &toml,
        |name: &str| (name == "SLIDEGATE_KEY_SECRET").then(|| "s3cret".into()),
        Purpose::Gateway,
    )
    .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    config
        .routes
        .iter()
        .map(|r| slidegate::limit::limit_set(r))
        .collect()
}

/// The algorithm of a route's limit `i` when tests name a route's algorithms with one word:
/// `"mixed"` gives the limits the algorithms in turn, the counter first (so a sorted set is not
/// always the decision's first key); any other word is every limit's algorithm.
pub fn algorithm_of_limit(route_algorithm: &str, i: usize) -> &str {
    match route_algorithm {
        "mixed" => ["sliding_window_counter", "sliding_log", "gcra"][i % 3],
        one => one,
    }
}

/// The bases of a one-slot request for `key` of route `route` under `prefix`.
pub fn bases(prefix: &str, route: &str, key: &str) -> Vec<String> {
    vec![layout::base(prefix, route, "", key)]
}

/// One request of `cost` at `now_us` (the store's clock when `None`).
pub async fn decide_at(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    now_us: Option<u64>,
    cost: u64,
) -> Decision {
    let request = DecisionRequest::charge(limits, bases, cost);
    store
        .decide_many(&[request], now_us)
        .await
        .pop()
        .expect("one answer")
        .expect("store decides")
}

/// One attempt that is settled later (a reservation: its decision comes with a receipt), at
/// `now_us` (the store's clock when `None`).
pub async fn reserve(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    now_us: Option<u64>,
) -> Decision {
    let request = DecisionRequest {
        limits,
        bases,
        cost: 1,
        dry_run: false,
        receipt: true,
    };
    store
        .decide_many(&[request], now_us)
        .await
        .pop()
        .expect("one answer")
        .expect("the store decides")
}

/// What the gateway sends the store for an attempt's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Not counted: the charge goes back.
    Refund,
    /// Counted (or no status came): answered, no longer in flight.
    Confirm,
    /// A resetting status: its charge back, the answered ones forgiven.
    Reset,
}

/// Settles `decision`'s reservation on the first limit of `limits`.
pub async fn settle_first(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    decision: &Decision,
    settle: Settle,
) {
    settle_first_tagged(store, limits, bases, decision, settle, "").await
}

/// [`settle_first`] for an attempt that sent the value tagged `tag` (`""`: a key that merges
/// nothing).
pub async fn settle_first_tagged(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    decision: &Decision,
    settle: Settle,
    tag: &str,
) {
    let mut settlement = Settlement {
        tags: vec![tag.to_string(); limits.slots],
        limits: limits.clone(),
        bases: bases.to_vec(),
        receipt: decision.receipt.clone().expect("a reservation"),
        refund: vec![],
        confirm: vec![],
        unanswered: Vec::new(),
        reset: vec![],
        settle_to: vec![],
        at_us: None,
    };
    match settle {
        Settle::Refund => settlement.refund.push(0),
        Settle::Confirm => settlement.confirm.push(0),
        Settle::Reset => settlement.reset.push(0),
    }
    store.settle(settlement).await.expect("the store settles");
}

/// One attempt of `cost` units that is settled later (its decision comes with a receipt), at
/// `now_us` (the store's clock when `None`).
pub async fn reserve_units(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    now_us: Option<u64>,
    cost: u64,
) -> Decision {
    let request = DecisionRequest {
        limits,
        bases,
        cost,
        dry_run: false,
        receipt: true,
    };
    store
        .decide_many(&[request], now_us)
        .await
        .pop()
        .expect("one answer")
        .expect("the store decides")
}

/// Settles `decision`'s reservation as the gateway does at an answer's end: `refund` (slots
/// freed, charges given back) and `settle_to` (charges made what the answer stated), at
/// `at_us` (the store's own instant when `None`).
pub async fn settle_with(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    decision: &Decision,
    refund: Vec<usize>,
    settle_to: Vec<(usize, u64)>,
    at_us: Option<u64>,
) {
    let settlement = Settlement {
        limits: limits.clone(),
        bases: bases.to_vec(),
        receipt: decision.receipt.clone().expect("a reservation"),
        refund,
        confirm: vec![],
        unanswered: Vec::new(),
        reset: vec![],
        settle_to,
        at_us,
        tags: vec![],
    };
    store.settle(settlement).await.expect("the store settles");
}

/// The runtime the reference-model tests drive a store on: two workers, as the gateway's.
pub fn model_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A property-test runner for `cases` generated traces, shrinking a failure, persisting none.
pub fn model_runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}
