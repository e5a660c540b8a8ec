//! An attempt the upstream saw always counts (SPEC section 9, "Counting outcomes"), through the
//! real binary with a real Redis and an upstream that answers late: a client that leaves after
//! its request reached the upstream (HTTP/1.1 close, HTTP/2 RST_STREAM after DATA) does not end
//! the attempt. The gateway reads the upstream's answer anyway and settles by its status (a 401
//! stays counted, a 200 is refunded), keeps the attempt counted when no status arrives within the
//! upstream's `timeout`, and refunds at once only an attempt the upstream never saw. Each such
//! request leaves an access line with status 499 and the upstream's status, and counts in
//! `slidegate_upstream_requests_total`.

use crate::support;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::http::HttpClient;
use support::leaving::{eventually, post_and_close, post_and_reset, LeavingGateway};
use support::metrics::value;
use support::otp_login::{login_route, post, AuthUpstream};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

/// The login route: 5 failures (401, 403) per account per 10 minutes.
fn login() -> String {
    login_route("limit = 5\nwindow = \"10m\"\ncount_status = [401, 403]")
}

/// The upstream answers within 1 s or the attempt has no status.
const UPSTREAM: &str = "connect_timeout = \"500ms\"\ntimeout = \"1s\"";

fn store(redis: &RedisServer) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"500ms\"",
        redis.url(),
        unique_prefix("leaves")
    )
}

/// The routes of `examples/login.toml`, in front of the upstream `up`.
fn login_recipe_routes() -> String {
    let text = std::fs::read_to_string(support::recipes::recipe_path("login.toml")).unwrap();
    let routes = &text[text.find("[[routes]]").expect("the recipe has routes")..];
    assert!(routes.contains("upstream = \"auth\""));
    routes.replace("upstream = \"auth\"", "upstream = \"up\"")
}

fn attempt(user: &str, password: &str) -> String {
    format!("{{\"username\":\"{user}\",\"password\":\"{password}\"}}")
}

fn counter(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    value(metrics, name, labels).unwrap_or(0.0)
}

fn upstream_answers(metrics: &str, status: &str) -> f64 {
    counter(
        metrics,
        "slidegate_upstream_requests_total",
        &[("route", "login"), ("status", status)],
    )
}

fn refunds(metrics: &str) -> f64 {
    counter(
        metrics,
        "slidegate_outcome_refunds_total",
        &[("route", "login"), ("limit", "failed-logins")],
    )
}

/// The access line of a request whose client left: 499, allowed, the upstream's status. It is
/// written once the attempt is settled: its refund, if any, is counted by then (and reaches
/// Redis with the next call of its lane).
fn assert_left(gw: &LeavingGateway, id: &str, upstream_status: u64) {
    let line = gw.access(id);
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["decision"], "allowed", "{line}");
    assert_eq!(line["route"], "login", "{line}");
    assert_eq!(line["upstream_status"], upstream_status, "{line}");
}

/// HTTP/1.1: five attempts that close their socket once the upstream has them, answered 401
/// 100 ms later, stay counted: `used` is 5, the sixth attempt is refused without reaching the
/// upstream, each left a 499 line with the upstream's 401, and the 401s count upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_that_leave_after_the_upstream_got_them_stay_counted() {
    let redis = RedisServer::start_async().await;
    let auth = AuthUpstream::start().await;
    let gw = LeavingGateway::start(&store(&redis), &auth.url(), UPSTREAM, &login());
    for i in 0..5 {
        let id = format!("h1-leaves-{i}");
        let seen = auth.bodies("/api/login").len();
        let body = attempt("ann", "wrong");
        post_and_close(gw.proxy, "/api/login?ms=100", &id, &body, || {
            auth.bodies("/api/login").len() > seen
        })
        .await;
        assert_left(&gw, &id, 401);
    }
    assert_eq!(
        gw.used("login", "ann").await,
        5,
        "every attempt stayed counted"
    );
    let sixth = post(
        &HttpClient::default(),
        &format!("http://{}/api/login", gw.proxy),
        &[],
        &attempt("ann", "right"),
    )
    .await;
    assert_eq!(sixth.status, 429, "the limit refuses the sixth attempt");
    assert_eq!(auth.bodies("/api/login").len(), 5);
    let metrics = gw.metrics().await;
    assert_eq!(upstream_answers(&metrics, "4xx"), 5.0, "{metrics}");
    assert_eq!(refunds(&metrics), 0.0);
}

/// HTTP/1.1: an answer the limit does not count (200) that arrives after the client left is
/// refunded; an answer that never arrives within the upstream's timeout keeps the attempt
/// counted (and counts as an upstream error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_client_left_the_status_decides_and_no_status_keeps_the_count() {
    let redis = RedisServer::start_async().await;
    let auth = AuthUpstream::start().await;
    let gw = LeavingGateway::start(&store(&redis), &auth.url(), UPSTREAM, &login());
    let seen = || auth.bodies("/api/login").len();
    let before = seen();
    let body = attempt("bob", "right");
    post_and_close(gw.proxy, "/api/login?ms=100", "h1-success", &body, || {
        seen() > before
    })
    .await;
    assert_left(&gw, "h1-success", 200);
    // the refund is counted before the line is written; Redis applies it in the next call
    assert_eq!(refunds(&gw.metrics().await), 1.0, "a 200 is not counted");
    let refunded = || async { (gw.used("login", "bob").await == 0).then_some(()) };
    eventually(refunded).await;

    let before = seen();
    let body = attempt("cid", "wrong");
    post_and_close(gw.proxy, "/api/login?ms=3000", "h1-silent", &body, || {
        seen() > before
    })
    .await;
    // the access line is written once the upstream's timeout (1 s) has run out
    assert_left(&gw, "h1-silent", 0);
    assert_eq!(
        gw.used("login", "cid").await,
        1,
        "no status arrived: the attempt stays counted"
    );
    let metrics = gw.metrics().await;
    assert_eq!(upstream_answers(&metrics, "error"), 1.0, "{metrics}");
    assert_eq!(upstream_answers(&metrics, "2xx"), 1.0, "{metrics}");
    assert_eq!(refunds(&metrics), 1.0, "only the 200 was refunded");
}

/// An attempt whose client leaves while the gateway is still connecting to the upstream
/// (nothing of it has gone out) is refunded at once, and never sent: the upstream that starts
/// listening afterwards never receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_the_upstream_never_saw_is_refunded_at_once() {
    let redis = RedisServer::start_async().await;
    // The upstream's port is held but not listened on: every connect is refused and retried
    // within connect_timeout.
    let (socket, port) = support::reserved_port();
    let gw = LeavingGateway::start(
        &store(&redis),
        &format!("http://127.0.0.1:{port}"),
        "connect_timeout = \"5s\"\ntimeout = \"1s\"",
        &login(),
    );
    let body = attempt("dee", "wrong");
    // the client leaves once the attempt is charged: the gateway is connecting by then
    let charged = std::sync::atomic::AtomicBool::new(false);
    let leave = post_and_close(gw.proxy, "/api/login", "h1-unseen", &body, || {
        charged.load(std::sync::atomic::Ordering::Relaxed)
    });
    let watch = async {
        eventually(|| async { (gw.used("login", "dee").await == 1).then_some(()) }).await;
        charged.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    tokio::join!(leave, watch);
    // at once: long before the connect timeout (5 s) could have ended the attempt
    let refunded = tokio::time::timeout(
        Duration::from_secs(2),
        eventually(|| async { (gw.used("login", "dee").await == 0).then_some(()) }),
    )
    .await;
    assert!(refunded.is_ok(), "the reservation stayed while connecting");
    assert_eq!(refunds(&gw.metrics().await), 1.0);
    // the upstream listens now, while the connect timeout still runs: nothing comes
    let up = upstream::serve(socket.listen(64).unwrap(), Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        up.seen().is_empty(),
        "the abandoned attempt was sent: {:?}",
        up.seen()
    );
    assert_left(&gw, "h1-unseen", 0);
    assert_eq!(gw.used("login", "dee").await, 0);
}

/// HTTP/2: five streams reset (RST_STREAM) after their DATA reached the upstream, answered 401
/// later, stay counted, exactly as over HTTP/1.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_reset_after_their_data_reached_the_upstream_stay_counted() {
    let redis = RedisServer::start_async().await;
    let auth = AuthUpstream::start().await;
    let gw = LeavingGateway::start(&store(&redis), &auth.url(), UPSTREAM, &login());
    let mut h2 = gw.h2().await;
    for i in 0..5 {
        let id = format!("h2-resets-{i}");
        let seen = auth.bodies("/api/login").len();
        let body = attempt("eve", "wrong");
        let answer = post_and_reset(&mut h2, "/api/login?ms=100", &id, &body, || {
            auth.bodies("/api/login").len() > seen
        })
        .await;
        assert_eq!(answer, None, "left before the answer");
        assert_left(&gw, &id, 401);
    }
    assert_eq!(gw.used("login", "eve").await, 5);
    let sixth = post_and_reset(
        &mut h2,
        "/api/login",
        "h2-sixth",
        &attempt("eve", "x"),
        || false,
    )
    .await;
    assert_eq!(sixth, Some(429));
    assert_eq!(auth.bodies("/api/login").len(), 5);
    let metrics = gw.metrics().await;
    assert_eq!(upstream_answers(&metrics, "4xx"), 5.0, "{metrics}");
    assert_eq!(refunds(&metrics), 0.0);
}

/// The login recipe (a blocking route) against 30 attempts on one account over HTTP/2, each
/// reset as soon as the upstream has it (or its 429 came back): exactly 5 password checks
/// reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_recipe_lets_five_checks_through_for_thirty_attempts_that_leave() {
    let redis = RedisServer::start_async().await;
    let auth = AuthUpstream::start().await;
    let recipe = login_recipe_routes();
    let gw = LeavingGateway::start(&store(&redis), &auth.url(), UPSTREAM, &recipe);
    let mut h2 = gw.h2().await;
    let mut refused = 0;
    for i in 0..30 {
        let seen = auth.bodies("/api/login").len();
        let body = attempt("fay", "guess");
        let answer = post_and_reset(
            &mut h2,
            "/api/login?ms=300",
            &format!("recipe-{i}"),
            &body,
            || auth.bodies("/api/login").len() > seen,
        )
        .await;
        refused += usize::from(answer == Some(429));
    }
    assert_eq!(
        auth.bodies("/api/login").len(),
        5,
        "password checks upstream"
    );
    assert_eq!(refused, 25);
    // The five are answered 401 after the clients left: counted. A block starts only from
    // answered attempts, so an attempt refused while one of the five is still in flight is a
    // plain 429 (held in the deny cache until an answer comes or at most the upstream's
    // timeout), and the first attempt the store decides once all five are counted starts it:
    // one of the thirty above, on a slow machine, or one sent here.
    let mut usage = serde_json::Value::Null;
    for _ in 0..20 {
        let now = eventually(|| async {
            let u = gw.usage("login", "fay").await;
            let answered = upstream_answers(&gw.metrics().await, "4xx") == 5.0;
            let blocked = u["blocked_ms"].as_u64().unwrap_or(0) > 0;
            let decided_next = blocked || u["deny_cached_ms"] == 0;
            (answered && u["limits"][0]["used"] == 5 && decided_next).then_some(u)
        })
        .await;
        if now["blocked_ms"].as_u64().unwrap_or(0) > 0 {
            usage = now;
            break;
        }
        let seen = auth.bodies("/api/login").len();
        let answer = post_and_reset(
            &mut h2,
            "/api/login?ms=300",
            "recipe-after",
            &attempt("fay", "guess"),
            || auth.bodies("/api/login").len() > seen,
        )
        .await;
        assert_eq!(answer, Some(429));
        usage = gw.usage("login", "fay").await;
        if usage["blocked_ms"].as_u64().unwrap() > 0 {
            break;
        }
    }
    assert!(usage["blocked_ms"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(
        auth.bodies("/api/login").len(),
        5,
        "password checks upstream"
    );
}

/// A block starts only from answered attempts: three attempts whose clients leave once the
/// upstream has them, and which the upstream never answers within its timeout, stay counted
/// (the key's limit is full) but start no block. The owner, signing in next with the right
/// password, gets a plain 429 that tells the window's wait: no block level, no block started,
/// nothing blocked in `/admin/usage`. On Redis and on the memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_whose_status_never_came_start_no_block() {
    let redis = RedisServer::start_async().await;
    let log_wait = 590..=600;
    no_block_without_answers(&store(&redis), "sliding_log", log_wait.clone()).await;
    no_block_without_answers("backend = \"memory\"", "sliding_log", log_wait).await;
}

/// The counter keeps no time per charge: it tallies the attempts kept without an answer apart
/// from the answered ones, so the owner is told the window's wait (its estimate frees a unit
/// 200 to 800 s from now), not the upstream's timeout again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_counter_attempts_kept_without_an_answer_tell_the_windows_wait() {
    let redis = RedisServer::start_async().await;
    let counter_wait = 200..=800;
    let algorithm = "sliding_window_counter";
    no_block_without_answers(&store(&redis), algorithm, counter_wait.clone()).await;
    no_block_without_answers("backend = \"memory\"", algorithm, counter_wait).await;
}

/// Nor does gcra: the owner is told when the debt of the kept attempts leaves room (one
/// emission interval, 200 s, after the third), not the upstream's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_gcra_attempts_kept_without_an_answer_tell_the_windows_wait() {
    let redis = RedisServer::start_async().await;
    let gcra_wait = 190..=200;
    no_block_without_answers(&store(&redis), "gcra", gcra_wait.clone()).await;
    no_block_without_answers("backend = \"memory\"", "gcra", gcra_wait).await;
}

async fn no_block_without_answers(
    store: &str,
    algorithm: &str,
    retry_after_s: std::ops::RangeInclusive<u64>,
) {
    let auth = AuthUpstream::start().await;
    let route = format!(
        "[[routes]]\nname = \"login\"\npath = \"/api/login\"\nmethods = [\"POST\"]\n\
         upstream = \"up\"\nkey = [\"json:username\"]\non_exceed = \"block\"\n\
         block_for = \"10m\"\n\n[[routes.limits]]\nname = \"failed-logins\"\n\
         algorithm = \"{algorithm}\"\nlimit = 3\nwindow = \"10m\"\ncount_status = [401, 403]\n"
    );
    let gw = LeavingGateway::start(store, &auth.url(), UPSTREAM, &route);
    for i in 0..3 {
        let id = format!("h1-unanswered-{i}");
        let seen = auth.bodies("/api/login").len();
        let body = attempt("gus", "wrong");
        post_and_close(gw.proxy, "/api/login?ms=3000", &id, &body, || {
            auth.bodies("/api/login").len() > seen
        })
        .await;
    }
    for i in 0..3 {
        // written once the upstream's timeout (1 s) ran out: the attempt is kept by then
        assert_left(&gw, &format!("h1-unanswered-{i}"), 0);
    }
    assert_eq!(gw.used("login", "gus").await, 3, "no status: counted");
    // Each was settled as kept without an answer once the upstream's timeout ran out, well
    // within a reservation's settle time (connect 0.5 s + answer 1 s + 1 s): the store knows
    // them for what they are at once, not only once that time has run out.
    let owner = post(
        &HttpClient::default(),
        &format!("http://{}/api/login", gw.proxy),
        &[],
        &attempt("gus", "right"),
    )
    .await;
    assert_eq!(owner.status, 429, "{}", owner.body);
    let level = owner.json()["block_level"].as_u64().unwrap_or(0);
    assert_eq!(level, 0, "no block: {}", owner.body);
    let retry_after: u64 = owner.header("retry-after").unwrap().parse().unwrap();
    assert!(
        retry_after_s.contains(&retry_after),
        "{algorithm}: Retry-After {retry_after}, not the window's wait {retry_after_s:?}"
    );
    let usage = gw.usage("login", "gus").await;
    assert_eq!(usage["blocked_ms"], 0, "{usage}");
    let started = counter(
        &gw.metrics().await,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started, 0.0);
}

/// A client that sends the head and part of its body, then leaves: the head went upstream,
/// which may act on it alone (a number in the query, credentials in a header), so the attempt
/// stays counted, and its access line says the client left (499). An upload that broke off is
/// no free attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_breaks_off_after_the_head_went_upstream_stays_counted() {
    let auth = AuthUpstream::start().await;
    let route = "[[routes]]\nname = \"login\"\npath = \"/api/login\"\nmethods = [\"POST\"]\n\
                 upstream = \"up\"\nkey = [\"header:x-user\"]\n\n[[routes.limits]]\n\
                 name = \"failed-logins\"\nlimit = 3\nwindow = \"10m\"\ncount_status = [401]\n";
    let gw = LeavingGateway::start("backend = \"memory\"", &auth.url(), UPSTREAM, route);
    let head = "POST /api/login HTTP/1.1\r\nHost: gw\r\nX-Request-Id: broke-off\r\n\
                X-User: eve\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"u";
    let mut stream = tokio::net::TcpStream::connect(gw.proxy).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .unwrap();
    // the head is forwarded as soon as it is admitted; the body follows as it comes. The
    // client leaves well within the upstream's 1 s `timeout`, after which a stalled body is
    // cut (408) by the gateway itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    let line = gw.access("broke-off");
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["upstream_status"], 0, "{line}");
    assert_eq!(
        gw.used("login", "eve").await,
        1,
        "the attempt stays counted"
    );
}

/// A client that leaves while the gateway reads its body for the key leaves a 499 access line,
/// not a 400, whether it closes (or resets) its HTTP/1.1 connection or resets its HTTP/2
/// stream: its body did not break, its client left, and it is no `bad_request`. One that only half-closes (shuts its writing side and waits)
/// still reads an answer, a 400 (the body it sent is short), and is logged 499 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_its_body_is_read_for_the_key_is_logged_499() {
    let auth = AuthUpstream::start().await;
    let gw = LeavingGateway::start("backend = \"memory\"", &auth.url(), UPSTREAM, &login());
    let head = |id: &str| {
        format!(
            "POST /api/login HTTP/1.1\r\nHost: gw\r\nX-Request-Id: {id}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"user"
        )
    };
    // HTTP/1.1, the connection closed
    let mut stream = tokio::net::TcpStream::connect(gw.proxy).await.unwrap();
    stream
        .write_all(head("left-closed").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    assert_eq!(gw.access("left-closed")["status"], 499);
    // HTTP/1.1, the connection reset (RST, not FIN)
    let mut stream = tokio::net::TcpStream::connect(gw.proxy).await.unwrap();
    stream.write_all(head("left-rst").as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.set_zero_linger().unwrap();
    drop(stream);
    assert_eq!(gw.access("left-rst")["status"], 499);
    // HTTP/2, the stream reset after part of its body
    let mut h2 = gw.h2().await;
    h2 = h2.ready().await.unwrap();
    let req = http::Request::post("http://gw/api/login")
        .header("x-request-id", "left-reset")
        .header("content-type", "application/json")
        .header("content-length", "100")
        .body(())
        .unwrap();
    let (_answer, mut body) = h2.send_request(req, false).unwrap();
    body.send_data(bytes::Bytes::from_static(b"{\"user"), false)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    body.send_reset(h2::Reason::CANCEL);
    assert_eq!(gw.access("left-reset")["status"], 499);
    // HTTP/1.1, half-closed: the answer still comes
    let mut stream = tokio::net::TcpStream::connect(gw.proxy).await.unwrap();
    stream
        .write_all(head("half-closed").as_bytes())
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("body_unreadable"), "{answer}");
    assert_eq!(gw.access("half-closed")["status"], 499);
    assert!(
        auth.bodies("/api/login").is_empty(),
        "nothing went upstream"
    );
    // a client that left sent nothing the route refuses: no bad_request
    let metrics = gw.metrics().await;
    let bad = [("route", "login"), ("decision", "bad_request")];
    let bad = counter(&metrics, "slidegate_requests_total", &bad);
    assert_eq!(bad, 0.0, "{metrics}");
}
