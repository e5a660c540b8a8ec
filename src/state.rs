//! Everything the request path and the admin listener share, behind one `Arc`: the current
//! [`Runtime`] (swapped on reload), the store and its local fallback, the deny cache and the
//! metrics. The store and the counts live outside the reloaded config, so a reload never
//! resets a count.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigError, StoreConfig};
use crate::limit::{DenyCache, MemoryStore, Store};
use crate::metrics::Metrics;
use crate::runtime::{Carried, Runtime, RuntimeError};

/// Shared gateway state.
pub struct GatewayState {
    /// The config in force.
    pub runtime: ArcSwap<Runtime>,
    /// The store chosen at start (`[store]` needs a restart to change).
    pub store: Store,
    /// The `[store]` section in force.
    pub store_config: StoreConfig,
    /// The in-process limiter for `on_error = "local"`.
    pub fallback: MemoryStore,
    /// Local answers for keys that must wait.
    pub deny_cache: DenyCache,
    /// Metric handles.
    pub metrics: Metrics,
    /// The file `SIGHUP` and `/admin/reload` read.
    pub config_path: PathBuf,
    carried: Carried,
}

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new file does not validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new file validates but cannot be compiled.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl GatewayState {
    /// Compiles `config` and wraps everything in one `Arc`.
    pub fn new(
        config: Config,
        store: Store,
        metrics: Metrics,
    ) -> Result<Arc<GatewayState>, RuntimeError> {
        let carried = Carried::default();
        let config_path = config.source.clone();
        let store_config = config.store.clone();
        let runtime = Runtime::build(config, &metrics, store.backend(), &carried)?;
        Ok(Arc::new(GatewayState {
            runtime: ArcSwap::from_pointee(runtime),
            store,
            store_config,
            fallback: MemoryStore::new(),
            deny_cache: DenyCache::default(),
            metrics,
            config_path,
            carried,
        }))
    }

    /// Re-reads the config file: parse, validate, compile, swap. A file that fails keeps the
    /// running config. Listen addresses and `[store]` need a restart; changes to them are
    /// logged and the rest applies. Clears the deny cache.
    pub fn reload(&self) -> Result<Vec<String>, ReloadError> {
        let result = Config::load(&self.config_path)
            .map_err(ReloadError::from)
            .and_then(|c| self.apply(c));
        let label = if result.is_ok() { "success" } else { "failure" };
        self.metrics
            .config_reloads
            .with_label_values(&[label])
            .inc();
        match &result {
            Ok(notes) => {
                tracing::info!(file = %self.config_path.display(), notes = ?notes, "config reloaded")
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload refused; the running config stays")
            }
        }
        result
    }

    fn apply(&self, config: Config) -> Result<Vec<String>, ReloadError> {
        let old = self.runtime.load();
        let mut notes = Vec::new();
        if config.server.listen != old.config.server.listen
            || config.admin.listen != old.config.admin.listen
        {
            notes.push("listen addresses changed: they apply after a restart".to_string());
        }
        if config.store != self.store_config {
            notes.push("[store] changed: it applies after a restart".to_string());
        }
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        for n in &notes {
            tracing::warn!("{n}");
        }
        let runtime = Runtime::build(config, &self.metrics, self.store.backend(), &self.carried)?;
        self.runtime.store(Arc::new(runtime));
        self.deny_cache.clear();
        Ok(notes)
    }
}

impl GatewayState {
    /// The pub/sub channel that carries admin resets to every instance.
    pub fn reset_channel(&self) -> String {
        format!("{}:reset", self.store_config.key_prefix)
    }

    /// Resets a key on every instance: its counts and block in the store, then every
    /// instance's deny-cache entry (through Redis pub/sub when the store is Redis).
    pub async fn reset_key(
        &self,
        route: &crate::config::RouteConfig,
        base: &str,
    ) -> Result<(), crate::limit::StoreError> {
        self.store.reset(route, base).await?;
        self.fallback.delete(
            &crate::limit::DecisionInput {
                route,
                base,
                cost: 0,
                now_us: None,
            }
            .keys(),
        );
        self.deny_cache.remove(base);
        if let crate::limit::Store::Redis(redis) = &self.store {
            redis.publish_reset(&self.reset_channel(), base).await?;
        }
        Ok(())
    }
}
