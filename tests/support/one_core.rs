//! The two ways of `tests/one_core.rs`: a row of its table, what a client learns from one answer
//! (through the proxy path or `POST /v1/decisions`), and one probe run through either way with the
//! metrics it moved read around it.

use http::Method;

use super::gateway::{Gateway, TOKEN};
use super::http::{HttpClient, Reply};
use super::observe::{decisions, metric, DECISIONS};

/// One row of the table: a route (its own, so no two cases share state), the requests made
/// before the probe, and what the probe must get.
pub struct Case {
    pub route: &'static str,
    /// TOML lines of the route: its mode and `on_error`.
    pub mode: &'static str,
    pub limit: u64,
    pub window: &'static str,
    /// Whether the gateway's Redis is dead (killed after the gateway started).
    pub store_down: bool,
    /// Requests of the same key before the probe.
    pub history: usize,
    pub expect: Seen,
    /// The wait the probe is told, in ms, when it is not let through: `(more than, at most)`.
    pub retry_ms: Option<(u64, u64)>,
}

/// What a client learns from one answer, and what the answer moved in `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Forwarded (proxy) or `"allowed": true` (batch).
    pub allowed: bool,
    /// `Retry-After` in whole seconds (proxy), or the batch's `retry_after_ms` rounded up.
    pub retry_after_s: Option<u64>,
    /// `X-RateLimit-Remaining` (proxy) or `"remaining"` (batch).
    pub remaining: Option<u64>,
    /// The one `slidegate_requests_total{route}` series that moved, by exactly one.
    pub label: &'static str,
    /// How much `slidegate_deny_cache_hits_total{route}` moved.
    pub deny_cache_hits: u64,
    /// How much `slidegate_store_errors_total` moved.
    pub store_errors: u64,
}

pub const fn seen(
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

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Way {
    Proxy,
    Batch,
}

/// One way's gateways: one on a live Redis, one on a Redis that is killed.
pub struct Side {
    pub way: Way,
    pub live: Gateway,
    pub down: Gateway,
    pub prefix: String,
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
pub async fn run(side: &Side, client: &HttpClient, case: &Case) -> (Seen, Option<u64>) {
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
