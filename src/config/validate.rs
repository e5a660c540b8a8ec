//! `RawConfig` -> `Config`: parse every value, check every reference, and point each error at
//! the value's `FILE:LINE:COLUMN` with the key path in the message.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Uri};
use ipnet::IpNet;
use toml::Spanned;

use super::raw::{RawConfig, RawJwt, RawLimit, RawRoute, RawUpstream};
use super::*;
use crate::tier::{self, Membership};

/// Parses and validates the text of a config file.
pub(super) fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<Config, ConfigError> {
    let v = Validator {
        file: path.display().to_string(),
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        text,
        env,
        warnings: Vec::new(),
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| v.toml_error(&e))?;
    v.config(path, raw)
}

struct Validator<'a> {
    file: String,
    dir: std::path::PathBuf,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<ConfigWarning>,
}

type Result<T> = std::result::Result<T, ConfigError>;

/// Whether `url` has one of the Redis schemes the store takes, and a host.
fn is_redis_url(url: &str) -> bool {
    const SCHEMES: [&str; 6] = [
        "redis://",
        "rediss://",
        "redis-cluster://",
        "rediss-cluster://",
        "redis-sentinel://",
        "rediss-sentinel://",
    ];
    SCHEMES
        .iter()
        .find_map(|s| url.strip_prefix(s))
        .is_some_and(|rest| {
            let authority = rest.split(['/', '?']).next().unwrap_or("");
            let hosts = authority.rsplit('@').next().unwrap_or("");
            !hosts.is_empty() && !hosts.contains(char::is_whitespace)
        })
}

/// The longest window or block: beyond it, microsecond arithmetic would be needlessly close to overflow.
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

impl Validator<'_> {
    fn at(&self, span: std::ops::Range<usize>) -> Location {
        Location::from_span(&self.file, self.text, span)
    }

    fn error<T>(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> Result<T> {
        Err(ConfigError::Invalid {
            at: self.at(span),
            message: message.into(),
        })
    }

    fn warn(&mut self, span: std::ops::Range<usize>, message: impl Into<String>) {
        let at = self.at(span);
        self.warnings.push(ConfigWarning {
            at,
            message: message.into(),
        });
    }

    /// A setting that names one of a fixed list of `choices`: its value, `default` when the
    /// setting is absent, or an error naming what is allowed ("unknown WHAT `x`, expected ...").
    fn choice<T: Copy>(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        what: &str,
        choices: &[(&str, T)],
        default: T,
    ) -> Result<T> {
        let Some(v) = v else { return Ok(default) };
        let name = v.get_ref().as_str();
        if let Some(&(_, value)) = choices.iter().find(|(n, _)| *n == name) {
            return Ok(value);
        }
        let quoted: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        let expected = match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        self.error(
            v.span(),
            format!("{key}: unknown {what} `{name}`, expected {expected}"),
        )
    }

    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = e
            .message()
            .trim()
            .replace('\n', " ")
            .replace("expected i64", "expected an integer");
        ConfigError::Invalid {
            at: self.at(e.span().unwrap_or(0..0)),
            message,
        }
    }

    fn config(mut self, path: &Path, raw: RawConfig) -> Result<Config> {
        let server = self.server(&raw)?;
        let admin = self.admin(&raw)?;
        let store = self.store(&raw)?;
        let upstreams = self.upstreams(&raw.upstreams)?;
        let jwt = match &raw.jwt {
            Some(j) if uses_jwt(&raw) => Some(self.jwt(j)?),
            Some(j) => self.unused_jwt(j)?,
            None => None,
        };
        let (tier_files, membership) = self.tiers(&raw)?;
        let routes = self.routes(&raw, &upstreams, jwt.is_some(), &membership)?;
        Ok(Config {
            source: path.to_path_buf(),
            server,
            admin,
            store,
            upstreams,
            routes,
            jwt,
            tier_files,
            membership: Arc::new(membership),
            warnings: self.warnings,
        })
    }

    fn server(&self, raw: &RawConfig) -> Result<ServerConfig> {
        let s = &raw.server;
        Ok(ServerConfig {
            listen: self.socket_addr(s.listen.as_ref(), "server.listen", "0.0.0.0:8080")?,
            trusted_proxies: self.trusted_proxies(s.trusted_proxies.as_deref())?,
            shutdown_grace: self.duration_or(
                s.shutdown_grace.as_ref(),
                "server.shutdown_grace",
                Duration::from_secs(10),
            )?,
            ipv6_prefix: self.integer_in(
                s.ipv6_prefix.as_ref(),
                "server.ipv6_prefix",
                0,
                128,
                64,
            )? as u8,
            header_read_timeout: match &s.header_read_timeout {
                Some(d) => self.positive_duration(d, "server.header_read_timeout")?,
                None => Duration::from_secs(10),
            },
            max_connections: self.integer_in(
                s.max_connections.as_ref(),
                "server.max_connections",
                1,
                10_000_000,
                10_000,
            )? as usize,
            max_header_bytes: self.integer_in(
                s.max_header_bytes.as_ref(),
                "server.max_header_bytes",
                1024,
                1 << 20,
                32 * 1024,
            )? as usize,
            max_headers: self.integer_in(
                s.max_headers.as_ref(),
                "server.max_headers",
                8,
                1000,
                100,
            )? as usize,
        })
    }

    /// An integer setting within `min..=max`, or `default` when absent.
    fn integer_in(
        &self,
        v: Option<&Spanned<i64>>,
        key: &str,
        min: i64,
        max: i64,
        default: i64,
    ) -> Result<i64> {
        let Some(v) = v else { return Ok(default) };
        let n = *v.get_ref();
        if n < min || n > max {
            return self.error(
                v.span(),
                format!("{key}: must be between {min} and {max}, got {n}"),
            );
        }
        Ok(n)
    }

    /// `[segments.*]` and `[plans]`: their files, read now, so `check` and a reload see every
    /// problem in them.
    fn tiers(&self, raw: &RawConfig) -> Result<(TierFiles, Membership)> {
        let mut files = TierFiles::default();
        let mut segments = Vec::with_capacity(raw.segments.len());
        // `[segments.*]` tables keep file order: sort by where they stand in the file.
        let mut ordered: Vec<(&String, &Spanned<super::raw::RawSegment>)> =
            raw.segments.iter().collect();
        ordered.sort_by_key(|(_, s)| s.span().start);
        for (name, segment) in ordered {
            let key = format!("segments.{name}");
            self.check_name(name, segment.span(), &key)?;
            let file = &segment.get_ref().members_file;
            let path = self.dir.join(file.get_ref());
            let members = tier::read_segment(&path)
                .or_else(|why| self.error(file.span(), format!("{key}.members_file: {why}")))?;
            files.segments.push((name.clone(), path));
            segments.push((name.clone(), members));
        }
        let mut plans = std::collections::HashMap::new();
        if let Some(p) = &raw.plans {
            let file = &p.get_ref().members_file;
            let path = self.dir.join(file.get_ref());
            plans = tier::read_plans(&path)
                .or_else(|why| self.error(file.span(), format!("plans.members_file: {why}")))?;
            files.plans = Some(path);
        }
        Ok((files, Membership::new(segments, plans)))
    }

    fn admin(&self, raw: &RawConfig) -> Result<AdminConfig> {
        let listen =
            self.socket_addr(raw.admin.listen.as_ref(), "admin.listen", "127.0.0.1:9091")?;
        let token_env = match &raw.admin.token_env {
            Some(s) if s.get_ref().trim().is_empty() => {
                return self.error(
                    s.span(),
                    "admin.token_env: must name an environment variable",
                )
            }
            Some(s) => s.get_ref().clone(),
            None => "SLIDEGATE_ADMIN_TOKEN".to_string(),
        };
        let token = (self.env)(&token_env).filter(|t| !t.is_empty());
        Ok(AdminConfig {
            listen,
            token_env,
            token,
        })
    }

    fn store(&self, raw: &RawConfig) -> Result<StoreConfig> {
        let s = &raw.store;
        let backend = self.choice(
            s.backend.as_ref(),
            "store.backend",
            "backend",
            &[("redis", Backend::Redis), ("memory", Backend::Memory)],
            Backend::Redis,
        )?;
        let url = match (self.env)(REDIS_URL_ENV).filter(|u| !u.is_empty()) {
            Some(url) => {
                if !is_redis_url(&url) {
                    let span = s.url.as_ref().map_or(0..0, |u| u.span());
                    return self.error(
                        span,
                        format!("{REDIS_URL_ENV} (overrides store.url): `{url}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)"),
                    );
                }
                url
            }
            None => match &s.url {
                Some(u) => {
                    self.redis_url(u)?;
                    u.get_ref().clone()
                }
                None => "redis://127.0.0.1:6379".to_string(),
            },
        };
        let timeout = match &s.timeout {
            Some(t) => self.positive_duration(t, "store.timeout")?,
            None => Duration::from_millis(50),
        };
        let on_error = self
            .on_error(s.on_error.as_ref(), "store.on_error")?
            .unwrap_or(OnError::Allow);
        let key_prefix = match &s.key_prefix {
            Some(p) => {
                let valid = !p.get_ref().is_empty()
                    && p.get_ref()
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && !b"{}#".contains(&b));
                if !valid {
                    return self.error(
                        p.span(),
                        "store.key_prefix: must be non-empty printable ASCII without spaces, `{`, `}` or `#`",
                    );
                }
                p.get_ref().clone()
            }
            None => "slidegate".to_string(),
        };
        let clock = self.choice(
            s.clock.as_ref(),
            "store.clock",
            "clock",
            &[("redis", ClockSource::Redis), ("local", ClockSource::Local)],
            ClockSource::Redis,
        )?;
        Ok(StoreConfig {
            backend,
            url,
            timeout,
            on_error,
            key_prefix,
            clock,
        })
    }

    fn redis_url(&self, url: &Spanned<String>) -> Result<()> {
        if is_redis_url(url.get_ref()) {
            Ok(())
        } else {
            self.error(
                url.span(),
                format!(
                    "store.url: `{}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)",
                    url.get_ref()
                ),
            )
        }
    }

    /// An `on_error` setting, `None` when absent (the store's default or the route's inherited one).
    fn on_error(&self, v: Option<&Spanned<String>>, key: &str) -> Result<Option<OnError>> {
        let choices = [
            ("allow", Some(OnError::Allow)),
            ("deny", Some(OnError::Deny)),
            ("local", Some(OnError::Local)),
        ];
        self.choice(v, key, "value", &choices, None)
    }

    fn socket_addr(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        default: &str,
    ) -> Result<SocketAddr> {
        let Some(v) = v else {
            return Ok(default.parse().expect("default address parses"));
        };
        v.get_ref().parse().or_else(|_| {
            self.error(
                v.span(),
                format!("{key}: `{}` is not an IP:PORT address", v.get_ref()),
            )
        })
    }

    fn trusted_proxies(&self, list: Option<&[Spanned<String>]>) -> Result<Vec<IpNet>> {
        self.networks(list, "server.trusted_proxies")
    }

    /// A list of CIDRs (or single addresses).
    fn networks(&self, list: Option<&[Spanned<String>]>, key: &str) -> Result<Vec<IpNet>> {
        let mut nets = Vec::new();
        for item in list.unwrap_or_default() {
            let text = item.get_ref().trim();
            let net = text
                .parse::<IpNet>()
                .ok()
                .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from));
            match net {
                Some(n) => nets.push(n),
                None => {
                    return self.error(
                        item.span(),
                        format!("{key}: `{text}` is not a CIDR (like 10.0.0.0/8) or an IP address"),
                    )
                }
            }
        }
        Ok(nets)
    }

    fn duration(&self, v: &Spanned<String>, key: &str) -> Result<Duration> {
        match humantime::parse_duration(v.get_ref().trim()) {
            Ok(d) => Ok(d),
            Err(e) => self.error(
                v.span(),
                format!(
                    "{key}: `{}` is not a duration ({e}); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\"",
                    v.get_ref()
                ),
            ),
        }
    }

    fn duration_or(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        default: Duration,
    ) -> Result<Duration> {
        v.map_or(Ok(default), |v| self.duration(v, key))
    }

    fn positive_duration(&self, v: &Spanned<String>, key: &str) -> Result<Duration> {
        let d = self.duration(v, key)?;
        if d.is_zero() {
            return self.error(v.span(), format!("{key}: must be longer than zero"));
        }
        Ok(d)
    }

    fn upstreams(
        &self,
        raw: &BTreeMap<String, Spanned<RawUpstream>>,
    ) -> Result<BTreeMap<String, Arc<UpstreamConfig>>> {
        let mut out = BTreeMap::new();
        for (name, u) in raw {
            let u = u.get_ref();
            let key = format!("upstreams.{name}");
            let url = self.upstream_url(&u.url, &key)?;
            let connect_timeout = match &u.connect_timeout {
                Some(d) => self.positive_duration(d, &format!("{key}.connect_timeout"))?,
                // Long enough to outlive one SYN retransmission (1 s) to a busy upstream.
                None => Duration::from_secs(3),
            };
            let timeout = match &u.timeout {
                Some(d) => self.positive_duration(d, &format!("{key}.timeout"))?,
                None => Duration::from_secs(10),
            };
            out.insert(
                name.clone(),
                Arc::new(UpstreamConfig {
                    name: name.clone(),
                    url,
                    connect_timeout,
                    timeout,
                }),
            );
        }
        Ok(out)
    }

    fn upstream_url(&self, v: &Spanned<String>, key: &str) -> Result<Uri> {
        let bad = |why: &str| self.error(v.span(), format!("{key}.url: `{}` {why}", v.get_ref()));
        let Ok(uri) = v.get_ref().parse::<Uri>() else {
            return bad("is not a URL");
        };
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => return bad("must start with http:// or https://"),
        }
        let Some(authority) = uri.authority() else {
            return bad("has no host");
        };
        if authority.host().is_empty() {
            return bad("has no host");
        }
        let host_port = authority.as_str().rsplit('@').next().unwrap_or("");
        let after_host = host_port
            .rsplit_once(']')
            .map_or(host_port, |(_, rest)| rest);
        if after_host.contains(':') && authority.port_u16().is_none_or(|p| p == 0) {
            return bad("has an invalid port (expected 1-65535)");
        }
        if uri.query().is_some() {
            return bad("must not have a query string");
        }
        Ok(uri)
    }

    /// A `[jwt]` section no route needs: loaded when it can be, else a warning (its secret's
    /// variable unset, say), not an error: nothing would verify a token with it.
    fn unused_jwt(&mut self, raw: &Spanned<RawJwt>) -> Result<Option<JwtConfig>> {
        match self.jwt(raw) {
            Ok(jwt) => Ok(Some(jwt)),
            Err(ConfigError::Invalid { at, message }) => {
                self.warnings.push(ConfigWarning {
                    at,
                    message: format!("{message}; ignored, since no route has a `jwt:` key part"),
                });
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    fn jwt(&self, raw: &Spanned<RawJwt>) -> Result<JwtConfig> {
        let j = raw.get_ref();
        let key = match (&j.hs256_secret_env, &j.public_key_file) {
            (Some(_), Some(f)) => {
                return self.error(
                    f.span(),
                    "jwt: set either hs256_secret_env or public_key_file, not both",
                )
            }
            (None, None) => {
                return self.error(raw.span(), "jwt: needs hs256_secret_env or public_key_file")
            }
            (Some(env), None) => match (self.env)(env.get_ref()).filter(|s| !s.is_empty()) {
                Some(secret) => JwtKey::Hs256(secret.into_bytes()),
                None => {
                    return self.error(
                        env.span(),
                        format!(
                            "jwt.hs256_secret_env: the environment variable `{}` is not set",
                            env.get_ref()
                        ),
                    )
                }
            },
            (None, Some(file)) => self.public_key(file)?,
        };
        Ok(JwtConfig {
            key,
            issuer: j.issuer.as_ref().map(|s| s.get_ref().clone()),
            audience: j.audience.as_ref().map(|s| s.get_ref().clone()),
            require_exp: j.require_exp.unwrap_or(false),
        })
    }

    fn public_key(&self, file: &Spanned<String>) -> Result<JwtKey> {
        let path = self.dir.join(file.get_ref());
        let pem = match std::fs::read(&path) {
            Ok(p) => p,
            Err(e) => {
                return self.error(
                    file.span(),
                    format!("jwt.public_key_file: cannot read `{}`: {e}", path.display()),
                )
            }
        };
        if jsonwebtoken::DecodingKey::from_rsa_pem(&pem).is_ok() {
            Ok(JwtKey::Rs256(pem))
        } else if jsonwebtoken::DecodingKey::from_ec_pem(&pem).is_ok() {
            Ok(JwtKey::Es256(pem))
        } else {
            self.error(
                file.span(),
                format!(
                    "jwt.public_key_file: `{}` is not an RSA or EC public key in PEM",
                    path.display()
                ),
            )
        }
    }

    fn routes(
        &mut self,
        raw_config: &RawConfig,
        upstreams: &BTreeMap<String, Arc<UpstreamConfig>>,
        has_jwt: bool,
        membership: &Membership,
    ) -> Result<Vec<Arc<RouteConfig>>> {
        let raw = &raw_config.routes;
        let tiers = KnownTiers {
            segments: membership.segment_names().map(str::to_string).collect(),
            plans: raw_config.plans.as_ref().map(|_| membership.plan_names()),
        };
        let mut names = HashSet::new();
        let mut routes = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            let route = self.route(i, r.get_ref(), upstreams, has_jwt, &tiers)?;
            if !names.insert(route.name.clone()) {
                return self.error(
                    r.get_ref().name.span(),
                    format!("routes[{i}].name: duplicate route name `{}`", route.name),
                );
            }
            routes.push(Arc::new(route));
        }
        Ok(routes)
    }

    fn name(&self, v: &Spanned<String>, key: &str) -> Result<String> {
        self.check_name(v.get_ref(), v.span(), key)?;
        Ok(v.get_ref().clone())
    }

    /// Names of routes, limits and segments: they become metric labels and key segments.
    fn check_name(&self, n: &str, span: std::ops::Range<usize>, key: &str) -> Result<()> {
        let valid = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !valid {
            return self.error(
                span,
                format!("{key}: `{n}` must be 1-64 characters of letters, digits, `-`, `_` or `.`"),
            );
        }
        Ok(())
    }

    fn route(
        &mut self,
        i: usize,
        r: &RawRoute,
        upstreams: &BTreeMap<String, Arc<UpstreamConfig>>,
        has_jwt: bool,
        tiers: &KnownTiers,
    ) -> Result<RouteConfig> {
        let at = format!("routes[{i}]");
        let name = self.name(&r.name, &format!("{at}.name"))?;
        let path = self.path(&r.path, &format!("{at}.path"))?;
        let methods = self.methods(r.methods.as_deref(), &format!("{at}.methods"))?;
        if !upstreams.contains_key(r.upstream.get_ref()) {
            let known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
            return self.error(
                r.upstream.span(),
                format!(
                    "{at}.upstream: unknown upstream `{}` (defined: {})",
                    r.upstream.get_ref(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        let key = self.key(r.key.as_ref(), &format!("{at}.key"), has_jwt)?;
        let on_missing_key = self.choice(
            r.on_missing_key.as_ref(),
            &format!("{at}.on_missing_key"),
            "value",
            &[("reject", OnMissingKey::Reject), ("ip", OnMissingKey::Ip)],
            OnMissingKey::Reject,
        )?;
        let on_exceed = self.exceed_mode(r, &at)?;
        let on_error = self.on_error(r.on_error.as_ref(), &format!("{at}.on_error"))?;
        let limits = self.limits(&r.limits, &at, tiers)?;
        let exempt = self.networks(r.exempt.as_deref(), &format!("{at}.exempt"))?;
        let access_log_sample = match &r.access_log_sample {
            Some(v) if !(0.0..=1.0).contains(v.get_ref()) => {
                return self.error(
                    v.span(),
                    format!(
                        "{at}.access_log_sample: must be between 0 and 1, got {}",
                        v.get_ref()
                    ),
                )
            }
            Some(v) => *v.get_ref(),
            None => 1.0,
        };
        Ok(RouteConfig {
            name,
            path,
            methods,
            upstream: r.upstream.get_ref().clone(),
            key,
            on_missing_key,
            on_exceed,
            on_error,
            headers: r.headers.unwrap_or(true),
            exempt,
            access_log: r.access_log.unwrap_or(true),
            access_log_sample,
            limits,
        })
    }

    fn path(&self, v: &Spanned<String>, key: &str) -> Result<PathPattern> {
        let p = v.get_ref();
        if !p.starts_with('/') || p.contains('?') || p.contains('#') {
            return self.error(
                v.span(),
                format!("{key}: `{p}` must start with `/` and have no query"),
            );
        }
        if let Some(base) = p.strip_suffix("/*") {
            if base.contains('*') {
                return self.error(
                    v.span(),
                    format!("{key}: `{p}`: `*` is only allowed as a trailing `/*`"),
                );
            }
            let base = if base.is_empty() { "/" } else { base };
            return Ok(PathPattern {
                path: base.to_string(),
                prefix: true,
            });
        }
        if p.contains('*') {
            return self.error(
                v.span(),
                format!("{key}: `{p}`: `*` is only allowed as a trailing `/*`"),
            );
        }
        Ok(PathPattern {
            path: p.clone(),
            prefix: false,
        })
    }

    fn methods(&self, list: Option<&[Spanned<String>]>, key: &str) -> Result<Option<Vec<Method>>> {
        let Some(list) = list else { return Ok(None) };
        if list.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(list.len());
        for m in list {
            const KNOWN: [&str; 9] = [
                "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
            ];
            let text = m.get_ref().to_ascii_uppercase();
            match Method::from_bytes(text.as_bytes()) {
                Ok(method) if KNOWN.contains(&text.as_str()) => out.push(method),
                _ => {
                    return self.error(
                        m.span(),
                        format!(
                            "{key}: `{}` is not an HTTP method (expected one of {})",
                            m.get_ref(),
                            KNOWN.join(", ")
                        ),
                    )
                }
            }
        }
        Ok(Some(out))
    }

    fn key(
        &self,
        v: Option<&Spanned<Vec<Spanned<String>>>>,
        key: &str,
        has_jwt: bool,
    ) -> Result<Vec<KeyPart>> {
        let Some(v) = v else {
            return Ok(vec![KeyPart::Ip]);
        };
        if v.get_ref().is_empty() {
            return self.error(
                v.span(),
                format!("{key}: needs at least one part (for one shared limit, use [\"route\"])"),
            );
        }
        let mut parts = Vec::new();
        for p in v.get_ref() {
            match KeyPart::parse(p.get_ref()) {
                Ok(KeyPart::Jwt(_)) if !has_jwt => {
                    return self.error(
                        p.span(),
                        format!(
                            "{key}: `{}` needs a [jwt] section to verify tokens",
                            p.get_ref()
                        ),
                    )
                }
                Ok(part) => parts.push(part),
                Err(why) => return self.error(p.span(), format!("{key}: {why}")),
            }
        }
        Ok(parts)
    }

    fn exceed_mode(&mut self, r: &RawRoute, at: &str) -> Result<ExceedMode> {
        let mode = r
            .on_exceed
            .as_ref()
            .map_or("reject", |m| m.get_ref().as_str());
        let mode = match mode {
            "reject" => ExceedMode::Reject,
            "shadow" => ExceedMode::Shadow,
            "delay" => {
                let max_delay = match &r.max_delay {
                    Some(d) => self.positive_duration(d, &format!("{at}.max_delay"))?,
                    None => Duration::from_secs(1),
                };
                let max_waiting = match &r.max_waiting {
                    Some(n) if *n.get_ref() < 1 => {
                        return self
                            .error(n.span(), format!("{at}.max_waiting: must be at least 1"))
                    }
                    Some(n) => *n.get_ref() as usize,
                    None => 1000,
                };
                ExceedMode::Delay {
                    max_delay,
                    max_waiting,
                }
            }
            "block" => {
                match &r.block_for {
                    Some(d) => {
                        let block_for = self.positive_duration(d, &format!("{at}.block_for"))?;
                        if block_for > MAX_WINDOW {
                            return self
                                .error(d.span(), format!("{at}.block_for: must be at most 366d"));
                        }
                        ExceedMode::Block { block_for }
                    }
                    None => {
                        let span = r.on_exceed.as_ref().map_or(r.name.span(), |m| m.span());
                        return self.error(span, format!("{at}.on_exceed: \"block\" needs block_for (like block_for = \"15m\")"));
                    }
                }
            }
            other => {
                let span = r.on_exceed.as_ref().map_or(0..0, |m| m.span());
                return self.error(
                    span,
                    format!("{at}.on_exceed: unknown mode `{other}`, expected \"reject\", \"delay\", \"block\" or \"shadow\""),
                );
            }
        };
        self.warn_ignored(r, at, &mode)?;
        Ok(mode)
    }

    /// Settings the chosen mode ignores are accepted (after checking they parse) with a warning.
    fn warn_ignored(&mut self, r: &RawRoute, at: &str, mode: &ExceedMode) -> Result<()> {
        let name = mode.name();
        if !matches!(mode, ExceedMode::Delay { .. }) {
            if let Some(d) = &r.max_delay {
                self.duration(d, &format!("{at}.max_delay"))?;
                self.warn(
                    d.span(),
                    format!("{at}.max_delay is ignored: on_exceed is \"{name}\", not \"delay\""),
                );
            }
            if let Some(n) = &r.max_waiting {
                self.warn(
                    n.span(),
                    format!("{at}.max_waiting is ignored: on_exceed is \"{name}\", not \"delay\""),
                );
            }
        }
        if !matches!(mode, ExceedMode::Block { .. }) {
            if let Some(d) = &r.block_for {
                self.duration(d, &format!("{at}.block_for"))?;
                self.warn(
                    d.span(),
                    format!("{at}.block_for is ignored: on_exceed is \"{name}\", not \"block\""),
                );
            }
        }
        Ok(())
    }

    fn limits(
        &mut self,
        raw: &[Spanned<RawLimit>],
        at: &str,
        tiers: &KnownTiers,
    ) -> Result<Vec<LimitConfig>> {
        let mut names = HashSet::new();
        let mut limits = Vec::with_capacity(raw.len());
        for (j, l) in raw.iter().enumerate() {
            let l = l.get_ref();
            let key = format!("{at}.limits[{j}]");
            let name = self.name(&l.name, &format!("{key}.name"))?;
            if !names.insert(name.clone()) {
                return self.error(
                    l.name.span(),
                    format!("{key}.name: duplicate limit name `{name}` in this route"),
                );
            }
            let limit = *l.limit.get_ref();
            if limit < 1 {
                return self.error(
                    l.limit.span(),
                    format!("{key}.limit: must be at least 1, got {limit}"),
                );
            }
            let window = self.duration(&l.window, &format!("{key}.window"))?;
            if window < Duration::from_millis(1) || window > MAX_WINDOW {
                return self.error(
                    l.window.span(),
                    format!("{key}.window: must be between 1ms and 366d"),
                );
            }
            let segments = self.tier_values(&l.segments, &format!("{key}.segments"), |s| {
                tiers
                    .segments
                    .iter()
                    .any(|t| t == s)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "unknown segment `{s}` (defined: {})",
                            if tiers.segments.is_empty() {
                                "none".to_string()
                            } else {
                                tiers.segments.join(", ")
                            }
                        )
                    })
            })?;
            let plans = self.tier_values(&l.plans, &format!("{key}.plans"), |_| {
                tiers.plans.as_ref().map(|_| ()).ok_or_else(|| {
                    "plan values need a [plans] section with a members_file".to_string()
                })
            })?;
            if let Some(known) = &tiers.plans {
                for (plan, value) in &l.plans {
                    if !known.contains(plan.as_str()) {
                        self.warn(
                            value.span(),
                            format!("{key}.plans.{plan}: no key in the plans file is on plan `{plan}` (yet)"),
                        );
                    }
                }
            }
            // A limit without `algorithm` uses the default, sliding_log; one route may use both.
            let algorithm = self.choice(
                l.algorithm.as_ref(),
                &format!("{key}.algorithm"),
                "algorithm",
                &[
                    ("sliding_log", Algorithm::SlidingLog),
                    ("sliding_window_counter", Algorithm::SlidingWindowCounter),
                ],
                Algorithm::SlidingLog,
            )?;
            limits.push(LimitConfig {
                name,
                limit: limit as u64,
                window,
                algorithm,
                segments,
                plans,
            });
        }
        Ok(limits)
    }

    /// Per-segment or per-plan values of a limit: whole numbers of at least 0 (0 lets nothing
    /// through), each naming something `known` accepts.
    fn tier_values(
        &self,
        raw: &BTreeMap<String, Spanned<i64>>,
        key: &str,
        known: impl Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for (name, value) in raw {
            if let Err(why) = known(name) {
                return self.error(value.span(), format!("{key}.{name}: {why}"));
            }
            if *value.get_ref() < 0 {
                return self.error(
                    value.span(),
                    format!("{key}.{name}: must be at least 0, got {}", value.get_ref()),
                );
            }
            out.insert(name.clone(), *value.get_ref() as u64);
        }
        Ok(out)
    }
}

/// The segments and plans a limit may give values for.
struct KnownTiers {
    segments: Vec<String>,
    /// The plans the plans file names, when there is one.
    plans: Option<HashSet<String>>,
}

/// Whether any route derives its key from a `jwt:CLAIM` part (read as [`Validator::key`] reads
/// it; a part that does not parse is reported there).
fn uses_jwt(raw: &RawConfig) -> bool {
    raw.routes.iter().any(|r| {
        r.get_ref().key.as_ref().is_some_and(|parts| {
            parts
                .get_ref()
                .iter()
                .any(|p| matches!(KeyPart::parse(p.get_ref()), Ok(KeyPart::Jwt(_))))
        })
    })
}
