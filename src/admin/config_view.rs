//! `GET /admin/config`: the config in effect as JSON, laid out as the file is (the same sections
//! and key names, defaults filled in), secrets redacted (the admin token and the JWT secret are
//! never shown; a Redis password is masked). Settings read only at start show their running
//! values; when the file now says otherwise, `pending_restart` lists them.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::config::{redact_url, Config, ExceedMode, JwtKey, KeySpec, RlsConfig};
use crate::reload::PendingSetting;
use crate::state::GatewayState;

pub(super) async fn show(State(state): State<Arc<GatewayState>>) -> Json<Value> {
    let table = state.table();
    let mut view = view(&table.config);
    view["pending_restart"] = pending_json(&state.pending_restart());
    Json(view)
}

/// The restart-only settings a reload changed: what runs and what the file says.
pub(super) fn pending_json(pending: &[PendingSetting]) -> Value {
    pending
        .iter()
        .map(|p| json!({"setting": p.setting, "running": p.running, "configured": p.configured}))
        .collect()
}

fn duration_text(d: std::time::Duration) -> String {
    crate::config::format_duration(d)
}

/// A key as the file writes it: strings, or tables for parts with options.
fn key_json(key: &KeySpec) -> Value {
    key.parts
        .iter()
        .map(|p| {
            if !p.transforms() {
                return json!(p.part.to_string());
            }
            json!({
                "part": p.part.to_string(),
                "normalize": p.normalize.map(|n| n.name()),
                "region": p.region.as_ref().map(|r| r.as_ref().to_string()),
                "prefix": p.prefix,
                "hash": p.hash,
            })
        })
        .collect()
}

/// `[rls]` as the file writes it, with the domains its limit files hold (each limit by name).
fn rls_json(r: &RlsConfig) -> Value {
    let domains: Vec<Value> = (r.domains.iter())
        .map(|d| {
            let limits: Vec<Value> = (d.rules.iter())
                .map(|rule| {
                    json!({
                        "name": rule.label,
                        "limit": rule.limit,
                        "unlimited": rule.unlimited,
                        "window": duration_text(rule.window),
                        "shadow_mode": rule.shadow,
                        "quota_mode": rule.quota,
                    })
                })
                .collect();
            json!({"domain": d.name, "limits": limits})
        })
        .collect();
    json!({
        "listen": r.listen.to_string(),
        "config": r.source.display().to_string(),
        "headers": r.headers,
        "on_error": r.on_error.name(),
        "merge_domains": r.merge_domains,
        "domains": domains,
    })
}

fn view(c: &Config) -> Value {
    let routes: Vec<Value> = c
        .routes
        .iter()
        .map(|r| {
            let mut route = json!({
                "name": r.name,
                "path": r.path.to_string(),
                "methods": r.methods.as_ref().map(|m| m.iter().map(|m| m.as_str()).collect::<Vec<_>>()),
                "upstream": r.upstream,
                "key": key_json(&r.key),
                "on_missing_key": r.on_missing_key.name(),
                "max_key_body_bytes": r.max_key_body_bytes,
                "max_cost_body_bytes": r.max_cost_body_bytes,
                "on_exceed": r.on_exceed.name(),
                "on_error": r.on_error.unwrap_or(c.store.on_error).name(),
                "headers": r.headers,
                "exempt": r.exempt.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                "access_log": r.access_log,
                "access_log_sample": r.access_log_sample,
                "limits": r.limits.iter().map(|l| json!({
                    "name": l.name,
                    "limit": l.limit,
                    // a limit of attempts in flight has a lease where the others have a window
                    "window": l.algorithm.get().has_window().then(|| duration_text(l.window)),
                    "lease": (!l.algorithm.get().has_window()).then(|| duration_text(l.window)),
                    "cost_from": l.cost_from.as_ref().map(|c| c.to_string()),
                    "cost": l.cost_from.as_ref().map(|_| l.cost.to_string()),
                    "algorithm": l.algorithm.name(),
                    // Filled in where it means something: the limit when unset.
                    "burst": l.algorithm.get().takes_burst().then(|| l.burst.unwrap_or(l.limit)),
                    "key": l.key.as_ref().map(key_json),
                    "on_missing_key": l.on_missing_key.map(|m| m.name()),
                    "count_status": l.count_status.as_ref().map(|s| s.to_string()),
                    "reset_status": l.reset_status.as_ref().map(|s| s.to_string()),
                    "segments": l.segments,
                    "plans": l.plans,
                })).collect::<Vec<_>>(),
            });
            // The settings of the route's mode, where the file puts them.
            match &r.on_exceed {
                ExceedMode::Delay { max_delay, max_waiting } => {
                    route["max_delay"] = json!(duration_text(*max_delay));
                    route["max_waiting"] = json!(max_waiting);
                }
                ExceedMode::Block(b) => {
                    route["block_for"] = json!(duration_text(b.block_for));
                    route["block_growth"] = json!(b.growth);
                    route["block_max"] = json!(duration_text(b.max));
                    route["block_forget"] = json!(duration_text(b.forget));
                }
                _ => {}
            }
            route
        })
        .collect();
    let upstreams: serde_json::Map<String, Value> = c
        .upstreams
        .iter()
        .map(|(name, u)| {
            (
                name.clone(),
                json!({"url": redact_url(&u.url.to_string()), "connect_timeout": duration_text(u.connect_timeout), "timeout": duration_text(u.timeout)}),
            )
        })
        .collect();
    let segments: serde_json::Map<String, Value> = c
        .membership
        .segments()
        .iter()
        .zip(&c.tier_files.segments)
        .enumerate()
        .map(|(i, ((name, members), (_, file)))| {
            // `order`: the position in the file, which decides for a user in several segments
            let segment = json!({
                "members_file": file.display().to_string(),
                "ids": members.len(),
                "order": i + 1,
            });
            (name.clone(), segment)
        })
        .collect();
    json!({
        "source": c.source.display().to_string(),
        "server": {
            "listen": c.server.listen.to_string(),
            "trusted_proxies": c.server.trusted_proxies.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "client_ip_header": c.server.client_ip_header.name(),
            "idle_timeout": duration_text(c.server.idle_timeout),
            "path_case": c.server.path_case.name(),
            "shutdown_grace": duration_text(c.server.shutdown_grace),
            "ipv6_prefix": c.server.ipv6_prefix,
            "header_read_timeout": duration_text(c.server.header_read_timeout),
            "max_connections": c.server.max_connections,
            "max_header_bytes": c.server.max_header_bytes,
            "max_headers": c.server.max_headers,
            "watch_files": c.server.watch_files,
        },
        "admin": {
            "listen": c.admin.listen.to_string(),
            "token_env": c.admin.token_env,
            "token": if c.admin.token.is_some() { "<redacted>" } else { "<not set>" },
        },
        "store": {
            "backend": c.store.backend.name(),
            "url": redact_url(&c.store.url),
            "timeout": duration_text(c.store.timeout),
            "on_error": c.store.on_error.name(),
            "max_keys": c.store.max_keys,
            "key_prefix": c.store.key_prefix,
            "clock": c.store.clock.name(),
            "scripts": c.store.scripts.name(),
            "replica_acks": c.store.replica_acks,
        },
        "upstreams": upstreams,
        "routes": routes,
        "segments": segments,
        "plans": c.tier_files.plans.as_ref().map(|p| json!({
            "members_file": p.display().to_string(),
            "keys": c.membership.plan_count(),
            "unknown": c.unknown_plan.name(),
        })),
        "keys": {
            "hash_secret_env": c.keys.hash_secret_env,
            "hash_secret": if c.keys.hash_secret.is_some() { "<redacted>" } else { "<not set>" },
        },
        "rls": c.rls.as_ref().map(rls_json),
        "forward_auth": c.forward_auth.as_ref().map(|f| json!({
            "listen": f.listen.to_string(),
            "refused_status": f.refused_status,
        })),
        "ext_authz": c.ext_authz.as_ref().map(|e| json!({"listen": e.listen.to_string()})),
        "jwt": c.jwt.as_ref().map(|j| json!({
            "hs256_secret_env": j.secret_env,
            "public_key_file": j.key_file.as_ref().map(|f| f.display().to_string()),
            "key": match j.key { JwtKey::Hs256(_) => "hs256 <redacted>", JwtKey::Rs256(_) => "rs256 public key", JwtKey::Es256(_) => "es256 public key" },
            "issuer": j.issuer,
            "audience": j.audience,
            "require_exp": j.require_exp,
        })),
    })
}
