//! `X-Request-Id`: generated when the client sends none or is not a trusted proxy, kept when a
//! trusted proxy sends a usable one; returned to the client, forwarded upstream, and the
//! `request_id` of every error body, on both listeners.

use crate::support;

use support::gateway::{self, config, with_server};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";
const ROUTES: &str = r#"
[[routes]]
name = "limited"
path = "/limited"
upstream = "up"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "open"
path = "/open"
upstream = "up"
"#;

/// A generated id: 32 lower-case hex digits.
fn is_generated(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// GET `url` with `headers`: the `X-Request-Id` answered, and the reply.
async fn get(
    client: &HttpClient,
    url: &str,
    headers: &[(&str, &str)],
) -> (String, support::http::Reply) {
    let r = client.get(url, headers).await;
    let id = r
        .header("x-request-id")
        .unwrap_or_else(|| panic!("no X-Request-Id from {url}"))
        .to_string();
    (id, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_generated_returned_forwarded_and_in_error_bodies() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ROUTES)).await;
    let client = HttpClient::default();

    let (first, r) = get(&client, &gw.url("/open"), &[]).await;
    assert!(is_generated(&first), "{first}");
    assert_eq!(
        r.json()["headers"]["x-request-id"],
        first,
        "the upstream got it"
    );
    let (second, r) = get(&client, &gw.url("/limited"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(is_generated(&second) && second != first);
    assert_eq!(r.json()["headers"]["x-request-id"], second);

    let (id, r) = get(&client, &gw.url("/limited"), &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["request_id"], id);
    let (id, r) = get(&client, &gw.url("/nowhere"), &[]).await;
    assert_eq!(r.status, 404);
    assert!(is_generated(&id));
    assert_eq!(r.json()["request_id"], id);
    let (id, r) = get(&client, &gw.admin("/admin/config"), &[]).await;
    assert_eq!(r.status, 401);
    assert!(is_generated(&id));
    assert_eq!(r.json()["request_id"], id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_keeps_its_id_and_anyone_else_gets_a_new_one() {
    let up = upstream::start().await;
    let trusted = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ROUTES),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    ))
    .await;
    let untrusted = gateway::start(&config(MEMORY, &up.url(), ROUTES)).await;
    let client = HttpClient::default();
    let theirs = [("x-request-id", "trace-123")];

    // Trusted: kept, forwarded, returned, and in error bodies on both listeners.
    let (id, r) = get(&client, &trusted.url("/open"), &theirs).await;
    assert_eq!(id, "trace-123");
    assert_eq!(r.json()["headers"]["x-request-id"], "trace-123");
    let (id, r) = get(&client, &trusted.url("/nowhere"), &theirs).await;
    assert_eq!(id, "trace-123");
    assert_eq!(r.json()["request_id"], "trace-123");
    let (id, r) = get(&client, &trusted.admin("/admin/config"), &theirs).await;
    assert_eq!(id, "trace-123");
    assert_eq!(r.json()["request_id"], "trace-123");
    // ... unless it is not a usable id.
    let too_long = "x".repeat(200);
    for unusable in ["has space", too_long.as_str()] {
        let (id, r) = get(
            &client,
            &trusted.url("/open"),
            &[("x-request-id", unusable)],
        )
        .await;
        assert!(is_generated(&id), "{unusable:?} was kept as {id:?}");
        assert_eq!(r.json()["headers"]["x-request-id"], id);
    }

    // Untrusted: replaced everywhere.
    let (id, r) = get(&client, &untrusted.url("/open"), &theirs).await;
    assert!(is_generated(&id), "{id}");
    assert_eq!(r.json()["headers"]["x-request-id"], id);
    let (id, r) = get(&client, &untrusted.url("/nowhere"), &theirs).await;
    assert!(is_generated(&id), "{id}");
    assert_eq!(r.json()["request_id"], id);
    let (id, r) = get(&client, &untrusted.admin("/admin/config"), &theirs).await;
    assert!(is_generated(&id), "{id}");
    assert_eq!(r.json()["request_id"], id);
}
