//! The validated configuration: every value parsed into its real type (durations, CIDRs,
//! socket addresses, URIs) and every cross-reference checked. `raw.rs` mirrors the TOML;
//! `validate/` turns a `RawConfig` into a [`Config`] or a `FILE:LINE:COLUMN` error.

mod duration;
mod environment;
mod error;
mod ext_authz;
mod forward_auth;
mod key_spec;
mod purpose;
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
mod validated;

use std::path::{Path, PathBuf};

pub use duration::format as format_duration;
pub(crate) use duration::parse as parse_duration;
pub use environment::{Environment, CONFIG_ENV, DEFAULT_CONFIG_FILE, REDIS_URL_ENV};
pub use error::{ConfigError, ConfigWarning, Location};
pub use ext_authz::ExtAuthzConfig;
pub use forward_auth::ForwardAuthConfig;
pub use key_spec::{KeyPart, KeyPartSpec, KeySpec, Normalize};
pub use purpose::Purpose;
pub use rls::{RlsConfig, RlsDescriptor, RlsDomain, RlsRule, RlsUnit};
pub use route::{BlockPolicy, ExceedMode, LimitConfig, PathPattern, RouteConfig, StatusSet};
pub use secrets::{redact_secrets, redact_url};
pub use settings::{
    AdminConfig, Backend, ClientIpHeader, ClockSource, HashSecret, JwtConfig, JwtKey, KeysConfig,
    OnError, OnMissingKey, PathCase, ScriptsMode, ServerConfig, StoreConfig, UnknownPlan,
    UpstreamConfig,
};
pub use validated::{Config, TierFiles};

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
        let text = error::read_text(path)?;
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

    /// What [`Config::files_read`] hold now: each file, and the SHA-256 of its bytes (`None`
    /// when it cannot be read), in order. Equal digests: a reload would read the same.
    pub fn files_digest(&self) -> FilesDigest {
        use sha2::{Digest, Sha256};
        let digest = |file: &PathBuf| std::fs::read(file).ok().map(|b| Sha256::digest(b).into());
        let files = self.files_read().into_iter();
        files
            .map(|file| {
                let read = digest(&file);
                (file, read)
            })
            .collect()
    }
}

/// The content of a config's files as a reload reads it ([`Config::files_digest`]).
pub type FilesDigest = Vec<(PathBuf, Option<[u8; 32]>)>;
