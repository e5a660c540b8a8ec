//! A dead or slow Redis never hangs a request (README, "The traffic path"): `on_error` decides within
//! `store.timeout`, every failure is counted, `/readyz` tells, and decisions resume (the script
//! loaded again) after a restart. A Redis slower than the timeout is a paused one (`CLIENT PAUSE
//! WRITE`), so the test knows that Redis had not answered when the gateway did, without a clock.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::http::HttpClient;
use support::observe::{decision_calls, metric};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

fn routes(on_error: &str) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\nkey = [\"ip\"]\non_error = \"{on_error}\"\n  [[routes.limits]]\n  name = \"m\"\n  limit = 3\n  window = \"1m\"\n"
    )
}

fn store(url: &str, test: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{url}\"\ntimeout = \"{}ms\"\nkey_prefix = \"{}\"",
        TIMEOUT.as_millis(),
        unique_prefix(test)
    )
}

/// `store.timeout` of [`store`].
const TIMEOUT: Duration = Duration::from_millis(100);

/// How long a request may take at most when Redis is dead: `store.timeout` and a generous
/// margin for a loaded machine. A liveness bound: a request that waited for Redis would hang.
const BOUND: Duration = Duration::from_millis(100 + 1000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_open_within_the_timeout_and_recovers() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "open"),
        &up.url(),
        &routes("allow"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    redis.kill();
    for _ in 0..5 {
        let started = Instant::now();
        let r = client.get(&gw.url("/x"), &[]).await;
        assert_eq!(r.status, 200);
        assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    }
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics
            .contains("slidegate_requests_total{decision=\"store_error_allowed\",route=\"r\"} 5"),
        "{metrics}"
    );
    let ready = client.get(&gw.admin("/readyz"), &[]).await;
    assert_eq!(
        ready.status, 200,
        "no route fails closed: degraded but ready"
    );
    assert_eq!(ready.json()["status"], "degraded");

    // Back: a fresh, empty Redis (no scripts loaded) decides again.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut codes = Vec::new();
    while Instant::now() < deadline {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
        if codes.ends_with(&[429]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        codes.last(),
        Some(&429),
        "limits apply again after the restart: {codes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_closed_with_503_and_retry_after() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "closed"),
        &up.url(),
        &routes("deny"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.admin("/readyz"), &[]).await, 200);
    redis.kill();
    let started = Instant::now();
    let r = client.get(&gw.url("/x"), &[]).await;
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"], "store_unavailable");
    assert_eq!(client.status(&gw.admin("/readyz"), &[]).await, 503);
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"store_error_denied\",route=\"r\"} 1"),
        "{metrics}"
    );
    let errors: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("slidegate_store_errors_total{"))
        .collect();
    // A command in flight when the server dies times out; later ones fail to connect.
    let failures: u64 = errors
        .iter()
        .filter(|l| l.contains("connection") || l.contains("timeout"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(failures, 1, "{errors:?}");
}

/// A Redis that holds the call past `store.timeout`: the request gets the route's `on_error`
/// (deny: 503) while Redis still holds its call, and the failure counts as a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_the_timeout_is_a_timeout() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "slow"),
        &up.url(),
        &routes("deny"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    // From now on Redis runs no script until it is resumed (60 s at most).
    assert_eq!(
        redis.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        Resp::Simple("OK".into())
    );
    let ran = decision_calls(&redis);
    let r = client.get(&gw.url("/x"), &[]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"], "store_unavailable");
    assert_eq!(
        decision_calls(&redis),
        ran,
        "answered while Redis still held the call"
    );
    redis.cmd(&["CLIENT", "UNPAUSE"]);
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        metric(
            &metrics,
            "slidegate_store_errors_total",
            &[("kind", "timeout")]
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", "r"), ("decision", "store_error_denied")]
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_fallback_keeps_limiting_while_redis_is_down() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "local"),
        &up.url(),
        &routes("local"),
    ))
    .await;
    let client = HttpClient::default();
    redis.kill();
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 200, 429, 429]);
    // The batch API says the fallback decided: the store failed, whatever answered.
    let (name, value) = support::admin::auth();
    let r = client
        .send(
            http::Method::POST,
            &gw.admin("/v1/decisions"),
            &[(name, &value), ("content-type", "application/json")],
            r#"{"route":"r","keys":["203.0.113.9"]}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let result = &r.json()["results"][0];
    assert_eq!(result["allowed"], true, "{result}");
    assert_eq!(result["decision"], "allowed", "{result}");
    assert_eq!(result["remaining"], 2, "the fallback counted it: {result}");
    assert_eq!(result["error"], "store_unavailable", "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_starts_while_redis_is_down() {
    // The port is held (bound, not listening: connects are refused) until Redis starts there.
    let (hold, port) = support::reserved_port();
    let up = upstream::start().await;
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let gw = gateway::start(&config(&store(&url, "down"), &up.url(), &routes("allow"))).await;
    // The store waits at most 2 s for Redis; nothing else waits for a Redis that never answered
    // (the reset subscription used to add 2 s more, a port accepting what it did not serve).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the gateway waited for the dead Redis to start: {:?}",
        started.elapsed()
    );
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    drop(hold);
    let redis = tokio::task::spawn_blocking(move || RedisServer::start_on(port))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut codes = Vec::new();
        for _ in 0..4 {
            codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
        }
        if codes.contains(&429) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis never took over: {codes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(redis);
}

/// A Redis client whose connection task ends (fred ends it for good on some errors) is started
/// again: decisions come back from the store instead of failing until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_connection_task_ended_is_started_again() {
    use fred::interfaces::ClientLike;
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "keeper"),
        &up.url(),
        &routes("deny"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    let slidegate::store::Store::Redis(store) = gw.running().state.limiter().store().clone() else {
        panic!("a Redis store");
    };
    store.client().quit().await.expect("the client quits");
    // Its connection task has ended: the route fails closed until the keeper starts it again.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut statuses = Vec::new();
    loop {
        let status = client.get(&gw.url("/x"), &[]).await.status.as_u16();
        statuses.push(status);
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "decisions never came back from the store: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.stop().await;
}

/// Redis restarted while no request came: once it answers again, the first request on every
/// worker is decided, not sent to `on_error` because a lane's own connection has not been dialed
/// again yet (the call goes the client library's way meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_requests_after_a_quiet_restart_are_decided() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let routes = routes("deny").replace("limit = 3", "limit = 1000");
    let gw = gateway::start(&config(&store(&redis.url(), "quiet"), &up.url(), &routes)).await;
    let client = HttpClient::default();
    for _ in 0..4 {
        assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    }
    redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    // The client library has reconnected when `/readyz` says the store answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(&gw.admin("/readyz"), &[]).await.status != 200 {
        assert!(Instant::now() < deadline, "the store is back within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut codes = Vec::new();
    for _ in 0..8 {
        codes.push(client.status(&gw.url("/x"), &[]).await);
    }
    assert!(codes.iter().all(|&c| c == 200), "{codes:?}");
    drop(redis);
}

/// A Redis that refuses the gateway's password, or its connection: `/readyz` says so (Redis's
/// own `WRONGPASS`, the refused connection), not that the store timed out, so an operator after
/// a password rotation looks at the credentials, not the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_tells_why_redis_cannot_be_reached() {
    let redis = RedisServer::start_async().await;
    redis.cmd(&["CONFIG", "SET", "requirepass", "rotated"]);
    let up = upstream::start().await;
    let wrong = format!("redis://default:old@127.0.0.1:{}", redis.port);
    let (hold, port) = support::reserved_port();
    let refused = format!("redis://127.0.0.1:{port}");
    for (url, says) in [(wrong, "WRONGPASS"), (refused, "Connection refused")] {
        let gw = gateway::start(&config(&store(&url, "why"), &up.url(), &routes("allow"))).await;
        let ready = HttpClient::default().get(&gw.admin("/readyz"), &[]).await;
        assert_eq!(ready.json()["status"], "degraded", "{}", ready.body);
        let error = ready.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains(says), "{error}");
        gw.stop().await;
    }
    drop(hold);
}

/// A Redis that became a replica (a standalone URL's server demoted by a failover, or a
/// `REPLICAOF` by hand) answers `PING` but refuses every decision with `READONLY`: `/readyz`
/// says the store is unavailable while a route fails closed, and ready again once it is a
/// master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_unavailable_while_the_store_is_a_replica() {
    let redis = RedisServer::start_async().await;
    let other = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "replica"),
        &up.url(),
        &routes("deny"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.admin("/readyz"), &[]).await.status, 200);
    redis.cmd(&["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
    let ready = client.get(&gw.admin("/readyz"), &[]).await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    let problem = ready.json();
    assert_eq!(problem["status"], 503, "{}", ready.body);
    assert_eq!(problem["error"], "store_unavailable", "{}", ready.body);
    assert!(problem["request_id"].is_string(), "{}", ready.body);
    assert!(ready.body.contains("READONLY"), "{}", ready.body);
    redis.cmd(&["REPLICAOF", "NO", "ONE"]);
    assert_eq!(client.get(&gw.admin("/readyz"), &[]).await.status, 200);
    gw.stop().await;
}

/// A least-privilege ACL user that may not run `ROLE` (an administrative command) still gets a
/// ready gateway: readiness then asks `PING`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_ready_for_a_user_the_acl_denies_role() {
    let redis = RedisServer::start_async().await;
    redis.cmd(&[
        "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-role",
    ]);
    let up = upstream::start().await;
    let url = format!("redis://limited:pw@127.0.0.1:{}", redis.port);
    let gw = gateway::start(&config(&store(&url, "acl"), &up.url(), &routes("deny"))).await;
    let client = HttpClient::default();
    let ready = client.get(&gw.admin("/readyz"), &[]).await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.json()["status"], "ready", "{}", ready.body);
    assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    gw.stop().await;
}

/// A cluster none of whose seed nodes answers at start has no node to ask: `/readyz` says so
/// (a 503 problem body), where it used to panic and drop the connection, which a load
/// balancer's probe reads as the pod being broken, fail-open routes or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_for_a_cluster_with_no_node_known() {
    let (_hold, port) = support::reserved_port();
    let up = upstream::start().await;
    let url = format!("redis-cluster://127.0.0.1:{port}");
    let gw = gateway::start(&config(&store(&url, "nonode"), &up.url(), &routes("deny"))).await;
    let client = HttpClient::default();
    for _ in 0..2 {
        let ready = client.get(&gw.admin("/readyz"), &[]).await;
        assert_eq!(ready.status, 503, "{}", ready.body);
        assert_eq!(ready.json()["error"], "store_unavailable", "{}", ready.body);
    }
    gw.stop().await;
}
