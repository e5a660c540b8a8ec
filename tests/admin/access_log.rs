//! The access log of the real binary with `SLIDEGATE_LOG_FORMAT=json`: one JSON line per request
//! on target `slidegate::access` with the request id, route, method, path, status, decision, the
//! limit that decided, the derived key as `/admin/usage` takes it (`%`, `|`, control characters
//! and bytes that are not UTF-8 written `%XX`, a part that fell back to the client IP written
//! `%ip:<addr>`; hashed only past 64 bytes), the upstream's status and the durations (`upstream_ms`,
//! `duration_ms`: strings of milliseconds with three decimals); `access_log = false` silences a
//! route, and `access_log_sample` skips allowed requests only.

use crate::support;

use std::collections::HashMap;

use serde_json::Value;
use support::http::HttpClient;
use support::process::Process;
use support::{raw, upstream};

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
name = "fallback"
path = "/fallback"
upstream = "up"
key = ["header:X-Key"]
on_missing_key = "ip"
  [[routes.limits]]
  name = "per-minute"
  limit = 5
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

/// A duration field: a string of milliseconds with exactly three decimals, as a number.
fn millis(field: &Value) -> f64 {
    let text = field
        .as_str()
        .unwrap_or_else(|| panic!("a duration is a string: {field}"));
    let (whole, decimals) = text
        .split_once('.')
        .unwrap_or_else(|| panic!("three decimals: {text:?}"));
    assert!(
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && decimals.len() == 3
            && decimals.bytes().all(|b| b.is_ascii_digit()),
        "milliseconds with three decimals: {text:?}"
    );
    text.parse().unwrap()
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
    // `|`, `%` and a control character (a tab) are escaped, so no two tuples of values share a key.
    let (s, escaped) = get("/api/d", Some("a|b%c\td")).await;
    assert_eq!(s, 200);
    // Bytes that are not UTF-8 (obs-text in a header value), which no client library sends.
    let not_utf8 = raw::send(
        proxy,
        b"GET /api/e HTTP/1.1\r\nHost: gw\r\nX-Key: caf\xe9\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(not_utf8.status, 200, "{not_utf8:?}");
    let not_utf8 = not_utf8.header("x-request-id").unwrap().to_string();
    // No key header: the client IP, marked; a client sending that text as its key gets another.
    let (s, fell_back) = get("/fallback", None).await;
    assert_eq!(s, 200);
    let (s, spoofed) = get("/fallback", Some("%ip:127.0.0.1")).await;
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
    let upstream_ms = millis(&f["upstream_ms"]);
    let duration_ms = millis(&f["duration_ms"]);
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
    // README: logs show the derived key, also one Redis stores hashed (a space, braces)
    let f = line(&odd);
    assert_eq!(f["key"], unsafe_key, "{f}");
    assert_eq!(line(&escaped)["key"], "a%7Cb%25c%09d");
    assert_eq!(line(&not_utf8)["key"], "caf%E9");
    assert_eq!(line(&fell_back)["key"], "%ip:127.0.0.1");
    assert_eq!(line(&spoofed)["key"], "%25ip:127.0.0.1");
    let all = lines.join("\n");
    assert!(!all.contains(&long_key), "a long key is never logged raw");

    let f = line(&rejected);
    assert_eq!(f["status"], 429);
    assert_eq!(f["decision"], "rejected");
    assert_eq!(f["limit"], "per-minute");
    assert_eq!(f["key"], "short-key");
    assert_eq!(f["upstream_status"], 0, "not forwarded");
    assert_eq!(millis(&f["upstream_ms"]), 0.0, "not forwarded");
    assert!(millis(&f["duration_ms"]) > 0.0, "{f}");

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
