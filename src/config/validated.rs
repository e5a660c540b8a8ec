//! The validated configuration as the rest of the gateway reads it: every section in its real
//! types, and the questions asked of it (its routes, its sources, whether any route fails
//! closed). Reading and validating a file is `validate/`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::environment::Environment;
use super::error::ConfigWarning;
use super::ext_authz::ExtAuthzConfig;
use super::forward_auth::ForwardAuthConfig;
use super::purpose::Purpose;
use super::rls::RlsConfig;
use super::route::RouteConfig;
use super::settings::{
    AdminConfig, JwtConfig, KeysConfig, OnError, ServerConfig, StoreConfig, UnknownPlan,
    UpstreamConfig,
};
use crate::tier::Membership;

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
    /// What the config names as its sources: this file, `[rls] config` (a file or a
    /// directory), each segment's and the plans' members file, the JWT public key file.
    pub fn sources(&self) -> Vec<PathBuf> {
        let mut sources = vec![self.source.clone()];
        sources.extend(self.rls.as_ref().map(|r| r.source.clone()));
        sources.extend(self.jwt.as_ref().and_then(|j| j.key_file.clone()));
        sources.extend(self.tier_files.segments.iter().map(|(_, p)| p.clone()));
        sources.extend(self.tier_files.plans.clone());
        sources
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
