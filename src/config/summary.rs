//! The one-screen summary `slidegate check` prints: listeners, store, and every route with its
//! key, mode and limits.

use std::fmt::Write;

use super::{Backend, Config, ExceedMode};

/// Renders `config` as a short, human-readable listing.
pub(super) fn render(config: &Config) -> String {
    let mut out = String::new();
    let store = match config.store.backend {
        Backend::Redis => format!("redis {}", redact_url(&config.store.url)),
        Backend::Memory => "memory (embedded, single instance)".to_string(),
    };
    let _ = writeln!(out, "{}: OK", config.source.display());
    let _ = writeln!(
        out,
        "listen {}  admin {}  store {}  timeout {}  on_error {}",
        config.server.listen,
        config.admin.listen,
        store,
        humantime::format_duration(config.store.timeout),
        config.store.on_error.name()
    );
    let _ = writeln!(
        out,
        "{} upstream(s), {} route(s):",
        config.upstreams.len(),
        config.routes.len()
    );
    for r in &config.routes {
        let methods = r.methods.as_ref().map_or("*".to_string(), |m| {
            m.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(",")
        });
        let key: Vec<String> = r.key.iter().map(|k| k.to_string()).collect();
        let mode = match &r.on_exceed {
            ExceedMode::Delay {
                max_delay,
                max_waiting,
            } => format!(
                "delay (max {}, {} waiting)",
                humantime::format_duration(*max_delay),
                max_waiting
            ),
            ExceedMode::Block { block_for } => {
                format!("block for {}", humantime::format_duration(*block_for))
            }
            other => other.name().to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<20} {:<7} {:<24} -> {:<12} key={} on_exceed={}",
            r.name,
            methods,
            r.path.to_string(),
            r.upstream,
            key.join("|"),
            mode
        );
        if r.limits.is_empty() {
            let _ = writeln!(out, "      (no limits: proxy only)");
        }
        for l in &r.limits {
            let _ = writeln!(
                out,
                "      {:<16} {} per {} ({})",
                l.name,
                l.limit,
                humantime::format_duration(l.window),
                r.algorithm.name()
            );
        }
    }
    out
}

/// Hides a password in a Redis URL (`redis://:secret@host` -> `redis://:***@host`).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_string(),
    }
}
