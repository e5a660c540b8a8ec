//! The lanes' own connections to Redis (README, "Store": `SLIDEGATE_REDIS_CLIENT`): decision
//! calls go on a connection the lane owns (named `slidegate-lane` in `CLIENT LIST`, whose
//! `cmd=` shows the call it ran last), and it keeps the store's promises: a call past its
//! deadline fails with a timeout and its late reply is never taken for the next call's; a
//! killed Redis fails calls at once and the connection comes back once Redis does; code that
//! Redis lost (`SCRIPT FLUSH`, `FUNCTION FLUSH`) is loaded again and the call still decides;
//! the URL's user, password and database hold on it; in a cluster each primary's lane has
//! one, and a dead node fails only its own decisions.

use crate::support;

use std::time::{Duration, Instant};

use slidegate::config::{ClockSource, ScriptsMode};
use slidegate::store::{DecisionRequest, Store};
use support::cluster::RedisCluster;
use support::coalescing::{pause, resume, route, used};
use support::redis::{RedisServer, Resp};
use support::resp::RespConn;
use support::store::{bases, limit_sets, redis_store_at, redis_store_with};
use support::unique_prefix;

/// `store.timeout` of these tests.
const TIMEOUT: Duration = Duration::from_millis(200);

/// The lanes' connections as `CLIENT LIST` shows them: (id, last command).
async fn lane_connections(watcher: &mut RespConn) -> Vec<(String, String)> {
    lane_fields(watcher, ["id=", "cmd="])
        .await
        .into_iter()
        .map(|[id, cmd]| (id, cmd))
        .collect()
}

/// Fields of the lanes' connections in `CLIENT LIST` (`"id="`, `"user="`...).
async fn lane_fields<const N: usize>(watcher: &mut RespConn, names: [&str; N]) -> Vec<[String; N]> {
    let Resp::Bulk(Some(list)) = watcher.cmd(&["CLIENT", "LIST"]).await else {
        panic!("CLIENT LIST failed")
    };
    list.lines()
        .filter(|line| line.contains(" name=slidegate-lane "))
        .map(|line| {
            names.map(|name| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or("")
                    .to_string()
            })
        })
        .collect()
}

/// Decides with `request` until a decision went out on the lane's own connection (until it is
/// up, calls go through the client library); returns the charge the last one counted (`used`)
/// and the connection's id.
async fn decide_on_lane(
    store: &Store,
    watcher: &mut RespConn,
    request: DecisionRequest<'_>,
) -> (u64, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let charged = used(store.decide(request).await);
        let lanes = lane_connections(watcher).await;
        let decided = lanes
            .iter()
            .find(|(_, cmd)| cmd == "fcall" || cmd == "evalsha");
        if let Some((id, _)) = decided {
            return (charged, id.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no lane connection ran a decision call: {lanes:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reply_is_dropped_and_never_answers_the_next_call() {
    let server = RedisServer::start_async().await;
    let store = redis_store_with(&server, TIMEOUT, ClockSource::Redis, ScriptsMode::Auto).await;
    let mut watcher = RespConn::connect(server.port).await;
    let prefix = unique_prefix("late");
    let (small, large) = (limit_sets(&route(3)), limit_sets(&route(1000)));
    let (slow_key, next_key) = (bases(&prefix, "r", "slow"), bases(&prefix, "r", "next"));
    let slow = DecisionRequest::charge(&small[0], &slow_key, 1);
    let next = DecisionRequest::charge(&large[0], &next_key, 1);
    let (_, lane) = decide_on_lane(&store, &mut watcher, next).await;

    pause(&mut watcher).await;
    let started = Instant::now();
    let late = store.decide(slow).await.expect_err("Redis is paused");
    assert_eq!(late.kind(), "timeout", "{late:?}");
    assert!(started.elapsed() < TIMEOUT * 5, "{:?}", started.elapsed());
    resume(&mut watcher).await;

    // The slow call ran once Redis resumed; its reply (limit 3, used 1) came late. The next
    // call on the same connection gets its own (limit 1000, its key's next charge).
    let before = lane_connections(&mut watcher).await.len();
    let decision = store.decide(next).await.expect("the store decides");
    assert_eq!(
        decision.limits[0].limit, 1000,
        "not the late reply: {decision:?}"
    );
    let (charged, id) = decide_on_lane(&store, &mut watcher, next).await;
    assert_eq!(charged, decision.limits[0].used + 1);
    assert_eq!(id, lane, "the same connection, kept through the timeout");
    assert_eq!(lane_connections(&mut watcher).await.len(), before);
    assert_eq!(
        used(store.decide(slow).await),
        2,
        "the slow call counted once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_fails_calls_at_once_and_the_lane_reconnects() {
    let mut server = RedisServer::start_async().await;
    let store = redis_store_with(&server, TIMEOUT, ClockSource::Redis, ScriptsMode::Auto).await;
    let mut watcher = RespConn::connect(server.port).await;
    let sets = limit_sets(&route(1000));
    let key = bases(&unique_prefix("killed"), "r", "k");
    let request = DecisionRequest::charge(&sets[0], &key, 1);
    decide_on_lane(&store, &mut watcher, request).await;

    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let error = store.decide(request).await.expect_err("Redis is dead");
        assert_eq!(error.kind(), "connection", "{error:?}");
        assert!(
            started.elapsed() < TIMEOUT,
            "failed fast: {:?}",
            started.elapsed()
        );
    }

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut watcher = loop {
        if let Ok(Resp::Simple(_)) = server.try_cmd(&["PING"]) {
            break RespConn::connect(server.port).await;
        }
        assert!(Instant::now() < deadline, "Redis did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    loop {
        if store.decide(request).await.is_ok() && !lane_connections(&mut watcher).await.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "decisions did not resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A lane's connection on the restarted server (a process of its own) is a new one.
    let (charged, _) = decide_on_lane(&store, &mut watcher, request).await;
    assert!(charged >= 2, "a fresh Redis counts again: {charged}");
}

/// `FUNCTION FLUSH` (the library) and `SCRIPT FLUSH` (the scripts): the next call meets
/// "Function not found" or `NOSCRIPT` on the lane's connection, loads the code again and is
/// sent again there, within its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_code_is_loaded_again_and_the_call_still_decides() {
    for (mode, flush, call) in [
        (ScriptsMode::Functions, "FUNCTION", "fcall"),
        (ScriptsMode::Eval, "SCRIPT", "evalsha"),
    ] {
        let server = RedisServer::start_async().await;
        let store = redis_store_with(&server, TIMEOUT, ClockSource::Redis, mode).await;
        let mut watcher = RespConn::connect(server.port).await;
        let sets = limit_sets(&route(1000));
        let key = bases(&unique_prefix("flush"), "r", "k");
        let request = DecisionRequest::charge(&sets[0], &key, 1);
        let (first, lane) = decide_on_lane(&store, &mut watcher, request).await;

        let reply = watcher.cmd(&[flush, "FLUSH"]).await;
        assert_eq!(reply, Resp::Simple("OK".into()), "{flush} FLUSH");
        let decision = store.decide(request).await;
        assert_eq!(
            used(decision),
            first + 1,
            "{flush} FLUSH: decided after reloading"
        );
        let lanes = lane_connections(&mut watcher).await;
        assert!(
            lanes.iter().any(|(id, cmd)| *id == lane && cmd == call),
            "{flush} FLUSH: the retry went on the lane's connection: {lanes:?}"
        );
    }
}

/// `redis://user:password@host:port/db`: the lane's connection logs in as the URL's user and
/// selects its database, where the decisions' keys then live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_logs_in_and_selects_the_database_of_the_url() {
    let server = RedisServer::start_async().await;
    let acl = ["ACL", "SETUSER", "gw", "on", ">s3cret", "~*", "&*", "+@all"];
    assert_eq!(server.cmd(&acl), Resp::Simple("OK".into()));
    let url = format!("redis://gw:s3cret@127.0.0.1:{}/3", server.port);
    let store = redis_store_at(&url, TIMEOUT, ClockSource::Redis, ScriptsMode::Auto).await;
    let mut watcher = RespConn::connect(server.port).await;
    let sets = limit_sets(&route(1000));
    let prefix = unique_prefix("auth");
    let key = bases(&prefix, "r", "k");
    let request = DecisionRequest::charge(&sets[0], &key, 1);
    let (_, lane) = decide_on_lane(&store, &mut watcher, request).await;

    let lanes = lane_fields(&mut watcher, ["id=", "user=", "db="]).await;
    let mine = lanes.iter().find(|[id, _, _]| *id == lane);
    assert_eq!(
        mine.map(|[_, user, db]| (user.as_str(), db.as_str())),
        Some(("gw", "3")),
        "{lanes:?}"
    );
    let pattern = format!("{prefix}*");
    let in_db = |db: &'static str| {
        let watcher = &server;
        let pattern = pattern.clone();
        async move {
            let mut conn = RespConn::connect(watcher.port).await;
            assert_eq!(conn.cmd(&["SELECT", db]).await, Resp::Simple("OK".into()));
            match conn.cmd(&["KEYS", &pattern]).await {
                Resp::Array(keys) => keys.len(),
                other => panic!("KEYS: {other:?}"),
            }
        }
    };
    assert!(in_db("3").await > 0, "the decisions' keys are in db 3");
    assert_eq!(in_db("0").await, 0, "none in db 0");
}

/// In a cluster each primary has a lane with a connection of its own: every node runs
/// decision calls on one, and a killed node fails only the decisions of its own slots, at
/// once, while the others still decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_primary_has_its_own_lane_connection_and_fails_alone() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let store = redis_store_at(
        &cluster.url(),
        TIMEOUT,
        ClockSource::Redis,
        ScriptsMode::Auto,
    )
    .await;
    let sets = limit_sets(&route(1000));
    let prefix = unique_prefix("cluster");
    // One key per node.
    let mut keys: Vec<Option<Vec<String>>> = vec![None; 3];
    for i in 0.. {
        let key = bases(&prefix, "r", &format!("k{i}"));
        let node = cluster.node_of(&key[0]);
        keys[node].get_or_insert(key);
        if keys.iter().all(Option::is_some) {
            break;
        }
    }
    let keys: Vec<Vec<String>> = keys.into_iter().map(Option::unwrap).collect();
    for (node, key) in keys.iter().enumerate() {
        let mut watcher = RespConn::connect(cluster.nodes[node].port).await;
        let request = DecisionRequest::charge(&sets[0], key, 1);
        decide_on_lane(&store, &mut watcher, request).await;
    }

    cluster.nodes[0].kill();
    let started = Instant::now();
    let error = store
        .decide(DecisionRequest::charge(&sets[0], &keys[0], 1))
        .await
        .expect_err("its node is dead");
    assert_eq!(error.kind(), "connection", "{error:?}");
    assert!(
        started.elapsed() < TIMEOUT,
        "failed fast: {:?}",
        started.elapsed()
    );
    for key in &keys[1..] {
        let decision = store
            .decide(DecisionRequest::charge(&sets[0], key, 1))
            .await;
        assert!(decision.is_ok(), "another node still decides: {decision:?}");
    }
}

/// A decision on keys that exist on neither node of a slot left migrating (a route with a log
/// and a counter: two keys under one hash tag). The slot's owner answers `ASK`, and the target
/// answers `TRYAGAIN` until the migration ends, for a call on several keys it does not all
/// hold yet. The call is sent again until then, within `store.timeout`: the decision is made
/// once the slot has moved, not failed to `on_error` after the first few tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_in_a_migrating_slot_is_made_once_the_migration_ends() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let store = redis_store_at(
        &cluster.url(),
        Duration::from_secs(3),
        ClockSource::Redis,
        ScriptsMode::Auto,
    )
    .await;
    let sets = limit_sets(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"log\"\nlimit = 10\nwindow = \"1m\"\n\
         [[routes.limits]]\nname = \"counter\"\nlimit = 10\nwindow = \"1h\"\n\
         algorithm = \"sliding_window_counter\"\n",
    );
    let prefix = unique_prefix("migrating");
    let warm = bases(&prefix, "r", "warm-up");
    store
        .decide(DecisionRequest::charge(&sets[0], &warm, 1))
        .await
        .expect("the cluster decides");
    let key = bases(&prefix, "r", "new-user");
    let slot = cluster.nodes[0]
        .cmd(&["CLUSTER", "KEYSLOT", &key[0]])
        .int()
        .to_string();
    let from = &cluster.nodes[cluster.node_of(&key[0])];
    let to = &cluster.nodes[(cluster.node_of(&key[0]) + 1) % 3];
    let id = |n: &RedisServer| match n.cmd(&["CLUSTER", "MYID"]) {
        Resp::Bulk(Some(id)) => id,
        other => panic!("CLUSTER MYID: {other:?}"),
    };
    let (from_id, to_id) = (id(from), id(to));
    to.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    from.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);

    let started = Instant::now();
    let end_migration = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        for node in [to, from] {
            node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
    };
    let (decided, ()) = tokio::join!(
        store.decide(DecisionRequest::charge(&sets[0], &key, 1)),
        end_migration
    );
    let decision = decided.expect("decided once the slot moved, not failed");
    assert!(
        matches!(decision.outcome, slidegate::store::Outcome::Allowed),
        "{decision:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
}

/// A graceful `CLUSTER FAILOVER` (an upgrade's routine step) while this store sends nothing to
/// that node: its next decisions meet the old primary, now a replica answering `READONLY`, and
/// are sent to the promoted one once the slot table names it, within the call. None fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_after_a_graceful_cluster_failover_follow_the_promoted_primary() {
    use support::cluster::FailoverCluster;
    let cluster = tokio::task::spawn_blocking(|| FailoverCluster::start([1, 0, 0]))
        .await
        .unwrap();
    let store = redis_store_at(
        &cluster.url(),
        Duration::from_secs(2),
        ClockSource::Redis,
        ScriptsMode::Auto,
    )
    .await;
    let sets = limit_sets(&route(1000));
    let prefix = unique_prefix("promoted");
    let on_first = (0..)
        .map(|i| bases(&prefix, "r", &format!("k{i}")))
        .find(|key| {
            let slot = cluster.masters[0]
                .cmd(&["CLUSTER", "KEYSLOT", &key[0]])
                .int() as usize;
            slot <= support::cluster::SLOTS[0].1 as usize
        })
        .unwrap();
    store
        .decide(DecisionRequest::charge(&sets[0], &on_first, 1))
        .await
        .expect("the cluster decides");
    let replica = &cluster.replicas[0][0];
    assert_eq!(
        replica.cmd(&["CLUSTER", "FAILOVER"]),
        Resp::Simple("OK".into())
    );
    let promoted_at = Instant::now();
    while !matches!(replica.cmd(&["ROLE"]), Resp::Array(ref role)
        if role.first() == Some(&Resp::Bulk(Some("master".into())))
            || role.first() == Some(&Resp::Simple("master".into())))
    {
        assert!(
            promoted_at.elapsed() < Duration::from_secs(10),
            "never promoted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 0..3 {
        let decided = store
            .decide(DecisionRequest::charge(&sets[0], &on_first, 1))
            .await;
        assert!(
            decided.is_ok(),
            "decision {n} after the promotion: {decided:?}"
        );
    }
}
