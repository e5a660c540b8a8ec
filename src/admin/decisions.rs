//! `POST /v1/decisions`: decide up to 10,000 keys of one route in one call, each exactly as the
//! proxy path would (deny cache, script, `on_error`), with one pipelined round trip per Redis
//! node. Answers in request order. Batch decisions are not proxied requests and are not counted
//! in `slidegate_requests_total`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::problem;
use crate::config::{ExceedMode, OnError};
use crate::error::json_error;
use crate::key::decision_base;
use crate::limit::response::ceil_millis;
use crate::limit::{Decision, DecisionInput};
use crate::state::GatewayState;

/// Most keys one call may decide.
pub const MAX_KEYS: usize = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionsRequest {
    route: String,
    keys: Vec<String>,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

pub(super) async fn decide(State(state): State<Arc<GatewayState>>, body: Bytes) -> Response {
    let request: DecisionsRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("invalid body: {e}"),
            )
        }
    };
    if request.keys.len() > MAX_KEYS {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large",
            &format!(
                "{} keys in one call; the most is {MAX_KEYS}",
                request.keys.len()
            ),
        );
    }
    let runtime = state.runtime.load_full();
    let Some(route) = runtime.route(&request.route).cloned() else {
        return json_error(
            StatusCode::NOT_FOUND,
            "unknown_route",
            &format!("no route named `{}`", request.route),
        );
    };
    let config = &route.config;
    let bases: Vec<String> = request
        .keys
        .iter()
        .map(|k| decision_base(&state.store_config.key_prefix, &config.name, k))
        .collect();
    let enforcing = matches!(
        config.on_exceed,
        ExceedMode::Reject | ExceedMode::Block { .. }
    );

    // Keys the deny cache already answers cost the store nothing. A cached denial was decided
    // for one unit, so it answers calls of cost >= 1 (never a cost-0 read), and only cost-1
    // denials are cached, exactly as on the proxy path.
    let uses_cache = enforcing && request.cost >= 1;
    let caches = enforcing && request.cost == 1;
    let now = Instant::now();
    let mut results: Vec<Option<Value>> = vec![None; bases.len()];
    let mut ask: Vec<usize> = Vec::with_capacity(bases.len());
    for (i, base) in bases.iter().enumerate() {
        match uses_cache
            .then(|| state.deny_cache.get(base, now))
            .flatten()
        {
            Some(denial) => {
                results[i] = Some(result(&request.keys[i], &denial.current(now), false))
            }
            None => ask.push(i),
        }
    }
    let asked: Vec<String> = ask.iter().map(|&i| bases[i].clone()).collect();
    let started = Instant::now();
    let decided = state
        .store
        .decide_batch(config, &asked, request.cost, None)
        .await;
    for (&i, outcome) in ask.iter().zip(decided) {
        let key = &request.keys[i];
        let value = match outcome {
            Ok(d) => {
                if caches && !d.allowed() {
                    state
                        .deny_cache
                        .remember(&bases[i], started, &d, &config.on_exceed);
                }
                result(key, &d, config.on_exceed == ExceedMode::Shadow)
            }
            Err(e) => {
                state.metrics.store_error(e.kind());
                match config.on_error {
                    OnError::Allow => {
                        json!({"key": key, "allowed": true, "remaining": 0, "retry_after_ms": 0, "error": "store_unavailable"})
                    }
                    OnError::Deny => {
                        json!({"key": key, "allowed": false, "remaining": 0, "retry_after_ms": 1000, "error": "store_unavailable"})
                    }
                    OnError::Local => {
                        let input = DecisionInput {
                            route: config,
                            base: &bases[i],
                            cost: request.cost,
                            now_us: None,
                        };
                        result(
                            key,
                            &state.fallback.decide(input),
                            config.on_exceed == ExceedMode::Shadow,
                        )
                    }
                }
            }
        };
        results[i] = Some(value);
    }
    let results: Vec<Value> = results
        .into_iter()
        .map(|r| r.unwrap_or(Value::Null))
        .collect();
    Json(json!({"results": results})).into_response()
}

/// One key's answer; a shadow route allows what it would have rejected.
fn result(key: &str, d: &Decision, shadow: bool) -> Value {
    let remaining = d.tightest_limit().map_or(0, |i| d.limits[i].remaining());
    let allowed = d.allowed() || shadow;
    let retry_after_ms = if d.allowed() {
        0
    } else {
        ceil_millis(d.retry_after).max(1)
    };
    json!({"key": key, "allowed": allowed, "remaining": remaining, "retry_after_ms": retry_after_ms})
}
