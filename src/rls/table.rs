//! The rate-limit service's view of one loaded config: its domains compiled, their metric
//! handles, swapped on reload with the route table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus::Histogram;

use super::limits::{self, Domain, OVERRIDE_LABEL};
use crate::config::Config;
use crate::limit::RoutePolicy;
use crate::metrics::Metrics;

/// The rate-limit service's view of one loaded config: its domains compiled, swapped on
/// reload with the route table.
pub struct RlsTable {
    domains: HashMap<String, Arc<Domain>>,
    /// Whether answers carry rate-limit headers.
    pub headers: bool,
    durations: HashMap<String, Histogram>,
}

impl RlsTable {
    /// The domains of `config`'s `[rls]` (none without one); metric handles from `metrics`,
    /// decision times labelled with the store's `backend`.
    pub fn build(config: &Arc<Config>, metrics: &Metrics, backend: &'static str) -> RlsTable {
        let compiler = limits::Compiler {
            config: config.clone(),
            metrics: metrics.clone(),
            backend,
        };
        let domains: HashMap<String, Arc<Domain>> = config
            .rls
            .iter()
            .flat_map(|r| &r.domains)
            .map(|d| {
                let domain = Domain::new(d.clone(), compiler.clone());
                (d.name.clone(), Arc::new(domain))
            })
            .collect();
        let durations = domains
            .keys()
            .map(|d| (d.clone(), metrics.rls_duration.with_label_values(&[d])))
            .collect();
        RlsTable {
            domains,
            headers: config.rls.as_ref().is_some_and(|r| r.headers),
            durations,
        }
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Arc<Domain>> {
        self.domains.get(name)
    }

    /// The policy of the rate limit `label` of `domain` alone (`/admin/usage`).
    pub fn rule_policy(&self, domain: &str, label: &str) -> Option<Arc<RoutePolicy>> {
        self.domain(domain)?.rule_policy(label)
    }

    /// Counts the time one `ShouldRateLimit` of a known domain took.
    pub(super) fn observe(&self, domain: &str, took: Duration) {
        if let Some(h) = self.durations.get(domain) {
            h.observe(took.as_secs_f64());
        }
    }

    /// Drops the metric series of the domains and rate limits `self` has and `new` has not.
    pub fn forget_removed(&self, new: &RlsTable, metrics: &Metrics, backend: &str) {
        for (name, domain) in &self.domains {
            let kept = new.domains.get(name);
            let mut gone: Vec<String> = domain
                .rules()
                .iter()
                .map(|r| r.label.clone())
                .filter(|l| kept.is_none_or(|k| k.rules().iter().all(|r| &r.label != l)))
                .collect();
            match kept {
                None => {
                    gone.push(OVERRIDE_LABEL.to_string());
                    metrics.forget_route(name, &gone, backend);
                    let _ = metrics.rls_duration.remove_label_values(&[name]);
                }
                Some(_) => metrics.forget_limits(name, &gone),
            }
        }
    }
}
