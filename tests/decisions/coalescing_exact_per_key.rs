//! Coalesced Redis decisions on gateways (README, "Which algorithm"): the decisions in flight
//! for one Redis node are decided in one script call, yet every limit stays exact, for one hot key
//! on two instances and for many keys on two instances and over three cluster nodes.
//!
//! Every test shows that coalescing really happened (Redis counted fewer decision calls,
//! `EVALSHA` or `FCALL`, than decisions) and that `/metrics` counts exactly the units Redis holds (one member per allowed
//! unit in the key's one sorted set, whatever the number of limits). That a batch decides exactly
//! as its requests would one call each is in `coalescing_batch_equivalence.rs`; the timing
//! promises (a lone request, a request beside a batch, a killed Redis) are in
//! `coalescing_lone_call.rs`, `coalescing_request_priority.rs` and `coalescing_killed_redis.rs`,
//! asserted through the order in which Redis decides.

use crate::support;

use std::collections::BTreeMap;

use support::cluster::RedisCluster;
use support::gateway::{self, config, Gateway};
use support::http::HttpClient;
use support::observe::{decision_calls, decision_failures, metric, units};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// One route, `limit` per minute per `X-User`. Failing closed, so a store error shows up as a
/// 503 instead of passing as an allowed request.
fn per_user_route(limit: u64) -> String {
    format!(
        r#"
[[routes]]
name = "users"
path = "/*"
upstream = "up"
key = ["header:X-User"]
on_error = "deny"
  [[routes.limits]]
  name = "per-minute"
  limit = {limit}
  window = "1m"
"#
    )
}

/// A `[store]` for Redis at `url` whose timeout leaves room for a loaded test machine.
fn store(url: &str, prefix: &str) -> String {
    format!("backend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"2s\"")
}

/// A gateway config for `store` and `routes` whose upstream may take its time: a thousand
/// requests at once on a small machine wait in listen backlogs, and a 502 or 504 would hide
/// whether the limiter allowed the request.
fn gateway_config(store: &str, upstream: &str, routes: &str) -> String {
    config(store, upstream, routes).replace(
        "connect_timeout = \"500ms\"\ntimeout = \"2s\"",
        "connect_timeout = \"5s\"\ntimeout = \"8s\"",
    )
}

/// Sends every `(gateway, user)` request at once; returns each user's statuses.
async fn send_all(requests: Vec<(String, String)>) -> BTreeMap<String, Vec<u16>> {
    let client = HttpClient::default();
    let mut tasks = tokio::task::JoinSet::new();
    for (url, user) in requests {
        let client = client.clone();
        tasks.spawn(async move {
            let status = client.status(&url, &[("x-user", &user)]).await;
            (user, status)
        });
    }
    let mut by_user: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (user, status) = done.expect("request task");
        by_user.entry(user).or_default().push(status);
    }
    by_user
}

/// The `/metrics` text of each gateway.
async fn scrape(gateways: &[&Gateway]) -> Vec<String> {
    let client = HttpClient::default();
    let mut out = Vec::new();
    for gw in gateways {
        out.push(client.get(&gw.admin("/metrics"), &[]).await.body);
    }
    out
}

/// A series summed over every gateway.
fn total(scrapes: &[String], name: &str, labels: &[(&str, &str)]) -> u64 {
    scrapes.iter().map(|s| metric(s, name, labels)).sum::<f64>() as u64
}

/// What the gateways say about a burst on `route`: requests allowed, decisions Redis answered
/// (the decision-duration histogram of the `redis` backend counts exactly those), and 429s the
/// deny cache answered without asking Redis.
struct Counted {
    allowed: u64,
    store_decisions: u64,
    deny_cache_hits: u64,
}

fn counted(scrapes: &[String], route: &str) -> Counted {
    Counted {
        allowed: total(
            scrapes,
            "slidegate_requests_total",
            &[("route", route), ("decision", "allowed")],
        ),
        store_decisions: total(
            scrapes,
            "slidegate_decision_duration_seconds_count",
            &[("route", route), ("backend", "redis")],
        ),
        deny_cache_hits: total(
            scrapes,
            "slidegate_deny_cache_hits_total",
            &[("route", route)],
        ),
    }
}

/// Asserts that the store's decisions went out in fewer decision calls (`EVALSHA` or `FCALL`) than there were
/// decisions: some call carried more than one.
fn assert_coalesced(ran: i64, c: &Counted, sent: u64) {
    assert_eq!(
        c.store_decisions + c.deny_cache_hits,
        sent,
        "every request was decided by Redis or by the deny cache"
    );
    assert!(
        (ran as u64) < c.store_decisions,
        "no coalescing: {ran} decision calls (`EVALSHA` or `FCALL`) for {} decisions",
        c.store_decisions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hot_key_on_two_instances_allows_exactly_the_limit_in_coalesced_calls() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let prefix = unique_prefix("hot");
    let routes = per_user_route(25).replace("[\"header:X-User\"]", "[\"route\"]");
    let cfg = gateway_config(&store(&redis.url(), &prefix), &up.url(), &routes);
    let (a, b) = (gateway::start(&cfg).await, gateway::start(&cfg).await);
    let before = decision_calls(&redis);

    let requests = (0..120)
        .map(|i| {
            let gw = if i % 2 == 0 { &a } else { &b };
            (gw.url("/x"), "anyone".to_string())
        })
        .collect();
    let statuses = send_all(requests).await.remove("anyone").unwrap();
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    let rejected = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((allowed, rejected), (25, 95), "{statuses:?}");

    let ran = decision_calls(&redis) - before;
    let scrapes = scrape(&[&a, &b]).await;
    let c = counted(&scrapes, "users");
    assert_coalesced(ran, &c, 120);
    // Honest counting: what /metrics calls allowed is what Redis holds.
    assert_eq!(c.allowed, 25);
    assert_eq!(units(&redis, &prefix), 25);
}

/// How many requests user `k` of the many-keys tests sends: 10, 15, 20, 25 or 30, so some stay
/// under the limit of 20, some meet it and some go over.
fn sent_by(k: usize) -> usize {
    10 + (k % 5) * 5
}

/// 1,000 requests over 50 users (`sent_by`), shuffled, alternating between the gateways.
fn many_users(gateways: &[&Gateway]) -> Vec<(String, String)> {
    let users: Vec<String> = (0..50)
        .flat_map(|k| std::iter::repeat_n(format!("user-{k}"), sent_by(k)))
        .collect();
    assert_eq!(users.len(), 1000);
    // 7 is coprime with 1000: a fixed permutation that mixes the users.
    (0..users.len())
        .map(|i| {
            let gw = gateways[i % gateways.len()];
            (gw.url("/send"), users[(i * 7) % users.len()].clone())
        })
        .collect()
}

/// Each user got exactly min(limit, sent) 200s and the rest 429s.
fn assert_exact_per_user(by_user: &BTreeMap<String, Vec<u16>>, limit: usize) {
    assert_eq!(by_user.len(), 50);
    for k in 0..50 {
        let statuses = &by_user[&format!("user-{k}")];
        assert_eq!(statuses.len(), sent_by(k));
        let allowed = statuses.iter().filter(|&&s| s == 200).count();
        let rejected = statuses.iter().filter(|&&s| s == 429).count();
        assert_eq!(
            (allowed, rejected),
            (limit.min(sent_by(k)), sent_by(k).saturating_sub(limit)),
            "user-{k}: {statuses:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_on_two_instances_are_exact_per_key() {
    const LIMIT: usize = 20;
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let prefix = unique_prefix("many");
    let cfg = gateway_config(
        &store(&redis.url(), &prefix),
        &up.url(),
        &per_user_route(LIMIT as u64),
    );
    let (a, b) = (gateway::start(&cfg).await, gateway::start(&cfg).await);
    let before = decision_calls(&redis);

    let by_user = send_all(many_users(&[&a, &b])).await;
    assert_exact_per_user(&by_user, LIMIT);

    let ran = decision_calls(&redis) - before;
    // Redis holds exactly min(limit, sent) units per user, in the user's one sorted set.
    for k in 0..50 {
        let key = format!("{prefix}:{{users|user-{k}}}#log");
        assert_eq!(
            redis.cmd(&["ZCARD", &key]).int() as usize,
            LIMIT.min(sent_by(k)),
            "{key}"
        );
    }
    let scrapes = scrape(&[&a, &b]).await;
    let c = counted(&scrapes, "users");
    assert_coalesced(ran, &c, 1000);
    let expected: usize = (0..50).map(|k| LIMIT.min(sent_by(k))).sum();
    assert_eq!(c.allowed as usize, expected);
    assert_eq!(units(&redis, &prefix) as usize, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_over_three_cluster_nodes_are_exact_per_key() {
    const LIMIT: usize = 20;
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("spread");
    // The route mixes the algorithms (one script decides every algorithm), and each call spans
    // several slots of its node (the cross-slot flag): a counter per day, never reached, beside
    // the exact per-minute log.
    let route = format!(
        "{}  [[routes.limits]]\n  name = \"per-day\"\n  limit = 100000\n  window = \"1d\"\n  algorithm = \"sliding_window_counter\"\n",
        per_user_route(LIMIT as u64)
    );
    let cfg = gateway_config(&store(&cluster.url(), &prefix), &up.url(), &route);
    let (a, b) = (gateway::start(&cfg).await, gateway::start(&cfg).await);
    let on_nodes = |c: &RedisCluster| -> i64 { c.nodes.iter().map(decision_calls).sum() };
    let before = on_nodes(&cluster);

    let by_user = send_all(many_users(&[&a, &b])).await;
    assert_exact_per_user(&by_user, LIMIT);
    let calls = on_nodes(&cluster) - before;

    // Which node holds each user's keys: the one serving their slot. Every node holds some,
    // and each holds them exactly.
    let mut per_node = [0; 3];
    for k in 0..50 {
        let key = format!("{prefix}:{{users|user-{k}}}#log");
        let node = cluster.node_of(&key);
        per_node[node] += 1;
        let owner = &cluster.nodes[node];
        assert_eq!(
            owner.cmd(&["ZCARD", &key]).int() as usize,
            LIMIT.min(sent_by(k)),
            "{key} on node {node}"
        );
        let counter = format!("{prefix}:{{users|user-{k}}}#swc");
        let Resp::Bulk(Some(day)) = owner.cmd(&["HGET", &counter, "per-day"]) else {
            panic!("{counter}: no per-day count on node {node}")
        };
        assert_eq!(
            day.split(' ').nth(1).map(|c| c.parse::<usize>().unwrap()),
            Some(LIMIT.min(sent_by(k))),
            "{counter}: the counter charged with the log, the refused requests in neither"
        );
    }
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys on every node: {per_node:?}"
    );

    // Calls spanning several slots of a node went through whole: none was refused (CROSSSLOT)
    // and split per slot afterwards, and each call carried several decisions.
    let refused: i64 = cluster.nodes.iter().map(decision_failures).sum();
    assert_eq!(
        refused, 0,
        "decision calls (`EVALSHA` or `FCALL`) refused or failed across the nodes"
    );

    let scrapes = scrape(&[&a, &b]).await;
    let c = counted(&scrapes, "users");
    assert_coalesced(calls, &c, 1000);
    let expected: usize = (0..50).map(|k| LIMIT.min(sent_by(k))).sum();
    assert_eq!(c.allowed as usize, expected);
    let held: i64 = cluster.nodes.iter().map(|n| units(n, &prefix)).sum();
    assert_eq!(held as usize, expected);
}
