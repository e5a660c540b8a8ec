//! Serde mirror of `config.toml`: field names and nesting exactly as the file spells them,
//! no logic. Values that can be wrong are `Spanned` so validation can point at FILE:LINE:COLUMN.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub upstreams: BTreeMap<String, Spanned<RawUpstream>>,
    #[serde(default)]
    pub routes: Vec<Spanned<RawRoute>>,
    pub jwt: Option<Spanned<RawJwt>>,
    #[serde(default)]
    pub segments: BTreeMap<String, Spanned<RawSegment>>,
    pub plans: Option<Spanned<RawPlans>>,
}

/// `[segments.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSegment {
    pub members_file: Spanned<String>,
}

/// `[plans]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlans {
    pub members_file: Spanned<String>,
}

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub trusted_proxies: Option<Vec<Spanned<String>>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_headers: Option<Spanned<i64>>,
}

/// `[admin]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<Spanned<String>>,
    pub token_env: Option<Spanned<String>>,
}

/// `[store]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
    pub key_prefix: Option<Spanned<String>>,
    pub clock: Option<Spanned<String>>,
}

/// `[upstreams.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub url: Spanned<String>,
    pub connect_timeout: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
}

/// `[[routes]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: Spanned<String>,
    pub path: Spanned<String>,
    pub methods: Option<Vec<Spanned<String>>>,
    pub upstream: Spanned<String>,
    pub key: Option<Spanned<Vec<Spanned<String>>>>,
    pub on_missing_key: Option<Spanned<String>>,
    pub on_exceed: Option<Spanned<String>>,
    pub max_delay: Option<Spanned<String>>,
    pub max_waiting: Option<Spanned<i64>>,
    pub block_for: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
    pub headers: Option<bool>,
    pub exempt: Option<Vec<Spanned<String>>>,
    pub access_log: Option<bool>,
    pub access_log_sample: Option<Spanned<f64>>,
    #[serde(default)]
    pub limits: Vec<Spanned<RawLimit>>,
}

/// `[[routes.limits]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    pub name: Spanned<String>,
    pub limit: Spanned<i64>,
    pub window: Spanned<String>,
    pub algorithm: Option<Spanned<String>>,
    #[serde(default)]
    pub segments: BTreeMap<String, Spanned<i64>>,
    #[serde(default)]
    pub plans: BTreeMap<String, Spanned<i64>>,
}

/// `[jwt]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub hs256_secret_env: Option<Spanned<String>>,
    pub public_key_file: Option<Spanned<String>>,
    pub issuer: Option<Spanned<String>>,
    pub audience: Option<Spanned<String>>,
    pub require_exp: Option<bool>,
}
