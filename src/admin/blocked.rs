//! `GET /admin/blocked?route=R` lists the keys the route refuses now, newest first, at most
//! 1,000: keys in a block (`"reason":"block"`) and keys whose window refuses them
//! (`"window"`: on a `reject` route, or after a block ended), each with the wait a client is
//! told now. `R` may be an `[rls]` domain, whose recorded keys are asked again of their rate
//! limits as a route's are. `key=K` or `value=V` (once per key part, `limit=L`
//! to pick a limit's key; a domain's rate limit by its name) asks about one key instead; on a
//! domain without `limit`, every rate limit of the domain is asked about it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::Extension;
use serde_json::json;

use super::query::{domain_asked, respond, with_limit, DomainAsked, KeyQuery};
use crate::error::AdminError;
use crate::limit::headers::ceil_millis;
use crate::limit::lookup::{targets as targets_of, Named};
use crate::limit::RefusedKey;
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
    match domain_asked(state, query) {
        Some(DomainAsked::Whole(domain)) => {
            let index = layout::blocked_index(&state.running.store.key_prefix, &domain);
            let recorded = state
                .limiter()
                .refused_as_recorded(&index)
                .await
                .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
            let refused = refused_in_domain_now(state, &domain, recorded).await?;
            return Ok(json!({"route": domain, "blocked": listed(&refused)}));
        }
        Some(DomainAsked::Key(labels)) => {
            return refused_in_domain(state, query.unwrap_or(""), &labels).await;
        }
        None => {}
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

/// One key's refusals by every rate limit of a domain (`labels`), the longest wait first: the
/// query asked of each limit in turn. A limit the given values make no key for is passed
/// over; when none takes them, the first one's error is the answer.
async fn refused_in_domain(
    state: &GatewayState,
    query: &str,
    labels: &[String],
) -> Result<serde_json::Value, AdminError> {
    let (mut found, mut first_error, mut domain) = (Vec::new(), None, None);
    for label in labels {
        let picked = with_limit(query, label);
        let q = KeyQuery::parse(state, Some(&picked))?;
        let targets = match q.targets(q.required()?) {
            Ok(targets) => targets,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let refused = (state.limiter())
            .refused(&q.route.policy, Some(&targets))
            .await
            .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
        found.extend(refused);
        domain.get_or_insert(q.route.config.name.clone());
    }
    let Some(domain) = domain else {
        return Err(first_error.unwrap_or_else(|| {
            AdminError::BadRequest("the domain has no rate limit to ask".into())
        }));
    };
    found.sort_by_key(|r| std::cmp::Reverse(r.retry_after));
    Ok(json!({"route": domain, "blocked": listed(&found)}))
}

/// Of a domain's recorded refusals (newest first), those its rate limits refuse now, each with
/// the wait a client is told now: every key asked again of its rate limit, as a route's are,
/// so a key whose window has room again (a raised limit, a cost that no longer fits only at a
/// larger `hits_addend`) is not listed. A quota-mode limit, which refuses only beside the
/// request's other quota-mode descriptors, stays as recorded; a rate limit a reload removed
/// refuses no one.
async fn refused_in_domain_now(
    state: &GatewayState,
    domain: &str,
    recorded: Vec<RefusedKey>,
) -> Result<Vec<RefusedKey>, AdminError> {
    let rls = state.rls.load();
    let Some(rules) = rls.domain(domain).map(|d| d.rules().to_vec()) else {
        return Ok(Vec::new());
    };
    let mut now: HashMap<(String, String), RefusedKey> = HashMap::new();
    let mut labels: Vec<&str> = recorded.iter().map(|r| r.limit.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    for label in labels {
        let Some(rule) = rules.iter().find(|r| r.label == label) else {
            continue;
        };
        let keys = recorded.iter().filter(|r| r.limit == label);
        if rule.quota {
            now.extend(keys.map(|r| ((r.limit.clone(), r.key.clone()), r.clone())));
            continue;
        }
        let Some(policy) = rls.rule_policy(domain, label) else {
            continue;
        };
        let mut targets = Vec::new();
        for r in keys {
            targets.extend(targets_of(&policy, &Named::Key(r.key.clone()), Some(0))?);
        }
        let refused = (state.limiter())
            .refused(&policy, Some(&targets))
            .await
            .map_err(|e| AdminError::StoreUnavailable(e.to_string()))?;
        now.extend(
            refused
                .into_iter()
                .map(|r| ((r.limit.clone(), r.key.clone()), r)),
        );
    }
    Ok(recorded
        .iter()
        .filter_map(|r| now.remove(&(r.limit.clone(), r.key.clone())))
        .collect())
}

/// The answer's list.
fn listed(refused: &[RefusedKey]) -> Vec<serde_json::Value> {
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
