//! `GET /admin/usage?route=R&key=K[&limit=L]` reads a key's usage without charging it (a cost-0
//! decision); `DELETE` resets the key and lifts its block (level included) on every instance and
//! says which limits held it. `value=V` (once per key part) may name the key instead of `key`.
//! With `limit=L` the key is that limit's; without, every limit of the route is asked: `GET`
//! shows the limits that hold the key (a fresh key: the route's own key's limits), `DELETE`
//! resets it in every limit. An `[rls]` domain without `limit=` is asked rate limit by rate
//! limit (those its values make no key for passed over): `GET` shows those that hold the key,
//! `DELETE` resets it in each.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::Extension;
use serde_json::json;

use super::query::{domain_asked, respond, with_limit, DomainAsked, KeyQuery};
use crate::error::AdminError;
use crate::limit::headers::ceil_millis;
use crate::request_id::RequestId;
use crate::state::GatewayState;
use crate::store::layout::named_key;

pub(super) async fn show(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    RawQuery(query): RawQuery,
) -> Response {
    respond(usage(&state, query.as_deref()).await, &id)
}

async fn usage(state: &GatewayState, query: Option<&str>) -> Result<serde_json::Value, AdminError> {
    let Some(DomainAsked::Key(labels)) = domain_asked(state, query) else {
        return usage_of(state, query).await;
    };
    let answers = each_rate_limit(state, query.unwrap_or(""), &labels, Ask::Usage).await?;
    let longest = |member: &str| answers.iter().filter_map(|a| a[member].as_u64()).max();
    let held: Vec<&serde_json::Value> = (answers.iter())
        .flat_map(|a| a["limits"].as_array().into_iter().flatten())
        .filter(|l| l["used"].as_u64().unwrap_or(0) > 0)
        .collect();
    Ok(json!({
        "route": answers[0]["route"],
        "key": answers[0]["key"],
        "limits": held,
        "blocked_ms": longest("blocked_ms"),
        "block_level": longest("block_level"),
        "deny_cached_ms": longest("deny_cached_ms"),
    }))
}

/// What is asked of each rate limit of a domain.
#[derive(Clone, Copy)]
enum Ask {
    Usage,
    Reset,
}

/// The answers of `ask` for each rate limit (`labels`) of the domain `query` names, those its
/// values make no key for passed over; when none takes them, the first one's error. A store
/// that fails fails the whole answer.
async fn each_rate_limit(
    state: &GatewayState,
    query: &str,
    labels: &[String],
    ask: Ask,
) -> Result<Vec<serde_json::Value>, AdminError> {
    let (mut answers, mut first_error) = (Vec::new(), None);
    for label in labels {
        let one = with_limit(query, label);
        let answer = match ask {
            Ask::Usage => usage_of(state, Some(&one)).await,
            Ask::Reset => reset_of(state, Some(&one)).await,
        };
        match answer {
            Ok(answer) => answers.push(answer),
            Err(e @ AdminError::StoreUnavailable(_)) => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (answers.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        (true, None) => Err(AdminError::BadRequest(
            "the domain has no rate limit to ask".into(),
        )),
        _ => Ok(answers),
    }
}

/// The usage of the key one route (or one rate limit of a domain) names.
async fn usage_of(
    state: &GatewayState,
    query: Option<&str>,
) -> Result<serde_json::Value, AdminError> {
    let q = KeyQuery::parse(state, query)?;
    let named = q.required()?;
    let targets = q.targets(named)?;
    let usage = state
        .limiter()
        .usage(&q.route.policy, &targets, q.limit)
        .await
        .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
    let config = &q.route.config;
    let limits: Vec<_> = usage
        .limits
        .iter()
        .map(|l| {
            let c = &config.limits[l.index];
            let mut shown = json!({
                "name": c.name,
                "key": named_key(&l.key),
                "used": l.usage.used,
                "limit": l.usage.limit,
                "remaining": l.usage.remaining(),
                "reset_ms": ceil_millis(l.usage.reset),
            });
            if !c.algorithm.get().has_window() {
                // a limit of attempts in flight: its slots taken now
                shown["in_flight"] = json!(l.usage.used);
            }
            shown
        })
        .collect();
    let mut body = json!({
        "route": config.name,
        "key": q.shown_key(named, &targets),
        "limits": limits,
        "blocked_ms": ceil_millis(usage.blocked),
        "block_level": usage.block_level,
        "deny_cached_ms": ceil_millis(usage.deny_cached),
    });
    if let Some(t) = usage.tier {
        body[t.kind()] = json!(t.name());
    }
    Ok(body)
}

pub(super) async fn reset(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    RawQuery(query): RawQuery,
) -> Response {
    respond(reset_keys(&state, query.as_deref()).await, &id)
}

/// Resets what the query names; answers which limits held it (`"reset": false` when none).
async fn reset_keys(
    state: &GatewayState,
    query: Option<&str>,
) -> Result<serde_json::Value, AdminError> {
    let Some(DomainAsked::Key(labels)) = domain_asked(state, query) else {
        return reset_of(state, query).await;
    };
    let answers = each_rate_limit(state, query.unwrap_or(""), &labels, Ask::Reset).await?;
    let held: Vec<&serde_json::Value> = (answers.iter())
        .flat_map(|a| a["limits"].as_array().into_iter().flatten())
        .collect();
    Ok(json!({
        "route": answers[0]["route"],
        "key": answers[0]["key"],
        "reset": !held.is_empty(),
        "limits": held,
    }))
}

/// Resets the key one route (or one rate limit of a domain) names.
async fn reset_of(
    state: &GatewayState,
    query: Option<&str>,
) -> Result<serde_json::Value, AdminError> {
    let q = KeyQuery::parse(state, query)?;
    let named = q.required()?;
    let targets = q.targets(named)?;
    let policy = &q.route.policy;
    let slots = state
        .reset_keys(policy, &targets, q.limit)
        .await
        .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
    let held: Vec<&str> = policy
        .config
        .limits
        .iter()
        .enumerate()
        .filter(|(i, _)| slots.iter().any(|s| s.held && s.limits.contains(i)))
        .map(|(_, l)| l.name.as_str())
        .collect();
    Ok(json!({
        "route": policy.name(),
        "key": q.shown_key(named, &targets),
        "reset": !held.is_empty(),
        "limits": held,
    }))
}
