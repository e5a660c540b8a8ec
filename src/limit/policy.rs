//! A route's rate-limit policy, compiled once per loaded config: its limits as the stores take
//! them (one [`LimitSet`] per tier: the default, and one per segment or plan that changes a
//! value), their `RateLimit-Policy` headers, the key parts, and the metric handles. The limiter
//! reads nothing else of the config on the request path.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use http::HeaderValue;
use ipnet::IpNet;

use super::headers::policy_header;
use crate::config::{Config, OnError, RouteConfig};
use crate::key::JwtVerifier;
use crate::metrics::RouteMetrics;
use crate::store::LimitSet;
use crate::tier::{Membership, TierName};

/// One set of limit values: the route's own, or a segment's or plan's.
#[derive(Debug)]
pub struct Tier {
    /// `None` for the route's own values.
    pub name: Option<TierName>,
    /// The limits as the stores apply them.
    pub limits: Arc<LimitSet>,
    /// `RateLimit-Policy` for these values (`None` when the route has no limits).
    pub policy_header: Option<HeaderValue>,
}

impl Tier {
    fn new(name: Option<TierName>, route: &RouteConfig, value: impl Fn(usize) -> u64) -> Tier {
        let limits = LimitSet::of_route_with(route, value);
        let policy_header = policy_header(&route.limits, &limits);
        Tier {
            name,
            limits: Arc::new(limits),
            policy_header,
        }
    }
}

/// Everything the limiter needs to decide for one route.
pub struct RoutePolicy {
    /// The route's config.
    pub config: Arc<RouteConfig>,
    /// The route's own limit values.
    default: Tier,
    /// Per segment (config order) and per plan, the values that differ from the default.
    segments: Vec<(String, Tier)>,
    plans: HashMap<String, Tier>,
    /// Who is in which segment or plan.
    membership: Arc<Membership>,
    /// What a store failure does here: the route's `on_error`, else `store.on_error`.
    pub on_error: OnError,
    /// Metric handles.
    pub metrics: Arc<RouteMetrics>,
    /// Requests waiting in the delay room now (shared across reloads).
    pub waiting: Arc<AtomicUsize>,
    /// The verifier of `jwt:` key parts.
    pub jwt: Option<Arc<JwtVerifier>>,
    /// IPv6 clients' `ip` keys are their network of this prefix length.
    pub ipv6_prefix: u8,
    /// The first segment of every storage key.
    pub key_prefix: String,
}

impl RoutePolicy {
    /// Compiles the policy of `route`, one of `config`'s routes.
    pub fn new(
        route: Arc<RouteConfig>,
        config: &Config,
        metrics: Arc<RouteMetrics>,
        waiting: Arc<AtomicUsize>,
        jwt: Option<Arc<JwtVerifier>>,
    ) -> RoutePolicy {
        let membership = config.membership.clone();
        let default = Tier::new(None, &route, |i| route.limits[i].limit);
        let segments = membership
            .segment_names()
            .filter(|s| route.limits.iter().any(|l| l.segments.contains_key(*s)))
            .map(|s| {
                let tier = Tier::new(Some(TierName::Segment(s.to_string())), &route, |i| {
                    let l = &route.limits[i];
                    l.segments.get(s).copied().unwrap_or(l.limit)
                });
                (s.to_string(), tier)
            })
            .collect();
        let plan_names: Vec<&String> = route.limits.iter().flat_map(|l| l.plans.keys()).collect();
        let plans = plan_names
            .into_iter()
            .map(|p| {
                let tier = Tier::new(Some(TierName::Plan(p.clone())), &route, |i| {
                    let l = &route.limits[i];
                    l.plans.get(p).copied().unwrap_or(l.limit)
                });
                (p.clone(), tier)
            })
            .collect();
        RoutePolicy {
            on_error: route.on_error.unwrap_or(config.store.on_error),
            config: route,
            default,
            segments,
            plans,
            membership,
            metrics,
            waiting,
            jwt,
            ipv6_prefix: config.server.ipv6_prefix,
            key_prefix: config.store.key_prefix.clone(),
        }
    }

    /// The route's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether the route counts anything.
    pub fn has_limits(&self) -> bool {
        !self.config.limits.is_empty()
    }

    /// Whether a client at `ip` passes uncounted.
    pub fn exempts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.config
            .exempt
            .iter()
            .any(|net: &IpNet| net.contains(&ip))
    }

    /// The values in force for `key`: its segment's (the key read as a numeric user id, first
    /// segment in config order) when this route's limits give that segment values, else its
    /// plan's, else the route's own.
    pub fn tier_for(&self, key: &str) -> &Tier {
        if !self.segments.is_empty() {
            // The user's segment, even when this route gives it no values: a user in several
            // segments belongs to the first, here as everywhere.
            if let Some(segment) = self.membership.segment_of(key) {
                if let Some((_, tier)) = self.segments.iter().find(|(s, _)| s == segment) {
                    return tier;
                }
            }
        }
        if !self.plans.is_empty() {
            if let Some(plan) = self.membership.plan_of(key) {
                if let Some(tier) = self.plans.get(plan) {
                    return tier;
                }
            }
        }
        &self.default
    }

    /// The route's own values.
    pub fn default_tier(&self) -> &Tier {
        &self.default
    }
}
