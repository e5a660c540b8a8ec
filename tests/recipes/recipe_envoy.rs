//! The Envoy recipe (`examples/envoy/`). No Envoy binary can be installed here, so the gRPC
//! client tests are the contract; this checks that the bootstrap parses, that its cluster and
//! filter point at the slidegate config beside it (cluster name, HTTP/2, port, domain), that its
//! actions' descriptor keys are in the limit files, that no descriptor is built from the raw
//! path, and that the descriptors those actions make decide as the recipe's comments say: thirteen
//! spellings of the login path (a trailing `/` and `;` parameters among them, which most apps
//! route alike) are one login limit of 5 a minute.

use crate::support;

use saphyr::{LoadableYamlNode, Yaml};
use slidegate::config::Config;
use support::redis::RedisServer;
use support::rls::{ask, client, descriptor, overall, request};

fn bootstrap() -> Yaml<'static> {
    let text = support::proxies::example("envoy/envoy.yaml");
    let text: &'static str = Box::leak(text.into_boxed_str());
    Yaml::load_from_str(text)
        .expect("envoy.yaml is YAML")
        .remove(0)
}

fn recipe_config() -> Config {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy/slidegate.toml");
    Config::load_with_env(&path, |_: &str| None).expect("slidegate.toml validates")
}

fn text<'a>(y: &'a Yaml<'_>) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {y:?}"))
}

/// The route's `rate_limits` and the http filters of the one listener.
fn manager(b: &Yaml<'_>) -> Yaml<'static> {
    let listener = &b["static_resources"]["listeners"][0];
    let hcm = &listener["filter_chains"][0]["filters"][0]["typed_config"];
    to_static(hcm)
}

fn to_static(y: &Yaml<'_>) -> Yaml<'static> {
    let mut out = String::new();
    saphyr::YamlEmitter::new(&mut out).dump(y).unwrap();
    let out: &'static str = Box::leak(out.into_boxed_str());
    Yaml::load_from_str(out).unwrap().remove(0)
}

#[test]
fn the_bootstrap_points_at_the_slidegate_config_beside_it() {
    let b = bootstrap();
    let config = recipe_config();
    let rls = config.rls.as_ref().expect("[rls]");
    let hcm = manager(&b);
    let filters = hcm["http_filters"].as_vec().unwrap();
    let ratelimit = filters
        .iter()
        .find(|f| text(&f["name"]) == "envoy.filters.http.ratelimit")
        .expect("the ratelimit filter");
    let typed = &ratelimit["typed_config"];
    let domain = text(&typed["domain"]);
    assert!(
        rls.domain(domain).is_some(),
        "domain {domain} is in the limit files"
    );
    let service = &typed["rate_limit_service"];
    assert_eq!(text(&service["transport_api_version"]), "V3");
    let cluster_name = text(&service["grpc_service"]["envoy_grpc"]["cluster_name"]);
    let clusters = b["static_resources"]["clusters"].as_vec().unwrap();
    let cluster = clusters
        .iter()
        .find(|c| text(&c["name"]) == cluster_name)
        .expect("the filter's cluster exists");
    let options = &cluster["typed_extension_protocol_options"]
        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"];
    assert!(
        options.contains_mapping_key("http2_protocol_options"),
        "gRPC needs HTTP/2"
    );
    let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["address"]["socket_address"];
    assert_eq!(text(&address["address"]), rls.listen.ip().to_string());
    assert_eq!(
        address["port_value"].as_integer(),
        Some(i64::from(rls.listen.port()))
    );
    // Every descriptor key the actions make is a key of the domain's first level.
    let keys: Vec<&str> = rls
        .domain(domain)
        .unwrap()
        .descriptors
        .iter()
        .map(|d| d.key.as_str())
        .collect();
    for key in action_keys(&hcm) {
        assert!(
            keys.contains(&key.as_str()),
            "{key} is in the limit files ({keys:?})"
        );
    }
}

/// The first descriptor key of each `rate_limits` entry, on every route.
fn action_keys(hcm: &Yaml<'_>) -> Vec<String> {
    routes(hcm)
        .iter()
        .flat_map(|r| r.rate_limits.iter())
        .map(|actions| match &actions[0] {
            Action::Remote => "remote_address".to_string(),
            Action::Header { key, .. } | Action::Generic { key, .. } => key.clone(),
        })
        .collect()
}

enum Action {
    Remote,
    Header { header: String, key: String },
    Generic { key: String, value: String },
}

/// A route of the bootstrap: how it matches, and its `rate_limits`.
struct Route {
    matcher: support::envoy_routes::EnvoyMatch,
    rate_limits: Vec<Vec<Action>>,
}

fn routes(hcm: &Yaml<'_>) -> Vec<Route> {
    hcm["route_config"]["virtual_hosts"][0]["routes"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|r| Route {
            matcher: support::envoy_routes::EnvoyMatch::of(&r["match"]),
            rate_limits: r["route"]["rate_limits"]
                .as_vec()
                .unwrap()
                .iter()
                .map(|l| l["actions"].as_vec().unwrap().iter().map(action).collect())
                .collect(),
        })
        .collect()
}

fn action(a: &Yaml<'_>) -> Action {
    if a.contains_mapping_key("request_headers") {
        let h = &a["request_headers"];
        assert_ne!(
            text(&h["header_name"]),
            ":path",
            "no descriptor is built from the raw path"
        );
        return Action::Header {
            header: text(&h["header_name"]).to_string(),
            key: text(&h["descriptor_key"]).to_string(),
        };
    }
    if a.contains_mapping_key("generic_key") {
        let g = &a["generic_key"];
        return Action::Generic {
            key: text(&g["descriptor_key"]).to_string(),
            value: text(&g["descriptor_value"]).to_string(),
        };
    }
    assert!(a.contains_mapping_key("remote_address"), "a known action");
    Action::Remote
}

/// The path Envoy routes, as its connection manager's settings make it (`normalize_path`:
/// RFC 3986 normalisation, `%XX` of unreserved characters decoded and dot-segments removed;
/// `merge_slashes`), without its query, which route matching never sees.
fn envoy_routed_path(hcm: &Yaml<'_>, target: &str) -> String {
    assert_eq!(hcm["normalize_path"].as_bool(), Some(true));
    assert_eq!(hcm["merge_slashes"].as_bool(), Some(true));
    let path = target.split('?').next().unwrap();
    let mut decoded = String::new();
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() + 1 {
            let hex = std::str::from_utf8(&bytes[i + 1..(i + 3).min(bytes.len())]).unwrap();
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    decoded.push(b as char);
                    i += 3;
                    continue;
                }
            }
        }
        decoded.push(bytes[i] as char);
        i += 1;
    }
    let mut segments: Vec<&str> = Vec::new();
    for s in decoded.split('/').filter(|s| !s.is_empty()) {
        match s {
            "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    format!("/{}", segments.join("/"))
}

/// The descriptors Envoy's filter makes for a request to `target` (the route it matches; a
/// descriptor whose header is absent is skipped, as `skip_if_absent` says).
fn descriptors(
    hcm: &Yaml<'_>,
    target: &str,
    ip: &str,
    headers: &[(&str, &str)],
) -> Vec<envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor> {
    let path = envoy_routed_path(hcm, target);
    let routes = routes(hcm);
    let route = routes
        .iter()
        .find(|r| r.matcher.takes(&path))
        .expect("a route takes every path");
    route
        .rate_limits
        .iter()
        .filter_map(|actions| {
            let entries: Option<Vec<(String, String)>> = actions
                .iter()
                .map(|a| match a {
                    Action::Remote => Some(("remote_address".to_string(), ip.to_string())),
                    Action::Generic { key, value } => Some((key.clone(), value.clone())),
                    Action::Header { header, key } => headers
                        .iter()
                        .find(|(h, _)| h == header)
                        .map(|(_, v)| (key.clone(), v.to_string())),
                })
                .collect();
            let entries = entries?;
            let pairs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            Some(descriptor(&pairs))
        })
        .collect()
}

/// slidegate from the recipe's TOML and limit file, on `redis`.
async fn recipe_gateway(redis: &RedisServer) -> support::gateway::Gateway {
    let toml = support::proxies::example("envoy/slidegate.toml")
        .replace("\"127.0.0.1:8080\"", "\"127.0.0.1:0\"")
        .replace("\"127.0.0.1:9091\"", "\"127.0.0.1:0\"")
        .replace("\"127.0.0.1:8081\"", "\"127.0.0.1:0\"")
        .replace(
            "url = \"redis://127.0.0.1:6390\"",
            &format!(
                "url = \"{}\"\nkey_prefix = \"{}\"",
                redis.url(),
                support::unique_prefix("envoy")
            ),
        );
    let limits = support::proxies::example("envoy/ratelimit/edge.yaml");
    let toml = toml.replace("config = \"ratelimit\"", "config = \"limits\"");
    support::rls::start(&toml, &[("edge.yaml", &limits)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipes_descriptors_decide_as_its_comments_say() {
    let redis = RedisServer::start();
    let gw = recipe_gateway(&redis).await;
    let mut c = client(&gw).await;
    let hcm = manager(&bootstrap());
    let login = descriptors(&hcm, "/api/login", "203.0.113.5", &[("x-user", "alice")]);
    assert_eq!(login.len(), 3, "remote_address, route+remote_address, user");
    for i in 0..5 {
        assert_eq!(
            overall(&ask(&mut c, request("edge", login.clone())).await),
            "OK",
            "login {i}"
        );
    }
    let refused = ask(&mut c, request("edge", login)).await;
    assert_eq!(overall(&refused), "OVER_LIMIT");
    assert!(
        support::rls::header(&refused, "retry-after").is_some(),
        "headers = true"
    );
    // Another path of the same client is not the login's limit; no x-user, no user descriptor.
    let other = descriptors(&hcm, "/api/items", "203.0.113.5", &[]);
    assert_eq!(other.len(), 1);
    assert_eq!(overall(&ask(&mut c, request("edge", other)).await), "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirteen_spellings_of_the_login_path_share_its_five_a_minute() {
    let redis = RedisServer::start();
    let gw = recipe_gateway(&redis).await;
    let mut c = client(&gw).await;
    let hcm = manager(&bootstrap());
    let spellings = [
        "/api/login",
        "/api/login?",
        "//api/login",
        "/api//login",
        "/api/login?next=/home",
        "/API/Login",
        "/api/./login",
        "/api/x/../login",
        "/api/%6Cogin",
        "/%61pi/login?",
        "/api/login/",
        "/api/login;jsessionid=1",
        "/API;x/Login/?next=/",
    ];
    let mut answers = Vec::new();
    for target in spellings {
        let d = descriptors(&hcm, target, "203.0.113.77", &[]);
        // The same descriptors whatever the spelling: nothing of the path is in them.
        assert_eq!(
            d,
            descriptors(&hcm, "/api/login", "203.0.113.77", &[]),
            "{target}"
        );
        answers.push(overall(&ask(&mut c, request("edge", d)).await));
    }
    assert_eq!(
        answers,
        [
            "OK",
            "OK",
            "OK",
            "OK",
            "OK",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT",
            "OVER_LIMIT"
        ]
    );
}
