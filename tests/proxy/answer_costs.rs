//! Limits on what the answer says it cost (README, "Limits on what the answer says it cost"),
//! through the gateway with a real Redis and an upstream that answers like OpenAI's chat
//! completions: an attempt is admitted against its reservation (`cost`, or the request's
//! `max_tokens`) and charged what its answer states, from a header, a whole JSON answer or the
//! last server-sent event carrying the member; an answer that states nothing keeps its
//! reservation; more than reserved is charged at once, and the next attempt waits until the
//! window slides back under; a client that leaves mid-stream still pays what the stream
//! states; the counters `slidegate_cost_settled_total` and `slidegate_cost_overage_total` say
//! it; the upstream is asked for answers the gateway can read (`Accept-Encoding: identity`).

use crate::support;

use http::Method;
use http_body_util::BodyExt;
use support::admin::auth;
use support::gateway::{config, redis_store, start, Gateway};
use support::http::{HttpClient, Reply};
use support::leaving::eventually;
use support::llm::{self, PROMPT_TOKENS};
use support::metrics::value;
use support::redis::RedisServer;
use support::unique_prefix;

const ROUTES: &str = r#"
[[routes]]
name = "chat"
path = "/v1/*"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "tokens"
  limit = 40
  window = "1h"
  algorithm = "sliding_window_counter"
  cost_from = "sse:usage.total_tokens"
  cost = "json:max_tokens"
  [[routes.limits]]
  name = "requests"
  limit = 100
  window = "1h"

[[routes]]
name = "metered"
path = "/header"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "units"
  limit = 50
  window = "1h"
  cost_from = "header:x-usage-tokens"
  cost = 3
"#;

async fn gateway(redis: &RedisServer, up: &llm::LlmUpstream) -> Gateway {
    let store = redis_store(&redis.url(), &unique_prefix("costs"));
    start(&config(&store, &up.url(), ROUTES)).await
}

async fn chat(gw: &Gateway, key: &str, body: &str) -> Reply {
    let headers = [("x-api-key", key), ("content-type", "application/json")];
    HttpClient::default()
        .send(
            Method::POST,
            &gw.url("/v1/chat/completions"),
            &headers,
            body,
        )
        .await
}

/// `slidegate_requests_total{route="chat",decision="bad_request"}` now.
async fn bad_requests(gw: &Gateway) -> Option<f64> {
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let labels = [("route", "chat"), ("decision", "bad_request")];
    value(&metrics, "slidegate_requests_total", &labels)
}

/// `used` of a limit for a key, as `/admin/usage` shows it.
async fn used(gw: &Gateway, route: &str, limit: &str, key: &str) -> u64 {
    let (name, token) = auth();
    let url = gw.admin(&format!(
        "/admin/usage?route={route}&key={key}&limit={limit}"
    ));
    let usage = HttpClient::default()
        .get(&url, &[(name, &token)])
        .await
        .json();
    usage["limits"][0]["used"].as_u64().expect("used shown")
}

async fn counter(gw: &Gateway, name: &str, limit: &str) -> f64 {
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    value(&metrics, name, &[("limit", limit)]).unwrap_or(0.0)
}

#[tokio::test]
async fn answers_are_charged_what_they_state_streamed_or_whole() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    // streamed with usage: 5 prompt + 4 reply tokens, read from the last event carrying it
    let streamed = r#"{"stream":true,"stream_options":{"include_usage":true},"reply_tokens":4}"#;
    let reply = chat(&gw, "ann", streamed).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.body.as_bytes(),
        up.sent()[0].as_slice(),
        "the client gets the upstream's bytes"
    );
    assert_eq!(used(&gw, "chat", "tokens", "ann").await, PROMPT_TOKENS + 4);
    assert_eq!(
        used(&gw, "chat", "requests", "ann").await,
        1,
        "one unit per attempt"
    );
    // whole: 5 + 7
    assert_eq!(chat(&gw, "ann", r#"{"reply_tokens":7}"#).await.status, 200);
    assert_eq!(used(&gw, "chat", "tokens", "ann").await, 9 + 12);
    // a stream without usage states nothing: its reservation (max_tokens) stands
    let silent = r#"{"stream":true,"max_tokens":6,"reply_tokens":2}"#;
    assert_eq!(chat(&gw, "ann", silent).await.status, 200);
    assert_eq!(used(&gw, "chat", "tokens", "ann").await, 21 + 6);
    assert_eq!(
        counter(&gw, "slidegate_cost_settled_total", "tokens").await,
        27.0
    );
    // the upstream was asked for an answer the gateway can read as it passes
    assert!(up
        .heads()
        .iter()
        .all(|h| h["accept-encoding"] == "identity"));
    // a header states the cost of another route: 3 reserved, 11 charged, 8 of them overage
    let headers = [("x-api-key", "ann")];
    let url = gw.url("/header?tokens=11");
    assert_eq!(HttpClient::default().get(&url, &headers).await.status, 200);
    assert_eq!(used(&gw, "metered", "units", "ann").await, 11);
    assert_eq!(
        counter(&gw, "slidegate_cost_overage_total", "units").await,
        8.0
    );
}

#[tokio::test]
async fn an_answer_over_the_reservation_is_charged_at_once_and_the_next_waits() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    // reserves 2, states 5 + 30 = 35 of 40
    let big = r#"{"max_tokens":2,"reply_tokens":30}"#;
    let reply = chat(&gw, "bob", big).await;
    assert_eq!(reply.status, 200);
    assert_eq!(used(&gw, "chat", "tokens", "bob").await, 35);
    assert_eq!(
        counter(&gw, "slidegate_cost_overage_total", "tokens").await,
        33.0
    );
    // the window goes over by one answer's overage: 35 + 2 reserved, then 5 + 30 more
    assert_eq!(chat(&gw, "bob", big).await.status, 200);
    assert_eq!(
        used(&gw, "chat", "tokens", "bob").await,
        70,
        "over the limit by one overage"
    );
    let refused = chat(&gw, "bob", r#"{"max_tokens":1}"#).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["limit"], "tokens");
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        wait > 60,
        "waits until the window slides back under, not a moment: {wait}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_still_pays_what_the_stream_states() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let headers = [
        ("x-api-key", "cat"),
        ("x-hold", "1"),
        ("content-type", "application/json"),
    ];
    let body = r#"{"stream":true,"stream_options":{"include_usage":true},"max_tokens":1,"reply_tokens":20}"#;
    let mut response = HttpClient::default()
        .open(
            Method::POST,
            &gw.url("/v1/chat/completions"),
            &headers,
            body,
        )
        .await;
    response.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(
        used(&gw, "chat", "tokens", "cat").await,
        1,
        "the reservation, while in flight"
    );
    drop(response);
    // the gateway reads the rest of the answer after the client left
    up.release(1);
    eventually(|| async { (used(&gw, "chat", "tokens", "cat").await == 25).then_some(()) }).await;
}

/// On a blocking route, a cost limit that counts only some statuses blocks as soon as its
/// answered costs fill it: a settled cost is an answered charge, not a reservation in flight
/// (which would answer a plain 429 until the upstream's timeout, and never block).
#[tokio::test]
async fn a_settled_cost_on_a_blocking_route_starts_a_block_on_redis() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url(), &unique_prefix("costs-block"));
    a_settled_cost_on_a_blocking_route_starts_a_block(&store).await;
}

#[tokio::test]
async fn a_settled_cost_on_a_blocking_route_starts_a_block_in_memory() {
    a_settled_cost_on_a_blocking_route_starts_a_block("backend = \"memory\"").await;
}

async fn a_settled_cost_on_a_blocking_route_starts_a_block(store: &str) {
    let up = llm::start().await;
    let route = r#"
[[routes]]
name = "metered"
path = "/header"
upstream = "up"
key = ["header:x-api-key"]
on_exceed = "block"
block_for = "1m"
  [[routes.limits]]
  name = "units"
  limit = 10
  window = "1h"
  cost_from = "header:x-usage-tokens"
  cost = 3
  count_status = [200]
"#;
    let gw = start(&config(store, &up.url(), route)).await;
    let headers = [("x-api-key", "ann")];
    let get = |tokens: u64| {
        let url = gw.url(&format!("/header?tokens={tokens}"));
        async move { HttpClient::default().get(&url, &headers).await }
    };
    // 3 reserved, 10 charged and answered: the limit is full
    assert_eq!(get(10).await.status, 200);
    assert_eq!(used(&gw, "metered", "units", "ann").await, 10);
    let refused = get(1).await;
    assert_eq!(refused.status, 429);
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(wait >= 59, "a block of a minute starts: Retry-After {wait}");
    let blocked = get(1).await;
    assert_eq!(blocked.status, 429);
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let blocked = value(
        &metrics,
        "slidegate_requests_total",
        &[("route", "metered"), ("decision", "blocked")],
    );
    assert_eq!(
        blocked,
        Some(1.0),
        "the attempt after the refusal is blocked"
    );
}

/// A gcra limit takes at most its `burst` at once, so a reservation read from the body is held
/// at the burst, not at the limit: a `max_tokens` between the two is admitted (held at the
/// burst) and then charged what its answer states, where a reservation above the burst would
/// be refused forever, each 429 telling a wait after which it is refused again.
#[tokio::test]
async fn a_reservation_is_held_at_a_gcra_limits_burst() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("costs-burst"));
    let route = ROUTES.replace(
        "  limit = 40\n  window = \"1h\"\n  algorithm = \"sliding_window_counter\"\n",
        "  limit = 100\n  window = \"1h\"\n  algorithm = \"gcra\"\n  burst = 10\n",
    );
    let gw = start(&config(&store, &up.url(), &route)).await;
    let reply = chat(&gw, "ann", r#"{"max_tokens":50,"reply_tokens":1}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // charged what it stated, not its reservation: gcra shows `used` as the limit less what
    // its burst has left
    assert_eq!(
        used(&gw, "chat", "tokens", "ann").await,
        100 - (10 - (PROMPT_TOKENS + 1))
    );
}

/// A `max_tokens` above the limit could never be allowed: 400 `cost_out_of_range`, counted as
/// a bad request, nothing charged, nothing sent upstream; the limit itself is still taken.
#[tokio::test]
async fn a_reservation_above_the_limit_is_refused() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let refused = chat(&gw, "cy", r#"{"max_tokens":41,"reply_tokens":1}"#).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.json()["error"],
        "cost_out_of_range",
        "{}",
        refused.body
    );
    assert_eq!(used(&gw, "chat", "tokens", "cy").await, 0);
    assert_eq!(bad_requests(&gw).await, Some(1.0));
    let whole = chat(&gw, "cy", r#"{"max_tokens":40,"reply_tokens":1}"#).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
}

/// Every other `max_tokens` no limit could take is refused the same way, however it is
/// written (digits beyond 2^53, a fraction or an exponent above the limit, zero, a negative),
/// and one stated twice is refused as unclear (parsers take either copy): 400
/// `ambiguous_cost`, never held at 1 while the upstream reads 200.
#[tokio::test]
async fn a_reservation_out_of_range_or_stated_twice_is_refused() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let refused = [
        ("1000000000000000000000", "cost_out_of_range"),
        ("9007199254740993", "cost_out_of_range"),
        ("41.0", "cost_out_of_range"),
        ("4.1e1", "cost_out_of_range"),
        ("0", "cost_out_of_range"),
        ("-5", "cost_out_of_range"),
        ("\"2e3\"", "cost_out_of_range"),
        ("\" 41 \"", "cost_out_of_range"),
        ("10,\"max_tokens\":200", "ambiguous_cost"),
        ("200,\"max_tokens\":10", "ambiguous_cost"),
        ("10,\"MAX_TOKENS\":10", "ambiguous_cost"),
    ];
    for (written, code) in refused {
        let body = format!(r#"{{"max_tokens":{written},"reply_tokens":1}}"#);
        let reply = chat(&gw, "ox", &body).await;
        assert_eq!(reply.status, 400, "{written}: {}", reply.body);
        assert_eq!(reply.json()["error"], code, "{written}: {}", reply.body);
    }
    assert_eq!(used(&gw, "chat", "tokens", "ox").await, 0);
    assert_eq!(bad_requests(&gw).await, Some(refused.len() as f64));
}

/// A `max_tokens` within the limit spelled so that parsers read it otherwise (`35.0`, `3.5e1`:
/// a server that coerces it reads that many) reserves the most the limit takes, not 1: a key
/// with tokens already charged is refused, as a plain `40` would be.
#[tokio::test]
async fn a_max_tokens_spelled_otherwise_reserves_the_limit() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let first = chat(&gw, "dot", r#"{"max_tokens":10,"reply_tokens":1}"#).await;
    assert_eq!(first.status, 200, "{}", first.body);
    for spelled in ["35.0", "3.5e1"] {
        let body = format!(r#"{{"max_tokens":{spelled},"reply_tokens":1}}"#);
        let refused = chat(&gw, "dot", &body).await;
        assert_eq!(refused.status, 429, "{spelled}: {}", refused.body);
    }
    let plain = chat(&gw, "dot", r#"{"max_tokens":3,"reply_tokens":1}"#).await;
    assert_eq!(plain.status, 200, "room for a plain 3: {}", plain.body);
}

/// A shadow route refuses nothing: a `max_tokens` above the limit goes upstream, held at the
/// limit, and is charged what its answer states.
#[tokio::test]
async fn a_reservation_above_the_limit_on_a_shadow_route_is_forwarded() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("costs-shadow"));
    let route = ROUTES.replacen(
        "key = [\"header:x-api-key\"]\n",
        "key = [\"header:x-api-key\"]\non_exceed = \"shadow\"\n",
        1,
    );
    assert_ne!(route, ROUTES);
    let gw = start(&config(&store, &up.url(), &route)).await;
    let reply = chat(&gw, "dee", r#"{"max_tokens":41,"reply_tokens":1}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(used(&gw, "chat", "tokens", "dee").await, PROMPT_TOKENS + 1);
}

/// The cost counters are series of the limits a cost is read for only: `tokens` has them
/// from config load, `requests` (charged 1 an attempt) has none, and a reload that takes
/// `cost_from` off `tokens` drops its series.
#[tokio::test]
async fn only_limits_with_cost_from_have_cost_series() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let cost_series = |metrics: &str, limit: &str| {
        [
            "slidegate_cost_settled_total",
            "slidegate_cost_overage_total",
        ]
        .map(|name| value(metrics, name, &[("route", "chat"), ("limit", limit)]))
    };
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    assert_eq!(cost_series(&metrics, "tokens"), [Some(0.0); 2]);
    assert_eq!(cost_series(&metrics, "requests"), [None; 2]);

    let costless = ROUTES
        .replace("  cost_from = \"sse:usage.total_tokens\"\n", "")
        .replace("  cost = \"json:max_tokens\"\n", "");
    assert_ne!(costless, ROUTES);
    let store = redis_store(&redis.url(), &unique_prefix("costs"));
    gw.rewrite(&config(&store, &up.url(), &costless));
    let (name, token) = auth();
    let reload = HttpClient::default()
        .send(
            Method::POST,
            &gw.admin("/admin/reload"),
            &[(name, &token)],
            "",
        )
        .await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    assert_eq!(
        cost_series(&metrics, "tokens"),
        [None; 2],
        "no cost_from: no series"
    );
}

/// Who is refused now counts what an attempt of the route reserves: a key with fewer units left
/// than the route's `cost` is refused, so `/admin/blocked` lists it, though one unit would fit.
#[tokio::test]
async fn a_key_left_less_than_the_reservation_is_listed_as_refused() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gw = gateway(&redis, &up).await;
    let headers = [("x-api-key", "ann")];
    let get = |tokens: u64| {
        let url = gw.url(&format!("/header?tokens={tokens}"));
        async move { HttpClient::default().get(&url, &headers).await }
    };
    // 48 of 50 charged: 2 left, one attempt reserves 3
    assert_eq!(get(48).await.status, 200);
    assert_eq!(used(&gw, "metered", "units", "ann").await, 48);
    assert_eq!(get(1).await.status, 429, "3 reserved do not fit in 2");
    let (name, token) = auth();
    let listing = HttpClient::default()
        .get(&gw.admin("/admin/blocked?route=metered"), &[(name, &token)])
        .await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    let blocked = listing.json()["blocked"].clone();
    assert_eq!(blocked.as_array().map(Vec::len), Some(1), "{blocked}");
    assert_eq!(blocked[0]["key"], "ann");
    assert_eq!(blocked[0]["limit"], "units");
    assert_eq!(blocked[0]["reason"], "window");
}

/// An answer that states more than was reserved makes a refusal the deny cache kept before it
/// too short: the key's next attempt goes to the store and is told the overage's wait, not the
/// cached wait of the key's other limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overage_drops_the_keys_cached_refusal() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("costs-overage"));
    let route = r#"
[[routes]]
name = "over"
path = "/header"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "units"
  limit = 10
  window = "20s"
  cost_from = "header:x-usage-tokens"
  [[routes.limits]]
  name = "reqs"
  limit = 3
  window = "5s"
"#;
    let gw = start(&config(&store, &up.url(), route)).await;
    let get = |tokens: u64, hold: bool| {
        let url = gw.url(&format!("/header?tokens={tokens}"));
        async move {
            let mut headers = vec![("x-api-key", "ann")];
            if hold {
                headers.push(("x-hold", "1"));
            }
            HttpClient::default().get(&url, &headers).await
        }
    };
    assert_eq!(get(1, false).await.status, 200);
    assert_eq!(get(1, false).await.status, 200);
    // the third attempt's answer is held; meanwhile `reqs` refuses the key, and that is cached
    let held = tokio::spawn(get(30, true));
    eventually(|| async { (used(&gw, "over", "reqs", "ann").await == 3).then_some(()) }).await;
    let cached = get(1, false).await;
    assert_eq!(cached.status, 429);
    assert_eq!(cached.json()["limit"], "reqs", "{}", cached.body);
    // the held answer states 30: its charge becomes 10, the window holds 12 of 10
    up.release(1);
    assert_eq!(held.await.unwrap().status, 200);
    eventually(|| async { (used(&gw, "over", "units", "ann").await == 12).then_some(()) }).await;
    let after = get(1, false).await;
    assert_eq!(after.status, 429);
    let body = after.json();
    assert_eq!(body["limit"], "units", "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() > 10_000, "{body}");
}
