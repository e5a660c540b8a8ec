//! `GET /admin/blocked` reads who is refused with dry runs of every listed key: on a store that
//! answers slower than a decision may wait (`store.timeout`), as under an attack, the listing
//! still answers within an admin operation's time.

use crate::support;

use support::admin::auth;
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const ROUTE: &str = r#"
[[routes]]
name = "otp"
path = "/otp"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_waits_an_admin_operations_time_not_a_decisions() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("blocked-slow"))
        .replace("timeout = \"200ms\"", "timeout = \"50ms\"");
    assert!(store.contains("timeout = \"50ms\""), "{store}");
    let toml = config(&store, &up.url(), ROUTE);
    let gw = gateway::start(&toml).await;
    let client = HttpClient::default();
    let user = [("x-user", "u1")];
    assert_eq!(client.status(&gw.url("/otp"), &user).await, 200);
    assert_eq!(client.status(&gw.url("/otp"), &user).await, 429);
    let (_, token) = auth();
    let url = gw.admin("/admin/blocked?route=otp");
    // Reads go on; the dry runs (script calls) wait up to 100 ms, beyond a decision's 50 ms
    // and within an admin operation's 200 ms.
    redis.cmd(&["CLIENT", "PAUSE", "100", "WRITE"]);
    let r = client.get(&url, &[("authorization", &token)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let blocked = r.json()["blocked"].clone();
    assert_eq!(blocked[0]["key"], "u1", "{blocked}");
}
