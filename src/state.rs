//! Everything the request path and the admin listener share, behind one `Arc`: the route table
//! in force (swapped on reload), the limiter (store, fallback, deny cache) and the metrics. The
//! store and the counts live outside the reloaded config, so a reload never resets a count.
//!
//! Reload is parse -> validate -> compile -> swap. Settings read only at start (listen
//! addresses, connection and head limits, the head timeout, `[store]`) keep their running values; a reload that changes
//! them applies the rest and names each of them, in the log and in `/admin/config`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigError, ServerConfig, StoreConfig};
use crate::limit::Limiter;
use crate::metrics::Metrics;
use crate::route::{Carried, CompileError, RouteTable};
use crate::store::Store;

/// Shared gateway state.
pub struct GatewayState {
    /// The route table in force.
    pub table: Arc<ArcSwap<RouteTable>>,
    /// The limiter (and through it, the store).
    pub limiter: Arc<Limiter>,
    /// Metric handles.
    pub metrics: Metrics,
    /// The file `SIGHUP` and `/admin/reload` read.
    pub config_path: PathBuf,
    /// The settings read at start, in force until a restart.
    pub running: StartSettings,
    /// Restart-only settings whose configured value differs from the running one.
    pending: Mutex<Vec<PendingSetting>>,
    carried: Carried,
}

/// The settings read only at start.
#[derive(Debug, Clone, PartialEq)]
pub struct StartSettings {
    /// `[server]` as started (listen address and connection limits are read at start).
    pub server: ServerConfig,
    /// `admin.listen`.
    pub admin_listen: std::net::SocketAddr,
    /// `[store]` as started.
    pub store: StoreConfig,
}

/// A restart-only setting that a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSetting {
    /// The key, as the file spells it.
    pub setting: String,
    /// The value in force.
    pub running: String,
    /// The value the file now has.
    pub configured: String,
}

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new file does not validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new file validates but cannot be compiled.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

impl GatewayState {
    /// Compiles `config` and wraps everything in one `Arc`.
    pub fn new(
        config: Config,
        store: Store,
        metrics: Metrics,
    ) -> Result<Arc<GatewayState>, CompileError> {
        let carried = Carried::default();
        let config_path = config.source.clone();
        let running = StartSettings {
            server: config.server.clone(),
            admin_listen: config.admin.listen,
            store: config.store.clone(),
        };
        let table = RouteTable::build(config, &metrics, store.backend(), &carried)?;
        Ok(Arc::new(GatewayState {
            table: Arc::new(ArcSwap::from_pointee(table)),
            limiter: Arc::new(Limiter::new(store)),
            metrics,
            config_path,
            running,
            pending: Mutex::new(Vec::new()),
            carried,
        }))
    }

    /// Re-reads the config file: parse, validate, compile, swap. A file that fails keeps the
    /// running config; either way the result is counted. Returns the restart-only settings
    /// that did not apply.
    pub fn reload(&self) -> Result<Vec<PendingSetting>, ReloadError> {
        let result = Config::load(&self.config_path)
            .map_err(ReloadError::from)
            .and_then(|c| self.apply(c));
        let label = if result.is_ok() { "success" } else { "failure" };
        self.metrics
            .config_reloads
            .with_label_values(&[label])
            .inc();
        match &result {
            Ok(pending) => {
                tracing::info!(file = %self.config_path.display(), "config reloaded");
                for p in pending {
                    tracing::warn!(
                        setting = %p.setting,
                        running = %p.running,
                        configured = %p.configured,
                        "{} changed in the file; it applies after a restart",
                        p.setting
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload refused; the running config stays")
            }
        }
        result
    }

    fn apply(&self, mut config: Config) -> Result<Vec<PendingSetting>, ReloadError> {
        let pending = self.restart_only_changes(&config);
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        // What is read only at start keeps its running value.
        config.store = self.running.store.clone();
        config.admin.listen = self.running.admin_listen;
        config.server.listen = self.running.server.listen;
        config.server.max_connections = self.running.server.max_connections;
        config.server.header_read_timeout = self.running.server.header_read_timeout;
        // The drain's bound is handed to the listener at start.
        config.server.shutdown_grace = self.running.server.shutdown_grace;
        // The head bounds size hyper's buffers, set when the listener started.
        config.server.max_header_bytes = self.running.server.max_header_bytes;
        config.server.max_headers = self.running.server.max_headers;
        let backend = self.limiter.store().backend();
        let table = RouteTable::build(config, &self.metrics, backend, &self.carried)?;
        let old = self.table.swap(Arc::new(table));
        let new = self.table.load();
        for route in &old.routes {
            let name = &route.config.name;
            let kept = new.route(name);
            let gone: Vec<String> = route
                .config
                .limits
                .iter()
                .map(|l| l.name.clone())
                .filter(|l| kept.is_none_or(|k| k.config.limits.iter().all(|n| &n.name != l)))
                .collect();
            match kept {
                None => self.metrics.forget_route(name, &gone, backend),
                Some(_) => self.metrics.forget_limits(name, &gone),
            }
        }
        self.limiter.deny_cache().clear();
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = pending.clone();
        Ok(pending)
    }

    /// Each restart-only setting whose value in `config` differs from the running one.
    fn restart_only_changes(&self, config: &Config) -> Vec<PendingSetting> {
        let mut out = Vec::new();
        let mut check = |setting: &str, running: String, configured: String| {
            if running != configured {
                out.push(PendingSetting {
                    setting: setting.to_string(),
                    running,
                    configured,
                });
            }
        };
        let (r, c) = (&self.running, config);
        check(
            "server.listen",
            r.server.listen.to_string(),
            c.server.listen.to_string(),
        );
        check(
            "admin.listen",
            r.admin_listen.to_string(),
            c.admin.listen.to_string(),
        );
        check(
            "server.max_connections",
            r.server.max_connections.to_string(),
            c.server.max_connections.to_string(),
        );
        check(
            "server.header_read_timeout",
            format!("{:?}", r.server.header_read_timeout),
            format!("{:?}", c.server.header_read_timeout),
        );
        check(
            "server.shutdown_grace",
            format!("{:?}", r.server.shutdown_grace),
            format!("{:?}", c.server.shutdown_grace),
        );
        check(
            "server.max_header_bytes",
            r.server.max_header_bytes.to_string(),
            c.server.max_header_bytes.to_string(),
        );
        check(
            "server.max_headers",
            r.server.max_headers.to_string(),
            c.server.max_headers.to_string(),
        );
        let (rs, cs) = (&r.store, &c.store);
        check(
            "store.backend",
            rs.backend.name().into(),
            cs.backend.name().into(),
        );
        check(
            "store.url",
            crate::config::summary::redact_url(&rs.url),
            crate::config::summary::redact_url(&cs.url),
        );
        check(
            "store.timeout",
            format!("{:?}", rs.timeout),
            format!("{:?}", cs.timeout),
        );
        check(
            "store.on_error",
            rs.on_error.name().into(),
            cs.on_error.name().into(),
        );
        check(
            "store.key_prefix",
            rs.key_prefix.clone(),
            cs.key_prefix.clone(),
        );
        check(
            "store.clock",
            rs.clock.name().into(),
            cs.clock.name().into(),
        );
        out
    }

    /// Restart-only settings that the last reload changed.
    pub fn pending_restart(&self) -> Vec<PendingSetting> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The pub/sub channel that carries admin resets to every instance.
    pub fn reset_channel(&self) -> String {
        format!("{}:reset", self.running.store.key_prefix)
    }

    /// Resets a key of a route on every instance: its counts and block in the store, then
    /// every instance's deny-cache entry (through Redis pub/sub when the store is Redis).
    pub async fn reset_key(
        &self,
        policy: &crate::limit::RoutePolicy,
        key: &str,
    ) -> Result<(), crate::store::StoreError> {
        let base = self.limiter.reset(policy, key).await?;
        if let Store::Redis(redis) = self.limiter.store() {
            redis.publish_reset(&self.reset_channel(), &base).await?;
        }
        Ok(())
    }
}
