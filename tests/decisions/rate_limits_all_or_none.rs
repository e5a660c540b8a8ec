//! A request is charged to every limit of its route or to none, end to end. The test reads Redis
//! through the documented layout (`src/store/layout.rs`): one sorted set
//! `<prefix>:{<route>|<key>}#log` for a route's `sliding_log` limits that count the same key (a
//! limit with a key of its own has its own, `{<route>~<hex>|<key>}`).

use crate::support;

use support::gateway::TOKEN;
use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{observe, unique_prefix, upstream};

/// A request is charged to every limit of its route or to none. `r1`'s limits count two keys
/// (the route's `ip`, and `big`'s own `method`), so they live in two sorted sets: the requests
/// `small` refuses must leave `big`'s set alone. `r2`'s two limits count the same key, so they
/// share ONE sorted set, which records each allowed request once whatever the number of limits
/// and the refused ones not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rejected_by_one_limit_charges_none_of_the_others() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let prefix = unique_prefix("atomic");
    let r1 = route("r1", "\"ip\"", "", &[("small", 2, "1m"), ("big", 5, "1h")]).replace(
        "  name = \"big\"\n",
        "  name = \"big\"\n  key = [\"method\"]\n",
    );
    // r2 must match before the catch-all r1.
    let r2 = route(
        "r2",
        "\"ip\"",
        "",
        &[("roomy", 10, "1m"), ("tight", 3, "1h")],
    )
    .replace("path = \"/*\"", "path = \"/two/*\"");
    let gw = on_redis(&redis, &prefix, &up.url(), &format!("{r2}\n{r1}")).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(client.get(&gw.url("/one"), &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    let zcard = |key: &str| redis.cmd(&["ZCARD", key]).int();
    let r1_sets = observe::keys(&redis, &prefix);
    let route_set = format!("{prefix}:{{r1|127.0.0.1}}#log");
    let big_set = r1_sets
        .iter()
        .find(|k| k.starts_with(&format!("{prefix}:{{r1~")) && k.ends_with("|GET}#log"))
        .unwrap_or_else(|| panic!("no sorted set for `big`'s own key: {r1_sets:?}"));
    assert_eq!(zcard(&route_set), 2, "{r1_sets:?}");
    assert_eq!(
        zcard(big_set),
        2,
        "rejections by `small` must not charge `big`"
    );
    let usage = client
        .get(
            &gw.admin("/admin/usage?route=r1&limit=big&key=GET"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await
        .json();
    assert_eq!(usage["limits"][0]["name"], "big", "{usage}");
    assert_eq!(usage["limits"][0]["used"], 2, "{usage}");

    for _ in 0..5 {
        client.get(&gw.url("/two/x"), &[]).await;
    }
    let r2_set = format!("{prefix}:{{r2|127.0.0.1}}#log");
    let r2_keys: Vec<String> = observe::keys(&redis, &prefix)
        .into_iter()
        .filter(|k| k.starts_with(&format!("{prefix}:{{r2")))
        .collect();
    assert_eq!(
        r2_keys,
        std::slice::from_ref(&r2_set),
        "both limits of r2 count the same key: one sorted set"
    );
    assert_eq!(
        zcard(&r2_set),
        3,
        "each allowed request recorded once, the 2 refused by `tight` not at all"
    );
    let usage = client
        .get(
            &gw.admin("/admin/usage?route=r2&key=127.0.0.1"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await
        .json();
    let used: Vec<(&str, u64)> = usage["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["used"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        used,
        [("roomy", 3), ("tight", 3)],
        "rejections by `tight` must not charge `roomy`"
    );
}
