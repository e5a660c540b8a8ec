//! The query of the endpoints about keys (`/admin/usage`, `/admin/blocked`): `route=R`, an
//! optional `limit=L`, and the key as `key=K` (as logs and `/admin/blocked` show it) or as
//! `value=V`, repeated once per key part in the key's order (what a customer says: the gateway
//! derives the key as the traffic path would; for an `[rls]` domain, one per entry of the
//! descriptor, as its rate limits key them). Read by hand rather than by serde, since `value`
//! repeats.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::AdminError;
use crate::key::ValueError;
use crate::limit::lookup::{targets, Named, Target};
use crate::request_id::RequestId;
use crate::route::Route;
use crate::state::GatewayState;
use crate::store::layout::named_key;

/// What a query names.
pub(super) struct KeyQuery {
    /// The route.
    pub route: Arc<Route>,
    /// The limit, by index, when `limit=` names one.
    pub limit: Option<usize>,
    /// The key, when `key=` or `value=` gives one.
    pub named: Option<Named>,
}

impl KeyQuery {
    /// Reads `query` against the routes in force.
    pub fn parse(state: &GatewayState, query: Option<&str>) -> Result<KeyQuery, AdminError> {
        let (mut route, mut key, mut limit) = (None, None, None);
        let mut values = Vec::new();
        for (name, value) in crate::key::decoded_pairs(query.unwrap_or("").as_bytes()) {
            let name = String::from_utf8_lossy(&name);
            let slot = match name.as_ref() {
                "route" => &mut route,
                "key" => &mut key,
                "limit" => &mut limit,
                "value" => {
                    values.push(value.into_owned());
                    continue;
                }
                _ => continue,
            };
            if slot
                .replace(String::from_utf8_lossy(&value).into_owned())
                .is_some()
            {
                return Err(AdminError::BadRequest(format!(
                    "query parameter `{name}` is given more than once"
                )));
            }
        }
        let Some(route) = route else {
            return Err(AdminError::BadRequest(
                "query parameter `route` is required".into(),
            ));
        };
        let domain = state.table().route(&route).is_none();
        let Some(route) = state.route_or_domain(&route, limit.as_deref()) else {
            return Err(unknown(state, route, limit.is_some()));
        };
        let limit = limit
            .map(|name| {
                let index = route.config.limits.iter().position(|l| l.name == name);
                index.ok_or_else(|| {
                    AdminError::BadRequest(format!(
                        "route `{}` has no limit `{name}`",
                        route.config.name
                    ))
                })
            })
            .transpose()?;
        let named = match (key, values.is_empty()) {
            (Some(_), false) => {
                return Err(AdminError::BadRequest(
                    "give the key as `key` or as `value` (one per key part), not both".into(),
                ))
            }
            (Some(key), true) => Some(Named::Key(key)),
            (None, false) if domain => Some(Named::Key(domain_key(state, &route, limit, &values)?)),
            (None, false) => Some(Named::Values(values)),
            (None, true) => None,
        };
        Ok(KeyQuery {
            route,
            limit,
            named,
        })
    }

    /// The key, which the endpoint needs.
    pub fn required(&self) -> Result<&Named, AdminError> {
        self.named.as_ref().ok_or_else(|| {
            AdminError::BadRequest(
                "query parameter `key` (or `value`, once per key part) is required".into(),
            )
        })
    }

    /// The key slots `named` reaches, each with its key (a value that makes none is a 400
    /// naming the part).
    pub fn targets(&self, named: &Named) -> Result<Vec<Target>, AdminError> {
        Ok(targets(&self.route.policy, named, self.limit)?)
    }

    /// The key an answer names: the one given, or the one the values made for the route's own
    /// key (else for the first limit they made one for), as `key=` takes it back.
    pub fn shown_key(&self, named: &Named, targets: &[Target]) -> serde_json::Value {
        match named {
            Named::Key(key) => key.as_str().into(),
            Named::Values(_) => crate::limit::lookup::shown_key(&self.route.policy, targets)
                .map_or(serde_json::Value::Null, |k| named_key(k).into()),
        }
    }
}

/// The key of an `[rls]` domain's rate limit (`route`'s limit `limit`) that `values` name: one
/// value per entry of the descriptors it counts, keyed as the rate limit keys them.
fn domain_key(
    state: &GatewayState,
    route: &Route,
    limit: Option<usize>,
    values: &[Vec<u8>],
) -> Result<String, AdminError> {
    let label = limit.map(|i| route.config.limits[i].name.as_str());
    let rls = state.rls.load();
    let domain = rls.domain(&route.config.name);
    let rule = domain.and_then(|d| d.rules().iter().find(|r| Some(r.label.as_str()) == label));
    if let Some(rule) = rule.filter(|r| r.entries != values.len()) {
        return Err(ValueError::Count {
            spec: format!("[{}]", rule.path),
            parts: rule.entries,
            given: values.len(),
        }
        .into());
    }
    // A descriptor's values are protobuf strings: text.
    let values: Vec<String> = values
        .iter()
        .map(|v| String::from_utf8_lossy(v).into())
        .collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    Ok(crate::rls::key_of_values(&values))
}

/// Why `route` names nothing to ask: an `[rls]` domain needs `limit` to name one of its rate
/// limits (`limited`: it named none of them), anything else is no route.
fn unknown(state: &GatewayState, route: String, limited: bool) -> AdminError {
    let rls = state.rls.load();
    let Some(domain) = rls.domain(&route) else {
        return AdminError::UnknownRoute(route);
    };
    let labels: Vec<&str> = domain.rules().iter().map(|r| r.label.as_str()).collect();
    let what = match limited {
        true => "has no rate limit by that name",
        false => "is an `[rls]` domain: `limit` names which of its rate limits to ask",
    };
    AdminError::BadRequest(format!(
        "`{route}` {what} (its rate limits: {})",
        labels.join(", ")
    ))
}

/// What a query asks of an `[rls]` domain it names (once, as no route is named), when it
/// names no `limit`: the whole domain, or one key of it by every rate limit.
pub(super) enum DomainAsked {
    /// `route=DOMAIN` alone: its refusals as recorded.
    Whole(String),
    /// With `key` or `value`: the domain's rate limits, each asked about that key.
    Key(Vec<String>),
}

/// What `query` asks of a domain, if it names one without a `limit`; anything else (a route,
/// a `limit`, a repeated `route`) is read as a key query.
pub(super) fn domain_asked(state: &GatewayState, query: Option<&str>) -> Option<DomainAsked> {
    let (mut route, mut keyed) = (None, false);
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "route" if route.is_none() => route = Some(value.into_owned()),
            "route" | "limit" => return None,
            "key" | "value" => keyed = true,
            _ => {}
        }
    }
    let route = route.filter(|r| state.table().route(r).is_none())?;
    let rls = state.rls.load();
    let domain = rls.domain(&route)?;
    Some(match keyed {
        false => DomainAsked::Whole(route),
        true => DomainAsked::Key(domain.rules().iter().map(|r| r.label.clone()).collect()),
    })
}

/// `query` asking about the rate limit `label` of the domain it names.
pub(super) fn with_limit(query: &str, label: &str) -> String {
    let label: String = form_urlencoded::byte_serialize(label.as_bytes()).collect();
    format!("{query}&limit={label}")
}

/// The answer of a key endpoint: its JSON body, or its error as a problem body.
pub(super) fn respond(
    answer: Result<serde_json::Value, AdminError>,
    request_id: &RequestId,
) -> Response {
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(request_id),
    }
}
