//! `/admin/usage` of an `[rls]` domain with `value=`: one value per entry of the descriptor, in
//! order, makes the key its rate limit counts (entries joined, a value over 256 bytes as its
//! SHA-256), so an operator reads and lifts a refused descriptor by the values Envoy sent.

use crate::support;

use support::admin::auth;
use support::http::HttpClient;
use support::redis::RedisServer;
use support::rls::*;

const LIMITS: &str = r#"
domain: edge
descriptors:
  - key: path
    value: /api/login
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 5, name: login-user }
  - key: header
    rate_limit: { unit: minute, requests_per_unit: 5, name: per-header }
"#;

/// `/admin/usage` of `limit` for `values`, asked with `method` (`GET` or `DELETE`).
async fn ask_usage(
    gw: &support::gateway::Gateway,
    method: http::Method,
    limit: &str,
    values: &[&str],
) -> support::http::Reply {
    let query: String = values
        .iter()
        .map(|v| format!("&value={}", urlencoding(v)))
        .collect();
    let url = gw.admin(&format!("/admin/usage?route=edge&limit={limit}{query}"));
    let (k, v) = auth();
    HttpClient::default()
        .send(method, &url, &[(k, &v)], "")
        .await
}

/// `used` of `limit` for `values` (GET), or whether DELETE reset something.
async fn usage(
    gw: &support::gateway::Gateway,
    method: http::Method,
    limit: &str,
    values: &[&str],
) -> serde_json::Value {
    let r = ask_usage(gw, method, limit, values).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn urlencoding(v: &str) -> String {
    form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domains_key_is_named_by_its_descriptors_values() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-values", LIMITS, "").await;
    let mut c = client(&gw).await;
    let long = "v".repeat(300);
    let login = descriptor(&[("path", "/api/login"), ("user", "bob|1")]);
    let header = descriptor(&[("header", &long)]);
    for _ in 0..2 {
        let r = ask(&mut c, request("edge", vec![login.clone(), header.clone()])).await;
        assert_eq!(overall(&r), "OK");
    }
    let read = usage(
        &gw,
        http::Method::GET,
        "login-user",
        &["/api/login", "bob|1"],
    )
    .await;
    assert_eq!(read["limits"][0]["used"], 2, "{read}");
    let read = usage(&gw, http::Method::GET, "per-header", &[&long]).await;
    assert_eq!(read["limits"][0]["used"], 2, "{read}");
    let lifted = usage(&gw, http::Method::DELETE, "per-header", &[&long]).await;
    assert_eq!(lifted["reset"], true, "{lifted}");
    let r = ask(&mut c, request("edge", vec![header])).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 4,
        "the reset reached the key"
    );
    // One value per entry of the descriptors the rate limit counts, or a 400 that says so.
    for (limit, values) in [
        ("login-user", &["bob|1"][..]),
        ("per-header", &["a", "b"][..]),
    ] {
        let r = ask_usage(&gw, http::Method::GET, limit, values).await;
        assert_eq!(r.status, 400, "{limit}: {}", r.body);
        assert_eq!(r.json()["error"], "invalid_value", "{}", r.body);
    }
}

/// Without `limit=`, a domain's key is asked of every rate limit of the domain, as a route's is
/// of every limit: `GET` shows the rate limits that hold it, `DELETE` resets it in each and says
/// which held it; values make a key only for the rate limits counting that many entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_limit_every_rate_limit_of_the_domain_is_asked() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-every-limit", LIMITS, "").await;
    let mut c = client(&gw).await;
    let header = descriptor(&[("header", "k1")]);
    let login = descriptor(&[("path", "/api/login"), ("user", "u1")]);
    for _ in 0..2 {
        ask(&mut c, request("edge", vec![header.clone()])).await;
    }
    ask(&mut c, request("edge", vec![login])).await;
    let (k, v) = auth();
    let admin = |method: http::Method, query: &str| {
        let url = gw.admin(&format!("/admin/usage?route=edge&{query}"));
        let (k, v) = (k, v.clone());
        async move {
            let r = HttpClient::default()
                .send(method, &url, &[(k, &v)], "")
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        }
    };
    let read = admin(http::Method::GET, "key=k1").await;
    assert_eq!(read["route"], "edge", "{read}");
    let limits = read["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 1, "{read}");
    assert_eq!(limits[0]["name"], "per-header");
    assert_eq!(limits[0]["used"], 2);
    let read = admin(http::Method::GET, "value=%2Fapi%2Flogin&value=u1").await;
    assert_eq!(read["limits"][0]["name"], "login-user", "{read}");
    assert_eq!(read["limits"][0]["used"], 1, "{read}");

    let lifted = admin(http::Method::DELETE, "key=k1").await;
    assert_eq!(lifted["reset"], true, "{lifted}");
    assert_eq!(lifted["limits"], serde_json::json!(["per-header"]));
    let r = ask(&mut c, request("edge", vec![header])).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 4,
        "the reset reached the key"
    );
    let again = admin(http::Method::DELETE, "key=nobody").await;
    assert_eq!(again["reset"], false, "{again}");
    assert_eq!(again["limits"], serde_json::json!([]));
}
