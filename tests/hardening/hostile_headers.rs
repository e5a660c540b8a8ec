//! What a client sends cannot pick its identity (README, "Configuration" and "The traffic path"): the client IP comes
//! from the one header the trusted proxy writes (`server.client_ip_header`), read from the
//! right; the upstream gets the truthful chain; derived keys never collide, whatever bytes the
//! parts hold, nor equal the fallback to the client IP; and a header or query part sent twice
//! is refused, not counted by one copy while the upstream reads another.

use crate::support;

use http::Method;
use support::gateway::{self, config, with_server};
use support::http::HttpClient;
use support::{raw, upstream};

const MEMORY: &str = "backend = \"memory\"";

fn per_ip_route(limit: u64) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\nkey = [\"ip\"]\n\
         [[routes.limits]]\nname = \"l\"\nlimit = {limit}\nwindow = \"1h\"\n"
    )
}

/// Through a trusted proxy that writes `Forwarded`, the client's own `X-Forwarded-For` picks
/// nothing: the quota is the `Forwarded` client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_configured_forwarding_header_names_the_client() {
    let up = upstream::start().await;
    let toml = with_server(
        &config(MEMORY, &up.url(), &per_ip_route(1)),
        "trusted_proxies = [\"127.0.0.1/32\"]\nclient_ip_header = \"forwarded\"",
    );
    let gw = gateway::start(&toml).await;
    let client = HttpClient::default();
    let url = gw.url("/x");
    let from = |xff: &'static str| [("forwarded", "for=198.51.100.7"), ("x-forwarded-for", xff)];
    assert_eq!(client.status(&url, &from("1.1.1.1")).await, 200);
    // a new X-Forwarded-For each time: still the same client
    assert_eq!(client.status(&url, &from("2.2.2.2")).await, 429);
    let other = [("forwarded", "for=198.51.100.8")];
    assert_eq!(client.status(&url, &other).await, 200);
    gw.stop().await;
}

/// The upstream gets every `X-Forwarded-For` line of a trusted proxy, in order, plus the peer;
/// `X-Real-IP` is the client the limits counted; an untrusted peer's `Forwarded` and
/// `X-Real-IP` are dropped and its `X-Forwarded-For` replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_gets_the_truthful_chain() {
    let up = upstream::start().await;
    let trusted = with_server(
        &config(MEMORY, &up.url(), &per_ip_route(100)),
        "trusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]",
    );
    let gw = gateway::start(&trusted).await;
    let addr = gw.running().proxy_addr;
    let r = raw::request(
        addr,
        "GET",
        "/chain",
        &[
            "X-Forwarded-For: 203.0.113.9",
            "X-Forwarded-For: 10.1.1.1, 10.2.2.2",
            "Forwarded: for=203.0.113.9",
        ],
    )
    .await;
    let seen = r.json();
    let headers = &seen["headers"];
    assert_eq!(
        headers["x-forwarded-for"],
        "203.0.113.9, 10.1.1.1, 10.2.2.2, 127.0.0.1"
    );
    assert_eq!(headers["x-real-ip"], "203.0.113.9");
    assert_eq!(
        headers["forwarded"], "for=203.0.113.9",
        "a trusted proxy's Forwarded stays"
    );
    gw.stop().await;

    let untrusted = config(MEMORY, &up.url(), &per_ip_route(100));
    let gw = gateway::start(&untrusted).await;
    let addr = gw.running().proxy_addr;
    let r = raw::request(
        addr,
        "GET",
        "/chain",
        &[
            "X-Forwarded-For: 6.6.6.6",
            "Forwarded: for=6.6.6.6",
            "X-Real-IP: 6.6.6.6",
        ],
    )
    .await;
    let headers = &r.json()["headers"];
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-real-ip"], "127.0.0.1");
    assert!(headers.get("forwarded").is_none(), "{headers}");
    gw.stop().await;
}

/// Two parts joined with `|`: `("u|v", "w")` and `("u", "v|w")` are two keys; and a client
/// whose header holds the IP the fallback would use does not share the fallback's quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_parts_never_collide_nor_equal_the_fallback() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "pair"
path = "/pair"
upstream = "up"
key = ["header:x-a", "header:x-b"]
on_missing_key = "ip"
  [[routes.limits]]
  name = "once"
  limit = 1
  window = "1h"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let url = gw.url("/pair");
    let send = |a: &'static str, b: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            client
                .send(Method::GET, &url, &[("x-a", a), ("x-b", b)], "")
                .await
                .status
                .as_u16()
        }
    };
    assert_eq!(send("u|v", "w").await, 200);
    assert_eq!(send("u", "v|w").await, 200, "collided with (u|v, w)");
    assert_eq!(send("u", "v|w").await, 429);
    // the fallback: x-b missing -> the client IP, marked
    let only_a = client.send(Method::GET, &url, &[("x-a", "k")], "").await;
    assert_eq!(only_a.status, 200);
    // the same IP sent as a value is another key
    assert_eq!(
        send("k", "127.0.0.1").await,
        200,
        "shared the fallback's quota"
    );
    gw.stop().await;
}

/// A header or query key part the request names twice, or in a spelling a framework reads as
/// its name (`X_Api_Key` is `X-Api-Key` to CGI and PHP; `?API_KEY=` is `api_key` to a folding
/// parser), is 400 `ambiguous_key` and never reaches the upstream: the gateway would count one
/// copy while the upstream acts on another (first, last or joined), so a client rotating the
/// copy it is counted by would never be limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_part_sent_twice_is_ambiguous() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "by-header"
path = "/h"
upstream = "up"
key = ["header:X-Api-Key"]
  [[routes.limits]]
  name = "m"
  limit = 100
  window = "1h"

[[routes]]
name = "by-query"
path = "/q"
upstream = "up"
key = ["query:api_key"]
  [[routes.limits]]
  name = "m"
  limit = 100
  window = "1h"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let addr = gw.running().proxy_addr;
    let refused: [(&str, &[&str]); 5] = [
        ("/h", &["X-Api-Key: mine", "X-Api-Key: victim"]),
        ("/h", &["X-Api-Key: mine", "X_Api_Key: victim"]),
        ("/q?api_key=mine&api_key=victim", &[]),
        ("/q?api_key=mine&API_KEY=victim", &[]),
        ("/q?api_key=mine&api_key[]=victim", &[]),
    ];
    for (target, headers) in refused {
        let r = raw::request(addr, "GET", target, headers).await;
        assert_eq!(r.status, 400, "{target} {headers:?}: {}", r.body);
        assert!(r.body.contains("\"ambiguous_key\""), "{}", r.body);
    }
    assert!(
        up.seen().is_empty(),
        "refused requests reached the upstream"
    );
    // one copy is a key as before
    let once = raw::request(addr, "GET", "/h", &["X-Api-Key: mine"]).await;
    assert_eq!(once.status, 200, "{}", once.body);
    let once = raw::request(addr, "GET", "/q?api_key=mine&other=1", &[]).await;
    assert_eq!(once.status, 200, "{}", once.body);
    gw.stop().await;
}
