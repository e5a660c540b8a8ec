//! A client's `Connection` header cannot remove the headers the gateway sets: naming
//! `X-Forwarded-*` and `X-Request-Id` there changes nothing, from an untrusted peer (the gateway
//! sets its own values) or from a trusted proxy (the gateway keeps its chain and request id and
//! appends the peer; the scheme and host are the gateway's own whoever asks).
//! Nor can it remove what the request's meaning rests on: naming `Content-Type`,
//! `Content-Length`, `Transfer-Encoding`, `Content-Encoding`, `Host` or a header a key part of
//! the route reads is a 400 `bad_request` that nothing counts and the upstream never sees.

use crate::support;

use support::gateway::{self, config, with_server};
use support::hardening::{ALL, MEMORY};
use support::{raw, upstream};

/// What the upstream received, from its JSON echo.
fn upstream_headers(r: &raw::RawReply) -> serde_json::Value {
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["headers"].clone()
}

const NAMES_THE_GATEWAY_SETS: &str =
    "close, X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, X-Request-Id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_header_cannot_remove_the_headers_the_gateway_sets() {
    let up = upstream::start().await;
    let untrusted = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let trusted = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    ))
    .await;
    let request = format!(
        "GET /conn HTTP/1.1\r\nHost: api.example\r\nConnection: {NAMES_THE_GATEWAY_SETS}\r\n\
         X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\n\
         X-Forwarded-Host: public.example\r\nX-Request-Id: trace-abc\r\n\r\n"
    );

    // From an untrusted peer the gateway replaces all four with its own values.
    let r = raw::send(untrusted.running().proxy_addr, request.as_bytes()).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-proto"], "http", "{h}");
    assert_eq!(h["x-forwarded-host"], "api.example", "{h}");
    let id = r.header("x-request-id").unwrap();
    assert_ne!(id, "trace-abc");
    assert_eq!(h["x-request-id"], id, "{h}");

    // From a trusted proxy it keeps the chain and appends the peer, as without `Connection`;
    // the scheme and host are the ones the gateway received, whoever sent the request.
    let r = raw::send(trusted.running().proxy_addr, request.as_bytes()).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-forwarded-for"], "198.51.100.1, 127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-proto"], "http", "{h}");
    assert_eq!(h["x-forwarded-host"], "api.example", "{h}");
    assert_eq!(h["x-request-id"], "trace-abc", "{h}");
    assert_eq!(r.header("x-request-id"), Some("trace-abc"));
}

/// `Connection: close, Content-Type` on a route keyed by the body: forwarded as RFC 9110 says, the
/// upstream would get the body counted as JSON without its type. Each such request, and one
/// naming a header a key reads, is a 400 `bad_request` problem, counted as `bad_request`, and
/// never reaches the upstream; `keep-alive` and `close` alone still go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_header_naming_what_the_request_rests_on_is_refused() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"otp\"\npath = \"/otp\"\nupstream = \"up\"\n\
                  key = [\"json:phone\", \"header:X-Api-Key\"]\n\
                  [[routes.limits]]\nname = \"per-phone\"\nlimit = 100\nwindow = \"1m\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let body = r#"{"phone":"+6281234567890"}"#;
    let request = |connection: &str| {
        format!(
            "POST /otp HTTP/1.1\r\nHost: api.example\r\nConnection: {connection}\r\n\
             Content-Type: application/json\r\nX-Api-Key: k1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let refused = [
        "close, Content-Type",
        "close,content-length",
        "Transfer-Encoding, close",
        "keep-alive, Content-Encoding, close",
        "close, Host",
        "close, x-api-key",
    ];
    for connection in refused {
        let r = raw::send(gw.running().proxy_addr, request(connection).as_bytes()).await;
        assert_eq!(r.status, 400, "{connection}: {r:?}");
        assert_eq!(r.json()["error"], "bad_request", "{connection}");
        assert!(r
            .header("content-type")
            .unwrap()
            .starts_with("application/problem+json"));
    }
    assert!(
        up.seen().is_empty(),
        "a refused request reached the upstream: {:?}",
        up.seen()
    );
    // (`close` in each: the raw client reads to the connection's end)
    for connection in ["keep-alive, close", "close"] {
        let r = raw::send(gw.running().proxy_addr, request(connection).as_bytes()).await;
        assert_eq!(r.status, 200, "{connection}: {r:?}");
    }
    assert_eq!(up.seen().len(), 2);
    let metrics = scrape(&gw).await;
    let bad = support::metrics::value(
        &metrics,
        "slidegate_requests_total",
        &[("route", "otp"), ("decision", "bad_request")],
    );
    assert_eq!(bad, Some(refused.len() as f64));
}

/// A route that reads its answers' cost from their body asks the upstream for `identity`: a
/// `Connection` naming `Accept-Encoding` there would leave the upstream free to compress an
/// answer whose cost the gateway then cannot read, so it is refused like the others. A route
/// reading its cost from a header keeps RFC 9110's rule: the named header goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_header_cannot_remove_the_identity_a_cost_read_from_the_body_needs() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"llm\"\npath = \"/llm\"\nupstream = \"up\"\n\
                  key = [\"header:X-Api-Key\"]\n\
                  [[routes.limits]]\nname = \"tokens\"\nlimit = 1000\nwindow = \"1h\"\n\
                  cost_from = \"json:usage.total_tokens\"\n\
                  [[routes]]\nname = \"dl\"\npath = \"/dl\"\nupstream = \"up\"\n\
                  key = [\"header:X-Api-Key\"]\n\
                  [[routes.limits]]\nname = \"bytes\"\nlimit = 1000\nwindow = \"1h\"\n\
                  cost_from = \"header:X-Usage\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let request = |path: &str, connection: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: api.example\r\nConnection: {connection}\r\n\
             Accept-Encoding: gzip\r\nX-Api-Key: k1\r\n\r\n"
        )
    };
    let named = "close, Accept-Encoding";
    let r = raw::send(gw.running().proxy_addr, request("/llm", named).as_bytes()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.json()["error"], "bad_request");
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    let r = raw::send(gw.running().proxy_addr, request("/llm", "close").as_bytes()).await;
    assert_eq!(upstream_headers(&r)["accept-encoding"], "identity");
    let r = raw::send(gw.running().proxy_addr, request("/dl", named).as_bytes()).await;
    assert!(
        upstream_headers(&r).get("accept-encoding").is_none(),
        "{r:?}"
    );
}

async fn scrape(gw: &gateway::Gateway) -> String {
    support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body
}
