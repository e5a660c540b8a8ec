//! The layer itself: built from a config file, a validated config or the route table and
//! limiter the gateway already has; it wraps a service in a [`RateLimit`].

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::service::RateLimit;
use super::shared::{ForwardingWarning, Shared, Unmatched};
use crate::config::{Config, Environment, Purpose};
use crate::limit::Limiter;
use crate::metrics::Metrics;

/// Why a layer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The config does not validate.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The store could not be set up (a malformed URL, say).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The routes could not be compiled.
    #[error(transparent)]
    Compile(#[from] crate::route::CompileError),
}

/// The rate-limit layer; cloning it (and the services it makes) shares one limiter.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
    metrics: Metrics,
}

impl RateLimitLayer {
    /// A layer over a route table and limiter that already exist (the gateway's).
    pub fn new(shared: Arc<Shared>, metrics: Metrics) -> RateLimitLayer {
        RateLimitLayer { shared, metrics }
    }

    /// A layer from a config file (routes need no `upstream`): its store connected, its
    /// routes compiled, requests no route takes passed through.
    pub async fn from_file(path: &std::path::Path) -> Result<RateLimitLayer, LayerError> {
        let config = Config::load_for(path, Environment::process(), Purpose::Layer)?;
        Self::from_config(config).await
    }

    /// A layer from a validated config; its warnings (settings that are legal but almost always
    /// a mistake) are logged, as the gateway logs its own at start.
    pub async fn from_config(config: Config) -> Result<RateLimitLayer, LayerError> {
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        let metrics = Metrics::new();
        let store =
            crate::store::Store::from_config(&config.store, metrics.store_error_hook(), &[])
                .await?;
        let limiter = Arc::new(Limiter::new(store, config.store.max_keys, metrics.clone()));
        let resets = limiter.follow_resets(config.store.reset_channel()).await?;
        let table = crate::route::RouteTable::build(
            config,
            &metrics,
            limiter.store().backend(),
            &Default::default(),
        )?;
        let shared = Arc::new(Shared {
            table: Arc::new(ArcSwap::from_pointee(table)),
            limiter,
            unmatched: Unmatched::PassThrough,
            resets,
            forwarding_warned: ForwardingWarning::default(),
            inner_is_upstream: true,
        });
        Ok(RateLimitLayer { shared, metrics })
    }

    /// The layer's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The layer's metrics in Prometheus text, as a `/metrics` endpoint serves them (the
    /// gauges read at scrape time brought up to date).
    pub fn scrape(&self) -> String {
        self.shared.limiter.scrape()
    }

    /// What its services share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.shared.clone())
    }
}
