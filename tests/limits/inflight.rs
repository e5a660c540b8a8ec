//! Attempts in flight through the gateway (README, "Limits on what is in flight"), over real
//! sockets with a real Redis shared by two gateways and an upstream that holds its answers
//! open: a key's slots are taken across instances, a full key gets 429 with `Retry-After: 1`
//! and `RateLimit-Policy: "inflight";q=N`, a slot is held until the answer's body has been sent
//! (not its head), a client that leaves frees its slot once the upstream answered, an attempt
//! the window refuses holds nothing, and `/admin/usage` shows `in_flight` (`DELETE` frees).

use crate::support;

use http::Method;
use http_body_util::BodyExt;
use support::admin::auth;
use support::gateway::{config, redis_store, start, Gateway};
use support::http::HttpClient;
use support::leaving::eventually;
use support::llm::{self, LlmUpstream};
use support::redis::RedisServer;
use support::unique_prefix;

const ROUTE: &str = r#"
[[routes]]
name = "chat"
path = "/v1/*"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "inflight"
  limit = 2
  algorithm = "concurrency"
  [[routes.limits]]
  name = "per-minute"
  limit = 6
  window = "1m"
"#;

const STREAM: &str = r#"{"stream":true,"reply_tokens":2}"#;

async fn gateways(redis: &RedisServer, up: &LlmUpstream, n: usize) -> Vec<Gateway> {
    let store = redis_store(&redis.url(), &unique_prefix("inflight"));
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(start(&config(&store, &up.url(), ROUTE)).await);
    }
    out
}

/// Opens a streamed answer that the upstream holds after its first event.
async fn held(gw: &Gateway, key: &str) -> hyper::Response<hyper::body::Incoming> {
    let headers = [
        ("x-api-key", key),
        ("x-hold", "1"),
        ("content-type", "application/json"),
    ];
    HttpClient::default()
        .open(
            Method::POST,
            &gw.url("/v1/chat/completions"),
            &headers,
            STREAM,
        )
        .await
}

async fn post(gw: &Gateway, key: &str) -> support::http::Reply {
    let headers = [("x-api-key", key), ("content-type", "application/json")];
    HttpClient::default()
        .send(
            Method::POST,
            &gw.url("/v1/chat/completions"),
            &headers,
            STREAM,
        )
        .await
}

/// The key's `per-minute` count as `/admin/usage` shows it.
async fn used(gw: &Gateway, key: &str) -> u64 {
    let (name, token) = auth();
    let url = gw.admin(&format!(
        "/admin/usage?route=chat&key={key}&limit=per-minute"
    ));
    let usage = HttpClient::default()
        .get(&url, &[(name, &token)])
        .await
        .json();
    usage["limits"][0]["used"].as_u64().expect("used shown")
}

/// `DELETE /admin/usage?route=chat&key=QUERY`: its answer.
async fn delete(gw: &Gateway, query: &str) -> serde_json::Value {
    let (name, token) = auth();
    let url = gw.admin(&format!("/admin/usage?route=chat&key={query}"));
    (HttpClient::default())
        .send(Method::DELETE, &url, &[(name, &token)], "")
        .await
        .json()
}

/// The key's `in_flight` as `/admin/usage` shows it.
async fn in_flight(gw: &Gateway, key: &str) -> u64 {
    let (name, token) = auth();
    let url = gw.admin(&format!("/admin/usage?route=chat&key={key}&limit=inflight"));
    let usage = HttpClient::default()
        .get(&url, &[(name, &token)])
        .await
        .json();
    usage["limits"][0]["in_flight"]
        .as_u64()
        .expect("in_flight shown")
}

#[tokio::test]
async fn a_full_key_is_refused_across_gateways_until_a_body_ends() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gws = gateways(&redis, &up, 2).await;
    let mut first = held(&gws[0], "ann").await;
    let mut second = held(&gws[1], "ann").await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    assert_eq!(
        first.headers()["ratelimit-policy"],
        "\"inflight\";q=2, \"per-minute\";q=6;w=60"
    );
    // the head has arrived; the bodies have not ended: both slots are taken, on both gateways
    first
        .body_mut()
        .frame()
        .await
        .expect("a first event")
        .unwrap();
    assert_eq!(in_flight(&gws[1], "ann").await, 2);
    for gw in &gws {
        let refused = post(gw, "ann").await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(refused.header("ratelimit"), Some("\"inflight\";r=0;t=1"));
        let body = refused.json();
        assert_eq!(body["limit"], "inflight");
        assert_eq!(body["violated-policies"], serde_json::json!(["inflight"]));
    }
    // another key has slots of its own
    assert_eq!(post(&gws[0], "bob").await.status, 200);
    // one answer ends: its slot is free, on every gateway
    up.release(1);
    let mut rest = Vec::new();
    while let Some(frame) = first.body_mut().frame().await {
        rest.extend_from_slice(frame.unwrap().data_ref().map_or(&[][..], |d| d));
    }
    assert!(rest.ends_with(b"data: [DONE]\n\n"));
    // the gateway that sent the answer queued the release before the answer's end: its own
    // read rides behind it on its lane; another gateway's read is ordered after that one
    assert_eq!(in_flight(&gws[0], "ann").await, 1);
    assert_eq!(in_flight(&gws[1], "ann").await, 1);
    // the gateway that freed the slot forgets its refusal at once (the other one's deny cache
    // holds the key for the 1 s its 429 said)
    let allowed = post(&gws[0], "ann").await;
    assert_eq!(allowed.status, 200);
    assert_eq!(allowed.header("ratelimit"), Some("\"inflight\";r=0;t=1"));
    up.release(1);
    second.body_mut().collect().await.unwrap();
    assert_eq!(in_flight(&gws[1], "ann").await, 0);
    assert_eq!(in_flight(&gws[0], "ann").await, 0);
}

#[tokio::test]
async fn a_client_that_leaves_frees_its_slot_once_the_upstream_answered() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gws = gateways(&redis, &up, 1).await;
    let gw = &gws[0];
    // leaves mid-body: the upstream has answered, the slot goes at once
    let mut response = held(gw, "ann").await;
    response.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(in_flight(gw, "ann").await, 1);
    drop(response);
    eventually(|| async { (in_flight(gw, "ann").await == 0).then_some(()) }).await;
    // leaves before the head: the slot stays until the upstream answers
    let headers = [
        ("x-api-key", "ann"),
        ("x-hold", "1"),
        ("content-type", "application/json"),
    ];
    let url = gw.url("/v1/chat/completions");
    let whole = r#"{"reply_tokens":2}"#;
    let leaving = tokio::spawn(async move {
        HttpClient::default()
            .open(Method::POST, &url, &headers, whole)
            .await
    });
    eventually(|| async { (up.heads().len() == 2).then_some(()) }).await;
    leaving.abort();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        in_flight(gw, "ann").await,
        1,
        "the upstream has not answered yet"
    );
    up.release(1);
    eventually(|| async { (in_flight(gw, "ann").await == 0).then_some(()) }).await;
}

#[tokio::test]
async fn a_refused_attempt_holds_nothing_and_delete_frees_the_slots() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gws = gateways(&redis, &up, 1).await;
    let gw = &gws[0];
    // six answers use up the window; the seventh is refused by it and takes no slot
    for _ in 0..6 {
        assert_eq!(post(gw, "cat").await.status, 200);
    }
    let refused = post(gw, "cat").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["limit"], "per-minute");
    assert_eq!(in_flight(gw, "cat").await, 0);
    // two held, then an operator frees them
    let _a = held(gw, "dan").await;
    let _b = held(gw, "dan").await;
    assert_eq!(post(gw, "dan").await.status, 429);
    let (name, token) = auth();
    let url = gw.admin("/admin/usage?route=chat&key=dan");
    let reset = HttpClient::default()
        .send(Method::DELETE, &url, &[(name, &token)], "")
        .await;
    assert_eq!(reset.json()["reset"], true, "{}", reset.body);
    assert_eq!(in_flight(gw, "dan").await, 0);
    assert_eq!(post(gw, "dan").await.status, 200);
    up.release(2);
}

/// `DELETE` with `limit=inflight` frees the key's slots and nothing else: its window count
/// stays (an operator freeing stuck slots forgives no quota), and the answer names the one
/// limit it reset. Without `limit`, every limit of the key goes.
#[tokio::test]
async fn delete_with_a_limit_resets_that_limit_alone() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let gws = gateways(&redis, &up, 1).await;
    let gw = &gws[0];
    for _ in 0..3 {
        assert_eq!(post(gw, "eli").await.status, 200);
    }
    let _a = held(gw, "eli").await;
    let _b = held(gw, "eli").await;
    assert_eq!(in_flight(gw, "eli").await, 2);
    assert_eq!(used(gw, "eli").await, 5);
    let freed = delete(gw, "eli&limit=inflight").await;
    assert_eq!(freed["reset"], true, "{freed}");
    assert_eq!(freed["limits"], serde_json::json!(["inflight"]), "{freed}");
    assert_eq!(in_flight(gw, "eli").await, 0);
    assert_eq!(used(gw, "eli").await, 5, "the window's count stays");
    let all = delete(gw, "eli").await;
    assert_eq!(all["reset"], true, "{all}");
    assert_eq!(used(gw, "eli").await, 0);
    up.release(2);
}

/// With the store down and `on_error = "local"`, the in-process fallback takes the slot and
/// frees it there when the answer ends: a key with one slot admits one attempt after another
/// (the slot is not left to its lease, which would refuse the second for seconds).
#[tokio::test]
async fn a_slot_the_local_fallback_took_is_freed_there() {
    let up = llm::start().await;
    // nothing listens here: every store call fails
    let dead = format!("redis://127.0.0.1:{}", support::free_port());
    let store = redis_store(&dead, &unique_prefix("inflight-local"));
    let route = ROUTE
        .replace(
            "upstream = \"up\"",
            "upstream = \"up\"\non_error = \"local\"",
        )
        .replace("limit = 2\n", "limit = 1\n");
    let gw = start(&config(&store, &up.url(), &route)).await;
    for attempt in 0..3 {
        let reply = post(&gw, "ann").await;
        assert_eq!(reply.status, 200, "attempt {attempt}: {}", reply.body);
        assert_eq!(
            reply.header("ratelimit"),
            Some("\"inflight\";r=0;t=1"),
            "attempt {attempt} held the only slot while its answer was sent"
        );
    }
    // and while one is held, the next is refused: the fallback does count the slot
    let mut open = held(&gw, "ann").await;
    open.body_mut()
        .frame()
        .await
        .expect("a first event")
        .unwrap();
    assert_eq!(post(&gw, "ann").await.status, 429);
    up.release(1);
    open.body_mut().collect().await.unwrap();
    eventually(|| async { (post(&gw, "ann").await.status == 200).then_some(()) }).await;
}

/// A route that reads each answer's cost keeps reading an answer after its client left (the
/// cost it states is still charged), so the answer is still being produced upstream: its slot
/// stays held until that read ends. A client that opens streams and drops them at once gets no
/// more of them running upstream than its slots.
#[tokio::test]
async fn a_client_that_leaves_a_costed_answer_holds_its_slot_until_the_answer_ends() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("inflight-cost"));
    let route = ROUTE.replace("limit = 2\n", "limit = 1\n").replace(
        "  name = \"per-minute\"\n  limit = 6\n",
        "  name = \"per-minute\"\n  limit = 1000\n  cost_from = \"sse:usage.total_tokens\"\n",
    );
    let gw = start(&config(&store, &up.url(), &route)).await;
    let stream = r#"{"stream":true,"stream_options":{"include_usage":true},"reply_tokens":2}"#;
    let headers = [
        ("x-api-key", "eve"),
        ("x-hold", "1"),
        ("content-type", "application/json"),
    ];
    let url = gw.url("/v1/chat/completions");
    let mut response = HttpClient::default()
        .open(Method::POST, &url, &headers, stream)
        .await;
    assert_eq!(response.status().as_u16(), 200);
    response.body_mut().frame().await.unwrap().unwrap();
    drop(response);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        in_flight(&gw, "eve").await,
        1,
        "the gateway still reads the answer for its cost: the upstream is still answering"
    );
    let refused = post(&gw, "eve").await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["limit"], "inflight");
    up.release(1);
    eventually(|| async { (in_flight(&gw, "eve").await == 0).then_some(()) }).await;
    // the answer stated its cost, and it was charged though its client had left
    let (name, token) = auth();
    let usage = HttpClient::default()
        .get(
            &gw.admin("/admin/usage?route=chat&key=eve&limit=per-minute"),
            &[(name, &token)],
        )
        .await
        .json();
    assert_eq!(usage["limits"][0]["used"], llm::PROMPT_TOKENS + 2);
}

/// Two concurrency limits of one route (per key and per IP) go by their own names in the
/// headers and the 429's body, so a client can tell which one `RateLimit` describes; a route
/// with one goes by `inflight` (the tests above).
#[tokio::test]
async fn two_concurrency_limits_of_a_route_go_by_their_own_names() {
    let up = llm::start().await;
    let route = ROUTE.replace(
        "  [[routes.limits]]\n  name = \"per-minute\"\n",
        "  [[routes.limits]]\n  name = \"per-ip\"\n  key = [\"ip\"]\n  limit = 3\n  algorithm = \"concurrency\"\n  [[routes.limits]]\n  name = \"per-minute\"\n",
    );
    let route = route.replace(
        "name = \"inflight\"\n  limit = 2",
        "name = \"per-key\"\n  limit = 1",
    );
    let gw = start(&config("backend = \"memory\"", &up.url(), &route)).await;
    let mut open = held(&gw, "ann").await;
    assert_eq!(
        open.headers()["ratelimit-policy"],
        "\"per-key\";q=1, \"per-ip\";q=3, \"per-minute\";q=6;w=60"
    );
    open.body_mut().frame().await.unwrap().unwrap();
    let refused = post(&gw, "ann").await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("ratelimit"), Some("\"per-key\";r=0;t=1"));
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["per-key"])
    );
    up.release(1);
}

/// On a route that blocks, a full key's refusal starts no block: its 429s are `rejected`
/// (from the store and from the deny cache alike), `slidegate_blocks_started_total` stays at
/// 0, no block level is kept, and the key is let in once its slot is free.
#[tokio::test]
async fn a_full_key_starts_no_block_on_a_blocking_route() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("inflight-block"));
    let blocking = ROUTE.replace("limit = 2\n", "limit = 1\n").replace(
        "key = [\"header:x-api-key\"]\n",
        "key = [\"header:x-api-key\"]\non_exceed = \"block\"\nblock_for = \"1m\"\n",
    );
    let gw = start(&config(&store, &up.url(), &blocking)).await;
    let mut slot = held(&gw, "eve").await;
    assert_eq!(slot.status(), 200);
    slot.body_mut().frame().await.unwrap().unwrap();
    for _ in 0..3 {
        let refused = post(&gw, "eve").await;
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert_eq!(refused.json()["limit"], "inflight", "{}", refused.body);
        let level = refused.json()["block_level"].as_u64().unwrap_or(0);
        assert_eq!(level, 0, "{}", refused.body);
    }
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let started = support::observe::metric(
        &metrics,
        "slidegate_blocks_started_total",
        &[("route", "chat")],
    );
    assert_eq!(started, 0.0, "no block started");
    let [_, rejected, _, blocked, ..] = support::observe::decisions(&metrics, "chat");
    assert_eq!((rejected, blocked), (3, 0), "every 429 a rejection");
    up.release(1);
    slot.into_body().collect().await.unwrap();
    let let_in = eventually(|| async {
        let r = post(&gw, "eve").await;
        (r.status == 200).then_some(r)
    })
    .await;
    assert_eq!(let_in.status, 200);
}

/// A full key's refusal does not depend on the cost: on a route that reserves 5 units of a
/// `cost_from` limit, the deny cache still answers its retries (it kept only refusals of one
/// unit, and every retry went to the store).
#[tokio::test]
async fn a_full_keys_retries_are_answered_by_the_deny_cache_whatever_the_cost() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("inflight-cached"));
    let route = ROUTE.replace("limit = 2\n", "limit = 1\n").replace(
        "  name = \"per-minute\"\n  limit = 6\n",
        "  name = \"per-minute\"\n  limit = 1000\n  cost = 5\n  cost_from = \"sse:usage.total_tokens\"\n",
    );
    let gw = start(&config(&store, &up.url(), &route)).await;
    let mut slot = held(&gw, "fay").await;
    assert_eq!(slot.status(), 200);
    slot.body_mut().frame().await.unwrap().unwrap();
    for _ in 0..3 {
        let refused = post(&gw, "fay").await;
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert_eq!(refused.json()["limit"], "inflight", "{}", refused.body);
    }
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let hits = support::observe::metric(
        &metrics,
        "slidegate_deny_cache_hits_total",
        &[("route", "chat")],
    );
    assert_eq!(hits, 2.0, "the retries after the first refusal");
    up.release(1);
    slot.into_body().collect().await.unwrap();
}
