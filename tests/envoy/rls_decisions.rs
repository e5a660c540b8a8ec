//! Envoy's rate-limit service: what slidegate does better than envoyproxy/ratelimit (windows
//! that slide, every descriptor of a request charged together or not at all), what it shares
//! with the traffic path (one count across instances, headers, metrics under the domain, the
//! deny cache, `on_error`, `/admin/usage`), and reloads of the YAML files.

use crate::support;

use http::Method;
use support::admin::auth;
use support::http::HttpClient;
use support::metrics::value;
use support::redis::RedisServer;
use support::rls::*;
use support::unique_prefix;

const ATOMIC: &str = r#"
domain: atomic
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3, name: per-ip }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10, name: per-user }
"#;

/// `GET /admin/usage` of `domain`'s `limit` for `key`: the units used.
async fn used(gw: &support::gateway::Gateway, domain: &str, limit: &str, key: &str) -> u64 {
    let (k, v) = auth();
    let url = gw.admin(&format!(
        "/admin/usage?route={domain}&limit={limit}&key={key}"
    ));
    let r = HttpClient::default().get(&url, &[(k, &v)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["limits"][0]["used"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_by_one_descriptor_is_charged_to_none() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-atomic", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let both = request(
        "atomic",
        vec![
            remote_address("203.0.113.9"),
            request_header("user", "erin"),
        ],
    );
    assert_eq!(overall_codes(&mut c, &both, 3).await, ["OK"; 3]);
    let first = ask(&mut c, both.clone()).await;
    assert_eq!(codes(&first), ["OVER_LIMIT", "OK"]);
    assert_eq!(
        first.statuses[1].limit_remaining, 7,
        "the user's limit was not charged"
    );
    for _ in 0..3 {
        assert_eq!(
            codes(&ask(&mut c, both.clone()).await),
            ["OVER_LIMIT", "OK"]
        );
    }
    // envoyproxy/ratelimit would have counted 7 for erin; the refusals cost her nothing.
    assert_eq!(used(&gw, "atomic", "per-user", "erin").await, 3);
    assert_eq!(used(&gw, "atomic", "per-ip", "203.0.113.9").await, 3);
}

/// `/admin/config` shows `[rls]` as the file writes it, with each domain's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_config_shows_the_rate_limit_service_and_its_domains() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-config-view", ATOMIC, "").await;
    let (k, v) = auth();
    let r = HttpClient::default()
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rls = &r.json()["rls"];
    assert_eq!(rls["on_error"], "allow", "{rls}");
    let domain = &rls["domains"][0];
    assert_eq!(domain["domain"], "atomic", "{rls}");
    let limits: Vec<(String, u64)> = (domain["limits"].as_array().unwrap().iter())
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["limit"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        limits,
        [("per-ip".to_string(), 3), ("per-user".to_string(), 10)]
    );
    assert_eq!(domain["limits"][0]["window"], "1m", "{rls}");
}

/// Descriptors of different `hits_addend` are decided as groups, the largest cost first: a
/// refusal by a later group takes back what the earlier ones charged before the request is
/// answered, so the request is charged to none of its descriptors, its statuses show none of
/// the charge, and a call made right after the answer (here the admin listener's, on a
/// connection of its own) finds nothing charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_a_later_cost_group_takes_back_the_earlier_charge() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-atomic-costs", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let address = request("atomic", vec![remote_address("203.0.113.44")]);
    assert_eq!(overall_codes(&mut c, &address, 3).await, ["OK"; 3]);
    let mixed = request(
        "atomic",
        vec![
            with_hits(request_header("user", "ivy"), 4),
            remote_address("203.0.113.44"),
        ],
    );
    for _ in 0..2 {
        let answer = ask(&mut c, mixed.clone()).await;
        assert_eq!(codes(&answer), ["OK", "OVER_LIMIT"]);
        assert_eq!(
            answer.statuses[0].limit_remaining, 10,
            "the user's status shows the charge taken back"
        );
        assert_eq!(
            used(&gw, "atomic", "per-user", "ivy").await,
            0,
            "the refused request stayed charged to the user after its answer"
        );
    }
    assert_eq!(used(&gw, "atomic", "per-ip", "203.0.113.44").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_slide_instead_of_turning_with_the_clock() {
    let yaml = "domain: slide\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 2 }\n";
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-slide", yaml, "").await;
    let mut c = client(&gw).await;
    let r = request("slide", vec![descriptor(&[("k", "v")])]);
    // Spend the second's quota 0.6 s (or later) into a clock second ...
    let start = at_fraction(0.6).await;
    assert_eq!(overall_codes(&mut c, &r, 2).await, ["OK", "OK"]);
    let counted = std::time::Instant::now();
    // ... then ask just after the next clock second began (at most 0.4 s after `start`): a fixed
    // window has turned, a sliding one (the last 1 s) still holds both requests for about half
    // a second more.
    sleep_until(start + std::time::Duration::from_millis(450)).await;
    assert_eq!(overall(&ask(&mut c, r.clone()).await), "OVER_LIMIT");
    // A second after they were counted, they have left the window.
    sleep_until(counted + std::time::Duration::from_millis(1050)).await;
    assert_eq!(overall(&ask(&mut c, r).await), "OK");
}

/// Waits until the wall clock is `fraction` of a second into a second; returns that instant.
async fn at_fraction(fraction: f64) -> std::time::Instant {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = now.subsec_nanos() as f64 / 1e9;
    let wait = (fraction - into).rem_euclid(1.0);
    tokio::time::sleep(std::time::Duration::from_secs_f64(wait)).await;
    std::time::Instant::now()
}

async fn sleep_until(at: std::time::Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_sharing_redis_keep_one_count() {
    let redis = RedisServer::start();
    let toml = config(&redis, &unique_prefix("rls-fleet"), "", "");
    let one = start(&toml, &[("atomic.yaml", ATOMIC)]).await;
    let two = start(&toml, &[("atomic.yaml", ATOMIC)]).await;
    let (mut a, mut b) = (client(&one).await, client(&two).await);
    let r = request("atomic", vec![remote_address("192.0.2.1")]);
    assert_eq!(overall(&ask(&mut a, r.clone()).await), "OK");
    assert_eq!(overall(&ask(&mut b, r.clone()).await), "OK");
    assert_eq!(overall(&ask(&mut a, r.clone()).await), "OK");
    assert_eq!(overall(&ask(&mut b, r.clone()).await), "OVER_LIMIT");
    assert_eq!(overall(&ask(&mut a, r).await), "OVER_LIMIT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_the_traffic_paths_headers_when_asked() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-headers", ATOMIC, "headers = true").await;
    let mut c = client(&gw).await;
    let r = request("atomic", vec![remote_address("192.0.2.7")]);
    let first = ask(&mut c, r.clone()).await;
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some("\"per-ip\";q=3;w=60")
    );
    assert_eq!(header(&first, "ratelimit"), Some("\"per-ip\";r=2;t=60"));
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some("2"));
    assert_eq!(header(&first, "retry-after"), None);
    ask(&mut c, r.clone()).await;
    ask(&mut c, r.clone()).await;
    let refused = ask(&mut c, r).await;
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((58..=60).contains(&retry), "{retry}");
    assert!(header(&refused, "ratelimit")
        .unwrap()
        .starts_with("\"per-ip\";r=0;t="));
    // Named as HTTP writes them, for a reader that compares Envoy's header names exactly.
    let names: Vec<&str> = (refused.response_headers_to_add.iter())
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "RateLimit-Policy",
            "RateLimit",
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
            "Retry-After"
        ]
    );
    // Without `headers = true`, none.
    let quiet = serve(&redis, "rls-quiet", ATOMIC, "").await;
    let plain = ask(
        &mut client(&quiet).await,
        request("atomic", vec![remote_address("x")]),
    )
    .await;
    assert!(plain.response_headers_to_add.is_empty());
}

/// A request whose descriptors of different costs are decided as groups shows, in its headers,
/// the tightest limit of all of them (least remaining), as a route's answer does: here the
/// address's (2 of 3 left), not the first group's user (6 of 10 left after a cost of 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_show_the_tightest_limit_of_every_cost_group() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-headers-groups", ATOMIC, "headers = true").await;
    let mut c = client(&gw).await;
    let mixed = request(
        "atomic",
        vec![
            with_hits(request_header("user", "kim"), 4),
            remote_address("192.0.2.77"),
        ],
    );
    let answer = ask(&mut c, mixed).await;
    assert_eq!(codes(&answer), ["OK", "OK"]);
    let left: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(left, [6, 2]);
    assert_eq!(header(&answer, "ratelimit"), Some("\"per-ip\";r=2;t=60"));
    assert_eq!(header(&answer, "x-ratelimit-remaining"), Some("2"));
    // the policy lists every limit the request is under, however its costs split them
    assert_eq!(
        header(&answer, "ratelimit-policy"),
        Some("\"per-user\";q=10;w=60, \"per-ip\";q=3;w=60")
    );
    // a request that only reads (`hits_addend` 0) shows what it read
    let read = request("atomic", vec![with_hits(remote_address("192.0.2.77"), 0)]);
    let answer = ask(&mut c, read).await;
    assert_eq!(header(&answer, "ratelimit"), Some("\"per-ip\";r=2;t=60"));
    // and a descriptor read beside a charged one shows when it is the tighter
    let beside = request(
        "atomic",
        vec![
            request_header("user", "kim"),
            with_hits(remote_address("192.0.2.77"), 0),
        ],
    );
    let answer = ask(&mut c, beside).await;
    let left: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(left, [5, 2]);
    assert_eq!(header(&answer, "ratelimit"), Some("\"per-ip\";r=2;t=60"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_count_under_the_domain_and_repeated_refusals_skip_redis() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-metrics", ATOMIC, "").await;
    // Before any call, every rate limit's series is there at 0, as a route's is from its load.
    let loaded = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    for limit in ["per-ip", "per-user"] {
        let labels = [("route", "atomic"), ("limit", limit), ("mode", "enforced")];
        let at_load = value(&loaded, "slidegate_limit_exceeded_total", &labels);
        assert_eq!(at_load, Some(0.0), "{limit}: {loaded}");
    }
    let labels = [("route", "atomic"), ("decision", "rejected")];
    assert_eq!(
        value(&loaded, "slidegate_requests_total", &labels),
        Some(0.0)
    );
    let mut c = client(&gw).await;
    let r = request("atomic", vec![remote_address("192.0.2.44")]);
    assert_eq!(
        overall_codes(&mut c, &r, 6).await,
        ["OK", "OK", "OK", "OVER_LIMIT", "OVER_LIMIT", "OVER_LIMIT"]
    );
    // An unknown domain: every descriptor OK, no limit named.
    let unknown = ask(
        &mut c,
        request("nowhere", vec![remote_address("x"), generic_key("y")]),
    )
    .await;
    assert_eq!(codes(&unknown), ["OK", "OK"]);
    assert!(unknown.statuses.iter().all(|s| s.current_limit.is_none()));
    let text = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let count = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels).unwrap_or(0.0);
    let route = ("route", "atomic");
    let requests = "slidegate_requests_total";
    assert_eq!(
        count(requests, &[route, ("decision", "allowed")]),
        3.0,
        "{text}"
    );
    assert_eq!(
        count(requests, &[route, ("decision", "rejected")]),
        3.0,
        "{text}"
    );
    let exceeded = [route, ("limit", "per-ip"), ("mode", "enforced")];
    assert_eq!(count("slidegate_limit_exceeded_total", &exceeded), 3.0);
    // The first refusal asked Redis; the next two were answered by the deny cache.
    assert_eq!(count("slidegate_deny_cache_hits_total", &[route]), 2.0);
    assert_eq!(count("slidegate_rls_duration_seconds_count", &[route]), 6.0);
    assert_eq!(
        count(
            "slidegate_decision_duration_seconds_count",
            &[route, ("backend", "redis")]
        ),
        4.0
    );
}

/// A request whose descriptors are partly only read (`hits_addend` 0) is still one request:
/// it counts once in `slidegate_requests_total`, under the decision of the descriptors it is
/// charged to; a request that only reads counts once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_read_only_descriptors_counts_once() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-read-once", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let mixed = request(
        "atomic",
        vec![
            remote_address("192.0.2.70"),
            with_hits(request_header("user", "hal"), 0),
        ],
    );
    assert_eq!(
        overall_codes(&mut c, &mixed, 4).await,
        ["OK", "OK", "OK", "OVER_LIMIT"]
    );
    let read_only = request("atomic", vec![with_hits(request_header("user", "hal"), 0)]);
    assert_eq!(overall_codes(&mut c, &read_only, 2).await, ["OK", "OK"]);
    let text = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let count = |decision: &str| {
        let labels = [("route", "atomic"), ("decision", decision)];
        value(&text, "slidegate_requests_total", &labels).unwrap_or(0.0)
    };
    assert_eq!((count("allowed"), count("rejected")), (5.0, 1.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_cached_for_one_set_of_descriptors_answers_only_that_set() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-cache-sets", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let alone = request("atomic", vec![remote_address("192.0.2.60")]);
    assert_eq!(
        overall_codes(&mut c, &alone, 5).await[3..],
        ["OVER_LIMIT", "OVER_LIMIT"]
    );
    // The address's refusal is cached for the address alone; with a user beside it the request
    // has other limits, decided (and answered, a status per descriptor) by the store.
    let with_user = request(
        "atomic",
        vec![request_header("user", "gus"), remote_address("192.0.2.60")],
    );
    for _ in 0..2 {
        let r = ask(&mut c, with_user.clone()).await;
        assert_eq!(codes(&r), ["OK", "OVER_LIMIT"]);
        assert_eq!(r.statuses[0].limit_remaining, 10, "gus was charged nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_store_answers_as_rls_on_error_says() {
    let mut redis = RedisServer::start();
    let deny = serve(&redis, "rls-deny", ATOMIC, "on_error = \"deny\"").await;
    let allow = serve(&redis, "rls-allow", ATOMIC, "on_error = \"allow\"").await;
    let local = serve(&redis, "rls-local", ATOMIC, "on_error = \"local\"").await;
    let (mut d, mut a, mut l) = (
        client(&deny).await,
        client(&allow).await,
        client(&local).await,
    );
    let r = request("atomic", vec![remote_address("192.0.2.50")]);
    assert_eq!(overall(&ask(&mut d, r.clone()).await), "OK");
    redis.kill();
    let started = std::time::Instant::now();
    assert_eq!(overall(&ask(&mut d, r.clone()).await), "OVER_LIMIT");
    assert_eq!(overall(&ask(&mut a, r.clone()).await), "OK");
    // local: the in-process limiter decides, exactly, from zero.
    assert_eq!(
        overall_codes(&mut l, &r, 4).await,
        ["OK", "OK", "OK", "OVER_LIMIT"]
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "a dead store never hangs a call"
    );
    let text = HttpClient::default()
        .get(&deny.admin("/metrics"), &[])
        .await
        .body;
    let denied = [("route", "atomic"), ("decision", "store_error_denied")];
    assert_eq!(value(&text, "slidegate_requests_total", &denied), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_usage_reads_and_resets_a_descriptors_count() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-usage", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let r = request("atomic", vec![remote_address("198.51.100.77")]);
    assert_eq!(overall_codes(&mut c, &r, 4).await[3], "OVER_LIMIT");
    assert_eq!(used(&gw, "atomic", "per-ip", "198.51.100.77").await, 3);
    let (k, v) = auth();
    let url = gw.admin("/admin/usage?route=atomic&limit=per-ip&key=198.51.100.77");
    let reset = HttpClient::default()
        .send(Method::DELETE, &url, &[(k, &v)], "")
        .await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(used(&gw, "atomic", "per-ip", "198.51.100.77").await, 0);
    assert_eq!(
        overall(&ask(&mut c, r).await),
        "OK",
        "the deny cache forgot it too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_yaml_reloads_with_the_toml_and_a_bad_file_keeps_the_running_limits() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-reload", ATOMIC, "").await;
    let mut c = client(&gw).await;
    let r = request("atomic", vec![remote_address("192.0.2.99")]);
    assert_eq!(overall_codes(&mut c, &r, 4).await[3], "OVER_LIMIT");
    let file = gw.config_path.parent().unwrap().join("limits/limits.yaml");
    let (k, v) = auth();
    let reload = || async {
        HttpClient::default()
            .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
            .await
    };
    std::fs::write(
        &file,
        ATOMIC.replace("requests_per_unit: 3", "requests_per_unit: 5"),
    )
    .unwrap();
    assert_eq!(reload().await.status, 200);
    assert_eq!(
        overall_codes(&mut c, &r, 3).await,
        ["OK", "OK", "OVER_LIMIT"],
        "counts survive"
    );
    std::fs::write(
        &file,
        ATOMIC.replace(
            "unit: minute, requests_per_unit: 3",
            "unit: fortnight, requests_per_unit: 5",
        ),
    )
    .unwrap();
    let refused = reload().await;
    assert_eq!(refused.status, 422);
    let detail = refused.json()["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains("limits.yaml:5:25:") && detail.contains("fortnight"),
        "{detail}"
    );
    let other = request("atomic", vec![remote_address("192.0.2.100")]);
    assert_eq!(
        overall_codes(&mut c, &other, 6).await[5],
        "OVER_LIMIT",
        "5 still apply"
    );
}
