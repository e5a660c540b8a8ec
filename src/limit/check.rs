//! The limiter's step of the request path: derive the request's key, ask the [`Limiter`], and
//! say what the request gets: forwarded (with rate-limit headers on the answer), or the
//! gateway's own 429 (or 503 when the store failed and the route fails closed). A rejection is
//! a response, never an error, so the connection stays open.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use http::request::Parts;
use http::Response;

use super::headers::{add_headers, too_many_requests};
use super::{Limiter, RoutePolicy, Verdict, Waiting};
use crate::error::GatewayError;
use crate::key::{derive_key, logged_key, KeySource, MissingKeyPart};
use crate::request_id::RequestId;

/// What the limiter concluded for one request.
#[derive(Debug)]
pub struct Checked {
    /// The verdict, counted once.
    pub verdict: Verdict,
    /// The derived key; `None` for routes without limits and exempt clients.
    pub key: Option<String>,
}

/// Decides one request of `policy`'s route from `client_ip` (after trusted-proxy resolution):
/// a route without limits only counts it, an exempt client passes uncounted, anyone else is
/// decided by key.
pub async fn check(
    limiter: &Arc<Limiter>,
    policy: &Arc<RoutePolicy>,
    head: &Parts,
    client_ip: IpAddr,
) -> Result<Checked, MissingKeyPart> {
    if !policy.has_limits() {
        let verdict = limiter.decide(policy, "", 1, Waiting::Allowed).await;
        return Ok(Checked { verdict, key: None });
    }
    if policy.exempts(client_ip) {
        let verdict = limiter.exempt(policy);
        return Ok(Checked { verdict, key: None });
    }
    let source = KeySource {
        route: policy.name(),
        method: &head.method,
        path: head.uri.path(),
        query: head.uri.query(),
        headers: &head.headers,
        client_ip,
        ipv6_prefix: policy.ipv6_prefix,
        jwt: policy.jwt.as_deref(),
    };
    let key = derive_key(&policy.config.key, policy.config.on_missing_key, &source)?;
    let verdict = limiter.decide(policy, &key, 1, Waiting::Allowed).await;
    Ok(Checked {
        verdict,
        key: Some(key),
    })
}

impl Checked {
    /// Whether the request goes on to the upstream.
    pub fn forwards(&self) -> bool {
        self.verdict.forwards()
    }

    /// Adds the rate-limit headers to a forwarded request's answer, unless the route turned them
    /// off. A shadow answer over the limit carries them too, saying what enforcing would: no
    /// quota left, and when the next unit comes back.
    pub fn add_headers(&self, policy: &RoutePolicy, response: &mut Response<Body>) {
        let Some(decision) = &self.verdict.decision else {
            return;
        };
        if policy.config.headers {
            let tier = policy.tier_for(self.key.as_deref().unwrap_or(""));
            add_headers(response.headers_mut(), tier, decision);
        }
    }

    /// The gateway's own answer to a request it does not forward.
    pub fn answer(&self, policy: &RoutePolicy, request_id: &RequestId) -> Response<Body> {
        match &self.verdict.decision {
            Some(decision) => {
                let tier = policy.tier_for(self.key.as_deref().unwrap_or(""));
                too_many_requests(policy.name(), tier, decision, request_id)
            }
            None => GatewayError::StoreUnavailable.into_response(request_id),
        }
    }

    /// The limit that decided (the rejecting one, else the tightest), for the access log.
    pub fn limit_name<'p>(&self, policy: &'p RoutePolicy) -> Option<&'p str> {
        self.verdict
            .limit_index()
            .map(|i| policy.config.limits[i].name.as_str())
    }

    /// The key as the access log shows it (see [`logged_key`]).
    pub fn logged_key(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.key.as_deref().map(logged_key)
    }
}
