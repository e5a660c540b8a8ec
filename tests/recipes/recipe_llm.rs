//! The recipe `examples/llm.toml` run as written (README, "Recipe: an OpenAI-compatible API"),
//! with a real Redis and an upstream that streams like OpenAI's chat completions with
//! `stream_options.include_usage`: a streamed answer reaches the client byte for byte and its
//! key is charged the tokens of its last usage event (any spelling of `Bearer`, one key);
//! `/admin/usage` shows them afterwards, and nothing in flight; a key with 4 answers open gets
//! 429 with `Retry-After: 1` while another key goes on; a whole (unstreamed) answer is charged
//! its `usage` too.

use crate::support;

use http::Method;
use http_body_util::BodyExt;
use support::http::HttpClient;
use support::llm::{self, PROMPT_TOKENS};
use support::recipes::Recipe;
use support::redis::RedisServer;

const STREAM: &str = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"reply_tokens":12,"messages":[{"role":"user","content":"hi"}]}"#;

async fn chat(
    recipe: &Recipe,
    bearer: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> support::http::Reply {
    let mut headers = vec![
        ("authorization", bearer),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    HttpClient::default()
        .send(
            Method::POST,
            &recipe.url("/v1/chat/completions"),
            &headers,
            body,
        )
        .await
}

#[tokio::test]
async fn the_llm_recipe_charges_tokens_and_holds_four_in_flight_per_key() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let recipe =
        Recipe::start_written("llm.toml", &redis, &up.url(), "http://127.0.0.1:9100").await;
    let reply = chat(&recipe, "Bearer sk-ann", &[], STREAM).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        reply.body.as_bytes(),
        up.sent()[0].as_slice(),
        "byte for byte"
    );
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some("\"tokens\";q=100000;w=3600, \"inflight\";q=4")
    );
    // the key by the value the client sends, as an operator types it
    let usage = recipe
        .admin_get("/admin/usage?route=chat&value=Bearer%20sk-ann")
        .await;
    let limits = usage["limits"].as_array().unwrap();
    let tokens = limits.iter().find(|l| l["name"] == "tokens").unwrap();
    assert_eq!(tokens["used"], PROMPT_TOKENS + 12);
    assert_eq!(tokens["remaining"], 100_000 - PROMPT_TOKENS - 12);
    let inflight = limits.iter().find(|l| l["name"] == "inflight").unwrap();
    assert_eq!(inflight["in_flight"], 0);
    // another spelling of the scheme is the same key; a whole answer states its usage too
    let whole = r#"{"model":"m","max_tokens":50,"reply_tokens":3}"#;
    assert_eq!(
        chat(&recipe, "bearer   sk-ann", &[], whole).await.status,
        200
    );
    let usage = recipe
        .admin_get("/admin/usage?route=chat&value=Bearer%20sk-ann&limit=tokens")
        .await;
    assert_eq!(usage["limits"][0]["used"], 2 * PROMPT_TOKENS + 15);
    // four answers held open: the fifth request of the key is refused, another key's is not
    let mut open = Vec::new();
    for _ in 0..4 {
        let headers = [
            ("authorization", "Bearer sk-ann"),
            ("content-type", "application/json"),
            ("x-hold", "1"),
        ];
        let mut r = HttpClient::default()
            .open(
                Method::POST,
                &recipe.url("/v1/chat/completions"),
                &headers,
                STREAM,
            )
            .await;
        assert_eq!(r.status(), 200);
        r.body_mut().frame().await.unwrap().unwrap();
        open.push(r);
    }
    let refused = chat(&recipe, "Bearer sk-ann", &[], STREAM).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()["limit"], "inflight");
    assert_eq!(
        chat(&recipe, "Bearer sk-bob", &[], STREAM).await.status,
        200
    );
    let usage = recipe
        .admin_get("/admin/usage?route=chat&value=Bearer%20sk-ann&limit=inflight")
        .await;
    assert_eq!(usage["limits"][0]["in_flight"], 4);
    up.release(4);
    for r in open {
        r.into_body().collect().await.unwrap();
    }
    let usage = recipe
        .admin_get("/admin/usage?route=chat&value=Bearer%20sk-ann&limit=tokens")
        .await;
    assert_eq!(usage["limits"][0]["used"], 6 * PROMPT_TOKENS + 15 + 4 * 12);
    recipe.stop().await;
}
