//! Config validation of unknown keys and of the TOML itself (syntax, types, missing fields): each
//! refused fixture under `tests/fixtures/config/` pinned to the exact `FILE:LINE:COLUMN: message`
//! an operator sees (in the style of envoyproxy/ratelimit's `test/config` fixtures), the location
//! being the offending value's and the message naming its key path.

use crate::support;

use support::config::load_err;

// ---- unknown keys -------------------------------------------------------------------------

#[test]
fn unknown_key_top_level() {
    assert_eq!(
        load_err("unknown_key_top_level.toml"),
        "unknown_key_top_level.toml:2:2: unknown field `sever`, expected one of `server`, `admin`, `store`, `upstreams`, `routes`, `jwt`, `keys`, `segments`, `plans`, `rls`, `forward_auth`, `ext_authz`"
    );
}

#[test]
fn unknown_key_server() {
    assert_eq!(
        load_err("unknown_key_server.toml"),
        "unknown_key_server.toml:4:1: server: unknown field `port`, expected one of `listen`, `trusted_proxies`, `client_ip_header`, `shutdown_grace`, `ipv6_prefix`, `header_read_timeout`, `idle_timeout`, `max_connections`, `max_header_bytes`, `max_headers`, `path_case`, `watch_files`"
    );
}

#[test]
fn unknown_key_route() {
    assert_eq!(
        load_err("unknown_key_route.toml"),
        "unknown_key_route.toml:8:1: routes[0]: unknown field `method`, expected one of `name`, `path`, `methods`, `upstream`, `key`, `on_missing_key`, `max_key_body_bytes`, `on_exceed`, `max_delay`, `max_waiting`, `block_for`, `block_growth`, `block_max`, `block_forget`, `on_error`, `headers`, `exempt`, `access_log`, `access_log_sample`, `max_cost_body_bytes`, `limits`"
    );
}

#[test]
fn unknown_key_limit() {
    assert_eq!(
        load_err("unknown_key_limit.toml"),
        "unknown_key_limit.toml:14:3: routes[0].limits[0]: unknown field `costs`, expected one of `name`, `limit`, `window`, `algorithm`, `lease`, `cost_from`, `cost`, `burst`, `key`, `on_missing_key`, `count_status`, `reset_status`, `segments`, `plans`"
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

/// A stray byte of another encoding (Latin-1's `é` here) is pointed at like any other mistake.
#[test]
fn file_not_utf8() {
    assert_eq!(
        load_err("not_utf8.toml"),
        "not_utf8.toml:3:18: the file is not valid UTF-8 here (configuration files are UTF-8 text)"
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

#[test]
fn duplicate_key() {
    assert_eq!(
        load_err("duplicate_key.toml"),
        "duplicate_key.toml:7:1: duplicate key `name`: a setting appears once in its table"
    );
}

#[test]
fn section_not_a_table() {
    assert_eq!(
        load_err("section_not_a_table.toml"),
        "section_not_a_table.toml:2:10: server: invalid type: integer `5`, expected a table"
    );
}

#[test]
fn limit_beyond_i64() {
    assert_eq!(
        load_err("limit_beyond_i64.toml"),
        "limit_beyond_i64.toml:10:11: routes[0].limits[0].limit: integer `99999999999999999999` is too large (the largest is 9223372036854775807)"
    );
}
