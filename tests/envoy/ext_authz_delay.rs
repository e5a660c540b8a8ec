//! A delay route asked about through ext_authz: Envoy's `Check` has a deadline (200 ms unless
//! set), sent as `grpc-timeout`. A refusal whose wait ends within it is delayed as on the traffic
//! path; one whose wait ends later is answered at once with the 429 and its `Retry-After`, not
//! held until Envoy gives up (then denying with no `Retry-After`, or with `failure_mode_allow`
//! letting the request through uncharged). A call without a deadline waits up to `max_delay`.

use crate::support;

use std::time::{Duration, Instant};

use support::ext_authz::{self, Answer, Described, OK, PERMISSION_DENIED};
use support::gateway::{self, Gateway};
use support::http::HttpClient;
use support::metrics::value;

/// The `Check`'s deadline: shorter than a refusal's wait (about 2 s), long enough that a busy
/// machine answers within it (Envoy's default is 200 ms).
const DEADLINE: Duration = Duration::from_secs(1);

/// A delay route, one request per 2 s per client IP, waiting up to 3 s.
async fn gateway() -> Gateway {
    let routes = r#"
[ext_authz]
listen = "127.0.0.1:0"

[[routes]]
name = "pay"
path = "/pay"
key = ["ip"]
on_exceed = "delay"
max_delay = "3s"
  [[routes.limits]]
  name = "per-ip"
  limit = 1
  window = "2s"
"#;
    gateway::start(&gateway::config(
        "backend = \"memory\"",
        "http://127.0.0.1:9",
        routes,
    ))
    .await
}

/// A `Check` of `POST /pay` from 203.0.113.7, with `timeout` as its deadline (none: no
/// deadline), and how long its answer took.
async fn check(gw: &Gateway, timeout: Option<Duration>) -> (Answer, Duration) {
    let mut client = ext_authz::client(gw).await;
    let mut request =
        tonic::Request::new(Described::post_json("/pay", "{}", "203.0.113.7").check());
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    let started = Instant::now();
    let response = client
        .check(request)
        .await
        .expect("Check answers within its deadline")
        .into_inner();
    (Answer::of(response), started.elapsed())
}

async fn rejected(gw: &Gateway) -> Option<f64> {
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let labels = [("route", "pay"), ("decision", "rejected")];
    value(&metrics, "slidegate_requests_total", &labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_longer_than_the_calls_deadline_is_a_429_at_once() {
    let gw = gateway().await;
    let (first, _) = check(&gw, Some(DEADLINE)).await;
    assert_eq!(first.code, OK, "{first:?}");

    let (refused, took) = check(&gw, Some(DEADLINE)).await;
    assert_eq!(refused.code, PERMISSION_DENIED, "{refused:?}");
    assert_eq!(refused.http_status, 429);
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "{refused:?}");
    assert!(
        took < DEADLINE,
        "answered within the deadline, not at it: {took:?}"
    );
    assert_eq!(rejected(&gw).await, Some(1.0));

    // Without a deadline, the same refusal is waited out, as on the traffic path.
    let (delayed, took) = check(&gw, None).await;
    assert_eq!(delayed.code, OK, "{delayed:?}");
    assert!(took >= Duration::from_millis(500), "delayed: {took:?}");
    gw.stop().await;
}
