//! The recipes `examples/otp.toml` and `examples/login.toml`, run as written: only the listen
//! addresses (port 0), the store URL (a test Redis) and the upstream URL (a real upstream that
//! answers like the service: 200 for an OTP, 200 for the password `right` and 401 otherwise) are
//! replaced; every route and limit stays as the file has it. And what the recipe tests read back:
//! the bodies the upstream got, the gateway's metrics and admin answers, quiet 429s, Redis's keys.

use std::path::{Path, PathBuf};

use http::Method;
use slidegate::app::Running;
use slidegate::config::Config;

pub use super::auth::AuthUpstream;
use super::gateway::TOKEN;
use super::http::{HttpClient, Reply};
use super::metrics;
use super::redis::{RedisServer, Resp};

/// The secret `hash = true` key parts are keyed with in these tests.
pub const SECRET: &str = "recipe-test-secret";

/// The rate-limit headers a quiet route (`headers = false`) must not send.
pub const QUIET: [&str; 5] = [
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

pub fn recipe_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// `text` with each `(from, to)` replaced; each `from` must occur exactly once, so a recipe that
/// changes makes this test fail instead of silently testing something else.
fn adapt(text: &str, replacements: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in replacements {
        assert_eq!(
            out.matches(from).count(),
            1,
            "the recipe no longer has exactly one `{from}`"
        );
        out = out.replacen(from, to, 1);
    }
    out
}

/// A gateway running a recipe, and its config file (a reload reads it again).
pub struct Recipe {
    running: Option<Running>,
    _dir: tempfile::TempDir,
}

impl Recipe {
    /// The recipe `name` with its listeners on port 0, its store on `redis` and its one upstream
    /// at `upstream`; the hash secret and the admin token come from the test's environment
    /// lookup, not the process's.
    pub async fn start(name: &str, redis: &RedisServer, upstream: &AuthUpstream) -> Recipe {
        Recipe::start_at(name, redis, &upstream.url()).await
    }

    /// [`Recipe::start`] with its upstream at `upstream_url`, whatever listens there.
    pub async fn start_at(name: &str, redis: &RedisServer, upstream_url: &str) -> Recipe {
        Self::start_written(name, redis, upstream_url, "http://127.0.0.1:9000").await
    }

    /// [`Recipe::start_at`] for a recipe whose upstream is written `written` in the file.
    pub async fn start_written(
        name: &str,
        redis: &RedisServer,
        upstream: &str,
        written: &str,
    ) -> Recipe {
        let text = std::fs::read_to_string(recipe_path(name)).unwrap();
        let toml = adapt(
            &text,
            &[
                (
                    "listen = \"127.0.0.1:8080\"",
                    "listen = \"127.0.0.1:0\"".into(),
                ),
                (
                    "listen = \"127.0.0.1:9091\"",
                    "listen = \"127.0.0.1:0\"".into(),
                ),
                // the store's deadline: the files' default (50 ms) is for a Redis next door,
                // not for one sharing two loaded cores with the whole suite; no recipe test is
                // about the deadline
                (
                    "url = \"redis://127.0.0.1:6390\"",
                    format!("url = \"{}\"\ntimeout = \"2s\"", redis.url()),
                ),
                (
                    &format!("url = \"{written}\""),
                    format!("url = \"{upstream}\""),
                ),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &toml).unwrap();
        let config = Config::load_with_env(&path, |name: &str| match name {
            "SLIDEGATE_KEY_SECRET" => Some(SECRET.to_string()),
            "SLIDEGATE_ADMIN_TOKEN" => Some(TOKEN.to_string()),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("the recipe {name} does not load: {e}"));
        let running = slidegate::app::start(config).await.expect("gateway starts");
        Recipe {
            running: Some(running),
            _dir: dir,
        }
    }

    /// The running gateway (its listeners' addresses).
    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.as_ref().unwrap().proxy_addr)
    }

    pub fn admin(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.as_ref().unwrap().admin_addr)
    }

    pub async fn metrics(&self) -> String {
        HttpClient::default()
            .get(&self.admin("/metrics"), &[])
            .await
            .body
    }

    pub async fn admin_get(&self, path: &str) -> serde_json::Value {
        let auth = format!("Bearer {TOKEN}");
        let r = HttpClient::default()
            .get(&self.admin(path), &[("authorization", &auth)])
            .await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()
    }

    /// [`Recipe::admin_get`], asking again (up to 10 times) while the store answers late
    /// (503 on a loaded machine: the recipes keep the default `store.timeout`).
    pub async fn admin_get_patiently(&self, path: &str) -> serde_json::Value {
        let auth = format!("Bearer {TOKEN}");
        for _ in 0..10 {
            let r = HttpClient::default()
                .get(&self.admin(path), &[("authorization", &auth)])
                .await;
            if r.status != 503 {
                assert_eq!(r.status, 200, "{path}: {}", r.body);
                return r.json();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("{path}: the store never answered in time");
    }

    pub async fn reload(&self) {
        let auth = format!("Bearer {TOKEN}");
        let r = HttpClient::default()
            .send(
                Method::POST,
                &self.admin("/admin/reload"),
                &[("authorization", &auth)],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "reload: {}", r.body);
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// POSTs a JSON `body` as the client at `ip` (127.0.0.1 is a trusted proxy, so the gateway
/// takes the client from `X-Forwarded-For`).
pub async fn post_as(client: &HttpClient, url: &str, ip: &str, body: &str) -> Reply {
    client
        .send(
            Method::POST,
            url,
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", ip),
            ],
            body,
        )
        .await
}

/// The `n`-th of many client IPs, each different.
pub fn ip(n: u32) -> String {
    format!("198.18.{}.{}", n / 250, n % 250 + 1)
}

pub fn count(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(metrics, name, labels).unwrap_or(0.0)
}

pub fn requests(metrics: &str, route: &str, decision: &str) -> f64 {
    count(
        metrics,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
}

/// A 429 of a quiet route: no rate-limit header, and a `Retry-After` of whole seconds that is
/// the body's `retry_after_ms` rounded up. Returns the body.
pub fn assert_quiet_429(r: &Reply, limit: &str) -> serde_json::Value {
    assert_eq!(r.status, 429, "{}", r.body);
    for name in QUIET {
        assert!(r.header(name).is_none(), "{name} on a quiet route's 429");
    }
    let body = r.json();
    assert_eq!(body["limit"], limit, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    let retry_after: u64 = r
        .header("retry-after")
        .expect("Retry-After on a quiet 429")
        .parse()
        .unwrap();
    assert_eq!(retry_after, retry_ms.div_ceil(1000).max(1), "{body}");
    body
}

/// Every key in `redis` (`KEYS *`, fine on a test server).
pub fn all_keys(redis: &RedisServer) -> Vec<String> {
    match redis.cmd(&["KEYS", "*"]) {
        Resp::Array(items) => items
            .into_iter()
            .filter_map(|k| match k {
                Resp::Bulk(Some(k)) => Some(k),
                _ => None,
            })
            .collect(),
        other => panic!("KEYS failed: {other:?}"),
    }
}
