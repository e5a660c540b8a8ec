//! Envoy's external authorization (`envoy.service.auth.v3.Authorization/Check`): the HTTP
//! routes of the TOML decided from what Envoy describes (method, path, host, headers, the body
//! in `raw_body`, the client in `source`), answered `OK` with the rate-limit headers or
//! `PERMISSION_DENIED` with the traffic path's own 429, on the traffic path's limiter and store.

use crate::support;

use support::ext_authz::{self, check, Answer, Described, PERMISSION_DENIED};
use support::gateway::{self, redis_store, Gateway};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::unique_prefix;

/// An OTP route keyed by phone number (3 per 10 minutes) and client IP (20 per hour), served by
/// ext_authz and the proxy listener (in front of `upstream_url`), on `redis`.
async fn gateway(redis: &RedisServer, upstream_url: &str, server: &str) -> Gateway {
    let store = redis_store(&redis.url(), &unique_prefix("ea"));
    let routes = r#"
[ext_authz]
listen = "127.0.0.1:0"

[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
upstream = "up"
key = ["ip"]

  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID" }]
  limit = 3
  window = "10m"

  [[routes.limits]]
  name = "per-ip"
  limit = 20
  window = "1h"
"#;
    let config = gateway::config(&store, upstream_url, routes);
    gateway::start(&gateway::with_server(&config, server)).await
}

/// `used` of `limit` for `key` on the OTP route, as `/admin/usage` says.
async fn used(gw: &Gateway, limit: &str, key: &str) -> u64 {
    let (name, value) = support::admin::auth();
    let url = gw.admin(&format!(
        "/admin/usage?route=otp-send&limit={limit}&key={key}"
    ));
    let reply = HttpClient::default().get(&url, &[(name, &value)]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["limits"][0]["used"].as_u64().unwrap_or(0)
}

fn otp(body: &str, source: &str) -> Described {
    Described::post_json("/api/otp/send", body, source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_spellings_of_one_phone_in_raw_body_are_one_key() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    let spellings = [
        r#"{"phone":"0812-3456-7890"}"#,
        r#"{"phone":"+62 812 3456 7890"}"#,
        r#"{"phone":"(0812) 3456 7890"}"#,
    ];
    for (i, body) in spellings.iter().enumerate() {
        let answer = check(&mut client, &otp(body, &format!("203.0.113.{}", i + 1))).await;
        assert!(answer.allowed(), "spelling {i}: {answer:?}");
        assert_eq!(
            answer.header("ratelimit-policy"),
            Some("\"per-phone\";q=3;w=600, \"per-ip\";q=20;w=3600")
        );
        assert_eq!(
            answer.header("x-ratelimit-remaining"),
            Some(&*(2 - i).to_string())
        );
    }
    // A fourth spelling, from a fourth address: the number has had its three codes.
    let fourth = check(
        &mut client,
        &otp(r#"{"phone":"6281234567890"}"#, "203.0.113.4"),
    )
    .await;
    assert_eq!(fourth.code, PERMISSION_DENIED, "{fourth:?}");
    assert_eq!(fourth.http_status, 429);
    assert_eq!(fourth.json()["limit"], "per-phone");
    assert_eq!(
        fourth.header("content-type"),
        Some("application/problem+json")
    );
    assert!(fourth.header("retry-after").is_some());
    // Named as HTTP writes them, for a reader that compares Envoy's header names exactly.
    let names: Vec<&str> = fourth.headers.iter().map(|(k, _)| k.as_str()).collect();
    for name in [
        "Retry-After",
        "RateLimit-Policy",
        "RateLimit",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "Content-Type",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    // Another number is its own key.
    let other = check(
        &mut client,
        &otp(r#"{"phone":"0813-1111-2222"}"#, "203.0.113.5"),
    )
    .await;
    assert!(other.allowed(), "{other:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_envoy_cut_short_is_a_missing_key_and_charges_nothing() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    // Envoy sent the first bytes only (allow_partial_message), and says so.
    let cut = otp(r#"{"phone":"0812-3456-7890"}"#, "203.0.113.9")
        .header("x-envoy-auth-partial-body", "true");
    let answer = check(&mut client, &cut).await;
    assert_eq!(answer.code, PERMISSION_DENIED, "{answer:?}");
    assert_eq!(answer.http_status, 400);
    assert_eq!(answer.json()["error"], "missing_key");
    // Envoy sent no body at all (no with_request_body) for a request that has one.
    let mut bodiless = otp(r#"{"phone":"0812-3456-7890"}"#, "203.0.113.9");
    bodiless.body.clear();
    let answer = check(&mut client, &bodiless).await;
    assert_eq!(answer.http_status, 400, "{answer:?}");
    assert_eq!(answer.json()["error"], "missing_key");
    // Fewer bytes than its Content-Length told, unmarked (another caller of Check), though
    // what came reads as a whole document.
    let json = r#"{"phone":"0812-3456-7890"}"#;
    let mut unmarked = otp(&format!("{json}          "), "203.0.113.9");
    unmarked.body.truncate(json.len());
    let answer = check(&mut client, &unmarked).await;
    assert_eq!(answer.http_status, 400, "{answer:?}");
    assert_eq!(answer.json()["error"], "missing_key");
    // ...or than the request's size told, with no Content-Length (HTTP/2, chunked)
    let mut sized = otp(json, "203.0.113.9");
    sized.headers.retain(|(name, _)| name != "content-length");
    sized.size = Some(1000);
    let answer = check(&mut client, &sized).await;
    assert_eq!(answer.http_status, 400, "{answer:?}");
    assert_eq!(answer.json()["error"], "missing_key");
    assert_eq!(used(&gw, "per-ip", "203.0.113.9").await, 0);
    // The same body, whole, is read and counted.
    let whole = otp(r#"{"phone":"0812-3456-7890"}"#, "203.0.113.9")
        .header("x-envoy-auth-partial-body", "false");
    assert!(check(&mut client, &whole).await.allowed());
    assert_eq!(used(&gw, "per-ip", "203.0.113.9").await, 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_the_traffic_paths_429_byte_for_byte() {
    let redis = RedisServer::start();
    let upstream = support::upstream::start().await;
    let gw = gateway(
        &redis,
        &upstream.url(),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    )
    .await;
    let mut client = ext_authz::client(&gw).await;
    let http = HttpClient::default();
    let body = r#"{"phone":"0812-3456-7890"}"#;
    for _ in 0..3 {
        let r = http
            .send(
                http::Method::POST,
                &gw.url("/api/otp/send"),
                &[("content-type", "application/json")],
                body,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The same request, refused on the traffic path and through ext_authz (the client is the
    // proxy listener's peer, 127.0.0.1, and Envoy's source there; one X-Request-Id).
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "req-42"),
    ];
    let started = std::time::Instant::now();
    let traffic = http
        .send(http::Method::POST, &gw.url("/api/otp/send"), &headers, body)
        .await;
    let described = otp(body, "127.0.0.1").header("x-request-id", "req-42");
    let denied = check(&mut client, &described).await;
    let apart = started.elapsed();
    assert_eq!(traffic.status, 429, "{}", traffic.body);
    assert_eq!(denied.http_status, 429);
    // Every header the traffic path's 429 has, with the same value (Content-Length is Envoy's
    // to write), and no other.
    let mut theirs: Vec<(String, String)> = traffic
        .headers
        .iter()
        .filter(|(k, _)| !["content-length", "date"].contains(&k.as_str()))
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let mut ours: Vec<(String, String)> = (denied.headers.iter())
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    theirs.sort();
    ours.sort();
    // The whole seconds of a wait are each answer's own (the later one may be a second shorter
    // when the two straddle one): each must match its own body's wait in milliseconds.
    for (headers, body) in [(&mut theirs, &traffic.body), (&mut ours, &denied.body)] {
        let ms: serde_json::Value = serde_json::from_str(body).unwrap();
        let secs = ms["retry_after_ms"].as_u64().unwrap().div_ceil(1000).max(1);
        let retry_after = headers.iter().find(|(k, _)| k == "retry-after");
        assert_eq!(
            retry_after.map(|(_, v)| v.as_str()),
            Some(secs.to_string().as_str())
        );
        for (name, value) in headers.iter_mut() {
            match name.as_str() {
                "retry-after" | "x-ratelimit-reset" => value.clear(),
                "ratelimit" => value.truncate(value.find(";t=").unwrap_or(value.len())),
                _ => {}
            }
        }
    }
    assert_eq!(ours, theirs);
    // The body, byte for byte, but for the wait in milliseconds, which the later of the two
    // answers tells as at most the time between them shorter.
    let wait = |body: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["retry_after_ms"].as_u64().unwrap()
    };
    let (traffic_wait, denied_wait) = (wait(&traffic.body), wait(&denied.body));
    assert!(
        denied_wait <= traffic_wait,
        "{denied_wait} > {traffic_wait}"
    );
    assert!(traffic_wait - denied_wait <= apart.as_millis() as u64 + 1);
    let same_wait = traffic.body.replace(
        &format!("\"retry_after_ms\":{traffic_wait}"),
        &format!("\"retry_after_ms\":{denied_wait}"),
    );
    assert_eq!(denied.body, same_wait);
    assert!(denied.body.contains("\"request_id\":\"req-42\""));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_ip_is_the_source_address_and_a_forwarding_header_only_a_trusted_ones() {
    let redis = RedisServer::start();
    let gw = gateway(
        &redis,
        "http://127.0.0.1:9",
        "trusted_proxies = [\"10.0.0.0/8\"]",
    )
    .await;
    let mut client = ext_authz::client(&gw).await;
    let phone = |n: u32| format!(r#"{{"phone":"0812-3456-{n:04}"}}"#);
    // A client that is not a trusted proxy: its own X-Forwarded-For is not believed.
    for n in 0..2 {
        let d = otp(&phone(n), "203.0.113.7").header("x-forwarded-for", "198.51.100.1");
        assert!(check(&mut client, &d).await.allowed());
    }
    assert_eq!(used(&gw, "per-ip", "203.0.113.7").await, 2);
    assert_eq!(used(&gw, "per-ip", "198.51.100.1").await, 0);
    // A load balancer in front of Envoy, trusted: the client is the one it names.
    let d = otp(&phone(3), "10.1.2.3").header("x-forwarded-for", "198.51.100.1");
    assert!(check(&mut client, &d).await.allowed());
    assert_eq!(used(&gw, "per-ip", "198.51.100.1").await, 1);
    assert_eq!(used(&gw, "per-ip", "10.1.2.3").await, 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_charges_no_other_limit() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    let body = r#"{"phone":"0812-9999-0000"}"#;
    for _ in 0..3 {
        assert!(check(&mut client, &otp(body, "203.0.113.20"))
            .await
            .allowed());
    }
    for _ in 0..5 {
        let refused = check(&mut client, &otp(body, "203.0.113.20")).await;
        assert_eq!(refused.http_status, 429);
    }
    // The five refusals cost the address nothing: it has its 17 left for other numbers.
    assert_eq!(used(&gw, "per-ip", "203.0.113.20").await, 3);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_check_of_one_request_is_charged_once() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    let request = otp(r#"{"phone":"0812-5555-0000"}"#, "203.0.113.30").id("1844674407370955161");
    // Envoy asks three times about one request (a retried call), two of them at once.
    let first = check(&mut client, &request).await;
    let mut second_client = client.clone();
    let (second, third) = tokio::join!(
        check(&mut client, &request),
        check(&mut second_client, &request)
    );
    for again in [&second, &third] {
        assert_eq!(again.code, first.code);
        assert_eq!(again.headers, first.headers);
    }
    assert_eq!(used(&gw, "per-ip", "203.0.113.30").await, 1);
    // Another request (another stream id) is charged.
    let next = request.clone().id("1844674407370955162");
    assert!(check(&mut client, &next).await.allowed());
    assert_eq!(used(&gw, "per-ip", "203.0.113.30").await, 2);
    // The same stream id for another client's request is no repeat (a body may differ between
    // repeats: an older Envoy sent one Check per body buffer).
    let other = otp(r#"{"phone":"0812-5555-0001"}"#, "203.0.113.31").id("1844674407370955162");
    assert!(check(&mut client, &other).await.allowed());
    assert_eq!(used(&gw, "per-ip", "203.0.113.31").await, 1);
    gw.stop().await;
}

/// A caller of `Check` that fills `attributes.request.http.id` from the client's `X-Request-Id`
/// (Envoy uses its own stream id) must not let a client that sends one id for every attempt
/// over one connection be charged once: only a retried `Check` (the same message, the instant
/// the request was taken included) is answered from the first decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_repeating_one_request_id_is_charged_for_every_attempt() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    let attempt = |nanos| {
        otp(r#"{"phone":"0812-5555-0002"}"#, "203.0.113.40")
            .id("chosen-by-the-client")
            .arrived_at(1_790_000_000, nanos)
    };
    for nanos in 1..=3 {
        assert!(check(&mut client, &attempt(nanos)).await.allowed());
    }
    assert_eq!(used(&gw, "per-ip", "203.0.113.40").await, 3);
    // Envoy retrying the third attempt's Check: no new charge
    assert!(check(&mut client, &attempt(3)).await.allowed());
    assert_eq!(used(&gw, "per-ip", "203.0.113.40").await, 3);
    // The same id and instant for another number (a caller that fills both coarsely) is
    // another request, charged.
    let other = otp(r#"{"phone":"0812-5555-0003"}"#, "203.0.113.40")
        .id("chosen-by-the-client")
        .arrived_at(1_790_000_000, 3);
    assert!(check(&mut client, &other).await.allowed());
    assert_eq!(used(&gw, "per-ip", "203.0.113.40").await, 4);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_route_takes_is_allowed_uncounted() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let mut client = ext_authz::client(&gw).await;
    let mut d = otp("{}", "203.0.113.40");
    d.path = "/static/app.js?v=1".into();
    d.method = "GET".into();
    let answer = check(&mut client, &d).await;
    assert!(answer.allowed(), "{answer:?}");
    assert!(answer.headers.is_empty(), "{answer:?}");
    gw.stop().await;
}

/// A `Check` whose `body` (a protobuf `string`, where Envoy puts the body without
/// `pack_as_bytes`) or header value holds bytes that are not UTF-8 is decided, never ended with
/// an error status that an Envoy with `failure_mode_allow: true` would let through unlimited:
/// the per-IP limit counts each, and the body's phone number is read from its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_with_bytes_that_are_not_utf8_is_decided() {
    use prost::Message;
    let redis = RedisServer::start();
    let gw = gateway(&redis, "http://127.0.0.1:9", "").await;
    let addr = gw.running().ext_authz_addr.unwrap();
    let path = "/envoy.service.auth.v3.Authorization/Check";
    // {"phone":"0812-5555-0009","x":"~~"}: the body in `body`, with two bytes that are no UTF-8
    let described =
        otp(r#"{"phone":"0812-5555-0009","x":"~~"}"#, "203.0.113.50").header("x-note", "~!");
    let mut check = described.check();
    let http = (check
        .attributes
        .as_mut()
        .unwrap()
        .request
        .as_mut()
        .unwrap()
        .http
        .as_mut())
    .unwrap();
    http.body = String::from_utf8(std::mem::take(&mut http.raw_body)).unwrap();
    let mut encoded = check.encode_to_vec();
    let at = encoded.windows(2).position(|w| w == b"~~").unwrap();
    encoded[at..at + 2].copy_from_slice(b"\xff\xfe");
    let at = encoded.windows(2).position(|w| w == b"~!").unwrap();
    encoded[at..at + 2].copy_from_slice(b"\xc3\x28");
    let mut answers = Vec::new();
    for _ in 0..4 {
        let bytes = support::grpc::raw_unary(addr, path, &encoded)
            .await
            .expect("an answer, not an error status");
        let answer = Answer::of(Message::decode(&bytes[..]).unwrap());
        answers.push((answer.code, answer.http_status));
    }
    let denied = (ext_authz::PERMISSION_DENIED, 429);
    assert_eq!(
        answers,
        [
            (ext_authz::OK, 0),
            (ext_authz::OK, 0),
            (ext_authz::OK, 0),
            denied
        ],
        "3 codes per number"
    );
    // the number was read from the body's bytes: its key holds the three charges
    let (name, value) = support::admin::auth();
    let url = "/admin/usage?route=otp-send&limit=per-phone&value=0812-5555-0009";
    let reply = HttpClient::default()
        .get(&gw.admin(url), &[(name, &value)])
        .await;
    assert_eq!(reply.json()["limits"][0]["used"], 3, "{}", reply.body);
    gw.stop().await;
}
