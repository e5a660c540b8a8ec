//! `[rls]`, validated: where Envoy's rate-limit service API listens, and the limits it decides
//! with, read from YAML files in envoyproxy/ratelimit's format (`rls_yaml/` reads them): a
//! domain, its descriptor tree, and each node's rate limit. Compiling the tree for the request
//! path (matching, the limiter's policies) is `crate::rls`'s job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::settings::{named, OnError};
use crate::algorithm::AlgorithmId;

named! {
    /// A rate limit's `unit` (envoyproxy/ratelimit's, as the YAML and Envoy's overrides name
    /// them): the window it stands for slides, `minute` is the last 60 s.
    pub enum RlsUnit {
        /// 1 s.
        Second = "second",
        /// 60 s.
        Minute = "minute",
        /// 1 h.
        Hour = "hour",
        /// 24 h.
        Day = "day",
        /// 7 days.
        Week = "week",
        /// 30 days, as envoyproxy/ratelimit counts a month.
        Month = "month",
        /// 365 days.
        Year = "year",
    }
}

impl RlsUnit {
    /// The window the unit stands for.
    pub fn window(self) -> Duration {
        const DAY: u64 = 24 * 3600;
        Duration::from_secs(match self {
            RlsUnit::Second => 1,
            RlsUnit::Minute => 60,
            RlsUnit::Hour => 3600,
            RlsUnit::Day => DAY,
            RlsUnit::Week => 7 * DAY,
            RlsUnit::Month => 30 * DAY,
            RlsUnit::Year => 365 * DAY,
        })
    }

    /// The unit whose window is exactly `window`, if one is.
    pub fn of_window(window: Duration) -> Option<RlsUnit> {
        RlsUnit::NAMES
            .iter()
            .map(|&(_, u)| u)
            .find(|u| u.window() == window)
    }
}

/// `[rls]`
#[derive(Debug, Clone)]
pub struct RlsConfig {
    /// Where `ShouldRateLimit` is served (gRPC, HTTP/2 cleartext).
    pub listen: SocketAddr,
    /// The YAML file, or the directory of YAML files, the limits were read from.
    pub source: PathBuf,
    /// Whether answers carry `RateLimit-Policy`, `RateLimit` (and `Retry-After` when over the
    /// limit) for Envoy to add to its response.
    pub headers: bool,
    /// What a store failure answers: `allow` (OK), `deny` (OVER_LIMIT) or `local`.
    pub on_error: OnError,
    /// `merge_domains`: several files may share a domain, their descriptors merged
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// The domains, in the order the files were read.
    pub domains: Vec<Arc<RlsDomain>>,
}

impl RlsConfig {
    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Arc<RlsDomain>> {
        self.domains.iter().find(|d| d.name == name)
    }
}

/// One YAML file: a domain and its descriptor tree.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsDomain {
    /// `domain`: what Envoy's requests name.
    pub name: String,
    /// `descriptors`: the first level of the tree.
    pub descriptors: Vec<RlsDescriptor>,
    /// Every rate limit of the tree, in file order; nodes point here.
    pub rules: Vec<RlsRule>,
}

/// One node of a domain's descriptor tree.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsDescriptor {
    /// `key`: the descriptor entry's key it matches.
    pub key: String,
    /// `value`: the entry's value it matches (`*` matches any run of characters); `None`
    /// matches any value, which then becomes part of the counted key.
    pub value: Option<String>,
    /// `share_threshold`: every value this node's wildcard matches counts as one.
    pub share_threshold: bool,
    /// The rate limit of this node (an index into [`RlsDomain::rules`]).
    pub rule: Option<usize>,
    /// `descriptors`: the next level.
    pub descriptors: Vec<RlsDescriptor>,
}

/// One `rate_limit`, with the node's `shadow_mode` and `quota_mode`.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsRule {
    /// The name metrics, headers and `/admin/usage` show: `name`, else the node's descriptor
    /// keys joined by `.` (`key_value` for the nodes with a value where two rules of the
    /// domain would otherwise share it).
    pub label: String,
    /// `name`, when given (what `replaces` names).
    pub name: Option<String>,
    /// `unlimited: true`: matched, never counted.
    pub unlimited: bool,
    /// `requests_per_unit` (0 refuses every request).
    pub limit: u64,
    /// The window: `unit`'s, or slidegate's `window`.
    pub window: Duration,
    /// `unit`, when the window was given as one.
    pub unit: Option<RlsUnit>,
    /// slidegate's `algorithm` (`sliding_log` by default).
    pub algorithm: AlgorithmId,
    /// `replaces`: names of the rate limits this one takes the place of.
    pub replaces: Vec<String>,
    /// `shadow_mode`: decided and counted, never refused.
    pub shadow: bool,
    /// `quota_mode`: over it, a descriptor says OVER_LIMIT, but the request is refused for its
    /// quota-mode limits only when every one of them is over (envoyproxy/ratelimit's rule).
    pub quota: bool,
    /// The node's path of descriptor keys (`key` or `key_value`) joined by `.`: what its
    /// stored counts are told apart by.
    pub path: String,
    /// How many entries a descriptor that reaches it has (its depth in the tree).
    pub entries: usize,
}
