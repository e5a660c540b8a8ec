//! Upstream failures on the traffic path: an upstream nothing listens on is a 502 (counted in
//! `slidegate_upstream_requests_total`), also when its connect budget outlasts its `timeout`, and
//! one that answers too slowly a 504 at the upstream's timeout.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_upstream_is_502_and_slow_upstream_is_504() {
    let up = upstream::start().await;
    let dead = format!("http://127.0.0.1:{}", support::free_port());
    let routes = format!(
        "[[routes]]\nname = \"dead\"\npath = \"/dead\"\nupstream = \"dead\"\n[[routes]]\nname = \"slow\"\npath = \"/slow\"\nupstream = \"up\"\n\n[upstreams.dead]\nurl = \"{dead}\"\n"
    );
    let cfg = config(MEMORY, &up.url(), &routes).replace("timeout = \"2s\"", "timeout = \"300ms\"");
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let r = client.get(&gw.url("/dead"), &[]).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"], "upstream_unreachable");
    let started = Instant::now();
    let r = client.get(&gw.url("/slow?ms=2000"), &[]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"], "upstream_timeout");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_upstream_requests_total{route=\"dead\",status=\"error\"} 1"),
        "{metrics}"
    );
}

/// The connects to a refused upstream are retried for the whole `connect_timeout`, though it
/// outlasts the upstream's `timeout`: that one bounds the answer once the request is out, so a
/// request that never went out is a 502, not a 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upstream_is_502_when_its_connect_budget_outlasts_its_timeout() {
    let up = upstream::start().await;
    let dead = format!("http://127.0.0.1:{}", support::free_port());
    let routes = format!(
        "[[routes]]\nname = \"dead\"\npath = \"/dead\"\nupstream = \"dead\"\n\n[upstreams.dead]\nurl = \"{dead}\"\nconnect_timeout = \"800ms\"\ntimeout = \"200ms\"\n"
    );
    let gw = gateway::start(&config(MEMORY, &up.url(), &routes)).await;
    let client = HttpClient::default();
    let started = Instant::now();
    let r = client.get(&gw.url("/dead"), &[]).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"], "upstream_unreachable");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "the connect budget was spent first: {:?}",
        started.elapsed()
    );
}
