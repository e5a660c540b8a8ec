//! No spelling of a limited path reaches the upstream uncounted: routing, keying and forwarding
//! all use the normalised path (README, "The traffic path"), and routing and keying read it
//! without `;` parameters, as servlet containers route it; the upstream gets it as sent.

use crate::support;

use support::gateway::{self, config};
use support::{raw, upstream};

/// An OTP route limited to 2 per minute per IP, and a catch-all route behind it that only
/// proxies: the shape in which raw-path matching let every bypass spelling through.
const ROUTES: &str = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
key = ["ip", "path"]
on_missing_key = "reject"
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"

[[routes]]
name = "rest"
path = "/*"
upstream = "up"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_an_exhausted_otp_path_is_refused_and_never_forwarded() {
    let up = upstream::start().await;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), ROUTES)).await;
    let addr = gw.running().proxy_addr;

    for _ in 0..2 {
        let r = raw::request(addr, "POST", "/api/otp/send", &[]).await;
        assert_eq!(r.status, 200, "{}", r.head);
    }
    assert_eq!(up.seen(), vec!["/api/otp/send", "/api/otp/send"]);

    let counted_as_the_same_path = [
        "/api/otp/send",
        "//api/otp/send",
        "/api//otp/send",
        "/api/%6Ftp/send",
        "/api/%6ftp/send",
        "/%61pi/otp/send",
        "/api/x/../otp/send",
        "/api/./otp/send",
        "/api/x/%2e%2e/otp/send",
        "/api/otp/send?utm=1",
        // `;` parameters, which servlet containers cut before routing
        "/api/otp/send;jsessionid=1",
        "/API/otp/send;a=1;b=2",
        "/api/otp;v=2/send",
        "/api/otp/send;x/",
        "/api/otp/x/..;/send",
        "/api;v=1/x/..;/otp/send",
    ];
    for target in counted_as_the_same_path {
        let r = raw::request(addr, "POST", target, &[]).await;
        assert_eq!(r.status, 429, "{target}: {}", r.head);
        assert_eq!(r.json()["route"], "otp-send", "{target}");
    }
    let refused = [
        ("/api/otp%2Fsend", "path_encoded_separator"),
        ("/api/otp%2fsend", "path_encoded_separator"),
        ("/api/otp%5Csend", "path_encoded_separator"),
        ("/api/otp\\send", "path_backslash"),
        ("/api/otp/send%00", "path_control_character"),
        ("/api/otp/send%C2%85", "path_control_character"),
        ("/api/otp/send\u{85}", "path_control_character"),
        ("/api/otp/send%zz", "path_malformed_escape"),
        ("/api/x/%C0%AE%C0%AE/otp/send", "path_malformed_escape"),
        ("/../api/otp/send", "path_above_root"),
    ];
    for (target, code) in refused {
        let r = raw::request(addr, "POST", target, &[]).await;
        assert_eq!(r.status, 400, "{target}: {}", r.head);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let body = r.json();
        assert_eq!(body["error"], code, "{target}");
        assert_eq!(body["status"], 400);
    }
    assert_eq!(
        up.seen().len(),
        2,
        "nothing but the two allowed requests may reach the upstream: {:?}",
        up.seen()
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_receives_the_normalised_path_with_the_query_untouched() {
    let up = upstream::start().await;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), ROUTES)).await;
    let addr = gw.running().proxy_addr;
    let r = raw::request(
        addr,
        "GET",
        "//docs/%7euser/./a/../b%20c?q=%2F..%2F&x=//y",
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(up.seen(), vec!["/docs/~user/b%20c?q=%2F..%2F&x=//y"]);
    // `;` parameters are cut for routing and keying only
    let r = raw::request(addr, "POST", "/api/otp;v=2/send;jsessionid=1?q=1", &[]).await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(up.seen()[1], "/api/otp;v=2/send;jsessionid=1?q=1");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_share_one_quota_through_the_path_key_part() {
    // The `path` key part uses the normalised path: alternating spellings spend one quota.
    let up = upstream::start().await;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), ROUTES)).await;
    let addr = gw.running().proxy_addr;
    let statuses: Vec<u16> = futures_util::future::join_all(
        ["/api/otp/a", "/api//otp/a", "/api/otp/%61"]
            .into_iter()
            .map(|t| async move { raw::request(addr, "POST", t, &[]).await.status }),
    )
    .await;
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, vec![200, 200, 429], "{statuses:?}");
    assert_eq!(up.seen(), vec!["/api/otp/a", "/api/otp/a"]);
    gw.stop().await;
}

/// Spellings that frameworks decode before routing (`%3A` for `:`) and the escapes browsers
/// send for a path beyond ASCII (`/caf%C3%A9` for `/café`) match the route written either way,
/// and share its `path` key part: no spelling reaches the catch-all route uncounted (the
/// first route is written with the escape, the second with the character).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spelling_the_upstream_routes_alike_is_counted_by_the_route() {
    const ROUTES: &str = r#"
[[routes]]
name = "colon"
path = "/api/users%3Asend"
upstream = "up"
key = ["path"]
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"

[[routes]]
name = "cafe"
path = "/café/*"
upstream = "up"
key = ["path"]
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"

[[routes]]
name = "rest"
path = "/*"
upstream = "up"
"#;
    let up = upstream::start().await;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), ROUTES)).await;
    let addr = gw.running().proxy_addr;
    let cases = [
        (
            "colon",
            "/api/users:send",
            "/api/users%3Asend",
            "/api/users%3asend",
        ),
        ("cafe", "/caf%C3%A9/x", "/caf%c3%a9/x", "/café/x"),
    ];
    for (route, first, second, third) in cases {
        for target in [first, second] {
            let r = raw::request(addr, "GET", target, &[]).await;
            assert_eq!(r.status, 200, "{target}: {}", r.head);
            assert_eq!(
                r.header("ratelimit-policy"),
                Some("\"per-minute\";q=2;w=60")
            );
        }
        let r = raw::request(addr, "GET", third, &[]).await;
        assert_eq!(r.status, 429, "{third}: {}", r.head);
        assert_eq!(r.json()["route"], route, "{third}");
    }
    // what reached the upstream went as the client spelled it
    assert_eq!(
        up.seen(),
        vec![
            "/api/users:send",
            "/api/users%3Asend",
            "/caf%C3%A9/x",
            "/caf%C3%A9/x"
        ]
    );
    gw.stop().await;
}
