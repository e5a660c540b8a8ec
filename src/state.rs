//! Everything the request path and the admin listener share, behind one `Arc`: the route table
//! and the upstreams in force (swapped on reload), the limiter (store, fallback, deny cache) and
//! the metrics. The store and the counts live outside the reloaded config, so a reload never
//! resets a count.
//!
//! Reload is parse -> validate -> compile -> swap. Settings read only at start
//! ([`crate::reload::RESTART_ONLY`]: listen addresses, connection and head limits, the timeouts
//! the listener holds, `[store]`) keep their running values; a reload that changes them applies
//! the rest and names each of them, in the log and in `/admin/config`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{redact_url, Config, FilesDigest};
use crate::layer::{Shared, Unmatched};
use crate::limit::{Limiter, RoutePolicy};
use crate::metrics::Metrics;
use crate::proxy::Upstreams;
pub use crate::reload::ReloadError;
use crate::reload::{
    keep_restart_only, refuse_emptied_plans, refuse_empty, refuse_lockout, PendingSetting,
};
use crate::rls::RlsTable;
use crate::route::{Carried, CompileError, Route, RouteTable};
use crate::store::Store;

/// Shared gateway state.
pub struct GatewayState {
    /// The route table in force, the limiter, and what a request no route takes gets.
    pub shared: Arc<Shared>,
    /// The upstreams in force.
    pub upstreams: Arc<ArcSwap<Upstreams>>,
    /// The rate-limit service's domains in force.
    pub rls: Arc<ArcSwap<RlsTable>>,
    /// Metric handles.
    pub metrics: Metrics,
    /// The file `SIGHUP` and `/admin/reload` read.
    pub config_path: PathBuf,
    /// The config the gateway started with: the restart-only settings in force.
    pub running: Config,
    /// Restart-only settings whose configured value differs from the running one.
    pending: Mutex<Vec<PendingSetting>>,
    /// What the config's files held when the last reload (or the start) read them: a watch
    /// that finds them so reloads nothing (a `SIGHUP` after an edit already did).
    files_loaded: Mutex<FilesDigest>,
    carried: Carried,
}

impl GatewayState {
    /// Compiles `config` and wraps everything in one `Arc`.
    pub fn new(
        config: Config,
        store: Store,
        metrics: Metrics,
    ) -> Result<Arc<GatewayState>, CompileError> {
        let carried = Carried::default();
        let running = config.clone();
        let files_loaded = running.files_digest();
        let limiter = Arc::new(Limiter::new(store, config.store.max_keys, metrics.clone()));
        let upstreams = Upstreams::build(&config, &Upstreams::default());
        let backend = limiter.store().backend();
        let table = RouteTable::build(config, &metrics, backend, &carried)?;
        let rls = RlsTable::build(&table.config, &metrics, backend);
        Ok(Arc::new(GatewayState {
            shared: Arc::new(Shared {
                table: Arc::new(ArcSwap::from_pointee(table)),
                limiter,
                unmatched: Unmatched::NotFound,
                resets: None,
                forwarding_warned: Default::default(),
                inner_is_upstream: false,
            }),
            upstreams: Arc::new(ArcSwap::from_pointee(upstreams)),
            rls: Arc::new(ArcSwap::from_pointee(rls)),
            config_path: running.source.clone(),
            running,
            metrics,
            pending: Mutex::new(Vec::new()),
            files_loaded: Mutex::new(files_loaded),
            carried,
        }))
    }

    /// The route table in force.
    pub fn table(&self) -> arc_swap::Guard<Arc<RouteTable>> {
        self.shared.table.load()
    }

    /// The route `name` for `/admin/usage`, else the rate limit `limit` of the rate-limit
    /// service's domain `name` as a route of its own (a domain's usage names its limit).
    pub fn route_or_domain(&self, name: &str, limit: Option<&str>) -> Option<Arc<Route>> {
        if let Some(route) = self.table().route(name) {
            return Some(route.clone());
        }
        let policy = self.rls.load().rule_policy(name, limit?)?;
        Some(Arc::new(Route {
            config: policy.config.clone(),
            metrics: policy.metrics.clone(),
            policy,
        }))
    }

    /// The limiter.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.shared.limiter
    }

    /// Re-reads the config file: parse, validate, compile, swap. A file that fails keeps the
    /// running config; either way the result is counted. Returns the restart-only settings
    /// that did not apply.
    pub fn reload(self: &Arc<Self>) -> Result<Vec<PendingSetting>, ReloadError> {
        let env = self.running.env.clone();
        // read before the files: an edit made meanwhile is then seen as one still to load
        self.note_files_loaded(self.table().config.files_digest());
        let result = refuse_empty(&self.config_path)
            .and_then(|()| Ok(Config::load_with_env(&self.config_path, env)?))
            .and_then(|c| refuse_lockout(&self.running, &c).map(|()| c))
            .and_then(|c| refuse_emptied_plans(&self.table().config, &c).map(|()| c))
            .and_then(|c| self.apply(c));
        if result.is_ok() {
            self.note_files_named();
        }
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
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.clone().warn_if_store_may_evict());
        }
        result
    }

    /// What the config's files held when the last reload read them.
    pub fn files_loaded(&self) -> FilesDigest {
        self.files_loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn note_files_loaded(&self, digest: FilesDigest) {
        *self.files_loaded.lock().unwrap_or_else(|e| e.into_inner()) = digest;
    }

    /// After a reload that named other files (a plans file added, say): what they hold.
    fn note_files_named(&self) {
        let files = self.table().config.files_read();
        let loaded = self.files_loaded();
        if !files.iter().eq(loaded.iter().map(|(file, _)| file)) {
            self.note_files_loaded(self.table().config.files_digest());
        }
    }

    /// Logs a warning for each Redis server whose `maxmemory-policy` may evict limit keys (and
    /// brings `slidegate_store_evicted_keys_total` up to date): at start and on every reload.
    /// A store that does not answer is skipped.
    pub async fn warn_if_store_may_evict(self: Arc<Self>) {
        let Some(nodes) = self.limiter().refresh_evictions().await else {
            return;
        };
        let url = redact_url(&self.running.store.url);
        for w in crate::store::eviction_warnings(&nodes, &url) {
            tracing::warn!("{w}");
        }
    }

    fn apply(&self, mut config: Config) -> Result<Vec<PendingSetting>, ReloadError> {
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        let pending = keep_restart_only(&self.running, &mut config);
        let limiter = &self.shared.limiter;
        let backend = limiter.store().backend();
        let upstreams = Upstreams::build(&config, &self.upstreams.load());
        let table = RouteTable::build(config, &self.metrics, backend, &self.carried)?;
        let rls = Arc::new(RlsTable::build(&table.config, &self.metrics, backend));
        let old = self.shared.table.swap(Arc::new(table));
        let old_rls = self.rls.swap(rls.clone());
        self.upstreams.store(Arc::new(upstreams));
        self.forget_removed_series(&old, backend);
        old_rls.forget_removed(&rls, &self.metrics, backend);
        limiter.deny_cache().clear();
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = pending.clone();
        Ok(pending)
    }

    /// Drops the metric series of routes and limits the new table no longer has, and the cost
    /// series of limits it left without `cost_from`.
    fn forget_removed_series(&self, old: &RouteTable, backend: &str) {
        let new = self.shared.table.load();
        for route in &old.routes {
            let name = &route.config.name;
            let kept = new.route(name);
            let kept_limit =
                |l: &str| kept.and_then(|k| k.config.limits.iter().find(|n| n.name == l));
            let gone: Vec<String> = route
                .config
                .limits
                .iter()
                .map(|l| l.name.clone())
                .filter(|l| kept_limit(l).is_none())
                .collect();
            match kept {
                None => self.metrics.forget_route(name, &gone, backend),
                Some(_) => self.metrics.forget_limits(name, &gone),
            }
            let costless: Vec<String> = (route.config.limits.iter())
                .filter(|l| l.cost_from.is_some())
                .filter(|l| kept_limit(&l.name).is_some_and(|n| n.cost_from.is_none()))
                .map(|l| l.name.clone())
                .collect();
            self.metrics.forget_costs(name, &costless);
        }
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
        self.running.store.reset_channel()
    }

    /// Resets the keys an operator named on every instance: their counts and blocks in the
    /// store, then every instance's deny-cache entry (through Redis pub/sub when the store is
    /// Redis); answers, slot by slot, whether there was anything to reset.
    pub async fn reset_keys(
        &self,
        policy: &RoutePolicy,
        targets: &[crate::limit::lookup::Target],
        limit: Option<usize>,
    ) -> Result<Vec<crate::limit::ResetSlot>, crate::store::StoreError> {
        let slots = self.limiter().reset(policy, targets, limit).await?;
        if let Store::Redis(redis) = self.limiter().store() {
            for slot in &slots {
                redis
                    .publish_reset(&self.reset_channel(), &slot.base)
                    .await?;
            }
        }
        Ok(slots)
    }
}
