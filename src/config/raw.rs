//! Serde mirror of `config.toml`: field names and nesting exactly as the file spells them,
//! no logic. Values that can be wrong are `Spanned` so validation can point at FILE:LINE:COLUMN.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
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
    pub keys: Option<Spanned<RawKeys>>,
    #[serde(default)]
    pub segments: BTreeMap<String, Spanned<RawSegment>>,
    pub plans: Option<Spanned<RawPlans>>,
    pub rls: Option<Spanned<RawRls>>,
    pub forward_auth: Option<Spanned<RawForwardAuth>>,
    pub ext_authz: Option<Spanned<RawExtAuthz>>,
}

/// `[rls]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRls {
    pub listen: Option<Spanned<String>>,
    pub config: Spanned<String>,
    pub headers: Option<bool>,
    pub on_error: Option<Spanned<String>>,
    pub merge_domains: Option<bool>,
}

/// `[forward_auth]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwardAuth {
    pub listen: Option<Spanned<String>>,
    pub refused_status: Option<Spanned<i64>>,
}

/// `[ext_authz]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExtAuthz {
    pub listen: Option<Spanned<String>>,
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
    pub unknown: Option<Spanned<String>>,
}

/// `[keys]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeys {
    pub hash_secret_env: Option<Spanned<String>>,
}

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub trusted_proxies: Option<Vec<Spanned<String>>>,
    pub client_ip_header: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_headers: Option<Spanned<i64>>,
    pub path_case: Option<Spanned<String>>,
    pub watch_files: Option<Spanned<bool>>,
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
    pub max_keys: Option<Spanned<i64>>,
    pub key_prefix: Option<Spanned<String>>,
    pub clock: Option<Spanned<String>>,
    pub replica_acks: Option<Spanned<i64>>,
    pub scripts: Option<Spanned<String>>,
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
    pub upstream: Option<Spanned<String>>,
    pub key: Option<Spanned<Vec<Spanned<RawKeyPart>>>>,
    pub on_missing_key: Option<Spanned<String>>,
    pub max_key_body_bytes: Option<Spanned<i64>>,
    pub on_exceed: Option<Spanned<String>>,
    pub max_delay: Option<Spanned<String>>,
    pub max_waiting: Option<Spanned<i64>>,
    pub block_for: Option<Spanned<String>>,
    pub block_growth: Option<Spanned<f64>>,
    pub block_max: Option<Spanned<String>>,
    pub block_forget: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
    pub headers: Option<bool>,
    pub exempt: Option<Vec<Spanned<String>>>,
    pub access_log: Option<bool>,
    pub access_log_sample: Option<Spanned<f64>>,
    pub max_cost_body_bytes: Option<Spanned<i64>>,
    #[serde(default)]
    pub limits: Vec<Spanned<RawLimit>>,
}

/// `[[routes.limits]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    pub name: Spanned<String>,
    pub limit: Spanned<i64>,
    pub window: Option<Spanned<String>>,
    pub algorithm: Option<Spanned<String>>,
    pub lease: Option<Spanned<String>>,
    pub cost_from: Option<Spanned<String>>,
    pub cost: Option<Spanned<RawCost>>,
    pub burst: Option<Spanned<i64>>,
    pub key: Option<Spanned<Vec<Spanned<RawKeyPart>>>>,
    pub on_missing_key: Option<Spanned<String>>,
    pub count_status: Option<Spanned<Vec<Spanned<RawStatus>>>>,
    pub reset_status: Option<Spanned<Vec<Spanned<RawStatus>>>>,
    #[serde(default)]
    pub segments: BTreeMap<String, Spanned<i64>>,
    #[serde(default)]
    pub plans: BTreeMap<String, Spanned<i64>>,
}

/// One key part: `"header:X-Api-Key"`, or an inline table with options.
#[derive(Debug)]
pub enum RawKeyPart {
    Text(String),
    Table(RawKeyPartTable),
}

/// `{ part = "json:phone", normalize = "phone", region = "ID", prefix = 6, hash = true }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeyPartTable {
    pub part: Spanned<String>,
    pub normalize: Option<Spanned<String>>,
    pub region: Option<Spanned<String>>,
    pub prefix: Option<Spanned<i64>>,
    pub hash: Option<Spanned<bool>>,
}

impl<'de> Deserialize<'de> for RawKeyPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PartVisitor;
        impl<'de> Visitor<'de> for PartVisitor {
            type Value = RawKeyPart;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key part: a string like \"ip\" or an inline table { part = ... }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawKeyPart, E> {
                Ok(RawKeyPart::Text(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawKeyPart, A::Error> {
                RawKeyPartTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawKeyPart::Table)
            }
        }
        d.deserialize_any(PartVisitor)
    }
}

/// One entry of `count_status` / `reset_status`: a code (`401`) or a class (`"5xx"`).
#[derive(Debug)]
pub enum RawStatus {
    Code(i64),
    Class(String),
}

impl<'de> Deserialize<'de> for RawStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StatusVisitor;
        impl<'de> Visitor<'de> for StatusVisitor {
            type Value = RawStatus;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status code like 401 or a class like \"5xx\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawStatus, E> {
                Ok(RawStatus::Code(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawStatus, E> {
                Ok(RawStatus::Code(v.min(i64::MAX as u64) as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawStatus, E> {
                Ok(RawStatus::Class(v.to_string()))
            }
        }
        d.deserialize_any(StatusVisitor)
    }
}

/// A limit's `cost`: a number of units, or where the request body states it (`"json:PATH"`).
#[derive(Debug)]
pub enum RawCost {
    Units(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for RawCost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct CostVisitor;
        impl<'de> Visitor<'de> for CostVisitor {
            type Value = RawCost;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of units, or \"json:PATH\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawCost, E> {
                Ok(RawCost::Units(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawCost, E> {
                Ok(RawCost::Units(v.min(i64::MAX as u64) as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawCost, E> {
                Ok(RawCost::Text(v.to_string()))
            }
        }
        d.deserialize_any(CostVisitor)
    }
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
