//! The gateway's log as an operator reads it (the real binary, its stderr): while its Redis is
//! down, requests are still answered by each route's `on_error`, the log says "store
//! unreachable" once for the outage (not once per request, and nothing from the Redis client
//! library `fred`), and once Redis is back on its port, one line "store is back after X s".
//! The access log's durations are fixed decimals (milliseconds with three digits), in text and
//! in JSON lines (`SLIDEGATE_LOG_FORMAT=json`). A `SLIDEGATE_LOG` that is not a filter is named
//! in a warning, and the gateway logs at `info`. The releases a stalled store makes the gateway
//! send again are not logged at each try.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::http::HttpClient;
use support::process::Process;
use support::redis::RedisServer;
use support::upstream;

/// The two routes of the outage tests: `/open` fails open, `/closed` fails closed.
const OUTAGE_ROUTES: &str = r#"
[[routes]]
name = "open"
path = "/open"
upstream = "up"
  [[routes.limits]]
  name = "per-minute"
  limit = 1000
  window = "1m"

[[routes]]
name = "closed"
path = "/closed"
upstream = "up"
on_error = "deny"
  [[routes.limits]]
  name = "per-minute"
  limit = 1000
  window = "1m"
"#;

fn write_config(dir: &std::path::Path, redis: &RedisServer, upstream: &str) -> std::path::PathBuf {
    write_config_with(dir, redis, upstream, OUTAGE_ROUTES)
}

/// A config on `redis` (`store.timeout` 100 ms, `on_error = "allow"`) in front of `upstream`
/// with `routes`, written in `dir`.
fn write_config_with(
    dir: &std::path::Path,
    redis: &RedisServer,
    upstream: &str,
    routes: &str,
) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[store]
backend = "redis"
url = "{redis}"
timeout = "100ms"
on_error = "allow"
[upstreams.up]
url = "{upstream}"
{routes}"#,
        redis = redis.url()
    );
    std::fs::write(&path, toml).unwrap();
    path
}

async fn decisions(admin: SocketAddr, route: &str, decision: &str) -> f64 {
    let text = HttpClient::default()
        .get(&format!("http://{admin}/metrics"), &[])
        .await
        .body;
    support::metrics::value(
        &text,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
    .unwrap_or(0.0)
}

/// `text` is milliseconds with exactly three decimals (`12.345`).
fn fixed_millis(text: &str) -> bool {
    let Some((whole, frac)) = text.split_once('.') else {
        return false;
    };
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.len() == 3
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// What the log shows of one outage: the lines from Redis's death until "store is back".
/// Requests during the outage are answered by `on_error` (`/open` allows, `/closed` 503s); the
/// first request after Redis is back on its port decided by the store ends the outage.
async fn outage(
    gw: &Process,
    proxy: SocketAddr,
    admin: SocketAddr,
    redis: &mut RedisServer,
) -> (Vec<String>, f64) {
    let client = HttpClient::default();
    assert_eq!(
        client.status(&format!("http://{proxy}/open"), &[]).await,
        200
    );
    assert_eq!(decisions(admin, "open", "allowed").await, 1.0);
    redis.kill();
    for _ in 0..10 {
        assert_eq!(
            client.status(&format!("http://{proxy}/open"), &[]).await,
            200
        );
        let closed = client.get(&format!("http://{proxy}/closed"), &[]).await;
        assert_eq!(closed.status, 503, "{}", closed.body);
        assert_eq!(closed.header("retry-after"), Some("1"));
    }
    assert_eq!(decisions(admin, "open", "store_error_allowed").await, 10.0);
    assert_eq!(decisions(admin, "closed", "store_error_denied").await, 10.0);
    // the client reconnects on its own; a request decided by the store again ends the outage
    redis.restart();
    let mut back = false;
    for _ in 0..200 {
        assert_eq!(
            client.status(&format!("http://{proxy}/open"), &[]).await,
            200
        );
        if decisions(admin, "open", "allowed").await >= 2.0 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "the store never decided again after Redis came back");
    let lines = gw.lines_until("store is back after");
    let unreachable = lines
        .iter()
        .filter(|l| l.contains("store unreachable"))
        .count();
    assert_eq!(
        unreachable,
        1,
        "one line for the outage:\n{}",
        lines.join("\n")
    );
    // the 10 requests above, and those that came before the client had reconnected
    let allowed_by_on_error = decisions(admin, "open", "store_error_allowed").await;
    (lines, allowed_by_on_error)
}

/// Text logs (the default): one "store unreachable" line and one "store is back after X s"
/// line for an outage, no line of `fred`'s, and access lines with fixed-decimal durations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_told_once_and_its_end_once_in_text() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &redis, &up.url());
    let gw = Process::start(&config, &[]);
    let (proxy, admin) = gw.listening();
    let (lines, _) = outage(&gw, proxy, admin, &mut redis).await;
    assert!(
        lines.iter().all(|l| !l.contains("fred")),
        "the Redis client's own lines:\n{}",
        lines.join("\n")
    );
    let back = lines.last().unwrap();
    let secs = back
        .split("store is back after ")
        .nth(1)
        .and_then(|rest| rest.split_once(" s").map(|(secs, _)| secs))
        .unwrap_or_else(|| panic!("{back}"));
    let (whole, tenth) = secs.split_once('.').unwrap_or_else(|| panic!("{back}"));
    assert!(
        whole.parse::<u64>().is_ok() && tenth.len() == 1 && tenth.parse::<u8>().is_ok(),
        "the outage's length in seconds with one decimal: {back}"
    );
    let access: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("slidegate::access"))
        .collect();
    assert!(access.len() >= 21, "{} access lines", access.len());
    for line in access {
        for field in ["duration_ms=", "upstream_ms="] {
            let value = line
                .split(field)
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("no {field} in {line}"));
            assert!(fixed_millis(value), "{field}{value} in {line}");
        }
    }
}

/// JSON lines: the same story, every line a JSON object, no target of `fred`'s, the access
/// log's `duration_ms` and `upstream_ms` strings of fixed decimals, and the requests of the
/// outage logged with their `on_error` decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_told_once_and_its_end_once_in_json() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &redis, &up.url());
    let gw = Process::start(&config, &[("SLIDEGATE_LOG_FORMAT", "json")]);
    let (proxy, admin) = gw.listening();
    let (lines, allowed_by_on_error) = outage(&gw, proxy, admin, &mut redis).await;
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for line in &parsed {
        let target = line["target"].as_str().unwrap_or("");
        assert!(
            !target.starts_with("fred"),
            "a line of the Redis client: {line}"
        );
    }
    let warnings: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("store unreachable"))
        })
        .collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0]["level"], "WARN", "{}", warnings[0]);
    let back = parsed.last().unwrap();
    assert_eq!(back["level"], "INFO", "{back}");
    let down_s = back["fields"]["down_s"]
        .as_str()
        .unwrap_or_else(|| panic!("{back}"));
    assert!(
        back["fields"]["message"] == format!("store is back after {down_s} s").as_str(),
        "{back}"
    );
    let access: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|l| l["target"] == "slidegate::access")
        .collect();
    let mut decisions = Vec::new();
    for line in &access {
        let fields = &line["fields"];
        for name in ["duration_ms", "upstream_ms"] {
            let value = &fields[name];
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string);
            assert!(fixed_millis(&text), "{name} = {value} in {line}");
        }
        decisions.push((
            fields["route"].as_str().unwrap_or("").to_string(),
            fields["decision"].as_str().unwrap_or("").to_string(),
        ));
    }
    for (route, decision, n) in [
        ("open", "store_error_allowed", allowed_by_on_error as usize),
        ("closed", "store_error_denied", 10),
    ] {
        let logged = decisions
            .iter()
            .filter(|(r, d)| r == route && d == decision)
            .count();
        assert_eq!(logged, n, "{route} {decision}: {decisions:?}");
    }
}

/// `SLIDEGATE_LOG` that does not parse as a filter (`loud` is no level): the gateway says so,
/// naming the variable and the value, and logs at `info` (its start-up line shows).
#[test]
fn a_log_filter_that_does_not_parse_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let toml = "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
                [store]\nbackend = \"memory\"\n";
    std::fs::write(&config, toml).unwrap();
    let gw = Process::start(&config, &[("SLIDEGATE_LOG", "slidegate=loud")]);
    let lines = gw.lines_until("listening on");
    let warning = lines
        .iter()
        .find(|l| l.contains("SLIDEGATE_LOG"))
        .unwrap_or_else(|| panic!("no line names SLIDEGATE_LOG:\n{}", lines.join("\n")));
    assert!(
        warning.contains("WARN") && warning.contains("`slidegate=loud` is not a log filter"),
        "{warning}"
    );
}

/// A store stalled past `store.timeout` while an attempt on a route that counts outcomes is let
/// through by `on_error`: the gateway keeps a release of its reservation and sends it again
/// every 100 ms while Redis cannot answer. Those tries are not logged one by one (a line per
/// kept release per try would flood the log for the length of the stall); the release is
/// applied once Redis answers, and nothing says it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_sent_again_during_a_stall_log_nothing() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let routes = r#"
[[routes]]
name = "login"
path = "/login/*"
upstream = "up"
  [[routes.limits]]
  name = "failures"
  limit = 5
  window = "1m"
  count_status = [401]
"#;
    let config = write_config_with(dir.path(), &redis, &up.url(), routes);
    let gw = Process::start(&config, &[]);
    let (proxy, _) = gw.listening();
    let client = HttpClient::default();
    let login = |step: &'static str| {
        let url = format!("http://{proxy}/login/{step}");
        let client = client.clone();
        async move { client.status(&url, &[]).await }
    };
    let calls_at_start = redis.decision_calls();
    assert_eq!(login("first").await, 200, "the store answers");
    // Its decision and the settlement of its status have both run before the stall: what the
    // lines below hold is about the attempt made during it.
    support::leaving::eventually(|| async {
        (redis.decision_calls() >= calls_at_start + 2).then_some(())
    })
    .await;
    let calls_before = redis.decision_calls();
    redis.pause();
    assert_eq!(login("in-the-stall").await, 200, "let through by on_error");
    // the release is tried again every 100 ms (each try timing out after 100 ms)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.resume();
    let lines = gw.lines_until("in-the-stall");
    support::leaving::eventually(|| async {
        (redis.decision_calls() >= calls_before + 2).then_some(())
    })
    .await;
    assert_eq!(login("after-the-stall").await, 200);
    let lines = [lines, gw.lines_until("after-the-stall")].concat();
    let failed: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("could not settle"))
        .collect();
    assert!(
        failed.is_empty(),
        "{} lines for the tries of one release:\n{}",
        failed.len(),
        lines.join("\n")
    );
}
