//! `POST /admin/reload`: a good file applies and the counts survive, a bad one is refused with its
//! location while the running config stays, and a changed setting read only at start
//! (`server.listen`, `server.shutdown_grace`) is named as pending a restart.

use crate::support;

use http::Method;
use support::admin::{auth, ROUTES};
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_good_files_and_refuses_bad_ones() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("reload"));
    let gw = gateway::start(&config(&store, &up.url(), ROUTES)).await;
    // A reload reads the file with the environment the gateway started with.
    let client = HttpClient::default();
    let (k, v) = auth();
    let user = [("x-user", "u1")];
    client.get(&gw.url("/x"), &user).await;
    client.get(&gw.url("/x"), &user).await;
    assert_eq!(client.status(&gw.url("/x"), &user).await, 429);

    gw.rewrite(&config(
        &store,
        &up.url(),
        &ROUTES.replace("limit = 2", "limit = 3"),
    ));
    let r = client
        .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        client.status(&gw.url("/x"), &user).await,
        200,
        "counts survive, the new limit applies"
    );
    assert_eq!(client.status(&gw.url("/x"), &user).await, 429);

    gw.rewrite("[[routes]]\nname = 1\n");
    let r = client
        .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("config.toml:2:8"),
        "{}",
        r.body
    );
    assert_eq!(
        client.status(&gw.url("/x"), &[("x-user", "u2")]).await,
        200,
        "the running config stays"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(metrics.contains("slidegate_config_reloads_total{result=\"success\"} 1"));
    assert!(metrics.contains("slidegate_config_reloads_total{result=\"failure\"} 1"));

    // Files that validate but are refused: an empty one, or one of comments alone (a write
    // under way would drop every route), and one whose admin token variable the gateway's
    // environment lacks (every admin call refused from then on, the next reload's included).
    let good = config(&store, &up.url(), ROUTES);
    let unset = good.replacen(
        "[admin]\n",
        "[admin]\ntoken_env = \"SLIDEGATE_NO_SUCH_TOKEN\"\n",
        1,
    );
    // the error names the setting's place: FILE:LINE:COLUMN of its value
    let line = 1 + unset
        .lines()
        .position(|l| l.starts_with("token_env"))
        .unwrap();
    let token_env_at = format!("config.toml:{line}:13: admin.token_env: `SLIDEGATE_NO_SUCH_TOKEN`");
    for (file, says) in [
        ("", "is empty"),
        ("# routes follow\n\n# (being written)\n", "is empty"),
        (unset.as_str(), token_env_at.as_str()),
    ] {
        gw.rewrite(file);
        let r = client
            .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
            .await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(r.body.contains(says), "{}", r.body);
        assert_eq!(
            client.status(&gw.url("/x"), &[("x-user", "u3")]).await,
            200,
            "the running routes stay"
        );
    }
    let metrics = client.get(&gw.admin("/metrics"), &[(k, &v)]).await.body;
    assert!(metrics.contains("slidegate_config_reloads_total{result=\"failure\"} 4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_server_listen_names_it_as_pending_a_restart() {
    let up = upstream::start().await;
    let cfg = config("backend = \"memory\"", &up.url(), ROUTES);
    let gw = gateway::start(&cfg).await;
    // A reload reads the file with the environment the gateway started with.
    let client = HttpClient::default();
    let (k, v) = auth();
    let reload = || {
        let (client, url, auth) = (client.clone(), gw.admin("/admin/reload"), v.clone());
        async move {
            let r = client
                .send(Method::POST, &url, &[("authorization", &auth)], "")
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        }
    };
    let shown = |json: serde_json::Value| {
        (
            json["server"]["listen"].clone(),
            json["pending_restart"].clone(),
        )
    };

    let elsewhere = format!("127.0.0.1:{}", support::free_port());
    let moved = cfg.replacen(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{elsewhere}\""),
        1,
    );
    assert_ne!(moved, cfg);
    gw.rewrite(&moved);
    let pending = serde_json::json!([
        {"setting": "server.listen", "running": "127.0.0.1:0", "configured": elsewhere}
    ]);
    let answer = reload().await;
    assert_eq!(answer["result"], "success");
    assert_eq!(answer["pending_restart"], pending);
    let config = client
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await
        .json();
    assert_eq!(shown(config), (serde_json::json!("127.0.0.1:0"), pending));
    // Still served where it runs; nothing listens where the file now says.
    assert_eq!(
        client.get(&gw.url("/x"), &[("x-user", "u1")]).await.status,
        200
    );
    assert!(tokio::net::TcpStream::connect(&elsewhere).await.is_err());

    // The drain's bound is handed to the listener at start: also pending.
    let graced = moved
        .replacen("[server]", "[server]\nshutdown_grace = \"3s\"", 1)
        .replacen(
            "[store]",
            "[store]\non_error = \"deny\"\nscripts = \"eval\"",
            1,
        );
    assert_eq!(graced.matches("shutdown_grace").count(), 1);
    assert_eq!(graced.matches("on_error = \"deny\"").count(), 1);
    assert_eq!(graced.matches("scripts =").count(), 1);
    gw.rewrite(&graced);
    let pending = reload().await["pending_restart"].clone();
    let settings: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["setting"].as_str().unwrap())
        .collect();
    assert_eq!(
        settings,
        [
            "server.listen",
            "server.shutdown_grace",
            "store.on_error",
            "store.scripts"
        ],
        "{pending}"
    );
    assert_eq!(pending[1]["configured"], "3s");
    // Values as the file writes them.
    assert_eq!(pending[2]["running"], "allow", "{pending}");
    assert_eq!(pending[2]["configured"], "deny", "{pending}");
    assert_eq!(pending[3]["running"], "auto", "{pending}");
    assert_eq!(pending[3]["configured"], "eval", "{pending}");

    // Back to the running value: nothing is pending any more.
    gw.rewrite(&cfg);
    assert_eq!(reload().await["pending_restart"], serde_json::json!([]));
    let config = client
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await
        .json();
    assert_eq!(
        shown(config),
        (serde_json::json!("127.0.0.1:0"), serde_json::json!([]))
    );
}

/// A route that blocks a user after one request a minute.
const BLOCKS: &str = r#"
[[routes]]
name = "login"
path = "/login"
upstream = "up"
key = ["header:X-User"]
on_exceed = "block"
block_for = "1m"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;

/// A block belongs to the limit that started it: a reload that removes the limit (an operator
/// lifting a rule that locks customers out) lifts its blocks. One that renames it lifts them
/// too but keeps the window's count, which refuses under the new name and is listed under it
/// (`/admin/blocked` finds the key though its refusal was recorded under the old name); a
/// request over it starts the next block, one level up. On Redis and on the memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_or_renames_a_blocking_limit() {
    let redis = RedisServer::start();
    for store in [
        redis_store(&redis.url(), &unique_prefix("renamed")),
        "backend = \"memory\"".to_string(),
    ] {
        blocks_across_a_rename_and_a_removal(&store).await;
    }
}

async fn blocks_across_a_rename_and_a_removal(store: &str) {
    let up = upstream::start().await;
    let gw = gateway::start(&config(store, &up.url(), BLOCKS)).await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let reload = |text: String| {
        gw.rewrite(&text);
        let (client, url, v) = (client.clone(), gw.admin("/admin/reload"), v.clone());
        async move {
            let r = client.send(Method::POST, &url, &[(k, &v)], "").await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    let listed = || {
        let (client, url, v) = (
            client.clone(),
            gw.admin("/admin/blocked?route=login"),
            v.clone(),
        );
        async move { client.get(&url, &[(k, &v)]).await.json()["blocked"].clone() }
    };
    for user in ["ann", "bob"] {
        assert_eq!(
            client.status(&gw.url("/login"), &[("x-user", user)]).await,
            200
        );
        let r = client.get(&gw.url("/login"), &[("x-user", user)]).await;
        assert_eq!(r.status, 429, "{}", r.body);
        assert_eq!(r.json()["block_level"], 1, "{}", r.body);
    }

    // renamed: the blocks are gone with their name, the window's counts are not
    reload(config(
        store,
        &up.url(),
        &BLOCKS.replace("per-minute", "a-minute"),
    ))
    .await;
    let blocked = listed().await;
    let shown = |b: &serde_json::Value| {
        let field = |name: &str| b[name].to_string();
        format!(
            "{} {} {} {}",
            field("key"),
            field("limit"),
            field("reason"),
            field("block_level")
        )
    };
    let shown_all = |list: &serde_json::Value| {
        list.as_array()
            .unwrap()
            .iter()
            .map(shown)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shown_all(&blocked),
        [
            r#""bob" "a-minute" "window" 1"#,
            r#""ann" "a-minute" "window" 1"#
        ],
        "{blocked}"
    );
    let r = client.get(&gw.url("/login"), &[("x-user", "ann")]).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()["limit"], "a-minute", "{}", r.body);
    assert_eq!(r.json()["block_level"], 2, "{}", r.body);
    let blocked = listed().await;
    assert_eq!(
        shown_all(&blocked),
        [
            r#""ann" "a-minute" "block" 2"#,
            r#""bob" "a-minute" "window" 1"#
        ],
        "{blocked}"
    );

    // an operator lifts bob by the limit's new name: his level goes with the old block
    let usage = |user: &str, method: Method| {
        let url = gw.admin(&format!(
            "/admin/usage?route=login&key={user}&limit=a-minute"
        ));
        let (client, v) = (client.clone(), v.clone());
        async move { client.send(method, &url, &[(k, &v)], "").await.json() }
    };
    assert_eq!(usage("bob", Method::GET).await["block_level"], 1);
    assert_eq!(usage("bob", Method::DELETE).await["reset"], true);
    assert_eq!(usage("bob", Method::GET).await["block_level"], 0);

    // removed: nothing refuses them any more
    let hourly = BLOCKS
        .replace("per-minute", "per-hour")
        .replace("window = \"1m\"", "window = \"1h\"")
        .replace("limit = 1", "limit = 100");
    reload(config(store, &up.url(), &hourly)).await;
    for user in ["ann", "bob"] {
        let r = client.get(&gw.url("/login"), &[("x-user", user)]).await;
        assert_eq!(r.status, 200, "{user}: {}", r.body);
    }
    assert_eq!(listed().await, serde_json::json!([]));

    // given another key (a limit of its own on the phone number), under the same name: the
    // user's block is no block of the phone's, nor of the user's any more
    reload(config(store, &up.url(), &format!("{BLOCKS}{HOURLY_TOO}"))).await;
    assert_eq!(
        client.status(&gw.url("/login"), &[("x-user", "cat")]).await,
        200
    );
    assert_eq!(
        client.status(&gw.url("/login"), &[("x-user", "cat")]).await,
        429
    );
    let phoned = BLOCKS.replace(
        "name = \"per-minute\"\n",
        "name = \"per-minute\"\n  key = [\"header:X-Phone\"]\n",
    );
    reload(config(store, &up.url(), &format!("{phoned}{HOURLY_TOO}"))).await;
    for phone in ["p1", "p2"] {
        let who = [("x-user", "cat"), ("x-phone", phone)];
        let r = client.get(&gw.url("/login"), &who).await;
        assert_eq!(r.status, 200, "{phone}: {}", r.body);
    }
}

/// A second limit on the route's own key, so that its key slot stays in the route's plan
/// whatever the first limit counts.
const HOURLY_TOO: &str = r#"
  [[routes.limits]]
  name = "per-hour"
  limit = 100
  window = "1h"
"#;

/// A route whose keys on plan `gold` get 3 a day, and keys on no plan none.
const PLANS: &str = r#"
[plans]
members_file = "plans.toml"
unknown = "reject"

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "per-day"
  limit = 1
  window = "1d"
  [routes.limits.plans]
  gold = 3
"#;

/// A plans file may start empty, and keys join it by a reload; but a reload that would empty a
/// plans file that held keys (a tool rewriting it in place: truncated, not yet written) is
/// refused, as an empty config is: every key would lose its plan (here: be refused as on
/// none) until the rest arrives. The running plans stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_empties_the_plans_file_is_refused() {
    let up = upstream::start().await;
    let toml = config("backend = \"memory\"", &up.url(), PLANS);
    let gw = gateway::start_with_files(&toml, &[("plans.toml", b"# none yet\n".to_vec())]).await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let gold = [("x-api-key", "gold-key")];
    assert_eq!(
        client.status(&gw.url("/api/x"), &gold).await,
        403,
        "on no plan yet"
    );
    let reload = || {
        let (client, url, v) = (client.clone(), gw.admin("/admin/reload"), v.clone());
        async move { client.send(Method::POST, &url, &[(k, &v)], "").await }
    };

    gw.write_file("plans.toml", b"\"gold-key\" = \"gold\"\n");
    let r = reload().await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        client.status(&gw.url("/api/x"), &gold).await,
        200,
        "on gold now"
    );

    for emptied in ["", "# being rewritten\n"] {
        gw.write_file("plans.toml", emptied.as_bytes());
        let r = reload().await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(r.body.contains("plans file is empty"), "{}", r.body);
        assert_eq!(
            client.status(&gw.url("/api/x"), &gold).await,
            200,
            "the running plans stay"
        );
    }
}

/// One limit of 4 an hour, under `{algorithm}`.
fn hourly(algorithm: &str) -> String {
    format!("[[routes]]\nname = \"g\"\npath = \"/g\"\nupstream = \"up\"\nkey = [\"header:x-user\"]\n  [[routes.limits]]\n  name = \"hourly\"\n  limit = 4\n  window = \"1h\"\n  algorithm = \"{algorithm}\"\n")
}

/// A `gcra` or `sliding_window_counter` limit's count survives a reload that changes its limit
/// or its window (their state is kept per limit, with the limit and window it was counted
/// under): 4 used of 4 stay used under 3, and under 4 per 2 h, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_survives_a_changed_limit_or_window() {
    let redis = RedisServer::start();
    let on_redis = redis_store(&redis.url(), &unique_prefix("reload-count"));
    let stores = [on_redis.as_str(), "backend = \"memory\""];
    for (store, algorithm) in stores
        .iter()
        .flat_map(|s| ["gcra", "sliding_window_counter"].map(|a| (*s, a)))
    {
        let up = upstream::start().await;
        let routes = hourly(algorithm);
        let gw = gateway::start(&config(store, &up.url(), &routes)).await;
        let client = HttpClient::default();
        let user = [("x-user", "ann")];
        for _ in 0..4 {
            assert_eq!(client.status(&gw.url("/g"), &user).await, 200, "{store}");
        }
        assert_eq!(client.status(&gw.url("/g"), &user).await, 429, "{store}");
        let lower = routes.replace("limit = 4", "limit = 3");
        let longer = routes.replace("window = \"1h\"", "window = \"2h\"");
        for (routes, what) in [(lower, "a lower limit"), (longer, "a longer window")] {
            gw.rewrite(&config(store, &up.url(), &routes));
            let (k, v) = auth();
            let r = client
                .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let status = client.status(&gw.url("/g"), &user).await;
            assert_eq!(
                status, 429,
                "{store}, {algorithm}: the count survives {what}"
            );
        }
        gw.stop().await;
    }
}

/// A carried `gcra` debt is written back as the new limit's at the first look after the reload
/// (here the admin's read of the key: a refusal would be answered from the deny cache after
/// it), so it pays back at the new rate: 2 per 2 s lengthened to 2 per 4 s gives a unit back
/// after 2 s, not after the old rate's 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_debt_pays_back_at_the_new_rate() {
    let redis = RedisServer::start();
    let on_redis = redis_store(&redis.url(), &unique_prefix("reload-rate"));
    for store in [on_redis.as_str(), "backend = \"memory\""] {
        let up = upstream::start().await;
        let routes = hourly("gcra")
            .replace("limit = 4", "limit = 2")
            .replace("window = \"1h\"", "window = \"2s\"");
        let gw = gateway::start(&config(store, &up.url(), &routes)).await;
        let client = HttpClient::default();
        let user = [("x-user", "ann")];
        for _ in 0..2 {
            assert_eq!(client.status(&gw.url("/g"), &user).await, 200, "{store}");
        }
        gw.rewrite(&config(
            store,
            &up.url(),
            &routes.replace("\"2s\"", "\"4s\""),
        ));
        let (k, v) = auth();
        let r = client
            .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let usage = client
            .get(&gw.admin("/admin/usage?route=g&key=ann"), &[(k, &v)])
            .await;
        assert_eq!(
            usage.json()["limits"][0]["used"],
            2,
            "{store}: {}",
            usage.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
        let early = client.status(&gw.url("/g"), &user).await;
        assert_eq!(early, 429, "{store}: the old rate would have let it in");
        gw.stop().await;
    }
}
