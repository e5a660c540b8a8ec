//! Who is refused now, on every route and instance: two gateways on one Redis list the same
//! refused keys for a `reject` route, a forward-auth route and an `[rls]` domain (found without
//! `value=`, refused on either instance), and a key lifted on one is gone from both lists.
//! A shadow-mode rate limit's breaches are not listed, nor a shadow route's; a delay route's
//! refused keys are. Only refusals write the index: an
//! allowed request adds nothing, each refusal that reaches Redis adds one index update, and
//! the deny cache's answers add none. A domain's key is listed while its rate limit refuses an
//! attempt now, not for as long as its refusal was recorded.

use crate::support;

use std::collections::BTreeSet;

use http::Method;
use serde_json::Value;
use support::admin::auth;
use support::gateway::Gateway;
use support::http::HttpClient;
use support::redis::{RedisServer, Resp};
use support::rls::{self, ask, descriptor, overall, request, with_hits};
use support::unique_prefix;

const ROUTES: &str = r#"
[[routes]]
name = "otp"
path = "/otp"
upstream = "up"
key = ["header:x-phone"]
  [[routes.limits]]
  name = "per-phone"
  limit = 1
  window = "1m"

[[routes]]
name = "login-check"
path = "/api/login"
key = ["header:x-user"]
  [[routes.limits]]
  name = "per-user"
  limit = 1
  window = "1m"

[forward_auth]
listen = "127.0.0.1:0"
"#;

const EDGE: &str = r#"
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: shadowed
    rate_limit: { unit: minute, requests_per_unit: 1 }
    shadow_mode: true
"#;

/// How many index updates Redis ran (refusals recorded): `PTTL` runs twice for each (the index
/// and its instants), and nowhere else in the decision code.
fn index_updates(redis: &RedisServer) -> u64 {
    let Resp::Bulk(Some(stats)) = redis.cmd(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats")
    };
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_pttl:calls="))
        .and_then(|v| v.split(',').next())
        .map_or(0, |v| v.parse::<u64>().unwrap() / 2)
}

/// `GET /admin/blocked?route=R` on `gw`: each listed key with its limit and reason.
async fn listed(gw: &Gateway, route: &str) -> Vec<(String, String, String)> {
    let (k, v) = auth();
    let r = HttpClient::default()
        .get(
            &gw.admin(&format!("/admin/blocked?route={route}")),
            &[(k, &v)],
        )
        .await;
    assert_eq!(r.status, 200, "{route}: {}", r.body);
    let answer = r.json();
    assert_eq!(answer["route"], route);
    let text = |e: &Value, f: &str| e[f].as_str().unwrap().to_string();
    answer["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let wait = e["retry_after_ms"].as_u64().unwrap();
            assert!((1..=60_000).contains(&wait), "{e}");
            (text(e, "key"), text(e, "limit"), text(e, "reason"))
        })
        .collect()
}

fn keys(list: &[(String, String, String)]) -> BTreeSet<&str> {
    list.iter().map(|(k, _, _)| k.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_list_the_same_refused_keys_on_every_kind_of_route() {
    let redis = RedisServer::start();
    let toml = rls::config(&redis, &unique_prefix("refused"), "", ROUTES);
    let files = [("edge.yaml", EDGE)];
    let (gw1, gw2) = (
        rls::start(&toml, &files).await,
        rls::start(&toml, &files).await,
    );
    let client = HttpClient::default();
    let otp = |gw: &Gateway, phone: &'static str| {
        let (client, url) = (client.clone(), gw.url("/otp"));
        async move { client.status(&url, &[("x-phone", phone)]).await }
    };
    let login = |gw: &Gateway, user: &'static str| {
        let url = format!("http://{}/auth", gw.running().forward_auth_addr.unwrap());
        let client = client.clone();
        async move {
            let h = [
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/api/login"),
                ("x-user", user),
            ];
            client.get(&url, &h).await.status
        }
    };

    // Allowed requests (the upstream is down: 502, but decided and charged) write nothing.
    assert_eq!(otp(&gw1, "0811").await, 502);
    assert_eq!(login(&gw1, "alice").await, 200);
    assert_eq!(
        index_updates(&redis),
        0,
        "an allowed request writes no index"
    );

    // Refusals, on both instances.
    assert_eq!(otp(&gw1, "0811").await, 429);
    assert_eq!(otp(&gw2, "0822").await, 502);
    assert_eq!(otp(&gw2, "0822").await, 429);
    assert_eq!(login(&gw1, "alice").await, 429);
    assert_eq!(login(&gw2, "bob").await, 200);
    assert_eq!(login(&gw2, "bob").await, 429);
    let mut rls1 = rls::client(&gw1).await;
    let carol = request("edge", vec![descriptor(&[("user", "carol")])]);
    assert_eq!(overall(&ask(&mut rls1, carol.clone()).await), "OK");
    assert_eq!(overall(&ask(&mut rls1, carol.clone()).await), "OVER_LIMIT");
    let mut rls2 = rls::client(&gw2).await;
    let dave = request("edge", vec![descriptor(&[("shadowed", "dave")])]);
    for _ in 0..2 {
        assert_eq!(overall(&ask(&mut rls2, dave.clone()).await), "OK", "shadow");
    }
    assert_eq!(
        index_updates(&redis),
        5,
        "one index update per refusal that reached Redis (none for a shadow breach)"
    );
    // Repeats answered by each instance's deny cache write nothing.
    for _ in 0..5 {
        assert_eq!(otp(&gw1, "0811").await, 429);
        assert_eq!(login(&gw2, "bob").await, 429);
        assert_eq!(overall(&ask(&mut rls1, carol.clone()).await), "OVER_LIMIT");
    }
    assert_eq!(index_updates(&redis), 5, "deny-cache hits write no index");

    // Every instance lists the same keys, found without naming them.
    for (route, expected, limit) in [
        ("otp", vec!["0811", "0822"], "per-phone"),
        ("login-check", vec!["alice", "bob"], "per-user"),
        ("edge", vec!["carol"], "user"),
    ] {
        let (one, two) = (listed(&gw1, route).await, listed(&gw2, route).await);
        assert_eq!(one, two, "{route}: the same on both instances");
        assert_eq!(
            keys(&one),
            expected.into_iter().collect(),
            "{route}: {one:?}"
        );
        for (_, l, reason) in &one {
            assert_eq!((l.as_str(), reason.as_str()), (limit, "window"), "{route}");
        }
    }
    // One key of a domain, asked of every rate limit of it (no `limit` named).
    let (k, v) = auth();
    for (key, expected) in [("carol", vec!["user"]), ("nobody", vec![])] {
        let url = gw2.admin(&format!("/admin/blocked?route=edge&key={key}"));
        let r = client.get(&url, &[(k, &v)]).await;
        assert_eq!(r.status, 200, "{key}: {}", r.body);
        let answer = r.json();
        assert_eq!(answer["route"], "edge");
        let limits: Vec<&str> = (answer["blocked"].as_array().unwrap().iter())
            .map(|e| e["limit"].as_str().unwrap())
            .collect();
        assert_eq!(limits, expected, "{key}: {answer}");
    }
    // A domain's usage without `limit` asks every rate limit of it, as a route's asks every
    // limit; without a key, the answer says what to give, not "no route".
    let url = gw2.admin("/admin/usage?route=edge&key=carol");
    let r = client.get(&url, &[(k, &v)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["limits"][0]["name"], "user", "{}", r.body);
    let url = gw2.admin("/admin/usage?route=edge");
    let r = client.get(&url, &[(k, &v)]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("`limit` names which"), "{}", r.body);

    // Latest-ending first: 0822 was refused after 0811.
    assert_eq!(listed(&gw1, "otp").await[0].0, "0822");

    // Lifted on one instance, gone from both lists.
    let (k, v) = auth();
    for (route, key) in [("otp", "0811"), ("edge&limit=user", "carol")] {
        let url = gw2.admin(&format!("/admin/usage?route={route}&key={key}"));
        let lifted = client.send(Method::DELETE, &url, &[(k, &v)], "").await;
        assert_eq!(lifted.status, 200, "{}", lifted.body);
    }
    for gw in [&gw1, &gw2] {
        assert_eq!(keys(&listed(gw, "otp").await), BTreeSet::from(["0822"]));
        assert!(listed(gw, "edge").await.is_empty());
    }
    assert_eq!(otp(&gw1, "0811").await, 502, "lifted: let through");
}

/// The same listing where the decision cannot write the index itself (a Redis Cluster: the
/// index lives on its own node, so the gateway records the refusal after the call) and on the
/// memory store (its twin of the script): refused keys of a `reject` route are listed, on a
/// cluster by both gateways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_and_the_memory_store_list_refused_keys_too() {
    use support::cluster::RedisCluster;
    use support::gateway::{config, redis_store};
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = support::upstream::start().await;
    let routes = &ROUTES[..ROUTES.find("[[routes]]\nname = \"login-check\"").unwrap()];
    let on_cluster = config(
        &redis_store(&cluster.url(), &unique_prefix("refused-cluster")),
        &up.url(),
        routes,
    );
    let on_memory = config("backend = \"memory\"", &up.url(), routes);
    let (a, b) = (
        support::gateway::start(&on_cluster).await,
        support::gateway::start(&on_cluster).await,
    );
    let memory = support::gateway::start(&on_memory).await;
    let client = HttpClient::default();
    let phones = ["0811", "0822", "0833", "0844"];
    for (gw, phone) in [
        (&a, phones[0]),
        (&b, phones[1]),
        (&a, phones[2]),
        (&memory, phones[3]),
    ] {
        let who = [("x-phone", phone)];
        assert_eq!(client.status(&gw.url("/otp"), &who).await, 200);
        assert_eq!(client.status(&gw.url("/otp"), &who).await, 429);
    }
    // On a cluster the index is written after the call, off the request's path: bounded wait.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let expected = BTreeSet::from(["0811", "0822", "0833"]);
    loop {
        let (one, two) = (listed(&a, "otp").await, listed(&b, "otp").await);
        if keys(&one) == expected && one == two {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{one:?} / {two:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        keys(&listed(&memory, "otp").await),
        BTreeSet::from(["0844"])
    );
}

/// A `delay` route refuses too (a 429 once the wait would pass `max_delay`): its refused key is
/// listed as any other. A `shadow` route refuses no one: nothing is listed, also when one key
/// is asked about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_route_lists_its_refused_keys_and_a_shadow_route_none() {
    let up = support::upstream::start().await;
    let routes = r#"
[[routes]]
name = "paced"
path = "/paced"
upstream = "up"
key = ["header:x-user"]
on_exceed = "delay"
max_delay = "100ms"
  [[routes.limits]]
  name = "per-user"
  limit = 1
  window = "1m"

[[routes]]
name = "dry-run"
path = "/dry-run"
upstream = "up"
key = ["header:x-user"]
on_exceed = "shadow"
  [[routes.limits]]
  name = "per-user"
  limit = 1
  window = "1m"
"#;
    let gw = support::gateway::start(&support::gateway::config(
        "backend = \"memory\"",
        &up.url(),
        routes,
    ))
    .await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for path in ["/paced", "/paced", "/dry-run", "/dry-run"] {
        statuses.push(client.status(&gw.url(path), &[("x-user", "erin")]).await);
    }
    assert_eq!(statuses, [200, 429, 200, 200]);
    assert_eq!(
        listed(&gw, "paced").await,
        [("erin".into(), "per-user".into(), "window".into())]
    );
    assert!(listed(&gw, "dry-run").await.is_empty());
    let (k, v) = auth();
    let url = gw.admin("/admin/blocked?route=dry-run&key=erin");
    let asked = client.get(&url, &[(k, &v)]).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert_eq!(
        asked.json()["blocked"],
        serde_json::json!([]),
        "{}",
        asked.body
    );
}

/// A domain's key refused at a cost its window had no room for, but with room for one more
/// attempt, is not refused now: the listing asks each recorded key again, as a route's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_lists_only_keys_its_rate_limits_refuse_now() {
    const GROW: &str = "domain: grow
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
";
    let redis = RedisServer::start();
    let toml = rls::config(&redis, &unique_prefix("refused-now"), "", ROUTES);
    let gw = rls::start(&toml, &[("grow.yaml", GROW)]).await;
    let mut c = rls::client(&gw).await;
    let user = |name, hits| request("grow", vec![with_hits(descriptor(&[("user", name)]), hits)]);
    assert_eq!(overall(&ask(&mut c, user("carol", 2)).await), "OK");
    assert_eq!(overall(&ask(&mut c, user("dave", 3)).await), "OK");
    // carol: 2 + 2 is over 3, yet 1 more fits; dave: full
    assert_eq!(overall(&ask(&mut c, user("carol", 2)).await), "OVER_LIMIT");
    assert_eq!(overall(&ask(&mut c, user("dave", 1)).await), "OVER_LIMIT");
    assert_eq!(index_updates(&redis), 2, "both refusals are recorded");
    assert_eq!(keys(&listed(&gw, "grow").await), BTreeSet::from(["dave"]));
    assert_eq!(overall(&ask(&mut c, user("carol", 1)).await), "OK");
}
