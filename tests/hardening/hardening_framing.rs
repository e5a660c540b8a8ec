//! Conflicting framing never reaches the upstream: a request smuggled behind both
//! `Content-Length` and `Transfer-Encoding` (CL.TE) is never served, and the upstream never gets
//! both framing headers.

use crate::support;

use support::gateway::{self, config};
use support::hardening::{ALL, MEMORY};
use support::{metrics, raw, upstream};

/// The classic CL.TE smuggle: a front end that believed `Content-Length` would pass the second
/// request along inside the first one's body. Here `Transfer-Encoding` wins, the body is the
/// empty chunked one, and the connection is closed after the answer, so the smuggled request is
/// never served and the upstream never sees both framing headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_smuggled_behind_conflicting_framing_never_reaches_the_upstream() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let smuggled = "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n";
    let request = format!(
        "POST /front HTTP/1.1\r\nHost: gw\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{smuggled}",
        smuggled.len()
    );
    let r = raw::send(gw.running().proxy_addr, request.as_bytes()).await;
    assert!(
        !r.head.contains("/smuggled") && !r.body.contains("/smuggled"),
        "{r:?}"
    );
    let seen = up.seen();
    assert!(
        !seen.iter().any(|t| t.contains("smuggled")),
        "the smuggled request reached the upstream: {seen:?}"
    );
    if r.status == 200 {
        let headers = &r.json()["headers"];
        assert!(
            headers.get("content-length").is_none() || headers.get("transfer-encoding").is_none(),
            "the upstream got both framing headers: {headers}"
        );
    }
}

/// A body whose chunk framing breaks on a route that streams it unread is the client's fault:
/// 400 `body_unreadable`, not a 502 that blames the upstream, and the upstream's error count
/// does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_body_is_the_clients_error_not_the_upstreams() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let addr = gw.running().proxy_addr;
    for body in ["zz\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n"] {
        let request = format!(
            // The upstream holds its answer back (`/slow`), so the body's failure comes first.
            "POST /slow?ms=5000 HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}"
        );
        let r = raw::send(addr, request.as_bytes()).await;
        assert_eq!(r.status, 400, "{body:?}: {r:?}");
        assert_eq!(r.json()["error"], "body_unreadable", "{body:?}");
    }
    let text = support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let errors = metrics::value(
        &text,
        "slidegate_upstream_requests_total",
        &[("route", "all"), ("status", "error")],
    );
    assert_eq!(errors.unwrap_or(0.0), 0.0, "blamed on the upstream");
}

/// A transfer coding other than `chunked` (`gzip, chunked`): the gateway decodes the chunks
/// alone, so forwarding would send the upstream gzip bytes as the body it reads (another
/// request than the one sent). 501 `transfer_coding_not_implemented`, as NGINX answers; and
/// `chunked` twice, which no sender may write (RFC 9112 6.1), a malformed request: 400
/// `bad_request`. The upstream sees neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_coding_other_than_chunked_is_not_implemented() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let addr = gw.running().proxy_addr;
    let not_implemented = (501, "transfer_coding_not_implemented");
    let malformed = (400, "bad_request");
    for (coding, (status, error)) in [
        ("gzip, chunked", not_implemented),
        ("deflate,chunked", not_implemented),
        ("chunked, chunked", malformed),
        ("chunked\r\nTransfer-Encoding: chunked", malformed),
    ] {
        let request = format!(
            "POST /coded HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
        let r = raw::send(addr, request.as_bytes()).await;
        assert_eq!(r.status, status, "{coding}: {r:?}");
        assert_eq!(r.json()["error"], error, "{coding}");
    }
    let plain = "POST /plain HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(raw::send(addr, plain.as_bytes()).await.status, 200);
    assert!(
        !up.seen().iter().any(|t| t.contains("coded")),
        "{:?}",
        up.seen()
    );
}
