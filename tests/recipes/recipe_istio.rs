//! The Istio recipe (`examples/istio/`). No Istio can run here: this parses the mesh config
//! and the AuthorizationPolicy and checks them against the slidegate config beside them (the
//! provider's port is slidegate's `[ext_authz]`, the body is sent whole and as bytes within the
//! routes' `max_key_body_bytes`, failing closed; the CUSTOM policy names that provider and
//! sends every request), then sends the `Check` the sidecar builds for three
//! spellings of one number: 200, 200, 200, then 429, and for a path in other case.

use crate::support;

use saphyr::{LoadableYamlNode, Yaml};
use support::ext_authz::{self, Described};
use support::redis::RedisServer;

fn yaml(name: &str) -> Yaml<'static> {
    let text = support::proxies::example(&format!("istio/{name}"));
    let text: &'static str = Box::leak(text.into_boxed_str());
    Yaml::load_from_str(text).expect("YAML").remove(0)
}

fn text<'a>(y: &'a Yaml<'_>) -> &'a str {
    y.as_str().unwrap_or_else(|| panic!("a string, got {y:?}"))
}

#[test]
fn the_mesh_config_and_policy_match_the_slidegate_config_beside_them() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/istio/slidegate.toml");
    let config = slidegate::config::Config::load_with_env(&path, |n: &str| {
        (n == "SLIDEGATE_KEY_SECRET").then(|| "secret".to_string())
    })
    .expect("slidegate.toml validates");
    let listen = config.ext_authz.as_ref().expect("[ext_authz]").listen;
    let mesh = &yaml("mesh-config.yaml")["spec"]["meshConfig"];
    assert_eq!(
        text(&mesh["pathNormalization"]["normalization"]),
        "MERGE_SLASHES"
    );
    let provider = &mesh["extensionProviders"][0];
    let grpc = &provider["envoyExtAuthzGrpc"];
    assert_eq!(grpc["port"].as_integer(), Some(i64::from(listen.port())));
    assert_eq!(grpc["failOpen"].as_bool(), Some(false));
    let body = &grpc["includeRequestBodyInCheck"];
    assert_eq!(body["packAsBytes"].as_bool(), Some(true));
    // Every request of the workload is checked: a large upload anywhere must not meet the
    // sidecar's 413, so a larger body is sent cut short (a missing key on the body routes).
    assert_eq!(body["allowPartialMessage"].as_bool(), Some(true));
    let max = body["maxRequestBytes"].as_integer().unwrap() as usize;
    let policy = yaml("authorization-policy.yaml");
    assert_eq!(text(&policy["spec"]["action"]), "CUSTOM");
    assert_eq!(
        text(&policy["spec"]["provider"]["name"]),
        text(&provider["name"])
    );
    // One rule that matches every request: paths match with case and methods leave some
    // out, so every request is sent and slidegate matches as the app does.
    let rules = policy["spec"]["rules"].as_vec().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(
        rules[0].as_mapping().is_some_and(|m| m.is_empty()),
        "{:?}",
        rules[0]
    );
    for route in config.routes.iter().filter(|r| r.reads_body()) {
        assert!(max <= route.max_key_body_bytes, "{}", route.name);
        assert!(route.methods.is_none(), "{} takes every method", route.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecars_checks_three_spellings_then_429() {
    let redis = RedisServer::start();
    let gw = support::proxies::recipe_gateway("istio", &redis, None).await;
    let mut client = ext_authz::client(&gw).await;
    let spellings = [
        ("/api/otp/send", "0812-3456-7890"),
        ("/API/otp/send", "+62 812 3456 7890"),
        ("/api/otp/send?lang=id", "(0812) 3456 7890"),
        ("/api/otp/send", "6281234567890"),
    ];
    let mut answers = Vec::new();
    for (i, (path, phone)) in spellings.iter().enumerate() {
        let body = format!(r#"{{"phone":"{phone}"}}"#);
        let d = Described::post_json(path, &body, &format!("10.1.0.{}", i + 1));
        let a = ext_authz::check(&mut client, &d).await;
        answers.push(if a.allowed() { 200 } else { a.http_status });
    }
    assert_eq!(answers, [200, 200, 200, 429]);
    // Every other POST is allowed at once, uncounted.
    let other = Described::post_json("/api/cart", "{}", "10.1.0.9");
    let a = ext_authz::check(&mut client, &other).await;
    assert!(a.allowed() && a.headers.is_empty(), "{a:?}");
    gw.stop().await;
}
