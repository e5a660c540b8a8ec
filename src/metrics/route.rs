//! A route's metric handles, resolved once per loaded config, so the hot path does no label
//! lookups: its decisions, each limit's exceedances, utilization and outcome counters, its
//! decision and upstream times.

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};

use super::label::{DecisionLabel, EXCEED_MODES, UPSTREAM_STATUSES};
use super::registry::Metrics;

/// Decision time, by where it was decided.
#[derive(Clone)]
pub struct DecisionDuration {
    /// The configured store (`backend` = redis or memory).
    pub store: Histogram,
    /// The in-process fallback (`backend` = local).
    pub local: Histogram,
}

/// A route's handles, resolved once per loaded config.
#[derive(Clone)]
pub struct RouteMetrics {
    decisions: [IntCounter; 9],
    /// Per limit, in config order: `[enforced, shadow]`.
    pub limit_exceeded: Vec<[IntCounter; 2]>,
    /// Per limit, in config order.
    pub limit_utilization: Vec<Histogram>,
    /// Store decision time.
    pub decision_duration: DecisionDuration,
    /// Deny-cache hits.
    pub deny_cache_hits: IntCounter,
    upstream_status: [IntCounter; 5],
    /// Time to the upstream's response head.
    pub upstream_duration: Histogram,
    /// Requests waiting in the delay room.
    pub delay_waiting: IntGauge,
    /// Per limit: reservations given back.
    pub outcome_refunds: Vec<IntCounter>,
    /// Per limit: counts cleared by a `reset_status` answer.
    pub outcome_resets: Vec<IntCounter>,
    /// Per limit: blocks its exceed started.
    pub blocks_started: Vec<IntCounter>,
    /// Per limit: units its answers settled to (`cost_from`; a limit without it has a counter
    /// that is not exported).
    pub cost_settled: Vec<IntCounter>,
    /// Per limit: units its answers stated beyond their reservation (as `cost_settled`).
    pub cost_overage: Vec<IntCounter>,
}

impl RouteMetrics {
    /// Resolves the handles of route `route` with these limit names; `reads_cost` says, per
    /// limit, whether it has `cost_from` (only those export the cost counters).
    pub fn new(
        metrics: &Metrics,
        route: &str,
        limits: &[String],
        reads_cost: &[bool],
        backend: &str,
    ) -> RouteMetrics {
        let per_limit = |vec: &IntCounterVec| -> Vec<IntCounter> {
            limits
                .iter()
                .map(|l| vec.with_label_values(&[route, l]))
                .collect()
        };
        let per_cost_limit = |vec: &IntCounterVec| -> Vec<IntCounter> {
            (limits
                .iter()
                .zip(reads_cost.iter().chain(std::iter::repeat(&false))))
            .map(|(l, &reads)| match reads {
                true => vec.with_label_values(&[route, l]),
                false => unexported(),
            })
            .collect()
        };
        RouteMetrics {
            decisions: DecisionLabel::ALL
                .map(|d| metrics.requests.with_label_values(&[route, d.as_str()])),
            limit_exceeded: limits
                .iter()
                .map(|l| {
                    EXCEED_MODES.map(|m| metrics.limit_exceeded.with_label_values(&[route, l, m]))
                })
                .collect(),
            limit_utilization: limits
                .iter()
                .map(|l| metrics.limit_utilization.with_label_values(&[route, l]))
                .collect(),
            decision_duration: DecisionDuration {
                store: metrics
                    .decision_duration
                    .with_label_values(&[route, backend]),
                local: metrics
                    .decision_duration
                    .with_label_values(&[route, "local"]),
            },
            deny_cache_hits: metrics.deny_cache_hits.with_label_values(&[route]),
            upstream_status: UPSTREAM_STATUSES
                .map(|s| metrics.upstream_requests.with_label_values(&[route, s])),
            upstream_duration: metrics.upstream_duration.with_label_values(&[route]),
            delay_waiting: metrics.delay_waiting.with_label_values(&[route]),
            outcome_refunds: per_limit(&metrics.outcome_refunds),
            outcome_resets: per_limit(&metrics.outcome_resets),
            blocks_started: per_limit(&metrics.blocks_started),
            cost_settled: per_cost_limit(&metrics.cost_settled),
            cost_overage: per_cost_limit(&metrics.cost_overage),
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

/// A counter registered nowhere: what a limit counts in a family it has no series in.
fn unexported() -> IntCounter {
    IntCounter::new("unexported", "not exported").expect("a valid name")
}
