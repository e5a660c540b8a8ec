//! A client's `Connection` header cannot remove the headers the gateway sets: naming
//! `X-Forwarded-*` and `X-Request-Id` there changes nothing, from an untrusted peer (the gateway
//! sets its own values) or from a trusted proxy (the gateway keeps theirs and appends the peer).

mod support;

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

    // From a trusted proxy it keeps theirs and appends the peer, as without `Connection`.
    let r = raw::send(trusted.running().proxy_addr, request.as_bytes()).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-forwarded-for"], "198.51.100.1, 127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-proto"], "https", "{h}");
    assert_eq!(h["x-forwarded-host"], "public.example", "{h}");
    assert_eq!(h["x-request-id"], "trace-abc", "{h}");
    assert_eq!(r.header("x-request-id"), Some("trace-abc"));
}
