//! A [`RateLimitLayer`] built in code: the same settings as the TOML file, checked by the same
//! validator (so a builder cannot make a layer the file could not), reported against the text
//! the builder wrote.
//!
//! ```no_run
//! # async fn build() -> Result<(), slidegate::layer::LayerError> {
//! use slidegate::RateLimitLayer;
//! use slidegate::layer::RouteBuilder;
//!
//! let layer = RateLimitLayer::builder()
//!     .memory()
//!     .route(
//!         RouteBuilder::new("login", "/login")
//!             .methods(&["POST"])
//!             .key(&["json:username"])
//!             .limit("per-minute", 5, "1m"),
//!     )
//!     .build()
//!     .await?;
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use toml::{Table, Value};

use super::rate_limit_layer::{LayerError, RateLimitLayer};
use crate::config::{Config, Environment, Purpose};

/// Settings of a layer, as the config file would have them.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    store: Table,
    keys: Table,
    server: Table,
    jwt: Table,
    /// In the order added: the first segment holding a user id is the one that applies.
    segments: Vec<(String, String)>,
    plans: Table,
    routes: Vec<Table>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone)]
pub struct RouteBuilder {
    table: Table,
}

impl Builder {
    /// Decides in the embedded memory store (one instance).
    pub fn memory(mut self) -> Self {
        self.store.insert("backend".into(), "memory".into());
        self
    }

    /// Decides in Redis at `url` (`redis://`, `redis-cluster://`, `redis-sentinel://`).
    pub fn redis(mut self, url: &str) -> Self {
        self.store.insert("backend".into(), "redis".into());
        self.store.insert("url".into(), url.into());
        self
    }

    /// Any other `[store]` setting (`timeout`, `on_error`, `key_prefix`, `clock`, `max_keys`).
    pub fn store(mut self, setting: &str, value: impl Into<Value>) -> Self {
        self.store.insert(setting.into(), value.into());
        self
    }

    /// A `[server]` setting of where clients come from, the only ones a layer takes:
    /// `trusted_proxies` (behind a load balancer, its addresses), `client_ip_header` (the header
    /// it writes) and `ipv6_prefix`. Any other is refused when the layer is built.
    pub fn server(mut self, setting: &str, value: impl Into<Value>) -> Self {
        self.server.insert(setting.into(), value.into());
        self
    }

    /// `[keys] hash_secret_env`: the variable holding the secret of `hash = true` key parts.
    pub fn hash_secret_env(mut self, variable: &str) -> Self {
        self.keys.insert("hash_secret_env".into(), variable.into());
        self
    }

    /// A `[jwt]` setting, for `jwt:CLAIM` key parts: `hs256_secret_env` (the variable holding
    /// the secret) or `public_key_file`, and `issuer`, `audience`, `require_exp`.
    pub fn jwt(mut self, setting: &str, value: impl Into<Value>) -> Self {
        self.jwt.insert(setting.into(), value.into());
        self
    }

    /// A segment (`[segments.NAME] members_file`): the user ids a limit's per-segment values
    /// apply to, as a portable roaring bitmap; segments are looked up in the order they are
    /// added.
    pub fn segment(mut self, name: &str, members_file: &str) -> Self {
        self.segments.push((name.into(), members_file.into()));
        self
    }

    /// A `[plans]` setting: `members_file` (lines `"KEY" = "PLAN"`) or `unknown`.
    pub fn plans(mut self, setting: &str, value: impl Into<Value>) -> Self {
        self.plans.insert(setting.into(), value.into());
        self
    }

    /// Adds a route (routes are tried in the order they are added).
    pub fn route(mut self, route: RouteBuilder) -> Self {
        self.routes.push(route.table);
        self
    }

    /// The config text the builder stands for.
    pub fn to_toml(&self) -> String {
        let mut doc = Table::new();
        for (name, table) in [
            ("server", &self.server),
            ("store", &self.store),
            ("keys", &self.keys),
            ("jwt", &self.jwt),
            ("plans", &self.plans),
        ] {
            if !table.is_empty() {
                doc.insert(name.into(), Value::Table(table.clone()));
            }
        }
        let routes = self.routes.iter().cloned().map(Value::Table).collect();
        doc.insert("routes".into(), Value::Array(routes));
        let mut text = toml::to_string(&doc).expect("a table serialises");
        // one `[segments.NAME]` table at a time: a table's keys serialise sorted, and the
        // order of segments is the order they are looked up in
        for (name, members_file) in &self.segments {
            let mut segment = Table::new();
            segment.insert("members_file".into(), members_file.as_str().into());
            let mut named = Table::new();
            named.insert(name.clone(), Value::Table(segment));
            let mut wrapped = Table::new();
            wrapped.insert("segments".into(), Value::Table(named));
            text.push('\n');
            text.push_str(&toml::to_string(&wrapped).expect("a table serialises"));
        }
        text
    }

    /// Validates the settings and builds the layer (connecting to its store).
    pub async fn build(self) -> Result<RateLimitLayer, LayerError> {
        let text = self.to_toml();
        let env = Environment::process();
        let config = Config::from_toml(Path::new("<builder>"), &text, env, Purpose::Layer)?;
        RateLimitLayer::from_config(config).await
    }
}

impl RouteBuilder {
    /// A route named `name` taking `path` (exact, or a prefix with a trailing `/*`).
    pub fn new(name: &str, path: &str) -> RouteBuilder {
        let mut table = Table::new();
        table.insert("name".into(), name.into());
        table.insert("path".into(), path.into());
        RouteBuilder { table }
    }

    /// The methods it takes (all when not set).
    pub fn methods(self, methods: &[&str]) -> Self {
        self.set("methods", strings(methods))
    }

    /// The key its limits count (`["ip"]` when not set).
    pub fn key(self, parts: &[&str]) -> Self {
        self.set("key", strings(parts))
    }

    /// Adds a limit of `limit` per `window` (`"1m"`), counting the route's key.
    pub fn limit(self, name: &str, limit: i64, window: &str) -> Self {
        let mut t = Table::new();
        t.insert("name".into(), name.into());
        t.insert("limit".into(), limit.into());
        t.insert("window".into(), window.into());
        self.limit_table(t)
    }

    /// Adds a limit given as a whole table (`algorithm`, `key`, `count_status`, ...).
    pub fn limit_table(mut self, limit: Table) -> Self {
        let limits = self
            .table
            .entry("limits")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = limits {
            list.push(Value::Table(limit));
        }
        self
    }

    /// Any other route setting (`on_exceed`, `block_for`, `headers`, `exempt`, ...).
    pub fn set(mut self, setting: &str, value: impl Into<Value>) -> Self {
        self.table.insert(setting.into(), value.into());
        self
    }
}

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::from(*s)).collect())
}

impl RateLimitLayer {
    /// A builder of a layer in code.
    pub fn builder() -> Builder {
        Builder::default()
    }
}
