//! The validated configuration: every value parsed into its real type (durations, CIDRs,
//! socket addresses, URIs) and every cross-reference checked. `raw.rs` mirrors the TOML;
//! `validate.rs` turns a `RawConfig` into a [`Config`] or a `FILE:LINE:COLUMN` error.

mod error;
mod key_part;
// Fields of the serde mirror are the TOML keys themselves, documented in the README.
#[allow(missing_docs)]
pub mod raw;
pub mod summary;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Uri};
use ipnet::IpNet;

pub use error::{ConfigError, ConfigWarning, Location};
pub use key_part::KeyPart;

use crate::tier::Membership;

/// Environment variable that overrides `store.url`.
pub const REDIS_URL_ENV: &str = "SLIDEGATE_REDIS_URL";
/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "SLIDEGATE_CONFIG";
/// Config file used when neither `--config` nor `SLIDEGATE_CONFIG` is given.
pub const DEFAULT_CONFIG_FILE: &str = "config.toml";

/// A fully validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
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
    /// `[segments.*]` in file order and `[plans]`: the files they were read from.
    pub tier_files: TierFiles,
    /// Who is in which segment or plan, read from those files.
    pub membership: Arc<Membership>,
    /// Settings accepted but ignored, to be logged.
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

/// `[server]`: the proxy listener.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// How long in-flight requests may take to finish on shutdown.
    pub shutdown_grace: Duration,
    /// `ip` keys of IPv6 clients are their network of this prefix length.
    pub ipv6_prefix: u8,
    /// A client must send its whole request head within this.
    pub header_read_timeout: Duration,
    /// Open client connections at most; beyond, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Bytes of a request head (target and header fields) at most; beyond, 431.
    pub max_header_bytes: usize,
    /// Header fields of a request at most; beyond, 431.
    pub max_headers: usize,
}

/// `[admin]`: the admin listener.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// Where `/metrics`, `/healthz`, `/admin/*` and `/v1/*` listen.
    pub listen: SocketAddr,
    /// The environment variable holding the bearer token.
    pub token_env: String,
    /// The bearer token, when the variable is set and not empty.
    pub token: Option<String>,
}

/// Which store decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Redis (standalone, cluster or sentinel): shared by every instance.
    Redis,
    /// The embedded in-process store: one instance only.
    Memory,
}

impl Backend {
    /// The name used in the config file.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Memory => "memory",
        }
    }
}

/// What to do when the store cannot decide in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Fail open: forward the request.
    Allow,
    /// Fail closed: 503 with `Retry-After: 1`.
    Deny,
    /// Decide with the in-process limiter instead.
    Local,
}

impl OnError {
    /// The name used in the config file.
    pub fn name(self) -> &'static str {
        match self {
            OnError::Allow => "allow",
            OnError::Deny => "deny",
            OnError::Local => "local",
        }
    }
}

/// Whose clock timestamps the sliding windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// The Redis server's `TIME`, so skewed gateways still agree.
    Redis,
    /// The gateway's own clock, passed to the script.
    Local,
}

impl ClockSource {
    /// The name used in the config file.
    pub fn name(self) -> &'static str {
        match self {
            ClockSource::Redis => "redis",
            ClockSource::Local => "local",
        }
    }
}

/// `[store]`
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Redis or the embedded store.
    pub backend: Backend,
    /// The Redis URL (after `SLIDEGATE_REDIS_URL`).
    pub url: String,
    /// Bound on one decision.
    pub timeout: Duration,
    /// Default for routes that set no `on_error`.
    pub on_error: OnError,
    /// First segment of every Redis key.
    pub key_prefix: String,
    /// Whose clock the windows use.
    pub clock: ClockSource,
}

/// `[upstreams.NAME]`
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// The name routes refer to.
    pub name: String,
    /// Scheme and authority of the upstream, plus an optional base path.
    pub url: Uri,
    /// TCP (and TLS) connect bound.
    pub connect_timeout: Duration,
    /// Bound on receiving the response head.
    pub timeout: Duration,
}

/// A route's path: exact, or a prefix when written with a trailing `/*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    /// The path without the `/*`.
    pub path: String,
    /// Whether everything below `path` matches too.
    pub prefix: bool,
}

impl PathPattern {
    /// Whether the normalised `path` is matched: `/api/otp/*` matches `/api/otp` and
    /// `/api/otp/x`, not `/api/otpx`; an exact `/login` matches `/login` and `/login/`, because
    /// most upstream frameworks serve both alike and the limit must not be dodged by a slash.
    pub fn matches(&self, path: &str) -> bool {
        if !self.prefix {
            return path == self.path
                || (path.len() == self.path.len() + 1
                    && path.ends_with('/')
                    && path.starts_with(self.path.as_str()));
        }
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || self.path.ends_with('/'),
            None => false,
        }
    }
}

impl std::fmt::Display for PathPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix {
            write!(f, "{}/*", self.path.trim_end_matches('/'))
        } else {
            f.write_str(&self.path)
        }
    }
}

/// What a request without its key parts gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissingKey {
    /// 400 with a JSON error.
    Reject,
    /// The missing part is replaced by the client IP.
    Ip,
}

impl OnMissingKey {
    /// The name used in the config file.
    pub fn name(self) -> &'static str {
        match self {
            OnMissingKey::Reject => "reject",
            OnMissingKey::Ip => "ip",
        }
    }
}

/// What happens to a request over the limit.
#[derive(Debug, Clone, PartialEq)]
pub enum ExceedMode {
    /// 429 at once.
    Reject,
    /// Wait for room up to `max_delay`, with at most `max_waiting` requests waiting on the route.
    Delay {
        /// Longest wait before a 429.
        max_delay: Duration,
        /// Requests waiting at once on this route; beyond, 429.
        max_waiting: usize,
    },
    /// Reject the key for `block_for` after its first exceed.
    Block {
        /// How long a key stays blocked.
        block_for: Duration,
    },
    /// Count but never reject.
    Shadow,
}

impl ExceedMode {
    /// The name used in the config file.
    pub fn name(&self) -> &'static str {
        match self {
            ExceedMode::Reject => "reject",
            ExceedMode::Delay { .. } => "delay",
            ExceedMode::Block { .. } => "block",
            ExceedMode::Shadow => "shadow",
        }
    }
}

/// The sliding-window algorithm of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Exact: one sorted-set entry per allowed request.
    SlidingLog,
    /// Approximate, constant memory: two fixed-window counters.
    SlidingWindowCounter,
}

impl Algorithm {
    /// The name used in the config file and for the script file.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindowCounter => "sliding_window_counter",
        }
    }
}

/// `[[routes.limits]]`
#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    /// The name shown in headers, bodies and metrics.
    pub name: String,
    /// Units allowed per window (at least 1), for keys in no segment or plan below.
    pub limit: u64,
    /// The window length.
    pub window: Duration,
    /// How the limit counts (`sliding_log` when the file does not say).
    pub algorithm: Algorithm,
    /// `[routes.limits.segments]`: the value for keys in a segment.
    pub segments: BTreeMap<String, u64>,
    /// `[routes.limits.plans]`: the value for keys on a plan.
    pub plans: BTreeMap<String, u64>,
}

impl LimitConfig {
    /// A limit with one value for every key.
    pub fn new(name: &str, limit: u64, window: Duration) -> LimitConfig {
        LimitConfig {
            name: name.to_string(),
            limit,
            window,
            algorithm: Algorithm::SlidingLog,
            segments: BTreeMap::new(),
            plans: BTreeMap::new(),
        }
    }
}

/// `[[routes]]`
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// Unique name: metrics label, Redis key segment.
    pub name: String,
    /// Path to match.
    pub path: PathPattern,
    /// Methods to match; `None` matches all.
    pub methods: Option<Vec<Method>>,
    /// The upstream's name.
    pub upstream: String,
    /// Key parts in order.
    pub key: Vec<KeyPart>,
    /// What a request missing a key part gets.
    pub on_missing_key: OnMissingKey,
    /// What a request over the limit gets.
    pub on_exceed: ExceedMode,
    /// What a store failure does on this route, when the route says (else `store.on_error`).
    pub on_error: Option<OnError>,
    /// Whether allowed responses carry rate-limit headers.
    pub headers: bool,
    /// Clients passed through uncounted (decision `exempt`).
    pub exempt: Vec<IpNet>,
    /// Whether requests of this route are written to the access log.
    pub access_log: bool,
    /// The share of allowed requests written to the access log (others always are).
    pub access_log_sample: f64,
    /// The limits, all decided in one atomic call (whatever their algorithms).
    pub limits: Vec<LimitConfig>,
}

impl RouteConfig {
    /// Whether this route takes a request with this method and path.
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        self.methods.as_ref().is_none_or(|m| m.contains(method)) && self.path.matches(path)
    }
}

/// How JWT signatures are checked.
#[derive(Clone)]
pub enum JwtKey {
    /// A shared HS256 secret.
    Hs256(Vec<u8>),
    /// An RS256 public key (PEM).
    Rs256(Vec<u8>),
    /// An ES256 public key (PEM).
    Es256(Vec<u8>),
}

impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JwtKey::Hs256(_) => "Hs256(<redacted>)",
            JwtKey::Rs256(_) => "Rs256(<public key>)",
            JwtKey::Es256(_) => "Es256(<public key>)",
        })
    }
}

/// `[jwt]`
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The verification key.
    pub key: JwtKey,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud`, when set.
    pub audience: Option<String>,
    /// Whether a token must carry `exp` (default false: checked when present, as Envoy and Kong
    /// do); `nbf` is honoured when present.
    pub require_exp: bool,
}

impl Config {
    /// Reads and validates `path`, with secrets and the Redis URL from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(path, &|name| std::env::var(name).ok())
    }

    /// Reads and validates `path`, looking environment variables up with `env`.
    pub fn load_with_env(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        validate::parse(path, &text, env)
    }

    /// Parses TOML text as if read from `path` (used by tests and `check`).
    pub fn from_toml(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        validate::parse(path, text, env)
    }

    /// The one-screen summary printed by `slidegate check`.
    pub fn summary(&self) -> String {
        summary::render(self)
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        self.routes.iter().find(|r| r.name == name)
    }

    /// The first route taking this method and path.
    pub fn find_route(&self, method: &Method, path: &str) -> Option<&Arc<RouteConfig>> {
        self.routes.iter().find(|r| r.matches(method, path))
    }

    /// Whether any route fails closed on a store error (drives `/readyz`), with `store` the
    /// `[store]` section in force.
    pub fn any_route_fails_closed(&self, store: &StoreConfig) -> bool {
        self.routes
            .iter()
            .any(|r| r.on_error.unwrap_or(store.on_error) == OnError::Deny)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_patterns_match_the_base_and_below_only() {
        let p = PathPattern {
            path: "/api/otp".into(),
            prefix: true,
        };
        assert!(p.matches("/api/otp"));
        assert!(p.matches("/api/otp/"));
        assert!(p.matches("/api/otp/send"));
        assert!(!p.matches("/api/otpx"));
        assert!(!p.matches("/api"));
        let root = PathPattern {
            path: "/".into(),
            prefix: true,
        };
        assert!(root.matches("/anything"));
        let exact = PathPattern {
            path: "/login".into(),
            prefix: false,
        };
        assert!(exact.matches("/login"));
        assert!(exact.matches("/login/"));
        assert!(!exact.matches("/login/x"));
        assert!(!exact.matches("/loginx"));
    }
}
