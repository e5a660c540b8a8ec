//! `POST /v1/decisions`: decide up to 10,000 keys of one route in one call, each exactly as the
//! proxy path would, through the same [`crate::limit::Limiter`] (deny cache, store, `on_error`,
//! modes, metrics): the store gets them as a few large script calls per node. Answers in request
//! order. A `delay` route answers at once (the caller schedules its own retry at
//! `retry_after_ms`); each key counts once in `slidegate_requests_total`, as a request does.
//! `"dry_run": true` decides every key as the call would but charges nothing and counts
//! nothing (a campaign's preview). `cost` is a whole number from 1 to the route's smallest
//! limit (a larger one could never be allowed); a route that counts outcomes is refused (there
//! is no response to count).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use http::header::CONTENT_LENGTH;
use http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::AdminError;
use crate::limit::headers::ceil_millis;
use crate::limit::{RequestKeys, Verdict};
use crate::metrics::DecisionLabel;
use crate::request_id::RequestId;
use crate::state::GatewayState;
use crate::tier::TierName;

/// Most keys one call may decide.
pub const MAX_KEYS: usize = 10_000;
/// Largest body read (10,000 keys of up to 1 KiB each, and some).
const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionsRequest {
    route: String,
    keys: Vec<String>,
    /// Checked by hand, as written, so every wrong value (`null`, a number too large for any
    /// type) gets the same answer naming the field.
    #[serde(default = "one")]
    cost: Box<RawValue>,
    #[serde(default)]
    dry_run: bool,
}

/// The cost of a request that names none.
fn one() -> Box<RawValue> {
    RawValue::from_string("1".into()).expect("1 is JSON")
}

/// The request's cost: a whole number from 1 to the smallest limit the route charges.
fn checked_cost(written: &RawValue, max: u64) -> Result<u64, AdminError> {
    let value = serde_json::from_str::<serde_json::Value>(written.get()).ok();
    match value.as_ref().and_then(serde_json::Value::as_u64) {
        Some(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(AdminError::OutOfRange {
            code: "cost_out_of_range",
            field: "cost".into(),
            why: format!(
                "must be a whole number from 1 to {max} (the most the route's smallest limit takes at once), got {}",
                written.get()
            ),
        }),
    }
}

/// Refuses a key the proxy path could never derive: an empty one (a key part with nothing in
/// it is missing there: 400 `missing_key`).
fn checked_keys(keys: &[String]) -> Result<(), AdminError> {
    match keys.iter().position(String::is_empty) {
        Some(i) => Err(AdminError::OutOfRange {
            code: "missing_key",
            field: format!("keys[{i}]"),
            why: "an empty key: the traffic path refuses a request whose key part is empty".into(),
        }),
        None => Ok(()),
    }
}

pub(super) async fn decide(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // A body announced as too large is refused before any of it is read (a client that sent
    // `Expect: 100-continue` then sends none of it).
    let announced = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return AdminError::BodyTooLarge { max: MAX_BODY }.into_response(&id);
    }
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            let error = e.into_inner();
            if error.is::<http_body_util::LengthLimitError>() {
                return AdminError::BodyTooLarge { max: MAX_BODY }.into_response(&id);
            }
            return AdminError::BadRequest(format!("the body is not readable: {error}"))
                .into_response(&id);
        }
    };
    let request: DecisionsRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return body_error(e).into_response(&id),
    };
    if request.keys.len() > MAX_KEYS {
        return AdminError::TooManyKeys {
            keys: request.keys.len(),
            max: MAX_KEYS,
        }
        .into_response(&id);
    }
    let Some(route) = state.table().route(&request.route).cloned() else {
        return AdminError::UnknownRoute(request.route).into_response(&id);
    };
    if let Some((what, _)) = route.config.needs_response() {
        return AdminError::RouteCountsOutcomes(request.route, what).into_response(&id);
    }
    let cost = match checked_cost(&request.cost, smallest_limit(&route)) {
        Ok(c) => c,
        Err(e) => return e.into_response(&id),
    };
    if let Err(e) = checked_keys(&request.keys) {
        return e.into_response(&id);
    }
    // Decided in a task of its own: a caller that hangs up mid-batch does not cancel decisions
    // the store is already making, and every one of them is counted.
    let (limiter, policy, dry_run) = (
        state.limiter().clone(),
        route.policy.clone(),
        request.dry_run,
    );
    let keys = request.keys;
    let decided = tokio::spawn(async move {
        let request_keys: Vec<RequestKeys> = keys
            .iter()
            .map(|k| RequestKeys::given(&policy, k))
            .collect();
        let verdicts = limiter
            .decide_many(&policy, &request_keys, cost, dry_run)
            .await;
        (keys, verdicts)
    })
    .await;
    let Ok((keys, verdicts)) = decided else {
        return AdminError::Internal("the batch decision task failed".into()).into_response(&id);
    };
    let results: Vec<KeyResult<'_>> = keys
        .iter()
        .zip(&verdicts)
        .map(|(key, verdict)| KeyResult::new(key, verdict))
        .collect();
    Json(Results { results }).into_response()
}

/// The smallest number of units any limit of the route lets through at once (a route without
/// limits takes any cost up to 2^63).
fn smallest_limit(route: &crate::route::Route) -> u64 {
    route
        .config
        .limits
        .iter()
        .map(|l| l.most_at_once(l.limit))
        .min()
        .unwrap_or(i64::MAX as u64)
}

/// The answer: one result per key, in request order.
#[derive(Serialize)]
struct Results<'a> {
    results: Vec<KeyResult<'a>>,
}

/// One key's answer. Serialised straight from the verdict: a map built per key costs more than
/// the decision's own share of the gateway's work in a large batch.
#[derive(Serialize)]
struct KeyResult<'a> {
    key: &'a str,
    allowed: bool,
    /// `null` when the store could not say (a store error, a key on no plan), as the proxy path
    /// then sends no rate-limit headers.
    remaining: Option<u64>,
    /// `null` for a key no wait lets in (on no plan, with `[plans] unknown = "reject"`: the
    /// proxy path's 403 has no `Retry-After` either).
    retry_after_ms: Option<u64>,
    decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segment: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<&'a str>,
}

/// Why a body was refused: JSON that does not parse is a bad request (400); JSON that parses but
/// lacks a field, has one of the wrong type or one the API does not know is unprocessable (422).
fn body_error(e: serde_json::Error) -> AdminError {
    if e.classify() == serde_json::error::Category::Data {
        AdminError::InvalidBody(format!(
            "the body does not fit {{\"route\", \"keys\", \"cost\", \"dry_run\"}}: {e}"
        ))
    } else {
        AdminError::BadRequest(format!("the body is not JSON: {e}"))
    }
}

impl<'a> KeyResult<'a> {
    /// One key's answer, from the same verdict the proxy path turns into a response.
    fn new(key: &'a str, verdict: &'a Verdict) -> KeyResult<'a> {
        let allowed = verdict.forwards();
        // The store failed, whatever answered instead: the route's on_error or the fallback.
        let store_error = verdict.local
            || matches!(
                verdict.label,
                DecisionLabel::StoreErrorAllowed | DecisionLabel::StoreErrorDenied
            );
        let unknown = verdict.label == DecisionLabel::BadRequest;
        let (segment, plan) = match &verdict.tier {
            Some(TierName::Segment(name)) => (Some(name.as_str()), None),
            Some(TierName::Plan(name)) => (None, Some(name.as_str())),
            None => (None, None),
        };
        KeyResult {
            key,
            allowed,
            remaining: verdict.remaining(),
            retry_after_ms: match (allowed, unknown) {
                (true, _) => Some(0),
                (false, true) => None,
                (false, false) => Some(ceil_millis(verdict.retry_after()).max(1)),
            },
            decision: verdict.label.as_str(),
            error: if store_error {
                Some("store_unavailable")
            } else if unknown {
                Some("unknown_key")
            } else {
                None
            },
            segment,
            plan,
        }
    }
}
