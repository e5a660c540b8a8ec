//! Every error the gateway answers itself, on the proxy listener and the admin listener, is one
//! RFC 9457 problem shape (`application/problem+json` with `type`, `title`, `status`, a
//! snake_case `error`, `detail` and the `request_id` that `X-Request-Id` carries), the same
//! shape as the 429 of a rate limit.

use crate::support;

use http::Method;
use support::gateway::{self, config, with_server, TOKEN};
use support::http::HttpClient;
use support::problem::{assert_problem, Answer};
use support::redis::RedisServer;
use support::{raw, unique_prefix, upstream};

fn routes(dead_upstream: &str) -> String {
    format!(
        r#"
[[routes]]
name = "keyed"
path = "/keyed"
upstream = "up"
key = ["header:X-Key"]
on_error = "deny"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "dead"
path = "/dead"
upstream = "dead"

[[routes]]
name = "slow"
path = "/slow"
upstream = "up"

[upstreams.dead]
url = "{dead_upstream}"
connect_timeout = "100ms"
"#
    )
}

/// One row: what was asked, the answer, and the status and `error` code it must carry.
struct Case {
    what: &'static str,
    answer: Box<dyn Answer>,
    status: u16,
    error: &'static str,
}

fn case(
    what: &'static str,
    answer: impl Answer + 'static,
    status: u16,
    error: &'static str,
) -> Case {
    Case {
        what,
        answer: Box::new(answer),
        status,
        error,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_one_problem_shape() {
    let mut redis = RedisServer::start();
    let up = upstream::start().await;
    let dead = format!("http://127.0.0.1:{}", support::free_port());
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"100ms\"",
        redis.url(),
        unique_prefix("errors")
    );
    let cfg = with_server(
        &config(&store, &up.url(), &routes(&dead)),
        "max_headers = 20",
    )
    .replace("timeout = \"2s\"", "timeout = \"300ms\"");
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let proxy = gw.running().proxy_addr;
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let key = |k: &'static str| [("x-key", k)];

    let mut cases = Vec::new();
    cases.push(case(
        "a path with an encoded slash",
        raw::request(proxy, "GET", "/keyed/a%2Fb", &[]).await,
        400,
        "path_encoded_separator",
    ));
    cases.push(case(
        "no X-Key for a header key",
        client.get(&gw.url("/keyed"), &[]).await,
        400,
        "missing_key",
    ));
    cases.push(case(
        "no route",
        client.get(&gw.url("/nowhere"), &[]).await,
        404,
        "no_route",
    ));
    assert_eq!(client.status(&gw.url("/keyed"), &key("k1")).await, 200);
    cases.push(case(
        "over the limit",
        client.get(&gw.url("/keyed"), &key("k1")).await,
        429,
        "rate_limited",
    ));
    let fields: Vec<String> = (0..25).map(|i| format!("X-H{i}: v")).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    cases.push(case(
        "more header fields than max_headers",
        raw::request(proxy, "GET", "/keyed", &fields).await,
        431,
        "request_head_too_large",
    ));
    cases.push(case(
        "an upstream nobody listens on",
        client.get(&gw.url("/dead"), &[]).await,
        502,
        "upstream_unreachable",
    ));
    cases.push(case(
        "an upstream slower than its timeout",
        client.get(&gw.url("/slow?ms=2000"), &[]).await,
        504,
        "upstream_timeout",
    ));
    let keys: Vec<String> = (0..10_001).map(|i| format!("u{i}")).collect();
    let body = serde_json::json!({"route": "keyed", "keys": keys}).to_string();
    cases.push(case(
        "a batch of 10,001 keys",
        client
            .send(Method::POST, &gw.admin("/v1/decisions"), &auth, &body)
            .await,
        413,
        "too_many_keys",
    ));
    // Announced, not sent: the client waits for `100 Continue` before sending a body, so the
    // 413 comes without a 17 MiB upload racing the server's close.
    let admin = gw.running().admin_addr;
    let too_large = format!(
        "POST /v1/decisions HTTP/1.1\r\nHost: {admin}\r\nAuthorization: {bearer}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\
         Connection: close\r\n\r\n",
        17 * 1024 * 1024
    );
    cases.push(case(
        "a batch body announced over 16 MiB",
        raw::send(admin, too_large.as_bytes()).await,
        413,
        "body_too_large",
    ));
    cases.push(case(
        "admin without a token",
        client.get(&gw.admin("/admin/config"), &[]).await,
        401,
        "unauthorized",
    ));
    cases.push(case(
        "an unknown admin endpoint",
        client.get(&gw.admin("/admin/nope"), &auth).await,
        404,
        "not_found",
    ));
    let wrong_method = client.get(&gw.admin("/admin/reload"), &auth).await;
    assert_eq!(wrong_method.header("allow"), Some("POST"));
    cases.push(case(
        "a known admin endpoint with the wrong method",
        wrong_method,
        405,
        "method_not_allowed",
    ));
    gw.rewrite("[[routes]]\nname = 1\n");
    cases.push(case(
        "a reload of an invalid file",
        client
            .send(Method::POST, &gw.admin("/admin/reload"), &auth, "")
            .await,
        422,
        "invalid_config",
    ));
    redis.kill();
    let store_down = client.get(&gw.url("/keyed"), &key("k2")).await;
    assert_eq!(store_down.header("retry-after"), Some("1"));
    cases.push(case(
        "the store is down on a route that fails closed",
        store_down,
        503,
        "store_unavailable",
    ));

    // With no admin token configured, protected endpoints answer 403 and say why.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        config("backend = \"memory\"", &up.url(), &routes(&dead)),
    )
    .unwrap();
    let no_token = slidegate::config::Config::load_with_env(&path, |_: &str| None).unwrap();
    let no_token = slidegate::app::start(no_token).await.unwrap();
    cases.push(case(
        "admin with no token configured",
        client
            .get(
                &format!("http://{}/admin/config", no_token.admin_addr),
                &auth,
            )
            .await,
        403,
        "admin_token_not_configured",
    ));

    let mut ids = std::collections::HashSet::new();
    for c in &cases {
        let body = assert_problem(&*c.answer, c.status, c.error);
        assert!(
            ids.insert(body["request_id"].as_str().unwrap().to_string()),
            "{}: request ids are unique per request",
            c.what
        );
    }
    assert!(
        up.seen()
            .iter()
            .all(|t| t != "/keyed/a%2Fb" && t != "/nowhere"),
        "{:?}",
        up.seen()
    );
    no_token.shutdown().await;
}
