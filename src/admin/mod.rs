//! The admin listener (axum, its own address): `/metrics`, `/healthz`, `/readyz`, and, behind a
//! bearer token, `/admin/config`, `/admin/usage`, `/admin/blocked`, `/admin/reload` and the batch
//! decision API `/v1/decisions`. With no token configured the protected endpoints answer 403 and say why.
//! Every answer carries an `X-Request-Id`; every error is a problem body (`crate::error`).

mod blocked;
mod config_view;
mod decisions;
pub use decisions::MAX_KEYS as MAX_BATCH_KEYS;
mod query;
mod usage;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::error::AdminError;
use crate::key::is_trusted;
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::state::GatewayState;

/// The admin router.
pub fn router(state: Arc<GatewayState>) -> Router {
    let endpoints = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/admin/config", get(config_view::show))
        .route("/admin/usage", get(usage::show).delete(usage::reset))
        .route("/admin/blocked", get(blocked::blocked))
        .route("/admin/reload", post(reload))
        .route("/v1/decisions", post(decisions::decide))
        .fallback(|Extension(id): Extension<RequestId>| async move {
            AdminError::NotFound.into_response(&id)
        })
        // axum's own 405 has no body; axum still adds `Allow` to this one.
        .method_not_allowed_fallback(|Extension(id): Extension<RequestId>| async move {
            AdminError::MethodNotAllowed.into_response(&id)
        })
        .with_state(state.clone());
    // The token is checked before routing, around the whole router (a layer on its routes runs
    // inside each route's method router, which adds `Allow` to what it answers): a path under
    // /admin or /v1 that does not exist, or a method an endpoint does not take, is not told
    // apart from a real one without the token.
    Router::new()
        .fallback_service(endpoints)
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn_with_state(state, request_id))
}

/// Gives every admin request an id (kept from a trusted peer) and returns it.
async fn request_id(
    State(state): State<Arc<GatewayState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer_trusted = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|ConnectInfo(peer)| {
            is_trusted(peer.ip(), &state.table().config.server.trusted_proxies)
        });
    let id = RequestId::for_request(req.headers(), peer_trusted);
    req.extensions_mut().insert(id.clone());
    let mut response = next.run(req).await;
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.header_value().clone());
    response
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    // Redis's evictions are read when scraped (one `INFO` per server, under the admin deadline).
    state.limiter().refresh_evictions().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.limiter().scrape(),
    )
        .into_response()
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// 200 when the config is loaded and the store answers; while it does not, 503 if any route
/// fails closed (traffic would get 503s; a problem body, as every error the gateway answers),
/// else 200 marked degraded.
async fn readyz(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
) -> Response {
    let store = state.limiter().store();
    let backend = store.backend();
    let Err(e) = store.ping().await else {
        return Json(json!({"status": "ready", "store": backend})).into_response();
    };
    let fails_closed = state
        .table()
        .config
        .any_route_fails_closed(&state.running.store);
    if fails_closed {
        return AdminError::StoreUnavailable(e.to_string()).into_response(&id);
    }
    let body = json!({"status": "degraded", "store": backend, "error": e.to_string()});
    Json(body).into_response()
}

async fn reload(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
) -> Response {
    let reloading = state.clone();
    match tokio::task::spawn_blocking(move || reloading.reload()).await {
        Ok(Ok(pending)) => Json(json!({
            "result": "success",
            "pending_restart": config_view::pending_json(&pending),
        }))
        .into_response(),
        Ok(Err(e)) => AdminError::InvalidConfig(e.to_string()).into_response(&id),
        Err(e) => AdminError::Internal(e.to_string()).into_response(&id),
    }
}

/// Bearer-token check for `/admin/*` and `/v1/*`, comparing in constant time.
async fn require_token(
    State(state): State<Arc<GatewayState>>,
    Extension(id): Extension<RequestId>,
    req: Request,
    next: Next,
) -> Response {
    if !is_protected(req.uri().path()) {
        return next.run(req).await;
    }
    let table = state.table();
    let admin = &table.config.admin;
    let Some(expected) = admin.token.as_deref() else {
        return AdminError::TokenNotConfigured {
            env: admin.token_env.clone(),
        }
        .into_response(&id);
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let matches = presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(expected.as_bytes())));
    if !matches {
        return AdminError::Unauthorized.into_response(&id);
    }
    drop(table);
    next.run(req).await
}

/// Whether `path` is under `/admin` or `/v1`, where everything needs the token.
fn is_protected(path: &str) -> bool {
    ["/admin", "/v1"].iter().any(|prefix| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}
