//! The binary's subcommands as an operator runs them against real gateways (SPEC section 3):
//! `slidegate key` prints the key a real request is counted under, `slidegate segment build`
//! writes a bitmap a gateway then uses as a segment, `slidegate campaign` sends ids through a
//! running gateway's batch API (allowed and refused files in input order, `--dry-run` charging
//! nothing), and `slidegate check` names what is wrong with a file and where.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use http::Method;
use slidegate::app::Running;
use slidegate::config::Config;
use support::gateway::{self, TOKEN};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{observe, unique_prefix, upstream};

const SECRET: &str = "cli-test-secret";

/// `slidegate ARGS...` with the config-related environment cleared, plus `envs`.
fn slidegate(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(args)
        .env_remove("SLIDEGATE_CONFIG")
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_KEY_SECRET")
        .env_remove("SLIDEGATE_ADMIN_TOKEN")
        .envs(envs.iter().copied())
        .output()
        .expect("slidegate runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path_arg(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

/// A gateway started from `toml` written to `dir/config.toml`, with the hash secret and the
/// admin token in its environment lookup (not the process's).
async fn start_with_secret(dir: &Path, toml: &str) -> Running {
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load_with_env(&path, |name: &str| match name {
        "SLIDEGATE_KEY_SECRET" => Some(SECRET.to_string()),
        "SLIDEGATE_ADMIN_TOKEN" => Some(TOKEN.to_string()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("test config invalid: {e}"));
    slidegate::app::start(config).await.expect("gateway starts")
}

async fn usage(admin: &str, query: &str) -> serde_json::Value {
    let auth = format!("Bearer {TOKEN}");
    let r = HttpClient::default()
        .get(
            &format!("http://{admin}/admin/usage?{query}"),
            &[("authorization", &auth)],
        )
        .await;
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    r.json()
}

/// `query` with `value` percent-encoded.
fn enc(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

const KEYED: &str = r#"
[keys]
hash_secret_env = "SLIDEGATE_KEY_SECRET"

[[routes]]
name = "otp"
path = "/otp"
methods = ["POST"]
upstream = "up"
key = ["header:X-Tenant", { part = "json:email", normalize = "email" }]
  [[routes.limits]]
  name = "per-user"
  limit = 10
  window = "1h"
  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }]
  limit = 3
  window = "10m"
"#;

/// The key `slidegate key` prints for raw values is the one a real request with those values
/// is counted under: the hashed phone names the set in Redis and `/admin/usage?limit=` finds
/// the request's charge under it; a key of two parts, normalised, likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prints_the_key_a_real_request_is_counted_under() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let prefix = unique_prefix("cli-key");
    let dir = tempfile::tempdir().unwrap();
    let toml = gateway::config(
        &gateway::redis_store(&redis.url(), &prefix),
        &up.url(),
        KEYED,
    );
    let gw = start_with_secret(dir.path(), &toml).await;
    let config = dir.path().join("config.toml");
    let env = [("SLIDEGATE_KEY_SECRET", SECRET)];

    let phone = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-phone",
            "0812-3456-7890",
        ],
        &env,
    );
    assert!(phone.status.success(), "{}", stderr(&phone));
    let phone_key = stdout(&phone).trim().to_string();
    assert_eq!(phone_key.len(), 32, "16 bytes in hex: {phone_key}");
    assert!(!phone_key.contains("812"), "the raw number: {phone_key}");
    let user = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "ACME",
            " Ann+promo@Example.COM ",
        ],
        &env,
    );
    assert!(user.status.success(), "{}", stderr(&user));
    let user_key = stdout(&user).trim().to_string();
    assert_eq!(user_key, "ACME|ann@example.com");

    // nothing is counted yet under either key
    let admin = gw.admin_addr.to_string();
    let q = format!("route=otp&limit=per-phone&key={}", enc(&phone_key));
    assert_eq!(usage(&admin, &q).await["limits"][0]["used"], 0);

    // one real request, the number spelled another way
    let body = r#"{"email":"ann@example.com","phone":"+62 812 3456 7890"}"#;
    let r = HttpClient::default()
        .send(
            Method::POST,
            &format!("http://{}/otp", gw.proxy_addr),
            &[("content-type", "application/json"), ("x-tenant", "ACME")],
            body,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let by_phone = usage(&admin, &q).await;
    assert_eq!(by_phone["limits"][0]["name"], "per-phone", "{by_phone}");
    assert_eq!(by_phone["limits"][0]["used"], 1, "{by_phone}");
    let by_user = usage(&admin, &format!("route=otp&key={}", enc(&user_key))).await;
    assert_eq!(by_user["limits"][0]["name"], "per-user", "{by_user}");
    assert_eq!(by_user["limits"][0]["used"], 1, "{by_user}");
    let keys = observe::keys(&redis, &prefix);
    let set = keys
        .iter()
        .find(|k| k.ends_with(&format!("|{phone_key}}}#log")))
        .unwrap_or_else(|| panic!("no set named by the printed key in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", set]).int(), 1);

    // a value the part cannot take, and a limit the route does not have
    let bad = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-phone",
            "call me",
        ],
        &env,
    );
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("`call me` is not a valid value"),
        "{}",
        stderr(&bad)
    );
    let unknown = slidegate(
        &[
            "key",
            "--config",
            path_arg(&config),
            "--route",
            "otp",
            "--limit",
            "per-day",
            "x",
        ],
        &env,
    );
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("no limit `per-day`"),
        "{}",
        stderr(&unknown)
    );
    gw.shutdown().await;
}

const SEGMENTED: &str = r#"
[segments.vip]
members_file = "vip.roaring"

[[routes]]
name = "push"
path = "/push"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 1
  window = "1d"
    [routes.limits.segments]
    vip = 3
"#;

/// `segment build` writes a bitmap of the ids it read (blank lines skipped); a gateway that
/// takes it as a segment gives its members the segment's value and everyone else the limit's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_build_writes_a_bitmap_a_gateway_uses() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("vip.txt");
    std::fs::write(&ids, "7\n\n  4000000000  \n100\n7\n").unwrap();
    let out = dir.path().join("vip.roaring");
    let built = slidegate(&["segment", "build", path_arg(&ids), path_arg(&out)], &[]);
    assert!(built.status.success(), "{}", stderr(&built));
    assert!(
        stdout(&built).contains("vip.roaring: 3 ids"),
        "{}",
        stdout(&built)
    );

    let up = upstream::start().await;
    let toml = gateway::config("backend = \"memory\"", &up.url(), SEGMENTED);
    let bitmap = std::fs::read(&out).unwrap();
    let gw = gateway::start_with_files(&toml, &[("vip.roaring", bitmap)]).await;
    let client = HttpClient::default();
    let url = gw.url("/push");
    for (user, allowed, segment) in [
        ("7", 3, Some("vip")),
        ("4000000000", 3, Some("vip")),
        ("100", 3, Some("vip")),
        ("8", 1, None),
    ] {
        let mut statuses = Vec::new();
        let mut last = None;
        for _ in 0..=allowed {
            let r = client.get(&url, &[("x-user", user)]).await;
            statuses.push(r.status.as_u16());
            last = Some(r);
        }
        let mut expected = vec![200u16; allowed];
        expected.push(429);
        assert_eq!(statuses, expected, "user {user}");
        let body = last.unwrap().json();
        assert_eq!(body["segment"].as_str(), segment, "user {user}: {body}");
    }
    gw.stop().await;
}

/// An ids file with a line that is not a u32 is refused with the line's number, and no bitmap
/// is written.
#[test]
fn segment_build_refuses_an_id_that_is_not_a_u32_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for (contents, line, bad) in [
        ("1\n2\nabc\n", 3, "abc"),
        ("1\n\n4294967296\n", 3, "4294967296"),
        ("-1\n", 1, "-1"),
    ] {
        let ids = dir.path().join("ids.txt");
        std::fs::write(&ids, contents).unwrap();
        let out = dir.path().join("out.roaring");
        let run = slidegate(&["segment", "build", path_arg(&ids), path_arg(&out)], &[]);
        let err = stderr(&run);
        assert!(!run.status.success(), "{contents:?}");
        assert!(
            err.contains(&format!("ids.txt:{line}: `{bad}` is not a user id")),
            "{contents:?}: {err}"
        );
        assert!(!out.exists(), "no bitmap written for {contents:?}");
    }
}

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
        report.contains("38 allowed, 2 denied (dry run: nothing was charged)"),
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
    assert!(report.contains("38 allowed, 2 denied\n"), "{report}");
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

/// `check` on a file that does not exist says so and how to name one; on a value of the wrong
/// type it names the file, line and column, the field and the type expected.
#[test]
fn check_names_a_missing_file_and_a_wrong_type_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let run = slidegate(&["check", "--config", path_arg(&missing)], &[]);
    assert!(!run.status.success());
    let err = stderr(&run);
    assert!(
        err.contains(&format!("{}: no such file", missing.display())),
        "{err}"
    );
    assert!(err.contains("--config FILE"), "{err}");

    let toml = gateway::config(
        "backend = \"memory\"",
        "http://127.0.0.1:9",
        "[[routes]]\nname = \"r\"\npath = \"/x\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"l\"\n  limit = \"5\"\n  window = \"1m\"\n",
    );
    let file = dir.path().join("config.toml");
    std::fs::write(&file, &toml).unwrap();
    let (line, text) = toml
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("limit = \"5\""))
        .unwrap();
    let column = text.find('"').unwrap() + 1;
    let run = slidegate(&["check", "--config", path_arg(&file)], &[]);
    assert!(!run.status.success());
    let err = stderr(&run);
    let expected = format!(
        "{}:{}:{column}: routes[0].limits[0].limit: invalid type: string \"5\", expected an integer",
        file.display(),
        line + 1
    );
    assert!(err.contains(&expected), "expected {expected:?} in {err}");
    assert!(stdout(&run).is_empty(), "no summary for a refused file");

    // the same file with the number written as one passes
    std::fs::write(&file, toml.replace("limit = \"5\"", "limit = 5")).unwrap();
    let run = slidegate(&["check", "--config", path_arg(&file)], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("5 per 1m"), "{}", stdout(&run));
}
