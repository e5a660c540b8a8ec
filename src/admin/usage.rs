//! `GET /admin/usage?route=R&key=K` reads a key's usage without charging it (a cost-0
//! decision); `DELETE` resets the key and lifts its block on every instance.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use crate::error::json_error;
use crate::key::decision_base;
use crate::limit::response::ceil_millis;
use crate::limit::{DecisionInput, Outcome};
use crate::runtime::CompiledRoute;
use crate::state::GatewayState;

#[derive(Deserialize)]
pub(super) struct UsageQuery {
    route: Option<String>,
    key: Option<String>,
}

/// Why a usage query names no key.
enum TargetError {
    MissingParams,
    UnknownRoute(String),
}

impl TargetError {
    fn into_response(self) -> Response {
        match self {
            TargetError::MissingParams => json_error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "query parameters `route` and `key` are required",
            ),
            TargetError::UnknownRoute(route) => json_error(
                StatusCode::NOT_FOUND,
                "unknown_route",
                &format!("no route named `{route}`"),
            ),
        }
    }
}

/// The route, key and storage base a query names.
fn target(
    state: &GatewayState,
    q: &UsageQuery,
) -> Result<(Arc<CompiledRoute>, String, String), TargetError> {
    let (Some(route), Some(key)) = (&q.route, &q.key) else {
        return Err(TargetError::MissingParams);
    };
    let runtime = state.runtime.load();
    let Some(compiled) = runtime.route(route).cloned() else {
        return Err(TargetError::UnknownRoute(route.clone()));
    };
    let base = decision_base(&state.store_config.key_prefix, route, key);
    Ok((compiled, key.clone(), base))
}

pub(super) async fn show(
    State(state): State<Arc<GatewayState>>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key, base) = match target(&state, &q) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let input = DecisionInput {
        route: &route.config,
        base: &base,
        cost: 0,
        now_us: None,
    };
    let decision = match state.store.decide(input).await {
        Ok(d) => d,
        Err(e) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                &e.to_string(),
            )
        }
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
    Json(
        json!({"route": route.config.name, "key": key, "limits": limits, "blocked_ms": blocked_ms}),
    )
    .into_response()
}

pub(super) async fn reset(
    State(state): State<Arc<GatewayState>>,
    Query(q): Query<UsageQuery>,
) -> Response {
    let (route, key, base) = match target(&state, &q) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    match state.reset_key(&route.config, &base).await {
        Ok(()) => {
            Json(json!({"route": route.config.name, "key": key, "reset": true})).into_response()
        }
        Err(e) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &e.to_string(),
        ),
    }
}
