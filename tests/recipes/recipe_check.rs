//! `slidegate check` accepts the recipes, `examples/otp.toml`, `examples/login.toml` and
//! `examples/llm.toml`, as shipped and summarises every limit; the OTP recipe needs its hash
//! secret (without it, check refuses the file and names the variable). The recipes for a proxy
//! in front (`examples/nginx/`, `caddy/`, `traefik/`, `envoy/`, `envoy-ext-authz/`, `istio/`)
//! are gateway configs whose routes need no upstream, and check reads them so, without a
//! warning.

use crate::support;

use std::process::Command;

use support::recipes::recipe_path;

fn check(recipe: &str, secret: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    cmd.arg("check")
        .arg("--config")
        .arg(recipe_path(recipe))
        .env_remove("SLIDEGATE_CONFIG")
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_KEY_SECRET");
    if let Some(s) = secret {
        cmd.env("SLIDEGATE_KEY_SECRET", s);
    }
    cmd.output().expect("slidegate check runs")
}

/// `slidegate check` accepts both recipes as shipped and summarises every limit; the OTP recipe
/// needs its hash secret (without it, check refuses the file and names the variable).
#[test]
fn check_accepts_both_recipes() {
    // one summary line per limit, with its value and window
    let has = |summary: &str, name: &str, value: &str| {
        summary
            .lines()
            .any(|l| l.trim_start().starts_with(name) && l.contains(value))
    };
    let otp = check("otp.toml", Some("change-me"));
    let summary = String::from_utf8_lossy(&otp.stdout);
    assert!(
        otp.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&otp.stderr)
    );
    for (name, value) in [
        ("per-phone", "3 per 10m"),
        ("per-ip", "20 per 1h"),
        ("per-operator", "500 per 1h"),
    ] {
        assert!(has(&summary, name, value), "{name} {value} in\n{summary}");
    }
    let no_secret = check("otp.toml", None);
    let stderr = String::from_utf8_lossy(&no_secret.stderr);
    assert!(!no_secret.status.success(), "hash = true without a secret");
    assert!(stderr.contains("SLIDEGATE_KEY_SECRET"), "{stderr}");

    let login = check("login.toml", None);
    let summary = String::from_utf8_lossy(&login.stdout);
    assert!(
        login.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&login.stderr)
    );
    for (name, value) in [
        (
            "failed-logins",
            "5 per 15m (sliding_log, counts [401, 403], resets on [200])",
        ),
        (
            "per-ip",
            "100 per 1h (sliding_log, key=[\"ip\"], counts [401, 403])",
        ),
    ] {
        assert!(has(&summary, name, value), "{name} {value} in\n{summary}");
    }
    assert!(
        summary.contains("on_exceed=block for 1m (x2 each time"),
        "{summary}"
    );

    let llm = check("llm.toml", Some("change-me"));
    let summary = String::from_utf8_lossy(&llm.stdout);
    assert!(
        llm.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&llm.stderr)
    );
    for (name, value) in [
        (
            "tokens",
            "100000 per 1h (sliding_window_counter, cost from sse:usage.total_tokens, reserves json:max_tokens)",
        ),
        ("inflight", "4 in flight, lease 10m (concurrency)"),
    ] {
        assert!(has(&summary, name, value), "{name} {value} in\n{summary}");
    }
}

/// The recipes for a proxy in front have routes without `upstream` (and the Traefik, Envoy
/// and Istio ones no `[upstreams]`), like a layer file, but `[forward_auth]`, `[ext_authz]` or
/// `[rls]` makes them the gateway's: check accepts each as shipped (with its hash secret), with
/// no warning (so `check --strict` passes in CI), and summarises it as a gateway config.
#[test]
fn check_accepts_the_proxy_recipes_without_a_warning() {
    for recipe in [
        "nginx/slidegate.toml",
        "caddy/slidegate.toml",
        "traefik/slidegate.toml",
        "envoy/slidegate.toml",
        "envoy-ext-authz/slidegate.toml",
        "istio/slidegate.toml",
    ] {
        let out = check(recipe, Some("a-secret-of-32-random-bytes-here"));
        let summary = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{recipe}: {summary}{stderr}");
        assert!(
            !stderr.contains("warning"),
            "{recipe} has no warning: {stderr}"
        );
        assert!(
            summary.contains("listen 127.0.0.1:8080"),
            "{recipe}: {summary}"
        );
        assert!(!summary.contains("layer file"), "{recipe}: {summary}");
    }
}
