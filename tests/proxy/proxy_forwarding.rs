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
