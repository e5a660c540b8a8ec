//! Every metric handle, registered once into one `prometheus::Registry`, and the counts that
//! are not per route (store errors, reloads) and the series a reload forgets.

use super::label::{DecisionLabel, EXCEED_MODES, STORE_ERROR_KINDS, UPSTREAM_STATUSES};
use super::process;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every metric handle, registered once.
#[derive(Clone)]
pub struct Metrics {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// `slidegate_requests_total{route,decision}`
    pub requests: IntCounterVec,
    /// `slidegate_limit_exceeded_total{route,limit,mode}`
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
    /// `slidegate_delay_waiting{route}`
    pub delay_waiting: IntGaugeVec,
    /// `slidegate_deny_cache_entries`, set when scraped.
    pub deny_cache_entries: IntGauge,
    /// `slidegate_outcome_refunds_total{route,limit}`
    pub outcome_refunds: IntCounterVec,
    /// `slidegate_outcome_resets_total{route,limit}`
    pub outcome_resets: IntCounterVec,
    /// `slidegate_blocks_started_total{route,limit}`
    pub blocks_started: IntCounterVec,
    /// `slidegate_cost_settled_total{route,limit}`
    pub cost_settled: IntCounterVec,
    /// `slidegate_cost_overage_total{route,limit}`
    pub cost_overage: IntCounterVec,
    /// `slidegate_rls_duration_seconds{route}`: a rate-limit service call's handling time.
    pub rls_duration: HistogramVec,
    /// `slidegate_store_evicted_keys_total`: keys Redis evicted (its `evicted_keys`, summed
    /// over a cluster's primaries), read when scraped.
    pub store_evicted_keys: IntCounter,
    /// `slidegate_store_replicas{node}`: each Redis master's replicas as last seen (kept with
    /// `store.replica_acks` only), set when scraped.
    pub store_replicas: IntGaugeVec,
    /// `slidegate_store_replica_acks`: `store.replica_acks`, set when scraped.
    pub store_replica_acks: IntGauge,
}

impl Metrics {
    /// Creates and registers every metric in a fresh registry, with the process collector.
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
        let delay_waiting = IntGaugeVec::new(
            Opts::new(
                "slidegate_delay_waiting",
                "Requests waiting in the delay room now.",
            ),
            &["route"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(delay_waiting.clone()))
            .expect("registered once");
        let deny_cache_entries = IntGauge::new(
            "slidegate_deny_cache_entries",
            "Keys held in the deny cache now.",
        )
        .expect("valid metric");
        registry
            .register(Box::new(deny_cache_entries.clone()))
            .expect("registered once");
        let build_info = IntGaugeVec::new(
            Opts::new("slidegate_build_info", "The running build (always 1)."),
            &["version"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(build_info.clone()))
            .expect("registered once");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let store_evicted_keys = IntCounter::new(
            "slidegate_store_evicted_keys_total",
            "Keys the Redis store evicted (INFO stats evicted_keys, summed over a cluster's primaries); limit keys among them lose their counts.",
        )
        .expect("valid metric");
        registry
            .register(Box::new(store_evicted_keys.clone()))
            .expect("registered once");
        let store_replicas = IntGaugeVec::new(
            Opts::new(
                "slidegate_store_replicas",
                "Replicas each Redis master has now, as last seen (ROLE at each connection, WAIT's counts); kept while store.replica_acks is above 0.",
            ),
            &["node"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(store_replicas.clone()))
            .expect("registered once");
        let store_replica_acks = IntGauge::new(
            "slidegate_store_replica_acks",
            "store.replica_acks: the replicas an allowed decision waits for (or every replica its master has, when fewer).",
        )
        .expect("valid metric");
        registry
            .register(Box::new(store_replica_acks.clone()))
            .expect("registered once");
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(process::ProcessMetrics::for_self()))
            .expect("registered once");

        let metrics = Metrics {
            requests: counter(
                "slidegate_requests_total",
                "Requests by route and rate-limit decision.",
                &["route", "decision"],
            ),
            limit_exceeded: counter(
                "slidegate_limit_exceeded_total",
                "Exceedances by route, each limit that refused, and whether enforced or shadow.",
                &["route", "limit", "mode"],
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
                "Failed store calls by kind.",
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
                latency.clone(),
            ),
            config_reloads: counter(
                "slidegate_config_reloads_total",
                "Config reloads by result.",
                &["result"],
            ),
            outcome_refunds: counter(
                "slidegate_outcome_refunds_total",
                "Reservations of outcome-counted limits given back (the answer's status is not counted or resets the count, or the upstream never saw the attempt).",
                &["route", "limit"],
            ),
            outcome_resets: counter(
                "slidegate_outcome_resets_total",
                "Answered counts cleared by a reset_status answer (attempts in flight stay counted).",
                &["route", "limit"],
            ),
            blocks_started: counter(
                "slidegate_blocks_started_total",
                "Blocks started, by the limit whose exceed started them.",
                &["route", "limit"],
            ),
            cost_settled: counter(
                "slidegate_cost_settled_total",
                "Units charged to limits with cost_from: each answer's settled cost (its reservation when it stated none), summed.",
                &["route", "limit"],
            ),
            cost_overage: counter(
                "slidegate_cost_overage_total",
                "Units answers of limits with cost_from stated beyond their reservation, charged at once.",
                &["route", "limit"],
            ),
            rls_duration: histogram(
                "slidegate_rls_duration_seconds",
                "Time to answer one ShouldRateLimit call of Envoy's rate-limit service API, by domain.",
                &["route"],
                latency,
            ),
            delay_waiting,
            deny_cache_entries,
            store_evicted_keys,
            store_replicas,
            store_replica_acks,
            registry,
        };
        for kind in STORE_ERROR_KINDS {
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

    /// [`Metrics::count_store_error`] as the hook a store calls on every failed call that carried
    /// no decision.
    pub fn store_error_hook(&self) -> crate::store::OnError {
        let metrics = self.clone();
        std::sync::Arc::new(move |e: &crate::store::StoreError| metrics.count_store_error(e))
    }

    /// Counts a store failure (a decision it failed, or a call without decisions) in
    /// `slidegate_store_errors_total` under its kind.
    pub fn count_store_error(&self, error: &crate::store::StoreError) {
        self.store_errors.with_label_values(&[error.kind()]).inc();
    }

    /// Counts a decision the in-process store made in its overflow sketch (it was full of other
    /// keys) in `slidegate_store_errors_total{kind="full"}`.
    pub fn count_store_full(&self) {
        self.store_errors.with_label_values(&["full"]).inc();
    }

    /// Sets `slidegate_store_replica_acks` and `slidegate_store_replicas` to what the store
    /// says now: `replica_acks`, and each master's replicas (a master no longer listed, one a
    /// failover replaced, loses its series).
    pub fn set_replicas(&self, replica_acks: u32, replicas: &[(String, u32)]) {
        self.store_replica_acks.set(i64::from(replica_acks));
        self.store_replicas.reset();
        for (node, n) in replicas {
            self.store_replicas
                .with_label_values(&[node.as_str()])
                .set(i64::from(*n));
        }
    }

    /// Drops the series of limits that a reload removed or renamed on a route (named as they were).
    pub fn forget_limits(&self, route: &str, limits: &[String]) {
        for l in limits {
            for mode in EXCEED_MODES {
                let _ = self.limit_exceeded.remove_label_values(&[route, l, mode]);
            }
            let _ = self.limit_utilization.remove_label_values(&[route, l]);
            for counter in [
                &self.outcome_refunds,
                &self.outcome_resets,
                &self.cost_settled,
                &self.cost_overage,
                &self.blocks_started,
            ] {
                let _ = counter.remove_label_values(&[route, l]);
            }
        }
    }

    /// Drops the cost series of limits that a reload left without `cost_from` (only a limit that
    /// reads its cost from the answer has them).
    pub fn forget_costs(&self, route: &str, limits: &[String]) {
        for l in limits {
            for counter in [&self.cost_settled, &self.cost_overage] {
                let _ = counter.remove_label_values(&[route, l]);
            }
        }
    }

    /// Drops every series of a route that a reload removed (its limits as they were).
    pub fn forget_route(&self, route: &str, limits: &[String], backend: &str) {
        for d in DecisionLabel::ALL {
            let _ = self.requests.remove_label_values(&[route, d.as_str()]);
        }
        self.forget_limits(route, limits);
        for b in [backend, "local"] {
            let _ = self.decision_duration.remove_label_values(&[route, b]);
        }
        let _ = self.deny_cache_hits.remove_label_values(&[route]);
        for s in UPSTREAM_STATUSES {
            let _ = self.upstream_requests.remove_label_values(&[route, s]);
        }
        let _ = self.upstream_duration.remove_label_values(&[route]);
        let _ = self.delay_waiting.remove_label_values(&[route]);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
