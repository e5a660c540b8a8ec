//! Redis Cluster (README, "Which algorithm" and "Protecting OTP and login endpoints"): every key of one decision shares a hash tag (no
//! CROSSSLOT), keys spread over the nodes, limits stay exact, the script comes back after a flush,
//! and batch decisions are pipelined across nodes. A request whose limits count keys of their
//! own that live on different nodes is decided one part per slot: a rejection by either limit
//! leaves no charge on any node, an allowed request is charged under both keys, and each limit
//! stays exact for its own key.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use http::Method;
use support::cluster::RedisCluster;
use support::gateway::{self, config, TOKEN};
use support::http::HttpClient;
use support::observe::keys;
use support::{unique_prefix, upstream};

const ROUTES: &str = r#"
[[routes]]
name = "per-client"
path = "/*"
upstream = "up"
key = ["ip", "method"]
  [[routes.limits]]
  name = "per-minute"
  limit = 3
  window = "1m"
  [[routes.limits]]
  name = "per-hour"
  limit = 10
  window = "1h"
"#;

/// A `[store]` on `cluster`, failing closed (a store error is a 503, never a pass).
fn store(cluster: &RedisCluster, prefix: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"500ms\"\non_error = \"deny\"",
        cluster.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_exact_across_cluster_nodes() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("cluster");
    let cfg = gateway::with_server(
        &config(&store(&cluster, &prefix), &up.url(), ROUTES),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    );
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    for client_no in 0..20 {
        let ip = format!("198.51.100.{client_no}");
        let mut codes = Vec::new();
        for _ in 0..5 {
            codes.push(
                client
                    .get(&gw.url("/x"), &[("x-forwarded-for", &ip)])
                    .await
                    .status
                    .as_u16(),
            );
        }
        assert_eq!(codes, [200, 200, 200, 429, 429], "client {ip}");
    }
    // Both limits count the client's key with sliding_log: ONE sorted set per client, on the
    // node serving its hash tag, holding each allowed request once.
    let mut per_node = [0; 3];
    for client_no in 0..20 {
        let key = format!("{prefix}:{{per-client|198.51.100.{client_no}|GET}}#log");
        let node = cluster.node_of(&key);
        per_node[node] += 1;
        assert_eq!(
            cluster.nodes[node].cmd(&["ZCARD", &key]).int(),
            3,
            "{key} on node {node}"
        );
    }
    // And the route's refusal index (`/admin/blocked`) on the node of its own slot, naming each
    // refused client once; written after the call (it lives on another node than the
    // decisions' keys), so within a bounded wait.
    let index = format!("{prefix}:blocked:{{per-client}}");
    let index_node = cluster.node_of(&index);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while cluster.nodes[index_node].cmd(&["ZCARD", &index]).int() < 20 {
        assert!(std::time::Instant::now() < deadline, "the refusal index");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(cluster.nodes[index_node].cmd(&["ZCARD", &index]).int(), 20);
    // and, beside it in the same slot, each refusal's instant (which lists them newest first)
    let instants = format!("{index}:at");
    assert_eq!(
        cluster.nodes[index_node].cmd(&["HLEN", &instants]).int(),
        20
    );
    per_node[index_node] += 2;
    let dbsize: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|n| n.cmd(&["DBSIZE"]).int())
        .collect();
    assert_eq!(
        dbsize.to_vec(),
        per_node.to_vec(),
        "one sorted set per client, the refusal index and its instants, and nothing else"
    );
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys spread over every node: {per_node:?}"
    );

    // A flushed script on every node is loaded again, invisibly.
    for node in &cluster.nodes {
        node.cmd(&["SCRIPT", "FLUSH"]);
    }
    for client_no in 20..30 {
        let ip = format!("198.51.100.{client_no}");
        assert_eq!(
            client
                .get(&gw.url("/x"), &[("x-forwarded-for", &ip)])
                .await
                .status,
            200
        );
    }

    // Batch decisions over keys on every node, in request order.
    let keys: Vec<String> = (0..500).map(|i| format!("user-{i}")).collect();
    let body = serde_json::json!({"route": "per-client", "keys": keys}).to_string();
    let auth = format!("Bearer {TOKEN}");
    let reply = client
        .send(
            Method::POST,
            &gw.admin("/v1/decisions"),
            &[("authorization", &auth)],
            &body,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let results = reply.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 500);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["key"], format!("user-{i}"));
        assert_eq!(r["allowed"], true, "{r}");
        assert_eq!(r["remaining"], 2);
    }
}

/// the README's "Protecting OTP and login endpoints"'s "a key per limit": per user (the route's key) and per phone (a key of its
/// own), failing closed.
const PER_USER_AND_PHONE: &str = r#"
[[routes]]
name = "otp"
path = "/*"
upstream = "up"
key = ["header:X-User"]
on_error = "deny"
  [[routes.limits]]
  name = "per-user"
  limit = 3
  window = "1m"
  [[routes.limits]]
  name = "per-phone"
  key = ["header:X-Phone"]
  limit = 2
  window = "1m"
"#;

/// One OTP request: its status and, for a 429, the limit its body names.
async fn otp(client: &HttpClient, url: &str, user: &str, phone: &str) -> (u16, Option<String>) {
    let r = client
        .get(url, &[("x-user", user), ("x-phone", phone)])
        .await;
    let status = r.status.as_u16();
    assert!(status == 200 || status == 429, "{status}: {}", r.body);
    let limit = (status == 429).then(|| r.json()["limit"].as_str().unwrap().to_string());
    (status, limit)
}

/// Every `sliding_log` set under `prefix` on every node, with its units; each is on the node
/// serving its slot and on no other. (The route's refusal index, `<prefix>:blocked:{otp}`, is
/// left out.)
fn log_sets(cluster: &RedisCluster, prefix: &str) -> BTreeMap<String, i64> {
    let mut sets = BTreeMap::new();
    let index = format!("{prefix}:blocked:");
    for (i, node) in cluster.nodes.iter().enumerate() {
        for key in keys(node, prefix)
            .into_iter()
            .filter(|k| !k.starts_with(&index))
        {
            assert!(key.ends_with("#log"), "only sorted sets of the log: {key}");
            assert_eq!(cluster.node_of(&key), i, "{key} lives on its slot's node");
            let units = node.cmd(&["ZCARD", &key]).int();
            assert!(sets.insert(key, units).is_none(), "one node holds it");
        }
    }
    sets
}

/// A cluster and a gateway on it with the per-user and per-phone route, its keys under a
/// prefix made from `name`; one probe request shows the two keys of a request (the route's
/// `{otp|<user>}` and the phone limit's `{otp~<spec>|<phone>}`): the sets it left and the
/// phone limit's key tag.
async fn otp_cluster(
    name: &str,
) -> (
    RedisCluster,
    upstream::Upstream,
    gateway::Gateway,
    String,
    BTreeMap<String, i64>,
    String,
) {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix(name);
    let gw = gateway::start(&config(
        &store(&cluster, &prefix),
        &up.url(),
        PER_USER_AND_PHONE,
    ))
    .await;
    let (client, url) = (HttpClient::default(), gw.url("/otp"));
    assert_eq!(otp(&client, &url, "probe-user", "probe-phone").await.0, 200);
    let probe = log_sets(&cluster, &prefix);
    let phone_tag = probe
        .keys()
        .find_map(|k| k.strip_suffix("|probe-phone}#log"))
        .unwrap_or_else(|| panic!("no set of the phone limit: {probe:?}"))
        .to_string();
    (cluster, up, gw, prefix, probe, phone_tag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_split_over_nodes_is_charged_everywhere_or_nowhere() {
    let (cluster, _up, gw, prefix, probe, phone_tag) = otp_cluster("split").await;
    let client = HttpClient::default();
    let url = gw.url("/otp");
    let user_key = |user: &str| format!("{prefix}:{{otp|{user}}}#log");
    let phone_key = |phone: &str| format!("{phone_tag}|{phone}}}#log");
    assert_eq!(
        probe,
        BTreeMap::from([(user_key("probe-user"), 1), (phone_key("probe-phone"), 1)]),
        "an allowed request is charged under both keys, once each"
    );

    // Values whose key lives on another node than `other`'s.
    let elsewhere = |make: &dyn Fn(usize) -> String, key: &dyn Fn(&str) -> String, other: &str| {
        let node = cluster.node_of(other);
        let found: Vec<String> = (0..1000)
            .map(make)
            .filter(|v| cluster.node_of(&key(v)) != node)
            .take(12)
            .collect();
        assert_eq!(found.len(), 12);
        found
    };
    // Every charge each key must hold at the end.
    let mut expected: BTreeMap<String, i64> = probe.clone();
    let mut expect = |key: String, units: i64| {
        if units > 0 {
            expected.insert(key, units);
        }
    };

    // One phone, four users in turn: the phone limit refuses the last two, whose user parts
    // (decided on other nodes) are taken back.
    let phone = "phone-a";
    let users = elsewhere(&|i| format!("user-a{i}"), &user_key, &phone_key(phone));
    let mut seen = Vec::new();
    for user in &users[..4] {
        seen.push(otp(&client, &url, user, phone).await);
    }
    let phone_limit = Some("per-phone".to_string());
    assert_eq!(
        seen,
        [
            (200, None),
            (200, None),
            (429, phone_limit.clone()),
            (429, phone_limit.clone())
        ]
    );
    expect(phone_key(phone), 2);
    for (user, (status, _)) in users.iter().zip(&seen) {
        expect(user_key(user), (*status == 200) as i64);
    }

    // One user, five phones in turn: the user limit refuses the last two, whose phone parts
    // are taken back.
    let user = "user-b";
    let phones = elsewhere(&|i| format!("phone-b{i}"), &phone_key, &user_key(user));
    let mut seen = Vec::new();
    for phone in &phones[..5] {
        seen.push(otp(&client, &url, user, phone).await);
    }
    let user_limit = Some("per-user".to_string());
    assert_eq!(
        seen,
        [
            (200, None),
            (200, None),
            (200, None),
            (429, user_limit.clone()),
            (429, user_limit.clone())
        ]
    );
    expect(user_key(user), 3);
    for (phone, (status, _)) in phones.iter().zip(&seen) {
        expect(phone_key(phone), (*status == 200) as i64);
    }

    // At once: one phone with twelve users, and one user with twelve phones. Each limit stays
    // exact for its own key: exactly its limit gets through.
    let phone = "phone-c";
    let users = elsewhere(&|i| format!("user-c{i}"), &user_key, &phone_key(phone));
    let user = "user-d";
    let phones = elsewhere(&|i| format!("phone-d{i}"), &phone_key, &user_key(user));
    let mut burst = tokio::task::JoinSet::new();
    for (u, p) in users
        .iter()
        .map(|u| (u.clone(), phone.to_string()))
        .chain(phones.iter().map(|p| (user.to_string(), p.clone())))
    {
        let (client, url) = (client.clone(), url.clone());
        burst.spawn(async move {
            let (status, _) = otp(&client, &url, &u, &p).await;
            (u, p, status)
        });
    }
    let (mut by_phone_c, mut by_user_d) = (0, 0);
    while let Some(done) = burst.join_next().await {
        let (u, p, status) = done.unwrap();
        let allowed = (status == 200) as i64;
        if p == phone {
            by_phone_c += allowed;
            expect(user_key(&u), allowed);
        } else {
            by_user_d += allowed;
            expect(phone_key(&p), allowed);
        }
    }
    assert_eq!(
        (by_phone_c, by_user_d),
        (2, 3),
        "twelve users on one phone (limit 2), twelve phones for one user (limit 3)"
    );
    expect(phone_key(phone), 2);
    expect(user_key(user), 3);

    // The charges of refused requests are taken back in the background: wait (5 s at most)
    // until every node holds exactly the allowed requests' charges, and nothing else.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held = log_sets(&cluster, &prefix);
        if held == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "charges held across the nodes differ from the allowed requests':\nheld     {held:?}\nexpected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let allowed = 1 + 2 + 3 + 2 + 3;
    assert_eq!(
        expected.values().sum::<i64>(),
        2 * allowed,
        "every allowed request charged under both of its keys"
    );
}

/// Attempts in flight per user, and a window per team on keys of its own.
const INFLIGHT_PER_USER_AND_TEAM: &str = r#"
[[routes]]
name = "chat"
path = "/*"
upstream = "up"
key = ["header:X-User"]
on_error = "deny"
  [[routes.limits]]
  name = "inflight"
  limit = 1
  algorithm = "concurrency"
  [[routes.limits]]
  name = "per-team"
  key = ["header:X-Team"]
  limit = 1
  window = "1h"
"#;

/// Slots in flight on a cluster (README, "Limits on what is in flight"): a user's lease lives
/// on its slot's node, held while its answer streams and freed when it ends; a request whose
/// team (decided on another node) refuses it holds no slot there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_in_flight_are_taken_back_when_another_node_refuses() {
    use http_body_util::BodyExt;
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = support::llm::start().await;
    let prefix = unique_prefix("slots");
    let gw = gateway::start(&config(
        &store(&cluster, &prefix),
        &up.url(),
        INFLIGHT_PER_USER_AND_TEAM,
    ))
    .await;
    let client = HttpClient::default();
    let slots = |user: &str| {
        let key = format!("{prefix}:{{chat|{user}}}#inflight");
        cluster.nodes[cluster.node_of(&key)]
            .cmd(&["ZCARD", &key])
            .int()
    };
    let hold = |user: &'static str, team: &'static str| {
        let headers = [("x-user", user), ("x-team", team), ("x-hold", "1")];
        let url = gw.url("/v1/chat/completions");
        let client = client.clone();
        async move {
            client
                .open(Method::POST, &url, &headers, r#"{"stream":true}"#)
                .await
        }
    };
    // ann's answer streams: her lease is on her slot's node
    let mut held = hold("ann", "red").await;
    assert_eq!(held.status(), 200);
    held.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(slots("ann"), 1);
    // the team's window refuses users of every node: none of them keeps a slot
    for user in ["bob", "cat", "dan", "eve", "fay", "gus"] {
        let r = client
            .get(&gw.url("/x"), &[("x-user", user), ("x-team", "red")])
            .await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["limit"], "per-team");
        // the slot its own node charged is taken back in that lane's next call, which may
        // reach Redis just after the 429: within moments, long before a lease would expire
        // (the upstream's timeout plus 5 s)
        let taken_back = Instant::now() + Duration::from_secs(2);
        while slots(user) != 0 {
            assert!(Instant::now() < taken_back, "{user} still holds a slot");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    up.release(1);
    held.into_body().collect().await.unwrap();
    // freed once the answer has been sent: the release is queued on the gateway's lane before
    // the body's end, but reaches Redis in a call of its own, which this read straight from
    // the node can overtake (a read through the gateway's admin API queues behind it)
    support::leaving::until(|| slots("ann") == 0).await;
}

/// A burst from one user whose own limit is spent, all at a victim's phone number on another
/// node: the phone's part charges the first ones before the user's part refuses them all and
/// they are taken back, and refuses the rest on those charges. Such a refusal is kept in the
/// deny cache a moment only: a second later the victim's own request is decided by the store,
/// which holds no charge of the burst, and goes through (it was held for the phone's whole
/// window before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_refused_elsewhere_does_not_hold_a_victims_key_in_the_deny_cache() {
    let (cluster, _up, gw, prefix, _, phone_tag) = otp_cluster("phantom").await;
    let client = HttpClient::default();
    let url = gw.url("/otp");
    let phone = "victim-phone";
    let phone_node = cluster.node_of(&format!("{phone_tag}|{phone}}}#log"));
    // Attackers whose own key lives on another node than the phone's; three bursts, each of
    // which may leave refusals standing on charges taken back (a burst whose requests the
    // store met one by one leaves none).
    let attackers = (0..1000)
        .map(|i| format!("attacker-{i}"))
        .filter(|a| cluster.node_of(&format!("{prefix}:{{otp|{a}}}#log")) != phone_node)
        .take(3);
    for attacker in attackers {
        for i in 0..3 {
            let junk = format!("junk-{attacker}-{i}");
            assert_eq!(otp(&client, &url, &attacker, &junk).await.0, 200);
        }
        let burst = (0..20).map(|_| otp(&client, &url, &attacker, phone));
        let answers = futures_util::future::join_all(burst).await;
        assert!(answers.iter().all(|(s, _)| *s == 429), "{answers:?}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, limit) = otp(&client, &url, "victim", phone).await;
    assert_eq!(status, 200, "the victim refused by {limit:?}");
}
