//! Parity with envoyproxy/ratelimit's files: its own config fixtures (copied unchanged into
//! tests/fixtures/ratelimit/, Apache-2.0, see the README there) load or are refused as its
//! `config_test.go` expects, the limits they define are the ones its tests look up, files that
//! share a domain merge with `[rls] merge_domains = true` (its `MERGE_DOMAIN_CONFIG`), and
//! `quota_mode` refuses a request only when every quota-mode descriptor is over (one over by
//! its cost alone, or in another cost group, included).

use crate::support;

use std::path::PathBuf;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::redis::RedisServer;
use support::rls::*;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ratelimit")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads `files` (fixture paths, copied under their own names into one directory).
fn load(files: &[&str], merge: bool) -> Result<Vec<String>, String> {
    let dir = tempfile::tempdir().unwrap();
    for (i, f) in files.iter().enumerate() {
        // A name prefix keeps the fixtures in the order given (directories are read by name).
        let name = format!("{i:02}-{}", f.rsplit('/').next().unwrap());
        std::fs::write(dir.path().join(name), fixture(f)).unwrap();
    }
    slidegate::config::rls_yaml::load(dir.path(), merge)
        .map(|l| l.domains.iter().map(|d| d.name.clone()).collect())
        .map_err(|e| e.to_string())
}

#[test]
fn every_fixture_loads_or_is_refused_as_its_own_tests_expect() {
    let loads: &[(&[&str], bool)] = &[
        (&["test_config/basic_config.yaml"], false),
        (&["test_config/shadowmode_config.yaml"], false),
        (&["test_config/wildcard.yaml"], false),
        (&["test_config/share_threshold.yaml"], false),
        (&["test_config/metadata.yaml"], false),
        (
            &[
                "test_config/merge_domain_key1.yaml",
                "test_config/merge_domain_key2.yaml",
            ],
            true,
        ),
        (&["examples/config.yaml"], false),
        (&["examples/example.yaml"], false),
    ];
    for (files, merge) in loads {
        let loaded = load(files, *merge);
        assert!(loaded.is_ok(), "{files:?}: {loaded:?}");
    }
    // (files, merge, the file the error names)
    let refused: &[(&[&str], bool, &str)] = &[
        (
            &["test_config/empty_domain.yaml"],
            false,
            "empty_domain.yaml",
        ),
        (
            &[
                "test_config/basic_config.yaml",
                "test_config/duplicate_domain.yaml",
            ],
            false,
            "duplicate_domain.yaml",
        ),
        (
            &[
                "test_config/merge_domain_key1.yaml",
                "test_config/merge_domain_key2.yaml",
            ],
            false,
            "merge_domain_key2.yaml",
        ),
        (&["test_config/empty_key.yaml"], false, "empty_key.yaml"),
        (
            &["test_config/duplicate_key.yaml"],
            false,
            "duplicate_key.yaml",
        ),
        (
            &[
                "test_config/merge_domain_key1.yaml",
                "test_config/merge_domain_key1.yaml",
            ],
            true,
            "merge_domain_key1.yaml",
        ),
        (
            &["test_config/bad_limit_unit.yaml"],
            false,
            "bad_limit_unit.yaml",
        ),
        (
            &["test_config/replaces_self.yaml"],
            false,
            "replaces_self.yaml",
        ),
        (
            &["test_config/replaces_empty.yaml"],
            false,
            "replaces_empty.yaml",
        ),
        (&["test_config/bad_yaml.yaml"], false, "bad_yaml.yaml"),
        (
            &["test_config/misspelled_key.yaml"],
            false,
            "misspelled_key.yaml",
        ),
        (
            &["test_config/misspelled_key2.yaml"],
            false,
            "misspelled_key2.yaml",
        ),
        (
            &["test_config/non_string_key.yaml"],
            false,
            "non_string_key.yaml",
        ),
        (
            &["test_config/non_map_list.yaml"],
            false,
            "non_map_list.yaml",
        ),
        (
            &["test_config/unlimited_with_unit.yaml"],
            false,
            "unlimited_with_unit.yaml",
        ),
    ];
    for (files, merge, names) in refused {
        let error = load(files, *merge).expect_err(&format!("{files:?} is refused"));
        assert!(error.contains(names), "{files:?}: {error}");
        assert!(
            error.contains(".yaml:"),
            "FILE:LINE:COLUMN in {error} ({files:?})"
        );
    }
    // Every fixture copied is one of the cases above.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ratelimit");
    let named: String = format!("{loads:?}{refused:?}");
    for sub in ["test_config", "examples"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let name = format!("{sub}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(named.contains(&name), "{name} has no case");
        }
    }
}

/// The `current_limit` a descriptor of `entries` gets: (requests_per_unit, unit code), or none.
async fn limit_of(
    c: &mut envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, i32, String)> {
    let mut r = request(domain, vec![with_hits(descriptor(entries), 0)]);
    r.hits_addend = 0;
    let answer = ask(c, r).await;
    (answer.statuses[0].current_limit.as_ref())
        .map(|l| (l.requests_per_unit, l.unit, l.name.clone()))
}

const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const DAY: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_its_tests_look_up_are_the_ones_decided() {
    let redis = RedisServer::start();
    let gw = serve(
        &redis,
        "fixtures",
        &fixture("test_config/basic_config.yaml"),
        "",
    )
    .await;
    let mut c = client(&gw).await;
    let d = "test-domain";
    // TestBasicConfig's look-ups.
    assert_eq!(limit_of(&mut c, d, &[("key1", "value1")]).await, None);
    let five = limit_of(&mut c, d, &[("key1", "value1"), ("subkey1", "something")]).await;
    assert_eq!(five.map(|l| (l.0, l.1)), Some((5, SECOND)));
    let ten = limit_of(&mut c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]).await;
    assert_eq!(ten.map(|l| (l.0, l.1)), Some((10, SECOND)));
    let twenty = limit_of(&mut c, d, &[("key2", "something")]).await;
    assert_eq!(twenty.map(|l| (l.0, l.1)), Some((20, MINUTE)));
    let thirty = limit_of(&mut c, d, &[("key2", "value2")]).await;
    assert_eq!(thirty.map(|l| (l.0, l.1)), Some((30, MINUTE)));
    assert_eq!(limit_of(&mut c, d, &[("key2", "value3")]).await, None);
    let named = limit_of(&mut c, d, &[("key4", "x")]).await.unwrap();
    assert_eq!(named, (1, DAY, "key4_rate_limit".to_string()));
    gw.stop().await;

    // TestDomainMerge's look-ups: both files' first levels are one domain.
    let toml = config(
        &redis,
        &support::unique_prefix("merge"),
        "merge_domains = true",
        "",
    );
    let files = [
        ("m1.yaml", fixture("test_config/merge_domain_key1.yaml")),
        ("m2.yaml", fixture("test_config/merge_domain_key2.yaml")),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let gw = start(&toml, &files).await;
    let mut c = client(&gw).await;
    let one = limit_of(&mut c, "test-domain", &[("key1", "value1")]).await;
    assert_eq!(one.map(|l| (l.0, l.1)), Some((10, MINUTE)));
    let two = limit_of(&mut c, "test-domain", &[("key2", "value2")]).await;
    assert_eq!(two.map(|l| (l.0, l.1)), Some((20, MINUTE)));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_refuses_only_when_every_quota_descriptor_is_over() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "quota", &fixture("examples/example.yaml"), "").await;
    let mut c = client(&gw).await;
    // example.yaml: service_1 1/min and service_2 2/min, both in quota mode.
    let both = request(
        "rl",
        vec![
            descriptor(&[("service", "service_1")]),
            descriptor(&[("service", "service_2")]),
        ],
    );
    let first = ask(&mut c, both.clone()).await;
    assert_eq!((overall(&first), codes(&first)), ("OK", vec!["OK", "OK"]));
    // service_1 is over, service_2 has room: OK, and service_1 says it is over.
    let second = ask(&mut c, both.clone()).await;
    assert_eq!(
        (overall(&second), codes(&second)),
        ("OK", vec!["OVER_LIMIT", "OK"])
    );
    // Both over: refused.
    let third = ask(&mut c, both).await;
    assert_eq!(
        (overall(&third), codes(&third)),
        ("OVER_LIMIT", vec!["OVER_LIMIT", "OVER_LIMIT"])
    );
    // A quota-mode descriptor beside an enforced one that is over: the enforced one refuses.
    let foo = descriptor(&[("foo", "x")]);
    for _ in 0..2 {
        ask(&mut c, request("rl", vec![foo.clone()])).await;
    }
    let mixed = ask(
        &mut c,
        request("rl", vec![foo, descriptor(&[("service", "service_9")])]),
    )
    .await;
    assert_eq!(overall(&mixed), "OVER_LIMIT");
    gw.stop().await;
}

/// Two quota-mode limits of 2 a minute beside an enforced one of 10 and a shadow-mode one of 2.
const QUOTAS: &str = "domain: q
descriptors:
  - key: q1
    rate_limit: { name: q1, unit: minute, requests_per_unit: 2 }
    quota_mode: true
  - key: q2
    rate_limit: { name: q2, unit: minute, requests_per_unit: 2 }
    quota_mode: true
  - key: e
    rate_limit: { name: e, unit: minute, requests_per_unit: 10 }
  - key: s
    rate_limit: { name: s, unit: minute, requests_per_unit: 2 }
    shadow_mode: true
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_rule_spans_costs_and_descriptors_over_by_their_cost() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "quota_costs", QUOTAS, "").await;
    let mut c = client(&gw).await;
    let answer = |r: &RateLimitResponse| (overall(r), codes(r));
    // A cost of 5 is over q1 alone; q2 has room, so the request is OK, charged to q2.
    let q = |k, hits| with_hits(descriptor(&[(k, "u")]), hits);
    let costly = request("q", vec![q("q1", 5), q("q2", 1)]);
    for _ in 0..2 {
        let r = ask(&mut c, costly.clone()).await;
        assert_eq!(answer(&r), ("OK", vec!["OVER_LIMIT", "OK"]));
    }
    let r = ask(&mut c, costly).await;
    assert_eq!(answer(&r), ("OVER_LIMIT", vec!["OVER_LIMIT", "OVER_LIMIT"]));
    // Alone, a quota-mode descriptor over by its cost is every quota-mode one: refused.
    let r = ask(&mut c, request("q", vec![q("q1", 5)])).await;
    assert_eq!(answer(&r), ("OVER_LIMIT", vec!["OVER_LIMIT"]));

    // q1 (cost 2, with e) and q2 (cost 1) are in two cost groups, judged together.
    let w = |k, hits| with_hits(descriptor(&[(k, "w")]), hits);
    let split = request("q", vec![w("e", 2), w("q1", 2), w("q2", 1)]);
    let r = ask(&mut c, split.clone()).await;
    assert_eq!(answer(&r), ("OK", vec!["OK", "OK", "OK"]));
    // q1 over, q2 with room: OK, charged to e and q2.
    let r = ask(&mut c, split.clone()).await;
    assert_eq!(answer(&r), ("OK", vec!["OK", "OVER_LIMIT", "OK"]));
    // Both over: refused, and e's charge by the first group is taken back.
    let r = ask(&mut c, split).await;
    assert_eq!(
        (overall(&r), &codes(&r)[1..]),
        ("OVER_LIMIT", &["OVER_LIMIT"; 2][..])
    );
    let read = ask(&mut c, request("q", vec![w("e", 0)])).await;
    assert_eq!(read.statuses[0].limit_remaining, 10 - 4);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_a_cost_is_above_without_a_refusal_show_in_the_headers() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "quota_headers", QUOTAS, "headers = true").await;
    let mut c = client(&gw).await;
    let h = |k, hits| with_hits(descriptor(&[(k, "h")]), hits);
    // A shadow-mode limit alone, over by the cost: OK, nothing remaining, nothing to wait for.
    let r = ask(&mut c, request("q", vec![h("s", 5)])).await;
    assert_eq!((overall(&r), codes(&r)), ("OK", vec!["OK"]));
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"s\";q=2;w=60"));
    assert_eq!(header(&r, "ratelimit"), Some("\"s\";r=0;t=60"));
    assert_eq!(header(&r, "retry-after"), None);
    // Beside limits a cost fits, the policy lists every limit the request is under.
    let all = vec![h("e", 1), h("s", 5), h("q1", 5), h("q2", 1)];
    let r = ask(&mut c, request("q", all)).await;
    let answer = (overall(&r), codes(&r));
    assert_eq!(answer, ("OK", vec!["OK", "OK", "OVER_LIMIT", "OK"]));
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"e\";q=10;w=60, \"q2\";q=2;w=60, \"s\";q=2;w=60, \"q1\";q=2;w=60")
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_limit_counts_a_request_a_quota_limit_over_lets_through() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "quota_shadow", QUOTAS, "").await;
    let mut c = client(&gw).await;
    let v = |k| descriptor(&[(k, "v")]);
    let all = request("q", vec![v("q1"), v("q2"), v("s")]);
    let r = ask(&mut c, all.clone()).await;
    assert_eq!((overall(&r), codes(&r)), ("OK", vec!["OK"; 3]));
    // q1 alone takes its last unit: over from now on.
    ask(&mut c, request("q", vec![v("q1")])).await;
    // q1 over, q2 with room: the request goes on, and s counts it as q2 does.
    let r = ask(&mut c, all).await;
    assert_eq!(
        (overall(&r), codes(&r)),
        ("OK", vec!["OVER_LIMIT", "OK", "OK"])
    );
    let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, vec![0, 0, 0], "q1 over, q2 and s at 2 of 2");
    let read = ask(&mut c, request("q", vec![with_hits(v("s"), 0)])).await;
    assert_eq!(
        read.statuses[0].limit_remaining, 0,
        "s counted both requests"
    );
    gw.stop().await;
}

/// Two shadow-mode limits and an enforced one.
const SHADOWS: &str = "domain: t
descriptors:
  - key: s1
    rate_limit: { name: s1, unit: minute, requests_per_unit: 2 }
    shadow_mode: true
  - key: s2
    rate_limit: { name: s2, unit: minute, requests_per_unit: 10 }
    shadow_mode: true
  - key: e
    rate_limit: { name: e, unit: minute, requests_per_unit: 1 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_answer_gives_back_only_what_was_charged() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "shadow_refund", SHADOWS, "").await;
    let mut c = client(&gw).await;
    let t = |k, hits| with_hits(descriptor(&[(k, "t")]), hits);
    ask(&mut c, request("t", vec![t("s1", 2)])).await;
    ask(&mut c, request("t", vec![t("s2", 4)])).await;
    ask(&mut c, request("t", vec![t("e", 1)])).await;
    // s1 is over, so neither shadow-mode limit is charged (as if they were enforced); then e
    // refuses the request: s2 shows the 6 it has, not 6 plus a cost it was never charged.
    let r = ask(
        &mut c,
        request("t", vec![t("s1", 2), t("s2", 2), t("e", 1)]),
    )
    .await;
    assert_eq!(
        (overall(&r), codes(&r)),
        ("OVER_LIMIT", vec!["OK", "OK", "OVER_LIMIT"])
    );
    assert_eq!(r.statuses[1].limit_remaining, 6, "s2: 4 of 10 used");
    let read = ask(&mut c, request("t", vec![t("s2", 0)])).await;
    assert_eq!(read.statuses[0].limit_remaining, 6);
    gw.stop().await;
}
