//! `slidegate campaign` against a running gateway's batch API (README, "Running"): allowed and refused
//! files in input order, `--dry-run` charging nothing, an ids file with a line that is not a user
//! id stopping it before anything is sent, and a wrong token failing it.

use crate::support;

use std::path::Path;

use support::cli_commands::{path_arg, slidegate, stderr, stdout, usage};
use support::gateway::{self, TOKEN};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{observe, unique_prefix, upstream};

const CAMPAIGN: &str = r#"
[[routes]]
name = "push"
path = "/push"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 2
  window = "1d"
"#;

/// One line of a refused file: `id<TAB>decision<TAB>retry_after_ms`, without the time.
fn refused_ids(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(fields.len(), 3, "{l:?}");
            let retry: u64 = fields[2].parse().unwrap();
            assert!(retry > 86_000_000 && retry <= 86_400_000, "{l:?}");
            (fields[0].parse().unwrap(), fields[1].to_string())
        })
        .collect()
}

/// `slidegate campaign` against a running gateway: the allowed file lists exactly the allowed
/// ids in input order (several calls in flight), the refused file the refused ones with their
/// decision; `--dry-run` answers the same and charges nothing (Redis and `/admin/usage`
/// unchanged, and the real run afterwards allows the same ids); a file with a line that is not
/// a u32 stops the campaign before anything is sent; a wrong token fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_writes_who_may_be_messaged_and_a_dry_run_charges_nothing() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let prefix = unique_prefix("campaign");
    let toml = gateway::config(
        &gateway::redis_store(&redis.url(), &prefix),
        &up.url(),
        CAMPAIGN,
    );
    let gw = gateway::start(&toml).await;
    let client = HttpClient::default();
    // users 13 and 27 already had their 2 messages today
    for user in ["13", "27"] {
        for _ in 0..2 {
            assert_eq!(
                client
                    .get(&gw.url("/push"), &[("x-user", user)])
                    .await
                    .status,
                200
            );
        }
    }
    let units = || observe::units(&redis, &prefix);
    assert_eq!(units(), 4);

    let dir = tempfile::tempdir().unwrap();
    // 40 users in a shuffled order, so input order is not sorted order
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 17) % 40 + 1).collect();
    let text: String = ids.iter().map(|i| format!("{i}\n")).collect();
    let ids_file = dir.path().join("ids.txt");
    std::fs::write(&ids_file, text).unwrap();
    let admin = format!("http://{}", gw.running().admin_addr);
    let config = gw.config_path.clone();
    let run = |tag: &str, dry_run: bool, token: &str, ids_file: &Path| {
        let allowed = dir.path().join(format!("{tag}.allowed"));
        let refused = dir.path().join(format!("{tag}.refused"));
        let mut args = vec![
            "campaign".to_string(),
            "--config".into(),
            path_arg(&config).into(),
            "--route".into(),
            "push".into(),
            "--ids".into(),
            path_arg(ids_file).into(),
            "--allowed".into(),
            path_arg(&allowed).into(),
            "--refused".into(),
            path_arg(&refused).into(),
            "--admin".into(),
            admin.clone(),
            "--chunk".into(),
            "3".into(),
            "--in-flight".into(),
            "4".into(),
        ];
        if dry_run {
            args.push("--dry-run".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = slidegate(&args, &[("SLIDEGATE_ADMIN_TOKEN", token)]);
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        (output, read(&allowed), read(&refused))
    };
    let expected_allowed: String = ids
        .iter()
        .filter(|i| **i != 13 && **i != 27)
        .map(|i| format!("{i}\n"))
        .collect();
    let expected_refused: Vec<(u32, String)> = ids
        .iter()
        .filter(|i| **i == 13 || **i == 27)
        .map(|i| (*i, "rejected".to_string()))
        .collect();

    let (dry, allowed, refused) = run("dry", true, TOKEN, &ids_file);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let report = stdout(&dry);
    assert!(report.contains("decided 40 keys"), "{report}");
    assert!(
        report.contains("38 allowed, 2 refused (dry run: nothing was charged)"),
        "{report}"
    );
    assert_eq!(allowed.as_deref(), Some(expected_allowed.as_str()));
    assert_eq!(refused_ids(&refused.unwrap()), expected_refused);
    assert_eq!(units(), 4, "a dry run writes nothing to Redis");
    let one = usage(&gw.running().admin_addr.to_string(), "route=push&key=1").await;
    assert_eq!(one["limits"][0]["used"], 0, "{one}");

    let (real, allowed, refused) = run("real", false, TOKEN, &ids_file);
    assert!(real.status.success(), "{}", stderr(&real));
    let report = stdout(&real);
    assert!(report.contains("38 allowed, 2 refused\n"), "{report}");
    assert_eq!(allowed.as_deref(), Some(expected_allowed.as_str()));
    assert_eq!(refused_ids(&refused.unwrap()), expected_refused);
    assert_eq!(units(), 4 + 38, "each allowed id charged once");
    let one = usage(&gw.running().admin_addr.to_string(), "route=push&key=1").await;
    assert_eq!(one["limits"][0]["used"], 1, "{one}");

    // a line that is not a user id: refused before anything is sent
    let bad_ids = dir.path().join("bad.txt");
    std::fs::write(&bad_ids, "1\n2\n\n3x\n4\n").unwrap();
    let (bad, _, _) = run("bad", false, TOKEN, &bad_ids);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("bad.txt:4: `3x` is not a user id"),
        "{}",
        stderr(&bad)
    );
    assert_eq!(units(), 42, "nothing was sent");

    // a wrong token: the gateway refuses the call and the campaign fails saying so
    let (wrong, _, _) = run("wrong", false, "not-the-token", &ids_file);
    assert!(!wrong.status.success());
    assert!(stderr(&wrong).contains("401"), "{}", stderr(&wrong));
    assert_eq!(units(), 42);
    gw.stop().await;
}

/// `--chunk` and `--in-flight` outside what the batch API takes are refused at once (exit 2,
/// naming the bound), not clamped in silence.
#[test]
fn chunk_and_in_flight_out_of_range_are_refused() {
    for (flag, value, bound) in [
        ("--chunk", "0", "1..=10000"),
        ("--chunk", "10001", "1..=10000"),
        ("--in-flight", "0", "1..=64"),
    ] {
        let run = slidegate(
            &[
                "campaign",
                "--config",
                "config.toml",
                "--route",
                "push",
                "--ids",
                "/dev/null",
                flag,
                value,
            ],
            &[],
        );
        assert_eq!(run.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&run).contains(bound), "{}", stderr(&run));
    }
}
