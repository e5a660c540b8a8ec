//! An admin reset on a Redis Cluster while the master holding the reset channel's slot (and the
//! route's refusal index) is down: the reset of a key served by another master is made, the
//! word to the other instances' deny caches goes out through a master that answers (in a
//! cluster every node carries a published message to every subscriber), and the index entry
//! left behind is checked against the store when listed, so `DELETE /admin/usage` answers 200,
//! not 503.

use crate::support;

use http::Method;
use serde_json::Value;
use slidegate::store::layout;
use support::admin::auth;
use support::cluster::RedisCluster;
use support::gateway::{config, redis_store};
use support::http::HttpClient;
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
  window = "1h"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_is_made_and_told_while_the_reset_channels_master_is_down() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = support::upstream::start().await;
    // A prefix whose reset channel shares its master with the route's refusal index: both are
    // out of reach once that master is down.
    let index_node = cluster.node_of(&layout::blocked_index("any", "otp"));
    let prefix = (0..)
        .map(|_| unique_prefix("reset-down"))
        .find(|prefix| cluster.node_of(&format!("{prefix}:reset")) == index_node)
        .unwrap();
    let gw = support::gateway::start(&config(
        &redis_store(&cluster.url(), &prefix),
        &up.url(),
        ROUTES,
    ))
    .await;
    let channel_node = cluster.node_of(&format!("{prefix}:reset"));
    // A phone whose keys live on another master than the channel.
    let phone = (0..)
        .map(|i| format!("08{i}"))
        .find(|phone| cluster.node_of(&layout::base(&prefix, "otp", "", phone)) != channel_node)
        .unwrap();
    let client = HttpClient::default();
    let who = [("x-phone", phone.as_str())];
    assert_eq!(client.status(&gw.url("/otp"), &who).await, 200);
    assert_eq!(client.status(&gw.url("/otp"), &who).await, 429);

    cluster.nodes[channel_node].kill();
    let url = gw.admin(&format!("/admin/usage?route=otp&key={phone}"));
    let (k, v) = auth();
    let lifted = client.send(Method::DELETE, &url, &[(k, &v)], "").await;
    assert_eq!(lifted.status.as_u16(), 200, "{}", lifted.body);
    let body: Value = serde_json::from_str(&lifted.body).unwrap();
    assert_eq!(body["reset"], true, "{body}");
}
