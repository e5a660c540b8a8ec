//! `slidegate key` as an operator runs it against a real gateway (README, "Running"): the key it
//! prints for raw values is the one a real request with those values is counted under, and a value
//! the part cannot take or a limit the route does not have is refused.

use crate::support;

use std::path::Path;

use http::Method;
use slidegate::app::Running;
use slidegate::config::Config;
use support::cli_commands::{path_arg, slidegate, stderr, stdout, usage};
use support::gateway::{self, TOKEN};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{observe, unique_prefix, upstream};

const SECRET: &str = "cli-test-secret";

/// A gateway started from `toml` written to `dir/config.toml`, with the hash secret and the
/// admin token in its environment lookup (not the process's).
async fn start_with_secret(dir: &Path, toml: &str) -> Running {
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load_with_env(&path, |name: &str| match name {
        "SLIDEGATE_KEY_SECRET" => Some(SECRET.to_string()),
        "SLIDEGATE_ADMIN_TOKEN" => Some(TOKEN.to_string()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("test config invalid: {e}"));
    slidegate::app::start(config).await.expect("gateway starts")
}

/// `query` with `value` percent-encoded.
fn enc(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

const KEYED: &str = r#"
[keys]
hash_secret_env = "SLIDEGATE_KEY_SECRET"

[[routes]]
name = "otp"
path = "/otp"
methods = ["POST"]
upstream = "up"
key = ["header:X-Tenant", { part = "json:email", normalize = "email" }]
  [[routes.limits]]
  name = "per-user"
  limit = 10
  window = "1h"
  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }]
  limit = 3
  window = "10m"
"#;

/// The key `slidegate key` prints for raw values is the one a real request with those values
/// is counted under: the hashed phone names the set in Redis and `/admin/usage?limit=` finds
/// the request's charge under it; a key of two parts, normalised, likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prints_the_key_a_real_request_is_counted_under() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let prefix = unique_prefix("cli-key");
    let dir = tempfile::tempdir().unwrap();
    let toml = gateway::config(
        &gateway::redis_store(&redis.url(), &prefix),
        &up.url(),
        KEYED,
    );
    let gw = start_with_secret(dir.path(), &toml).await;
    let config = dir.path().join("config.toml");
    let env = [("SLIDEGATE_KEY_SECRET", SECRET)];

    let phone = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-phone",
            "0812-3456-7890",
        ],
        &env,
    );
    assert!(phone.status.success(), "{}", stderr(&phone));
    let phone_key = stdout(&phone).trim().to_string();
    assert_eq!(phone_key.len(), 32, "16 bytes in hex: {phone_key}");
    assert!(
        !phone_key.contains("81234567890"),
        "the raw number: {phone_key}"
    );
    let user = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "ACME",
            " Ann+promo@Example.COM ",
        ],
        &env,
    );
    assert!(user.status.success(), "{}", stderr(&user));
    let user_key = stdout(&user).trim().to_string();
    assert_eq!(user_key, "ACME|ann@example.com");

    // nothing is counted yet under either key
    let admin = gw.admin_addr.to_string();
    let q = format!("route=otp&limit=per-phone&key={}", enc(&phone_key));
    assert_eq!(usage(&admin, &q).await["limits"][0]["used"], 0);

    // one real request, the number spelled another way
    let body = r#"{"email":"ann@example.com","phone":"+62 812 3456 7890"}"#;
    let r = HttpClient::default()
        .send(
            Method::POST,
            &format!("http://{}/otp", gw.proxy_addr),
            &[("content-type", "application/json"), ("x-tenant", "ACME")],
            body,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let by_phone = usage(&admin, &q).await;
    assert_eq!(by_phone["limits"][0]["name"], "per-phone", "{by_phone}");
    assert_eq!(by_phone["limits"][0]["used"], 1, "{by_phone}");
    let by_user = usage(&admin, &format!("route=otp&key={}", enc(&user_key))).await;
    assert_eq!(by_user["limits"][0]["name"], "per-user", "{by_user}");
    assert_eq!(by_user["limits"][0]["used"], 1, "{by_user}");
    let keys = observe::keys(&redis, &prefix);
    let set = keys
        .iter()
        .find(|k| k.ends_with(&format!("|{phone_key}}}#log")))
        .unwrap_or_else(|| panic!("no set named by the printed key in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", set]).int(), 1);

    // a value the part cannot take, and a limit the route does not have
    let bad = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-phone",
            "call me",
        ],
        &env,
    );
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("`call me` is not a valid phone number"),
        "{}",
        stderr(&bad)
    );
    let unknown = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-day",
            "x",
        ],
        &env,
    );
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("no limit `per-day`"),
        "{}",
        stderr(&unknown)
    );
    gw.shutdown().await;
}

const BY_METHOD_AND_PATH: &str = r#"
[[routes]]
name = "api"
path = "/api/*"
methods = ["GET"]
upstream = "up"
key = ["method", "path"]
  [[routes.limits]]
  name = "per-path"
  limit = 10
  window = "1h"
"#;

/// `method` and `path` parts given raw are read as the traffic path reads a request's: `HEAD`
/// counts as `GET`, the path is normalised and its case folded. A real `HEAD` of another
/// spelling of the path is counted under the key printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_and_path_values_are_read_as_a_request_carries_them() {
    let up = upstream::start().await;
    let toml = gateway::config("backend = \"memory\"", &up.url(), BY_METHOD_AND_PATH);
    let gw = gateway::start(&toml).await;
    let printed = slidegate(
        &[
            "key",
            "--config",
            path_arg(&gw.config_path),
            "--route",
            "api",
            "head",
            "/API/./Docs/../Items//7",
        ],
        &[],
    );
    assert!(printed.status.success(), "{}", stderr(&printed));
    let key = stdout(&printed).trim().to_string();
    assert_eq!(key, "GET|/api/items/7");

    let r = HttpClient::default()
        .send(Method::HEAD, &gw.url("/Api/items/./7"), &[], "")
        .await;
    assert_eq!(r.status, 200);
    let q = format!("route=api&key={}", enc(&key));
    let counted = usage(&gw.running().admin_addr.to_string(), &q).await;
    assert_eq!(counted["limits"][0]["used"], 1, "{counted}");

    let above_root = slidegate(
        &[
            "key",
            "--config",
            path_arg(&gw.config_path),
            "--route",
            "api",
            "GET",
            "/../etc",
        ],
        &[],
    );
    assert!(!above_root.status.success());
    assert!(
        stderr(&above_root).contains("above the root"),
        "{}",
        stderr(&above_root)
    );
    gw.stop().await;
}

const BY_HEADER: &str = r#"
[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-user"
  limit = 10
  window = "1h"
"#;

/// A header value that is not UTF-8 (`caf` and the Latin-1 byte 0xE9) is counted under
/// `caf%E9`; `slidegate key` given those bytes prints that key, and `/admin/usage` given them
/// as `value=caf%E9` finds the request's charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_utf8_is_keyed_as_its_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let up = upstream::start().await;
    let toml = gateway::config("backend = \"memory\"", &up.url(), BY_HEADER);
    let gw = gateway::start(&toml).await;
    let r = support::raw::send(
        gw.running().proxy_addr,
        b"GET /api/x HTTP/1.1\r\nHost: a\r\nX-User: caf\xe9\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args([
            "key",
            "--config",
            path_arg(&gw.config_path),
            "--route",
            "api",
        ])
        .arg(std::ffi::OsStr::from_bytes(b"caf\xe9"))
        .env_remove("SLIDEGATE_CONFIG")
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", stderr(&printed));
    assert_eq!(stdout(&printed).trim(), "caf%E9");

    let admin = gw.running().admin_addr.to_string();
    let counted = usage(&admin, "route=api&value=caf%E9").await;
    assert_eq!(counted["key"], "caf%E9", "{counted}");
    assert_eq!(counted["limits"][0]["used"], 1, "{counted}");
    gw.stop().await;
}

/// A client may send, as its own value, the form a long key is logged in (`#` and 32 hex
/// digits): `slidegate key` and `/admin/usage?value=` give that client's key as stored, so the
/// key an operator copies reaches that client's count, never the long key's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_spelled_as_a_hashed_key_names_its_own_count() {
    let up = upstream::start().await;
    let toml = gateway::config("backend = \"memory\"", &up.url(), BY_HEADER);
    let gw = gateway::start(&toml).await;
    let proxy = format!("http://{}/api/x", gw.running().proxy_addr);
    let long = "x".repeat(65);
    let mimic = slidegate::store::layout::hashed(&long);
    let http = HttpClient::default();
    for (value, times) in [(long.as_str(), 1), (mimic.as_str(), 2)] {
        for _ in 0..times {
            let r = http.get(&proxy, &[("x-user", value)]).await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    }
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(["key", "--config", path_arg(&gw.config_path)])
        .args(["--route", "api", &mimic])
        .env_remove("SLIDEGATE_CONFIG")
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", stderr(&printed));
    let printed = stdout(&printed).trim().to_string();
    assert_ne!(printed, mimic, "the long key's form");

    let admin = gw.running().admin_addr.to_string();
    let by_printed = usage(&admin, &format!("route=api&key={}", enc(&printed))).await;
    assert_eq!(by_printed["limits"][0]["used"], 2, "{by_printed}");
    let by_value = usage(&admin, &format!("route=api&value={}", enc(&mimic))).await;
    assert_eq!(by_value["key"], printed.as_str(), "{by_value}");
    assert_eq!(by_value["limits"][0]["used"], 2, "{by_value}");
    // The long key's own form still reaches the long key.
    let by_long = usage(&admin, &format!("route=api&key={}", enc(&mimic))).await;
    assert_eq!(by_long["limits"][0]["used"], 1, "{by_long}");
    gw.stop().await;
}
