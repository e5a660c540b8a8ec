//! `GET /admin/usage?route=R&key=K[&limit=L]` reads a key's usage without charging it (a cost-0
//! decision); `DELETE` resets the key and lifts its block (level included) on every instance.
//! With `limit=L`, `key` is that limit's derived key; without, the route's own, and every limit
//! counting it is shown. `GET /admin/blocked?route=R` lists the keys the route blocks now.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use crate::error::AdminError;
use crate::limit::headers::ceil_millis;
use crate::request_id::RequestId;
use crate::route::Route;
use crate::state::GatewayState;

#[derive(Deserialize)]
pub(super) struct UsageQuery {
    route: Option<String>,
    key: Option<String>,
    limit: Option<String>,
}

/// The route, key and limit (by index) a query names.
fn target(
    state: &GatewayState,
    q: UsageQuery,
) -> Result<(Arc<Route>, String, Option<usize>), AdminError> {
    let (Some(route), Some(key)) = (q.route, q.key) else {
        return Err(AdminError::BadRequest(
            "query parameters `route` and `key` are required".into(),
        ));
    };
    let Some(route) = state.route_or_domain(&route, q.limit.as_deref()) else {
        return Err(AdminError::UnknownRoute(route));
    };
    let limit = match q.limit {
        None => None,
        Some(name) => match route.config.limits.iter().position(|l| l.name == name) {
            Some(i) => Some(i),
            None => {
                return Err(AdminError::BadRequest(format!(
                    "route `{}` has no limit `{name}`",
                    route.config.name
                )))
            }
        },
    };
    Ok((route, key, limit))
}

pub(super) async fn show(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key, limit) = match target(&state, q) {
        Ok(t) => t,
        Err(e) => return e.into_response(&id),
    };
    let usage = match state.limiter().usage(&route.policy, &key, limit).await {
        Ok(u) => u,
        Err(e) => return AdminError::StoreUnavailable(e.to_string()).into_response(&id),
    };
    let mut body = json!({
        "route": route.config.name,
        "key": key,
        "limits": [],
        "blocked_ms": 0,
        "block_level": 0,
        "deny_cached_ms": 0,
    });
    if let Some(usage) = usage {
        let limits: Vec<_> = usage
            .limits
            .iter()
            .map(|(i, u)| {
                json!({
                    "name": route.config.limits[*i].name,
                    "used": u.used,
                    "limit": u.limit,
                    "remaining": u.remaining(),
                    "reset_ms": ceil_millis(u.reset),
                })
            })
            .collect();
        body["limits"] = json!(limits);
        body["blocked_ms"] = json!(ceil_millis(usage.blocked));
        body["block_level"] = json!(usage.block_level);
        body["deny_cached_ms"] = json!(ceil_millis(usage.deny_cached));
        if let Some(t) = usage.tier {
            body[t.kind()] = json!(t.name());
        }
    }
    Json(body).into_response()
}

pub(super) async fn reset(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key, limit) = match target(&state, q) {
        Ok(t) => t,
        Err(e) => return e.into_response(&id),
    };
    match state.reset_key(&route.policy, &key, limit).await {
        Ok(()) => {
            Json(json!({"route": route.config.name, "key": key, "reset": true})).into_response()
        }
        Err(e) => AdminError::StoreUnavailable(e.to_string()).into_response(&id),
    }
}

#[derive(Deserialize)]
pub(super) struct BlockedQuery {
    route: Option<String>,
}

pub(super) async fn blocked(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    Query(q): Query<BlockedQuery>,
) -> Response {
    let Some(name) = q.route else {
        return AdminError::BadRequest("query parameter `route` is required".into())
            .into_response(&id);
    };
    let Some(route) = state.table().route(&name).cloned() else {
        return AdminError::UnknownRoute(name).into_response(&id);
    };
    let blocked = match state.limiter().blocked(&route.policy).await {
        Ok(b) => b,
        Err(e) => return AdminError::StoreUnavailable(e.to_string()).into_response(&id),
    };
    let blocked: Vec<_> = blocked
        .iter()
        .map(|b| {
            json!({
                "key": b.key,
                "limit": b.limit,
                "block_level": b.block_level,
                "remaining_ms": ceil_millis(b.remaining),
            })
        })
        .collect();
    Json(json!({"route": route.config.name, "blocked": blocked})).into_response()
}
