//! One limiter core: `POST /v1/decisions` and the proxy path answer the same for the same route
//! and history (README, "Admin listener": "deciding each key exactly as the proxy path would"). One table
//! of cases runs both ways, each way on gateways of its own: the history goes through the way
//! under test, then one probe is compared with the table and with the other way: allowed or not,
//! the wait, the remaining quota, the decision label and the metrics it moved. The two ways of
//! asking, and what one probe moved, are in `support/one_core.rs`.

mod support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::observe::{decisions, units};
use support::one_core::{run, seen, Case, Seen, Side, Way};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

fn cases() -> Vec<Case> {
    let reject = "";
    let shadow = "on_exceed = \"shadow\"";
    let block = "on_exceed = \"block\"\nblock_for = \"2m\"";
    let minute = Some((58_000, 60_000));
    let block_time = Some((119_000, 120_000));
    vec![
        Case {
            route: "allowed",
            mode: reject,
            limit: 3,
            window: "1m",
            store_down: false,
            history: 1,
            expect: seen(true, None, Some(1), "allowed"),
            retry_ms: None,
        },
        Case {
            route: "rejected",
            mode: reject,
            limit: 1,
            window: "1m",
            store_down: false,
            history: 1,
            expect: seen(false, Some(60), Some(0), "rejected"),
            retry_ms: minute,
        },
        Case {
            route: "deny-cache-hit",
            mode: reject,
            limit: 1,
            window: "1m",
            store_down: false,
            history: 2,
            expect: Seen {
                deny_cache_hits: 1,
                ..seen(false, Some(60), Some(0), "rejected")
            },
            retry_ms: minute,
        },
        Case {
            route: "shadow-over",
            mode: shadow,
            limit: 1,
            window: "1m",
            store_down: false,
            history: 1,
            expect: seen(true, None, Some(0), "shadow_rejected"),
            retry_ms: None,
        },
        Case {
            route: "block-start",
            mode: block,
            limit: 1,
            window: "1m",
            store_down: false,
            history: 1,
            expect: seen(false, Some(120), Some(0), "rejected"),
            retry_ms: block_time,
        },
        Case {
            route: "block-during",
            mode: block,
            limit: 1,
            window: "1m",
            store_down: false,
            history: 2,
            expect: Seen {
                deny_cache_hits: 1,
                ..seen(false, Some(120), Some(0), "blocked")
            },
            retry_ms: block_time,
        },
        Case {
            route: "down-allow",
            mode: "on_error = \"allow\"",
            limit: 1,
            window: "1m",
            store_down: true,
            history: 0,
            expect: Seen {
                store_errors: 1,
                ..seen(true, None, None, "store_error_allowed")
            },
            retry_ms: None,
        },
        Case {
            route: "down-deny",
            mode: "on_error = \"deny\"",
            limit: 1,
            window: "1m",
            store_down: true,
            history: 0,
            expect: Seen {
                store_errors: 1,
                ..seen(false, Some(1), None, "store_error_denied")
            },
            retry_ms: Some((999, 1000)),
        },
        Case {
            route: "down-local-allowed",
            mode: "on_error = \"local\"",
            limit: 2,
            window: "1m",
            store_down: true,
            history: 0,
            expect: Seen {
                store_errors: 1,
                ..seen(true, None, Some(1), "allowed")
            },
            retry_ms: None,
        },
        Case {
            route: "down-local-rejected",
            mode: "on_error = \"local\"",
            limit: 1,
            window: "1m",
            store_down: true,
            history: 1,
            expect: Seen {
                store_errors: 1,
                ..seen(false, Some(60), Some(0), "rejected")
            },
            retry_ms: minute,
        },
    ]
}

/// Every case's route, at `/<route>/*`, keyed by `X-User`.
fn routes(cases: &[Case]) -> String {
    cases
        .iter()
        .map(|c| {
            format!(
                "[[routes]]\nname = \"{0}\"\npath = \"/{0}/*\"\nupstream = \"up\"\nkey = [\"header:X-User\"]\n{1}\n\
                 [[routes.limits]]\nname = \"l\"\nlimit = {2}\nwindow = \"{3}\"\n",
                c.route, c.mode, c.limit, c.window
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_api_and_the_proxy_decide_alike() {
    let live = RedisServer::start_async().await;
    let mut doomed = RedisServer::start_async().await;
    let up = upstream::start().await;
    let cases = cases();
    let routes = routes(&cases);
    let cfg = |redis: &RedisServer, prefix: &str| {
        let store = format!(
            "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"200ms\"",
            redis.url()
        );
        config(&store, &up.url(), &routes)
    };
    let mut sides = Vec::new();
    for way in [Way::Proxy, Way::Batch] {
        let prefix = unique_prefix("core");
        sides.push(Side {
            way,
            live: gateway::start(&cfg(&live, &prefix)).await,
            down: gateway::start(&cfg(&doomed, &prefix)).await,
            prefix,
        });
    }
    doomed.kill();

    let client = HttpClient::default();
    for case in &cases {
        let mut answers = Vec::new();
        for side in &sides {
            let (seen, retry_ms) = run(side, &client, case).await;
            let expect = case.expect.clone();
            assert_eq!(seen, expect, "{} through the {:?}", case.route, side.way);
            match (case.retry_ms, retry_ms) {
                (None, None) => {}
                (Some((above, at_most)), Some(ms)) => assert!(
                    above < ms && ms <= at_most,
                    "{} through the {:?}: told to wait {ms} ms",
                    case.route,
                    side.way
                ),
                (want, got) => panic!("{}: wait {got:?}, expected {want:?}", case.route),
            }
            answers.push(retry_ms);
        }
        if let [Some(proxy), Some(batch)] = answers[..] {
            assert!(
                proxy.abs_diff(batch) <= 1_000,
                "{}: the proxy waits {proxy} ms, the batch {batch} ms",
                case.route
            );
        }
    }

    // Honest counting: on the live Redis, each way's allowed decisions are its recorded units.
    for side in &sides {
        let metrics = client.get(&side.live.admin("/metrics"), &[]).await.body;
        let allowed: u64 = cases
            .iter()
            .filter(|c| !c.store_down)
            .map(|c| decisions(&metrics, c.route)[0])
            .sum();
        assert_eq!(
            allowed as i64,
            units(&live, &side.prefix),
            "{:?}: /metrics and Redis disagree",
            side.way
        );
    }
}
