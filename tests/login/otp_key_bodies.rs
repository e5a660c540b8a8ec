//! Bodies the gateway reads for a key (README, "Protecting OTP and login endpoints"), through the gateway over real sockets:
//! bodies that cannot key a limit (a duplicate member, two `Content-Type` lines, a compressed
//! body, a body over the bound, a body that is not the JSON it says) get clear answers, are counted as `bad_request` and never
//! reach the upstream; a body read for a key goes upstream byte for byte, and one that arrives too
//! slowly is cut with 408.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::http::HttpClient;
use support::otp_login::{gateway_on, post, requests, scrape, AuthUpstream, OTP_ROUTE};
use support::raw;
use support::redis::RedisServer;

/// Bodies that cannot key a limit get clear answers, counted as `bad_request`, and never reach
/// the upstream: a duplicate member or two `Content-Type` lines that differ (400
/// ambiguous_key), a compressed body (415), a body over
/// the bound (413, announced or chunked), a body that is not the JSON it says (400 missing_key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_cannot_key_a_limit_are_refused_and_counted() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let routes = OTP_ROUTE.replace("key = [\"ip\"]", "key = [\"ip\"]\nmax_key_body_bytes = 64");
    let gw = gateway_on(&redis, &upstream, &routes).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    // (what, extra headers, body, status, problem error)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "duplicate",
            vec![],
            r#"{"phone":"081234567890","phone":"081299999999"}"#.into(),
            400,
            "ambiguous_key",
        ),
        (
            // a body both JSON and a form, read by the first line, acted on by the last
            "two content types",
            vec![("content-type", "application/x-www-form-urlencoded")],
            r#"{"phone":"081234567890","x":"&phone=081299999999&"}"#.into(),
            400,
            "ambiguous_key",
        ),
        (
            "gzip",
            vec![("content-encoding", "gzip")],
            r#"{"phone":"081234567890"}"#.into(),
            415,
            "unsupported_body_encoding",
        ),
        (
            // every line counts, not only the first
            "identity then gzip",
            vec![
                ("content-encoding", "identity"),
                ("content-encoding", "gzip"),
            ],
            r#"{"phone":"081234567890"}"#.into(),
            415,
            "unsupported_body_encoding",
        ),
        (
            "too large",
            vec![],
            format!(r#"{{"phone":"081234567890","pad":"{}"}}"#, "x".repeat(100)),
            413,
            "body_too_large",
        ),
        (
            "truncated",
            vec![],
            r#"{"phone":"0812345"#.into(),
            400,
            "missing_key",
        ),
        (
            "null",
            vec![],
            r#"{"phone":null}"#.into(),
            400,
            "missing_key",
        ),
        (
            "not a number",
            vec![],
            r#"{"phone":"call me"}"#.into(),
            400,
            "missing_key",
        ),
        (
            "deep",
            vec![],
            format!("{}{}", "[".repeat(30), "]".repeat(30)),
            400,
            "missing_key",
        ),
    ];
    for (name, headers, body, status, code) in &cases {
        let r = post(&client, &url, headers, body).await;
        assert_eq!(r.status.as_u16(), *status, "{name}: {}", r.body);
        assert_eq!(r.json()["error"], *code, "{name}");
        assert!(r.json()["request_id"].is_string(), "{name}");
    }
    // chunked, no length, over the bound
    let big = format!(r#"{{"phone":"081234567890","pad":"{}"}}"#, "y".repeat(200));
    let addr: SocketAddr = gw.url("").trim_start_matches("http://").parse().unwrap();
    let chunked = format!(
        "POST /api/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let r = raw::send(addr, chunked.as_bytes()).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"], "body_too_large");
    // bytes that are not UTF-8 inside the JSON: not JSON, so the key part is missing
    let mut invalid = b"POST /api/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16\r\nConnection: close\r\n\r\n".to_vec();
    invalid.extend_from_slice(b"{\"phone\":\"08\xff\xfe\"}");
    let r = raw::send(addr, &invalid).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing_key");
    assert!(
        upstream.bodies("/api/otp/send").is_empty(),
        "nothing refused reached the upstream"
    );
    let metrics = scrape(&gw).await;
    assert_eq!(
        requests(&metrics, "otp-send", "bad_request"),
        cases.len() as f64 + 2.0
    );
    gw.stop().await;
}

/// A body the gateway reads for a key goes upstream byte for byte, a BOM included; a body that
/// arrives too slowly is cut with 408 and does not hold the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_bodies_go_upstream_byte_for_byte_and_slow_ones_are_cut() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let routes = OTP_ROUTE.replace("/api/otp/send", "/echo");
    let gw = gateway_on(&redis, &upstream, &routes).await;
    let client = HttpClient::default();
    let body = "\u{feff}{\"phone\": \"0812 3456 7890\", \"note\": \"caf\u{e9} \\u00e9\"}";
    let r = post(&client, &gw.url("/echo"), &[], body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, body);
    assert_eq!(upstream.bodies("/echo"), vec![body.as_bytes().to_vec()]);

    let addr: SocketAddr = gw.url("").trim_start_matches("http://").parse().unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"phone\":")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the slow body was not cut");
    let reply = raw::parse(&buf);
    assert_eq!(reply.status, 408, "{}", reply.head);
    assert_eq!(reply.json()["error"], "body_timeout");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "cut before header_read_timeout"
    );
    gw.stop().await;
}
