//! The recipes `examples/otp.toml` and `examples/login.toml`, run as written: only the listen
//! addresses (port 0), the store URL (a test Redis) and the upstream URL (a real upstream that
//! answers like the service: 200 for an OTP, 200 for the password `right` and 401 otherwise) are
//! replaced; every route and limit stays as the file has it. Each test drives the attack the
//! recipe's comments describe and checks what the recipe promises, in the gateway's answers, in
//! Redis, in the upstream and in the metrics. `slidegate check` must accept both files.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use slidegate::app::Running;
use slidegate::config::Config;
use support::gateway::TOKEN;
use support::http::{HttpClient, Reply};
use support::metrics;
use support::redis::{RedisServer, Resp};

/// The secret `hash = true` key parts are keyed with in these tests.
const SECRET: &str = "recipe-test-secret";

/// The rate-limit headers a quiet route (`headers = false`) must not send.
const QUIET: [&str; 5] = [
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

fn recipe_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// `text` with each `(from, to)` replaced; each `from` must occur exactly once, so a recipe that
/// changes makes this test fail instead of silently testing something else.
fn adapt(text: &str, replacements: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in replacements {
        assert_eq!(
            out.matches(from).count(),
            1,
            "the recipe no longer has exactly one `{from}`"
        );
        out = out.replacen(from, to, 1);
    }
    out
}

/// The bodies an upstream was sent, with their paths, in arrival order.
type SeenBodies = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// The service behind the recipes: `POST /api/login` answers 200 for the password `right` and
/// 401 for anything else, every other path 200 (an OTP sent); it records every body.
struct Service {
    addr: SocketAddr,
    bodies: SeenBodies,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Service {
    async fn start() -> Service {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: SeenBodies = Arc::default();
        let seen = bodies.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        async move { Ok::<_, Infallible>(answer(req, &seen).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Service { addr, bodies, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies posted to `path`, as text, in arrival order.
    fn bodies(&self, path: &str) -> Vec<String> {
        let all = self.bodies.lock().unwrap();
        all.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<(String, Vec<u8>)>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    seen.lock().unwrap().push((path.clone(), body.to_vec()));
    let status = match path.as_str() {
        "/api/login" => {
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match json.get("password").and_then(|p| p.as_str()) {
                Some("right") => 200,
                _ => 401,
            }
        }
        _ => 200,
    };
    let mut response = Response::new(Full::new(Bytes::from_static(b"answered")));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    response
}

/// A gateway running a recipe, and its config file (a reload reads it again).
struct Recipe {
    running: Option<Running>,
    _dir: tempfile::TempDir,
}

impl Recipe {
    /// The recipe `name` with its listeners on port 0, its store on `redis` and its one upstream
    /// at `upstream`; the hash secret and the admin token come from the test's environment
    /// lookup, not the process's.
    async fn start(name: &str, redis: &RedisServer, upstream: &Service) -> Recipe {
        let text = std::fs::read_to_string(recipe_path(name)).unwrap();
        let toml = adapt(
            &text,
            &[
                (
                    "listen = \"127.0.0.1:8080\"",
                    "listen = \"127.0.0.1:0\"".into(),
                ),
                (
                    "listen = \"127.0.0.1:9091\"",
                    "listen = \"127.0.0.1:0\"".into(),
                ),
                (
                    "url = \"redis://127.0.0.1:6379\"",
                    format!("url = \"{}\"", redis.url()),
                ),
                (
                    "url = \"http://127.0.0.1:9000\"",
                    format!("url = \"{}\"", upstream.url()),
                ),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &toml).unwrap();
        let config = Config::load_with_env(&path, |name: &str| match name {
            "SLIDEGATE_KEY_SECRET" => Some(SECRET.to_string()),
            "SLIDEGATE_ADMIN_TOKEN" => Some(TOKEN.to_string()),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("the recipe {name} does not load: {e}"));
        let running = slidegate::app::start(config).await.expect("gateway starts");
        Recipe {
            running: Some(running),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.as_ref().unwrap().proxy_addr)
    }

    fn admin(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.as_ref().unwrap().admin_addr)
    }

    async fn metrics(&self) -> String {
        HttpClient::default()
            .get(&self.admin("/metrics"), &[])
            .await
            .body
    }

    async fn admin_get(&self, path: &str) -> serde_json::Value {
        let auth = format!("Bearer {TOKEN}");
        let r = HttpClient::default()
            .get(&self.admin(path), &[("authorization", &auth)])
            .await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()
    }

    async fn reload(&self) {
        let auth = format!("Bearer {TOKEN}");
        let r = HttpClient::default()
            .send(
                Method::POST,
                &self.admin("/admin/reload"),
                &[("authorization", &auth)],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "reload: {}", r.body);
    }

    async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// POSTs a JSON `body` as the client at `ip` (127.0.0.1 is a trusted proxy, so the gateway
/// takes the client from `X-Forwarded-For`).
async fn post_as(client: &HttpClient, url: &str, ip: &str, body: &str) -> Reply {
    client
        .send(
            Method::POST,
            url,
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", ip),
            ],
            body,
        )
        .await
}

/// The `n`-th of many client IPs, each different.
fn ip(n: u32) -> String {
    format!("198.18.{}.{}", n / 250, n % 250 + 1)
}

fn count(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(metrics, name, labels).unwrap_or(0.0)
}

fn requests(metrics: &str, route: &str, decision: &str) -> f64 {
    count(
        metrics,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
}

/// A 429 of a quiet route: no rate-limit header, and a `Retry-After` of whole seconds that is
/// the body's `retry_after_ms` rounded up. Returns the body.
fn assert_quiet_429(r: &Reply, limit: &str) -> serde_json::Value {
    assert_eq!(r.status, 429, "{}", r.body);
    for name in QUIET {
        assert!(r.header(name).is_none(), "{name} on a quiet route's 429");
    }
    let body = r.json();
    assert_eq!(body["limit"], limit, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    let retry_after: u64 = r
        .header("retry-after")
        .expect("Retry-After on a quiet 429")
        .parse()
        .unwrap();
    assert_eq!(retry_after, retry_ms.div_ceil(1000).max(1), "{body}");
    body
}

/// Every key in `redis` (`KEYS *`, fine on a test server).
fn all_keys(redis: &RedisServer) -> Vec<String> {
    match redis.cmd(&["KEYS", "*"]) {
        Resp::Array(items) => items
            .into_iter()
            .filter_map(|k| match k {
                Resp::Bulk(Some(k)) => Some(k),
                _ => None,
            })
            .collect(),
        other => panic!("KEYS failed: {other:?}"),
    }
}

/// The 16 bytes of HMAC-SHA256 of `value` under `secret`, in hex (SPEC section 9, `hash = true`).
fn hmac_hex(secret: &str, value: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256>>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(value.as_bytes());
    let digest = mac.finalize().into_bytes();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn otp(phone: &str) -> String {
    serde_json::json!({ "phone": phone }).to_string()
}

/// The SMS-pumping bot of the OTP recipe: one number, spelled every way a number can be, from a
/// new IP each time. Exactly 3 codes go out (per-phone, 3 per 10 minutes); the number reaches
/// Redis only hashed; the 429s say nothing about the quota but keep Retry-After, which is the
/// exact wait until the first code leaves the 10-minute window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_number_in_every_spelling_from_rotating_ips_gets_three_codes() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    // One number: +62 812-3456-7890 (Indonesia, region ID in the recipe).
    let spellings = [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "6281234567890",
        "006281234567890",
        "(0812) 3456.7890",
        "+6281234567890",
        "081234567890",
    ];
    let started = Instant::now();
    let mut statuses = Vec::new();
    let mut last = None;
    for i in 0..28u32 {
        let r = post_as(
            &client,
            &url,
            &ip(i),
            &otp(spellings[i as usize % spellings.len()]),
        )
        .await;
        statuses.push(r.status.as_u16());
        if r.status == 200 {
            for name in QUIET {
                assert!(r.header(name).is_none(), "{name} on an allowed response");
            }
        } else {
            last = Some(r);
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64 + 1;
    let mut expected = vec![200u16; 3];
    expected.resize(28, 429);
    assert_eq!(statuses, expected);
    assert_eq!(
        upstream.bodies("/api/otp/send").len(),
        3,
        "exactly 3 codes sent"
    );

    let last = last.unwrap();
    let body = assert_quiet_429(&last, "per-phone");
    // The first code leaves the window 10 minutes after it was counted, which was after this
    // test started: the wait is at most 10 minutes and at least 10 minutes less the test's time.
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        (600_000 - elapsed_ms..=600_000).contains(&retry_ms),
        "retry_after_ms {retry_ms} after {elapsed_ms} ms"
    );

    // hash = true: the per-phone set is named by the number's HMAC, and holds the 3 codes; the
    // number itself is in no key (the per-operator key holds only its first 6 characters).
    let hashed = hmac_hex(SECRET, "+6281234567890");
    let keys = all_keys(&redis);
    let phone_set = keys
        .iter()
        .find(|k| k.ends_with(&format!("|{hashed}}}#log")))
        .unwrap_or_else(|| panic!("no per-phone set of the hashed number in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", phone_set]).int(), 3);
    for raw in ["6281234567890", "81234567890", "34567890"] {
        assert!(
            keys.iter().all(|k| !k.contains(raw)),
            "the raw number reached Redis: {keys:?}"
        );
    }
    let operator_set = keys
        .iter()
        .find(|k| k.ends_with("|+62812}#log"))
        .unwrap_or_else(|| panic!("no per-operator set in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", operator_set]).int(), 3);

    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "allowed"), 3.0);
    assert_eq!(requests(&m, "otp-send", "rejected"), 25.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[
                ("route", "otp-send"),
                ("limit", "per-phone"),
                ("mode", "enforced")
            ]
        ),
        25.0
    );
    gw.stop().await;
}

/// One IP asking codes for many numbers gets 20 an hour (per-ip), then 429s naming per-ip; the
/// refused requests charge nothing (another IP can still send a code to a number the first one
/// was refused for); a body without a phone is refused with 400 and counted as `bad_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_ip_gets_twenty_codes_an_hour_and_a_body_without_a_phone_is_refused() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let number = |n: u32| format!("0812-3456-{n:04}");
    let mut allowed = 0;
    for n in 0..25 {
        let r = post_as(&client, &url, "203.0.113.9", &otp(&number(n))).await;
        if n < 20 {
            assert_eq!(r.status, 200, "code {n}: {}", r.body);
            allowed += 1;
        } else {
            let body = assert_quiet_429(&r, "per-ip");
            let retry_ms = body["retry_after_ms"].as_u64().unwrap();
            assert!(retry_ms > 3_500_000 && retry_ms <= 3_600_000, "{body}");
        }
    }
    assert_eq!(allowed, 20);
    // number 24 was refused to 203.0.113.9 and charged nowhere: it still has all 3 codes
    for i in 0..3 {
        let r = post_as(&client, &url, &ip(i), &otp(&number(24))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(upstream.bodies("/api/otp/send").len(), 23);

    // no phone: refused before any limit, counted as bad_request, never upstream
    for (what, body) in [
        ("no member", "{\"to\":\"0812-3456-7890\"}".to_string()),
        ("not a number", otp("call me")),
        ("not JSON", "phone=081234567890".to_string()),
    ] {
        let r = post_as(&client, &url, "203.0.113.10", &body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        assert_eq!(r.json()["error"], "missing_key", "{what}");
    }
    assert_eq!(upstream.bodies("/api/otp/send").len(), 23);
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "bad_request"), 3.0);
    assert_eq!(requests(&m, "otp-send", "allowed"), 23.0);
    assert_eq!(requests(&m, "otp-send", "rejected"), 5.0);
    gw.stop().await;
}

/// A whole operator range (`+62812`, the first 6 characters) gets 500 codes an hour whatever
/// the numbers and IPs; another range is not touched by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_number_range_gets_five_hundred_codes_an_hour() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    for n in 0..500u32 {
        let r = post_as(&client, &url, &ip(n), &otp(&format!("0812-3456-{n:04}"))).await;
        assert_eq!(r.status, 200, "code {n}: {}", r.body);
    }
    let r = post_as(&client, &url, &ip(500), &otp("0812-3456-9999")).await;
    assert_quiet_429(&r, "per-operator");
    let r = post_as(&client, &url, &ip(501), &otp("0813-3456-9999")).await;
    assert_eq!(r.status, 200, "another range: {}", r.body);
    assert_eq!(upstream.bodies("/api/otp/send").len(), 501);
    gw.stop().await;
}

/// The OTP recipe fails closed: with its Redis gone, a request gets 503 with `Retry-After: 1`,
/// counted as `store_error_denied`, and no code is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_fails_closed_when_redis_is_gone() {
    let mut redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let r = post_as(&client, &url, &ip(1), &otp("0812-3456-7890")).await;
    assert_eq!(r.status, 200);
    redis.kill();
    let r = post_as(&client, &url, &ip(2), &otp("0812-3456-7891")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(upstream.bodies("/api/otp/send").len(), 1);
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "store_error_denied"), 1.0);
    gw.stop().await;
}

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

/// A credential-stuffing run against one account, from a new IP each time, between the
/// logins of a real user: the account is blocked after exactly 5 failures, and from then on
/// nothing reaches the upstream, not even the right password; the real user's successes count
/// nothing. The 429 names the block's level, says nothing about the quota, and its Retry-After is
/// the time until the first failure leaves the 15-minute window (which outlasts the first,
/// 1-minute block: SPEC, "the remaining block time, or the window's wait, if later").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_stuffing_blocks_an_account_after_exactly_five_failures() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let started = Instant::now();
    let mut victim = Vec::new();
    let mut last = None;
    for i in 0..12u32 {
        // the real user logs in between the bot's attempts, from one IP
        let r = post_as(&client, &url, "192.0.2.50", &login("alice", "right")).await;
        assert_eq!(r.status, 200, "alice: {}", r.body);
        // the bot: spelled in any case, the username is one account
        let user = if i % 2 == 0 { "Victim" } else { "victim" };
        let password = if i == 11 { "right" } else { "guess" };
        let r = post_as(&client, &url, &ip(i), &login(user, password)).await;
        victim.push(r.status.as_u16());
        if r.status == 429 {
            last = Some(r);
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64 + 1;
    assert_eq!(
        victim,
        [401, 401, 401, 401, 401, 429, 429, 429, 429, 429, 429, 429]
    );
    let to_upstream = upstream.bodies("/api/login");
    assert_eq!(
        to_upstream.iter().filter(|b| b.contains("ictim")).count(),
        5,
        "nothing of a blocked account reaches the upstream"
    );
    let body = assert_quiet_429(&last.unwrap(), "failed-logins");
    assert_eq!(body["block_level"], 1, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        (900_000 - elapsed_ms..=900_000).contains(&retry_ms),
        "retry_after_ms {retry_ms} after {elapsed_ms} ms"
    );

    let alice = gw.admin_get("/admin/usage?route=login&key=alice").await;
    assert_eq!(alice["limits"][0]["used"], 0, "{alice}");
    assert_eq!(alice["blocked_ms"], 0, "{alice}");
    let v = gw.admin_get("/admin/usage?route=login&key=victim").await;
    assert_eq!(v["limits"][0]["used"], 5, "{v}");
    assert_eq!(v["block_level"], 1, "{v}");
    let blocked_ms = v["blocked_ms"].as_u64().unwrap();
    assert!(
        (60_000 - elapsed_ms..=60_000).contains(&blocked_ms),
        "the first block lasts 1 minute: {v}"
    );
    let blocked = gw.admin_get("/admin/blocked?route=login").await;
    let listed: Vec<&str> = blocked["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["victim"], "{blocked}");

    let m = gw.metrics().await;
    assert_eq!(requests(&m, "login", "allowed"), 12.0 + 5.0);
    assert_eq!(
        requests(&m, "login", "rejected"),
        1.0,
        "the exceed that starts the block"
    );
    assert_eq!(
        requests(&m, "login", "blocked"),
        6.0,
        "the 429s during the block"
    );
    let started_blocks = count(
        &m,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started_blocks, 1.0);
    gw.stop().await;
}

/// A successful login forgives the account's earlier failures: after 4 failures and a 200,
/// 5 more failures are let through before the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_a_success_forgives_earlier_failures() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let mut statuses = Vec::new();
    for (n, password) in [
        "a", "b", "c", "d", "right", "e", "f", "g", "h", "i", "right",
    ]
    .into_iter()
    .enumerate()
    {
        let r = post_as(&client, &url, &ip(n as u32), &login("bob", password)).await;
        statuses.push(r.status.as_u16());
        if n == 3 {
            let u = gw.admin_get("/admin/usage?route=login&key=bob").await;
            assert_eq!(u["limits"][0]["used"], 4, "{u}");
        }
        if n == 4 {
            let u = gw.admin_get("/admin/usage?route=login&key=bob").await;
            assert_eq!(u["limits"][0]["used"], 0, "the success forgave: {u}");
        }
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 200, 401, 401, 401, 401, 401, 429]
    );
    let m = gw.metrics().await;
    let resets = count(
        &m,
        "slidegate_outcome_resets_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(resets, 1.0);
    gw.stop().await;
}

/// The block marker of a key (`<prefix>:{login|<key>}#block`: "<limit> <end µs> <level>") and
/// Redis's clock in µs.
fn marker(redis: &RedisServer, key: &str) -> (String, u64, u64, u64) {
    let name = format!("slidegate:{{login|{key}}}#block");
    let Resp::Bulk(Some(text)) = redis.cmd(&["GET", &name]) else {
        panic!("no block marker {name}: {:?}", all_keys(redis))
    };
    let mut parts = text.split(' ');
    let limit = parts.next().unwrap().to_string();
    let end: u64 = parts.next().unwrap().parse().unwrap();
    let level: u64 = parts.next().unwrap().parse().unwrap();
    (limit, end, level, redis_now_us(redis))
}

fn redis_now_us(redis: &RedisServer) -> u64 {
    let Resp::Array(time) = redis.cmd(&["TIME"]) else {
        panic!("TIME")
    };
    let part = |i: usize| match &time[i] {
        Resp::Bulk(Some(s)) => s.parse::<u64>().unwrap(),
        other => panic!("TIME {other:?}"),
    };
    part(0) * 1_000_000 + part(1)
}

/// Ends the key's block now, as the passing of its time would: the marker keeps its level and
/// its expiry (`block_forget` after the end), only its end moves to the past. A reload then
/// clears the instance's deny cache, which would otherwise answer the key for the rest of the
/// window without asking Redis.
async fn lapse_block(gw: &Recipe, redis: &RedisServer, key: &str) {
    let (limit, _, level, now) = marker(redis, key);
    let name = format!("slidegate:{{login|{key}}}#block");
    let lapsed = format!("{limit} {} {level}", now - 1_000);
    assert_eq!(
        redis.cmd(&["SET", &name, &lapsed, "KEEPTTL"]),
        Resp::Simple("OK".into())
    );
    gw.reload().await;
    let u = gw
        .admin_get(&format!("/admin/usage?route=login&key={key}"))
        .await;
    assert_eq!(u["blocked_ms"], 0, "the block lapsed: {u}");
}

/// Each next block of an account lasts twice as long (1, 2, 4 minutes ... up to a day), and the
/// level is kept for a day after a block's end. Without waiting minutes: the store's block
/// marker (end and level, read with Redis's own clock) shows each block's length, and a block
/// is made to lapse by moving the marker's end to the past, as time would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_blocks_escalate_twice_as_long_up_to_a_day() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    for n in 0..5 {
        let r = post_as(&client, &url, &ip(n), &login("carol", "guess")).await;
        assert_eq!(r.status, 401);
    }
    // (level, block length in ms): 1 minute, then twice as long each time
    let mut lengths = Vec::new();
    for round in 0..3u32 {
        if round > 0 {
            lapse_block(&gw, &redis, "carol").await;
        }
        let r = post_as(&client, &url, &ip(10 + round), &login("carol", "guess")).await;
        let body = assert_quiet_429(&r, "failed-logins");
        let (limit, end, level, now) = marker(&redis, "carol");
        assert_eq!(limit, "failed-logins");
        assert_eq!(body["block_level"], level, "{body}");
        lengths.push((level, (end - now).div_ceil(1000)));
        let pttl = redis.cmd(&["PTTL", "slidegate:{login|carol}#block"]).int() as u64;
        let block_ms = (end - now) / 1000;
        assert!(
            pttl > block_ms + 86_400_000 - 5_000 && pttl <= block_ms + 86_400_000 + 1_000,
            "the level is kept a day (block_forget) past the block's end: pttl {pttl}"
        );
    }
    // each length read a moment after its block started: within a few seconds of its nominal
    for ((level, ms), (want_level, nominal)) in
        lengths
            .iter()
            .zip([(1, 60_000u64), (2, 120_000), (3, 240_000)])
    {
        assert_eq!(*level, want_level, "{lengths:?}");
        assert!(
            *ms <= nominal && *ms > nominal - 5_000,
            "level {level}: {ms} ms, nominal {nominal}: {lengths:?}"
        );
    }
    // block_max = 1d: the 12th block would be 2^11 minutes; it lasts a day, and Retry-After
    // says so (the block now outlasts the window's own wait)
    let name = "slidegate:{login|carol}#block";
    let now = redis_now_us(&redis);
    assert_eq!(
        redis.cmd(&[
            "SET",
            name,
            &format!("failed-logins {} 11", now - 1_000),
            "KEEPTTL"
        ]),
        Resp::Simple("OK".into())
    );
    gw.reload().await;
    let r = post_as(&client, &url, &ip(20), &login("carol", "guess")).await;
    let body = assert_quiet_429(&r, "failed-logins");
    assert_eq!(body["block_level"], 12, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        retry_ms <= 86_400_000 && retry_ms > 86_400_000 - 5_000,
        "the longest block is block_max: {body}"
    );
    let m = gw.metrics().await;
    let started_blocks = count(
        &m,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started_blocks, 4.0);
    gw.stop().await;
}

/// One IP may fail 100 logins an hour across any accounts; its successes count nothing. And a
/// body without a username counts against the client IP (on_missing_key = "ip").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_one_ip_fails_a_hundred_times_an_hour_and_successes_do_not_count() {
    let redis = RedisServer::start_async().await;
    let upstream = Service::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let bot = "203.0.113.66";
    for n in 0..100u32 {
        // one failure per account, and between them successful logins from the same IP
        let r = post_as(&client, &url, bot, &login(&format!("user{n}"), "guess")).await;
        assert_eq!(r.status, 401, "failure {n}: {}", r.body);
        if n % 4 == 0 {
            let r = post_as(&client, &url, bot, &login(&format!("happy{n}"), "right")).await;
            assert_eq!(r.status, 200, "success {n}: {}", r.body);
        }
    }
    let sent = upstream.bodies("/api/login").len();
    assert_eq!(sent, 125);
    let r = post_as(&client, &url, bot, &login("user100", "guess")).await;
    let body = assert_quiet_429(&r, "per-ip");
    assert_eq!(body["block_level"], 1, "{body}");
    // the IP is blocked, whatever the account and password
    let r = post_as(&client, &url, bot, &login("happy1000", "right")).await;
    assert_eq!(r.status, 429);
    assert_eq!(upstream.bodies("/api/login").len(), sent);
    let per_ip = gw
        .admin_get(&format!("/admin/usage?route=login&limit=per-ip&key={bot}"))
        .await;
    assert_eq!(per_ip["limits"][0]["used"], 100, "{per_ip}");
    // another IP is untouched
    let r = post_as(&client, &url, "203.0.113.67", &login("user100", "guess")).await;
    assert_eq!(r.status, 401);

    // no username: the failed-logins limit counts the client IP instead
    let nameless = "203.0.113.68";
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = post_as(&client, &url, nameless, "{\"password\":\"guess\"}").await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    gw.stop().await;
}

fn check(recipe: &str, secret: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    cmd.arg("check")
        .arg("--config")
        .arg(recipe_path(recipe))
        .env_remove("SLIDEGATE_CONFIG")
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_KEY_SECRET");
    if let Some(s) = secret {
        cmd.env("SLIDEGATE_KEY_SECRET", s);
    }
    cmd.output().expect("slidegate check runs")
}

/// `slidegate check` accepts both recipes as shipped and summarises every limit; the OTP recipe
/// needs its hash secret (without it, check refuses the file and names the variable).
#[test]
fn check_accepts_both_recipes() {
    // one summary line per limit, with its value and window
    let has = |summary: &str, name: &str, value: &str| {
        summary
            .lines()
            .any(|l| l.trim_start().starts_with(name) && l.contains(value))
    };
    let otp = check("otp.toml", Some("change-me"));
    let summary = String::from_utf8_lossy(&otp.stdout);
    assert!(
        otp.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&otp.stderr)
    );
    for (name, value) in [
        ("per-phone", "3 per 10m"),
        ("per-ip", "20 per 1h"),
        ("per-operator", "500 per 1h"),
    ] {
        assert!(has(&summary, name, value), "{name} {value} in\n{summary}");
    }
    let no_secret = check("otp.toml", None);
    let stderr = String::from_utf8_lossy(&no_secret.stderr);
    assert!(!no_secret.status.success(), "hash = true without a secret");
    assert!(stderr.contains("SLIDEGATE_KEY_SECRET"), "{stderr}");

    let login = check("login.toml", None);
    let summary = String::from_utf8_lossy(&login.stdout);
    assert!(
        login.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&login.stderr)
    );
    for (name, value) in [
        (
            "failed-logins",
            "5 per 15m (sliding_log, counts [401, 403], resets on [200])",
        ),
        (
            "per-ip",
            "100 per 1h (sliding_log, key=[\"ip\"], counts [401, 403])",
        ),
    ] {
        assert!(has(&summary, name, value), "{name} {value} in\n{summary}");
    }
    assert!(
        summary.contains("on_exceed=block for 1m (x2 each time"),
        "{summary}"
    );
}
