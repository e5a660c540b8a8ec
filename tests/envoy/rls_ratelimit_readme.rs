//! The configuration examples of envoyproxy/ratelimit's README, as facts: each file loads, and
//! decides as that README describes, apart from the two differences slidegate makes on
//! purpose (windows slide; a request's descriptors are charged together or not at all).

use crate::support;

use support::redis::RedisServer;
use support::rls::*;
use support::unique_prefix;

const EXAMPLES: &[(&str, &str)] = &[
    (
        "1.yaml",
        "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n",
    ),
    (
        "2.yaml",
        "domain: messaging\ndescriptors:\n  # Only allow 5 marketing messages a day\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit:\n          unit: day\n          requests_per_unit: 5\n\n  # Only allow 100 messages a day to any unique phone number\n  - key: to_number\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    ),
    (
        "3.yaml",
        "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n\n  # Black list IP\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n",
    ),
    (
        "4.yaml",
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    descriptors:\n      - key: subkey\n        rate_limit:\n          requests_per_unit: 300\n          unit: second\n",
    ),
    (
        "5.yaml",
        "domain: internal\ndescriptors:\n  - key: ldap\n    rate_limit:\n      unlimited: true\n\n  - key: azure\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n",
    ),
    (
        "6.yaml",
        "domain: example6\ndescriptors:\n  - key: service\n    descriptors:\n      - key: user\n        value: user-a\n        rate_limit:\n          requests_per_unit: 10\n          unit: second\n        shadow_mode: true\n      - key: user\n        value: user-b\n        rate_limit:\n          requests_per_unit: 20\n          unit: second\n",
    ),
    (
        "7.yaml",
        "domain: example7\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          name: specific_limit\n          requests_per_unit: 5\n          unit: second\n  - key: key_2\n    value: value_2\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          replaces:\n            - name: specific_limit\n          requests_per_unit: 10\n          unit: second\n",
    ),
    (
        "8.yaml",
        "domain: example8\ndescriptors:\n  - key: key1\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "9a.yaml",
        "domain: example9a\ndescriptors:\n  - key: key1\n    value: value*\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "9b.yaml",
        "domain: example9b\ndescriptors:\n  - key: path\n    value: /api/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "9c.yaml",
        "domain: example9c\ndescriptors:\n  - key: route\n    value: /api/*/resource/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "10.yaml",
        "domain: example10\ndescriptors:\n  - key: route\n    value_to_metric: true\n    descriptors:\n      - key: http_method\n        value_to_metric: true\n        descriptors:\n          - key: subject_id\n            rate_limit:\n              unit: minute\n              requests_per_unit: 60\n",
    ),
    (
        "11.yaml",
        "domain: example11\ndescriptors:\n  # With share_threshold: true, all files/* matches share the same threshold\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n\n  # Without share_threshold, each files_no_share/* match has its own isolated threshold\n  - key: files_no_share\n    value: files_no_share/*\n    share_threshold: false\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_decide_as_described() {
    let redis = RedisServer::start();
    let gw = start(
        &config(&redis, &unique_prefix("rls-readme"), "", ""),
        EXAMPLES,
    )
    .await;
    let mut c = client(&gw).await;
    let one = |domain: &str, entries: &[(&str, &str)]| request(domain, vec![descriptor(entries)]);

    // 1: two values of one key, 500 a second each; another value is not limited.
    let users = ask(&mut c, one("mongo_cps", &[("database", "users")])).await;
    assert_eq!(current_limit(&users.statuses[0]), Some(500));
    let orders = ask(&mut c, one("mongo_cps", &[("database", "orders")])).await;
    assert_eq!(orders.statuses[0].current_limit, None);

    // 2: 5 marketing messages a day per number, 100 messages per number; both at once.
    let send = request(
        "messaging",
        vec![
            descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]),
            descriptor(&[("to_number", "2061111111")]),
        ],
    );
    let answers = overall_codes(&mut c, &send, 7).await;
    assert_eq!(
        answers,
        ["OK", "OK", "OK", "OK", "OK", "OVER_LIMIT", "OVER_LIMIT"]
    );
    // Difference: the refused messages were not charged to the 100 a day (5 used, not 7).
    let r = ask(&mut c, one("messaging", &[("to_number", "2061111111")])).await;
    assert_eq!(r.statuses[0].limit_remaining, 94);
    let other = one(
        "messaging",
        &[("message_type", "marketing"), ("to_number", "2062222222")],
    );
    assert_eq!(overall(&ask(&mut c, other).await), "OK");

    // 3: 10 a second per address; 50.0.0.5 none at all.
    let ip = one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]);
    let codes10 = overall_codes(&mut c, &ip, 11).await;
    assert_eq!(&codes10[..10], ["OK"; 10]);
    assert_eq!(codes10[10], "OVER_LIMIT");
    let black = one("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]);
    assert_eq!(overall(&ask(&mut c, black).await), "OVER_LIMIT");

    // 4: the request's depth must be the tree's.
    let shallow = one("example4", &[("key", "value")]);
    assert_eq!(ask(&mut c, shallow).await.statuses[0].current_limit, None);
    let deep = one("example4", &[("key", "value"), ("subkey", "subvalue")]);
    assert_eq!(
        current_limit(&ask(&mut c, deep).await.statuses[0]),
        Some(300)
    );

    // 5: unlimited is OK with LimitRemaining 2^32-1; azure 100 a minute.
    let ldap = ask(&mut c, one("internal", &[("ldap", "x")])).await;
    assert_eq!(
        (overall(&ldap), ldap.statuses[0].limit_remaining),
        ("OK", u32::MAX)
    );
    let azure = ask(&mut c, one("internal", &[("azure", "x")])).await;
    assert_eq!(current_limit(&azure.statuses[0]), Some(100));

    // 6: user-a is never limited (shadow mode); user-b is, at 20.
    let a = one(
        "example6",
        &[("service", "auth-service"), ("user", "user-a")],
    );
    assert_eq!(overall_codes(&mut c, &a, 12).await, ["OK"; 12]);
    let b = one(
        "example6",
        &[("service", "auth-service"), ("user", "user-b")],
    );
    let codes_b = overall_codes(&mut c, &b, 21).await;
    assert_eq!(
        (&codes_b[..20], codes_b[20]),
        (&["OK"; 20][..], "OVER_LIMIT")
    );

    // 7: with both descriptors only the replacing limit (10) applies.
    let both = request(
        "example7",
        vec![
            descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]),
            descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]),
        ],
    );
    let r = ask(&mut c, both).await;
    assert_eq!(
        (
            r.statuses[0].current_limit.clone(),
            current_limit(&r.statuses[1])
        ),
        (None, Some(10))
    );

    // 8: an unspecified value gets 10, value1 20 (detailed_metric is accepted).
    let any = ask(&mut c, one("example8", &[("key1", "unspecified_value")])).await;
    let v1 = ask(&mut c, one("example8", &[("key1", "value1")])).await;
    assert_eq!(
        (
            current_limit(&any.statuses[0]),
            current_limit(&v1.statuses[0])
        ),
        (Some(10), Some(20))
    );

    // 9: trailing, middle and several wildcards.
    let limited = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0].current_limit.is_some()
    };
    for (domain, key, value, expected) in [
        ("example9a", "key1", "valueXYZ", true),
        ("example9a", "key1", "other", false),
        ("example9b", "path", "/api/123/action", true),
        ("example9b", "path", "/api/123/other", false),
        ("example9c", "route", "/api/v1/resource/123/action", true),
        ("example9c", "route", "/api/v1/other/123/action", false),
    ] {
        let r = ask(&mut c, one(domain, &[(key, value)])).await;
        assert_eq!(limited(&r), expected, "{domain} {value}");
    }

    // 10: three levels, any values (value_to_metric is accepted).
    let subject = one(
        "example10",
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
    );
    assert_eq!(
        current_limit(&ask(&mut c, subject).await.statuses[0]),
        Some(60)
    );

    // 11: files/* share one threshold of 10; files_no_share/* each have their own.
    for (i, name) in ["a.pdf", "b.csv", "c.txt", "d", "e", "f", "g", "h", "i", "j"]
        .iter()
        .enumerate()
    {
        let r = ask(
            &mut c,
            one("example11", &[("files", &format!("files/{name}"))]),
        )
        .await;
        assert_eq!(overall(&r), "OK", "file {i}");
    }
    let shared = ask(&mut c, one("example11", &[("files", "files/k")])).await;
    assert_eq!(overall(&shared), "OVER_LIMIT");
    for _ in 0..10 {
        ask(
            &mut c,
            one("example11", &[("files_no_share", "files_no_share/a.pdf")]),
        )
        .await;
    }
    let a = ask(
        &mut c,
        one("example11", &[("files_no_share", "files_no_share/a.pdf")]),
    )
    .await;
    let b = ask(
        &mut c,
        one("example11", &[("files_no_share", "files_no_share/b.csv")]),
    )
    .await;
    assert_eq!((overall(&a), overall(&b)), ("OVER_LIMIT", "OK"));
}
