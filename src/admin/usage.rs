//! `GET /admin/usage?route=R&key=K` reads a key's usage without charging it (a cost-0
//! decision); `DELETE` resets the key and lifts its block on every instance.

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
use crate::store::Outcome;

#[derive(Deserialize)]
pub(super) struct UsageQuery {
    route: Option<String>,
    key: Option<String>,
}

/// The route and key a query names.
fn target(state: &GatewayState, q: UsageQuery) -> Result<(Arc<Route>, String), AdminError> {
    let (Some(route), Some(key)) = (q.route, q.key) else {
        return Err(AdminError::BadRequest(
            "query parameters `route` and `key` are required".into(),
        ));
    };
    match state.table.load().route(&route) {
        Some(r) => Ok((r.clone(), key)),
        None => Err(AdminError::UnknownRoute(route)),
    }
}

pub(super) async fn show(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key) = match target(&state, q) {
        Ok(t) => t,
        Err(e) => return e.into_response(&id),
    };
    let (decision, tier) = match state.limiter.usage(&route.policy, &key).await {
        Ok(d) => d,
        Err(e) => return AdminError::StoreUnavailable(e.to_string()).into_response(&id),
    };
    let limits: Vec<_> = route
        .config
        .limits
        .iter()
        .zip(&decision.limits)
        .map(|(l, u)| {
            json!({"name": l.name, "used": u.used, "limit": u.limit, "remaining": u.remaining(), "reset_ms": ceil_millis(u.reset)})
        })
        .collect();
    let blocked_ms = if decision.outcome == Outcome::Blocked {
        ceil_millis(decision.retry_after)
    } else {
        0
    };
    let mut body =
        json!({"route": route.config.name, "key": key, "limits": limits, "blocked_ms": blocked_ms});
    if let Some(t) = tier {
        body[t.kind()] = json!(t.name());
    }
    Json(body).into_response()
}

pub(super) async fn reset(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key) = match target(&state, q) {
        Ok(t) => t,
        Err(e) => return e.into_response(&id),
    };
    match state.reset_key(&route.policy, &key).await {
        Ok(()) => {
            Json(json!({"route": route.config.name, "key": key, "reset": true})).into_response()
        }
        Err(e) => AdminError::StoreUnavailable(e.to_string()).into_response(&id),
    }
}
