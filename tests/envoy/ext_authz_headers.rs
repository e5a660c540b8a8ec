//! ext_authz and a key read from a header: Envoy's `headers` map joins a header sent twice into
//! one value with a bare `,`, so a second copy of a keyed header, added by a bot while the app
//! reads the first, is ambiguous (400, charged nowhere), as two lines are on the traffic path;
//! a value whose commas are a list's own (`, `) is one key.

use crate::support;

use support::ext_authz::{self, check, Described};
use support::gateway::{self, redis_store};
use support::redis::RedisServer;
use support::unique_prefix;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_of_a_keyed_header_is_ambiguous_not_a_new_key() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url(), &unique_prefix("eah"));
    let routes = r#"
[ext_authz]
listen = "127.0.0.1:0"

[[routes]]
name = "orders"
path = "/api/orders"
upstream = "up"
key = ["header:x-user"]

  [[routes.limits]]
  name = "per-user"
  limit = 2
  window = "10m"
"#;
    let gw = gateway::start(&gateway::config(&store, "http://127.0.0.1:9", routes)).await;
    let mut client = ext_authz::client(&gw).await;
    let asked = |users: &[&str]| {
        let mut d = Described::post_json("/api/orders", "{}", "203.0.113.5");
        for user in users {
            d = d.header("x-user", user);
        }
        d
    };
    for _ in 0..2 {
        assert!(check(&mut client, &asked(&["victim"])).await.allowed());
    }
    assert_eq!(
        check(&mut client, &asked(&["victim"])).await.http_status,
        429
    );
    // Each junk copy would be a fresh key with room; the app acts for the victim.
    for n in 0..3 {
        let answer = check(&mut client, &asked(&["victim", &format!("junk{n}")])).await;
        assert_eq!(answer.http_status, 400, "copy {n}: {}", answer.body);
        assert_eq!(answer.json()["error"], "ambiguous_key", "{}", answer.body);
    }
    // A list's own commas (a space after each) are one value, decided as one key.
    let listed = "Mozilla/5.0 (KHTML, like Gecko)";
    for _ in 0..2 {
        assert!(check(&mut client, &asked(&[listed])).await.allowed());
    }
    assert_eq!(check(&mut client, &asked(&[listed])).await.http_status, 429);
    gw.stop().await;
}
