//! SPEC section 9, through the gateway over real sockets, with a real Redis and a real upstream
//! that answers like an OTP sender and a login endpoint: keys from JSON and form bodies (with
//! their options and their bad inputs), a key per limit, counting outcomes (reservations,
//! refunds, resets), escalating blocks, quiet headers, and the metrics of all of it.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::gateway::{self, config, Gateway, TOKEN};
use support::http::{HttpClient, Reply};
use support::metrics::value;
use support::redis::{RedisServer, Resp};
use support::{raw, unique_prefix};

/// An upstream that answers `POST /api/login` with 200 for the password `right` and 401 for
/// anything else (after `?ms=N` milliseconds when asked), `POST /api/otp/send` with 200, and
/// `POST /echo` with the body it got; it records every body it was sent.
/// The bodies an upstream was sent, with their paths, in arrival order.
type SeenBodies = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

struct AuthUpstream {
    addr: SocketAddr,
    bodies: SeenBodies,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthUpstream {
    async fn start() -> AuthUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: SeenBodies = Arc::default();
        let seen = bodies.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        async move { Ok::<_, Infallible>(answer(req, &seen).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        AuthUpstream { addr, bodies, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies posted to `path`, in arrival order.
    fn bodies(&self, path: &str) -> Vec<Vec<u8>> {
        let all = self.bodies.lock().unwrap();
        all.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<(String, Vec<u8>)>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let wait = req
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("ms="))
        .and_then(|ms| ms.parse::<u64>().ok());
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let body = body.unwrap_or_default();
    seen.lock().unwrap().push((path.clone(), body.to_vec()));
    if let Some(ms) = wait {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let (status, text) = match path.as_str() {
        "/api/login" => {
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match json.get("password").and_then(|p| p.as_str()) {
                Some("right") => (200, Bytes::from_static(b"welcome")),
                _ => (401, Bytes::from_static(b"wrong password")),
            }
        }
        "/echo" => (200, body),
        _ => (200, Bytes::from_static(b"sent")),
    };
    let mut response = Response::new(Full::new(text));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    response
}

/// A gateway on `redis` in front of `upstream`, trusting 127.0.0.1 as a proxy (so tests can be
/// many clients through `X-Forwarded-For`), with `routes`.
async fn gateway_on(redis: &RedisServer, upstream: &AuthUpstream, routes: &str) -> Gateway {
    let store = gateway::redis_store(&redis.url(), &unique_prefix("otp"));
    let toml = gateway::with_server(
        &config(&store, &upstream.url(), routes),
        "trusted_proxies = [\"127.0.0.1/32\"]\nheader_read_timeout = \"500ms\"",
    );
    gateway::start(&format!(
        "[keys]\nhash_secret_env = \"SLIDEGATE_ADMIN_TOKEN\"\n{toml}"
    ))
    .await
}

const OTP_ROUTE: &str = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
upstream = "up"
key = ["ip"]

  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }]
  limit = 3
  window = "10m"

  [[routes.limits]]
  name = "per-ip"
  limit = 20
  window = "1h"
"#;

async fn post(client: &HttpClient, url: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    client.send(Method::POST, url, &all, body).await
}

async fn scrape(gw: &Gateway) -> String {
    HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body
}

fn requests(metrics: &str, route: &str, decision: &str) -> f64 {
    value(
        metrics,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
    .unwrap_or(0.0)
}

/// The bot of SPEC section 9: a thousand OTP requests for one number through rotating IPs
/// (each a new client behind the trusted proxy), spelled in every way a number can be. Exactly
/// the per-phone limit reaches the upstream; the number never reaches Redis raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_otp_requests_through_rotating_ips_send_three_codes() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, OTP_ROUTE).await;
    let client = HttpClient::default();
    let spellings = [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "(0812) 3456.7890",
        "006281234567890",
        "+6281234567890",
    ];
    let mut allowed = 0;
    for i in 0..1000u32 {
        let ip = format!("198.51.{}.{}", i / 250, i % 250 + 1);
        let body = format!(
            "{{\"phone\":\"{}\"}}",
            spellings[i as usize % spellings.len()]
        );
        let r = post(
            &client,
            &gw.url("/api/otp/send"),
            &[("x-forwarded-for", &ip)],
            &body,
        )
        .await;
        match r.status.as_u16() {
            200 => allowed += 1,
            429 => assert_eq!(r.json()["limit"], "per-phone"),
            other => panic!("unexpected {other}: {}", r.body),
        }
    }
    assert_eq!(allowed, 3);
    assert_eq!(upstream.bodies("/api/otp/send").len(), 3);
    let Resp::Array(keys) = redis.cmd(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    let keys: Vec<String> = keys
        .into_iter()
        .filter_map(|k| match k {
            Resp::Bulk(Some(k)) => Some(k),
            _ => None,
        })
        .collect();
    assert!(
        keys.iter().all(|k| !k.contains("812")),
        "a raw number reached Redis: {keys:?}"
    );
    // a rejected request is charged nowhere: 3 entries for the number, 3 for the three IPs
    let metrics = scrape(&gw).await;
    assert_eq!(requests(&metrics, "otp-send", "allowed"), 3.0);
    assert_eq!(requests(&metrics, "otp-send", "rejected"), 997.0);
    gw.stop().await;
}

/// Bodies that cannot key a limit get clear answers, counted as `bad_request`, and never reach
/// the upstream: a duplicate member (400 ambiguous_key), a compressed body (415), a body over
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
            "gzip",
            vec![("content-encoding", "gzip")],
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

const LOGIN_ROUTE: &str = r#"
[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:username", normalize = "lower" }]
on_exceed = "block"
block_for = "1s"
block_growth = 2
headers = false

  [[routes.limits]]
  name = "failed-logins"
  limit = 3
  window = "1m"
  count_status = [401, 403]
  reset_status = [200]
"#;

fn login(user: &str, password: &str) -> String {
    format!("{{\"username\":\"{user}\",\"password\":\"{password}\"}}")
}

async fn usage(gw: &Gateway, key: &str) -> serde_json::Value {
    let url = gw.admin(&format!("/admin/usage?route=login&key={key}"));
    let auth = format!("Bearer {TOKEN}");
    HttpClient::default()
        .get(&url, &[("authorization", &auth)])
        .await
        .json()
}

/// Only failures count, a success forgives them, and three failures block the account with
/// escalating blocks whose level shows in the 429, in /admin/usage and /admin/blocked, and is
/// cleared by DELETE /admin/usage. The quiet route's 429s keep Retry-After only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_block_escalating_and_successes_do_not_count() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, LOGIN_ROUTE).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    // a user who logs in a lot is never locked out
    for _ in 0..10 {
        let r = post(&client, &url, &[], &login("Ann", "right")).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 0);
    // two failures, then a success forgives them
    for _ in 0..2 {
        assert_eq!(
            post(&client, &url, &[], &login("ann", "x")).await.status,
            401
        );
    }
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 2);
    assert_eq!(
        post(&client, &url, &[], &login("ann", "right"))
            .await
            .status,
        200
    );
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 0);
    // three failures; the fourth attempt is refused without reaching the upstream
    for _ in 0..3 {
        assert_eq!(
            post(&client, &url, &[], &login("ANN", "x")).await.status,
            401
        );
    }
    let sent = upstream.bodies("/api/login").len();
    let r = post(&client, &url, &[], &login("ann", "right")).await;
    assert_eq!(r.status, 429);
    assert_eq!(upstream.bodies("/api/login").len(), sent);
    assert_eq!(r.json()["block_level"], 1);
    assert!(r.header("retry-after").is_some());
    for quiet in ["ratelimit", "ratelimit-policy", "x-ratelimit-remaining"] {
        assert!(r.header(quiet).is_none(), "{quiet} on a quiet route's 429");
    }
    let u = usage(&gw, "ann").await;
    assert_eq!(u["block_level"], 1);
    assert!(u["blocked_ms"].as_u64().unwrap() > 0);
    let auth = format!("Bearer {TOKEN}");
    let blocked = client
        .get(
            &gw.admin("/admin/blocked?route=login"),
            &[("authorization", &auth)],
        )
        .await
        .json();
    assert_eq!(blocked["blocked"][0]["key"], "ann");
    assert_eq!(blocked["blocked"][0]["limit"], "failed-logins");
    assert_eq!(blocked["blocked"][0]["block_level"], 1);
    // the reset lifts the block and forgets the level
    let reset = client
        .send(
            Method::DELETE,
            &gw.admin("/admin/usage?route=login&key=ann"),
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(reset.status, 200);
    let u = usage(&gw, "ann").await;
    assert_eq!(
        (u["block_level"].as_u64(), u["blocked_ms"].as_u64()),
        (Some(0), Some(0))
    );
    let metrics = scrape(&gw).await;
    let started = value(
        &metrics,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started, Some(1.0));
    let resets = value(
        &metrics,
        "slidegate_outcome_resets_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(
        resets,
        Some(11.0),
        "every success cleared the count (its own charge with it)"
    );
    gw.stop().await;
}

/// An attempt whose client leaves while the upstream is still answering gives its reservation
/// back: nothing stays counted, and the refund is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_attempt_leaves_no_reservation() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, LOGIN_ROUTE).await;
    let addr: SocketAddr = gw.url("").trim_start_matches("http://").parse().unwrap();
    let body = login("bob", "x");
    let request = format!(
        "POST /api/login?ms=2000 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        // the attempt is upstream (charged) once the upstream has its body
        for _ in 0..100 {
            if !upstream.bodies("/api/login").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            usage(&gw, "bob").await["limits"][0]["used"],
            1,
            "reserved while in flight"
        );
    } // the client hangs up
    let mut used = 1;
    for _ in 0..100 {
        used = usage(&gw, "bob").await["limits"][0]["used"]
            .as_u64()
            .unwrap();
        if used == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        used, 0,
        "the reservation of an attempt whose client left stayed"
    );
    let metrics = scrape(&gw).await;
    let refunds = value(
        &metrics,
        "slidegate_outcome_refunds_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(refunds, Some(1.0));
    gw.stop().await;
}
