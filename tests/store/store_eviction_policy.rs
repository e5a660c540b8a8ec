//! A Redis that may evict the counts: against a real `redis-server --maxmemory-policy
//! volatile-lru` (a common managed default; every limit key has a TTL), the gateway warns at
//! start and on reload, `slidegate check` warns (and `--strict` fails on it), and the server's
//! evictions show on `/metrics` as `slidegate_store_evicted_keys_total`. A `noeviction` server
//! gets no warning.

use crate::support;

use std::time::{Duration, Instant};

use support::cli_commands::{slidegate, stderr};
use support::gateway::{config, redis_store};
use support::http::HttpClient;
use support::process::Process;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const ROUTES: &str = r#"
[[routes]]
name = "all"
path = "/*"
upstream = "up"
  [[routes.limits]]
  name = "per-minute"
  limit = 100
  window = "1m"
"#;

/// `evicted_keys` of `INFO stats`.
fn evicted_keys(redis: &RedisServer) -> u64 {
    let info = match redis.cmd(&["INFO", "stats"]) {
        support::redis::Resp::Bulk(Some(text)) => text,
        other => panic!("{other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

/// `slidegate_store_evicted_keys_total` on the admin listener's `/metrics`.
async fn exported(client: &HttpClient, admin: std::net::SocketAddr) -> u64 {
    let body = client
        .get(&format!("http://{admin}/metrics"), &[])
        .await
        .body;
    body.lines()
        .find_map(|l| l.strip_prefix("slidegate_store_evicted_keys_total "))
        .map(|v| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no slidegate_store_evicted_keys_total in:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_evicts_is_warned_about_and_its_evictions_are_exported() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let store = redis_store(&redis.url(), &unique_prefix("evict"));
    std::fs::write(&file, config(&store, &up.url(), ROUTES)).unwrap();
    let path = file.to_str().unwrap();

    // check: a warning naming the policy; --strict fails on it.
    let out = slidegate(&["check", "--config", path], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warned = stderr(&out);
    assert!(
        warned.contains(&format!("{path}: warning: store: the Redis at"))
            && warned.contains("maxmemory-policy `volatile-lru`"),
        "{warned}"
    );
    let strict = slidegate(&["check", "--strict", "--config", path], &[]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));

    // The running gateway warns at start and again on reload.
    let gw = Process::start(&file, &[]);
    // The warning comes with the start, before or after the start-up line.
    let start = gw.lines_until("listening on");
    if !start
        .iter()
        .any(|l| l.contains("maxmemory-policy `volatile-lru`"))
    {
        gw.wait_for("maxmemory-policy `volatile-lru`");
    }
    let admin: std::net::SocketAddr = start
        .last()
        .and_then(|l| l.split("(admin ").nth(1))
        .and_then(|s| s.split(')').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{start:?}"));
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let after_reload = gw.lines_until("maxmemory-policy `volatile-lru`");
    assert!(
        after_reload.iter().any(|l| l.contains("config reloaded")),
        "the warning came with the reload: {after_reload:?}"
    );

    // Evictions: fill Redis past a small maxmemory with keys that have a TTL (one script
    // overshoots; the next command evicts).
    let client = HttpClient::default();
    let before = exported(&client, admin).await;
    assert_eq!(before, evicted_keys(&redis));
    redis.cmd(&["CONFIG", "SET", "maxmemory", "4mb"]);
    redis.cmd(&[
        "EVAL",
        "for i = 1, 6000 do redis.call('SET', 'fill:' .. i, string.rep('x', 1000), 'PX', 600000) end return 1",
        "0",
    ]);
    redis.cmd(&["SET", "fill:last", "x", "PX", "600000"]);
    let evicted = evicted_keys(&redis);
    assert!(evicted > before, "the server evicted keys: {evicted}");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = exported(&client, admin).await;
        if now == evicted_keys(&redis) && now > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "exported {now}, Redis says {evicted}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(gw);

    // noeviction: silent.
    redis.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let out = slidegate(&["check", "--strict", "--config", path], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// `check` against a Redis that refuses the credentials (a rotated password) warns, naming
/// Redis's own `WRONGPASS`, and `--strict` fails on it; one that cannot be reached from where
/// `check` runs is no warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_about_a_redis_that_refuses_the_credentials() {
    let redis = RedisServer::start_async().await;
    redis.cmd(&["CONFIG", "SET", "requirepass", "rotated"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let path = file.to_str().unwrap();
    let url = format!("redis://default:old@127.0.0.1:{}", redis.port);
    let store = redis_store(&url, &unique_prefix("refused"));
    std::fs::write(&file, config(&store, "http://127.0.0.1:9", ROUTES)).unwrap();
    let out = slidegate(&["check", "--config", path], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warned = stderr(&out);
    assert!(
        warned.contains(&format!("{path}: warning: store.url: redis://***@"))
            && warned.contains("refused the credentials")
            && warned.contains("WRONGPASS")
            && !warned.contains("old@"),
        "{warned}"
    );
    let strict = slidegate(&["check", "--strict", "--config", path], &[]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));

    let (_hold, port) = support::reserved_port();
    let unreachable = redis_store(&format!("redis://127.0.0.1:{port}"), "x");
    std::fs::write(&file, config(&unreachable, "http://127.0.0.1:9", ROUTES)).unwrap();
    let out = slidegate(&["check", "--strict", "--config", path], &[]);
    assert!(
        out.status.success(),
        "not reachable from here: {}",
        stderr(&out)
    );
}

/// The same through a cluster URL: the node asked for the slot table refuses the credentials,
/// and `check` names it at once instead of waiting out its second as if nothing answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_about_a_cluster_that_refuses_the_credentials() {
    let node = RedisServer::start_with(&["--cluster-enabled", "yes"]);
    node.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    node.cmd(&["CONFIG", "SET", "requirepass", "rotated"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let path = file.to_str().unwrap();
    let url = format!("redis-cluster://default:old@127.0.0.1:{}", node.port);
    let store = redis_store(&url, &unique_prefix("refused-cluster"));
    std::fs::write(&file, config(&store, "http://127.0.0.1:9", ROUTES)).unwrap();
    let strict = slidegate(&["check", "--strict", "--config", path], &[]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    let warned = stderr(&strict);
    assert!(
        warned.contains("refused the credentials") && warned.contains("WRONGPASS"),
        "{warned}"
    );
}
