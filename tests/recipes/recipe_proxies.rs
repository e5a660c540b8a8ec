//! The NGINX and Caddy recipes run: real NGINX (`examples/nginx/`) and real Caddy
//! (`examples/caddy/`) in front of a test upstream, slidegate started from the recipe's own TOML.
//! The OTP location goes through slidegate's proxy listener, which reads the phone number from
//! the body: three spellings of one number give 200, 200, 200, then 429, and the app sees three
//! OTP requests. Every other request goes through forward auth (a limit of 3 per client: 200,
//! 200, 200, then 429 with `Retry-After`), also when the client sends its own original-request
//! headers naming another request. With `proxy_intercept_errors on`, the app's own 403 stays a
//! 403 behind NGINX.

use crate::support;

use http::Method;
use support::gateway::Gateway;
use support::http::HttpClient;
use support::proxies::{self, Proxy, Slidegate};
use support::redis::RedisServer;
use support::upstream;

/// What a client adds to dodge the limit: both conventions' original-request headers, naming
/// a request no route counts. The proxy passes the client's headers to its subrequest; the
/// recipe must keep these out (or slidegate refuses the subrequest), never count them.
const SMUGGLED: [(&str, &str); 4] = [
    ("x-forwarded-method", "GET"),
    ("x-forwarded-uri", "/health"),
    ("x-original-method", "GET"),
    ("x-original-uri", "/health"),
];

/// Three spellings of one number through `front`'s OTP location, then a fourth: 200, 200, 200,
/// 429 with Retry-After and slidegate's problem body; the app got three OTP requests, none with
/// the host or scheme the client claimed in its own forwarding headers.
async fn otp_by_phone(front: &Proxy, app: &upstream::Upstream) {
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    let mut last = None;
    for phone in [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "(0812) 3456 7890",
        "6281234567890",
    ] {
        let body = format!(r#"{{"phone":"{phone}"}}"#);
        // a client's own forwarding headers, which must not reach the app through the proxy
        let r = client
            .send(
                Method::POST,
                &front.url("/api/otp/send"),
                &[
                    ("content-type", "application/json"),
                    ("x-forwarded-host", "evil.example"),
                    ("x-forwarded-proto", "https"),
                    ("forwarded", "for=6.6.6.6;host=evil.example"),
                ],
                &body,
            )
            .await;
        if r.status == 200 {
            let seen = &r.json()["headers"];
            assert!(!seen.to_string().contains("evil.example"), "{seen}");
            assert_eq!(seen["x-forwarded-proto"], "http", "{seen}");
        }
        statuses.push(r.status.as_u16());
        last = Some(r);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "{}", front.log());
    let last = last.unwrap();
    assert!(last.header("retry-after").is_some());
    assert_eq!(last.json()["limit"], "per-phone");
    let otp_seen = app.seen().iter().filter(|p| p.contains("otp")).count();
    assert_eq!(otp_seen, 3, "the app saw {:?}", app.seen());
}

/// Four requests of another path through `front`'s subrequest: 200, 200, 200, 429 with
/// Retry-After; each carries [`SMUGGLED`] headers, which change nothing, and forged forwarding
/// headers, which never reach the app.
async fn the_rest_by_forward_auth(front: &Proxy) {
    let client = HttpClient::default();
    let mut replies = Vec::new();
    // with a client's own forwarding headers, which must not reach the app either
    let forged = [
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "https"),
        ("forwarded", "for=6.6.6.6;host=evil.example"),
        ("x-real-ip", "6.6.6.6"),
    ];
    let headers: Vec<(&str, &str)> = SMUGGLED.iter().chain(&forged).copied().collect();
    for _ in 0..4 {
        let r = client
            .send(Method::POST, &front.url("/api/items"), &headers, "{}")
            .await;
        replies.push(r);
    }
    let statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    let (first, last) = (&replies[0], &replies[3]);
    assert_eq!(statuses, [200, 200, 200, 429], "{}", front.log());
    let seen = &first.json()["headers"];
    assert!(
        !seen.to_string().contains("evil.example") && !seen.to_string().contains("6.6.6.6"),
        "{seen}"
    );
    assert_eq!(seen["x-forwarded-proto"], "http", "{seen}");
    // The app's answers carry slidegate's headers.
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-ip\";q=3;w=60"),
        "{:?}",
        first.headers
    );
    assert_eq!(first.header("ratelimit"), Some("\"per-ip\";r=2;t=60"));
    let retry: u64 = last
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(last.json()["error"], "rate_limited");
    // A path no route takes is not limited, and goes through.
    let other = client.get(&front.url("/health"), &[]).await;
    assert_eq!(other.status, 200);
}

/// Starts a proxy from its recipe: the app's address, slidegate's listeners, an edit of the
/// recipe's text.
type StartFront = fn(&str, &Slidegate<'_>, fn(String) -> String) -> Proxy;

/// The recipe of `proxy` started by `front` (with `edit` applied to its text), and slidegate
/// from the recipe's TOML: `None` when the binary is missing outside CI.
async fn started(
    proxy: &str,
    front: StartFront,
    edit: fn(String) -> String,
    redis: &RedisServer,
    app: &upstream::Upstream,
) -> Option<(Gateway, Proxy)> {
    if !proxies::installed(proxy) {
        return None;
    }
    let app_addr = app.addr.to_string();
    let gw = proxies::recipe_gateway(proxy, redis, Some(&app_addr)).await;
    let (proxy_addr, fa) = (
        gw.running().proxy_addr.to_string(),
        gw.running().forward_auth_addr.unwrap().to_string(),
    );
    let listeners = Slidegate {
        proxy: &proxy_addr,
        forward_auth: &fa,
    };
    let front = front(&app_addr, &listeners, edit);
    Some((gw, front))
}

async fn recipe(proxy: &str, front: StartFront) {
    let redis = RedisServer::start();
    let app = upstream::start().await;
    let Some((gw, front)) = started(proxy, front, |t| t, &redis, &app).await else {
        return;
    };
    otp_by_phone(&front, &app).await;
    the_rest_by_forward_auth(&front).await;
    drop(front);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_recipe() {
    recipe("nginx", proxies::nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_recipe() {
    recipe("caddy", proxies::caddy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_keeps_the_apps_own_403_with_proxy_intercept_errors_on() {
    let redis = RedisServer::start();
    let app = upstream::start().await;
    let intercept = |text: String| {
        text.replacen(
            "        proxy_pass http://app;",
            "        proxy_intercept_errors on;\n        proxy_pass http://app;",
            1,
        )
    };
    let Some((gw, front)) = started("nginx", proxies::nginx, intercept, &redis, &app).await else {
        return;
    };
    let client = HttpClient::default();
    let own = client.get(&front.url("/api/forbidden"), &[]).await;
    assert_eq!(own.status, 403, "{}", front.log());
    // slidegate's refusals are still 429s: the route's 3 a minute per client.
    for _ in 0..2 {
        client.get(&front.url("/api/forbidden"), &[]).await;
    }
    let refused = client.get(&front.url("/api/forbidden"), &[]).await;
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    drop(front);
    gw.stop().await;
}
