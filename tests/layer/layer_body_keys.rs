//! `slidegate::RateLimitLayer` built with the builder on a real Redis, in front of an axum
//! `Router` (README, "Embedding: the tower layer"): a route keyed by a JSON member reads the body for its key and the
//! handler still receives that body byte for byte, the counts land in Redis under the layer's
//! prefix, and a shadow route lets everything through and counts what it would refuse.

use crate::support;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::{get, post};
use axum::Router;
use http::Method;
use slidegate::layer::RouteBuilder;
use slidegate::RateLimitLayer;
use support::http::HttpClient;
use support::layer::{count, decisions, serve};
use support::problem::assert_problem;
use support::redis::{RedisServer, Resp};
use support::unique_prefix;

/// Built with the builder on a real Redis: a route keyed by a JSON member reads the body for its
/// key, and the handler still receives that body byte for byte; the counts land in Redis under
/// the layer's prefix; a shadow route lets everything through and counts what it would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_layer_keys_by_the_body_and_the_handler_gets_it_whole() {
    let redis = RedisServer::start_async().await;
    let prefix = unique_prefix("layer");
    let layer = RateLimitLayer::builder()
        .redis(&redis.url())
        .store("key_prefix", prefix.as_str())
        .route(
            RouteBuilder::new("send", "/send")
                .methods(&["POST"])
                .key(&["json:to.phone"])
                .limit("per-minute", 2, "1m"),
        )
        .route(
            RouteBuilder::new("watch", "/watch")
                .set("on_exceed", "shadow")
                .limit("per-minute", 1, "1m"),
        )
        .build()
        .await
        .unwrap();
    let received: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let log = received.clone();
    let app = Router::new()
        .route(
            "/send",
            post(move |body: Bytes| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(body.clone());
                    body
                }
            }),
        )
        .route("/watch", get(|| async { "watched\n" }))
        .layer(layer.clone());
    let addr = serve(app).await;
    let client = HttpClient::default();
    let url = format!("http://{addr}/send");
    let body = "\u{feff}{ \"to\" : {\"phone\": \"+62 812\", \"note\": \"caf\u{e9} \\u00e9\"}, \"pad\": [1, 2.50, null] }";
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = client
            .send(
                Method::POST,
                &url,
                &[("content-type", "application/json")],
                body,
            )
            .await;
        statuses.push(r.status.as_u16());
        if r.status == 200 {
            assert_eq!(r.body, body, "echoed as received");
        } else {
            assert_problem(&r, 429, "rate_limited");
        }
    }
    assert_eq!(statuses, [200, 200, 429]);
    let got = received.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![Bytes::from(body); 2],
        "the handler got the body byte for byte"
    );
    // the key `+62 812` (the member `to.phone`) holds a space, so Redis sees it hashed
    // (lua/README.md, "Key layout"): `#` and 16 bytes of its SHA-256 in hex
    let digest = <sha2::Sha256 as sha2::Digest>::digest(b"+62 812");
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let set = format!("{prefix}:{{send|#{hex}}}#log");
    let index = format!("{prefix}:blocked:{{send}}");
    let mut keys = support::observe::keys(&redis, &prefix);
    keys.sort();
    let mut expected = [set.clone(), index.clone(), format!("{index}:at")];
    expected.sort();
    assert_eq!(
        keys, expected,
        "one set, for the body's key, and the route's refusal index with its instants"
    );
    let Resp::Array(refused) = redis.cmd(&["ZRANGE", &index, "0", "-1"]) else {
        panic!("the refusal index is a sorted set")
    };
    assert_eq!(
        refused,
        [Resp::Bulk(Some(format!("per-minute|#{hex}")))],
        "the refused key, as stored (hashed)"
    );
    assert_eq!(
        redis.cmd(&["ZCARD", &set]).int(),
        2,
        "the two allowed requests"
    );

    for _ in 0..3 {
        let r = client.get(&format!("http://{addr}/watch"), &[]).await;
        assert_eq!(r.status, 200, "shadow refuses nothing");
    }
    let m = layer.metrics().encode();
    assert_eq!(decisions(&m, "send", "allowed"), 2.0);
    assert_eq!(decisions(&m, "send", "rejected"), 1.0);
    assert_eq!(decisions(&m, "watch", "allowed"), 1.0);
    assert_eq!(decisions(&m, "watch", "shadow_rejected"), 2.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[
                ("route", "watch"),
                ("limit", "per-minute"),
                ("mode", "shadow")
            ]
        ),
        2.0
    );
}
