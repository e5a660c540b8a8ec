//! What happens inside Redis reaches neither the clients nor the counts: a `SCRIPT FLUSH` during
//! traffic causes no 5xx, and a decision Redis charged for a client that gave up before the answer
//! arrived is still counted in `/metrics`.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_during_traffic_causes_no_5xx() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    // on_error = "deny": any NOSCRIPT that leaked out of the store would show as a 503.
    let routes = route(
        "busy",
        "\"route\"",
        "on_error = \"deny\"",
        &[("roomy", 10_000, "1m")],
    );
    let gw = on_redis(&redis, &unique_prefix("flush"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let url = gw.url("/x");
    let traffic = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..300 {
            statuses.push(client.get(&url, &[]).await.status.as_u16());
        }
        statuses
    });
    for _ in 0..15 {
        assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), Resp::Simple("OK".into()));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let statuses = traffic.await.unwrap();
    assert!(statuses.iter().all(|&s| s == 200), "statuses: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_whose_client_gave_up_is_still_counted() {
    // Redis charges a decision even when the client that asked gives up before the answer
    // arrives; the metrics must count it, or Redis and /metrics disagree.
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let up = upstream::start().await;
    let prefix = unique_prefix("orphan");
    let store =
        redis_store(&redis.url(), &prefix).replace("timeout = \"200ms\"", "timeout = \"3s\"");
    let gw = gateway::start(&config(
        &store,
        &up.url(),
        &route("r", "\"route\"", "", &[("per-hour", 100, "1h")]),
    ))
    .await;
    let addr = gw.running().proxy_addr;
    // Freeze Redis for 600 ms from another connection, then ask while it is frozen: the
    // command is written here, before the wait (no thread to start first), and its reply read
    // when Redis wakes.
    let freezing = redis.send(&["DEBUG", "SLEEP", "0.6"]).unwrap();
    let freezer = std::thread::spawn(move || {
        assert_eq!(freezing.reply().unwrap(), Resp::Simple("OK".into()));
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    {
        // An h2 client that gives up on its request: the stream is reset and the server drops
        // the request while its decision waits for the frozen Redis.
        let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(connection);
        let req = http::Request::get(format!("http://{addr}/x"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let gave_up =
            tokio::time::timeout(Duration::from_millis(150), sender.send_request(req)).await;
        assert!(
            gave_up.is_err(),
            "the request was meant to be waiting on Redis: {gave_up:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    freezer.join().unwrap();
    let client = HttpClient::default();
    let key = format!("{prefix}:{{r|r}}#log");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
        let counted =
            metrics.contains("slidegate_requests_total{decision=\"allowed\",route=\"r\"} 1");
        let charged = redis.cmd(&["ZCARD", &key]).int();
        if counted && charged == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis charged {charged}, /metrics counted: {counted}\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}
