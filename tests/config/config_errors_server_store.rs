//! Config validation of the server, upstreams, store and jwt sections: each refused fixture under
//! `tests/fixtures/config/` pinned to the exact `FILE:LINE:COLUMN: message` an operator sees (in
//! the style of envoyproxy/ratelimit's `test/config` fixtures), the location being the offending
//! value's and the message naming its key path.

use crate::support;

use support::config::load_err;

#[test]
fn bad_listen_address() {
    assert_eq!(
        load_err("bad_listen_address.toml"),
        "bad_listen_address.toml:3:10: server.listen: `localhost:8080` is not an IP:PORT address"
    );
}

#[test]
fn admin_listen_taken() {
    assert_eq!(
        load_err("admin_listen_taken.toml"),
        "admin_listen_taken.toml:6:10: admin.listen: 127.0.0.1:8080 is also server.listen (0.0.0.0:8080): the two listeners need different ports or addresses"
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

/// Credentials in an upstream URL are refused, and the message shows them as `***`.
#[test]
fn upstream_url_credentials() {
    assert_eq!(
        load_err("upstream_url_credentials.toml"),
        "upstream_url_credentials.toml:3:7: upstreams.app.url: `http://***@app.internal:9000` has credentials: they would go upstream in `Host`; send them in a header the upstream reads"
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
fn store_url_bad_port() {
    assert_eq!(
        load_err("store_url_bad_port.toml"),
        "store_url_bad_port.toml:4:7: store.url: `redis://127.0.0.1:99999` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)"
    );
}

#[test]
fn store_replica_acks_out_of_range() {
    assert_eq!(
        load_err("store_replica_acks_out_of_range.toml"),
        "store_replica_acks_out_of_range.toml:4:16: store.replica_acks: must be between 0 and 16, got 17"
    );
}

#[test]
fn store_scripts_unknown() {
    assert_eq!(
        load_err("store_scripts_unknown.toml"),
        "store_scripts_unknown.toml:4:11: store.scripts: unknown mode `lua`, expected \"auto\", \"functions\" or \"eval\""
    );
}

#[test]
fn store_url_sentinel_credentials() {
    assert_eq!(
        load_err("store_url_sentinel_credentials.toml"),
        "store_url_sentinel_credentials.toml:5:7: store.url: `redis-sentinel://***@127.0.0.1:26379/main?sentinelPassword=***` names credentials of the sentinels' own (sentinelUsername, sentinelPassword): the sentinels are asked with the store's own username and password; give the sentinels the same ones (`requirepass` and `sentinel auth-pass`) and drop these parameters"
    );
}

#[test]
fn store_url_bad_database() {
    assert_eq!(
        load_err("store_url_bad_database.toml"),
        "store_url_bad_database.toml:4:7: store.url: `redis://127.0.0.1:6379/abc` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)"
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

/// A URL given where a setting takes one of a few names, or a number, is shown without its
/// password (a space in the password included).
#[test]
fn urls_given_for_other_settings_are_masked() {
    for (file, masked) in [
        (
            "store_backend_a_url.toml",
            "redis://***@cache.internal:6379",
        ),
        (
            "store_replica_acks_a_url.toml",
            "redis://***@cache.internal:6379",
        ),
    ] {
        let message = load_err(file);
        assert!(message.contains(masked), "{message}");
        for secret in ["secretpw", "pass", "word"] {
            assert!(!message.contains(secret), "{message}");
        }
    }
}
