//! `slidegate check` warns, naming the setting at FILE:LINE:COLUMN, about settings that are legal
//! but almost always a mistake: a body key on a route whose methods carry no body, a body-keyed
//! route listing some methods while a later route forwards the others of its path, a short hash
//! or HS256 secret, `on_missing_key = "ip"` on a key read from the body; and it says an empty
//! secret is empty, not unset. Each case has a twin that stays silent.

use crate::support;

use support::cli_commands::{check_text, line_column, stderr};
use support::gateway::config;

fn gateway(routes: &str) -> String {
    config("backend = \"memory\"", "http://127.0.0.1:9", routes)
}

/// The warnings `check` prints for `toml` (with `envs`), after checking it still succeeds.
fn warnings(toml: &str, envs: &[(&str, &str)]) -> (String, String) {
    let (_dir, file, out) = check_text("config.toml", toml, &[], envs);
    assert!(out.status.success(), "{}", stderr(&out));
    (file, stderr(&out))
}

/// A `json:` key on a GET-only route and a `form:` key of a limit on a DELETE route: no request
/// of theirs carries a body, so every one lacks the key. The same keys on POST routes pass.
#[test]
fn a_body_key_on_a_route_without_a_body_is_warned_about() {
    let routes = r#"
[[routes]]
name = "lookup"
path = "/lookup"
methods = ["GET"]
upstream = "up"
key = ["json:phone"]
  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "1m"

[[routes]]
name = "remove"
path = "/remove"
methods = ["DELETE", "HEAD"]
upstream = "up"
  [[routes.limits]]
  name = "per-user"
  key = ["header:x-app", "form:user"]
  limit = 3
  window = "1m"
"#;
    let toml = gateway(routes);
    let (file, err) = warnings(&toml, &[]);
    let first = line_column(&toml, "\"json:phone\"");
    let second = line_column(&toml, "\"form:user\"");
    assert_eq!(
        err,
        format!(
            "{file}:{first}: warning: routes[0].key[0]: `json:phone` reads the request body, but routes[0].methods takes only GET, which carry none: every request of the route lacks this key part, and the requests that carry it (POST, PUT, PATCH) are not this route's\n\
             {file}:{second}: warning: routes[1].limits[0].key[1]: `form:user` reads the request body, but routes[1].methods takes only DELETE, HEAD, which carry none: every request of the route lacks this key part, and the requests that carry it (POST, PUT, PATCH) are not this route's\n"
        )
    );
    let posting = routes
        .replace("[\"GET\"]", "[\"GET\", \"POST\"]")
        .replace("[\"DELETE\", \"HEAD\"]", "[\"PUT\"]");
    assert_eq!(warnings(&gateway(&posting), &[]).1, "");
}

/// A body-keyed route that lists only POST, before a catch-all route that forwards every method
/// of its path: `GET /api/otp/send` with the number went upstream uncounted. The same routes
/// with the catch-all taking only GET elsewhere, or the OTP route taking every method, pass.
#[test]
fn a_body_keyed_route_leaving_methods_to_a_later_route_is_warned_about() {
    let routes = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
upstream = "up"
key = ["json:phone"]
  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "10m"

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
"#;
    let toml = gateway(routes);
    let (file, err) = warnings(&toml, &[]);
    let at = line_column(&toml, "\"POST\"");
    assert_eq!(
        err,
        format!("{file}:{at}: warning: routes[0].methods: `otp-send` counts only POST requests, and routes[1] `api` (/api/*) forwards the other methods of its path uncounted by its limits (a `GET /api/otp/send` with the value in its body or query): many frameworks act on any method; list every method the upstream serves there, or add a route before routes[1] that refuses them\n")
    );
    let elsewhere = routes.replace("path = \"/api/*\"", "path = \"/other/*\"");
    assert_eq!(warnings(&gateway(&elsewhere), &[]).1, "");
    let every_method = routes.replace("methods = [\"POST\"]\n", "");
    assert_eq!(warnings(&gateway(&every_method), &[]).1, "");
    let post_only = routes.replace(
        "path = \"/api/*\"\n",
        "path = \"/api/*\"\nmethods = [\"POST\"]\n",
    );
    assert_eq!(warnings(&gateway(&post_only), &[]).1, "");
}

/// `on_missing_key = "ip"` on a route or a limit whose key is read from the body: a body the
/// gateway cannot read is counted by the IP a bot rotates. On a key from a header it is fine.
#[test]
fn on_missing_key_ip_on_a_body_key_is_warned_about() {
    let routes = r#"
[[routes]]
name = "login"
path = "/login"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:username", normalize = "lower" }]
on_missing_key = "ip"
  [[routes.limits]]
  name = "failed"
  limit = 5
  window = "15m"
  [[routes.limits]]
  name = "failed-hour"
  limit = 20
  window = "1h"

[[routes]]
name = "otp"
path = "/otp"
methods = ["POST"]
upstream = "up"
  [[routes.limits]]
  name = "per-phone"
  key = ["form:phone"]
  on_missing_key = "ip"
  limit = 3
  window = "10m"
"#;
    let toml = gateway(routes);
    let (file, err) = warnings(&toml, &[]);
    let route = line_column(&toml, "\"ip\"\n  [[routes.limits]]\n  name = \"failed\"");
    let limit = line_column(&toml, "\"ip\"\n  limit = 3");
    let why = "is counted by the client IP, which a bot rotates, while an upstream that ignores Content-Type may still act on the value in it; use \"reject\" (400 missing_key)";
    assert_eq!(
        err,
        format!(
            "{file}:{route}: warning: routes[0].on_missing_key: \"ip\" on a key read from the body (`json:username`): a body the gateway cannot read for it (another Content-Type, none, not JSON, the member left out) {why}\n\
             {file}:{limit}: warning: routes[1].limits[0].on_missing_key: \"ip\" on a key read from the body (`form:phone`): a body the gateway cannot read for it (another Content-Type, none, not JSON, the member left out) {why}\n"
        ),
        "one warning per setting, the route's once"
    );
    let from_headers = routes
        .replace(
            "{ part = \"json:username\", normalize = \"lower\" }",
            "\"header:x-user\"",
        )
        .replace("[\"form:phone\"]", "[\"header:x-phone\"]");
    assert_eq!(warnings(&gateway(&from_headers), &[]).1, "");
    let rejecting = routes.replace("on_missing_key = \"ip\"", "on_missing_key = \"reject\"");
    assert_eq!(warnings(&gateway(&rejecting), &[]).1, "");
}

const HASHED: &str = r#"
[keys]
hash_secret_env = "SG_TEST_KEY_SECRET"

[jwt]
hs256_secret_env = "SG_TEST_JWT_SECRET"

[[routes]]
name = "otp"
path = "/otp"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }, "jwt:sub"]
  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "10m"
"#;

/// A hash secret under 16 bytes and an HS256 secret under 32 are warned about, naming the
/// variable; secrets of those lengths are not.
#[test]
fn short_secrets_are_warned_about() {
    let toml = gateway(HASHED);
    let (file, err) = warnings(
        &toml,
        &[
            ("SG_TEST_KEY_SECRET", "0123456789abcde"),
            ("SG_TEST_JWT_SECRET", "0123456789abcdef0123456789abcde"),
        ],
    );
    let keys = line_column(&toml, "\"SG_TEST_KEY_SECRET\"");
    let jwt = line_column(&toml, "\"SG_TEST_JWT_SECRET\"");
    assert_eq!(
        err,
        format!(
            "{file}:{jwt}: warning: jwt.hs256_secret_env: the secret in `SG_TEST_JWT_SECRET` is 31 bytes; HS256 wants at least 32 (RFC 7518 3.2): a shorter one can be found by trying, and then tokens forged with any claim\n\
             {file}:{keys}: warning: keys.hash_secret_env: the secret in `SG_TEST_KEY_SECRET` is 15 bytes; use at least 16 random bytes (`openssl rand -hex 32`): hashed key parts are HMACs under it, and whoever finds a short secret by trying can tell which phone number or e-mail each hashed key is\n"
        )
    );
    let (_, err) = warnings(
        &toml,
        &[
            ("SG_TEST_KEY_SECRET", "0123456789abcdef"),
            ("SG_TEST_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
        ],
    );
    assert_eq!(err, "");
}

/// A secret variable set to nothing is refused as "empty", one not set at all as "not set".
#[test]
fn an_empty_secret_is_called_empty() {
    let toml = gateway(HASHED);
    let long = "0123456789abcdef0123456789abcdef";
    for (variable, value, said) in [
        ("SG_TEST_KEY_SECRET", Some(""), "is empty"),
        ("SG_TEST_KEY_SECRET", None, "is not set"),
        ("SG_TEST_JWT_SECRET", Some(""), "is empty"),
        ("SG_TEST_JWT_SECRET", None, "is not set"),
    ] {
        let mut envs = vec![("SG_TEST_KEY_SECRET", long), ("SG_TEST_JWT_SECRET", long)];
        envs.retain(|(name, _)| *name != variable);
        if let Some(value) = value {
            envs.push((variable, value));
        }
        let (_dir, _, out) = check_text("config.toml", &toml, &[], &envs);
        assert_eq!(out.status.code(), Some(1), "{variable}={value:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("the environment variable `{variable}` {said}")),
            "{variable}={value:?}: {err}"
        );
    }
}

/// `check --strict` is for CI: a warning makes it exit 1 (after printing the warning and the
/// summary), where plain `check` exits 0; a file without warnings passes either way.
#[test]
fn check_strict_fails_on_a_warning() {
    let warned = gateway(
        r#"
[[routes]]
name = "lookup"
path = "/lookup"
methods = ["GET"]
upstream = "up"
key = ["json:phone"]
  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "1m"
"#,
    );
    let (_dir, _file, plain) = check_text("config.toml", &warned, &[], &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let (_dir, _file, strict) = check_text("config.toml", &warned, &["--strict"], &[]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    let err = stderr(&strict);
    assert!(err.contains("warning: routes[0].key[0]"), "{err}");
    assert!(
        err.contains("check --strict: 1 warning(s)"),
        "it says why it failed: {err}"
    );
    assert!(
        support::cli_commands::stdout(&strict).contains("lookup"),
        "the summary is still printed"
    );

    let clean = warned.replace("[\"GET\"]", "[\"POST\"]");
    let (_dir, _file, out) = check_text("config.toml", &clean, &["--strict"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// A route Envoy's ext_authz asks about (no `upstream`) that counts outcomes: Check never sees
/// the answer, so every admitted attempt stays counted. The same limit on a route with an
/// upstream (reached through the proxy listener, which sees the answer) stays silent.
#[test]
fn count_status_on_a_route_ext_authz_asks_about_is_warned_about() {
    let route = |upstream: &str| {
        format!(
            r#"
[ext_authz]
listen = "127.0.0.1:0"

[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
{upstream}
key = ["json:username"]
  [[routes.limits]]
  name = "failed-logins"
  limit = 5
  window = "15m"
  count_status = [401]
"#
        )
    };
    let toml = gateway(&route(""));
    let (file, err) = warnings(&toml, &[]);
    let at = line_column(&toml, "\"login\"");
    assert_eq!(
        err,
        format!("{file}:{at}: warning: routes[0] `login` counts outcomes (count_status/reset_status): ext_authz never sees the answer, so through it every admitted attempt stays counted and reset_status never applies; the proxy listener or the tower layer sees it\n")
    );
    let (_, quiet) = warnings(&gateway(&route("upstream = \"up\"")), &[]);
    assert_eq!(quiet, "");
}
