//! The timing promises of coalescing (SPEC sections 2 and 5): a lone request pays one round
//! trip, as without coalescing; a request does not queue behind a batch's decisions; and a
//! Redis killed in the middle of a batch leaves no request waiting beyond `store.timeout` and a
//! small margin per call. A binary of its own, and one test at a time, so that no other test's
//! burst disturbs the clocks.

mod support;

use std::time::{Duration, Instant};

use http::Method;
use slidegate::config::ClockSource;
use slidegate::key::decision_base;
use slidegate::store::DecisionRequest;
use support::gateway::{self, config, TOKEN};
use support::http::{HttpClient, Reply};
use support::observe::{command_calls, metric};
use support::redis::{RedisServer, Resp};
use support::resp::RespConn;
use support::store::{limit_sets, redis_store};
use support::{unique_prefix, upstream};

/// Held by each test for its whole run: the tests of this file never run side by side.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The median of some durations.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// At concurrency 1 coalescing costs nothing: each decision is its own `EVALSHA`, sent at once.
/// The median decision through the store is compared with the median plain `EVALSHA` of the
/// same script on an open socket, measured in turns: a batching wait of a millisecond or more
/// would show as the difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_decision_is_its_own_call_and_waits_for_no_company() {
    const N: usize = 50;
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(2), ClockSource::Redis).await;
    let sets = limit_sets(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"m\"\nlimit = 1000000\nwindow = \"1m\"\n",
    );
    let prefix = unique_prefix("lone");
    let base = decision_base(&prefix, "r", "store");
    let request = DecisionRequest {
        limits: &sets[0],
        base: &base,
        cost: 1,
    };

    // One call per decision.
    let before = command_calls(&server, "evalsha");
    for _ in 0..N {
        assert!(store.decide(request).await.unwrap().allowed());
    }
    assert_eq!(command_calls(&server, "evalsha") - before, N as i64);

    // The same script, plainly, on a socket of its own: the same arguments the store sends for
    // one decision (`lua/README.md`), under another key.
    let mut raw = RespConn::connect(server.port).await;
    let Resp::Bulk(Some(sha)) = raw
        .cmd(&["SCRIPT", "LOAD", slidegate::store::SLIDING_LOG_LUA])
        .await
    else {
        panic!("SCRIPT LOAD failed")
    };
    let raw_key = sets[0].keys(&decision_base(&prefix, "r", "raw")).remove(0);
    let mut through_store = Vec::with_capacity(N);
    let mut plain = Vec::with_capacity(N);
    for i in 0..N {
        let started = Instant::now();
        assert!(store.decide(request).await.unwrap().allowed());
        through_store.push(started.elapsed());

        let token = format!("raw{i}.");
        let started = Instant::now();
        let reply = raw
            .cmd(&[
                "EVALSHA", &sha, "1", &raw_key, "", &token, "1", "0", "1", "m", "1000000",
                "60000000", "1", "1", "1",
            ])
            .await;
        plain.push(started.elapsed());
        let Resp::Array(values) = reply else {
            panic!("EVALSHA failed: {reply:?}")
        };
        assert_eq!(values[1], Resp::Int(1), "the plain call is allowed too");
    }
    let (store_median, plain_median) = (median(through_store), median(plain));
    assert!(
        store_median < plain_median + Duration::from_millis(1),
        "a lone decision took {store_median:?} (median) through the store, \
         a plain EVALSHA {plain_median:?}"
    );
}

/// A gateway on `redis` with one route, 5 per minute per `X-User`, failing closed: any store
/// error shows as a 503 or a `store_error_denied`, never as an allowed request.
async fn gateway_on(redis: &RedisServer, upstream: &str) -> gateway::Gateway {
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"200ms\"",
        redis.url(),
        unique_prefix("timing")
    );
    let route = "[[routes]]\nname = \"users\"\npath = \"/*\"\nupstream = \"up\"\n\
                 key = [\"header:X-User\"]\non_error = \"deny\"\n\
                 [[routes.limits]]\nname = \"per-minute\"\nlimit = 5\nwindow = \"1m\"\n";
    gateway::start(&config(&store, upstream, route)).await
}

/// `store.timeout` of [`gateway_on`].
const TIMEOUT: Duration = Duration::from_millis(200);

/// Keys `user-0` ... for a batch.
fn users(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user-{i}")).collect()
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

/// Waits (5 s at most) until Redis has counted `n` `EVALSHA` calls.
async fn wait_for_calls(port: u16, n: u64) {
    let mut watcher = RespConn::connect(port).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let Resp::Bulk(Some(info)) = watcher.cmd(&["INFO", "commandstats"]).await else {
            panic!("INFO failed")
        };
        let calls: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap());
        if calls >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Redis saw {calls} calls, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Requests on the proxy path are not queued behind batches: sent while batches of 30,000 keys
/// (120 calls) are being decided on the same Redis lane, each is decided by Redis within
/// `store.timeout`, waiting at most for a call in flight, instead of timing out behind the
/// batches' decisions and getting the route's `on_error` from a healthy Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_does_not_wait_behind_batches() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway_on(&redis, &up.url()).await;
    let client = HttpClient::default();
    // Three batches: 30,000 decisions queued keep Redis busy well beyond `store.timeout`.
    let keys = users(30_000);
    let batches: Vec<_> = keys
        .chunks(10_000)
        .map(|chunk| start_batch(&client, &gw, chunk))
        .collect();
    wait_for_calls(redis.port, 1).await;
    let started = Instant::now();
    let urls: Vec<String> = (0..5).map(|_| gw.url("/x")).collect();
    let mut requests = tokio::task::JoinSet::new();
    for (i, url) in urls.into_iter().enumerate() {
        let client = client.clone();
        requests.spawn(async move {
            let user = format!("proxy-{i}");
            let status = client.status(&url, &[("x-user", &user)]).await;
            (status, started.elapsed())
        });
    }
    let mut answers = Vec::new();
    while let Some(answer) = requests.join_next().await {
        answers.push(answer.unwrap());
    }
    for batch in batches {
        let results = batch.await.unwrap().json()["results"].clone();
        let results = results.as_array().unwrap();
        assert!(results.iter().all(|r| r["decision"] == "allowed"));
    }
    let batches_took = started.elapsed();
    assert!(
        answers
            .iter()
            .all(|&(status, took)| status == 200 && took < TIMEOUT),
        "requests during the batches (which took {batches_took:?}): {answers:?}"
    );
}

/// A batch of 10,000 keys (40 calls of 256) through `/v1/decisions` while its Redis is
/// killed: every key is answered, those decided before the kill as Redis said, every other one
/// by the route's `on_error` (deny), within `store.timeout` (a call in flight when Redis died)
/// and a small margin per call of the batch after the kill. The same batch sent while Redis
/// stays down fails fast, call after call. Every failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_mid_batch_leaves_no_key_waiting() {
    const KEYS: usize = 10_000;
    // What answering one call's 256 keys costs the gateway (a debug build, a shared machine).
    const PER_CALL: Duration = Duration::from_millis(20);
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let gw = gateway_on(&redis, &up.url()).await;
    let keys = users(KEYS);
    let client = HttpClient::default();
    let batch = start_batch(&client, &gw, &keys);

    // Kill it once Redis has answered a few of the batch's calls.
    wait_for_calls(redis.port, 3).await;
    redis.kill();
    let killed = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(10), batch)
        .await
        .expect("the batch answered: nothing hangs on a dead Redis")
        .unwrap();
    let took = killed.elapsed();
    let calls = KEYS.div_ceil(256) as u32;
    assert!(
        took <= TIMEOUT + PER_CALL * calls,
        "the batch answered {took:?} after the kill"
    );

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
    assert!(
        (3 * 256..KEYS).contains(&decided),
        "killed mid-batch: {decided} keys decided before the kill"
    );

    // Redis stays down: the same batch again fails fast, call after call.
    let started = Instant::now();
    let again = start_batch(&client, &gw, &keys).await.unwrap();
    let took = started.elapsed();
    assert!(
        took <= PER_CALL * calls,
        "with Redis down the batch took {took:?}"
    );
    assert_eq!(again.status, 200);
    let results = again.json()["results"].as_array().unwrap().clone();
    assert!(results
        .iter()
        .all(|r| r["decision"] == "store_error_denied"));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let label = |d: &str| {
        metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", "users"), ("decision", d)],
        ) as usize
    };
    assert_eq!(label("allowed"), decided);
    assert_eq!(label("store_error_denied"), 2 * KEYS - decided);
    // Each failed call counts once: at least every call of the second batch.
    let errors = metric(&metrics, "slidegate_store_errors_total", &[]) as u32;
    assert!(errors >= calls, "{errors} store errors counted");
}
