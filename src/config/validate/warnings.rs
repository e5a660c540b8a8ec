//! Settings that are legal but almost always a mistake: warned about (naming the setting) by
//! `slidegate check`, at start and on every reload, never refused.

use std::sync::Arc;

use http::Method;

use super::Validator;
use crate::config::raw::{RawConfig, RawRoute};
use crate::config::{AdminConfig, Backend, OnMissingKey, RouteConfig, ServerConfig, StoreConfig};

impl Validator<'_> {
    /// `[store]` settings the chosen backend ignores.
    pub(super) fn store_warnings(&mut self, raw: &RawConfig, store: &StoreConfig) {
        if let (Some(acks), Backend::Memory) = (&raw.store.replica_acks, store.backend) {
            if store.replica_acks > 0 {
                self.warn(
                    acks.span(),
                    "store.replica_acks is ignored: the memory backend has no replicas",
                );
            }
        }
    }

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
        for (j, route) in routes.iter().enumerate() {
            let raw_route = raw.routes[j].get_ref();
            self.body_keys_without_body(j, raw_route, route);
            self.body_keys_falling_back_to_ip(j, raw_route, route);
            self.methods_left_to_a_later_route(j, raw_route, routes, server);
        }
    }

    /// A route keyed by the body that lists only some methods, with a later route taking the
    /// same path for the others: `GET /api/otp/send` (a body, or the number in the query, on a
    /// method the route does not list) goes upstream by the later route, uncounted by this
    /// one's limits, while many frameworks act on any method.
    fn methods_left_to_a_later_route(
        &mut self,
        j: usize,
        raw: &RawRoute,
        routes: &[Arc<RouteConfig>],
        server: &ServerConfig,
    ) {
        let route = &routes[j];
        let (Some(methods), Some(raw_methods)) = (&route.methods, &raw.methods) else {
            return;
        };
        if !route.reads_body() {
            return;
        }
        let Some((k, later)) = routes.iter().enumerate().skip(j + 1).find(|(_, later)| {
            route.path.within(&later.path, server.path_case) && !takes_every_method(route, later)
        }) else {
            return;
        };
        let span = raw_methods.first().map_or(0..0, |m| m.span());
        let names: Vec<&str> = methods.iter().map(Method::as_str).collect();
        self.warn(
            span,
            format!(
                "routes[{j}].methods: `{}` counts only {} requests, and routes[{k}] `{}` ({}) forwards the other methods of its path uncounted by its limits (a `GET {}` with the value in its body or query): many frameworks act on any method; list every method the upstream serves there, or add a route before routes[{k}] that refuses them",
                route.name,
                names.join(", "),
                later.name,
                later.path,
                route.path
            ),
        );
    }

    /// A `json:`/`form:` key part on a route whose methods carry no body: every request lacks
    /// it (400 `missing_key`, or counted by the client IP), and a POST is not the route's.
    fn body_keys_without_body(&mut self, j: usize, raw: &RawRoute, route: &RouteConfig) {
        let Some(methods) = &route.methods else {
            return;
        };
        if route.limits.is_empty() || methods.iter().any(carries_body) {
            return;
        }
        let names: Vec<&str> = methods.iter().map(Method::as_str).collect();
        // the route's key when a limit counts it, and each limit's own
        let mut keys = Vec::new();
        if route.limits.iter().any(|l| l.key.is_none()) {
            keys.push((format!("routes[{j}].key"), &raw.key, &route.key));
        }
        for (i, (l, raw_l)) in route.limits.iter().zip(&raw.limits).enumerate() {
            if let Some(own) = &l.key {
                keys.push((
                    format!("routes[{j}].limits[{i}].key"),
                    &raw_l.get_ref().key,
                    own,
                ));
            }
        }
        for (at, raw_key, spec) in keys {
            let (Some(raw_key), Some(i)) =
                (raw_key, spec.parts.iter().position(|p| p.part.reads_body()))
            else {
                continue;
            };
            let span = raw_key.get_ref()[i].span();
            self.warn(
                span,
                format!(
                    "{at}[{i}]: `{}` reads the request body, but routes[{j}].methods takes only {}, which carry none: every request of the route lacks this key part, and the requests that carry it (POST, PUT, PATCH) are not this route's",
                    spec.parts[i].part,
                    names.join(", ")
                ),
            );
        }
    }

    /// `on_missing_key = "ip"` where the key comes from the body: a body the gateway cannot
    /// read (another Content-Type, none, not JSON) is counted by the IP, which a bot rotates,
    /// while an upstream that ignores Content-Type may act on the value in it.
    fn body_keys_falling_back_to_ip(&mut self, j: usize, raw: &RawRoute, route: &RouteConfig) {
        let mut warned_route = false;
        for (i, (l, raw_l)) in route.limits.iter().zip(&raw.limits).enumerate() {
            let key = l.key.as_ref().unwrap_or(&route.key);
            let falls_back = l.on_missing_key.unwrap_or(route.on_missing_key) == OnMissingKey::Ip;
            let Some(part) = key.parts.iter().find(|p| p.part.reads_body()) else {
                continue;
            };
            if !falls_back {
                continue;
            }
            let (at, setting) = match &raw_l.get_ref().on_missing_key {
                Some(own) => (format!("routes[{j}].limits[{i}]"), own),
                None if warned_route => continue,
                None => match &raw.on_missing_key {
                    Some(setting) => {
                        warned_route = true;
                        (format!("routes[{j}]"), setting)
                    }
                    None => continue,
                },
            };
            self.warn(
                setting.span(),
                format!(
                    "{at}.on_missing_key: \"ip\" on a key read from the body (`{}`): a body the gateway cannot read for it (another Content-Type, none, not JSON, the member left out) is counted by the client IP, which a bot rotates, while an upstream that ignores Content-Type may still act on the value in it; use \"reject\" (400 missing_key)",
                    part.part
                ),
            );
        }
    }

    /// A route an earlier route takes every request of can never match.
    fn shadowed_routes(
        &mut self,
        raw: &RawConfig,
        server: &ServerConfig,
        routes: &[Arc<RouteConfig>],
    ) {
        let case = match server.path_case {
            crate::config::PathCase::Insensitive => " (paths compare ignoring case)",
            crate::config::PathCase::Sensitive => "",
        };
        for (j, later) in routes.iter().enumerate() {
            let covering =
                |earlier: &RouteConfig| later.path.within(&earlier.path, server.path_case);
            let shadowing =
                (0..j).find(|&i| covering(&routes[i]) && takes_every_method(&routes[i], later));
            let span = raw.routes[j].get_ref().name.span();
            if let Some(i) = shadowing {
                self.warn(
                    span,
                    format!(
                        "routes[{j}] `{}` can never match: routes[{i}] `{}` ({}) comes first and takes every request it would{case}",
                        later.name, routes[i].name, routes[i].path
                    ),
                );
            } else if let Some(takers) = methods_taken(&routes[..j], later, covering) {
                self.warn(
                    span,
                    format!(
                        "routes[{j}] `{}` can never match: earlier routes with the same or a wider path take each of its methods ({}){case}",
                        later.name,
                        takers.join(", ")
                    ),
                );
            }
        }
    }
}

/// When `later` lists its methods and earlier routes whose paths cover its own (`covering`)
/// take each of them between them: per method, the route that takes it (`GET by routes[0]
/// `a``); `None` when one of its methods reaches it.
fn methods_taken(
    earlier: &[Arc<RouteConfig>],
    later: &RouteConfig,
    covering: impl Fn(&RouteConfig) -> bool,
) -> Option<Vec<String>> {
    let methods = later.methods.as_ref()?;
    methods
        .iter()
        .map(|m| {
            let (i, route) = (earlier.iter().enumerate())
                .find(|(_, e)| covering(e) && (e.methods.is_none() || e.takes_method(m)))?;
            Some(format!("{m} by routes[{i}] `{}`", route.name))
        })
        .collect()
}

/// Whether `earlier` takes every method `later` takes.
fn takes_every_method(earlier: &RouteConfig, later: &RouteConfig) -> bool {
    match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(_), Some(methods)) => methods.iter().all(|m| earlier.takes_method(m)),
    }
}

/// Whether requests of `method` carry a body (the methods whose requests do not, by use if not
/// by RFC 9110: GET, HEAD, DELETE, OPTIONS).
fn carries_body(method: &Method) -> bool {
    ![Method::GET, Method::HEAD, Method::DELETE, Method::OPTIONS].contains(method)
}
