//! Key errors on the traffic path: a request missing a key part gets a 400 counted as
//! `bad_request`, or falls back to the client IP where the route says so, with a fallback key no
//! client value can equal.

use crate::support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_parts_get_400_or_fall_back_to_the_ip() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "strict"
path = "/strict"
upstream = "up"
key = ["header:X-Api-Key"]
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
[[routes]]
name = "lenient"
path = "/lenient"
upstream = "up"
key = ["query:user", "method"]
on_missing_key = "ip"
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let r = client.get(&gw.url("/strict"), &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing_key");
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k1")])
            .await,
        200
    );
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k1")])
            .await,
        429
    );
    assert_eq!(
        client
            .status(&gw.url("/strict"), &[("x-api-key", "k2")])
            .await,
        200
    );
    assert_eq!(client.status(&gw.url("/lenient"), &[]).await, 200);
    assert_eq!(
        client.status(&gw.url("/lenient"), &[]).await,
        429,
        "both fell back to 127.0.0.1|GET"
    );
    assert_eq!(client.status(&gw.url("/lenient?user=ann"), &[]).await, 200);
    // The fallback is marked: no value a client sends is the fallback's key.
    for spoof in ["127.0.0.1", "%25ip%3A127.0.0.1"] {
        assert_eq!(
            client
                .status(&gw.url(&format!("/lenient?user={spoof}")), &[])
                .await,
            200,
            "user={spoof} is not the client IP's fallback key"
        );
    }
    // A route's 400 for a missing key counts, so bots sending junk show on the dashboard.
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let count = |route: &str, decision: &str| {
        support::observe::metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", route), ("decision", decision)],
        )
    };
    assert_eq!(count("strict", "bad_request"), 1.0, "{metrics}");
    assert_eq!(count("strict", "allowed"), 2.0, "{metrics}");
    assert_eq!(count("lenient", "bad_request"), 0.0, "{metrics}");
}

/// `on_missing_key` on a limit overrides the route's for that limit's key only: a request
/// without the phone header is counted by its IP on the per-phone limit, while the route's own
/// key (the user) still refuses a request that lacks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_may_set_its_own_on_missing_key() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "otp"
path = "/otp"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-user"
  limit = 10
  window = "1m"
  [[routes.limits]]
  name = "per-phone"
  key = ["header:X-Phone"]
  on_missing_key = "ip"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let url = gw.url("/otp");
    // no phone: the per-phone limit counts the client IP, whoever the user is
    assert_eq!(client.status(&url, &[("x-user", "a")]).await, 200);
    assert_eq!(client.status(&url, &[("x-user", "b")]).await, 429);
    // a phone of its own has its own count
    let phone = [("x-user", "b"), ("x-phone", "+6281234567890")];
    assert_eq!(client.status(&url, &phone).await, 200);
    // the route's key keeps the route's setting: a missing user is refused
    let r = client.get(&url, &[("x-phone", "+6289999999999")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing_key");
    gw.stop().await;
}
