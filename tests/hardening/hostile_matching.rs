//! Spelling cannot dodge a limit (README, "Configuration" and "The traffic path"): paths match ignoring ASCII case
//! (unless `path_case = "sensitive"`), methods match ignoring case, a `GET` route also takes
//! and counts `HEAD`; an exact route takes its path with and without a trailing slash, however
//! the route writes it; the `path` and `method` key parts read one spelling; and `check` reports
//! two routes that differ only by case as shadowing. Over raw sockets, since a client library
//! would fix the spellings.

use crate::support;

use support::gateway::{self, config, with_server};
use support::{raw, upstream};

const MEMORY: &str = "backend = \"memory\"";

const OTP: &str = r#"
[[routes]]
name = "otp"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
key = ["ip"]
  [[routes.limits]]
  name = "per-hour"
  limit = 2
  window = "1h"

[[routes]]
name = "verify"
path = "/api/verify"
methods = ["GET"]
upstream = "up"
key = ["ip", "method"]
  [[routes.limits]]
  name = "per-hour"
  limit = 2
  window = "1h"

[[routes]]
name = "catch-all"
path = "/*"
upstream = "up"
"#;

/// Every spelling of the OTP route spends its quota: case of the path, case of the method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_and_method_spellings_share_one_quota() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), OTP)).await;
    let addr = gw.running().proxy_addr;
    let spellings = [
        ("POST", "/api/otp/send"),
        ("post", "/API/OTP/send"),
        ("Post", "/Api/Otp/Send"),
        ("pOsT", "/api/OTP/send"),
    ];
    let mut statuses = Vec::new();
    for (method, path) in spellings {
        statuses.push(raw::request(addr, method, path, &[]).await.status);
    }
    assert_eq!(statuses, [200, 200, 429, 429], "{spellings:?}");
    // what went upstream kept the client's spelling (normalised only as the README's "The traffic path" says)
    let seen = up.seen();
    assert_eq!(seen, ["/api/otp/send", "/API/OTP/send"]);
    gw.stop().await;
}

/// `HEAD` on a `GET` route is matched and counted, and its `method` key part reads `GET`: a
/// verify route cannot be probed for free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_on_a_get_route_is_counted_as_get() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), OTP)).await;
    let addr = gw.running().proxy_addr;
    assert_eq!(
        raw::request(addr, "HEAD", "/api/verify", &[]).await.status,
        200
    );
    assert_eq!(
        raw::request(addr, "head", "/api/verify", &[]).await.status,
        200
    );
    let third = raw::request(addr, "GET", "/api/verify", &[]).await;
    assert_eq!(third.status, 429, "HEAD and GET share one quota");
    gw.stop().await;
}

/// With `path_case = "sensitive"`, a path of another case is another path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sensitive_route_matches_its_own_case_only() {
    let up = upstream::start().await;
    let toml = with_server(&config(MEMORY, &up.url(), OTP), "path_case = \"sensitive\"");
    let gw = gateway::start(&toml).await;
    let addr = gw.running().proxy_addr;
    for _ in 0..3 {
        // the catch-all takes it: no limit
        assert_eq!(
            raw::request(addr, "POST", "/API/OTP/send", &[])
                .await
                .status,
            200
        );
    }
    assert_eq!(
        raw::request(addr, "POST", "/api/otp/send", &[])
            .await
            .status,
        200
    );
    gw.stop().await;
}

/// The `path` key part reads the path lower-cased while matching ignores case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_key_part_reads_one_case() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "per-path"
path = "/files/*"
upstream = "up"
key = ["path"]
  [[routes.limits]]
  name = "per-hour"
  limit = 1
  window = "1h"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let addr = gw.running().proxy_addr;
    assert_eq!(
        raw::request(addr, "GET", "/files/Report.pdf", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        raw::request(addr, "GET", "/FILES/report.PDF", &[])
            .await
            .status,
        429
    );
    gw.stop().await;
}

/// An exact route written with a trailing slash (`/api/login/`) also takes the path without
/// it, as an exact route without one takes it with one: dropping the slash does not reach the
/// catch-all behind it and its looser (here: no) limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_slash_in_the_route_does_not_let_the_bare_path_dodge_it() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "login"
path = "/api/login/"
methods = ["POST"]
upstream = "up"
  [[routes.limits]]
  name = "per-hour"
  limit = 1
  window = "1h"

[[routes]]
name = "catch-all"
path = "/*"
upstream = "up"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let addr = gw.running().proxy_addr;
    let mut statuses = Vec::new();
    for path in ["/api/login/", "/api/login", "/API/LOGIN"] {
        statuses.push(raw::request(addr, "POST", path, &[]).await.status);
    }
    assert_eq!(statuses, [200, 429, 429], "one route, one quota");
    assert_eq!(
        up.seen(),
        ["/api/login/"],
        "only the allowed one went upstream"
    );
    gw.stop().await;
}

/// `check` names the route that differs from an earlier one only by case.
#[test]
fn check_reports_routes_that_differ_only_by_case_as_shadowing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let text = r#"
[upstreams.up]
url = "http://127.0.0.1:9"

[[routes]]
name = "lower"
path = "/api/otp/*"
upstream = "up"

[[routes]]
name = "upper"
path = "/API/OTP/send"
upstream = "up"
"#;
    let stderr = check_warnings(&path, text);
    assert!(
        stderr.contains("routes[1] `upper` can never match")
            && stderr.contains("routes[0] `lower`")
            && stderr.contains("ignoring case"),
        "{stderr}"
    );
}

/// `check` names a route whose methods earlier routes take between them: `GET` by one, `POST`
/// by another, so a later `GET, POST` route on the same path never sees a request.
#[test]
fn check_reports_a_route_whose_methods_earlier_routes_take_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let text = r#"
[upstreams.up]
url = "http://127.0.0.1:9"

[[routes]]
name = "reads"
path = "/x"
methods = ["GET"]
upstream = "up"

[[routes]]
name = "writes"
path = "/*"
methods = ["POST"]
upstream = "up"

[[routes]]
name = "both"
path = "/x"
methods = ["GET", "POST"]
upstream = "up"

[[routes]]
name = "deletes"
path = "/x"
methods = ["GET", "DELETE"]
upstream = "up"
"#;
    let stderr = check_warnings(&path, text);
    assert!(
        stderr.contains("routes[2] `both` can never match")
            && stderr.contains("GET by routes[0] `reads`, POST by routes[1] `writes`"),
        "{stderr}"
    );
    assert!(!stderr.contains("`deletes` can never match"), "{stderr}");
}

/// What `slidegate check` says on stderr of the config `text` written at `path` (it passes).
fn check_warnings(path: &std::path::Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}
