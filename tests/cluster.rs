//! Redis Cluster: every key of one decision shares a hash tag (no CROSSSLOT), keys spread over
//! the nodes, limits stay exact, scripts come back after a flush on one node, and batch
//! decisions are pipelined across nodes.

mod support;

use http::Method;
use support::cluster::RedisCluster;
use support::gateway::{self, config, TOKEN};
use support::http::HttpClient;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_exact_across_cluster_nodes() {
    let cluster = RedisCluster::start();
    let up = upstream::start().await;
    let store = format!("backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"500ms\"\non_error = \"deny\"", cluster.url(), unique_prefix("cluster"));
    let cfg = config(&store, &up.url(), ROUTES).replace(
        "listen = \"127.0.0.1:0\"\n\n[admin]",
        "listen = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[admin]",
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
    let per_node: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|n| n.cmd(&["DBSIZE"]).int())
        .collect();
    assert_eq!(
        per_node.iter().sum::<i64>(),
        40,
        "two sorted sets per client: {per_node:?}"
    );
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys spread over every node: {per_node:?}"
    );

    // A flushed script on one node is loaded again, invisibly.
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
