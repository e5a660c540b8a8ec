//! The validated sections around the routes: `[server]`, `[admin]`, `[store]`,
//! `[upstreams.*]`, `[jwt]`, `[keys]`, `[plans]`, and the settings that name one of a fixed list
//! (each such list written once, in [`named!`], for both the validator and the names shown).

use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use ipnet::IpNet;

/// An enum whose values are names in the config file: the list of names is written once and
/// serves both the validator (which takes them) and everything that shows them.
macro_rules! named {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }
        impl $name {
            /// Every value with its name in the config file.
            pub const NAMES: &'static [(&'static str, $name)] = &[$(($text, $name::$variant)),+];
            /// The name used in the config file.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use named;

named! {
    /// Which store decides.
    pub enum Backend {
        /// Redis (standalone, cluster or sentinel): shared by every instance.
        Redis = "redis",
        /// The embedded in-process store: one instance only.
        Memory = "memory",
    }
}

named! {
    /// What to do when the store cannot decide in time.
    pub enum OnError {
        /// Fail open: forward the request.
        Allow = "allow",
        /// Fail closed: 503 with `Retry-After: 1`.
        Deny = "deny",
        /// Decide with the in-process limiter instead.
        Local = "local",
    }
}

named! {
    /// Whose clock timestamps the sliding windows.
    pub enum ClockSource {
        /// The Redis server's `TIME`, so skewed gateways still agree.
        Redis = "redis",
        /// The gateway's own clock, passed to the script.
        Local = "local",
    }
}

named! {
    /// How the decision code runs on Redis.
    pub enum ScriptsMode {
        /// A Functions library where the server has them (Redis 7+), else scripts.
        Auto = "auto",
        /// A Functions library (`FCALL`): a server without them is an error.
        Functions = "functions",
        /// Scripts (`EVALSHA`), on any server.
        Eval = "eval",
    }
}

named! {
    /// How route paths are compared with request paths.
    pub enum PathCase {
        /// Ignoring ASCII case (many upstream frameworks route `/API/OTP` to `/api/otp`).
        Insensitive = "insensitive",
        /// Exactly.
        Sensitive = "sensitive",
    }
}

named! {
    /// The one forwarding header trusted proxies write the client address in.
    pub enum ClientIpHeader {
        /// `X-Forwarded-For: client, proxy1`
        XForwardedFor = "x-forwarded-for",
        /// `Forwarded: for=client` (RFC 7239)
        Forwarded = "forwarded",
        /// `X-Real-IP: client`
        XRealIp = "x-real-ip",
    }
}

named! {
    /// What a request without its key parts gets.
    pub enum OnMissingKey {
        /// 400 with a problem body.
        Reject = "reject",
        /// The missing part is replaced by the client IP (marked, so no value can equal it).
        Ip = "ip",
    }
}

named! {
    /// What a key in no plan gets on a route whose limits have plan values.
    pub enum UnknownPlan {
        /// The limit's own value.
        Default = "default",
        /// 403 `unknown_key`.
        Reject = "reject",
    }
}

/// `[server]`: the proxy listener.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// Peers whose forwarding header and `X-Request-Id` are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The header trusted proxies write the client address in.
    pub client_ip_header: ClientIpHeader,
    /// How long in-flight requests may take to finish on shutdown.
    pub shutdown_grace: Duration,
    /// `ip` keys of IPv6 clients are their network of this prefix length.
    pub ipv6_prefix: u8,
    /// A client must send its whole request head within this.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// Open client connections at most, the whole process; beyond, new ones wait.
    pub max_connections: usize,
    /// Bytes of a request head (target and header fields) at most; beyond, 431.
    pub max_header_bytes: usize,
    /// Header fields of a request at most; beyond, 431.
    pub max_headers: usize,
    /// Whether route matching ignores ASCII case.
    pub path_case: PathCase,
    /// Whether the gateway reloads by itself when a file its config was read from changes.
    pub watch_files: bool,
}

/// `[admin]`: the admin listener.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// Where `/metrics`, `/healthz`, `/admin/*` and `/v1/*` listen.
    pub listen: SocketAddr,
    /// The environment variable holding the bearer token.
    pub token_env: String,
    /// Where the file names it (its start when it names none), for an error about it.
    pub token_env_at: super::Location,
    /// The bearer token, when the variable is set and not empty.
    pub token: Option<String>,
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
    /// Live keys the in-process store (memory backend, local fallback, deny cache) holds.
    pub max_keys: usize,
    /// First segment of every Redis key.
    pub key_prefix: String,
    /// Whose clock the windows use.
    pub clock: ClockSource,
    /// Replicas that must hold an allowed decision's charge before it is answered (`WAIT`);
    /// 0 answers at once.
    pub replica_acks: u32,
    /// How the decision code runs: a Functions library or scripts.
    pub scripts: ScriptsMode,
}

impl StoreConfig {
    /// The Redis pub/sub channel on which instances sharing this store tell each other of
    /// admin resets.
    pub fn reset_channel(&self) -> String {
        format!("{}:reset", self.key_prefix)
    }
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
    /// Bound on receiving the response head, counted from the end of the request body.
    pub timeout: Duration,
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
    /// The file the public key was read from (watched with the config), if it came from one.
    pub key_file: Option<std::path::PathBuf>,
    /// The environment variable the HS256 secret was read from, if it came from one.
    pub secret_env: Option<String>,
}

/// The HMAC secret of `hash = true` key parts (`[keys] hash_secret_env`).
#[derive(Clone, PartialEq, Eq)]
pub struct HashSecret(pub Vec<u8>);

impl std::fmt::Debug for HashSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashSecret(<redacted>)")
    }
}

/// `[keys]`
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeysConfig {
    /// The environment variable the secret came from.
    pub hash_secret_env: Option<String>,
    /// The secret, when the variable is set and not empty.
    pub hash_secret: Option<HashSecret>,
}
