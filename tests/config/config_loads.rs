//! Configs that load: the shipped `config.toml`; the defaults when `[server]`, `[admin]` and
//! `[store]` are absent; warnings, each pointing at the value it is about; the admin token from the
//! variable it names; and the `SLIDEGATE_REDIS_URL` override, ignored when empty and refused (at
//! `store.url`'s location, when the file has one) when it is not a Redis URL. `client_ip_header`
//! is a header name, taken in any case.

use crate::support;

use std::time::Duration;

use slidegate::algorithm::AlgorithmId;
use slidegate::config::{
    Backend, BlockPolicy, ClientIpHeader, ClockSource, Config, ExceedMode, KeyPart, KeySpec,
    OnError, OnMissingKey, PathCase, UnknownPlan, REDIS_URL_ENV,
};
use support::config::{
    fixture, load_ok, load_text, manifest_dir, no_env, store_url_position, NOT_REDIS,
};

#[test]
fn shipped_config_loads() {
    let config = load_ok(&manifest_dir().join("config.toml"), no_env);
    let names: Vec<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["otp-send", "payments", "public"]);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert_eq!(
        config.route("otp-send").unwrap().on_exceed,
        ExceedMode::Block(BlockPolicy {
            block_for: Duration::from_secs(15 * 60),
            growth: 1.0,
            max: Duration::from_secs(15 * 60 * 64),
            forget: Duration::from_secs(24 * 3600),
        })
    );
    assert_eq!(
        config.route("payments").unwrap().on_exceed,
        ExceedMode::Delay {
            max_delay: Duration::from_secs(2),
            max_waiting: 1000
        }
    );
    assert_eq!(config.store.url, "redis://127.0.0.1:6379");
}

#[test]
fn an_unused_jwt_section_whose_secret_is_unset_loads_with_one_warning() {
    let path = fixture("jwt_unused_secret_env_unset.toml");
    let config = load_ok(&path, no_env);
    assert!(config.jwt.is_none(), "no verifier without a secret");
    let [warning] = config.warnings.as_slice() else {
        panic!("expected exactly one warning, got {:?}", config.warnings);
    };
    assert_eq!(
        warning.to_string(),
        format!(
            "{}:4:20: warning: jwt.hs256_secret_env: the environment variable `SLIDEGATE_TEST_JWT_SECRET` is not set; ignored, since no route has a `jwt:` key part",
            path.display()
        )
    );
}

#[test]
fn max_delay_on_reject_loads_with_one_warning() {
    let path = fixture("max_delay_on_reject.toml");
    let config = load_ok(&path, no_env);
    assert_eq!(config.routes[0].on_exceed, ExceedMode::Reject);
    let [warning] = config.warnings.as_slice() else {
        panic!("expected exactly one warning, got {:?}", config.warnings);
    };
    assert_eq!(
        (warning.at.line, warning.at.column),
        (10, 13),
        "points at the max_delay value"
    );
    assert_eq!(
        warning.to_string(),
        format!(
            "{}:10:13: warning: routes[0].max_delay is ignored: on_exceed is \"reject\", not \"delay\"",
            path.display()
        )
    );
}

#[test]
fn redis_url_env_overrides_store_url() {
    let path = manifest_dir().join("config.toml");
    let env =
        |name: &str| (name == REDIS_URL_ENV).then(|| "rediss://cache.internal:6380/2".to_string());
    assert_eq!(
        load_ok(&path, env).store.url,
        "rediss://cache.internal:6380/2"
    );
}

#[test]
fn empty_redis_url_env_is_ignored() {
    let path = manifest_dir().join("config.toml");
    let env = |name: &str| (name == REDIS_URL_ENV).then(String::new);
    assert_eq!(load_ok(&path, env).store.url, "redis://127.0.0.1:6379");
}

#[test]
fn redis_url_env_that_is_not_redis_is_refused_at_store_url() {
    let path = manifest_dir().join("config.toml");
    let env = |name: &str| (name == REDIS_URL_ENV).then(|| NOT_REDIS.to_string());
    let err = Config::load_with_env(&path, env).expect_err("a non-Redis URL must be refused");
    let (line, column) = store_url_position(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(
        err.to_string(),
        format!(
            "{}:{line}:{column}: SLIDEGATE_REDIS_URL (overrides store.url): `{NOT_REDIS}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)",
            path.display()
        )
    );
}

#[test]
fn redis_url_env_that_is_not_redis_is_refused_without_a_store_url_too() {
    let path = fixture("defaults_only_routes.toml");
    let env = |name: &str| (name == REDIS_URL_ENV).then(|| "127.0.0.1:6379".to_string());
    let err = Config::load_with_env(&path, env).expect_err("a non-Redis URL must be refused");
    assert_eq!(
        err.location().map(|l| l.file.as_str()),
        Some(path.display().to_string().as_str())
    );
    assert!(
        err.to_string().contains(
            ": SLIDEGATE_REDIS_URL (overrides store.url): `127.0.0.1:6379` is not a Redis URL"
        ),
        "{err}"
    );
}

#[test]
fn defaults_when_server_admin_store_are_absent() {
    let config = load_ok(&fixture("defaults_only_routes.toml"), no_env);

    assert_eq!(config.server.listen, "0.0.0.0:8080".parse().unwrap());
    assert!(config.server.trusted_proxies.is_empty());
    assert_eq!(config.server.shutdown_grace, Duration::from_secs(10));

    assert_eq!(config.admin.listen, "127.0.0.1:9091".parse().unwrap());
    assert_eq!(config.admin.token_env, "SLIDEGATE_ADMIN_TOKEN");
    assert_eq!(config.admin.token, None);

    assert_eq!(config.store.backend, Backend::Redis);
    assert_eq!(config.store.url, "redis://127.0.0.1:6379");
    assert_eq!(config.store.timeout, Duration::from_millis(50));
    assert_eq!(config.store.on_error, OnError::Allow);
    assert_eq!(config.store.key_prefix, "slidegate");
    assert_eq!(config.store.clock, ClockSource::Redis);

    let app = &config.upstreams["app"];
    assert_eq!(
        (app.connect_timeout, app.timeout),
        (Duration::from_secs(3), Duration::from_secs(10))
    );
    assert_eq!(config.server.ipv6_prefix, 64);
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(
        config.server.client_ip_header,
        ClientIpHeader::XForwardedFor
    );
    assert_eq!(config.server.idle_timeout, Duration::from_secs(60));
    assert_eq!(config.server.path_case, PathCase::Insensitive);
    assert_eq!(config.store.max_keys, 1_000_000);
    assert!(config.keys.hash_secret.is_none());
    assert_eq!(config.unknown_plan, UnknownPlan::Default);

    let route = &config.routes[0];
    assert_eq!(route.methods, None);
    assert_eq!(route.key, KeySpec::of([KeyPart::Ip]));
    assert_eq!(route.on_missing_key, OnMissingKey::Reject);
    assert_eq!(route.on_exceed, ExceedMode::Reject);
    assert_eq!(route.on_error, None);
    assert_eq!(config.store.on_error, OnError::Allow);
    assert!(route.exempt.is_empty());
    assert!(route.access_log);
    assert!(route.headers);
    assert_eq!(route.max_key_body_bytes, 65_536);
    let limit = &route.limits[0];
    assert_eq!(limit.algorithm, AlgorithmId::SLIDING_LOG);
    assert_eq!(
        (
            &limit.key,
            &limit.burst,
            &limit.count_status,
            &limit.reset_status
        ),
        (&None, &None, &None, &None),
        "a limit counts the route's key, every answer, with no burst of its own"
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn admin_token_comes_from_the_named_env_var() {
    let env = |name: &str| (name == "SLIDEGATE_ADMIN_TOKEN").then(|| "s3cret".to_string());
    let config = load_ok(&fixture("defaults_only_routes.toml"), env);
    assert_eq!(config.admin.token.as_deref(), Some("s3cret"));
}

/// `server.client_ip_header` names a header, and header names have no case: `X-Forwarded-For`
/// (as NGINX's `real_ip_header` is usually written), `Forwarded` and `X-Real-IP` load.
#[test]
fn client_ip_header_is_taken_in_any_case() {
    for (written, header) in [
        ("X-Forwarded-For", ClientIpHeader::XForwardedFor),
        ("Forwarded", ClientIpHeader::Forwarded),
        ("X-Real-IP", ClientIpHeader::XRealIp),
    ] {
        let text = format!("[server]\nclient_ip_header = \"{written}\"\n");
        let config =
            load_text("client_ip_header.toml", &text).unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(config.server.client_ip_header, header, "{written}");
    }
}
