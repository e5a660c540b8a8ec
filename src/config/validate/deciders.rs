//! `[rls]`, `[ext_authz]` and `[forward_auth]`: the listeners that decide for a proxy in front
//! (Envoy's rate-limit service and external authorization APIs, forward-auth subrequests), the
//! YAML limit files `[rls] config` names (read by `rls_yaml/`), and what `check` says about
//! routes a proxy in front asks about.

use std::net::SocketAddr;
use std::sync::Arc;

use super::sections::same_socket;
use super::{Result, Validator};
use crate::config::raw::RawConfig;
use crate::config::{ExtAuthzConfig, ForwardAuthConfig, OnError, RlsConfig, RouteConfig};

impl Validator<'_> {
    /// `[rls]`, with its limit files read; `taken` are the listeners already configured.
    pub(super) fn rls_section(
        &mut self,
        raw: &RawConfig,
        taken: &[(&str, SocketAddr)],
        store_on_error: OnError,
    ) -> Result<Option<RlsConfig>> {
        let Some(section) = &raw.rls else {
            return Ok(None);
        };
        let r = section.get_ref();
        let listen = self.socket_addr(r.listen.as_ref(), "rls.listen", "127.0.0.1:8081")?;
        let span = r.listen.as_ref().map_or(section.span(), |l| l.span());
        self.own_socket("rls.listen", listen, span, taken)?;
        let written = r.config.get_ref();
        if written.trim().is_empty() {
            return self.error(
                r.config.span(),
                "rls.config: must name a YAML file or a directory of them",
            );
        }
        let source = self.dir.join(written);
        if !source.exists() {
            return self.error(
                r.config.span(),
                format!("rls.config: `{written}` does not exist (relative to the config file's directory)"),
            );
        }
        let merge_domains = r.merge_domains.unwrap_or(false);
        let loaded = crate::config::rls_yaml::load(&source, merge_domains)?;
        self.warnings.extend(loaded.warnings);
        let on_error = self.choice(
            r.on_error.as_ref(),
            "rls.on_error",
            "value",
            OnError::NAMES,
            store_on_error,
        )?;
        Ok(Some(RlsConfig {
            listen,
            source,
            headers: r.headers.unwrap_or(false),
            on_error,
            merge_domains,
            domains: loaded.domains,
        }))
    }

    /// `[ext_authz]`; `taken` are the listeners already configured except `[rls]`'s, whose
    /// address it may share (one gRPC server then serves both).
    pub(super) fn ext_authz_section(
        &mut self,
        raw: &RawConfig,
        taken: &[(&str, SocketAddr)],
    ) -> Result<Option<ExtAuthzConfig>> {
        let Some(section) = &raw.ext_authz else {
            return Ok(None);
        };
        let e = section.get_ref();
        let listen = self.socket_addr(e.listen.as_ref(), "ext_authz.listen", "127.0.0.1:8083")?;
        let span = e.listen.as_ref().map_or(section.span(), |l| l.span());
        self.own_socket("ext_authz.listen", listen, span, taken)?;
        Ok(Some(ExtAuthzConfig { listen }))
    }

    /// `[forward_auth]`; `taken` are the listeners already configured.
    pub(super) fn forward_auth_section(
        &mut self,
        raw: &RawConfig,
        taken: &[(&str, SocketAddr)],
    ) -> Result<Option<ForwardAuthConfig>> {
        let Some(section) = &raw.forward_auth else {
            return Ok(None);
        };
        let f = section.get_ref();
        let listen =
            self.socket_addr(f.listen.as_ref(), "forward_auth.listen", "127.0.0.1:8082")?;
        let span = f.listen.as_ref().map_or(section.span(), |l| l.span());
        self.own_socket("forward_auth.listen", listen, span, taken)?;
        let refused_status = match &f.refused_status {
            None => 429,
            Some(s) if matches!(s.get_ref(), 429 | 403) => *s.get_ref() as u16,
            Some(s) => {
                return self.error(
                    s.span(),
                    format!(
                        "forward_auth.refused_status: must be 429 or 403 (for NGINX's auth_request), got {}",
                        s.get_ref()
                    ),
                )
            }
        };
        Ok(Some(ForwardAuthConfig {
            listen,
            refused_status,
        }))
    }

    /// A listener of its own: `addr` is none of the `taken` ones.
    fn own_socket(
        &self,
        key: &str,
        addr: SocketAddr,
        span: std::ops::Range<usize>,
        taken: &[(&str, SocketAddr)],
    ) -> Result<()> {
        match taken.iter().find(|(_, other)| same_socket(addr, *other)) {
            Some((other_key, other)) => self.error(
                span,
                format!("{key}: {addr} is also {other_key} ({other}): each listener needs a port or address of its own"),
            ),
            None => Ok(()),
        }
    }

    /// A domain is named apart from every route: metrics and `/admin/usage` name both alike.
    pub(super) fn domains_apart(
        &self,
        raw: &RawConfig,
        rls: Option<&RlsConfig>,
        routes: &[Arc<RouteConfig>],
    ) -> Result<()> {
        let (Some(rls), Some(section)) = (rls, &raw.rls) else {
            return Ok(());
        };
        match rls.domains.iter().find(|d| routes.iter().any(|r| r.name == d.name)) {
            Some(d) => self.error(
                section.get_ref().config.span(),
                format!("rls.config: domain `{}` is also a route's name: metrics and /admin/usage name both alike, so rename one", d.name),
            ),
            None => Ok(()),
        }
    }

    /// What a proxy in front cannot do for a route it asks about (one without `upstream`, which
    /// only such a proxy reaches; a route with one is taken to be reached through the proxy
    /// listener): none shows slidegate the answer, which some limits need
    /// ([`RouteConfig::needs_response`] says what becomes of them without it). (A body key is no warning: Traefik
    /// and Envoy send the body; where a proxy sends none, the key is missing and the request is
    /// refused, never counted otherwise.)
    pub(super) fn asked_routes_warnings(&mut self, raw: &RawConfig, routes: &[Arc<RouteConfig>]) {
        let askers: Vec<&str> = [
            raw.forward_auth.as_ref().map(|_| "forward auth"),
            raw.ext_authz.as_ref().map(|_| "ext_authz"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if askers.is_empty() {
            return;
        }
        let asked = askers.join(" and ");
        for (i, route) in routes.iter().enumerate() {
            if route.upstream.is_some() {
                continue;
            }
            let span = raw.routes[i].get_ref().name.span();
            if let Some((what, so)) = route.needs_response() {
                self.warn(
                    span,
                    format!("routes[{i}] `{}` {what}: {asked} never sees the answer, so through it {so}; the proxy listener or the tower layer sees it", route.name),
                );
            }
        }
    }
}
