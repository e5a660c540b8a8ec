//! The timing promises of coalescing (SPEC sections 2 and 5), asserted through the order in
//! which Redis decides, never through a clock: a lone decision is a call of its own, and the
//! decisions that arrive while a call is out share the next one; a request (the proxy path,
//! `Store::submit`) does not queue behind a batch's decisions (`/v1/decisions`,
//! `Store::decide_many`) but goes in the lane's next call; a Redis killed in the middle of a
//! batch leaves no key waiting: every key ends, with the route's `on_error` where Redis could not
//! decide it, and while Redis stays down every call fails on the connection at once instead of
//! waiting out `store.timeout`.
//!
//! Order is read from Redis itself: requests on one hot key are told how many charges came
//! before theirs (`used`, `remaining`), `INFO commandstats` counts the calls Redis ran, and
//! `CLIENT PAUSE WRITE` holds the calls on the wire (`CLIENT LIST` shows them postponed) while a
//! test queues more. That a lone decision is sent at once instead of waiting for company (no
//! batching window) is the lane's queue rule (`may_send`), unit-tested in
//! `src/store/redis/lane.rs`.

mod support;

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use http::Method;
use slidegate::config::ClockSource;
use slidegate::store::{Answer, Decision, DecisionRequest};
use support::gateway::{self, config, TOKEN};
use support::http::{HttpClient, Reply};
use support::observe::metric;
use support::redis::{RedisServer, Resp};
use support::resp::RespConn;
use support::store::{bases, limit_sets, redis_store};
use support::{unique_prefix, upstream};

/// Decisions one call carries at most (`MAX_PER_CALL` of `src/store/redis/lane.rs`).
const PER_CALL: usize = 256;
/// Calls a lane keeps out at once while a batch fills them (`MAX_BATCH_IN_FLIGHT`).
const BATCH_IN_FLIGHT: usize = 2;

/// One route `r`, every key `limit` per minute (sliding_log).
fn route(limit: u64) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"m\"\nlimit = {limit}\nwindow = \"1m\"\n"
    )
}

/// The `EVALSHA` calls Redis has run (postponed ones are not counted until they run).
async fn calls(conn: &mut RespConn) -> i64 {
    let Resp::Bulk(Some(info)) = conn.cmd(&["INFO", "commandstats"]).await else {
        panic!("INFO commandstats failed")
    };
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Waits (10 s at most, polling) until Redis has run at least `n` `EVALSHA` calls.
async fn wait_for_calls(conn: &mut RespConn, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let done = calls(conn).await;
        if done >= n {
            return;
        }
        assert!(Instant::now() < deadline, "Redis ran {done} calls, not {n}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Stops Redis from running scripts (`CLIENT PAUSE ... WRITE`; `INFO` and `CLIENT` still
/// answer) until [`resume`], 60 s at most.
async fn pause(conn: &mut RespConn) {
    let reply = conn.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]).await;
    assert_eq!(reply, Resp::Simple("OK".into()));
}

async fn resume(conn: &mut RespConn) {
    let reply = conn.cmd(&["CLIENT", "UNPAUSE"]).await;
    assert_eq!(reply, Resp::Simple("OK".into()));
}

/// Waits (10 s at most, polling) until a paused Redis holds an `EVALSHA` on the wire: a client
/// postponed by the pause (`flags=b`) whose command is `evalsha`.
async fn wait_for_postponed_call(conn: &mut RespConn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Resp::Bulk(Some(list)) = conn.cmd(&["CLIENT", "LIST"]).await else {
            panic!("CLIENT LIST failed")
        };
        let held = list.lines().any(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            fields
                .iter()
                .any(|f| f.starts_with("flags=") && f.contains('b'))
                && fields.contains(&"cmd=evalsha")
        });
        if held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no EVALSHA reached the paused Redis:\n{list}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The units counted under the route's one limit after `decision`, which must be allowed.
fn used(decision: Result<Decision, slidegate::store::StoreError>) -> u64 {
    let decision = decision.expect("the store decides");
    assert!(decision.allowed(), "{decision:?}");
    decision.limits[0].used
}

/// A lone decision goes out at once as a call of its own: one after the other, each decision is
/// exactly one `EVALSHA`. While one is out (held by a paused Redis), the decisions that arrive
/// queue, and go together in the next call once it is answered: two calls for six decisions,
/// decided in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_decision_is_a_call_of_its_own_and_later_ones_share_the_next() {
    const N: u64 = 50;
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(30), ClockSource::Redis).await;
    let sets = limit_sets(&route(1000));
    let key = bases(&unique_prefix("lone"), "r", "hot");
    let request = DecisionRequest::charge(&sets[0], &key, 1);
    let mut watcher = RespConn::connect(server.port).await;

    for i in 1..=N {
        let before = calls(&mut watcher).await;
        assert_eq!(used(store.decide(request).await), i);
        assert_eq!(
            calls(&mut watcher).await - before,
            1,
            "decision {i} alone: one call"
        );
    }

    let before = calls(&mut watcher).await;
    pause(&mut watcher).await;
    let first = store.submit(request);
    wait_for_postponed_call(&mut watcher).await;
    let queued: Vec<Answer> = (0..5).map(|_| store.submit(request)).collect();
    resume(&mut watcher).await;
    assert_eq!(used(first.await), N + 1, "the first went out alone");
    for (j, answer) in queued.into_iter().enumerate() {
        assert_eq!(used(answer.await), N + 2 + j as u64, "in arrival order");
    }
    assert_eq!(
        calls(&mut watcher).await - before,
        2,
        "the first decision alone, then the five that queued behind it in one call"
    );
}

/// A decision submitted after a batch of 40 calls was queued on the same lane goes in the
/// lane's next call, ahead of the batch's remaining decisions: at most the calls already out
/// (two) are decided before it. Every 64th decision of the batch is on the request's key, so
/// the request's `used` says how many of them came first; queued behind the batch it would come
/// after all 160.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_goes_ahead_of_a_batch_queued_before_it() {
    const CALLS: usize = 40;
    const EVERY: usize = 64;
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(30), ClockSource::Redis).await;
    let sets = limit_sets(&route(10_000));
    let prefix = unique_prefix("ahead");
    let keys: Vec<Vec<String>> = (0..CALLS * PER_CALL)
        .map(|i| {
            let key = if i % EVERY == EVERY - 1 {
                "shared".to_string()
            } else {
                format!("k{i}")
            };
            bases(&prefix, "r", &key)
        })
        .collect();
    let requests: Vec<DecisionRequest<'_>> = keys
        .iter()
        .map(|b| DecisionRequest::charge(&sets[0], b, 1))
        .collect();
    let shared = bases(&prefix, "r", "shared");

    // The first poll of the batch queues all of its decisions on the lane; the request is
    // queued right after it, before anything else can happen on this task.
    let mut batch = Box::pin(store.decide_many(&requests, None));
    assert!(
        (&mut batch).now_or_never().is_none(),
        "Redis answered at once"
    );
    let request = store.submit(DecisionRequest::charge(&sets[0], &shared, 1));

    let request_used = used(request.await);
    let answers = batch.await;
    let mut shared_used: Vec<u64> = (EVERY - 1..answers.len())
        .step_by(EVERY)
        .map(|i| used(answers[i].clone()))
        .collect();
    let batch_shared = shared_used.len() as u64;
    shared_used.push(request_used);
    shared_used.sort_unstable();
    assert_eq!(
        shared_used,
        (1..=batch_shared + 1).collect::<Vec<_>>(),
        "one charge each on the shared key, in some order"
    );
    let before_it = request_used - 1;
    let at_most = (BATCH_IN_FLIGHT * PER_CALL / EVERY) as u64;
    assert!(
        before_it <= at_most,
        "{before_it} of the batch's {batch_shared} decisions on the key came before the \
         request (at most {at_most}: those of the calls already out)"
    );
}

/// The same through a gateway: a proxy request sent while a `/v1/decisions` batch of 10,000
/// keys is being decided on the same Redis goes ahead of the batch's queued decisions. Redis is
/// paused (the batch's calls held on the wire) while the request travels to the lane, so the
/// batch cannot finish first however slowly the request arrives; every 50th key of the batch is
/// the request's key, so its `X-RateLimit-Remaining` tells how many came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_request_does_not_wait_behind_a_batch() {
    const KEYS: usize = 10_000;
    const EVERY: usize = 50;
    const LIMIT: u64 = 10_000;
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"30s\"",
        redis.url(),
        unique_prefix("behind")
    );
    let route = format!(
        "[[routes]]\nname = \"users\"\npath = \"/*\"\nupstream = \"up\"\n\
         key = [\"header:X-User\"]\non_error = \"deny\"\n\
         [[routes.limits]]\nname = \"per-minute\"\nlimit = {LIMIT}\nwindow = \"1m\"\n"
    );
    let gw = gateway::start(&config(&store, &up.url(), &route)).await;
    let client = HttpClient::default();
    let keys: Vec<String> = (0..KEYS)
        .map(|i| {
            if i % EVERY == EVERY - 1 {
                "shared".to_string()
            } else {
                format!("user-{i}")
            }
        })
        .collect();
    let mut watcher = RespConn::connect(redis.port).await;
    let before = calls(&mut watcher).await;

    // The batch's first call has run: all of it is queued on the lane. Hold the rest.
    let batch = start_batch(&client, &gw, &keys);
    wait_for_calls(&mut watcher, before + 1).await;
    pause(&mut watcher).await;
    let done_before = (calls(&mut watcher).await - before) as usize;
    let calls_of_batch = KEYS.div_ceil(PER_CALL);
    assert!(
        done_before + BATCH_IN_FLIGHT < calls_of_batch,
        "paused too late: {done_before} of {calls_of_batch} calls done"
    );
    let request = {
        let (client, url) = (client.clone(), gw.url("/x"));
        tokio::spawn(async move { client.get(&url, &[("x-user", "shared")]).await })
    };
    // A generous bound for an in-process request over loopback to reach the lane, while Redis
    // decides nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    resume(&mut watcher).await;

    let reply = request.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let remaining: u64 = reply
        .header("x-ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    let batch = batch.await.unwrap();
    assert_eq!(batch.status, 200, "{}", batch.body);
    let results = batch.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    let mut shared_remaining: Vec<u64> = results
        .iter()
        .filter(|r| r["key"] == "shared")
        .map(|r| {
            assert_eq!(r["allowed"], true, "{r}");
            r["remaining"].as_u64().unwrap()
        })
        .collect();
    let batch_shared = shared_remaining.len() as u64;
    assert_eq!(batch_shared as usize, KEYS / EVERY);
    shared_remaining.push(remaining);
    shared_remaining.sort_unstable();
    assert_eq!(
        shared_remaining,
        (LIMIT - batch_shared - 1..LIMIT).collect::<Vec<_>>(),
        "one charge each on the shared key"
    );
    let before_it = LIMIT - 1 - remaining;
    // The batch's decisions that Redis ran before the request's call: the calls done before
    // the pause and those it held on the wire.
    let ahead = (done_before + BATCH_IN_FLIGHT) * PER_CALL;
    let at_most = (0..ahead).filter(|i| i % EVERY == EVERY - 1).count() as u64;
    assert!(
        before_it <= at_most,
        "{before_it} of the batch's {batch_shared} decisions on the key came before the \
         proxy request (at most {at_most})"
    );
}

/// `POST /v1/decisions` for `keys` of route `users`, in a task of its own.
fn start_batch(
    client: &HttpClient,
    gw: &gateway::Gateway,
    keys: &[String],
) -> tokio::task::JoinHandle<Reply> {
    let body = serde_json::json!({"route": "users", "keys": keys}).to_string();
    let (client, url) = (client.clone(), gw.admin("/v1/decisions"));
    tokio::spawn(async move {
        let auth = format!("Bearer {TOKEN}");
        client
            .send(Method::POST, &url, &[("authorization", &auth)], &body)
            .await
    })
}

/// `store.timeout` of the killed-Redis test.
const TIMEOUT: Duration = Duration::from_millis(200);

/// How long a batch of `calls` calls may take at most before it must have ended: the batch's
/// own budget (`store.timeout` per call) and a generous margin. A liveness bound, not a
/// measurement: a key that waited for a dead Redis would never end.
fn batch_bound(calls: usize) -> Duration {
    TIMEOUT * calls as u32 + Duration::from_secs(5)
}

/// A batch of 10,000 keys (40 calls of 256) through `/v1/decisions` while its Redis is
/// killed: the batch ends, and every key is answered, those decided before the kill as Redis
/// said, every other one by the route's `on_error` (deny). The same batch sent while Redis
/// stays down ends too, every key denied, each call failing on the connection (no call waits
/// for `store.timeout`). Every failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_mid_batch_leaves_no_key_waiting() {
    const KEYS: usize = 10_000;
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"{}ms\"",
        redis.url(),
        unique_prefix("killed"),
        TIMEOUT.as_millis()
    );
    let route = "[[routes]]\nname = \"users\"\npath = \"/*\"\nupstream = \"up\"\n\
                 key = [\"header:X-User\"]\non_error = \"deny\"\n\
                 [[routes.limits]]\nname = \"per-minute\"\nlimit = 5\nwindow = \"1m\"\n";
    let gw = gateway::start(&config(&store, &up.url(), route)).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user-{i}")).collect();
    let calls_of_batch = KEYS.div_ceil(PER_CALL);
    let client = HttpClient::default();
    let mut watcher = RespConn::connect(redis.port).await;
    let before = calls(&mut watcher).await;
    let batch = start_batch(&client, &gw, &keys);

    // Kill it once Redis has answered a few of the batch's calls.
    wait_for_calls(&mut watcher, before + 3).await;
    redis.kill();
    let reply = tokio::time::timeout(batch_bound(calls_of_batch), batch)
        .await
        .expect("the batch ended: no key waits for a dead Redis")
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let results = reply.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    let mut decided = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["key"], format!("user-{i}"));
        if r["decision"] == "allowed" {
            assert_eq!(
                (r["allowed"].clone(), r["remaining"].clone()),
                (true.into(), 4.into())
            );
            decided += 1;
        } else {
            assert_eq!(r["decision"], "store_error_denied", "{r}");
            assert_eq!(r["allowed"], false);
            assert_eq!(r["retry_after_ms"], 1000);
            assert_eq!(r["error"], "store_unavailable");
        }
    }
    // Redis had run three calls, so the gateway had the answer of the first at least (a third
    // goes out only once the first is answered); the replies of the last ones may have died
    // with Redis.
    assert!(
        ((3 - BATCH_IN_FLIGHT) * PER_CALL..KEYS).contains(&decided),
        "killed mid-batch: {decided} keys decided before the kill"
    );

    // Redis stays down: the same batch again ends, every key denied, every call failing on the
    // connection instead of timing out.
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let errors = |metrics: &str, kind: &str| {
        metric(metrics, "slidegate_store_errors_total", &[("kind", kind)]) as usize
    };
    let timeouts_before = errors(&metrics, "timeout");
    let connection_before = errors(&metrics, "connection");
    let again = tokio::time::timeout(
        batch_bound(calls_of_batch),
        start_batch(&client, &gw, &keys),
    )
    .await
    .expect("the batch ended while Redis is down")
    .unwrap();
    assert_eq!(again.status, 200);
    let results = again.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    assert!(results
        .iter()
        .all(|r| r["decision"] == "store_error_denied"));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        errors(&metrics, "timeout"),
        timeouts_before,
        "no call waited for the dead Redis until its deadline"
    );
    assert!(
        errors(&metrics, "connection") - connection_before >= calls_of_batch,
        "each call of the batch failed on the connection and was counted: {metrics}"
    );
    let label = |d: &str| {
        metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", "users"), ("decision", d)],
        ) as usize
    };
    assert_eq!(label("allowed"), decided);
    assert_eq!(label("store_error_denied"), 2 * KEYS - decided);
}
