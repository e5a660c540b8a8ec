//! The decision code as a Redis Functions library (`store.scripts`): by default ("auto") on a
//! server with Functions the gateway loads its library and decides with `FCALL`; with "eval" it
//! runs the script with `EVALSHA`, as on an older server. The library is named after its code,
//! so a second version's library on the same Redis lives beside it; and when the server loses it
//! (`FUNCTION FLUSH`, a restart without persistence) under load, the gateway loads it again and
//! retries within the same deadline: no answer other than a decision (or, while Redis is down,
//! the route's `on_error`).
//!
//! The algorithms' own tests (reference models, equivalence with the memory store, clusters,
//! outcomes, blocks) run on the library by default, and on scripts with
//! `SLIDEGATE_TEST_SCRIPTS=eval` (`support::gateway::SCRIPTS_ENV`).

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::config::{Backend, ClockSource, OnError, ScriptsMode, StoreConfig};
use slidegate::store::Store;
use support::gateway::{self, config, Gateway};
use support::http::HttpClient;
use support::observe::command_calls;
use support::rate_limits::route;
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// One route keyed by `X-User`, failing closed: a store error is a 503, never a pass.
fn routes() -> String {
    route(
        "r",
        "\"header:X-User\"",
        "on_error = \"deny\"",
        &[("per-minute", 3, "1m")],
    )
}

/// A gateway on `redis` with `store.scripts = scripts`.
async fn gateway_on(redis: &RedisServer, scripts: &str, up: &str) -> Gateway {
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"500ms\"\nscripts = \"{scripts}\"",
        redis.url(),
        unique_prefix("fn")
    );
    gateway::start(&config(&store, up, &routes())).await
}

/// The libraries `FUNCTION LIST` names.
fn libraries(redis: &RedisServer) -> Vec<String> {
    let Resp::Array(list) = redis.cmd(&["FUNCTION", "LIST"]) else {
        panic!("FUNCTION LIST failed")
    };
    list.iter()
        .filter_map(|library| match library {
            Resp::Array(fields) => fields.windows(2).find_map(|pair| match pair {
                [Resp::Bulk(Some(k)), Resp::Bulk(Some(v))] if k == "library_name" => {
                    Some(v.clone())
                }
                _ => None,
            }),
            _ => None,
        })
        .collect()
}

/// The slidegate libraries loaded on `redis`.
fn slidegate_libraries(redis: &RedisServer) -> Vec<String> {
    let mut names: Vec<String> = libraries(redis)
        .into_iter()
        .filter(|n| n.starts_with("slidegate_"))
        .collect();
    names.sort();
    names
}

/// Four requests of one user: three allowed, the fourth refused with a Retry-After.
async fn four_requests(client: &HttpClient, gw: &Gateway, user: &str) {
    let url = gw.url("/x");
    for i in 1..=4 {
        let r = client.get(&url, &[("x-user", user)]).await;
        let expected = if i <= 3 { 200 } else { 429 };
        assert_eq!(r.status, expected, "request {i} of {user}: {}", r.body);
    }
}

/// "auto" on Redis 7: the library is loaded and every decision is an `FCALL`, none an
/// `EVALSHA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_decides_with_fcall_on_a_server_with_functions() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "auto", &up.url()).await;
    assert_eq!(
        slidegate_libraries(&redis).len(),
        1,
        "the library is loaded"
    );
    let (fcall, evalsha) = (
        command_calls(&redis, "fcall"),
        command_calls(&redis, "evalsha"),
    );
    four_requests(&HttpClient::default(), &gw, "alice").await;
    assert!(command_calls(&redis, "fcall") >= fcall + 4);
    assert_eq!(command_calls(&redis, "evalsha"), evalsha, "no EVALSHA");
    gw.stop().await;
}

/// "eval": the script runs with `EVALSHA`, no library is loaded and no `FCALL` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_decides_with_evalsha() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "eval", &up.url()).await;
    four_requests(&HttpClient::default(), &gw, "bob").await;
    assert!(command_calls(&redis, "evalsha") >= 4);
    assert_eq!(command_calls(&redis, "fcall"), 0, "no FCALL");
    assert!(slidegate_libraries(&redis).is_empty(), "no library loaded");
    gw.stop().await;
}

/// "functions" on Redis 7: the library, as with "auto".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_decides_with_fcall() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "functions", &up.url()).await;
    four_requests(&HttpClient::default(), &gw, "carol").await;
    assert!(command_calls(&redis, "fcall") >= 4);
    assert_eq!(command_calls(&redis, "evalsha"), 0);
    gw.stop().await;
}

/// Another version's library on the same Redis (loaded here under another name, as a gateway
/// of another version would) stays beside this gateway's: `FUNCTION LOAD REPLACE` replaces only
/// a library of the same name, and each gateway calls its own function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_versions_keep_their_own_libraries() {
    let redis = RedisServer::start();
    let other = "#!lua name=slidegate_0123456789abcdef\n\
                 redis.register_function('slidegate_decide_0123456789abcdef', \
                 function(keys, args) return redis.call('INCR', 'other-version-calls') end)";
    assert_eq!(
        redis.cmd(&["FUNCTION", "LOAD", other]),
        Resp::Bulk(Some("slidegate_0123456789abcdef".into()))
    );
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "auto", &up.url()).await;
    let loaded = slidegate_libraries(&redis);
    assert_eq!(loaded.len(), 2, "both versions' libraries: {loaded:?}");
    assert!(loaded.contains(&"slidegate_0123456789abcdef".to_string()));
    four_requests(&HttpClient::default(), &gw, "dave").await;
    assert_eq!(
        redis.cmd(&["GET", "other-version-calls"]),
        Resp::Bulk(None),
        "the other version's function never ran"
    );
    assert_eq!(
        slidegate_libraries(&redis),
        loaded,
        "neither replaced the other"
    );
    gw.stop().await;
}

/// What a bounded load saw: every status, in order, with the instant it came.
struct Seen {
    statuses: Vec<(Instant, u16)>,
}

/// Sends requests from `clients` tasks, each user its own (never refused), until `stop` is
/// set (and at most 20,000 a client).
fn load(gw: &Gateway, clients: usize, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Seen> {
    let url = gw.url("/x");
    tokio::spawn(async move {
        let tasks = (0..clients).map(|c| {
            let (url, stop) = (url.clone(), stop.clone());
            tokio::spawn(async move {
                let client = HttpClient::default();
                let mut seen = Vec::new();
                for i in 0..20_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let user = format!("u{c}-{}", i / 3);
                    let r = client.get(&url, &[("x-user", &user)]).await;
                    seen.push((Instant::now(), r.status.as_u16()));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen
            })
        });
        let mut statuses = Vec::new();
        for t in futures_util::future::join_all(tasks).await {
            statuses.extend(t.unwrap());
        }
        statuses.sort_by_key(|(at, _)| *at);
        Seen { statuses }
    })
}

/// `FUNCTION FLUSH` under load: the next call of each lane meets "Function not found", loads
/// the library again and is retried within its deadline, so every request is decided (never a
/// 503 of the failing-closed route) and the library is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_flush_under_load_is_invisible() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "auto", &up.url()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&gw, 4, stop.clone());
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(redis.cmd(&["FUNCTION", "FLUSH"]), Resp::Simple("OK".into()));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = running.await.unwrap();
    assert!(
        seen.statuses.len() > 100,
        "{} requests",
        seen.statuses.len()
    );
    let undecided: Vec<u16> = seen
        .statuses
        .iter()
        .map(|(_, s)| *s)
        .filter(|s| *s != 200)
        .collect();
    assert!(
        undecided.is_empty(),
        "answers other than 200: {undecided:?}"
    );
    assert_eq!(slidegate_libraries(&redis).len(), 1, "loaded again");
    assert_eq!(command_calls(&redis, "evalsha"), 0, "still on the library");
    let missing = support::observe::command_failures(&redis, "fcall");
    assert!(missing >= 1, "no FCALL met the flushed library");
    gw.stop().await;
}

/// Redis restarted without persistence under load: while it is down the failing-closed route
/// answers 503 (its `on_error`), nothing else; once it is back the library is loaded again on
/// the first call and every request is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_loads_the_library_again() {
    let mut redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "auto", &up.url()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&gw, 4, stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = running.await.unwrap();
    let unexplained: Vec<u16> = seen
        .statuses
        .iter()
        .map(|(_, s)| *s)
        .filter(|s| *s != 200 && *s != 503)
        .collect();
    assert!(
        unexplained.is_empty(),
        "answers outside on_error: {unexplained:?}"
    );
    // the last second, well after the restart, is all decisions
    let last_second: Vec<u16> = seen
        .statuses
        .iter()
        .filter(|(at, _)| *at > back + Duration::from_millis(1500))
        .map(|(_, s)| *s)
        .collect();
    assert!(last_second.len() > 20, "{} requests", last_second.len());
    assert!(
        last_second.iter().all(|s| *s == 200),
        "not decided after the restart: {last_second:?}"
    );
    assert_eq!(slidegate_libraries(&redis).len(), 1, "loaded again");
    assert!(command_calls(&redis, "fcall") > 20, "decided with FCALL");
    assert_eq!(command_calls(&redis, "evalsha"), 0);
    gw.stop().await;
}

/// A Redis without Functions: a Redis 7 whose `FUNCTION` and `FCALL` are renamed away, so that
/// it answers "unknown command" as a server before Redis 7 does.
fn redis_without_functions() -> RedisServer {
    RedisServer::start_with(&[
        "--rename-command",
        "FUNCTION",
        "",
        "--rename-command",
        "FCALL",
        "",
    ])
}

/// "auto" on a server without Functions decides with `EVALSHA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_evalsha_without_functions() {
    let redis = redis_without_functions();
    let up = upstream::start().await;
    let gw = gateway_on(&redis, "auto", &up.url()).await;
    four_requests(&HttpClient::default(), &gw, "erin").await;
    assert!(command_calls(&redis, "evalsha") >= 4);
    gw.stop().await;
}

/// "functions" on a server without them: the store does not start, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_refuses_a_server_without_them() {
    let redis = redis_without_functions();
    let config = StoreConfig {
        backend: Backend::Redis,
        url: redis.url(),
        timeout: Duration::from_millis(500),
        on_error: OnError::Deny,
        max_keys: 1000,
        key_prefix: unique_prefix("fn"),
        clock: ClockSource::Redis,
        replica_acks: 0,
        scripts: ScriptsMode::Functions,
    };
    let Err(e) = Store::from_config(&config, Arc::new(|_| {}), &[]).await else {
        panic!("the store started on a server without Functions")
    };
    let message = e.to_string();
    assert!(
        message.contains("store.scripts = \"functions\" needs Redis Functions")
            && message.contains("unknown command"),
        "{message}"
    );
}

/// Redis killed and started again, over and over, and asked as soon as it answers PING: the
/// lane's own connection may reach the new server before the client library's has, and the
/// call that finds the library gone there loads it on that same connection and is retried. So
/// no error of the code's own reaches `on_error` (`slidegate_store_errors_total{kind="script"}`
/// stays 0), while reconnecting may, as a connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_gets_the_library_where_it_was_found_missing() {
    let mut redis = RedisServer::start();
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"50ms\"",
        redis.url(),
        unique_prefix("fn")
    );
    let gw = gateway::start(&config(&store, &up.url(), &routes())).await;
    let client = HttpClient::default();
    let mut decided = 0;
    for round in 0..20 {
        redis.kill();
        // asked while it is down, both connections are reconnecting when it comes back
        for _ in 0..5 {
            client.get(&gw.url("/x"), &[("x-user", "down")]).await;
        }
        redis = tokio::task::spawn_blocking(move || {
            redis.restart();
            redis
        })
        .await
        .unwrap();
        for i in 0..20 {
            let user = format!("r{round}-{i}");
            let r = client.get(&gw.url("/x"), &[("x-user", &user)]).await;
            decided += usize::from(r.status == 200);
        }
    }
    assert!(decided > 50, "{decided} decided");
    let text = client.get(&gw.admin("/metrics"), &[]).await.body;
    let script =
        support::observe::metric(&text, "slidegate_store_errors_total", &[("kind", "script")]);
    assert_eq!(script, 0.0, "script errors reached on_error");
    gw.stop().await;
}
