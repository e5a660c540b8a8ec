//! `redis-sentinel://` URLs: the gateway asks a real sentinel for the master and decides there.

use crate::support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::sentinel::Sentinel;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_run_on_the_master_the_sentinel_names() {
    let master = RedisServer::start_async().await;
    let master_port = master.port;
    let sentinel = tokio::task::spawn_blocking(move || Sentinel::start(master_port, 1))
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("sentinel");
    let store = format!(
        "backend = \"redis\"\nurl = \"redis-sentinel://127.0.0.1:{}/main\"\nkey_prefix = \"{prefix}\"\ntimeout = \"500ms\"\non_error = \"deny\"",
        sentinel.port
    );
    let routes = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"m\"\n  limit = 2\n  window = \"1m\"\n";
    let gw = gateway::start(&config(&store, &up.url(), routes)).await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 429]);
    // The route's one sliding_log set for the client's key (lua/README.md).
    let key = format!("{prefix}:{{r|127.0.0.1}}#log");
    assert_eq!(
        master.cmd(&["ZCARD", &key]).int(),
        2,
        "the master holds the counts"
    );
}
