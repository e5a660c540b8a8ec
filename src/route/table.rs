//! A loaded config compiled for the request path: routes in match order, each with its limiter
//! policy and its metric handles resolved. A reload builds a new table and swaps it in; requests
//! hold the one they started with. The delay rooms' counters outlive a reload ([`Carried`]).

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use http::Method;

use crate::config::{Config, RouteConfig};
use crate::key::JwtVerifier;
use crate::limit::RoutePolicy;
use crate::metrics::{Metrics, RouteMetrics};

/// One route, ready to serve.
pub struct Route {
    /// Its config.
    pub config: Arc<RouteConfig>,
    /// What the limiter decides with.
    pub policy: Arc<RoutePolicy>,
    /// Its metric handles.
    pub metrics: Arc<RouteMetrics>,
}

/// The request path's view of one config.
pub struct RouteTable {
    /// The validated config.
    pub config: Arc<Config>,
    /// Routes in file order.
    pub routes: Vec<Arc<Route>>,
}

/// What outlives a reload: each delay route's count of waiting requests.
#[derive(Default)]
pub struct Carried {
    waiting: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl Carried {
    fn waiting(&self, route: &str) -> Arc<AtomicUsize> {
        let mut counters = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        counters.entry(route.to_string()).or_default().clone()
    }
}

/// A `[jwt]` section whose key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("jwt: cannot use the key: {0}")]
pub struct CompileError(pub String);

impl RouteTable {
    /// Compiles `config`; metric handles come from `metrics` (the decision-duration series are
    /// labelled with the store's `backend`).
    pub fn build(
        config: Config,
        metrics: &Metrics,
        backend: &str,
        carried: &Carried,
    ) -> Result<RouteTable, CompileError> {
        let jwt = match &config.jwt {
            Some(j) => Some(Arc::new(
                JwtVerifier::new(j).map_err(|e| CompileError(e.to_string()))?,
            )),
            None => None,
        };
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let limit_names: Vec<String> = r.limits.iter().map(|l| l.name.clone()).collect();
                let reads_cost: Vec<bool> =
                    r.limits.iter().map(|l| l.cost_from.is_some()).collect();
                let route_metrics = Arc::new(RouteMetrics::new(
                    metrics,
                    &r.name,
                    &limit_names,
                    &reads_cost,
                    backend,
                ));
                let policy = RoutePolicy::new(
                    r.clone(),
                    &config,
                    route_metrics.clone(),
                    carried.waiting(&r.name),
                    jwt.clone(),
                );
                Arc::new(Route {
                    config: r.clone(),
                    policy: Arc::new(policy),
                    metrics: route_metrics,
                })
            })
            .collect();
        Ok(RouteTable {
            config: Arc::new(config),
            routes,
        })
    }

    /// The first route taking this method and (normalised) path; with `proxied_only`, the
    /// first of those with an upstream.
    pub fn find(&self, method: &Method, path: &str, proxied_only: bool) -> Option<&Arc<Route>> {
        let case = self.config.server.path_case;
        self.routes.iter().find(|r| {
            (!proxied_only || r.config.upstream.is_some()) && r.config.matches(method, path, case)
        })
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| r.config.name == name)
    }
}
