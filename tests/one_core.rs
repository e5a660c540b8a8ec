//! One limiter core: `POST /v1/decisions` and the proxy path answer the same for the same route
//! and history (SPEC section 6: "deciding each key exactly as the proxy path would"). One table
//! of cases runs both ways, each way on gateways of its own: the history goes through the way
//! under test, then one probe is compared with the table and with the other way: allowed or not,
//! the wait, the remaining quota, the decision label and the metrics it moved.

mod support;

use http::Method;
use support::gateway::{self, config, Gateway, TOKEN};
use support::http::{HttpClient, Reply};
use support::observe::{decisions, metric, units, DECISIONS};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

/// One row of the table: a route (its own, so no two cases share state), the requests made
/// before the probe, and what the probe must get.
struct Case {
    route: &'static str,
    /// TOML lines of the route: its mode and `on_error`.
    mode: &'static str,
    limit: u64,
    window: &'static str,
    /// Whether the gateway's Redis is dead (killed after the gateway started).
    store_down: bool,
    /// Requests of the same key before the probe.
    history: usize,
    expect: Seen,
    /// The wait the probe is told, in ms, when it is not let through: `(more than, at most)`.
    retry_ms: Option<(u64, u64)>,
}

/// What a client learns from one answer, and what the answer moved in `/metrics`.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    /// Forwarded (proxy) or `"allowed": true` (batch).
    allowed: bool,
    /// `Retry-After` in whole seconds (proxy), or the batch's `retry_after_ms` rounded up.
    retry_after_s: Option<u64>,
    /// `X-RateLimit-Remaining` (proxy) or `"remaining"` (batch).
    remaining: Option<u64>,
    /// The one `slidegate_requests_total{route}` series that moved, by exactly one.
    label: &'static str,
    /// How much `slidegate_deny_cache_hits_total{route}` moved.
    deny_cache_hits: u64,
    /// How much `slidegate_store_errors_total` moved.
    store_errors: u64,
}

const fn seen(
    allowed: bool,
    retry_after_s: Option<u64>,
    remaining: Option<u64>,
    label: &'static str,
) -> Seen {
    Seen {
        allowed,
        retry_after_s,
        remaining,
        label,
        deny_cache_hits: 0,
        store_errors: 0,
    }
}

fn cases() -> Vec<Case> {
    let reject = "";
    let shadow = "on_exceed = \"shadow\"";
    let block = "on_exceed = \"block\"\nblock_for = \"30s\"";
    let minute = Some((58_000, 60_000));
    let block_time = Some((29_000, 30_000));
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
            window: "10s",
            store_down: false,
            history: 1,
            expect: seen(false, Some(30), Some(0), "rejected"),
            retry_ms: block_time,
        },
        Case {
            route: "block-during",
            mode: block,
            limit: 1,
            window: "10s",
            store_down: false,
            history: 2,
            expect: Seen {
                deny_cache_hits: 1,
                ..seen(false, Some(30), Some(0), "blocked")
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

#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Proxy,
    Batch,
}

/// One way's gateways: one on a live Redis, one on a Redis that is killed.
struct Side {
    way: Way,
    live: Gateway,
    down: Gateway,
    prefix: String,
}

impl Side {
    fn gateway(&self, case: &Case) -> &Gateway {
        if case.store_down {
            &self.down
        } else {
            &self.live
        }
    }

    /// One request of `case`'s key through this way. Returns the answer in the client's terms
    /// and, for the batch, the label its result names.
    async fn ask(&self, client: &HttpClient, case: &Case) -> (Seen, Option<u64>, Option<String>) {
        let gw = self.gateway(case);
        match self.way {
            Way::Proxy => {
                let r = client
                    .get(&gw.url(&format!("/{}/x", case.route)), &[("x-user", "u")])
                    .await;
                (proxy_seen(&r), proxy_retry_ms(&r), None)
            }
            Way::Batch => {
                let body = serde_json::json!({"route": case.route, "keys": ["u"]}).to_string();
                let auth = format!("Bearer {TOKEN}");
                let r = client
                    .send(
                        Method::POST,
                        &gw.admin("/v1/decisions"),
                        &[("authorization", &auth)],
                        &body,
                    )
                    .await;
                assert_eq!(r.status, 200, "{}", r.body);
                let result = r.json()["results"][0].clone();
                assert_eq!(result["key"], "u");
                let allowed = result["allowed"].as_bool().unwrap();
                let retry_ms = result["retry_after_ms"].as_u64().unwrap();
                assert_eq!(allowed, retry_ms == 0, "{result}");
                let seen = Seen {
                    allowed,
                    retry_after_s: (!allowed).then(|| retry_ms.div_ceil(1000).max(1)),
                    remaining: result["remaining"].as_u64(),
                    label: "",
                    deny_cache_hits: 0,
                    store_errors: 0,
                };
                let label = result["decision"].as_str().unwrap().to_string();
                (seen, (!allowed).then_some(retry_ms), Some(label))
            }
        }
    }
}

/// The proxy's answer in the client's terms: forwarded (200 from the upstream) or not (the
/// gateway's 429 or 503), `Retry-After`, `X-RateLimit-Remaining`.
fn proxy_seen(r: &Reply) -> Seen {
    let status = r.status.as_u16();
    assert!([200, 429, 503].contains(&status), "{status}: {}", r.body);
    let number = |name: &str| r.header(name).map(|v| v.parse::<u64>().unwrap());
    Seen {
        allowed: status == 200,
        retry_after_s: number("retry-after"),
        remaining: number("x-ratelimit-remaining"),
        label: "",
        deny_cache_hits: 0,
        store_errors: 0,
    }
}

/// The wait in ms a refused proxy request is told: the 429 body's `retry_after_ms`, or the
/// 503's `Retry-After` (whole seconds, no body member).
fn proxy_retry_ms(r: &Reply) -> Option<u64> {
    match r.status.as_u16() {
        429 => Some(r.json()["retry_after_ms"].as_u64().unwrap()),
        503 => r
            .header("retry-after")
            .map(|s| s.parse::<u64>().unwrap() * 1000),
        _ => None,
    }
}

/// What one probe moved in `/metrics`: the label whose series grew (exactly one, by one), the
/// deny-cache hits and the store errors.
fn moved(before: &str, after: &str, route: &str) -> (&'static str, u64, u64) {
    let (b, a) = (decisions(before, route), decisions(after, route));
    let grew: Vec<usize> = (0..DECISIONS.len()).filter(|&i| a[i] != b[i]).collect();
    assert_eq!(grew.len(), 1, "route {route}: {b:?} -> {a:?}");
    assert_eq!(a[grew[0]], b[grew[0]] + 1, "counted once: {b:?} -> {a:?}");
    let hits = |t: &str| metric(t, "slidegate_deny_cache_hits_total", &[("route", route)]) as u64;
    let errors = |t: &str| metric(t, "slidegate_store_errors_total", &[]) as u64;
    (
        DECISIONS[grew[0]],
        hits(after) - hits(before),
        errors(after) - errors(before),
    )
}

/// Runs `case` through `side`: its history, then the probe with metrics read around it.
/// Returns what the probe saw and the wait it was told in ms.
async fn run(side: &Side, client: &HttpClient, case: &Case) -> (Seen, Option<u64>) {
    for _ in 0..case.history {
        side.ask(client, case).await;
    }
    let gw = side.gateway(case);
    let before = client.get(&gw.admin("/metrics"), &[]).await.body;
    let (mut seen, retry_ms, batch_label) = side.ask(client, case).await;
    let after = client.get(&gw.admin("/metrics"), &[]).await.body;
    let (label, hits, errors) = moved(&before, &after, case.route);
    if let Some(named) = batch_label {
        assert_eq!(
            named, label,
            "{}: the batch result names its label",
            case.route
        );
    }
    seen.label = label;
    seen.deny_cache_hits = hits;
    seen.store_errors = errors;
    (seen, retry_ms)
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
                proxy.abs_diff(batch) <= 250,
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
