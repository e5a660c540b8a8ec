//! Segment and plan limits (README, "Configuration"): a limit's value per key comes from the first
//! segment (config order) whose roaring bitmap holds the key read as a u32 user id, else from
//! the key's plan in the plans file, else the limit's own value; the 429 body, `/v1/decisions`
//! and `/admin/usage` name the segment or plan; a reload re-reads the files and a reload that
//! fails keeps the old ones; `slidegate campaign` sends ids through the batch API.

use crate::support;

use http::Method;
use roaring::RoaringBitmap;
use support::gateway::{self, config, Gateway, TOKEN};
use support::http::HttpClient;
use support::upstream;

fn bitmap(ids: &[u32]) -> Vec<u8> {
    let members: RoaringBitmap = ids.iter().copied().collect();
    let mut out = Vec::new();
    members.serialize_into(&mut out).unwrap();
    out
}

const TIERS: &str = r#"
[segments.new]
members_file = "new.roaring"
[segments.active]
members_file = "active.roaring"

[plans]
members_file = "plans.toml"

[[routes]]
name = "push"
path = "/push"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 3
  window = "1d"
    [routes.limits.segments]
    new = 2
    active = 4

[[routes]]
name = "active-only"
path = "/active-only"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 3
  window = "1d"
    [routes.limits.segments]
    active = 4

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = ["header:X-Api-Key"]
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
    [routes.limits.plans]
    gold = 5
"#;

fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        // user 7 is in both segments: `new` comes first in the file, so it applies
        ("new.roaring", bitmap(&[7, 100])),
        ("active.roaring", bitmap(&[7, 8, 4_000_000_000])),
        (
            "plans.toml",
            b"\"k-gold\" = \"gold\"\n\"k-silver\" = \"silver\"\n".to_vec(),
        ),
    ]
}

async fn start() -> (Gateway, upstream::Upstream) {
    let up = upstream::start().await;
    let toml = config("backend = \"memory\"", &up.url(), TIERS);
    (gateway::start_with_files(&toml, &files()).await, up)
}

/// How many requests with `header` = `value` pass before the first 429, and that 429's body.
async fn allowed_before_429(
    client: &HttpClient,
    url: &str,
    header: &str,
    value: &str,
) -> (usize, serde_json::Value) {
    for n in 0..20 {
        let r = client.get(url, &[(header, value)]).await;
        if r.status == 429 {
            return (n, r.json());
        }
        assert_eq!(r.status, 200, "{}", r.body);
    }
    panic!("{value} was never limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_gets_its_segment_or_plan_value() {
    let (gw, _up) = start().await;
    let client = HttpClient::default();
    let push = gw.url("/push");
    let cases = [
        ("7", 2, Some(("segment", "new"))),
        ("100", 2, Some(("segment", "new"))),
        ("8", 4, Some(("segment", "active"))),
        ("4000000000", 4, Some(("segment", "active"))),
        ("9", 3, None),
        ("not-a-number", 3, None),
    ];
    for (user, expected, tier) in cases {
        let (allowed, body) = allowed_before_429(&client, &push, "x-user", user).await;
        assert_eq!(allowed, expected, "user {user}");
        match tier {
            Some((kind, name)) => assert_eq!(body[kind], name, "user {user}: {body}"),
            None => assert!(
                body.get("segment").is_none() && body.get("plan").is_none(),
                "{body}"
            ),
        }
    }
    // user 7 belongs to `new` (first in the file) although it is in `active` too: on a route
    // that gives `new` no values it gets the route's own, not `active`'s
    let active_only = gw.url("/active-only");
    let (seven, body) = allowed_before_429(&client, &active_only, "x-user", "7").await;
    assert_eq!(seven, 3, "{body}");
    assert!(body.get("segment").is_none(), "{body}");
    let (eight, body) = allowed_before_429(&client, &active_only, "x-user", "8").await;
    assert_eq!((eight, body["segment"].as_str()), (4, Some("active")));
    let api = gw.url("/api/x");
    let (gold, body) = allowed_before_429(&client, &api, "x-api-key", "k-gold").await;
    assert_eq!((gold, body["plan"].as_str()), (5, Some("gold")));
    // silver has no values on this limit: the limit's own value, and no plan named
    let (silver, body) = allowed_before_429(&client, &api, "x-api-key", "k-silver").await;
    assert_eq!(silver, 1);
    assert!(body.get("plan").is_none(), "{body}");
    let (stranger, _) = allowed_before_429(&client, &api, "x-api-key", "k-unknown").await;
    assert_eq!(stranger, 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_api_and_usage_name_the_segment() {
    let (gw, _up) = start().await;
    let client = HttpClient::default();
    let auth = format!("Bearer {TOKEN}");
    let body = serde_json::json!({"route": "push", "keys": ["7", "8", "9", "7", "7"]}).to_string();
    let r = client
        .send(
            Method::POST,
            &gw.admin("/v1/decisions"),
            &[("authorization", &auth)],
            &body,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.json()["results"].as_array().unwrap().clone();
    let seen: Vec<(bool, Option<&str>, u64)> = results
        .iter()
        .map(|r| {
            (
                r["allowed"].as_bool().unwrap(),
                r["segment"].as_str(),
                r["remaining"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (true, Some("new"), 1),
            (true, Some("active"), 3),
            (true, None, 2),
            (true, Some("new"), 0),
            (false, Some("new"), 0),
        ]
    );
    let usage = client
        .get(
            &gw.admin("/admin/usage?route=push&key=8"),
            &[("authorization", &auth)],
        )
        .await
        .json();
    assert_eq!(usage["segment"], "active");
    assert_eq!(usage["limits"][0]["limit"], 4);
    assert_eq!(usage["limits"][0]["used"], 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_rereads_the_files_and_a_failed_one_keeps_them() {
    let (gw, _up) = start().await;
    // A reload reads the file with the environment the gateway started with.
    let client = HttpClient::default();
    let auth = format!("Bearer {TOKEN}");
    let usage = |key: &'static str| {
        let client = client.clone();
        let url = gw.admin(&format!("/admin/usage?route=push&key={key}"));
        let auth = auth.clone();
        async move { client.get(&url, &[("authorization", &auth)]).await.json() }
    };
    assert_eq!(usage("9").await["limits"][0]["limit"], 3);

    // A broken bitmap: the reload is refused and names the file; user 8 stays `active`.
    gw.write_file("active.roaring", b"not a bitmap");
    let r = client
        .send(
            Method::POST,
            &gw.admin("/admin/reload"),
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("active.roaring"),
        "{}",
        r.body
    );
    assert_eq!(usage("8").await["segment"], "active");

    // A good one: user 9 joins `active`, user 8 leaves it.
    gw.write_file("active.roaring", &bitmap(&[9]));
    let r = client
        .send(
            Method::POST,
            &gw.admin("/admin/reload"),
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let nine = usage("9").await;
    assert_eq!(
        (
            nine["segment"].as_str(),
            nine["limits"][0]["limit"].as_u64()
        ),
        (Some("active"), Some(4))
    );
    assert!(usage("8").await.get("segment").is_none());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_campaign_command_sends_every_id_through_the_batch_api() {
    let (gw, _up) = start().await;
    let dir = gw.config_path.parent().unwrap().to_path_buf();
    let ids: Vec<String> = (1..=25)
        .map(|i| i.to_string())
        .chain(["7".into(), "7".into()])
        .collect();
    std::fs::write(dir.join("ids.txt"), ids.join("\n")).unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
            .args([
                "campaign",
                "--route",
                "push",
                "--chunk",
                "10",
                "--in-flight",
                "2",
            ])
            .arg("--ids")
            .arg(dir.join("ids.txt"))
            .arg("--admin")
            .arg(format!("http://{}", gw.running().admin_addr))
            .arg("--config")
            .arg(&gw.config_path)
            .env("SLIDEGATE_ADMIN_TOKEN", TOKEN)
            .output()
            .unwrap()
    };
    let first = run();
    let report = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // 27 keys: user 7 (segment new, 2 per day) appears three times, so its third is refused.
    assert!(report.contains("decided 27 keys"), "{report}");
    assert!(report.contains("26 allowed, 1 refused"), "{report}");
    assert!(report.contains("segment new"), "{report}");
    gw.stop().await;
}

#[test]
fn check_reports_segments_and_a_broken_bitmap_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    for (name, contents) in files() {
        std::fs::write(dir.path().join(name), contents).unwrap();
    }
    let toml = config("backend = \"memory\"", "http://127.0.0.1:9", TIERS);
    std::fs::write(dir.path().join("config.toml"), &toml).unwrap();
    let check = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
            .arg("check")
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .output()
            .unwrap()
    };
    let ok = check();
    let summary = String::from_utf8_lossy(&ok.stdout).into_owned();
    assert!(ok.status.success(), "{summary}");
    assert!(summary.contains("2 segment(s): 5 ids"), "{summary}");
    assert!(summary.contains("1 id(s) in more than one"), "{summary}");
    assert!(summary.contains("plans: 2 keys"), "{summary}");
    assert!(
        summary.contains("segment active: 4, segment new: 2"),
        "{summary}"
    );

    std::fs::write(dir.path().join("new.roaring"), b"garbage").unwrap();
    let bad = check();
    let stderr = String::from_utf8_lossy(&bad.stderr).into_owned();
    assert!(!bad.status.success());
    let line = toml
        .lines()
        .position(|l| l.contains("new.roaring"))
        .unwrap()
        + 1;
    assert!(stderr.contains(&format!("config.toml:{line}:")), "{stderr}");
    assert!(
        stderr.contains("segments.new.members_file") && stderr.contains("new.roaring"),
        "{stderr}"
    );
}
