//! Config validation of routes (names, paths, methods, keys and their parts, `on_exceed` with its
//! blocks and delays, `on_error`): each refused fixture under `tests/fixtures/config/` pinned to
//! the exact `FILE:LINE:COLUMN: message` an operator sees (in the style of envoyproxy/ratelimit's
//! `test/config` fixtures), the location being the offending value's and the message naming its
//! key path. A block of 1 s, the shortest there is, loads.

use crate::support;

use std::time::Duration;

use slidegate::config::ExceedMode;
use support::config::{fixture, load_err, load_text};

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
        "unknown_normalize.toml:9:43: routes[0].key[0].normalize: unknown normalization `digits`, expected \"phone\", \"email\", \"lower\" or \"bearer\""
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
fn block_for_500ms() {
    assert_eq!(
        load_err("block_for_500ms.toml"),
        "block_for_500ms.toml:10:13: routes[0].block_for: must be between 1s and 366d, got 500ms"
    );
}

#[test]
fn a_block_of_one_second_loads() {
    let text = std::fs::read_to_string(fixture("block_for_500ms.toml")).unwrap();
    let second = text.replace("block_for = \"500ms\"", "block_for = \"1s\"");
    assert_ne!(second, text);
    let config = load_text("block_for_500ms.toml", &second).unwrap();
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

/// A success forgives only the value it sent: on an algorithm with no entry per attempt, a
/// reset with a key that merges values (`lower`, `email`, `prefix`) is refused; on
/// sliding_log, or with a key that merges nothing, it loads.
#[test]
fn reset_status_with_a_merging_key_on_gcra_or_the_counter() {
    assert_eq!(
        load_err("reset_status_merging_gcra.toml"),
        "reset_status_merging_gcra.toml:17:18: routes[0].limits[0].reset_status: `json:username` counts several values as one key (`normalize = \"lower\"`), and gcra keeps no entry per attempt, so a reset could not tell which value each attempt sent: one account's success would forgive the others' failures; use algorithm = \"sliding_log\", or a key that keeps values apart"
    );
    let text = std::fs::read_to_string(support::config::fixture("reset_status_merging_gcra.toml"))
        .unwrap();
    let counter = text
        .replace("\"gcra\"", "\"sliding_window_counter\"")
        .replace("normalize = \"lower\"", "normalize = \"email\"");
    let err = support::config::load_text("counter.toml", &counter)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sliding_window_counter keeps no entry per attempt"),
        "{err}"
    );
    for loads in [
        text.replace("algorithm = \"gcra\"\n", ""),
        text.replace(", normalize = \"lower\"", ""),
    ] {
        support::config::load_text("loads.toml", &loads).unwrap_or_else(|e| panic!("{e}"));
    }
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

#[test]
fn route_path_with_parameters() {
    assert_eq!(
        load_err("route_path_parameters.toml"),
        "route_path_parameters.toml:7:8: routes[0].path: `/api/otp;v=2/*` would never match: routes match a request's path without its `;` parameters, so write `/api/otp/*`"
    );
}

#[test]
fn route_path_not_normal() {
    assert_eq!(
        load_err("route_path_not_normal.toml"),
        "route_path_not_normal.toml:7:8: routes[0].path: `/api/v1/../otp/*` would never match: requests are matched by their normalised path, so write `/api/otp/*`"
    );
}
