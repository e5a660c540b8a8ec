//! A loaded config compiled for the request path: routes in match order, each with its limiter
//! policy, its upstream and its metric handles resolved. A reload builds a new table and swaps it
//! in; requests hold the one they started with. What must outlive a reload (upstream connection
//! pools while their settings are unchanged, delay waiting rooms) is [`Carried`] over.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use http::Method;

use crate::config::{Config, RouteConfig, UpstreamConfig};
use crate::key::JwtVerifier;
use crate::limit::RoutePolicy;
use crate::metrics::{Metrics, RouteMetrics};
use crate::proxy::Upstream;

/// One route, ready to serve.
pub struct Route {
    /// Its config.
    pub config: Arc<RouteConfig>,
    /// What the limiter decides with.
    pub policy: Arc<RoutePolicy>,
    /// Its upstream, pooled.
    pub upstream: Arc<Upstream>,
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

/// What outlives a reload.
#[derive(Default)]
pub struct Carried {
    upstreams: Mutex<HashMap<String, Arc<Upstream>>>,
    waiting: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl Carried {
    fn upstream(&self, config: &UpstreamConfig) -> Arc<Upstream> {
        let mut pools = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        match pools.get(&config.name) {
            Some(u) if u.config == *config => u.clone(),
            _ => {
                let u = Arc::new(Upstream::new(config));
                pools.insert(config.name.clone(), u.clone());
                u
            }
        }
    }

    fn waiting(&self, route: &str) -> Arc<AtomicUsize> {
        let mut counters = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        counters.entry(route.to_string()).or_default().clone()
    }
}

/// A `[jwt]` section whose key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("jwt: cannot use the key: {0}")]
pub struct CompileError(String);

impl RouteTable {
    /// Compiles `config`, reusing what `carried` holds; metric handles come from `metrics`
    /// (the decision-duration series are labelled with the store's `backend`).
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
                let route_metrics =
                    Arc::new(RouteMetrics::new(metrics, &r.name, &limit_names, backend));
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
                    upstream: carried.upstream(&config.upstreams[&r.upstream]),
                    metrics: route_metrics,
                })
            })
            .collect();
        Ok(RouteTable {
            config: Arc::new(config),
            routes,
        })
    }

    /// The first route taking this method and (normalised) path.
    pub fn find(&self, method: &Method, path: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| r.config.matches(method, path))
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| r.config.name == name)
    }
}
