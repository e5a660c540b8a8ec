//! The traffic path: rate-limit headers and 429 bodies (and `headers = false`, which removes
//! them from every response but keeps `Retry-After`), client IP and spoofing, routing, key
//! errors (400 counted as `bad_request`, the client IP fallback no client value can equal), and
//! the proxy itself (streaming, hop-by-hop headers, X-Forwarded-*, 502, 504).

mod support;

use std::time::{Duration, Instant};

use http::Method;
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_carries_every_header_and_body_field() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
key = ["ip"]
  [[routes.limits]]
  name = "per-minute"
  limit = 5
  window = "1m"
  [[routes.limits]]
  name = "per-hour"
  limit = 20
  window = "1h"
"#;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("hdr")),
        &up.url(),
        routes,
    ))
    .await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let first = client.send(Method::POST, &url, &[], "").await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600")
    );
    assert_eq!(first.header("ratelimit"), Some("\"per-minute\";r=4;t=60"));
    assert_eq!(first.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("4"));
    assert_eq!(first.header("x-ratelimit-reset"), Some("60"));
    for _ in 0..4 {
        assert_eq!(client.send(Method::POST, &url, &[], "").await.status, 200);
    }
    let r = client.send(Method::POST, &url, &[], "").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600")
    );
    assert_eq!(
        r.header("ratelimit"),
        Some(format!("\"per-minute\";r=0;t={retry_after}").as_str())
    );
    assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        r.header("x-ratelimit-reset"),
        Some(retry_after.to_string().as_str())
    );
    let body = r.json();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["route"], "otp-send");
    assert_eq!(body["limit"], "per-minute");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-minute"]));
    let ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        ms > 58_000 && ms <= 60_000 && ms.div_ceil(1000) == retry_after,
        "{ms}"
    );
}

/// The rate-limit headers a route can turn off (SPEC section 9, "Quiet headers").
const RATE_LIMIT_HEADERS: [&str; 5] = [
    "ratelimit-policy",
    "ratelimit",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// `headers = false` tells a client nothing of the quota: no rate-limit header on allowed
/// responses nor on 429s, which keep `Retry-After` and their problem body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_false_removes_the_rate_limit_headers_from_every_response() {
    let up = upstream::start().await;
    let route = |name: &str, path: &str, headers: &str| {
        format!("[[routes]]\nname = \"{name}\"\npath = \"{path}\"\nupstream = \"up\"\n{headers}\n  [[routes.limits]]\n  name = \"m\"\n  limit = 1\n  window = \"1m\"\n")
    };
    let routes = route("quiet", "/quiet", "headers = false") + &route("loud", "/loud", "");
    let gw = gateway::start(&config(MEMORY, &up.url(), &routes)).await;
    let client = HttpClient::default();
    let shown = |r: &support::http::Reply| -> Vec<&str> {
        RATE_LIMIT_HEADERS
            .into_iter()
            .filter(|h| r.header(h).is_some())
            .collect()
    };
    let ok = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(ok.status, 200);
    assert_eq!(shown(&ok), Vec::<&str>::new(), "{:?}", ok.headers);
    let rejected = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(rejected.status, 429);
    assert_eq!(
        shown(&rejected),
        Vec::<&str>::new(),
        "no quota on a quiet route's 429 either: {:?}",
        rejected.headers
    );
    let retry_after: u64 = rejected.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    let body = rejected.json();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(
        body["retry_after_ms"].as_u64().unwrap().div_ceil(1000),
        retry_after
    );
    // Deny-cached 429s are as quiet.
    let again = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(again.status, 429);
    assert_eq!(shown(&again), Vec::<&str>::new(), "{:?}", again.headers);
    assert!(again.header("retry-after").is_some());

    // The same route with the default (`headers = true`) shows them all, both ways.
    let ok = client.get(&gw.url("/loud"), &[]).await;
    assert_eq!(shown(&ok), RATE_LIMIT_HEADERS, "{:?}", ok.headers);
    let rejected = client.get(&gw.url("/loud"), &[]).await;
    assert_eq!(rejected.status, 429);
    assert_eq!(
        shown(&rejected),
        RATE_LIMIT_HEADERS,
        "{:?}",
        rejected.headers
    );
}

fn ip_route(trusted: &str) -> String {
    format!(
        "[[routes]]\nname = \"by-ip\"\npath = \"/*\"\nupstream = \"up\"\nkey = [\"ip\"]\n  [[routes.limits]]\n  name = \"m\"\n  limit = 2\n  window = \"1m\"\n{trusted}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_x_forwarded_for_from_an_untrusted_peer_gains_nothing() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("spoof")),
        &up.url(),
        &ip_route(""),
    ))
    .await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for i in 0..6 {
        let fake = format!("198.51.100.{i}");
        codes.push(
            client
                .get(
                    &gw.url("/x"),
                    &[
                        ("x-forwarded-for", &fake),
                        ("forwarded", &format!("for={fake}")),
                    ],
                )
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 200, 429, 429, 429, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_trusted_proxy_distinct_clients_get_distinct_quotas() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let cfg = config(
        &redis_store(&redis.url(), &unique_prefix("trusted")),
        &up.url(),
        &ip_route(""),
    )
    .replace(
        "listen = \"127.0.0.1:0\"\n\n[admin]",
        "listen = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[admin]",
    );
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let get = |xff: &'static str| {
        let (client, url) = (client.clone(), gw.url("/x"));
        async move { client.get(&url, &[("x-forwarded-for", xff)]).await }
    };
    assert_eq!(get("198.51.100.1").await.status, 200);
    assert_eq!(get("198.51.100.1").await.status, 200);
    assert_eq!(get("198.51.100.1").await.status, 429);
    assert_eq!(
        get("198.51.100.2").await.status,
        200,
        "another client has its own quota"
    );
    // A client prepending its own hops through the trusted proxy is still the right-most hop.
    assert_eq!(get("1.2.3.4, 198.51.100.1").await.status, 429);
    assert_eq!(get("5.6.7.8, 198.51.100.1").await.status, 429);
    // What the upstream sees: the chain plus the trusted peer.
    let seen = get("198.51.100.3").await.json();
    assert_eq!(
        seen["headers"]["x-forwarded-for"],
        "198.51.100.3, 127.0.0.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_is_first_match_with_exact_and_prefix_paths() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "otp"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
[[routes]]
name = "exact"
path = "/login"
upstream = "up"
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    assert_eq!(
        client
            .send(Method::POST, &gw.url("/api/otp"), &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        client
            .send(Method::POST, &gw.url("/api/otp/send"), &[], "")
            .await
            .status,
        200
    );
    let miss = client
        .send(Method::POST, &gw.url("/api/otpx"), &[], "")
        .await;
    assert_eq!(miss.status, 404);
    assert_eq!(
        miss.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(miss.json()["error"], "no_route");
    assert_eq!(
        client.status(&gw.url("/api/otp/send"), &[]).await,
        404,
        "method must match"
    );
    assert_eq!(client.status(&gw.url("/login"), &[]).await, 200);
    assert_eq!(client.status(&gw.url("/login"), &[]).await, 429);
    assert_eq!(
        client.status(&gw.url("/login/"), &[]).await,
        429,
        "a trailing slash is the same exact route and spends the same quota"
    );
    assert_eq!(
        client.status(&gw.url("/login/x"), &[]).await,
        404,
        "exact path"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_parts_get_400_or_fall_back_to_the_ip() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "strict"
path = "/strict"
upstream = "up"
key = ["header:X-Api-Key"]
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
[[routes]]
name = "lenient"
path = "/lenient"
upstream = "up"
key = ["query:user", "method"]
on_missing_key = "ip"
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let r = client.get(&gw.url("/strict"), &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing_key");
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k1")])
            .await,
        200
    );
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k1")])
            .await,
        429
    );
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k2")])
            .await,
        200
    );
    assert_eq!(client.status(&gw.url("/lenient"), &[]).await, 200);
    assert_eq!(
        client.status(&gw.url("/lenient"), &[]).await,
        429,
        "both fell back to 127.0.0.1|GET"
    );
    assert_eq!(client.status(&gw.url("/lenient?user=ann"), &[]).await, 200);
    // The fallback is marked: no value a client sends is the fallback's key.
    for spoof in ["127.0.0.1", "%25ip%3A127.0.0.1"] {
        assert_eq!(
            client
                .status(&gw.url(&format!("/lenient?user={spoof}")), &[])
                .await,
            200,
            "user={spoof} is not the client IP's fallback key"
        );
    }
    // A route's 400 for a missing key counts, so bots sending junk show on the dashboard.
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let count = |route: &str, decision: &str| {
        support::observe::metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", route), ("decision", decision)],
        )
    };
    assert_eq!(count("strict", "bad_request"), 1.0, "{metrics}");
    assert_eq!(count("strict", "allowed"), 2.0, "{metrics}");
    assert_eq!(count("lenient", "bad_request"), 0.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_strips_hop_by_hop_headers_and_sets_forwarding_headers() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let r = client
        .get(
            &gw.url("/echo-headers?a=1"),
            &[
                ("connection", "x-private"),
                ("x-private", "secret"),
                ("te", "trailers"),
                ("x-forwarded-for", "6.6.6.6"),
                ("host", "api.example"),
            ],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("keep-alive").is_none(),
        "upstream hop-by-hop headers are removed"
    );
    let seen = r.json();
    let h = &seen["headers"];
    assert_eq!(seen["path"], "/echo-headers");
    assert_eq!(seen["query"], "a=1");
    assert!(h.get("x-private").is_none() && h.get("te").is_none());
    assert_eq!(
        h["x-forwarded-for"], "127.0.0.1",
        "an untrusted peer's chain is replaced"
    );
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "api.example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_both_ways() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let big = "x".repeat(3 * 1024 * 1024);
    let echoed = client.send(Method::POST, &gw.url("/echo"), &[], &big).await;
    assert_eq!(echoed.body.len(), big.len());

    // The first chunk must arrive long before the last one is sent: nothing is buffered.
    let stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<
        _,
        http_body_util::Empty<bytes::Bytes>,
    >(hyper_util::rt::TokioIo::new(stream))
    .await
    .unwrap();
    tokio::spawn(conn);
    let started = Instant::now();
    let req = http::Request::get("/drip?chunks=3&ms=400")
        .header("host", "x")
        .body(http_body_util::Empty::new())
        .unwrap();
    let mut resp = sender.send_request(req).await.unwrap();
    use http_body_util::BodyExt;
    let first = resp.body_mut().frame().await.unwrap().unwrap();
    assert!(first.is_data());
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "first chunk after {:?}",
        started.elapsed()
    );
    while resp.body_mut().frame().await.is_some() {}
    assert!(started.elapsed() >= Duration::from_millis(800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_reach_the_upstream_while_the_client_is_still_sending() {
    use http_body_util::{BodyExt, StreamBody};
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    let (chunks, body) =
        tokio::sync::mpsc::channel::<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>(1);
    let body = StreamBody::new(tokio_stream_of(body));
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/echo")
        .header("host", "x")
        .header("transfer-encoding", "chunked")
        .body(body)
        .unwrap();
    let response = tokio::spawn(async move { sender.send_request(req).await });
    chunks
        .send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
            b"first;",
        ))))
        .await
        .unwrap();
    // The upstream echoes what it receives: the first chunk comes back through the gateway
    // while the request body is still open. A gateway that buffered the request would hold it
    // until the body ended, and nothing would come back.
    let mut resp = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("the response head comes while the request is still being sent")
        .unwrap()
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), resp.body_mut().frame())
        .await
        .expect("the first chunk is echoed before the second is sent")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.into_data().unwrap(),
        bytes::Bytes::from_static(b"first;")
    );
    chunks
        .send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
            b"second",
        ))))
        .await
        .unwrap();
    drop(chunks);
    let rest = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, bytes::Bytes::from_static(b"second"));
}

/// A channel's receiving end as a stream of body frames.
fn tokio_stream_of<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_upstream_is_502_and_slow_upstream_is_504() {
    let up = upstream::start().await;
    let dead = format!("http://127.0.0.1:{}", support::free_port());
    let routes = format!(
        "[[routes]]\nname = \"dead\"\npath = \"/dead\"\nupstream = \"dead\"\n[[routes]]\nname = \"slow\"\npath = \"/slow\"\nupstream = \"up\"\n\n[upstreams.dead]\nurl = \"{dead}\"\n"
    );
    let cfg = config(MEMORY, &up.url(), &routes).replace("timeout = \"2s\"", "timeout = \"300ms\"");
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let r = client.get(&gw.url("/dead"), &[]).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"], "upstream_unreachable");
    let started = Instant::now();
    let r = client.get(&gw.url("/slow?ms=2000"), &[]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"], "upstream_timeout");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_upstream_requests_total{route=\"dead\",status=\"error\"} 1"),
        "{metrics}"
    );
}
