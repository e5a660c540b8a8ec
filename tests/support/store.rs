//! Stores built the way a gateway builds them, for tests that call `Store` directly: a Redis
//! store on a test server, and the limit sets of routes written as config text.

use std::sync::Arc;
use std::time::Duration;

use slidegate::config::{Backend, ClockSource, Config, OnError, StoreConfig};
use slidegate::metrics::Metrics;
use slidegate::store::{LimitSet, RedisStore, Store};

use super::redis::RedisServer;

/// A Redis store on `server` with `store.timeout` and `store.clock`, scripts loaded.
pub async fn redis_store(server: &RedisServer, timeout: Duration, clock: ClockSource) -> Store {
    let config = StoreConfig {
        backend: Backend::Redis,
        url: server.url(),
        timeout,
        on_error: OnError::Deny,
        key_prefix: "unused".into(),
        clock,
    };
    let store = RedisStore::connect(&config, &Metrics::new(), &[])
        .await
        .expect("the store connects");
    store
        .wait_until_ready(Duration::from_secs(5))
        .await
        .expect("the scripts load");
    Store::Redis(store)
}

/// The limit sets of `routes` (`[[routes]]` TOML with an upstream named `up`), in file order,
/// as the gateway compiles them (`LimitSet::of_route`).
pub fn limit_sets(routes: &str) -> Vec<Arc<LimitSet>> {
    let toml = format!("[upstreams.up]\nurl = \"http://127.0.0.1:1\"\n{routes}");
    let config = Config::from_toml(std::path::Path::new("test.toml"), &toml, &|_| None)
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    config
        .routes
        .iter()
        .map(|r| Arc::new(LimitSet::of_route(r)))
        .collect()
}

/// The algorithm of a route's limit `i` when tests name a route's algorithms with one word:
/// `"mixed"` gives the limits both in turn, the counter first (so a sorted set is not always the
/// decision's first key); any other word is every limit's algorithm.
pub fn algorithm_of_limit(route_algorithm: &str, i: usize) -> &str {
    match route_algorithm {
        "mixed" => ["sliding_window_counter", "sliding_log"][i % 2],
        one => one,
    }
}
