//! The sections around the routes: `[server]`, `[admin]`, `[store]`, `[upstreams.*]`
//! (`[segments.*]` and `[plans]` are in `tiers.rs`, `[jwt]` and `[keys]` in `secrets.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use toml::Spanned;

use super::redis_url::redis_url_fault;
use super::{Result, Validator};
use crate::config::raw::{RawConfig, RawServer, RawUpstream};
use crate::config::{
    redact_url, AdminConfig, Backend, ClientIpHeader, ClockSource, KeyPart, OnError, PathCase,
    Purpose, ScriptsMode, ServerConfig, StoreConfig, UpstreamConfig, REDIS_URL_ENV,
};

/// The most replicas `store.replica_acks` may wait for (far more than a master ever has).
const MAX_REPLICA_ACKS: i64 = 16;

impl Validator<'_> {
    pub(super) fn server(&self, raw: &RawConfig) -> Result<ServerConfig> {
        let s = &raw.server;
        if self.purpose == Purpose::Layer {
            self.layer_server(s)?;
            self.layer_sections(raw)?;
        }
        Ok(ServerConfig {
            listen: self.socket_addr(s.listen.as_ref(), "server.listen", "0.0.0.0:8080")?,
            trusted_proxies: self
                .networks(s.trusted_proxies.as_deref(), "server.trusted_proxies")?,
            // a header name, so in any case (`X-Forwarded-For`, as NGINX configs write it)
            client_ip_header: self.choice(
                s.client_ip_header
                    .as_ref()
                    .map(|h| Spanned::new(h.span(), h.get_ref().to_ascii_lowercase()))
                    .as_ref(),
                "server.client_ip_header",
                "header",
                ClientIpHeader::NAMES,
                ClientIpHeader::XForwardedFor,
            )?,
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
            idle_timeout: match &s.idle_timeout {
                Some(d) => self.positive_duration(d, "server.idle_timeout")?,
                None => Duration::from_secs(60),
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
            path_case: self.choice(
                s.path_case.as_ref(),
                "server.path_case",
                "value",
                PathCase::NAMES,
                PathCase::Insensitive,
            )?,
            watch_files: s.watch_files.as_ref().is_none_or(|w| *w.get_ref()),
        })
    }

    /// A layer file's `[server]`: only where clients come from. The service the layer wraps
    /// has a server of its own (listener, timeouts, head bounds), so any other `[server]` key
    /// would be a setting that does nothing: refused, naming the keys a layer file takes.
    fn layer_server(&self, s: &RawServer) -> Result<()> {
        let strings = [
            ("listen", &s.listen),
            ("shutdown_grace", &s.shutdown_grace),
            ("header_read_timeout", &s.header_read_timeout),
            ("idle_timeout", &s.idle_timeout),
            ("path_case", &s.path_case),
        ];
        let numbers = [
            ("max_connections", &s.max_connections),
            ("max_header_bytes", &s.max_header_bytes),
            ("max_headers", &s.max_headers),
        ];
        let set = strings
            .iter()
            .filter_map(|(key, v)| v.as_ref().map(|v| (*key, v.span())))
            .chain(
                numbers
                    .iter()
                    .filter_map(|(key, v)| v.as_ref().map(|v| (*key, v.span()))),
            )
            .chain(s.watch_files.as_ref().map(|v| ("watch_files", v.span())))
            .min_by_key(|(_, span)| span.start);
        match set {
            Some((key, span)) => self.error(
                span,
                format!("server.{key}: a layer file takes only server.trusted_proxies, server.client_ip_header and server.ipv6_prefix (where clients come from); the service the layer wraps has its own server"),
            ),
            None => Ok(()),
        }
    }

    /// A layer file's sections: none of the gateway's own. The layer hands allowed requests to
    /// the service it wraps (no `[upstreams]`) and serves no listener (no `[forward_auth]`,
    /// `[rls]`, `[ext_authz]`): such a section would do nothing, so it is refused.
    fn layer_sections(&self, raw: &RawConfig) -> Result<()> {
        let upstreams = (raw.upstreams.iter())
            .map(|(name, u)| (format!("upstreams.{name}"), u.span()))
            .min_by_key(|(_, span)| span.start);
        let listeners = [
            ("forward_auth", raw.forward_auth.as_ref().map(|s| s.span())),
            ("rls", raw.rls.as_ref().map(|s| s.span())),
            ("ext_authz", raw.ext_authz.as_ref().map(|s| s.span())),
        ];
        let listeners =
            (listeners.into_iter()).filter_map(|(name, span)| Some((name.to_string(), span?)));
        let Some((name, span)) = upstreams
            .into_iter()
            .chain(listeners)
            .min_by_key(|(_, span)| span.start)
        else {
            return Ok(());
        };
        let what = match name.starts_with("upstreams.") {
            true => "a layer file has no upstreams: the layer hands allowed requests to the service it wraps",
            false => "a layer file serves no listener of its own: run the gateway for it",
        };
        self.error(
            span,
            format!("{name}: {what}; in a gateway config, every route names its upstream"),
        )
    }

    /// `[admin]`; its listener may not take the traffic listener's address (`server_listen`).
    /// A layer file has none: the service the layer wraps serves what it wants (the layer's
    /// metrics through `RateLimitLayer::scrape`), so an `[admin]` setting there would do nothing
    /// and is refused, as is a gateway-only `[server]` key. (A gateway config whose routes all
    /// lack `upstream` reads as a layer file: this names the mix-up too.)
    pub(super) fn admin(&self, raw: &RawConfig, server_listen: SocketAddr) -> Result<AdminConfig> {
        if self.purpose == Purpose::Layer {
            let set = [
                ("listen", &raw.admin.listen),
                ("token_env", &raw.admin.token_env),
            ]
            .into_iter()
            .filter_map(|(key, v)| v.as_ref().map(|v| (key, v.span())))
            .min_by_key(|(_, span)| span.start);
            if let Some((key, span)) = set {
                return self.error(
                    span,
                    format!("admin.{key}: a layer file has no admin listener (the service the layer wraps serves its metrics with RateLimitLayer::scrape); in a gateway config, every route names its upstream"),
                );
            }
        }
        let listen =
            self.socket_addr(raw.admin.listen.as_ref(), "admin.listen", "127.0.0.1:9091")?;
        if same_socket(listen, server_listen) {
            let span = raw.admin.listen.as_ref().map_or(0..0, |l| l.span());
            return self.error(
                span,
                format!("admin.listen: {listen} is also server.listen ({server_listen}): the two listeners need different ports or addresses"),
            );
        }
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
        // An `Authorization` header's token is read trimmed: so is this one, or a value with a
        // stray space or newline (`echo` into a secret) would refuse every token sent.
        let token =
            (self.env.get(&token_env).map(|t| t.trim().to_string())).filter(|t| !t.is_empty());
        let token_env_at = self.at(raw.admin.token_env.as_ref().map_or(0..0, |s| s.span()));
        Ok(AdminConfig {
            listen,
            token_env,
            token_env_at,
            token,
        })
    }

    /// `[store]`. `replica_acks` is bounded by [`MAX_REPLICA_ACKS`].
    pub(super) fn store(&self, raw: &RawConfig) -> Result<StoreConfig> {
        let s = &raw.store;
        let backend = self.choice(
            s.backend.as_ref(),
            "store.backend",
            "backend",
            Backend::NAMES,
            Backend::Redis,
        )?;
        let url = match self.env.get(REDIS_URL_ENV).filter(|u| !u.is_empty()) {
            Some(url) if let Some(fault) = redis_url_fault(&url) => {
                let span = s.url.as_ref().map_or(0..0, |u| u.span());
                return self.error(
                    span,
                    format!(
                        "{REDIS_URL_ENV} (overrides store.url): `{}` {fault}",
                        redact_url(&url)
                    ),
                );
            }
            Some(url) => url,
            None => match &s.url {
                Some(u) if let Some(fault) = redis_url_fault(u.get_ref()) => {
                    return self.error(
                        u.span(),
                        format!("store.url: `{}` {fault}", redact_url(u.get_ref())),
                    )
                }
                Some(u) => u.get_ref().clone(),
                None => "redis://127.0.0.1:6379".to_string(),
            },
        };
        let timeout = match &s.timeout {
            Some(t) => self.positive_duration(t, "store.timeout")?,
            None => Duration::from_millis(50),
        };
        let on_error = self.choice(
            s.on_error.as_ref(),
            "store.on_error",
            "value",
            OnError::NAMES,
            OnError::Allow,
        )?;
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
        Ok(StoreConfig {
            backend,
            url,
            timeout,
            on_error,
            max_keys: self.integer_in(
                s.max_keys.as_ref(),
                "store.max_keys",
                1,
                1_000_000_000,
                1_000_000,
            )? as usize,
            key_prefix,
            clock: self.choice(
                s.clock.as_ref(),
                "store.clock",
                "clock",
                ClockSource::NAMES,
                ClockSource::Redis,
            )?,
            replica_acks: self.integer_in(
                s.replica_acks.as_ref(),
                "store.replica_acks",
                0,
                MAX_REPLICA_ACKS,
                0,
            )? as u32,
            scripts: self.choice(
                s.scripts.as_ref(),
                "store.scripts",
                "mode",
                ScriptsMode::NAMES,
                ScriptsMode::Auto,
            )?,
        })
    }

    pub(super) fn upstreams(
        &self,
        raw: &BTreeMap<String, Spanned<RawUpstream>>,
    ) -> Result<BTreeMap<String, std::sync::Arc<UpstreamConfig>>> {
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
                None => super::routes::DEFAULT_UPSTREAM_TIMEOUT,
            };
            out.insert(
                name.clone(),
                std::sync::Arc::new(UpstreamConfig {
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
        let shown = redact_url(v.get_ref());
        let bad = |why: &str| self.error(v.span(), format!("{key}.url: `{shown}` {why}"));
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
        if authority.as_str().contains('@') {
            return bad("has credentials: they would go upstream in `Host`; send them in a header the upstream reads");
        }
        let host_port = authority.as_str();
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
}

/// Whether any route or limit has a key part (as it parses) that `wanted` picks.
pub(super) fn uses_part(raw: &RawConfig, wanted: impl Fn(&KeyPart) -> bool) -> bool {
    use crate::config::raw::RawKeyPart;
    let text = |p: &RawKeyPart| match p {
        RawKeyPart::Text(t) => t.clone(),
        RawKeyPart::Table(t) => t.part.get_ref().clone(),
    };
    raw.routes.iter().any(|r| {
        let r = r.get_ref();
        std::iter::once(&r.key)
            .chain(r.limits.iter().map(|l| &l.get_ref().key))
            .flatten()
            .flat_map(|parts| parts.get_ref().iter())
            .any(|p| KeyPart::parse(&text(p.get_ref())).is_ok_and(|part| wanted(&part)))
    })
}

/// Whether two listen addresses would take the same socket: one port (not 0, which picks a
/// free one) on one address, or on the unspecified address that covers every other.
pub(super) fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}
