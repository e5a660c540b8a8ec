//! Envoy's rate-limit service: how the descriptors Envoy's `ratelimit` filter sends
//! (`remote_address`, `request_headers`, `generic_key`, `header_value_match`) find their limits
//! in the YAML tree: exact values before wildcards before any value, nesting, `replaces`,
//! `unlimited`, `shadow_mode`, `hits_addend` as the cost, and Envoy's own limit overrides.

use crate::support;

use support::metrics::value;
use support::redis::RedisServer;
use support::rls::*;

const EDGE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: generic_key
    value: checkout
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: header_match
    value: mobile
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1, name: mobile-user }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_filter_action_finds_its_limit() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-actions", EDGE, "").await;
    let mut c = client(&gw).await;

    // remote_address: 3 a minute per address, each address its own count.
    let ip = request("edge", vec![remote_address("203.0.113.7")]);
    assert_eq!(
        overall_codes(&mut c, &ip, 4).await,
        ["OK", "OK", "OK", "OVER_LIMIT"]
    );
    let other = request("edge", vec![remote_address("203.0.113.8")]);
    let r = ask(&mut c, other).await;
    assert_eq!(codes(&r), ["OK"]);
    assert_eq!(current_limit(&r.statuses[0]), Some(3));
    assert_eq!(r.statuses[0].limit_remaining, 2);

    // An exact value wins over the key alone: 50.0.0.5 is refused from the first request.
    let listed = request("edge", vec![remote_address("50.0.0.5")]);
    let r = ask(&mut c, listed).await;
    assert_eq!(overall(&r), "OVER_LIMIT");
    assert_eq!(current_limit(&r.statuses[0]), Some(0));

    // request_headers: the header's value is the key.
    let alice = request("edge", vec![request_header("user", "alice")]);
    assert_eq!(
        overall_codes(&mut c, &alice, 3).await,
        ["OK", "OK", "OVER_LIMIT"]
    );

    // generic_key: matched by its value; another value matches nothing and is not limited.
    let checkout = request("edge", vec![generic_key("checkout")]);
    assert_eq!(
        overall_codes(&mut c, &checkout, 2).await,
        ["OK", "OVER_LIMIT"]
    );
    let r = ask(&mut c, request("edge", vec![generic_key("browse")])).await;
    assert_eq!(codes(&r), ["OK"]);
    assert_eq!(r.statuses[0].current_limit, None);

    // header_value_match, nested: (header_match=mobile, user=bob) has its own limit of 1.
    let mobile = request(
        "edge",
        vec![descriptor(&[("header_match", "mobile"), ("user", "bob")])],
    );
    let r = ask(&mut c, mobile.clone()).await;
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "mobile-user"
    );
    assert_eq!(overall(&ask(&mut c, mobile).await), "OVER_LIMIT");
    // The first level alone has no limit (a placeholder), and a deeper request matches nothing.
    let r = ask(&mut c, request("edge", vec![header_match("mobile")])).await;
    assert_eq!(
        (overall(&r), r.statuses[0].current_limit.clone()),
        ("OK", None)
    );
    let deeper = descriptor(&[("remote_address", "203.0.113.7"), ("user", "x")]);
    let r = ask(&mut c, request("edge", vec![deeper])).await;
    assert_eq!(
        (overall(&r), r.statuses[0].current_limit.clone()),
        ("OK", None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_sit_between_exact_values_and_any_value() {
    let yaml = r#"
domain: paths
descriptors:
  - key: path
    value: /api/login
    rate_limit: { unit: minute, requests_per_unit: 1, name: login }
  - key: path
    value: /api/*/action
    rate_limit: { unit: minute, requests_per_unit: 2, name: action }
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 2, name: files }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 5, name: any-path }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-wildcards", yaml, "").await;
    let mut c = client(&gw).await;
    let name = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0].current_limit.as_ref().map(|l| l.name.clone())
    };
    let path = |p: &str| request("paths", vec![descriptor(&[("path", p)])]);
    assert_eq!(
        name(&ask(&mut c, path("/api/login")).await).as_deref(),
        Some("login")
    );
    assert_eq!(
        name(&ask(&mut c, path("/api/7/action")).await).as_deref(),
        Some("action")
    );
    assert_eq!(
        name(&ask(&mut c, path("/api/7/other")).await).as_deref(),
        Some("any-path")
    );
    // Without share_threshold each value a wildcard matches counts on its own ...
    assert_eq!(
        overall_codes(&mut c, &path("/api/1/action"), 2).await,
        ["OK", "OK"]
    );
    assert_eq!(
        overall(&ask(&mut c, path("/api/1/action")).await),
        "OVER_LIMIT"
    );
    assert_eq!(overall(&ask(&mut c, path("/api/2/action")).await), "OK");
    // ... with it, every value shares one count.
    assert_eq!(overall(&ask(&mut c, path("/files/a.pdf")).await), "OK");
    assert_eq!(overall(&ask(&mut c, path("/files/b.csv")).await), "OK");
    assert_eq!(
        overall(&ask(&mut c, path("/files/c.txt")).await),
        "OVER_LIMIT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaces_drops_the_replaced_limit_and_unlimited_counts_nothing() {
    let yaml = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: { name: specific_limit, requests_per_unit: 5, unit: minute }
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{ name: specific_limit }]
          requests_per_unit: 10
          unit: minute
  - key: ldap
    rate_limit: { unlimited: true }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-replaces", yaml, "").await;
    let mut c = client(&gw).await;
    let first = descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let second = descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]);
    // Both together: only the replacing limit (10) counts, the replaced one (5) is left alone.
    let both = request("example7", vec![first.clone(), second.clone()]);
    let r = ask(&mut c, both.clone()).await;
    assert_eq!(
        r.statuses[0].current_limit, None,
        "the replaced limit applies nowhere"
    );
    assert_eq!(current_limit(&r.statuses[1]), Some(10));
    for _ in 0..9 {
        assert_eq!(overall(&ask(&mut c, both.clone()).await), "OK");
    }
    assert_eq!(overall(&ask(&mut c, both).await), "OVER_LIMIT");
    // The first alone still has all of its 5: the 10 requests above never touched it.
    let alone = request("example7", vec![first]);
    assert_eq!(
        overall_codes(&mut c, &alone, 6).await,
        ["OK", "OK", "OK", "OK", "OK", "OVER_LIMIT"]
    );
    // unlimited: OK, remaining 2^32-1, whatever the rate.
    let ldap = request("example7", vec![descriptor(&[("ldap", "x")])]);
    for _ in 0..20 {
        let r = ask(&mut c, ldap.clone()).await;
        assert_eq!(
            (overall(&r), r.statuses[0].limit_remaining),
            ("OK", u32::MAX)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_answers_ok_counts_the_breach_and_never_frees_the_enforced_limits() {
    let yaml = r#"
domain: soft
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
    shadow_mode: true
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 4 }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-shadow", yaml, "").await;
    let mut c = client(&gw).await;
    // The shadow-mode limit alone: never refused.
    let user = request("soft", vec![request_header("user", "carol")]);
    assert_eq!(overall_codes(&mut c, &user, 4).await, ["OK"; 4]);
    // With an enforced one: the shadow limit is over for dave after 2, yet every request is
    // charged to the enforced limit, which refuses the 5th.
    let both = request(
        "soft",
        vec![
            request_header("user", "dave"),
            remote_address("198.51.100.1"),
        ],
    );
    assert_eq!(
        overall_codes(&mut c, &both, 5).await,
        ["OK", "OK", "OK", "OK", "OVER_LIMIT"]
    );
    let r = ask(&mut c, both).await;
    assert_eq!(
        codes(&r),
        ["OK", "OVER_LIMIT"],
        "a shadow-mode status is OK"
    );
    let metrics = support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let exceeded = |limit: &str, mode: &str| {
        let labels = [("route", "soft"), ("limit", limit), ("mode", mode)];
        value(&metrics, "slidegate_limit_exceeded_total", &labels).unwrap_or(0.0)
    };
    let (shadow, enforced) = (
        exceeded("user", "shadow"),
        exceeded("remote_address", "enforced"),
    );
    // carol's 2 breaches, dave's 2 allowed over the shadow limit; the enforced refusals 2.
    assert_eq!((shadow, enforced), (4.0, 2.0), "{metrics}");
    // A cost above the shadow-mode limit refuses nothing either: a breach in shadow mode.
    let mut heavy = request("soft", vec![request_header("user", "erin")]);
    heavy.hits_addend = 3;
    assert_eq!(overall_codes(&mut c, &heavy, 1).await, ["OK"]);
    let metrics = support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let labels = [("route", "soft"), ("limit", "user"), ("mode", "shadow")];
    let shadow = value(&metrics, "slidegate_limit_exceeded_total", &labels);
    assert_eq!(shadow, Some(5.0), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_is_the_cost_and_a_cost_beyond_the_limit_is_refused() {
    let yaml = r#"
domain: tokens
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-hits", yaml, "").await;
    let mut c = client(&gw).await;
    let mut r = request("tokens", vec![descriptor(&[("tenant", "t1")])]);
    r.hits_addend = 4;
    let first = ask(&mut c, r.clone()).await;
    assert_eq!(first.statuses[0].limit_remaining, 6);
    assert_eq!(overall(&ask(&mut c, r.clone()).await), "OK");
    // 8 used: 4 more do not fit, and a refused request is charged nothing ...
    assert_eq!(overall(&ask(&mut c, r.clone()).await), "OVER_LIMIT");
    // ... so 2 still do (a descriptor's own hits_addend wins over the request's).
    let two = request(
        "tokens",
        vec![with_hits(descriptor(&[("tenant", "t1")]), 2)],
    );
    assert_eq!(ask(&mut c, two).await.statuses[0].limit_remaining, 0);
    // hits_addend 0 on a descriptor only reads.
    let read = request(
        "tokens",
        vec![with_hits(descriptor(&[("tenant", "t2")]), 0)],
    );
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, read.clone()).await.statuses[0].limit_remaining,
            10
        );
    }
    // More than the limit could never pass: OVER_LIMIT for the descriptor (an error would be
    // no limit at all for Envoy's default failure_mode_deny), and nothing is charged.
    let mut huge = request("tokens", vec![descriptor(&[("tenant", "t2")])]);
    for hits in [11, u32::MAX] {
        huge.hits_addend = hits;
        let r = ask(&mut c, huge.clone()).await;
        assert_eq!(overall(&r), "OVER_LIMIT", "{r:?}");
        assert_eq!(r.statuses[0].code, 2, "{r:?}");
    }
    let after = ask(
        &mut c,
        request("tokens", vec![descriptor(&[("tenant", "t2")])]),
    )
    .await;
    assert_eq!(after.statuses[0].limit_remaining, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_own_limit_overrides_the_files() {
    let yaml = r#"
domain: ov
descriptors:
  - key: plan
    rate_limit: { unit: hour, requests_per_unit: 100, name: per-plan }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-override", yaml, "").await;
    let mut c = client(&gw).await;
    const MINUTE: i32 = 2;
    let gold = with_override(descriptor(&[("plan", "gold")]), 2, MINUTE);
    let r = request("ov", vec![gold]);
    let first = ask(&mut c, r.clone()).await;
    let limit = first.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (2, MINUTE, "per-plan")
    );
    assert_eq!(overall_codes(&mut c, &r, 2).await, ["OK", "OVER_LIMIT"]);
    // An override applies to a descriptor no rate limit matches too.
    let loose = request(
        "ov",
        vec![with_override(descriptor(&[("anything", "x")]), 1, MINUTE)],
    );
    assert_eq!(overall_codes(&mut c, &loose, 2).await, ["OK", "OVER_LIMIT"]);
    // An override beyond what a sliding log holds is counted by the sliding window counter,
    // not refused, on a rule and where no rule matches.
    for entries in [("plan", "platinum"), ("tenant", "acme")] {
        let big = request(
            "ov",
            vec![with_override(descriptor(&[entries]), 10_001, MINUTE)],
        );
        let answer = ask(&mut c, big).await;
        assert_eq!(overall(&answer), "OK", "{entries:?}");
        assert_eq!(answer.statuses[0].limit_remaining, 10_000, "{entries:?}");
    }
    // A unit that does not exist cannot be counted: OVER_LIMIT, never no limit.
    for unit in [0, 8, -1] {
        let bad = request(
            "ov",
            vec![with_override(descriptor(&[("plan", "x")]), 1, unit)],
        );
        assert_eq!(overall(&ask(&mut c, bad).await), "OVER_LIMIT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unnamed_limit_shows_under_its_descriptor_keys_unless_a_sibling_shares_them() {
    let yaml = r#"
domain: labels
descriptors:
  - key: path
    value: /api/login
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: database
    value: users
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: database
    value: default
    rate_limit: { unit: minute, requests_per_unit: 1 }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-labels", yaml, "").await;
    let mut c = client(&gw).await;
    let login = request(
        "labels",
        vec![descriptor(&[("path", "/api/login"), ("user", "erin")])],
    );
    let users = request("labels", vec![descriptor(&[("database", "users")])]);
    for r in [&login, &users] {
        assert_eq!(overall_codes(&mut c, r, 2).await, ["OK", "OVER_LIMIT"]);
    }
    let metrics = support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let exceeded = |limit: &str| {
        let labels = [("route", "labels"), ("limit", limit), ("mode", "enforced")];
        value(&metrics, "slidegate_limit_exceeded_total", &labels).unwrap_or(0.0)
    };
    // Keys alone where they name one limit; with the values where two siblings share the keys.
    assert_eq!(exceeded("path.user"), 1.0, "{metrics}");
    assert_eq!(exceeded("database_users"), 1.0, "{metrics}");
}
