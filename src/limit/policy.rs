//! A route's rate-limit policy, compiled once per loaded config: its key slots (the route's key
//! and each other key a limit counts), its limits as the stores take them (one [`Tier`] per set
//! of values: the route's own, and each segment's or plan's that changes one), their
//! `RateLimit-Policy` headers, the outcome rules, and the metric handles. The limiter reads
//! nothing else of the config on the request path.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::key_slot::KeySlot;
use super::layout::Layout;
use super::outcome_rule::{AtEnd, OutcomeRule};
use super::tier::Tier;
use crate::config::ExceedMode;
use crate::config::{
    Config, HashSecret, KeyPart, KeySpec, OnError, PathCase, RouteConfig, UnknownPlan,
};
use crate::cost::Reserve;
use crate::key::JwtVerifier;
use crate::metrics::RouteMetrics;
use crate::store::layout::blocked_index;
use crate::store::{LimitSet, Refusals};
use crate::tier::{Membership, TierName};

/// Everything the limiter needs to decide for one route.
pub struct RoutePolicy {
    /// The route's config.
    pub config: Arc<RouteConfig>,
    /// The keys its limits count, in slot order (a limit's slot is in its `Limit`'s state).
    pub slots: Vec<KeySlot>,
    /// The slot of the route's own key, when a limit counts it.
    pub route_slot: Option<usize>,
    /// Per limit, what its response does to its charge (`None`: charged whatever the answer).
    pub outcomes: Vec<Option<OutcomeRule>>,
    /// What an attempt reserves of the limits whose answer states the cost (`None`: the route
    /// has none).
    pub reserve: Option<Reserve>,
    default: Arc<Tier>,
    segments: Vec<(String, Arc<Tier>)>,
    plans: HashMap<String, Arc<Tier>>,
    /// Plans by the key as the route derives it, when the route's one key part is transformed
    /// (hashed, normalised): the plans file holds raw keys.
    plan_keys: Option<HashMap<String, String>>,
    membership: Arc<Membership>,
    /// What a key in no plan gets.
    pub unknown_plan: UnknownPlan,
    /// What a store failure does here: the route's `on_error`, else `store.on_error`.
    pub on_error: OnError,
    /// Metric handles.
    pub metrics: Arc<RouteMetrics>,
    /// Requests waiting in the delay room now (shared across reloads).
    pub waiting: Arc<AtomicUsize>,
    /// The verifier of `jwt:` key parts.
    pub jwt: Option<Arc<JwtVerifier>>,
    /// The secret of `hash = true` key parts.
    pub hash_secret: Option<HashSecret>,
    /// IPv6 clients' `ip` keys are their network of this prefix length.
    pub ipv6_prefix: u8,
    /// How paths compare (the `path` key part follows it).
    pub path_case: PathCase,
    /// The first segment of every storage key.
    pub key_prefix: String,
    /// The headers the route's key parts read, and `Accept-Encoding` where its answers' cost is
    /// read from their body (the gateway asks for `identity`): a client's `Connection` may not
    /// name them ([`crate::connection`]).
    pub guarded_headers: Vec<http::HeaderName>,
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
        let mut layout = Layout::of(&route);
        layout.settle_us = settle_us(&route, config);
        layout.flight_wait_us = flight_wait_us(&route, config);
        // Every route but a shadow one refuses: a delay route too, with a 429 when the wait
        // would pass `max_delay` (its window refuses the key now either way); a shadow route's
        // breaches refuse no one.
        let enforcing = !matches!(route.on_exceed, ExceedMode::Shadow);
        let recorded = vec![enforcing; route.limits.len()];
        RoutePolicy::laid_out(route, layout, config, metrics, waiting, jwt, recorded)
    }

    /// The policy of a route whose keys the caller gives instead of deriving them from a
    /// request (the rate-limit service: a key per matched descriptor, [`super::RequestKeys::per_slot`]):
    /// limit `i` counts key slot `i` alone, whose Redis keys `tags[i]` (`~` and hex) tells
    /// apart from every other slot's. `recorded` says, per limit, whether its refusals are
    /// recorded for `/admin/blocked` (a shadow-mode rate limit's are not).
    pub fn with_given_keys(
        route: Arc<RouteConfig>,
        tags: Vec<String>,
        config: &Config,
        metrics: Arc<RouteMetrics>,
        recorded: Vec<bool>,
    ) -> RoutePolicy {
        let layout = Layout::given(&route, tags);
        let waiting = Default::default();
        RoutePolicy::laid_out(route, layout, config, metrics, waiting, None, recorded)
    }

    fn laid_out(
        route: Arc<RouteConfig>,
        layout: Layout,
        config: &Config,
        metrics: Arc<RouteMetrics>,
        waiting: Arc<AtomicUsize>,
        jwt: Option<Arc<JwtVerifier>>,
        recorded: Vec<bool>,
    ) -> RoutePolicy {
        let membership = config.membership.clone();
        let refusals = recorded.iter().any(|&r| r).then(|| Refusals {
            index: blocked_index(&config.store.key_prefix, &route.name),
            recorded,
        });
        let default = layout.tier(None, &route, &refusals, |i| route.limits[i].limit);
        let segments = membership
            .segment_names()
            .filter(|s| route.limits.iter().any(|l| l.segments.contains_key(*s)))
            .map(|s| {
                let name = Some(TierName::Segment(s.to_string()));
                let tier = layout.tier(name, &route, &refusals, |i| {
                    let l = &route.limits[i];
                    l.segments.get(s).copied().unwrap_or(l.limit)
                });
                (s.to_string(), tier)
            })
            .collect();
        let plan_names: Vec<&String> = route.limits.iter().flat_map(|l| l.plans.keys()).collect();
        let plans: HashMap<String, Arc<Tier>> = plan_names
            .into_iter()
            .map(|p| {
                let tier = layout.tier(Some(TierName::Plan(p.clone())), &route, &refusals, |i| {
                    let l = &route.limits[i];
                    l.plans.get(p).copied().unwrap_or(l.limit)
                });
                (p.clone(), tier)
            })
            .collect();
        let hash_secret = config.keys.hash_secret.clone();
        let ctx = crate::key::ValueContext {
            secret: hash_secret.as_ref(),
            ipv6_prefix: config.server.ipv6_prefix,
            path_case: config.server.path_case,
        };
        let plan_keys = (!plans.is_empty())
            .then(|| transformed_plan_keys(&route.key, &membership, &ctx))
            .flatten();
        let outcomes: Vec<Option<OutcomeRule>> = route
            .limits
            .iter()
            .map(|l| {
                let at_end = match (&l.cost_from, l.algorithm.get().has_window()) {
                    (Some(from), _) => Some(AtEnd::Cost(from.clone())),
                    (None, false) => Some(AtEnd::Slot),
                    (None, true) => None,
                };
                l.needs_response().then(|| OutcomeRule {
                    count: l.count_status.clone(),
                    reset: l.reset_status.clone(),
                    at_end,
                    confirms: l.counts_outcomes()
                        || matches!(route.on_exceed, crate::config::ExceedMode::Block(_)),
                })
            })
            .collect();
        let reserve = (route.limits.iter())
            .find(|l| l.cost_from.is_some())
            .map(|l| l.cost.clone());
        let mut guarded_headers = key_headers(
            layout.slots.iter().map(|s| &s.spec).chain([&route.key]),
            config.server.client_ip_header,
        );
        if reads_answer_body(&outcomes) {
            guarded_headers.push(http::header::ACCEPT_ENCODING);
        }
        RoutePolicy {
            guarded_headers,
            on_error: route.on_error.unwrap_or(config.store.on_error),
            slots: layout.slots,
            route_slot: layout.route_slot,
            outcomes,
            reserve,
            config: route,
            default,
            segments,
            plans,
            plan_keys,
            membership,
            unknown_plan: config.unknown_plan,
            metrics,
            waiting,
            jwt,
            hash_secret,
            ipv6_prefix: config.server.ipv6_prefix,
            path_case: config.server.path_case,
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

    /// Whether an allowed request holds a reservation its answer settles (a count by status,
    /// a slot in flight, a cost the answer states).
    pub fn settles(&self) -> bool {
        self.outcomes.iter().any(Option::is_some)
    }

    /// Whether some limit reads its cost from the answer's body (the upstream is then asked for
    /// an answer the gateway can read as it passes: `Accept-Encoding: identity`).
    pub fn reads_answer_body(&self) -> bool {
        reads_answer_body(&self.outcomes)
    }

    /// Whether a client at `ip` passes uncounted.
    pub fn exempts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.config.exempt.iter().any(|net| net.contains(&ip))
    }

    /// Whether some limit has segment or plan values (the route's key picks them).
    pub fn has_tiers(&self) -> bool {
        !self.segments.is_empty() || !self.plans.is_empty()
    }

    /// Whether the route gives plans values and a key on no plan is refused.
    pub fn needs_plan(&self) -> bool {
        !self.plans.is_empty() && self.unknown_plan == UnknownPlan::Reject
    }

    /// The values in force for the route key `key`: its segment's (the key read as a numeric
    /// user id, first segment in config order) when this route's limits give that segment
    /// values, else its plan's (the route's own when it gives the plan none), else the route's
    /// own. `None` for a key on no plan when the route refuses such keys.
    pub fn tier_for(&self, key: &str) -> Option<&Arc<Tier>> {
        if !self.segments.is_empty() {
            // The user's segment, even when this route gives it no values: a user in several
            // segments belongs to the first, here as everywhere.
            if let Some(segment) = self.membership.segment_of(key) {
                if let Some((_, tier)) = self.segments.iter().find(|(s, _)| s == segment) {
                    return Some(tier);
                }
            }
        }
        if !self.plans.is_empty() {
            let plan = match &self.plan_keys {
                Some(keys) => keys.get(key).map(String::as_str),
                None => self.membership.plan_of(key),
            };
            match plan {
                // A plan this route gives no values keeps the route's own.
                Some(plan) => return Some(self.plans.get(plan).unwrap_or(&self.default)),
                None if self.unknown_plan == UnknownPlan::Reject => return None,
                None => {}
            }
        }
        Some(&self.default)
    }

    /// The route's own values.
    pub fn default_tier(&self) -> &Arc<Tier> {
        &self.default
    }

    /// The slot limit `i` counts.
    pub fn slot_of(&self, i: usize) -> usize {
        self.default.limits.slot_of(i)
    }
}

/// The limits of `route` with their own values, as the stores take them (for tools and tests
/// that call a store directly).
pub fn limit_set(route: &RouteConfig) -> Arc<LimitSet> {
    let mut layout = Layout::of(route);
    // as an embedded layer's: no upstream whose timeouts bound a reservation
    layout.settle_us = EMBEDDED_SETTLE.as_micros() as u64;
    layout
        .tier(None, route, &None, |i| route.limits[i].limit)
        .limits
        .clone()
}

/// The plans file's raw keys as the route derives them, when its key is one part with options.
fn transformed_plan_keys(
    key: &KeySpec,
    membership: &Membership,
    ctx: &crate::key::ValueContext<'_>,
) -> Option<HashMap<String, String>> {
    let [part] = key.parts.as_slice() else {
        return None;
    };
    if !part.transforms() {
        return None;
    }
    Some(
        membership
            .plans()
            .filter_map(|(raw, plan)| {
                let derived = crate::key::key_of_values(key, &[raw.as_bytes()], ctx).ok()?;
                Some((derived, plan.to_string()))
            })
            .collect(),
    )
}

/// Whether some limit's cost is read from the answer's body.
fn reads_answer_body(outcomes: &[Option<OutcomeRule>]) -> bool {
    (outcomes.iter().flatten())
        .any(|r| matches!(&r.at_end, Some(AtEnd::Cost(from)) if from.reads_body()))
}

/// The headers key parts of `specs` read: a `header:` part's, `Authorization` for `jwt:`, and
/// for `ip` a `Forwarded` the client IP is read from (the gateway sets `X-Forwarded-For` and
/// `X-Real-IP` itself).
fn key_headers<'s>(
    specs: impl Iterator<Item = &'s KeySpec>,
    client_ip_header: crate::config::ClientIpHeader,
) -> Vec<http::HeaderName> {
    let mut names = Vec::new();
    for part in specs.flat_map(|s| &s.parts) {
        let name = match &part.part {
            KeyPart::Header(name) => name.clone(),
            KeyPart::Jwt(_) => http::header::AUTHORIZATION,
            KeyPart::Ip if client_ip_header == crate::config::ClientIpHeader::Forwarded => {
                http::header::FORWARDED
            }
            _ => continue,
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The longest a reservation of `route` stays in flight, in µs: its upstream's connect and
/// answer timeouts (and a second for the settlement to reach the store). A route of an embedded
/// layer has no upstream the gateway times: its inner service answers within
/// [`EMBEDDED_SETTLE`].
fn settle_us(route: &RouteConfig, config: &Config) -> u64 {
    let upstream = route
        .upstream
        .as_ref()
        .and_then(|u| config.upstreams.get(u));
    let settle = match upstream {
        Some(u) => u.connect_timeout + u.timeout + std::time::Duration::from_secs(1),
        None => EMBEDDED_SETTLE,
    };
    settle.as_micros() as u64
}

/// The longest wait a refusal on reservations of `route` still in flight tells, in µs: its
/// upstream's `timeout`, within which an attempt that went out is answered (0 without an
/// upstream: `settle_us` alone bounds it).
fn flight_wait_us(route: &RouteConfig, config: &Config) -> u64 {
    let upstream = route
        .upstream
        .as_ref()
        .and_then(|u| config.upstreams.get(u));
    upstream.map_or(0, |u| u.timeout.as_micros() as u64)
}

/// How long an embedded layer's reservation is taken to stay in flight at most.
pub const EMBEDDED_SETTLE: std::time::Duration = std::time::Duration::from_secs(30);
