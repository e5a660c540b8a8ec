//! What the proxy forwards: hop-by-hop headers are stripped both ways, and `X-Forwarded-For`,
//! `-Proto` and `-Host` are set, an untrusted peer's chain replaced.

use crate::support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_strips_hop_by_hop_headers_and_sets_forwarding_headers() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let r = client
        .get(
            &gw.url("/echo-headers?a=1"),
            &[
                ("connection", "x-private"),
                ("x-private", "secret"),
                ("te", "trailers"),
                ("x-forwarded-for", "6.6.6.6"),
                ("host", "api.example"),
            ],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("keep-alive").is_none(),
        "upstream hop-by-hop headers are removed"
    );
    let seen = r.json();
    let h = &seen["headers"];
    assert_eq!(seen["path"], "/echo-headers");
    assert_eq!(seen["query"], "a=1");
    assert!(h.get("x-private").is_none() && h.get("te").is_none());
    assert_eq!(
        h["x-forwarded-for"], "127.0.0.1",
        "an untrusted peer's chain is replaced"
    );
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "api.example");
}

/// HTTP/2 says its host in `:authority` and may split `cookie` into several fields: a
/// `header:host` key reads the authority (a client sends no `Host`), so three requests of one
/// host meet the limit of two, and the cookie fields reach keys and the HTTP/1.1 upstream as
/// one `; `-joined field, as an HTTP/1.1 client sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_authority_and_split_cookies_are_read_as_http1_would_say_them() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "hosts"
path = "/hosts/*"
upstream = "up"
key = ["header:host"]
  [[routes.limits]]
  name = "per-host"
  limit = 2
  window = "1m"

[[routes]]
name = "cookies"
path = "/cookies/*"
upstream = "up"
key = ["header:cookie"]
  [[routes.limits]]
  name = "per-cookie"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), routes)).await;
    let h2 = HttpClient::http2();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(h2.get(&gw.url("/hosts/x"), &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);

    let split = [("cookie", "a=1"), ("cookie", "b=2")];
    let first = h2.get(&gw.url("/cookies/x"), &split).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["headers"]["cookie"], "a=1; b=2");
    // the same cookies sent as one field are the same key
    let joined = h2
        .get(&gw.url("/cookies/x"), &[("cookie", "a=1; b=2")])
        .await;
    assert_eq!(joined.status, 429, "{}", joined.body);
}

/// Many HTTP/2 cookie fields are one field, also for the head's bounds: 150 of them pass where
/// the same cookies in one HTTP/1.1 `Cookie` line would (at most 100 header fields).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_http2_cookie_fields_count_as_one_header() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), routes)).await;
    let cookies: Vec<String> = (0..150).map(|i| format!("c{i}=1")).collect();
    let headers: Vec<(&str, &str)> = cookies.iter().map(|c| ("cookie", c.as_str())).collect();
    let reply = HttpClient::http2().get(&gw.url("/x"), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let forwarded = reply.json()["headers"]["cookie"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(forwarded.split("; ").count(), 150);
}

/// A `HEAD` request over HTTP/2 that the gateway answers itself (a 429, a 404) gets its status
/// and headers without a body: a body on a `HEAD` answer is an HTTP/2 protocol error, and the
/// client would see no status at all. A proxied `HEAD` goes on as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_head_requests_get_the_gateways_own_answers_without_a_body() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "once"
path = "/once/*"
upstream = "up"
key = ["route"]
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), routes)).await;
    let h2 = HttpClient::http2();
    let head = |path: &'static str| {
        let (h2, url) = (h2.clone(), gw.url(path));
        async move { h2.send(http::Method::HEAD, &url, &[], "").await }
    };
    let first = head("/once/x").await;
    assert_eq!((first.status.as_u16(), first.body.as_str()), (200, ""));
    let refused = head("/once/x").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.body, "");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(head("/nowhere").await.status, 404);
}

/// The headers frameworks read for the port, path prefix or scheme a client used
/// (`X-Forwarded-Port`, `-Prefix`, `-Ssl`, `-Scheme`, `Front-End-Https`): from a client that is
/// no trusted proxy they are dropped, as `X-Forwarded-Host` and `-Proto` are replaced, so an app
/// that trusts the gateway builds no link on a client's word; a trusted proxy's are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_origin_headers_reach_the_upstream_only_from_a_trusted_proxy() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let claimed = [
        ("x-forwarded-port", "444"),
        ("x-forwarded-prefix", "/evil"),
        ("x-forwarded-ssl", "on"),
        ("x-forwarded-scheme", "https"),
        ("front-end-https", "on"),
    ];
    let client = HttpClient::default();
    let untrusted = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let seen = client.get(&untrusted.url("/x"), &claimed).await.json();
    for (name, _) in claimed {
        assert!(seen["headers"].get(name).is_none(), "{name}: {seen}");
    }
    let trusting = gateway::with_server(
        &config(MEMORY, &up.url(), routes),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    );
    let trusted = gateway::start(&trusting).await;
    let seen = client.get(&trusted.url("/x"), &claimed).await.json();
    for (name, value) in claimed {
        assert_eq!(seen["headers"][name], value, "{name}: {seen}");
    }
}
