//! The validated configuration: every value parsed into its real type (durations, CIDRs,
//! socket addresses, URIs) and every cross-reference checked. `raw.rs` mirrors the TOML;
//! `validate/` turns a `RawConfig` into a [`Config`] or a `FILE:LINE:COLUMN` error.

mod duration;
mod environment;
mod error;
mod ext_authz;
mod forward_auth;
mod key_spec;
// Fields of the serde mirror are the TOML keys themselves, documented in the README.
#[allow(missing_docs)]
pub mod raw;
pub mod rls;
pub mod rls_yaml;
mod route;
mod secrets;
mod settings;
pub mod summary;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use duration::format as format_duration;
pub(crate) use duration::parse as parse_duration;
pub use environment::Environment;
pub use error::{ConfigError, ConfigWarning, Location};
pub use ext_authz::ExtAuthzConfig;
pub use forward_auth::ForwardAuthConfig;
pub use key_spec::{KeyPart, KeyPartSpec, KeySpec, Normalize};
pub use rls::{RlsConfig, RlsDescriptor, RlsDomain, RlsRule, RlsUnit};
pub use route::{BlockPolicy, ExceedMode, LimitConfig, PathPattern, RouteConfig, StatusSet};
pub use secrets::{redact_secrets, redact_url};
pub use settings::{
    AdminConfig, Backend, ClientIpHeader, ClockSource, HashSecret, JwtConfig, JwtKey, KeysConfig,
    OnError, OnMissingKey, PathCase, ScriptsMode, ServerConfig, StoreConfig, UnknownPlan,
    UpstreamConfig,
};

use crate::tier::Membership;

/// Environment variable that overrides `store.url`.
pub const REDIS_URL_ENV: &str = "SLIDEGATE_REDIS_URL";
/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "SLIDEGATE_CONFIG";
/// Config file used when neither `--config` nor `SLIDEGATE_CONFIG` is given.
pub const DEFAULT_CONFIG_FILE: &str = "config.toml";

/// What the file configures: the gateway (every route names an upstream) or a rate-limit
/// layer embedded in another service (routes have no upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `slidegate` itself.
    Gateway,
    /// `slidegate::RateLimitLayer` in front of someone's service.
    Layer,
}

impl Purpose {
    /// What a config file's text is for when nobody says: a layer file when it has routes,
    /// none of which names an `upstream`, no `[upstreams]`, and no listener that only the
    /// gateway serves (`[forward_auth]`, `[rls]`, `[ext_authz]`: a forward-auth gateway's routes need no
    /// upstream); the gateway's otherwise (text that does not parse too, so its errors are the
    /// gateway's).
    pub fn detect(text: &str) -> Purpose {
        let Ok(doc) = text.parse::<toml::Table>() else {
            return Purpose::Gateway;
        };
        let routes = doc.get("routes").and_then(toml::Value::as_array);
        let upstream_free = routes.is_some_and(|routes| {
            !routes.is_empty()
                && routes
                    .iter()
                    .all(|r| r.as_table().is_some_and(|t| !t.contains_key("upstream")))
        });
        let gateway_only = ["upstreams", "forward_auth", "rls", "ext_authz"]
            .iter()
            .any(|section| doc.contains_key(*section));
        match upstream_free && !gateway_only {
            true => Purpose::Layer,
            false => Purpose::Gateway,
        }
    }
}

/// A fully validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    /// What it configures: the gateway, or a layer in front of someone's service.
    pub purpose: Purpose,
    /// The environment it was read with (a reload reads the file again with it).
    pub env: Environment,
    /// `[server]`
    pub server: ServerConfig,
    /// `[admin]`
    pub admin: AdminConfig,
    /// `[store]`
    pub store: StoreConfig,
    /// `[upstreams.*]`, by name.
    pub upstreams: BTreeMap<String, Arc<UpstreamConfig>>,
    /// `[[routes]]`, in file order (the first match wins).
    pub routes: Vec<Arc<RouteConfig>>,
    /// `[jwt]`, when the file has one.
    pub jwt: Option<JwtConfig>,
    /// `[keys]`.
    pub keys: KeysConfig,
    /// `[segments.*]` in file order and `[plans]`: the files they were read from.
    pub tier_files: TierFiles,
    /// Who is in which segment or plan, read from those files.
    pub membership: Arc<Membership>,
    /// `[plans] unknown`.
    pub unknown_plan: UnknownPlan,
    /// `[rls]`, with the limits of its YAML files.
    pub rls: Option<RlsConfig>,
    /// `[forward_auth]`.
    pub forward_auth: Option<ForwardAuthConfig>,
    /// `[ext_authz]`.
    pub ext_authz: Option<ExtAuthzConfig>,
    /// Settings accepted but almost always a mistake, or ignored, to be logged.
    pub warnings: Vec<ConfigWarning>,
}

/// Where segments and plans were read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierFiles {
    /// `[segments.NAME] members_file`, in file order.
    pub segments: Vec<(String, PathBuf)>,
    /// `[plans] members_file`.
    pub plans: Option<PathBuf>,
}

impl Config {
    /// Reads and validates `path`, with secrets and the Redis URL from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(path, Environment::process())
    }

    /// Reads and validates `path`, looking environment variables up with `env`.
    pub fn load_with_env(path: &Path, env: impl Into<Environment>) -> Result<Config, ConfigError> {
        Self::load_for(path, env, Purpose::Gateway)
    }

    /// Reads and validates `path` for `purpose`.
    pub fn load_for(
        path: &Path,
        env: impl Into<Environment>,
        purpose: Purpose,
    ) -> Result<Config, ConfigError> {
        Self::load_detected(path, env, Some(purpose))
    }

    /// Reads and validates `path` for what it is: `purpose` when given (`check --layer`), else
    /// as [`Purpose::detect`] reads it.
    pub fn load_detected(
        path: &Path,
        env: impl Into<Environment>,
        purpose: Option<Purpose>,
    ) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        let purpose = purpose.unwrap_or_else(|| Purpose::detect(&text));
        validate::parse(path, &text, &env.into(), purpose)
    }

    /// Parses TOML text as if read from `path`.
    pub fn from_toml(
        path: &Path,
        text: &str,
        env: impl Into<Environment>,
        purpose: Purpose,
    ) -> Result<Config, ConfigError> {
        validate::parse(path, text, &env.into(), purpose)
    }

    /// The one-screen summary printed by `slidegate check`.
    pub fn summary(&self) -> String {
        summary::render(self)
    }

    /// What the config names as its sources: this file, `[rls] config` (a file or a
    /// directory), each segment's and the plans' members file.
    pub fn sources(&self) -> Vec<PathBuf> {
        let mut sources = vec![self.source.clone()];
        sources.extend(self.rls.as_ref().map(|r| r.source.clone()));
        sources.extend(self.tier_files.segments.iter().map(|(_, p)| p.clone()));
        sources.extend(self.tier_files.plans.clone());
        sources
    }

    /// Every file a load of this config reads now: [`Config::sources`], with a directory of
    /// rate-limit files as the YAML files it holds now (the files it held when this config was
    /// read may have changed since).
    pub fn files_read(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for source in self.sources() {
            let is_rls = self.rls.as_ref().is_some_and(|r| r.source == source);
            match is_rls.then(|| rls_yaml::yaml_files(&source)) {
                Some(Ok(yaml)) => files.extend(yaml),
                _ => files.push(source),
            }
        }
        files
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        self.routes.iter().find(|r| r.name == name)
    }

    /// Whether any route fails closed on a store error (drives `/readyz`), with `store` the
    /// `[store]` section in force.
    pub fn any_route_fails_closed(&self, store: &StoreConfig) -> bool {
        self.routes
            .iter()
            .any(|r| r.on_error.unwrap_or(store.on_error) == OnError::Deny)
    }
}
