//! Routing on the traffic path: the first route that matches takes the request, with exact and
//! `/*` prefix paths and methods that must match; a request no route takes gets a 404 problem.

use crate::support;

use http::Method;
use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_is_first_match_with_exact_and_prefix_paths() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "otp"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
[[routes]]
name = "exact"
path = "/login"
upstream = "up"
  [[routes.limits]]
  name = "m"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    assert_eq!(
        client
            .send(Method::POST, &gw.url("/api/otp"), &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        client
            .send(Method::POST, &gw.url("/api/otp/send"), &[], "")
            .await
            .status,
        200
    );
    let miss = client
        .send(Method::POST, &gw.url("/api/otpx"), &[], "")
        .await;
    assert_eq!(miss.status, 404);
    assert_eq!(
        miss.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(miss.json()["error"], "no_route");
    assert_eq!(
        client.status(&gw.url("/api/otp/send"), &[]).await,
        404,
        "method must match"
    );
    assert_eq!(client.status(&gw.url("/login"), &[]).await, 200);
    assert_eq!(client.status(&gw.url("/login"), &[]).await, 429);
    assert_eq!(
        client.status(&gw.url("/login/"), &[]).await,
        429,
        "a trailing slash is the same exact route and spends the same quota"
    );
    assert_eq!(
        client.status(&gw.url("/login/x"), &[]).await,
        404,
        "exact path"
    );
}
