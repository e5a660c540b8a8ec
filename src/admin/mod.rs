//! The admin listener (axum, its own address): `/metrics`, `/healthz`, `/readyz`, and, behind a
//! bearer token, `/admin/config`, `/admin/usage`, `/admin/reload` and the batch decision API
//! `/v1/decisions`. With no token configured the protected endpoints answer 403 and say why.

mod config_view;
mod decisions;
mod usage;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::error::json_error;
use crate::state::GatewayState;

/// The admin router.
pub fn router(state: Arc<GatewayState>) -> Router {
    let protected = Router::new()
        .route("/admin/config", get(config_view::show))
        .route("/admin/usage", get(usage::show).delete(usage::reset))
        .route("/admin/reload", post(reload))
        .route("/v1/decisions", post(decisions::decide))
        .layer(DefaultBodyLimit::max(16 * 1024 * 1024))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(protected)
        .fallback(|| async {
            json_error(StatusCode::NOT_FOUND, "not_found", "no such admin endpoint")
        })
        .with_state(state)
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// 200 when the config is loaded and the store answers; while the store does not, 503 if any
/// route fails closed (traffic would get 503s), else 200 marked degraded.
async fn readyz(State(state): State<Arc<GatewayState>>) -> Response {
    let backend = state.store.backend();
    match state.store.ping().await {
        Ok(()) => Json(json!({"status": "ready", "store": backend})).into_response(),
        Err(e) => {
            let fails_closed = state.runtime.load().config.any_route_fails_closed();
            let status = if fails_closed {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            let body = json!({
                "status": if fails_closed { "unavailable" } else { "degraded" },
                "store": backend,
                "error": e.to_string(),
            });
            (status, Json(body)).into_response()
        }
    }
}

async fn reload(State(state): State<Arc<GatewayState>>) -> Response {
    let state2 = state.clone();
    let result = tokio::task::spawn_blocking(move || state2.reload()).await;
    match result {
        Ok(Ok(notes)) => Json(json!({"result": "success", "notes": notes})).into_response(),
        Ok(Err(e)) => json_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_config",
            &e.to_string(),
        ),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        ),
    }
}

/// Bearer-token check for `/admin/*` and `/v1/*`.
async fn require_token(
    State(state): State<Arc<GatewayState>>,
    req: Request,
    next: Next,
) -> Response {
    let runtime = state.runtime.load();
    let admin = &runtime.config.admin;
    let Some(expected) = admin.token.as_deref() else {
        return json_error(
            StatusCode::FORBIDDEN,
            "admin_token_not_configured",
            &format!("no admin token is configured: set the environment variable {} and restart or reload", admin.token_env),
        );
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if !presented.is_some_and(|p| constant_time_eq(p.as_bytes(), expected.as_bytes())) {
        let mut response = json_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    drop(runtime);
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A problem+json body (RFC 9457) for admin errors that the spec asks in that form.
fn problem(status: StatusCode, title: &str, detail: &str) -> Response<Body> {
    let body =
        json!({"type": "about:blank", "title": title, "status": status.as_u16(), "detail": detail});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
