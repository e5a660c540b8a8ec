//! For the tests of the README's "Protecting OTP and login endpoints" through the gateway (`otp_*.rs`, `login_outcomes.rs`): a real
//! upstream that answers like an OTP sender and a login endpoint and records the bodies it got, a
//! gateway in front of it on a real Redis that trusts 127.0.0.1 as a proxy (so tests can be many
//! clients through `X-Forwarded-For`), the OTP route, and reading the gateway's metrics.

use http::Method;

pub use super::auth::AuthUpstream;
use super::gateway::{self, config, Gateway};
use super::http::{HttpClient, Reply};
use super::metrics::value;
use super::redis::RedisServer;
use super::unique_prefix;

/// A gateway on `redis` in front of `upstream`, trusting 127.0.0.1 as a proxy (so tests can be
/// many clients through `X-Forwarded-For`), with `routes`.
pub async fn gateway_on(redis: &RedisServer, upstream: &AuthUpstream, routes: &str) -> Gateway {
    let store = gateway::redis_store(&redis.url(), &unique_prefix("otp"));
    let toml = gateway::with_server(
        &config(&store, &upstream.url(), routes),
        "trusted_proxies = [\"127.0.0.1/32\"]\nheader_read_timeout = \"500ms\"",
    );
    gateway::start(&format!(
        "[keys]\nhash_secret_env = \"SLIDEGATE_ADMIN_TOKEN\"\n{toml}"
    ))
    .await
}

pub const OTP_ROUTE: &str = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
upstream = "up"
key = ["ip"]

  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }]
  limit = 3
  window = "10m"

  [[routes.limits]]
  name = "per-ip"
  limit = 20
  window = "1h"
"#;

/// A login route (`POST /api/login` to the upstream `up`, keyed by the JSON body's `username`
/// as sent: a key that merged values could not reset on every algorithm) whose one limit, `failed-logins`, has the settings `limit` (TOML lines:
/// `limit`, `window`, `count_status`, ...).
pub fn login_route(limit: &str) -> String {
    format!(
        "[[routes]]\nname = \"login\"\npath = \"/api/login\"\nmethods = [\"POST\"]\nupstream = \"up\"\n\
         key = [\"json:username\"]\n\n\
         [[routes.limits]]\nname = \"failed-logins\"\n{limit}\n"
    )
}

pub async fn post(client: &HttpClient, url: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    client.send(Method::POST, url, &all, body).await
}

pub async fn scrape(gw: &Gateway) -> String {
    HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body
}

pub fn requests(metrics: &str, route: &str, decision: &str) -> f64 {
    value(
        metrics,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
    .unwrap_or(0.0)
}
