//! The one-screen summary `slidegate check` prints: listeners, store, segments and plans (ids,
//! memory, lookup cost, overlaps), and every route with its key, mode and limits.

use super::duration::format as format_duration;
use std::fmt::Write;

use super::{redact_url, Backend, Config, ExceedMode, Purpose};

/// Renders `config` as a short, human-readable listing.
pub(super) fn render(config: &Config) -> String {
    let mut out = String::new();
    let store = match config.store.backend {
        Backend::Redis if config.store.replica_acks > 0 => format!(
            "redis {} (replica_acks {})",
            redact_url(&config.store.url),
            config.store.replica_acks
        ),
        Backend::Redis => format!("redis {}", redact_url(&config.store.url)),
        Backend::Memory => "memory (embedded, single instance)".to_string(),
    };
    let store = format!(
        "store {}  timeout {}  on_error {}",
        store,
        format_duration(config.store.timeout),
        config.store.on_error.name()
    );
    match config.purpose {
        Purpose::Gateway => {
            let _ = writeln!(out, "{}: OK", config.source.display());
            let _ = writeln!(
                out,
                "listen {}  admin {}  {store}",
                config.server.listen, config.admin.listen
            );
            let _ = writeln!(
                out,
                "{} upstream(s), {} route(s):",
                config.upstreams.len(),
                config.routes.len()
            );
        }
        Purpose::Layer => {
            let _ = writeln!(
                out,
                "{}: OK (a layer file: RateLimitLayer in front of your service)",
                config.source.display()
            );
            let _ = writeln!(out, "{store}");
            let _ = writeln!(out, "client ip: {}", client_ip_source(config));
            let _ = writeln!(out, "{} route(s):", config.routes.len());
        }
    }
    render_tiers(config, &mut out);
    render_deciders(config, &mut out);
    for r in &config.routes {
        let methods = r.methods.as_ref().map_or("*".to_string(), |m| {
            m.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(",")
        });
        let mode = match &r.on_exceed {
            ExceedMode::Delay {
                max_delay,
                max_waiting,
            } => format!(
                "delay (max {}, {} waiting)",
                format_duration(*max_delay),
                max_waiting
            ),
            ExceedMode::Block(b) if b.growth > 1.0 => format!(
                "block for {} (x{} each time, up to {}; forgotten after {})",
                format_duration(b.block_for),
                b.growth,
                format_duration(b.max),
                format_duration(b.forget)
            ),
            ExceedMode::Block(b) => {
                format!("block for {}", format_duration(b.block_for))
            }
            other => other.name().to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<20} {:<7} {:<24} -> {:<12} key={} on_exceed={}",
            r.name,
            methods,
            r.path.to_string(),
            r.upstream
                .as_deref()
                .unwrap_or(match (&config.forward_auth, &config.ext_authz) {
                    (Some(_), None) => "(forward auth)",
                    (None, Some(_)) => "(ext_authz)",
                    (Some(_), Some(_)) => "(proxy in front)",
                    (None, None) => "(the service)",
                }),
            r.key,
            mode
        );
        if r.limits.is_empty() {
            let _ = writeln!(out, "      (no limits: proxy only)");
        }
        for l in &r.limits {
            let mut extra = String::new();
            if let Some(b) = l.burst {
                extra.push_str(&format!(", burst {b}"));
            }
            if let Some(k) = &l.key {
                extra.push_str(&format!(", key={k}"));
            }
            if let Some(c) = &l.count_status {
                extra.push_str(&format!(", counts {c}"));
            }
            if let Some(c) = &l.reset_status {
                extra.push_str(&format!(", resets on {c}"));
            }
            if let Some(from) = &l.cost_from {
                extra.push_str(&format!(", cost from {from}, reserves {}", l.cost));
            }
            let amount = match l.algorithm.get().has_window() {
                true => format!("{} per {}", l.limit, format_duration(l.window)),
                false => format!("{} in flight, lease {}", l.limit, format_duration(l.window)),
            };
            let _ = writeln!(
                out,
                "      {:<16} {amount} ({}{extra})",
                l.name,
                l.algorithm.name()
            );
            let tiers: Vec<String> = l
                .segments
                .iter()
                .map(|(s, v)| format!("segment {s}: {v}"))
                .chain(l.plans.iter().map(|(p, v)| format!("plan {p}: {v}")))
                .collect();
            if !tiers.is_empty() {
                let _ = writeln!(out, "        {}", tiers.join(", "));
            }
        }
    }
    out
}

/// Where a layer's `ip` key part comes from: the peer, or a trusted proxy's header.
fn client_ip_source(config: &Config) -> String {
    let server = &config.server;
    if server.trusted_proxies.is_empty() {
        return "the TCP peer (no server.trusted_proxies: behind a load balancer, every client is the balancer)".to_string();
    }
    let proxies: Vec<String> = server
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    format!(
        "{} from {} (else the TCP peer)",
        server.client_ip_header.name(),
        proxies.join(", ")
    )
}

/// Forward auth's listener, and the rate-limit service's with each domain's rate limits.
fn render_deciders(config: &Config, out: &mut String) {
    if let Some(f) = &config.forward_auth {
        let _ = writeln!(
            out,
            "forward auth {} (refused: {}): every route below",
            f.listen, f.refused_status
        );
    }
    if let Some(e) = &config.ext_authz {
        let _ = writeln!(
            out,
            "ext_authz (gRPC) {}: every route below, decided from Envoy's Check",
            e.listen
        );
    }
    let Some(rls) = &config.rls else { return };
    let _ = writeln!(
        out,
        "rate-limit service (gRPC) {}: {} domain(s) from {} (headers {}, on_error {})",
        rls.listen,
        rls.domains.len(),
        rls.source.display(),
        if rls.headers { "on" } else { "off" },
        rls.on_error.name()
    );
    for d in &rls.domains {
        let _ = writeln!(out, "  domain {}", d.name);
        for r in &d.rules {
            let what = match r.unlimited {
                true => "unlimited".to_string(),
                false => format!(
                    "{} per {} ({})",
                    r.limit,
                    format_duration(r.window),
                    r.algorithm.name()
                ),
            };
            let shadow = if r.shadow { ", shadow mode" } else { "" };
            let _ = writeln!(out, "      {:<16} {what}{shadow}  [{}]", r.label, r.path);
        }
    }
}

/// Segments (ids, bitmap bytes, measured lookup cost) and plans (keys), when configured.
fn render_tiers(config: &Config, out: &mut String) {
    let membership = &config.membership;
    let segments = membership.segments();
    if !segments.is_empty() {
        let ids: u64 = segments.iter().map(|(_, m)| m.len()).sum();
        let bytes: usize = segments.iter().map(|(_, m)| m.serialized_size()).sum();
        let _ = writeln!(
            out,
            "{} segment(s): {} ids in {} bytes of bitmaps, {} id(s) in more than one (the first segment in file order applies); lookup {:.0} ns",
            segments.len(),
            ids,
            bytes,
            membership.overlapping_ids(),
            lookup_ns(membership)
        );
        for ((name, members), (_, file)) in segments.iter().zip(&config.tier_files.segments) {
            let _ = writeln!(
                out,
                "  {:<20} {:>12} ids {:>12} bytes  {}",
                name,
                members.len(),
                members.serialized_size(),
                file.display()
            );
        }
    }
    if let Some(file) = &config.tier_files.plans {
        let _ = writeln!(
            out,
            "plans: {} keys  {}",
            membership.plan_count(),
            file.display()
        );
    }
}

/// The measured cost of one segment lookup (a key read as a user id, every segment checked),
/// over ids spread across the whole u32 range.
fn lookup_ns(membership: &crate::tier::Membership) -> f64 {
    const SAMPLES: u32 = 100_000;
    let keys: Vec<String> = (0..SAMPLES)
        .map(|i| (i.wrapping_mul(2_654_435_761) % 270_000_000).to_string())
        .collect();
    let started = std::time::Instant::now();
    let mut found = 0usize;
    for k in &keys {
        found += usize::from(membership.segment_of(k).is_some());
    }
    std::hint::black_box(found);
    started.elapsed().as_nanos() as f64 / SAMPLES as f64
}
