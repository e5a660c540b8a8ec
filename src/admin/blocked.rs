//! `GET /admin/blocked?route=R` lists the keys the route refuses now, newest first, at most
//! 1,000: keys in a block (`"reason":"block"`) and keys whose window still refuses them after
//! their block ended (`"window"`), each with the wait a client is told now. `key=K` or `value=V`
//! (once per key part, `limit=L` to pick a limit's key) asks about one key instead.

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
    let listed: Vec<_> = refused
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
        .collect();
    Ok(json!({"route": q.route.config.name, "blocked": listed}))
}
