//! `GET /admin/blocked?route=R` lists the keys the route refuses now, latest-ending first, at
//! most 1,000: keys in a block (`"reason":"block"`) and keys whose window refuses them
//! (`"window"`: on a `reject` route, or after a block ended), each with the wait a client is
//! told now. `R` may be an `[rls]` domain. `key=K` or `value=V` (once per key part, `limit=L`
//! to pick a limit's key; a domain's rate limit by its name) asks about one key instead.

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
use crate::store::layout;

pub(super) async fn blocked(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    RawQuery(query): RawQuery,
) -> Response {
    respond(refused(&state, query.as_deref()).await, &id)
}

async fn refused(
    state: &GatewayState,
    query: Option<&str>,
) -> Result<serde_json::Value, AdminError> {
    if let Some(domain) = whole_domain(state, query) {
        let index = layout::blocked_index(&state.running.store.key_prefix, &domain);
        let refused = state
            .limiter()
            .refused_as_recorded(&index)
            .await
            .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
        return Ok(json!({"route": domain, "blocked": listed(&refused)}));
    }
    let q = KeyQuery::parse(state, query)?;
    let targets = match &q.named {
        Some(named) => Some(q.targets(named)?),
        None if q.limit.is_some() => {
            return Err(AdminError::BadRequest(
                "`limit` picks the limit whose key `key` or `value` names; give one of them".into(),
            ))
        }
        None => None,
    };
    let refused = state
        .limiter()
        .refused(&q.route.policy, targets.as_deref())
        .await
        .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
    Ok(json!({"route": q.route.config.name, "blocked": listed(&refused)}))
}

/// The `[rls]` domain a query names when it asks for the whole domain (`route=DOMAIN` alone,
/// naming no route): its refusals are listed as recorded.
fn whole_domain(state: &GatewayState, query: Option<&str>) -> Option<String> {
    let mut route = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "route" if route.is_none() => route = Some(value.into_owned()),
            "route" | "key" | "value" | "limit" => return None,
            _ => {}
        }
    }
    let route = route?;
    let is_domain =
        state.table().route(&route).is_none() && state.rls.load().domain(&route).is_some();
    is_domain.then_some(route)
}

/// The answer's list.
fn listed(refused: &[crate::limit::RefusedKey]) -> Vec<serde_json::Value> {
    refused
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "limit": r.limit,
                "block_level": r.block_level,
                "retry_after_ms": ceil_millis(r.retry_after),
                "reason": r.reason.name(),
            })
        })
        .collect()
}
