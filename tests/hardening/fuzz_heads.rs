//! A bounded fuzz of what clients send, run by the test command: random request heads (methods,
//! targets with escapes, dot-segments and control bytes, header lines, framing headers) and
//! random bodies for a route keyed on JSON and form fields, over raw sockets. Whatever arrives,
//! the gateway answers a well-formed HTTP response (its own errors as problem bodies) or closes
//! the connection, within a bound, and keeps serving afterwards.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use support::gateway::{self, config, with_server};
use support::{raw, upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROUTES: &str = r#"
[[routes]]
name = "otp"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:user.phone", normalize = "phone", region = "DE" }]
on_missing_key = "ip"
max_key_body_bytes = 256
  [[routes.limits]]
  name = "per-phone"
  limit = 1000
  window = "1s"

[[routes]]
name = "form"
path = "/form"
upstream = "up"
key = [{ part = "form:email", normalize = "email" }, "header:x-k", "query:q"]
on_missing_key = "ip"
  [[routes.limits]]
  name = "per-email"
  limit = 1000
  window = "1s"

[[routes]]
name = "rest"
path = "/*"
upstream = "up"
"#;

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_string()),
        Just("post".to_string()),
        Just("POST".to_string()),
        Just("HEAD".to_string()),
        "[A-Za-z]{1,8}",
        "[ -~]{0,6}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("api".to_string()),
        Just("OTP".to_string()),
        Just("otp".to_string()),
        Just("..".to_string()),
        Just("%2e%2E".to_string()),
        Just("%2F".to_string()),
        Just("%".to_string()),
        Just("%zz".to_string()),
        Just("%00".to_string()),
        Just("form".to_string()),
        "[ -~]{0,5}",
    ];
    (
        proptest::collection::vec(segment, 0..6),
        "[a-z=&%+0-9]{0,12}",
    )
        .prop_map(|(s, q)| {
            let path = format!("/{}", s.join("/"));
            if q.is_empty() {
                path
            } else {
                format!("{path}?{q}")
            }
        })
}

fn header() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Content-Type: application/json".to_string()),
        Just("Content-Type: application/x-www-form-urlencoded".to_string()),
        Just("Transfer-Encoding: chunked".to_string()),
        Just("Content-Length: 5".to_string()),
        Just("Content-Length: -1".to_string()),
        Just("Content-Encoding: gzip".to_string()),
        Just("Expect: 100-continue".to_string()),
        Just("Connection: x-forwarded-for, x-request-id".to_string()),
        Just("X-Forwarded-For: 1.2.3.4, nonsense".to_string()),
        "X-K: [ -~]{0,20}",
        "[A-Za-z-]{1,12}: [ -~]{0,30}",
        "[ -~]{0,20}",
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(br#"{"user":{"phone":"030 1234567"}}"#.to_vec()),
        Just(br#"{"user":{"phone":"1","phone":"2"}}"#.to_vec()),
        Just(b"email=A%2Bb@x.de&email=c@d.e".to_vec()),
        Just(b"\xef\xbb\xbf{\"user\":[]}".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..300),
    ]
}

/// What a client sends: a head and a body, framed by a correct length unless the head says
/// otherwise.
fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        method(),
        target(),
        proptest::collection::vec(header(), 0..6),
        body(),
    )
        .prop_map(|(method, target, headers, body)| {
            let mut out = format!("{method} {target} HTTP/1.1\r\nHost: fuzz\r\n");
            for h in &headers {
                out.push_str(h);
                out.push_str("\r\n");
            }
            if !headers
                .iter()
                .any(|h| h.starts_with("Content-Length") || h.starts_with("Transfer"))
            {
                out.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
            out.push_str("Connection: close\r\n\r\n");
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(&body);
            bytes
        })
}

/// Sends `bytes`, half-closes, and reads the answer; `Err` when nothing settles within 5 s.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = stream.write_all(bytes).await;
        let _ = stream.shutdown().await;
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        Ok(out)
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| "no answer and no close within 5 s".to_string())?
}

#[test]
fn random_requests_get_well_formed_answers_and_the_gateway_keeps_serving() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (up, gw) = rt.block_on(async {
        let up = upstream::start().await;
        let toml = with_server(
            &config("backend = \"memory\"", &up.url(), ROUTES),
            "header_read_timeout = \"1s\"",
        );
        (up, gateway::start(&toml).await)
    });
    let addr = gw.running().proxy_addr;
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 300,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&request(), |bytes| {
            let answer = rt
                .block_on(exchange(addr, &bytes))
                .map_err(TestCaseError::fail)?;
            if answer.is_empty() {
                return Ok(()); // closed: fine for what cannot be answered
            }
            let reply = raw::parse(&answer);
            prop_assert!(
                reply.head.starts_with("HTTP/1.1 ") || reply.head.starts_with("HTTP/1.0 "),
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&answer)
            );
            prop_assert!((100..600).contains(&reply.status), "{}", reply.head);
            prop_assert!(
                reply.status != 500,
                "a 500 for {:?}",
                String::from_utf8_lossy(&bytes)
            );
            let ours = reply.header("content-type") == Some("application/problem+json");
            let head_request = bytes.starts_with(b"HEAD ");
            if ours && !head_request {
                let problem: serde_json::Value = serde_json::from_str(&reply.body)
                    .map_err(|e| TestCaseError::fail(format!("{e}: {}", reply.body)))?;
                prop_assert_eq!(problem["status"].as_u64(), Some(reply.status as u64));
                prop_assert!(problem["error"].is_string() && problem["request_id"].is_string());
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let after = rt.block_on(raw::request(addr, "GET", "/still-serving", &[]));
    assert_eq!(after.status, 200);
    rt.block_on(gw.stop());
    drop(up);
}
