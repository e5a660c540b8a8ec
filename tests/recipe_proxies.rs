//! The forward-auth recipes run: real NGINX (`auth_request`, `examples/nginx/`) and real Caddy
//! (`forward_auth`, `examples/caddy/`) in front of a test upstream, slidegate started from the
//! recipe's own TOML. A limit of 3 gives 200, 200, 200, then 429 with `Retry-After` at the
//! client, through each proxy, and the upstream sees exactly 3 requests, also when the client
//! sends its own original-request headers naming another request.

mod support;

use http::Method;
use support::gateway::{self, Gateway};
use support::http::HttpClient;
use support::proxies::{self, example, Proxy};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

/// slidegate from `examples/<proxy>/slidegate.toml`, its listeners on port 0, deciding in
/// `redis`.
async fn slidegate(proxy: &str, redis: &RedisServer) -> Gateway {
    let toml = example(&format!("{proxy}/slidegate.toml"))
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:9091\"", "listen = \"127.0.0.1:0\"")
        .replace("listen = \"127.0.0.1:8082\"", "listen = \"127.0.0.1:0\"")
        .replace(
            "url = \"redis://127.0.0.1:6379\"",
            &format!(
                "url = \"{}\"\nkey_prefix = \"{}\"",
                redis.url(),
                unique_prefix(proxy)
            ),
        );
    gateway::start(&toml).await
}

/// What a client adds to dodge the limit: both conventions' original-request headers, naming
/// a request no route counts. The proxy passes the client's headers to its subrequest; the
/// recipe must keep these out (or slidegate refuses the subrequest), never count them.
const SMUGGLED: [(&str, &str); 4] = [
    ("x-forwarded-method", "GET"),
    ("x-forwarded-uri", "/health"),
    ("x-original-method", "GET"),
    ("x-original-uri", "/health"),
];

/// Four OTP sends through `front`: 200, 200, 200, 429 with Retry-After; 3 reach the app. Each
/// carries [`SMUGGLED`] headers, which change nothing.
async fn three_then_refused(front: &Proxy, app: &upstream::Upstream) {
    let client = HttpClient::default();
    let mut replies = Vec::new();
    for _ in 0..4 {
        let r = client
            .send(Method::POST, &front.url("/api/otp/send"), &SMUGGLED, "{}")
            .await;
        replies.push(r);
    }
    let statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    let (first, last) = (&replies[0], &replies[3]);
    // The app's answers carry slidegate's headers.
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-ip\";q=3;w=60"),
        "{:?}",
        first.headers
    );
    assert_eq!(first.header("ratelimit"), Some("\"per-ip\";r=2;t=60"));
    assert_eq!(statuses, [200, 200, 200, 429], "{}", front.log());
    let retry: u64 = last
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(
        last.header("ratelimit").unwrap().contains("r=0"),
        "{:?}",
        last.headers
    );
    assert_eq!(last.json()["error"], "rate_limited");
    assert_eq!(app.seen().len(), 3, "the app saw {:?}", app.seen());
    // Another path is not limited, and goes through.
    let other = client.get(&front.url("/health"), &[]).await;
    assert_eq!(other.status, 200);
}

/// The recipe of `proxy` (started by `front` with the app's and forward auth's addresses),
/// driven through: skipped when the binary is missing outside CI.
async fn recipe(proxy: &str, front: fn(&str, &str) -> Proxy) {
    if !proxies::installed(proxy) {
        return;
    }
    let redis = RedisServer::start();
    let app = upstream::start().await;
    let gw = slidegate(proxy, &redis).await;
    let fa = gw.running().forward_auth_addr.unwrap().to_string();
    let front = front(&app.addr.to_string(), &fa);
    three_then_refused(&front, &app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_recipe() {
    recipe("nginx", proxies::nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_recipe() {
    recipe("caddy", proxies::caddy).await;
}
