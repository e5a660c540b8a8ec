//! A loaded configuration compiled for the request path: routes in match order, each with its
//! upstream client, its `RateLimit-Policy` header and its metric handles resolved. A reload
//! builds a new `Runtime` and swaps it in; requests hold the one they started with.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use http::{HeaderValue, Method};

use crate::config::{Config, RouteConfig, UpstreamConfig};
use crate::key::JwtVerifier;
use crate::limit::response::policy_header;
use crate::metrics::{Metrics, RouteMetrics};
use crate::proxy::Upstream;

/// The request path's view of one config.
pub struct Runtime {
    /// The validated config.
    pub config: Arc<Config>,
    /// Routes in file order.
    pub routes: Vec<Arc<CompiledRoute>>,
    /// The verifier for `jwt:` key parts.
    pub jwt: Option<JwtVerifier>,
}

/// One route, ready to serve.
pub struct CompiledRoute {
    /// Its config.
    pub config: Arc<RouteConfig>,
    /// Its upstream, pooled.
    pub upstream: Arc<Upstream>,
    /// `RateLimit-Policy`, when the route has limits.
    pub policy: Option<HeaderValue>,
    /// Its metric handles.
    pub metrics: RouteMetrics,
    /// Requests waiting for room now (`on_exceed = "delay"`); survives reloads.
    pub waiting: Arc<AtomicUsize>,
}

/// What outlives a reload: upstream pools (while their settings are unchanged) and wait counters.
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
pub struct RuntimeError(String);

impl Runtime {
    /// Compiles `config`, reusing what `carried` holds.
    pub fn build(
        config: Config,
        metrics: &Metrics,
        backend: &str,
        carried: &Carried,
    ) -> Result<Runtime, RuntimeError> {
        let jwt = match &config.jwt {
            Some(j) => Some(JwtVerifier::new(j).map_err(|e| RuntimeError(e.to_string()))?),
            None => None,
        };
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let limit_names: Vec<String> = r.limits.iter().map(|l| l.name.clone()).collect();
                Arc::new(CompiledRoute {
                    config: r.clone(),
                    upstream: carried.upstream(&config.upstreams[&r.upstream]),
                    policy: policy_header(&r.limits),
                    metrics: RouteMetrics::new(metrics, &r.name, &limit_names, backend),
                    waiting: carried.waiting(&r.name),
                })
            })
            .collect();
        Ok(Runtime {
            config: Arc::new(config),
            routes,
            jwt,
        })
    }

    /// The first route taking this method and path.
    pub fn find_route(&self, method: &Method, path: &str) -> Option<&Arc<CompiledRoute>> {
        self.routes.iter().find(|r| r.config.matches(method, path))
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&Arc<CompiledRoute>> {
        self.routes.iter().find(|r| r.config.name == name)
    }
}
