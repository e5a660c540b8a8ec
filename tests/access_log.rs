//! The access log of the real binary with `SLIDEGATE_LOG_FORMAT=json`: one JSON line per request
//! on target `slidegate::access` with the request id, route, method, path, status, decision, the
//! limit that decided, the derived key (hashed only past 64 bytes), the upstream's
//! status and the durations; `access_log = false` silences a route, and `access_log_sample`
//! skips allowed requests only.

mod support;

use std::collections::HashMap;

use serde_json::Value;
use support::http::HttpClient;
use support::process::Process;
use support::upstream;

fn write_config(dir: &std::path::Path, upstream: &str) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[store]
backend = "memory"
[upstreams.up]
url = "{upstream}"

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = ["header:X-Key"]
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"

[[routes]]
name = "quiet"
path = "/quiet"
upstream = "up"
access_log = false
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "sampled"
path = "/sampled"
upstream = "up"
access_log_sample = 0.0
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#
    );
    std::fs::write(&path, toml).unwrap();
    path
}

/// `#` and 32 lower-case hex digits: a hashed key.
fn is_hashed(key: &str) -> bool {
    key.len() == 33
        && key.starts_with('#')
        && key[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_json_line_per_request_with_its_key_and_per_route_switches() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &up.url());
    let process = Process::start(&config, &[("SLIDEGATE_LOG_FORMAT", "json")]);
    let (proxy, _) = process.listening();
    let client = HttpClient::default();
    let url = |path: &str| format!("http://{proxy}{path}");
    let get = |path: &str, key: Option<&str>| {
        let (client, url) = (client.clone(), url(path));
        let key = key.map(str::to_string);
        async move {
            let headers: Vec<(&str, &str)> = key.iter().map(|k| ("x-key", k.as_str())).collect();
            let r = client.get(&url, &headers).await;
            let id = r.header("x-request-id").unwrap().to_string();
            (r.status.as_u16(), id)
        }
    };

    let long_key = "k".repeat(100);
    let unsafe_key = "a b{c}";
    let (s, first) = get("/api/a", Some("short-key")).await;
    assert_eq!(s, 200);
    let (s, long) = get("/api//b?x=1", Some(&long_key)).await;
    assert_eq!(s, 200);
    let (s, odd) = get("/api/c", Some(unsafe_key)).await;
    assert_eq!(s, 200);
    assert_eq!(get("/api/a", Some("short-key")).await.0, 200);
    let (s, rejected) = get("/api/a", Some("short-key")).await;
    assert_eq!(s, 429);
    assert_eq!(get("/quiet", None).await.0, 200);
    assert_eq!(get("/quiet", None).await.0, 429);
    assert_eq!(get("/sampled", None).await.0, 200);
    let (s, sampled_429) = get("/sampled", None).await;
    assert_eq!(s, 429);
    // Every line of the requests above was written before this one's.
    let (_, marker) = get("/api/marker", Some("marker")).await;

    let lines = process.lines_until(&marker);
    let access: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "slidegate::access")
        .map(|v| v["fields"].clone())
        .collect();
    let mut by_id: HashMap<String, Vec<&Value>> = HashMap::new();
    for f in &access {
        by_id
            .entry(f["request_id"].as_str().unwrap().to_string())
            .or_default()
            .push(f);
    }
    let line = |id: &str| -> &Value {
        let found = by_id
            .get(id)
            .unwrap_or_else(|| panic!("no access line for {id}"));
        assert_eq!(found.len(), 1, "one line per request: {found:?}");
        found[0]
    };

    let f = line(&first);
    assert_eq!(f["route"], "api");
    assert_eq!(f["method"], "GET");
    assert_eq!(f["path"], "/api/a");
    assert_eq!(f["status"], 200);
    assert_eq!(f["decision"], "allowed");
    assert_eq!(f["limit"], "per-minute");
    assert_eq!(f["key"], "short-key");
    assert_eq!(f["upstream_status"], 200);
    let upstream_ms = f["upstream_ms"].as_f64().unwrap();
    let duration_ms = f["duration_ms"].as_f64().unwrap();
    assert!(
        upstream_ms > 0.0 && duration_ms >= upstream_ms,
        "upstream {upstream_ms} ms, total {duration_ms} ms"
    );

    let f = line(&long);
    assert_eq!(
        f["path"], "/api//b",
        "the path as the client sent it, no query"
    );
    assert!(is_hashed(f["key"].as_str().unwrap()), "{f}");
    // SPEC: logs show the derived key, also one Redis stores hashed (a space, braces)
    let f = line(&odd);
    assert_eq!(f["key"], unsafe_key, "{f}");
    let all = lines.join("\n");
    assert!(!all.contains(&long_key), "a long key is never logged raw");

    let f = line(&rejected);
    assert_eq!(f["status"], 429);
    assert_eq!(f["decision"], "rejected");
    assert_eq!(f["limit"], "per-minute");
    assert_eq!(f["key"], "short-key");
    assert_eq!(f["upstream_status"], 0, "not forwarded");

    assert!(
        access.iter().all(|f| f["route"] != "quiet"),
        "access_log = false writes nothing: {access:?}"
    );
    let sampled: Vec<&Value> = access.iter().filter(|f| f["route"] == "sampled").collect();
    assert_eq!(
        sampled.len(),
        1,
        "sample 0.0 skips the allowed request only: {sampled:?}"
    );
    assert_eq!(sampled[0]["request_id"], sampled_429.as_str());
    assert_eq!(sampled[0]["decision"], "rejected");
    assert_eq!(sampled[0]["status"], 429);
}
