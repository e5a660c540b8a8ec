//! Request heads on the proxy listener are bounded: a head over `server.max_header_bytes` or
//! `server.max_headers` gets a 431 with a problem body and nothing is forwarded; a reload that
//! raises the bound applies or is reported as pending a restart; and a request hyper refuses before
//! the gateway sees it (not HTTP, a head beyond hyper's own buffer) gets the same problem body as
//! every other error.

use crate::support;

use support::gateway::{self, config, with_server};
use support::hardening::{ALL, MEMORY};
use support::problem::assert_problem;
use support::{raw, upstream};

/// `n` header lines `X-Hn: v`.
fn header_lines(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("X-H{i}: v")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_the_bounds_get_431_problems_and_never_reach_the_upstream() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_header_bytes = 2048\nmax_headers = 10",
    ))
    .await;
    let addr = gw.running().proxy_addr;

    // Bytes: a 1,500-byte field fits in 2,048; a 2,100-byte one does not.
    let fits = format!("X-Filler: {}", "a".repeat(1500));
    assert_eq!(
        raw::request(addr, "GET", "/bytes-fit", &[&fits])
            .await
            .status,
        200
    );
    let over = format!("X-Filler: {}", "a".repeat(2100));
    let r = raw::request(addr, "GET", "/bytes-over", &[&over]).await;
    let body = assert_problem(&r, 431, "request_head_too_large");
    assert!(
        body["detail"].as_str().unwrap().contains("2048 bytes"),
        "{body}"
    );

    // Fields: the raw request carries Host, Connection and Content-Length, so 7 more make
    // exactly 10 (allowed) and 8 more make 11 (refused).
    let seven = header_lines(7);
    let seven: Vec<&str> = seven.iter().map(String::as_str).collect();
    assert_eq!(
        raw::request(addr, "GET", "/fields-fit", &seven)
            .await
            .status,
        200
    );
    let eight = header_lines(8);
    let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
    let r = raw::request(addr, "GET", "/fields-over", &eight).await;
    let body = assert_problem(&r, 431, "request_head_too_large");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("11 header fields"),
        "{body}"
    );

    assert_eq!(
        up.seen(),
        ["/bytes-fit", "/fields-fit"],
        "refused heads never reach the upstream"
    );
}

/// hyper's own head bounds are set at start from `max_header_bytes` (twice it, at least 16 KiB);
/// the gateway's 431 check reads the reloaded value. A reload that raises the bound must either
/// apply (the larger head is forwarded) or be reported as needing a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_raises_max_header_bytes_applies_or_is_pending_a_restart() {
    let up = upstream::start().await;
    let base = config(MEMORY, &up.url(), ALL);
    let gw = gateway::start(&with_server(&base, "max_header_bytes = 1024")).await;
    gw.rewrite(&with_server(&base, "max_header_bytes = 65536"));
    let pending = gw.running().state.reload().expect("the file is valid");
    let named = pending
        .iter()
        .any(|p| p.setting == "server.max_header_bytes");
    let head = format!("X-Filler: {}", "a".repeat(20_000));
    let r = raw::request(gw.running().proxy_addr, "GET", "/20k", &[&head]).await;
    assert!(
        r.status == 200 || named,
        "a 20 KB head after raising the bound to 64 KiB: {} {}, pending {pending:?}",
        r.status,
        r.head
    );
}

/// Requests hyper refuses before the gateway sees them (a request line that is not HTTP, a head
/// beyond hyper's own buffer) get the same problem body as every other error, with a request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_parse_get_a_problem_body() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_header_bytes = 1024",
    ))
    .await;
    let addr = gw.running().proxy_addr;

    let r = raw::send(addr, b"THIS IS NOT HTTP\r\n\r\n").await;
    let body = assert_problem(&r, 400, "malformed_request");
    assert_eq!(r.header("x-request-id"), body["request_id"].as_str());

    let r = raw::send(
        addr,
        b"GET /x HTTP/1.1\r\nHost: gw\r\nBad Header Line\r\n\r\n",
    )
    .await;
    assert_problem(&r, 400, "malformed_request");

    // Far beyond the gateway's own bound (1 KiB): hyper's buffer (16 KiB) refuses it first.
    let head = format!(
        "GET /x HTTP/1.1\r\nHost: gw\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let r = raw::send(addr, head.as_bytes()).await;
    assert_problem(&r, 431, "request_head_too_large");
    // A HEAD request's answer has no body (the problem's length is told, as for a GET).
    let r = raw::send(addr, head.replacen("GET", "HEAD", 1).as_bytes()).await;
    assert_eq!(r.status, 431, "{r:?}");
    assert_eq!(r.body, "", "{r:?}");
    assert!(r.header("x-request-id").is_some(), "{r:?}");
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    gw.stop().await;

    // A request target longer than the parser takes (64 KiB), read whole into a buffer that
    // holds it (the bound at 40,000 bytes, the buffer twice that): hyper's 414 is a head beyond
    // the bound like any other, 431.
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_header_bytes = 40000",
    ))
    .await;
    let long_target = format!("/{}", "t".repeat(70_000));
    let r = raw::request(gw.running().proxy_addr, "GET", &long_target, &[]).await;
    assert_problem(&r, 431, "request_head_too_large");
    gw.stop().await;
}

/// RFC 9112 3.2: an HTTP/1.1 request without `Host`, with two, or with one that is not a
/// host[:port] is refused with 400 `bad_host` and never forwarded (an upstream that picks the
/// other `Host` than the gateway logged could route it elsewhere); HTTP/1.0 may go without.
/// An absolute-form target names the host the upstream is told of, before `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_one_valid_host_are_refused() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let addr = gw.running().proxy_addr;
    let refused = [
        "GET /no-host HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /two HTTP/1.1\r\nHost: good\r\nHost: evil\r\nConnection: close\r\n\r\n",
        "GET /space HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
        "GET /userinfo HTTP/1.1\r\nHost: user@host\r\nConnection: close\r\n\r\n",
        "GET /port HTTP/1.1\r\nHost: host:99999\r\nConnection: close\r\n\r\n",
        // an absolute-form target's authority is told upstream as X-Forwarded-Host
        "GET http://good.example:80@evil.example/abs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET http://x:99999/abs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ];
    for request in refused {
        let r = raw::send(addr, request.as_bytes()).await;
        assert_problem(&r, 400, "bad_host");
    }
    let accepted = [
        "GET /old HTTP/1.0\r\n\r\n",
        "GET /port-ok HTTP/1.1\r\nHost: gw.example:8080\r\nConnection: close\r\n\r\n",
        "GET /v6 HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n",
    ];
    for request in accepted {
        let r = raw::send(addr, request.as_bytes()).await;
        assert_eq!(r.status, 200, "{request:?}: {r:?}");
    }
    let absolute = "GET http://target.example/abs HTTP/1.1\r\nHost: header.example\r\nConnection: close\r\n\r\n";
    let r = raw::send(addr, absolute.as_bytes()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["headers"]["x-forwarded-host"], "target.example");
    assert_eq!(up.seen(), ["/old", "/port-ok", "/v6", "/abs"]);
    gw.stop().await;
}

/// The admin listener is served like the proxy listener: a request hyper cannot parse, or a
/// head beyond hyper's bounds, gets the gateway's problem body there too, not an empty answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_refuses_with_problem_bodies_too() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let admin = gw.running().admin_addr;
    let r = raw::send(admin, b"GARBAGE\r\n\r\n").await;
    assert_problem(&r, 400, "malformed_request");
    let many = header_lines(300);
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let r = raw::request(admin, "GET", "/healthz", &many).await;
    assert_problem(&r, 431, "request_head_too_large");
    let r = raw::request(admin, "GET", "/healthz", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    gw.stop().await;
}
