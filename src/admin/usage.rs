//! `GET /admin/usage?route=R&key=K[&limit=L]` reads a key's usage without charging it (a cost-0
//! decision); `DELETE` resets the key and lifts its block (level included) on every instance and
//! says which limits held it. `value=V` (once per key part) may name the key instead of `key`.
//! With `limit=L` the key is that limit's; without, every limit of the route is asked: `GET`
//! shows the limits that hold the key (a fresh key: the route's own key's limits), `DELETE`
//! resets it in every limit.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::Extension;
use serde_json::json;

use super::query::{respond, KeyQuery};
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
