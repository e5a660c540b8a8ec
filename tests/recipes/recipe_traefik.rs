//! The Traefik recipe (`examples/traefik/`). Traefik is not installed here: this parses its
//! dynamic configuration and checks it against the slidegate config beside it (ForwardAuth's
//! address is slidegate's `[forward_auth]`, the body is forwarded within the routes'
//! `max_key_body_bytes` on the OTP and login paths in every spelling the app routes alike and
//! only there, only the headers the keys need reach slidegate), then sends the subrequests
//! Traefik's ForwardAuth makes with `forwardBody: true` for three spellings of one number: 200,
//! 200, 200, then 429; and one without the body, as the other router sends it: 400.

use crate::support;

use http::Method;
use saphyr::{LoadableYamlNode, Yaml};
use support::http::HttpClient;
use support::redis::RedisServer;

fn text<'a>(y: &'a Yaml<'_>) -> &'a str {
    y.as_str().unwrap_or_else(|| panic!("a string, got {y:?}"))
}

#[test]
fn the_dynamic_configuration_matches_the_slidegate_config_beside_it() {
    let text_of = support::proxies::example("traefik/dynamic.yml");
    let dynamic = Yaml::load_from_str(&text_of).unwrap().remove(0);
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/traefik/slidegate.toml");
    let config = slidegate::config::Config::load_with_env(&path, |n: &str| {
        (n == "SLIDEGATE_KEY_SECRET").then(|| "secret".to_string())
    })
    .expect("slidegate.toml validates");
    let listen = config.forward_auth.as_ref().expect("[forward_auth]").listen;
    let http = &dynamic["http"];
    let auth_of = |router: &str| {
        let router = &http["routers"][router];
        let middleware_name = text(&router["middlewares"][0]);
        let auth = &http["middlewares"][middleware_name]["forwardAuth"];
        assert_eq!(text(&auth["address"]), format!("http://{listen}/"));
        assert_eq!(auth["trustForwardHeader"].as_bool(), Some(false));
        auth.clone()
    };
    // The body goes to slidegate for the paths it keys by the body, in every spelling the app
    // routes alike; every other path asks without it (an upload of any size passes).
    let rest = auth_of("app");
    assert_eq!(text(&http["routers"]["app"]["rule"]), "PathPrefix(`/`)");
    assert!(!rest.contains_mapping_key("forwardBody"));
    let auth = auth_of("body-keyed");
    assert_eq!(auth["forwardBody"].as_bool(), Some(true));
    let body_keyed = &http["routers"]["body-keyed"];
    assert!(body_keyed["priority"].as_integer() > http["routers"]["app"]["priority"].as_integer());
    let rule = text(&body_keyed["rule"]);
    let pattern = rule
        .strip_prefix("PathRegexp(`")
        .and_then(|r| r.strip_suffix("`)"))
        .expect("a PathRegexp rule");
    let pattern = regex::Regex::new(pattern).unwrap();
    for route in config.routes.iter().filter(|r| r.reads_body()) {
        let path = &route.path.path;
        for spelling in [
            path.clone(),
            path.to_uppercase(),
            format!("{path}/"),
            format!("{path};jsessionid=1"),
        ] {
            assert!(pattern.is_match(&spelling), "{spelling}");
        }
        assert!(!pattern.is_match(&format!("{path}x")), "{path}x");
    }
    assert!(!pattern.is_match("/api/items"));
    let max = auth["maxBodySize"].as_integer().unwrap() as usize;
    for route in config.routes.iter().filter(|r| r.reads_body()) {
        assert!(max <= route.max_key_body_bytes, "{}", route.name);
    }
    let sent: Vec<String> = auth["authRequestHeaders"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|h| text(h).to_ascii_lowercase())
        .collect();
    assert!(
        sent.contains(&"content-type".to_string()),
        "json: keys need it"
    );
    assert!(sent.iter().all(|h| !h.starts_with("x-original")));
    // Traefik proxies to the app itself: slidegate's routes have no upstream.
    assert!(config.routes.iter().all(|r| r.upstream.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_with_the_body_three_spellings_then_429() {
    let redis = RedisServer::start();
    let gw = support::proxies::recipe_gateway("traefik", &redis, None).await;
    let url = format!("http://{}/", gw.running().forward_auth_addr.unwrap());
    let c = HttpClient::default();
    let mut statuses = Vec::new();
    for (i, phone) in [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "(0812) 3456 7890",
        "6281234567890",
    ]
    .iter()
    .enumerate()
    {
        // Traefik's subrequest: GET to the address, the original in X-Forwarded-*, the body.
        let ip = format!("203.0.113.{}", i + 1);
        let headers = [
            ("x-forwarded-method", "POST"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "api.example.com"),
            ("x-forwarded-uri", "/api/otp/send"),
            ("x-forwarded-for", ip.as_str()),
            ("content-type", "application/json"),
        ];
        let body = format!(r#"{{"phone":"{phone}"}}"#);
        let r = c.send(Method::GET, &url, &headers, &body).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // A spelling that missed the body router asks without the body: refused, not let through.
    let headers = [
        ("x-forwarded-method", "POST"),
        ("x-forwarded-uri", "/api/otp/send"),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let r = c.send(Method::GET, &url, &headers, "").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "missing_key");
    gw.stop().await;
}
