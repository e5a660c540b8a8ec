//! The metrics of SPEC section 7, registered once into a `prometheus::Registry`. Label values
//! come only from config names and fixed enums, never from client input, so cardinality is
//! bounded by the config. Per-route handles are resolved when a config is loaded
//! ([`RouteMetrics`]), so the hot path does no label lookups.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

/// Every metric handle, registered once.
#[derive(Clone)]
pub struct Metrics {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// `slidegate_requests_total{route,decision}`
    pub requests: IntCounterVec,
    /// `slidegate_limit_exceeded_total{route,limit}`
    pub limit_exceeded: IntCounterVec,
    /// `slidegate_limit_utilization_ratio{route,limit}`
    pub limit_utilization: HistogramVec,
    /// `slidegate_decision_duration_seconds{route,backend}`
    pub decision_duration: HistogramVec,
    /// `slidegate_store_errors_total{kind}`
    pub store_errors: IntCounterVec,
    /// `slidegate_deny_cache_hits_total{route}`
    pub deny_cache_hits: IntCounterVec,
    /// `slidegate_upstream_requests_total{route,status}`
    pub upstream_requests: IntCounterVec,
    /// `slidegate_upstream_duration_seconds{route}`
    pub upstream_duration: HistogramVec,
    /// `slidegate_config_reloads_total{result}`
    pub config_reloads: IntCounterVec,
}

/// The `decision` label values.
pub const DECISIONS: [&str; 7] = [
    "allowed",
    "rejected",
    "delayed",
    "blocked",
    "shadow_rejected",
    "store_error_allowed",
    "store_error_denied",
];

/// The `status` label values of upstream requests.
pub const UPSTREAM_STATUSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];

impl Metrics {
    /// Creates and registers every metric in a fresh registry.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("registered once");
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("registered once");
            h
        };
        let latency = vec![
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5,
        ];
        let metrics = Metrics {
            requests: counter(
                "slidegate_requests_total",
                "Requests by route and rate-limit decision.",
                &["route", "decision"],
            ),
            limit_exceeded: counter(
                "slidegate_limit_exceeded_total",
                "429s by route and the limit they name.",
                &["route", "limit"],
            ),
            limit_utilization: histogram(
                "slidegate_limit_utilization_ratio",
                "Used / limit after each decision.",
                &["route", "limit"],
                (1..=10).map(|i| i as f64 / 10.0).collect(),
            ),
            decision_duration: histogram(
                "slidegate_decision_duration_seconds",
                "Time to decide one request in the store.",
                &["route", "backend"],
                latency.clone(),
            ),
            store_errors: counter(
                "slidegate_store_errors_total",
                "Store failures by kind.",
                &["kind"],
            ),
            deny_cache_hits: counter(
                "slidegate_deny_cache_hits_total",
                "429s answered from the local deny cache.",
                &["route"],
            ),
            upstream_requests: counter(
                "slidegate_upstream_requests_total",
                "Forwarded requests by route and upstream status class.",
                &["route", "status"],
            ),
            upstream_duration: histogram(
                "slidegate_upstream_duration_seconds",
                "Time until the upstream's response head.",
                &["route"],
                latency,
            ),
            config_reloads: counter(
                "slidegate_config_reloads_total",
                "Config reloads by result.",
                &["result"],
            ),
            registry,
        };
        for kind in ["timeout", "connection", "script", "other"] {
            metrics.store_errors.with_label_values(&[kind]);
        }
        for result in ["success", "failure"] {
            metrics.config_reloads.with_label_values(&[result]);
        }
        metrics
    }

    /// Prometheus text format of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        out
    }

    /// Counts a store failure.
    pub fn store_error(&self, kind: &str) {
        self.store_errors.with_label_values(&[kind]).inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A route's handles, resolved once per loaded config.
#[derive(Clone)]
pub struct RouteMetrics {
    decisions: [IntCounter; 7],
    /// Per limit, in config order.
    pub limit_exceeded: Vec<IntCounter>,
    /// Per limit, in config order.
    pub limit_utilization: Vec<Histogram>,
    /// Store decision time, by backend: `[store, local fallback]`.
    pub decision_duration: [Histogram; 2],
    /// Deny-cache hits.
    pub deny_cache_hits: IntCounter,
    upstream_status: [IntCounter; 5],
    /// Time to the upstream's response head.
    pub upstream_duration: Histogram,
}

/// A request's single entry in `slidegate_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionLabel {
    /// Forwarded at once.
    Allowed,
    /// 429 (including from the deny cache, and the exceed that starts a block).
    Rejected,
    /// Forwarded after waiting.
    Delayed,
    /// 429 while the key serves a block.
    Blocked,
    /// Over the limit on a shadow route, forwarded anyway.
    ShadowRejected,
    /// Store failed; forwarded (`on_error = "allow"`).
    StoreErrorAllowed,
    /// Store failed; 503 (`on_error = "deny"`).
    StoreErrorDenied,
}

impl RouteMetrics {
    /// Resolves the handles of route `route` with these limit names.
    pub fn new(metrics: &Metrics, route: &str, limits: &[String], backend: &str) -> RouteMetrics {
        RouteMetrics {
            decisions: DECISIONS.map(|d| metrics.requests.with_label_values(&[route, d])),
            limit_exceeded: limits
                .iter()
                .map(|l| metrics.limit_exceeded.with_label_values(&[route, l]))
                .collect(),
            limit_utilization: limits
                .iter()
                .map(|l| metrics.limit_utilization.with_label_values(&[route, l]))
                .collect(),
            decision_duration: [
                metrics
                    .decision_duration
                    .with_label_values(&[route, backend]),
                metrics
                    .decision_duration
                    .with_label_values(&[route, "local"]),
            ],
            deny_cache_hits: metrics.deny_cache_hits.with_label_values(&[route]),
            upstream_status: UPSTREAM_STATUSES
                .map(|s| metrics.upstream_requests.with_label_values(&[route, s])),
            upstream_duration: metrics.upstream_duration.with_label_values(&[route]),
        }
    }

    /// Counts the request once under its decision.
    pub fn decision(&self, label: DecisionLabel) {
        self.decisions[label as usize].inc();
    }

    /// Counts an upstream answer (`Some(status)`) or failure (`None`).
    pub fn upstream(&self, status: Option<u16>) {
        let i = match status {
            Some(200..=299) => 0,
            Some(300..=399) => 1,
            Some(400..=499) => 2,
            Some(_) => 3,
            None => 4,
        };
        self.upstream_status[i].inc();
    }
}
