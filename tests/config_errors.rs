//! Config validation, fixture by fixture: every file under `tests/fixtures/config/` that is
//! refused has a test pinning the exact `FILE:LINE:COLUMN: message` an operator sees (in the
//! style of envoyproxy/ratelimit's `test/config` fixtures), the location being the offending
//! value's and the message naming its key path. The positive tests check the shipped
//! `config.toml`, defaults, the bounds of SPEC section 2 at their edges (a sliding_log limit of
//! 10,000, a counter's limit * window just below 2^53 µs, windows of 1 ms and 366 days, a block
//! of 1 s), warnings and the `SLIDEGATE_REDIS_URL` override, and the last tests run
//! `slidegate check` itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use slidegate::algorithm::AlgorithmId;
use slidegate::config::{
    Backend, BlockPolicy, ClientIpHeader, ClockSource, Config, ExceedMode, KeyPart, KeySpec,
    OnError, OnMissingKey, PathCase, Purpose, UnknownPlan, CONFIG_ENV, REDIS_URL_ENV,
};

/// Where the fixtures live, relative to the crate root.
const FIXTURES: &str = "tests/fixtures/config";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    manifest_dir().join(FIXTURES).join(name)
}

/// An empty environment: no secrets, no `SLIDEGATE_REDIS_URL`.
fn no_env(_: &str) -> Option<String> {
    None
}

/// Loads a fixture that must be refused and returns the error as the operator reads it, with
/// the fixture directory cut off the front: `NAME:LINE:COLUMN: message`.
fn load_err(name: &str) -> String {
    let path = fixture(name);
    let err = match Config::load_with_env(&path, no_env) {
        Ok(_) => panic!("{name} should be refused but loaded"),
        Err(e) => e,
    };
    let file = path.display().to_string();
    assert_eq!(
        err.location().map(|l| l.file.as_str()),
        Some(file.as_str()),
        "{name}: the error should point into the file"
    );
    let text = err.to_string();
    let rest = text
        .strip_prefix(&file)
        .unwrap_or_else(|| panic!("{name}: error does not start with the file name: {text}"));
    format!("{name}{rest}")
}

fn load_ok(path: &Path, env: impl Into<slidegate::config::Environment>) -> Config {
    Config::load_with_env(path, env)
        .unwrap_or_else(|e| panic!("{} should load: {e}", path.display()))
}

// ---- unknown keys -------------------------------------------------------------------------

#[test]
fn unknown_key_top_level() {
    assert_eq!(
        load_err("unknown_key_top_level.toml"),
        "unknown_key_top_level.toml:2:2: unknown field `sever`, expected one of `server`, `admin`, `store`, `upstreams`, `routes`, `jwt`, `keys`, `segments`, `plans`"
    );
}

#[test]
fn unknown_key_server() {
    assert_eq!(
        load_err("unknown_key_server.toml"),
        "unknown_key_server.toml:4:1: server: unknown field `port`, expected one of `listen`, `trusted_proxies`, `client_ip_header`, `shutdown_grace`, `ipv6_prefix`, `header_read_timeout`, `idle_timeout`, `max_connections`, `max_header_bytes`, `max_headers`, `path_case`"
    );
}

#[test]
fn unknown_key_route() {
    assert_eq!(
        load_err("unknown_key_route.toml"),
        "unknown_key_route.toml:8:1: routes[0]: unknown field `method`, expected one of `name`, `path`, `methods`, `upstream`, `key`, `on_missing_key`, `max_key_body_bytes`, `on_exceed`, `max_delay`, `max_waiting`, `block_for`, `block_growth`, `block_max`, `block_forget`, `on_error`, `headers`, `exempt`, `access_log`, `access_log_sample`, `limits`"
    );
}

#[test]
fn unknown_key_limit() {
    assert_eq!(
        load_err("unknown_key_limit.toml"),
        "unknown_key_limit.toml:14:3: routes[0].limits[0]: unknown field `cost`, expected one of `name`, `limit`, `window`, `algorithm`, `burst`, `key`, `count_status`, `reset_status`, `segments`, `plans`"
    );
}

// ---- TOML itself --------------------------------------------------------------------------

#[test]
fn toml_syntax_error() {
    assert_eq!(
        load_err("toml_syntax_error.toml"),
        "toml_syntax_error.toml:3:29: invalid basic string, expected `\"`"
    );
}

#[test]
fn wrong_type_limit() {
    assert_eq!(
        load_err("wrong_type_limit.toml"),
        "wrong_type_limit.toml:12:11: routes[0].limits[0].limit: invalid type: string \"5\", expected an integer"
    );
}

#[test]
fn missing_route_upstream() {
    assert_eq!(
        load_err("missing_route_upstream.toml"),
        "missing_route_upstream.toml:5:1: routes[0]: missing field `upstream`"
    );
}

// ---- durations and limits -----------------------------------------------------------------

#[test]
fn bad_duration_window() {
    assert_eq!(
        load_err("bad_duration_window.toml"),
        "bad_duration_window.toml:13:12: routes[0].limits[0].window: `5 parsecs` is not a duration (unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\""
    );
}

#[test]
fn bad_duration_timeout() {
    assert_eq!(
        load_err("bad_duration_timeout.toml"),
        "bad_duration_timeout.toml:3:11: store.timeout: `fast` is not a duration (expected number at 0); write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\""
    );
}

#[test]
fn zero_limit() {
    assert_eq!(
        load_err("zero_limit.toml"),
        "zero_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got 0"
    );
}

#[test]
fn negative_limit() {
    assert_eq!(
        load_err("negative_limit.toml"),
        "negative_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got -5"
    );
}

#[test]
fn zero_window() {
    assert_eq!(
        load_err("zero_window.toml"),
        "zero_window.toml:13:12: routes[0].limits[0].window: must be between 1ms and 366days, got 0s"
    );
}

#[test]
fn duplicate_limit_name() {
    assert_eq!(
        load_err("duplicate_limit_name.toml"),
        "duplicate_limit_name.toml:16:10: routes[0].limits[1].name: duplicate limit name `burst` in this route"
    );
}

#[test]
fn unknown_algorithm() {
    assert_eq!(
        load_err("unknown_algorithm.toml"),
        "unknown_algorithm.toml:14:15: routes[0].limits[0].algorithm: unknown algorithm `token_bucket`, expected \"sliding_log\", \"sliding_window_counter\" or \"gcra\""
    );
}

#[test]
fn sliding_log_over_10000() {
    assert_eq!(
        load_err("sliding_log_over_10000.toml"),
        "sliding_log_over_10000.toml:12:11: routes[0].limits[0].limit: a sliding_log limit holds at most 10000 (it stores one entry per counted unit); for more, use algorithm = \"sliding_window_counter\" or \"gcra\""
    );
}

#[test]
fn counter_limit_times_window_2_53() {
    assert_eq!(
        load_err("counter_limit_times_window_2_53.toml"),
        "counter_limit_times_window_2_53.toml:13:11: routes[0].limits[0].limit: limit * window must stay below 2^53 microseconds for the counter's arithmetic to be exact (here 9007199255 * 1000000 µs); lower the limit or the window"
    );
}

/// `text` (a fixture's, edited) loaded as if it were the fixture `name`.
fn load_text(name: &str, text: &str) -> Result<Config, slidegate::config::ConfigError> {
    Config::from_toml(&fixture(name), text, no_env, Purpose::Gateway)
}

/// The bounds are inclusive where SPEC says so and the refusals above are exactly at them:
/// 10,000 for a sliding_log limit, limit * window just below 2^53 µs for a counter, windows of
/// 1 ms and 366 days.
#[test]
fn limits_and_windows_at_their_bounds_load() {
    let log = std::fs::read_to_string(fixture("sliding_log_over_10000.toml")).unwrap();
    let at_most = log.replace("limit = 10001", "limit = 10000");
    assert_ne!(at_most, log);
    let config = load_text("sliding_log_over_10000.toml", &at_most).unwrap();
    assert_eq!(config.routes[0].limits[0].limit, 10_000);

    let counter = std::fs::read_to_string(fixture("counter_limit_times_window_2_53.toml")).unwrap();
    let below = counter.replace("limit = 9007199255", "limit = 9007199254");
    assert_ne!(below, counter);
    let config = load_text("counter_limit_times_window_2_53.toml", &below).unwrap();
    assert_eq!(config.routes[0].limits[0].limit, 9_007_199_254);

    let window = std::fs::read_to_string(fixture("zero_window.toml")).unwrap();
    for (written, length) in [
        ("1ms", Duration::from_millis(1)),
        ("366d", Duration::from_secs(366 * 24 * 3600)),
    ] {
        let text = window.replace("window = \"0s\"", &format!("window = \"{written}\""));
        assert_ne!(text, window);
        let config = load_text("zero_window.toml", &text)
            .unwrap_or_else(|e| panic!("a window of {written} loads: {e}"));
        assert_eq!(config.routes[0].limits[0].window, length);
    }
    let too_long = window.replace("window = \"0s\"", "window = \"367d\"");
    let err = load_text("zero_window.toml", &too_long).unwrap_err();
    assert!(
        err.to_string().ends_with(
            ":13:12: routes[0].limits[0].window: must be between 1ms and 366days, got 367days"
        ),
        "{err}"
    );
}

#[test]
fn one_route_may_mix_the_algorithms_and_a_limit_without_one_is_a_sliding_log() {
    let config = load_ok(&fixture("mixed_algorithms.toml"), no_env);
    let algorithms: Vec<_> = config.routes[0]
        .limits
        .iter()
        .map(|l| (l.name.as_str(), l.algorithm))
        .collect();
    assert_eq!(
        algorithms,
        [
            ("per-day", AlgorithmId::SLIDING_WINDOW_COUNTER),
            ("per-second", AlgorithmId::SLIDING_LOG)
        ]
    );
}

// ---- routes -------------------------------------------------------------------------------

#[test]
fn unknown_upstream() {
    assert_eq!(
        load_err("unknown_upstream.toml"),
        "unknown_upstream.toml:11:12: routes[0].upstream: unknown upstream `ap` (defined: app, billing)"
    );
}

#[test]
fn duplicate_route_name() {
    assert_eq!(
        load_err("duplicate_route_name.toml"),
        "duplicate_route_name.toml:11:8: routes[1].name: duplicate route name `api`"
    );
}

#[test]
fn bad_route_name() {
    assert_eq!(
        load_err("bad_route_name.toml"),
        "bad_route_name.toml:6:8: routes[0].name: `public api` must be 1-64 characters of letters, digits, `-`, `_` or `.`"
    );
}

#[test]
fn path_no_leading_slash() {
    assert_eq!(
        load_err("path_no_leading_slash.toml"),
        "path_no_leading_slash.toml:7:8: routes[0].path: `api/*` must start with `/` and have no query"
    );
}

#[test]
fn path_star_in_middle() {
    assert_eq!(
        load_err("path_star_in_middle.toml"),
        "path_star_in_middle.toml:7:8: routes[0].path: `/api/*/items`: `*` is only allowed as a trailing `/*`"
    );
}

#[test]
fn bad_method() {
    assert_eq!(
        load_err("bad_method.toml"),
        "bad_method.toml:8:19: routes[0].methods: `*` is not an HTTP method (expected one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH)"
    );
}

#[test]
fn bad_key_part() {
    assert_eq!(
        load_err("bad_key_part.toml"),
        "bad_key_part.toml:9:14: routes[0].key: unknown key part `cookie:x`, expected \"ip\", \"header:NAME\", \"query:NAME\", \"jwt:CLAIM\", \"route\", \"method\", \"path\", \"json:PATH\" or \"form:NAME\""
    );
}

#[test]
fn empty_key() {
    assert_eq!(
        load_err("empty_key.toml"),
        "empty_key.toml:9:7: routes[0].key: needs at least one part (for one shared limit, use [\"route\"])"
    );
}

#[test]
fn unknown_normalize() {
    assert_eq!(
        load_err("unknown_normalize.toml"),
        "unknown_normalize.toml:9:43: routes[0].key[0].normalize: unknown normalization `digits`, expected \"phone\", \"email\" or \"lower\""
    );
}

#[test]
fn zero_prefix() {
    assert_eq!(
        load_err("zero_prefix.toml"),
        "zero_prefix.toml:13:78: routes[0].limits[0].key[0].prefix: must be between 1 and 1024 characters, got 0"
    );
}

/// The error names `hash` and points at its value (`true`, line 9 column 74).
#[test]
fn hash_without_secret() {
    assert_eq!(
        load_err("hash_without_secret.toml"),
        "hash_without_secret.toml:9:74: routes[0].key[0].hash: `hash = true` needs a secret: set [keys] hash_secret_env to the environment variable holding the HMAC secret"
    );
}

#[test]
fn jwt_claim_without_jwt_section() {
    assert_eq!(
        load_err("jwt_claim_without_jwt_section.toml"),
        "jwt_claim_without_jwt_section.toml:9:8: routes[0].key: `jwt:sub` needs a [jwt] section to verify tokens"
    );
}

#[test]
fn unknown_on_exceed() {
    assert_eq!(
        load_err("unknown_on_exceed.toml"),
        "unknown_on_exceed.toml:9:13: routes[0].on_exceed: unknown mode `throttle`, expected \"reject\", \"delay\", \"block\" or \"shadow\""
    );
}

#[test]
fn block_without_block_for() {
    assert_eq!(
        load_err("block_without_block_for.toml"),
        "block_without_block_for.toml:9:13: routes[0].on_exceed: \"block\" needs block_for (like block_for = \"15m\")"
    );
}

#[test]
fn block_for_1ns() {
    assert_eq!(
        load_err("block_for_1ns.toml"),
        "block_for_1ns.toml:10:13: routes[0].block_for: must be between 1s and 366days, got 1ns"
    );
}

#[test]
fn block_for_500ms() {
    assert_eq!(
        load_err("block_for_500ms.toml"),
        "block_for_500ms.toml:10:13: routes[0].block_for: must be between 1s and 366days, got 500ms"
    );
}

#[test]
fn a_block_of_one_second_loads() {
    let text = std::fs::read_to_string(fixture("block_for_1ns.toml")).unwrap();
    let second = text.replace("block_for = \"1ns\"", "block_for = \"1s\"");
    assert_ne!(second, text);
    let config = load_text("block_for_1ns.toml", &second).unwrap();
    let ExceedMode::Block(policy) = &config.routes[0].on_exceed else {
        panic!("{:?}", config.routes[0].on_exceed)
    };
    assert_eq!(policy.block_for, Duration::from_secs(1));
}

#[test]
fn count_status_on_delay() {
    assert_eq!(
        load_err("count_status_on_delay.toml"),
        "count_status_on_delay.toml:16:18: routes[0].limits[0].count_status: cannot be used on a \"delay\" route (a delayed request would hold its reservation while it waits; use \"reject\" or \"block\")"
    );
}

#[test]
fn zero_max_waiting() {
    assert_eq!(
        load_err("zero_max_waiting.toml"),
        "zero_max_waiting.toml:10:15: routes[0].max_waiting: must be between 1 and 1000000, got 0"
    );
}

#[test]
fn unknown_on_error() {
    assert_eq!(
        load_err("unknown_on_error.toml"),
        "unknown_on_error.toml:9:12: routes[0].on_error: unknown value `fail-open`, expected \"allow\", \"deny\" or \"local\""
    );
}

// ---- server, upstreams, store, jwt --------------------------------------------------------

#[test]
fn bad_listen_address() {
    assert_eq!(
        load_err("bad_listen_address.toml"),
        "bad_listen_address.toml:3:10: server.listen: `localhost:8080` is not an IP:PORT address"
    );
}

#[test]
fn bad_trusted_proxy_cidr() {
    assert_eq!(
        load_err("bad_trusted_proxy_cidr.toml"),
        "bad_trusted_proxy_cidr.toml:4:36: server.trusted_proxies: `10.0.0.0/33` is not a CIDR (like 10.0.0.0/8) or an IP address"
    );
}

#[test]
fn upstream_url_ftp() {
    assert_eq!(
        load_err("upstream_url_ftp.toml"),
        "upstream_url_ftp.toml:3:7: upstreams.files.url: `ftp://files.internal:21` must start with http:// or https://"
    );
}

#[test]
fn upstream_url_no_host() {
    assert_eq!(
        load_err("upstream_url_no_host.toml"),
        "upstream_url_no_host.toml:3:7: upstreams.app.url: `http://` is not a URL"
    );
}

#[test]
fn upstream_url_no_scheme() {
    assert_eq!(
        load_err("upstream_url_no_scheme.toml"),
        "upstream_url_no_scheme.toml:3:7: upstreams.app.url: `app.internal:9000` must start with http:// or https://"
    );
}

#[test]
fn bad_store_url_scheme() {
    assert_eq!(
        load_err("bad_store_url_scheme.toml"),
        "bad_store_url_scheme.toml:4:7: store.url: `http://127.0.0.1:6379` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)"
    );
}

#[test]
fn unknown_store_backend() {
    assert_eq!(
        load_err("unknown_store_backend.toml"),
        "unknown_store_backend.toml:3:11: store.backend: unknown backend `memcached`, expected \"redis\" or \"memory\""
    );
}

#[test]
fn jwt_secret_env_unset() {
    assert_eq!(
        load_err("jwt_secret_env_unset.toml"),
        "jwt_secret_env_unset.toml:3:20: jwt.hs256_secret_env: the environment variable `SLIDEGATE_TEST_JWT_SECRET` is not set"
    );
}

// ---- configs that load --------------------------------------------------------------------

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

/// Line and column (1-based) of the first `url = "` value after `[store]` in `text`.
fn store_url_position(text: &str) -> (usize, usize) {
    let store = text.find("[store]").expect("a [store] section");
    let url = store + text[store..].find("url = \"").expect("a store url") + "url = ".len();
    let line = text[..url].matches('\n').count() + 1;
    let column = url - text[..url].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

const NOT_REDIS: &str = "http://127.0.0.1:6379";

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

#[test]
fn every_fixture_has_a_test() {
    let this_file = include_str!("config_errors.rs");
    for entry in std::fs::read_dir(manifest_dir().join(FIXTURES)).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            this_file.contains(&format!("\"{name}\"")),
            "fixture {name} is not used by any test"
        );
    }
}

// ---- the `slidegate check` command --------------------------------------------------------

/// `slidegate ARGS`, run from the crate root with the config-related environment cleared,
/// plus `env`.
fn slidegate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    cmd.current_dir(manifest_dir())
        .args(args)
        .env_remove(CONFIG_ENV)
        .env_remove(REDIS_URL_ENV)
        .env_remove("SLIDEGATE_ADMIN_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run slidegate")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_refuses_a_bad_config_with_its_location_on_stderr() {
    let out = slidegate(
        &["check", "--config", "tests/fixtures/config/zero_limit.toml"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "tests/fixtures/config/zero_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got 0\n"
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn check_refuses_a_toml_error_with_its_location_on_stderr() {
    let out = slidegate(
        &[
            "check",
            "--config",
            "tests/fixtures/config/unknown_key_limit.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with(
            "tests/fixtures/config/unknown_key_limit.toml:14:3: routes[0].limits[0]: unknown field `cost`"
        ),
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn check_accepts_the_shipped_config_and_summarises_every_route() {
    let out = slidegate(&["check", "--config", "config.toml"], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(stdout.starts_with("config.toml: OK\n"), "stdout: {stdout}");
    for route in ["otp-send", "payments", "public"] {
        assert!(
            stdout.contains(route),
            "summary does not mention {route}:\n{stdout}"
        );
    }
    assert_eq!(text(&out.stderr), "", "the shipped config has no warnings");
}

#[test]
fn check_prints_warnings_on_stderr_and_still_succeeds() {
    let out = slidegate(
        &[
            "check",
            "--config",
            "tests/fixtures/config/max_delay_on_reject.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "tests/fixtures/config/max_delay_on_reject.toml:10:13: warning: routes[0].max_delay is ignored: on_exceed is \"reject\", not \"delay\"\n"
    );
}

#[test]
fn check_refuses_a_redis_url_env_that_is_not_redis() {
    let shipped = std::fs::read_to_string(manifest_dir().join("config.toml")).unwrap();
    let (line, column) = store_url_position(&shipped);
    let out = slidegate(
        &["check", "--config", "config.toml"],
        &[(REDIS_URL_ENV, NOT_REDIS)],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "config.toml:{line}:{column}: SLIDEGATE_REDIS_URL (overrides store.url): `{NOT_REDIS}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)\n"
        )
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn run_refuses_a_redis_url_env_that_is_not_redis() {
    // Listeners on port 0, so a gateway that wrongly starts binds nothing in use.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let shipped = std::fs::read_to_string(manifest_dir().join("config.toml")).unwrap();
    let local: String = shipped
        .lines()
        .map(|l| match l.starts_with("listen = ") {
            true => "listen = \"127.0.0.1:0\"\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    assert_eq!(local.matches("listen = \"127.0.0.1:0\"").count(), 2);
    std::fs::write(&path, &local).unwrap();
    let (line, column) = store_url_position(&local);
    let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .arg("--config")
        .arg(&path)
        .env_remove(CONFIG_ENV)
        .env(REDIS_URL_ENV, NOT_REDIS)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("slidegate started with a non-Redis SLIDEGATE_REDIS_URL");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.ends_with(&format!(
            "{}:{line}:{column}: SLIDEGATE_REDIS_URL (overrides store.url): `{NOT_REDIS}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)\n",
            path.display()
        )),
        "stderr: {stderr}"
    );
}

#[test]
fn check_reads_the_config_env_var_without_a_flag() {
    let out = slidegate(
        &["check"],
        &[(CONFIG_ENV, "tests/fixtures/config/zero_limit.toml")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("tests/fixtures/config/zero_limit.toml:12:11: "),
        "stderr: {}",
        text(&out.stderr)
    );
}

/// A container started without its config mounted: the gateway (and `check`) exit 1 at once,
/// saying the file does not exist and how to name one.
#[test]
fn a_missing_config_file_is_named_with_how_to_give_one() {
    let missing = "tests/fixtures/config/does-not-exist.toml";
    let hint = "slidegate: name a config file with --config FILE or SLIDEGATE_CONFIG=FILE \
                (default ./config.toml; config.toml in the repository is a working example)\n";
    let named =
        |file: &str| format!("{file}: no such file: the config file does not exist\n{hint}");
    for args in [&[][..], &["check"][..]] {
        let out = slidegate(args, &[(CONFIG_ENV, missing)]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: stderr: {stderr}");
        assert_eq!(stderr, named(missing), "{args:?}");
    }
    let out = slidegate(&["check", "--config", "/nonexistent"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), named("/nonexistent"));
    assert_eq!(text(&out.stdout), "");
    // A file that exists but cannot be read as one gets no such hint.
    let out = slidegate(&["check", "--config", "tests/fixtures"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !text(&out.stderr).contains("name a config file"),
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn config_flag_wins_over_the_config_env_var() {
    let out = slidegate(
        &["check", "--config", "config.toml"],
        &[(CONFIG_ENV, "tests/fixtures/config/zero_limit.toml")],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("config.toml: OK\n"));
}
