//! A dead or slow Redis never hangs a request: `on_error` decides within `store.timeout`, every
//! failure is counted, `/readyz` tells, and decisions resume (scripts reloaded) after a restart.

mod support;

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

fn routes(on_error: &str) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\nkey = [\"ip\"]\non_error = \"{on_error}\"\n  [[routes.limits]]\n  name = \"m\"\n  limit = 3\n  window = \"1m\"\n"
    )
}

fn store(url: &str, test: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{url}\"\ntimeout = \"100ms\"\nkey_prefix = \"{}\"",
        unique_prefix(test)
    )
}

const MARGIN: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_open_within_the_timeout_and_recovers() {
    let mut redis = RedisServer::start();
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
        assert!(
            started.elapsed() < Duration::from_millis(100) + MARGIN,
            "took {:?}",
            started.elapsed()
        );
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
    let mut redis = RedisServer::start();
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
    assert!(
        started.elapsed() < Duration::from_millis(100) + MARGIN,
        "took {:?}",
        started.elapsed()
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_the_timeout_is_a_timeout() {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &store(&redis.url(), "slow"),
        &up.url(),
        &routes("deny"),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    // Freeze the server for a second, from another connection.
    let port = redis.port;
    let sleeper = std::thread::spawn(move || {
        let r = RedisServer::attach(port);
        let _ = r.try_cmd(&["DEBUG", "SLEEP", "1"]);
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = client.get(&gw.url("/x"), &[]).await;
    assert!(
        started.elapsed() < Duration::from_millis(100) + MARGIN,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(r.status, 503);
    sleeper.join().unwrap();
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_store_errors_total{kind=\"timeout\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_fallback_keeps_limiting_while_redis_is_down() {
    let mut redis = RedisServer::start();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_starts_while_redis_is_down() {
    let port = support::free_port();
    let up = upstream::start().await;
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let gw = gateway::start(&config(&store(&url, "down"), &up.url(), &routes("allow"))).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[]).await, 200);
    let redis = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let codes: Vec<u16> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
            }
            v
        };
        if codes.contains(&429) {
            break;
        }
        assert!(Instant::now() < deadline, "Redis never took over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(redis);
}
