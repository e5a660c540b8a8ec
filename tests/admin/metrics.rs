//! Metrics that must move: build info, the process collector, the delay room gauge (and a
//! request that leaves it), the deny cache gauge, enforced and shadow exceedances (under each
//! refusing limit), and the series of a route a reload removed.

use crate::support;

use std::time::{Duration, Instant};

use http::Method;
use support::gateway::{self, config, TOKEN};
use support::http::HttpClient;
use support::metrics::value;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";

async fn scrape(client: &HttpClient, gw: &gateway::Gateway) -> String {
    client.get(&gw.admin("/metrics"), &[]).await.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_and_process_metrics_are_there_and_plausible() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let client = HttpClient::default();
    let text = scrape(&client, &gw).await;
    assert_eq!(
        value(
            &text,
            "slidegate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    let cpu = value(&text, "process_cpu_seconds_total", &[]).expect("cpu seconds");
    assert!((0.0..1e6).contains(&cpu), "{cpu}");
    let rss = value(&text, "process_resident_memory_bytes", &[]).expect("resident memory");
    assert!((1e6..64e9).contains(&rss), "{rss}");
    let fds = value(&text, "process_open_fds", &[]).expect("open fds");
    assert!(fds > 3.0, "{fds}");

    // 100 connections held open: the client's and the gateway's ends are both this process's.
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(
            tokio::net::TcpStream::connect(gw.running().proxy_addr)
                .await
                .unwrap(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = value(&scrape(&client, &gw).await, "process_open_fds", &[]).unwrap();
        if now >= fds + 100.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "open fds went from {fds} to {now} with 100 connections held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(held);
}

/// A gateway with one delay route, `paced`: one request per `window`, waits up to 5 s.
async fn paced_gateway(up: &upstream::Upstream, window: &str) -> gateway::Gateway {
    let routes = format!(
        "[[routes]]\nname = \"paced\"\npath = \"/*\"\nupstream = \"up\"\non_exceed = \"delay\"\n\
         max_delay = \"5s\"\n  [[routes.limits]]\n  name = \"per-window\"\n  limit = 1\n  \
         window = \"{window}\"\n"
    );
    gateway::start(&config(MEMORY, &up.url(), &routes)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_room_gauge_counts_a_waiting_request() {
    let up = upstream::start().await;
    let gw = paced_gateway(&up, "1500ms").await;
    let client = HttpClient::default();
    let waiting = |text: &str| value(text, "slidegate_delay_waiting", &[("route", "paced")]);
    assert_eq!(waiting(&scrape(&client, &gw).await), Some(0.0));

    assert_eq!(client.status(&gw.url("/first"), &[]).await, 200);
    let delayed = {
        let (client, url) = (client.clone(), gw.url("/second"));
        tokio::spawn(async move { client.status(&url, &[]).await })
    };
    // The second waits about 1.5 s for room; the gauge shows it meanwhile.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if waiting(&scrape(&client, &gw).await) == Some(1.0) {
            break;
        }
        assert!(
            !delayed.is_finished() && Instant::now() < deadline,
            "the gauge never showed the waiting request"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(delayed.await.unwrap(), 200);
    let text = scrape(&client, &gw).await;
    assert_eq!(waiting(&text), Some(0.0), "back to 0 once it went through");
    assert_eq!(
        value(
            &text,
            "slidegate_requests_total",
            &[("route", "paced"), ("decision", "delayed")]
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A request whose client leaves while it waits for room got no 429: it counts once, as
/// `delayed` (what the route did with it, as NGINX's `limit_req` status says), and no
/// exceedance is counted for it.
async fn a_request_whose_client_leaves_the_delay_room_counts_once_as_delayed() {
    let up = upstream::start().await;
    let gw = paced_gateway(&up, "3s").await;
    let client = HttpClient::default();
    let waiting = |text: &str| value(text, "slidegate_delay_waiting", &[("route", "paced")]);
    assert_eq!(client.status(&gw.url("/first"), &[]).await, 200);
    let leaving = {
        let (client, url) = (HttpClient::default(), gw.url("/second"));
        tokio::spawn(async move { client.status(&url, &[]).await })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiting(&scrape(&client, &gw).await) != Some(1.0) {
        assert!(Instant::now() < deadline, "the request never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // its client goes away while it waits: its connection closes with it
    leaving.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = scrape(&client, &gw).await;
        if waiting(&text) == Some(0.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "the request never left the room");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let decision = |d: &str| {
        value(
            &text,
            "slidegate_requests_total",
            &[("route", "paced"), ("decision", d)],
        )
    };
    assert_eq!(decision("allowed"), Some(1.0));
    assert_eq!(decision("rejected"), Some(0.0));
    assert_eq!(decision("delayed"), Some(1.0), "the one that left");
    let exceeded = [
        ("route", "paced"),
        ("limit", "per-window"),
        ("mode", "enforced"),
    ];
    assert_eq!(
        value(&text, "slidegate_limit_exceeded_total", &exceeded),
        Some(0.0),
        "no 429 was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_two_limits_counts_under_each() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "two"
path = "/*"
upstream = "up"
  [[routes.limits]]
  name = "short"
  limit = 2
  window = "10s"
  [[routes.limits]]
  name = "long"
  limit = 2
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(client.status(&gw.url("/x"), &[]).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    let refused = client.get(&gw.url("/x"), &[]).await;
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["short", "long"])
    );
    let text = scrape(&client, &gw).await;
    for limit in ["short", "long"] {
        let labels = [("route", "two"), ("limit", limit), ("mode", "enforced")];
        assert_eq!(
            value(&text, "slidegate_limit_exceeded_total", &labels),
            Some(3.0),
            "{limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_gauge_counts_denied_keys_until_they_are_reset() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "per-user"
path = "/*"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let entries = |text: &str| value(text, "slidegate_deny_cache_entries", &[]);
    assert_eq!(entries(&scrape(&client, &gw).await), Some(0.0));
    for user in ["u1", "u2"] {
        assert_eq!(client.status(&gw.url("/x"), &[("x-user", user)]).await, 200);
        assert_eq!(client.status(&gw.url("/x"), &[("x-user", user)]).await, 429);
    }
    assert_eq!(entries(&scrape(&client, &gw).await), Some(2.0));

    let auth = format!("Bearer {TOKEN}");
    for (user, left) in [("u1", 1.0), ("u2", 0.0)] {
        let reset = client
            .send(
                Method::DELETE,
                &gw.admin(&format!("/admin/usage?route=per-user&key={user}")),
                &[("authorization", &auth)],
                "",
            )
            .await;
        assert_eq!(reset.status, 200, "{}", reset.body);
        assert_eq!(entries(&scrape(&client, &gw).await), Some(left));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_and_enforced_exceedances_count_under_their_mode() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "dry-run"
path = "/dry-run"
upstream = "up"
on_exceed = "shadow"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "enforced"
path = "/enforced"
upstream = "up"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let mut dry = Vec::new();
    let mut enforced = Vec::new();
    for _ in 0..3 {
        dry.push(client.status(&gw.url("/dry-run"), &[]).await);
        enforced.push(client.status(&gw.url("/enforced"), &[]).await);
    }
    assert_eq!(dry, [200, 200, 200]);
    assert_eq!(enforced, [200, 429, 429]);

    let text = scrape(&client, &gw).await;
    let exceeded = |route: &str, mode: &str| {
        value(
            &text,
            "slidegate_limit_exceeded_total",
            &[("route", route), ("limit", "per-minute"), ("mode", mode)],
        )
    };
    assert_eq!(exceeded("dry-run", "shadow"), Some(2.0));
    assert_eq!(exceeded("dry-run", "enforced"), Some(0.0));
    assert_eq!(exceeded("enforced", "enforced"), Some(2.0));
    assert_eq!(exceeded("enforced", "shadow"), Some(0.0));
    assert_eq!(
        value(
            &text,
            "slidegate_requests_total",
            &[("route", "dry-run"), ("decision", "shadow_rejected")]
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_route_drops_its_series() {
    let up = upstream::start().await;
    let kept = r#"
[[routes]]
name = "kept"
path = "/kept"
upstream = "up"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;
    let gone = r#"
[[routes]]
name = "gone"
path = "/gone"
upstream = "up"
on_exceed = "delay"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), &format!("{kept}{gone}"))).await;
    let client = HttpClient::default();
    for path in ["/kept", "/kept", "/gone", "/gone"] {
        client.get(&gw.url(path), &[]).await;
    }
    let before = scrape(&client, &gw).await;
    let series_of = |text: &str, route: &str| -> Vec<String> {
        let label = format!("route=\"{route}\"");
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&label))
            .map(str::to_string)
            .collect()
    };
    assert!(series_of(&before, "gone").len() > 10, "{before}");

    gw.rewrite(&config(MEMORY, &up.url(), kept));
    reload(&client, &gw).await;
    let after = scrape(&client, &gw).await;
    assert_eq!(series_of(&after, "gone"), Vec::<String>::new());
    assert_eq!(
        series_of(&after, "kept"),
        series_of(&before, "kept"),
        "the kept route's series are untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_renames_a_limit_drops_the_old_limit_series() {
    let up = upstream::start().await;
    let route = |limit: &str| {
        format!(
            r#"
[[routes]]
name = "kept"
path = "/kept"
upstream = "up"
  [[routes.limits]]
  name = "{limit}"
  limit = 1
  window = "1m"
"#
        )
    };
    let gw = gateway::start(&config(MEMORY, &up.url(), &route("old-name"))).await;
    let client = HttpClient::default();
    for _ in 0..2 {
        client.get(&gw.url("/kept"), &[]).await;
    }
    let limit_series = |text: &str, limit: &str| -> usize {
        let label = format!("limit=\"{limit}\"");
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&label))
            .count()
    };
    let before = scrape(&client, &gw).await;
    assert!(limit_series(&before, "old-name") > 0, "{before}");

    gw.rewrite(&config(MEMORY, &up.url(), &route("new-name")));
    reload(&client, &gw).await;
    client.get(&gw.url("/kept"), &[]).await;
    let after = scrape(&client, &gw).await;
    assert_eq!(limit_series(&after, "old-name"), 0, "{after}");
    assert!(limit_series(&after, "new-name") > 0, "{after}");
    assert!(
        value(
            &after,
            "slidegate_requests_total",
            &[("route", "kept"), ("decision", "rejected")]
        )
        .is_some(),
        "the route's own series stay"
    );
}

/// Asks the gateway to reload its config file; the reload must succeed.
async fn reload(client: &HttpClient, gw: &gateway::Gateway) {
    let reload = client
        .send(
            Method::POST,
            &gw.admin("/admin/reload"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    assert_eq!(reload.status, 200, "{}", reload.body);
}
