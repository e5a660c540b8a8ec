//! The client IP on the traffic path: a spoofed `X-Forwarded-For` from an untrusted peer gains
//! nothing, and through a trusted proxy distinct clients get distinct quotas, a client prepending
//! hops of its own still being the right-most one.

use crate::support;

use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

fn ip_route(trusted: &str) -> String {
    format!(
        "[[routes]]\nname = \"by-ip\"\npath = \"/*\"\nupstream = \"up\"\nkey = [\"ip\"]\n  [[routes.limits]]\n  name = \"m\"\n  limit = 2\n  window = \"1m\"\n{trusted}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_x_forwarded_for_from_an_untrusted_peer_gains_nothing() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("spoof")),
        &up.url(),
        &ip_route(""),
    ))
    .await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for i in 0..6 {
        let fake = format!("198.51.100.{i}");
        codes.push(
            client
                .get(
                    &gw.url("/x"),
                    &[
                        ("x-forwarded-for", &fake),
                        ("forwarded", &format!("for={fake}")),
                    ],
                )
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 200, 429, 429, 429, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_trusted_proxy_distinct_clients_get_distinct_quotas() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let cfg = config(
        &redis_store(&redis.url(), &unique_prefix("trusted")),
        &up.url(),
        &ip_route(""),
    )
    .replace(
        "listen = \"127.0.0.1:0\"\n\n[admin]",
        "listen = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[admin]",
    );
    let gw = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let get = |xff: &'static str| {
        let (client, url) = (client.clone(), gw.url("/x"));
        async move { client.get(&url, &[("x-forwarded-for", xff)]).await }
    };
    assert_eq!(get("198.51.100.1").await.status, 200);
    assert_eq!(get("198.51.100.1").await.status, 200);
    assert_eq!(get("198.51.100.1").await.status, 429);
    assert_eq!(
        get("198.51.100.2").await.status,
        200,
        "another client has its own quota"
    );
    // A client prepending its own hops through the trusted proxy is still the right-most hop.
    assert_eq!(get("1.2.3.4, 198.51.100.1").await.status, 429);
    assert_eq!(get("5.6.7.8, 198.51.100.1").await.status, 429);
    // What the upstream sees: the chain plus the trusted peer.
    let seen = get("198.51.100.3").await.json();
    assert_eq!(
        seen["headers"]["x-forwarded-for"],
        "198.51.100.3, 127.0.0.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_sent_on_is_read_from_the_header_trusted_proxies_write() {
    let up = upstream::start().await;
    let trusted = |header: &str| {
        config("backend = \"memory\"", &up.url(), &ip_route("")).replace(
            "listen = \"127.0.0.1:0\"\n\n[admin]",
            &format!(
                "listen = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\nclient_ip_header = \"{header}\"\n\n[admin]"
            ),
        )
    };
    let gw = gateway::start(&trusted("forwarded")).await;
    let client = HttpClient::default();
    // The proxy writes `Forwarded`; the `X-Forwarded-For` it passed along is the client's own.
    let sent = [
        ("forwarded", "for=198.51.100.7"),
        ("x-forwarded-for", "6.6.6.6"),
        ("x-real-ip", "203.0.113.9"),
    ];
    let seen = client.get(&gw.url("/x"), &sent).await.json();
    assert_eq!(
        seen["headers"]["x-forwarded-for"],
        "198.51.100.7, 127.0.0.1"
    );
    assert_eq!(seen["headers"]["x-real-ip"], "198.51.100.7");

    // A reload that names another header is followed on the same connection.
    gw.rewrite(&trusted("x-real-ip"));
    let (k, v) = support::admin::auth();
    let r = (client.send(
        http::Method::POST,
        &gw.admin("/admin/reload"),
        &[(k, &v)],
        "",
    ))
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = client.get(&gw.url("/x"), &sent).await.json();
    assert_eq!(seen["headers"]["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(seen["headers"]["x-real-ip"], "203.0.113.9");
}
