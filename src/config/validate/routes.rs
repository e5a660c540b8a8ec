//! `[[routes]]`: name, path, methods, upstream, key, exceed mode and its settings, and the
//! settings a mode ignores (accepted with a warning).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use toml::Spanned;

use super::{Result, Validator, MAX_WINDOW};
use crate::config::raw::{RawConfig, RawRoute};
use crate::config::{
    BlockPolicy, ExceedMode, KeySpec, KeysConfig, OnError, OnMissingKey, Purpose, RouteConfig,
    UpstreamConfig,
};
use crate::tier::Membership;

/// An upstream's `timeout` unless it says otherwise.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// The body bytes read for `json:`/`form:` key parts unless a route says otherwise.
pub const DEFAULT_MAX_KEY_BODY_BYTES: usize = 64 * 1024;

/// The segments and plans a limit may give values for.
pub(super) struct KnownTiers {
    pub segments: Vec<String>,
    /// The plans the plans file names, when there is one.
    pub plans: Option<HashSet<String>>,
}

/// What a route's limits are checked against.
pub(super) struct RouteContext<'a> {
    pub has_jwt: bool,
    pub keys: &'a KeysConfig,
    pub tiers: KnownTiers,
}

impl Validator<'_> {
    pub(super) fn routes(
        &mut self,
        raw_config: &RawConfig,
        upstreams: &BTreeMap<String, Arc<UpstreamConfig>>,
        has_jwt: bool,
        keys: &KeysConfig,
        membership: &Membership,
    ) -> Result<Vec<Arc<RouteConfig>>> {
        let context = RouteContext {
            has_jwt,
            keys,
            tiers: KnownTiers {
                segments: membership.segment_names().map(str::to_string).collect(),
                plans: raw_config.plans.as_ref().map(|_| membership.plan_names()),
            },
        };
        let mut names = HashSet::new();
        let mut routes = Vec::with_capacity(raw_config.routes.len());
        for (i, r) in raw_config.routes.iter().enumerate() {
            let route = self.route(i, r, upstreams, &context)?;
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

    fn route(
        &mut self,
        i: usize,
        spanned: &Spanned<RawRoute>,
        upstreams: &BTreeMap<String, Arc<UpstreamConfig>>,
        context: &RouteContext<'_>,
    ) -> Result<RouteConfig> {
        let r = spanned.get_ref();
        let at = format!("routes[{i}]");
        let name = self.name(&r.name, &format!("{at}.name"))?;
        let path = self.path(&r.path, &format!("{at}.path"))?;
        let methods = self.methods(r.methods.as_deref(), &format!("{at}.methods"))?;
        let upstream = self.upstream_of(r, spanned.span(), &at, upstreams)?;
        // how long an answer is waited for: the upstream's timeout (its default on a route of
        // an embedded layer or of forward auth)
        let answer_timeout = upstream
            .as_ref()
            .and_then(|u| upstreams.get(u))
            .map_or(DEFAULT_UPSTREAM_TIMEOUT, |u| u.timeout);
        let key = match &r.key {
            Some(k) => self.key_spec(k, &format!("{at}.key"), context)?,
            None => KeySpec::of([crate::config::KeyPart::Ip]),
        };
        let on_missing_key = self
            .on_missing_key(r.on_missing_key.as_ref(), at.as_str())?
            .unwrap_or(OnMissingKey::Reject);
        let on_exceed = self.exceed_mode(r, &at)?;
        let on_error = match &r.on_error {
            Some(v) => Some(self.choice(
                Some(v),
                &format!("{at}.on_error"),
                "value",
                OnError::NAMES,
                OnError::Allow,
            )?),
            None => None,
        };
        let limits = self.limits(&r.limits, &at, context, &on_exceed, &key, answer_timeout)?;
        let max_cost_body_bytes = self.route_costs(r, &at, &limits)?;
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
        let max_key_body_bytes = self.integer_in(
            r.max_key_body_bytes.as_ref(),
            &format!("{at}.max_key_body_bytes"),
            1,
            16 * 1024 * 1024,
            DEFAULT_MAX_KEY_BODY_BYTES as i64,
        )? as usize;
        let route = RouteConfig {
            name,
            path,
            methods,
            upstream,
            key,
            on_missing_key,
            max_key_body_bytes,
            on_exceed,
            on_error,
            headers: r.headers.unwrap_or(true),
            exempt,
            access_log: r.access_log.unwrap_or(true),
            access_log_sample,
            limits,
            max_cost_body_bytes,
            answer_timeout,
        };
        if let (Some(v), false) = (&r.max_key_body_bytes, route.reads_body()) {
            self.warn(
                v.span(),
                format!("{at}.max_key_body_bytes is ignored: no key of the route reads the body (json: or form: parts)"),
            );
        }
        Ok(route)
    }

    /// The route's upstream: required by the gateway, meaningless to an embedded layer.
    fn upstream_of(
        &mut self,
        r: &RawRoute,
        route_span: std::ops::Range<usize>,
        at: &str,
        upstreams: &BTreeMap<String, Arc<UpstreamConfig>>,
    ) -> Result<Option<String>> {
        let Some(upstream) = &r.upstream else {
            return match self.purpose {
                // A route without an upstream serves the proxy in front only.
                Purpose::Gateway if self.asked_by_proxy => Ok(None),
                Purpose::Gateway => self.error(
                    route_span.start..route_span.start,
                    format!("{at}: missing field `upstream`"),
                ),
                Purpose::Layer => Ok(None),
            };
        };
        if self.purpose == Purpose::Layer {
            self.warn(
                upstream.span(),
                format!("{at}.upstream is ignored: an embedded layer passes requests to its own service"),
            );
            return Ok(None);
        }
        if !upstreams.contains_key(upstream.get_ref()) {
            let known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
            return self.error(
                upstream.span(),
                format!(
                    "{at}.upstream: unknown upstream `{}` (defined: {})",
                    upstream.get_ref(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        Ok(Some(upstream.get_ref().clone()))
    }

    /// `on_missing_key` of a route or a limit at `at` (`None` when unset).
    pub(super) fn on_missing_key(
        &self,
        v: Option<&Spanned<String>>,
        at: &str,
    ) -> Result<Option<OnMissingKey>> {
        v.map(|v| {
            let key = format!("{at}.on_missing_key");
            self.choice(
                Some(v),
                &key,
                "value",
                OnMissingKey::NAMES,
                OnMissingKey::Reject,
            )
        })
        .transpose()
    }

    fn methods(&self, list: Option<&[Spanned<String>]>, key: &str) -> Result<Option<Vec<Method>>> {
        let Some(list) = list else { return Ok(None) };
        if list.is_empty() {
            return Ok(None);
        }
        const KNOWN: [&str; 9] = [
            "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
        ];
        let mut out = Vec::with_capacity(list.len());
        for m in list {
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

    fn exceed_mode(&mut self, r: &RawRoute, at: &str) -> Result<ExceedMode> {
        let mode = r
            .on_exceed
            .as_ref()
            .map_or("reject", |m| m.get_ref().as_str());
        let mode = match mode {
            "reject" => ExceedMode::Reject,
            "shadow" => ExceedMode::Shadow,
            "delay" => ExceedMode::Delay {
                max_delay: match &r.max_delay {
                    Some(d) => self.positive_duration(d, &format!("{at}.max_delay"))?,
                    None => Duration::from_secs(1),
                },
                max_waiting: self.integer_in(
                    r.max_waiting.as_ref(),
                    &format!("{at}.max_waiting"),
                    1,
                    1_000_000,
                    1000,
                )? as usize,
            },
            "block" => ExceedMode::Block(self.block_policy(r, at)?),
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

    /// `block_for` (1 s .. 366 d, required), `block_growth` (>= 1), `block_max` (at least
    /// `block_for`; default 64 times it, at most 366 d), `block_forget` (default 1 d).
    fn block_policy(&self, r: &RawRoute, at: &str) -> Result<BlockPolicy> {
        let Some(d) = &r.block_for else {
            let span = r.on_exceed.as_ref().map_or(r.name.span(), |m| m.span());
            return self.error(
                span,
                format!("{at}.on_exceed: \"block\" needs block_for (like block_for = \"15m\")"),
            );
        };
        let second = Duration::from_secs(1);
        let block_for = self.duration_in(
            Some(d),
            &format!("{at}.block_for"),
            second,
            MAX_WINDOW,
            second,
        )?;
        let growth = match &r.block_growth {
            Some(g) if !(1.0..=1000.0).contains(g.get_ref()) => {
                return self.error(
                    g.span(),
                    format!(
                        "{at}.block_growth: must be between 1 and 1000, got {}",
                        g.get_ref()
                    ),
                )
            }
            Some(g) => *g.get_ref(),
            None => 1.0,
        };
        let max = self.duration_in(
            r.block_max.as_ref(),
            &format!("{at}.block_max"),
            block_for,
            MAX_WINDOW,
            (block_for * 64).min(MAX_WINDOW),
        )?;
        let forget = self.duration_in(
            r.block_forget.as_ref(),
            &format!("{at}.block_forget"),
            second,
            MAX_WINDOW,
            Duration::from_secs(24 * 3600),
        )?;
        Ok(BlockPolicy {
            block_for,
            growth,
            max,
            forget,
        })
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
        if !matches!(mode, ExceedMode::Block(_)) {
            let block_settings = [
                ("block_for", r.block_for.as_ref().map(|d| d.span())),
                ("block_growth", r.block_growth.as_ref().map(|g| g.span())),
                ("block_max", r.block_max.as_ref().map(|d| d.span())),
                ("block_forget", r.block_forget.as_ref().map(|d| d.span())),
            ];
            for (setting, span) in block_settings {
                if let Some(span) = span {
                    self.warn(
                        span,
                        format!(
                            "{at}.{setting} is ignored: on_exceed is \"{name}\", not \"block\""
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}
