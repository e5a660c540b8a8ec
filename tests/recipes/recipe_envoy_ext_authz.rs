//! The Envoy ext_authz recipe (`examples/envoy-ext-authz/`). No Envoy binary can be installed
//! here: this parses the bootstrap and checks it against the slidegate config beside it (one
//! cluster for Check and the rate-limit service, its port, the body sent whole and as bytes,
//! within the routes' `max_key_body_bytes`, failing closed; Check only on the routes the TOML
//! keys by the body), then sends the `Check` Envoy builds for three spellings of one phone
//! number: 200, 200, 200 at the app, then the 429.

use crate::support;

use support::envoy_routes::EnvoyMatch;

use saphyr::{LoadableYamlNode, Yaml};
use support::ext_authz::{self, Described, PERMISSION_DENIED};
use support::redis::RedisServer;
use support::rls;

fn bootstrap() -> Yaml<'static> {
    let text = support::proxies::example("envoy-ext-authz/envoy.yaml");
    let text: &'static str = Box::leak(text.into_boxed_str());
    Yaml::load_from_str(text).expect("YAML").remove(0)
}

fn text<'a>(y: &'a Yaml<'_>) -> &'a str {
    y.as_str().unwrap_or_else(|| panic!("a string, got {y:?}"))
}

fn recipe_config() -> slidegate::config::Config {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/envoy-ext-authz/slidegate.toml");
    slidegate::config::Config::load_with_env(&path, |n: &str| {
        (n == "SLIDEGATE_KEY_SECRET").then(|| "secret".to_string())
    })
    .expect("slidegate.toml validates")
}

#[test]
fn the_bootstrap_matches_the_slidegate_config_beside_it() {
    let b = bootstrap();
    let config = recipe_config();
    let ext_authz = config.ext_authz.as_ref().expect("[ext_authz]");
    let rls = config.rls.as_ref().expect("[rls]");
    assert_eq!(ext_authz.listen, rls.listen, "one gRPC server serves both");
    let hcm =
        &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    assert_eq!(hcm["normalize_path"].as_bool(), Some(true));
    assert_eq!(hcm["merge_slashes"].as_bool(), Some(true));
    let filters = hcm["http_filters"].as_vec().unwrap();
    let filter = |name: &str| {
        filters
            .iter()
            .find(|f| text(&f["name"]) == name)
            .unwrap_or_else(|| panic!("{name}"))["typed_config"]
            .clone()
    };
    let authz = filter("envoy.filters.http.ext_authz");
    assert_eq!(text(&authz["transport_api_version"]), "V3");
    assert_eq!(authz["failure_mode_allow"].as_bool(), Some(false));
    let body = &authz["with_request_body"];
    assert_eq!(body["pack_as_bytes"].as_bool(), Some(true));
    assert_eq!(body["allow_partial_message"].as_bool(), Some(false));
    let max_request_bytes = body["max_request_bytes"].as_integer().unwrap() as usize;
    let ratelimit = filter("envoy.filters.http.ratelimit");
    assert!(rls.domain(text(&ratelimit["domain"])).is_some());
    // Both filters reach slidegate's one address, over HTTP/2.
    let clusters = b["static_resources"]["clusters"].as_vec().unwrap();
    for cluster_name in [
        text(&authz["grpc_service"]["envoy_grpc"]["cluster_name"]),
        text(&ratelimit["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]),
    ] {
        let cluster = clusters
            .iter()
            .find(|c| text(&c["name"]) == cluster_name)
            .expect("the cluster");
        let options = &cluster["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"];
        assert!(options.contains_mapping_key("http2_protocol_options"));
        let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
            ["address"]["socket_address"];
        assert_eq!(text(&address["address"]), ext_authz.listen.ip().to_string());
        assert_eq!(
            address["port_value"].as_integer(),
            Some(i64::from(ext_authz.listen.port()))
        );
    }
    // Every spelling of a path the TOML keys by the body that the app routes alike (and
    // slidegate's routes match: any case, a trailing `/`, `;` parameters) takes an Envoy route
    // where Check runs, and Envoy sends what slidegate reads of the body.
    let routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
        .as_vec()
        .unwrap();
    let envoy_route = |path: &str| {
        routes
            .iter()
            .find(|r| EnvoyMatch::of(&r["match"]).takes(path))
            .expect("a route takes every path")
    };
    for route in config.routes.iter().filter(|r| r.reads_body()) {
        let path = &route.path.path;
        let with_parameters = path.replace('/', ";p=1/") + ";p=2";
        let spellings = [
            path.clone(),
            path.to_uppercase(),
            format!("{path}/"),
            format!("{path};jsessionid=1"),
            format!("{}/;x", with_parameters.trim_start_matches(";p=1")),
        ];
        for spelling in &spellings {
            assert!(
                !envoy_route(spelling).contains_mapping_key("typed_per_filter_config"),
                "Check runs for {spelling}"
            );
        }
        let other = envoy_route(&format!("{path}x"));
        assert!(
            other.contains_mapping_key("typed_per_filter_config"),
            "{path}x"
        );
        assert!(max_request_bytes <= route.max_key_body_bytes);
    }
    // The catch-all route skips Check and is counted by the rate-limit service.
    let rest = routes.last().unwrap();
    assert_eq!(text(&rest["match"]["prefix"]), "/");
    assert_eq!(
        rest["typed_per_filter_config"]["envoy.filters.http.ext_authz"]["disabled"].as_bool(),
        Some(true)
    );
    assert!(rest["route"].contains_mapping_key("rate_limits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_spellings_of_one_number_then_429_and_the_rest_by_the_rate_limit_service() {
    let redis = RedisServer::start();
    let gw = support::proxies::recipe_gateway("envoy-ext-authz", &redis, None).await;
    assert_eq!(gw.running().ext_authz_addr, gw.running().rls_addr);
    let mut client = ext_authz::client(&gw).await;
    let spellings = ["0812-3456-7890", "+62 812 3456 7890", "(0812) 3456 7890"];
    let mut answers = Vec::new();
    for (i, phone) in spellings.iter().chain(&["6281234567890"]).enumerate() {
        let body = format!(r#"{{"phone":"{phone}"}}"#);
        let d = Described::post_json("/api/otp/send", &body, &format!("203.0.113.{}", i + 1))
            .id(&format!("{}", 1000 + i));
        let a = ext_authz::check(&mut client, &d).await;
        answers.push(if a.allowed() { 200 } else { a.http_status });
        if a.code == PERMISSION_DENIED {
            assert_eq!(a.json()["limit"], "per-phone");
            assert!(a.header("retry-after").is_some());
            assert!(a.header("ratelimit").is_none(), "headers = false");
        }
    }
    assert_eq!(answers, [200, 200, 200, 429]);
    // The login route reads the username; the rest goes to the rate-limit service.
    let login = Described::post_json("/api/login", r#"{"username":"Alice"}"#, "203.0.113.9");
    assert!(ext_authz::check(&mut client, &login).await.allowed());
    let mut rls_client = rls::client(&gw).await;
    let r = rls::ask(
        &mut rls_client,
        rls::request("edge", vec![rls::remote_address("203.0.113.9")]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 99);
    gw.stop().await;
}
