//! Settings that are legal but almost always a mistake: warned about (naming the setting) by
//! `slidegate check`, at start and on every reload, never refused.

use std::sync::Arc;

use super::Validator;
use crate::config::raw::RawConfig;
use crate::config::{AdminConfig, RouteConfig, ServerConfig};

impl Validator<'_> {
    pub(super) fn config_warnings(
        &mut self,
        raw: &RawConfig,
        server: &ServerConfig,
        admin: &AdminConfig,
        routes: &[Arc<RouteConfig>],
    ) {
        for (item, net) in raw
            .server
            .trusted_proxies
            .iter()
            .flatten()
            .zip(&server.trusted_proxies)
        {
            if net.prefix_len() == 0 {
                self.warn(
                    item.span(),
                    format!("server.trusted_proxies: `{net}` trusts every address: any client can choose its own IP (and with it its quota) by sending {}", server.client_ip_header.name()),
                );
            }
        }
        if let Some(p) = &raw.server.ipv6_prefix {
            if server.ipv6_prefix < 32 {
                self.warn(
                    p.span(),
                    format!("server.ipv6_prefix: {} puts whole providers' customers under one `ip` key (/32 is a whole ISP allocation; /48 to /64 is one site)", server.ipv6_prefix),
                );
            }
        }
        if !admin.listen.ip().is_loopback() && admin.token.is_none() {
            let span = raw.admin.listen.as_ref().map_or(0..0, |l| l.span());
            self.warn(
                span,
                format!("admin.listen: {} is reachable from other hosts and no admin token is set ({}): /metrics, /healthz and /readyz are open to anyone who can reach it", admin.listen, admin.token_env),
            );
        }
        if routes.is_empty() && raw.rls.is_none() {
            self.warn(0..0, "no routes: every request gets a 404");
        }
        self.shadowed_routes(raw, server, routes);
    }

    /// A route an earlier route takes every request of can never match.
    fn shadowed_routes(
        &mut self,
        raw: &RawConfig,
        server: &ServerConfig,
        routes: &[Arc<RouteConfig>],
    ) {
        for (j, later) in routes.iter().enumerate() {
            let shadowing = routes[..j].iter().position(|earlier| {
                takes_every_method(earlier, later)
                    && later.path.within(&earlier.path, server.path_case)
            });
            if let Some(i) = shadowing {
                let span = raw.routes[j].get_ref().name.span();
                let case = match server.path_case {
                    crate::config::PathCase::Insensitive => " (paths compare ignoring case)",
                    crate::config::PathCase::Sensitive => "",
                };
                self.warn(
                    span,
                    format!(
                        "routes[{j}] `{}` can never match: routes[{i}] `{}` ({}) comes first and takes every request it would{case}",
                        later.name, routes[i].name, routes[i].path
                    ),
                );
            }
        }
    }
}

/// Whether `earlier` takes every method `later` takes.
fn takes_every_method(earlier: &RouteConfig, later: &RouteConfig) -> bool {
    match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(_), Some(methods)) => methods.iter().all(|m| earlier.takes_method(m)),
    }
}
