//! Coalesced Redis decisions (SPEC section 2, "Coalescing"): the decisions in flight for one
//! Redis node are decided in one script call, yet every limit stays exact, and a batch decides
//! exactly as its requests would one call each.
//!
//! Every test on gateways shows that coalescing really happened (Redis counted fewer `EVALSHA`
//! calls than decisions) and that `/metrics` counts exactly the units Redis holds (one member
//! per allowed unit in the key's one sorted set, whatever the number of limits). The timing
//! promises (a lone request, a request beside a batch, a killed Redis) are in
//! `coalescing_timing.rs`, asserted through the order in which Redis decides.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use slidegate::config::ClockSource;
use slidegate::store::{layout, Decision, DecisionRequest, LimitSet, MemoryStore, Store};
use support::cluster::RedisCluster;
use support::gateway::{self, config, Gateway};
use support::http::HttpClient;
use support::observe::{command_calls, command_failures, metric, units};
use support::redis::{RedisServer, Resp};
use support::store::{algorithm_of_limit, limit_sets, redis_store};
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

/// Asserts that the store's decisions went out in fewer `EVALSHA` calls than there were
/// decisions: some call carried more than one.
fn assert_coalesced(evalsha_calls: i64, c: &Counted, sent: u64) {
    assert_eq!(
        c.store_decisions + c.deny_cache_hits,
        sent,
        "every request was decided by Redis or by the deny cache"
    );
    assert!(
        (evalsha_calls as u64) < c.store_decisions,
        "no coalescing: {evalsha_calls} EVALSHA calls for {} decisions",
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
    let before = command_calls(&redis, "evalsha");

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

    let evalsha = command_calls(&redis, "evalsha") - before;
    let scrapes = scrape(&[&a, &b]).await;
    let c = counted(&scrapes, "users");
    assert_coalesced(evalsha, &c, 120);
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
    let before = command_calls(&redis, "evalsha");

    let by_user = send_all(many_users(&[&a, &b])).await;
    assert_exact_per_user(&by_user, LIMIT);

    let evalsha = command_calls(&redis, "evalsha") - before;
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
    assert_coalesced(evalsha, &c, 1000);
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
    let evalsha =
        |c: &RedisCluster| -> i64 { c.nodes.iter().map(|n| command_calls(n, "evalsha")).sum() };
    let before = evalsha(&cluster);

    let by_user = send_all(many_users(&[&a, &b])).await;
    assert_exact_per_user(&by_user, LIMIT);
    let calls = evalsha(&cluster) - before;

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
    let refused: i64 = cluster
        .nodes
        .iter()
        .map(|n| command_failures(n, "evalsha"))
        .sum();
    assert_eq!(
        refused, 0,
        "EVALSHA calls refused or failed across the nodes"
    );

    let scrapes = scrape(&[&a, &b]).await;
    let c = counted(&scrapes, "users");
    assert_coalesced(calls, &c, 1000);
    let expected: usize = (0..50).map(|k| LIMIT.min(sent_by(k))).sum();
    assert_eq!(c.allowed as usize, expected);
    let held: i64 = cluster.nodes.iter().map(|n| units(n, &prefix)).sum();
    assert_eq!(held as usize, expected);
}

/// Algorithms of the property test's routes: each alone, and all three on one route.
const ALGORITHMS: [&str; 4] = ["sliding_log", "sliding_window_counter", "gcra", "mixed"];

/// The routes of the property test: each of [`ALGORITHMS`], plain and blocking, each with three
/// limits (`a` per 10 s, `a + b` per 30 s, `b` per minute; "mixed" gives them the counter, the
/// log and gcra, in that order).
fn routes(a: u64, b: u64) -> Vec<Arc<LimitSet>> {
    let mut toml = String::new();
    for (i, algorithm) in ALGORITHMS.iter().enumerate() {
        for block in [false, true] {
            let mode = if block {
                "on_exceed = \"block\"\nblock_for = \"20s\"\n"
            } else {
                ""
            };
            toml.push_str(&format!(
                "[[routes]]\nname = \"r{i}{block}\"\npath = \"/{i}{block}\"\nupstream = \"up\"\n{mode}"
            ));
            let limits = [
                ("short", a, "10s"),
                ("mid", a + b, "30s"),
                ("long", b, "1m"),
            ];
            for (j, (name, limit, window)) in limits.into_iter().enumerate() {
                let algorithm = algorithm_of_limit(algorithm, j);
                toml.push_str(&format!(
                    "[[routes.limits]]\nname = \"{name}\"\nlimit = {limit}\nwindow = \"{window}\"\nalgorithm = \"{algorithm}\"\n"
                ));
            }
        }
    }
    limit_sets(&toml)
}

const T0: u64 = 1_700_000_000_000_000;

/// One request of a batch: which route, which key, what cost.
type Step = (usize, usize, u64);

/// Decides `batches` (each at its instant, `gap` after the previous one) twice on `store`:
/// each batch in one `decide_many`, and each request alone, in the same order, at the same
/// instant, under another key prefix. Returns both answer lists.
async fn batched_and_alone(
    store: &Store,
    sets: &[Arc<LimitSet>],
    batches: &[(u64, Vec<Step>)],
) -> (Vec<Decision>, Vec<Decision>) {
    let (together, alone) = (unique_prefix("together"), unique_prefix("alone"));
    // A one-slot request's bases: the route's key slot alone.
    let bases = |prefix: &str, route: usize, key: usize| {
        vec![layout::base(
            prefix,
            &format!("r{route}"),
            "",
            &format!("k{key}"),
        )]
    };
    let (mut batched, mut single) = (Vec::new(), Vec::new());
    let mut now = T0;
    for (gap, steps) in batches {
        now += gap;
        let step_bases: Vec<Vec<String>> = steps
            .iter()
            .map(|&(r, k, _)| bases(&together, r, k))
            .collect();
        let requests: Vec<DecisionRequest<'_>> = steps
            .iter()
            .zip(&step_bases)
            .map(|(&(r, _, cost), bases)| DecisionRequest::charge(&sets[r], bases, cost))
            .collect();
        for answer in store.decide_many(&requests, Some(now)).await {
            batched.push(answer.expect("the store decides"));
        }
        for &(r, k, cost) in steps {
            let bases = bases(&alone, r, k);
            let request = DecisionRequest::charge(&sets[r], &bases, cost);
            let mut answer = store.decide_many(&[request], Some(now)).await;
            single.push(answer.pop().unwrap().expect("the store decides"));
        }
    }
    (batched, single)
}

/// Random batches decided in one coalesced call give exactly the answers of the same requests
/// decided one call each at the same instants, in the same order: on Redis (one script call
/// deciding many requests) and on the memory store, which must also agree with each other.
/// Batches repeat keys (key 0 is hot), spend 0 to 3 units, and mix every algorithm (also within
/// one route), blocking routes and three limits.
#[test]
fn a_batch_decides_exactly_like_its_requests_one_by_one() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = runtime.block_on(redis_store(
        &server,
        Duration::from_secs(5),
        ClockSource::Local,
    ));
    let key = prop_oneof![3 => Just(0usize), 2 => 1usize..6];
    let step = (0..2 * ALGORITHMS.len(), key, 0u64..=3);
    let batch = (0u64..6_000_000, proptest::collection::vec(step, 1..40));
    let strategy = (1u64..6, 2u64..12, proptest::collection::vec(batch, 1..6));
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 48,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&strategy, |(a, b, batches)| {
            let sets = routes(a, b);
            runtime.block_on(async {
                let (redis_batched, redis_alone) = batched_and_alone(&redis, &sets, &batches).await;
                let memory = Store::Memory(MemoryStore::new(1_000_000));
                let (memory_batched, memory_alone) =
                    batched_and_alone(&memory, &sets, &batches).await;
                let answers = redis_batched.len();
                for i in 0..answers {
                    prop_assert_eq!(&redis_batched[i], &redis_alone[i], "Redis, answer {}", i);
                    prop_assert_eq!(&memory_batched[i], &memory_alone[i], "memory, answer {}", i);
                    prop_assert_eq!(
                        &redis_batched[i],
                        &memory_batched[i],
                        "stores, answer {}",
                        i
                    );
                }
                Ok::<(), TestCaseError>(())
            })
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
