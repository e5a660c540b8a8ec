//! The outcome model through the rate-limit layer itself (the gateway's request path is this
//! layer in front of its proxy), with clients that leave at random moments. The inner service
//! plays a forwarding proxy: it tracks each attempt's [`Attempt`], sends it upstream when the
//! trace says so (the upstream "acts" on it from then), and answers with the status the trace
//! gives, or with none (the proxy's own 504 after a timeout). A client leaving drops the layer's
//! future, as hyper does. Every decision must match the plain model: an attempt the upstream
//! never saw is refunded, one it saw is settled by the status that arrives after its client
//! left and kept (as no answer) when none does, a reset forgives the answered attempts but not
//! the ones in flight or kept without an answer; so the upstream never acts on more than `LIMIT`
//! counted attempts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use slidegate::layer::{Attempt, ClientAddr, RequestBody, RouteBuilder};
use slidegate::RateLimitLayer;
use tokio::sync::oneshot;
use tower::{Layer, ServiceExt};

const LIMIT: usize = 3;

/// What the trace does next.
#[derive(Debug, Clone)]
enum Op {
    /// A new attempt.
    Start,
    /// Something happens to the `pick`-th attempt still open (modulo their number).
    Act { pick: usize, event: Event },
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// The proxy hands the request to the upstream connection.
    Send,
    /// The upstream answers (401 counts, 200 resets, 204 neither).
    Answer(u16),
    /// No answer within the upstream's timeout: the proxy's own 504.
    NoStatus,
    /// The client leaves.
    Leave,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let event = prop_oneof![
        3 => Just(Event::Send),
        3 => Just(Event::Answer(401)),
        1 => Just(Event::Answer(200)),
        1 => Just(Event::Answer(204)),
        1 => Just(Event::NoStatus),
        3 => Just(Event::Leave),
    ];
    let op = prop_oneof![
        2 => Just(Op::Start),
        5 => (0usize..8, event).prop_map(|(pick, event)| Op::Act { pick, event }),
    ];
    proptest::collection::vec(op, 1..60)
}

/// The upstream side of one attempt, waiting in the inner service for the trace.
struct Waiting {
    go: oneshot::Receiver<()>,
    answer: oneshot::Receiver<Option<u16>>,
}

/// One admitted attempt as the test drives it.
struct Open {
    id: u64,
    client: Option<tokio::task::JoinHandle<()>>,
    go: Option<oneshot::Sender<()>>,
    answer: Option<oneshot::Sender<Option<u16>>>,
    sent: bool,
}

/// The model: per attempt that counts (the upstream may act on it, or did and it counted),
/// whether it was answered.
#[derive(Default)]
struct Model {
    counting: Vec<(u64, bool)>,
}

impl Model {
    fn admit(&mut self, id: u64) -> bool {
        let fits = self.counting.len() < LIMIT;
        if fits {
            self.counting.push((id, false));
        }
        fits
    }

    fn refund(&mut self, id: u64) {
        self.counting.retain(|e| e.0 != id);
    }

    fn keep(&mut self, id: u64) {
        for e in self.counting.iter_mut().filter(|e| e.0 == id) {
            e.1 = true;
        }
    }

    /// Settles by a status (with `count_status = [401]`, `reset_status = [200]`).
    fn settle(&mut self, id: u64, status: u16) {
        match status {
            401 => self.keep(id),
            200 => self.counting.retain(|e| e.0 != id && !e.1),
            _ => self.refund(id),
        }
    }
}

/// Lets every task that can run do so (one thread: the order is deterministic).
async fn settle_down() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

async fn follows_the_model(ops: &[Op]) -> Result<(), TestCaseError> {
    let rule = toml::toml! {
        name = "failures"
        limit = 3
        window = "1h"
        count_status = [401]
        reset_status = [200]
    };
    let layer = RateLimitLayer::builder()
        .memory()
        .route(RouteBuilder::new("login", "/login").limit_table(rule))
        .build()
        .await
        .unwrap();
    let waiting: Arc<Mutex<HashMap<u64, Waiting>>> = Arc::default();
    let upstream = waiting.clone();
    let inner = tower::service_fn(move |req: http::Request<RequestBody<Full<Bytes>>>| {
        let attempt = req.extensions().get::<Attempt>().cloned().unwrap();
        attempt.track();
        let id: u64 = req.headers()["x-attempt"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let Waiting { go, answer } = upstream.lock().unwrap().remove(&id).unwrap();
        async move {
            let status = match go.await {
                Ok(()) => {
                    attempt.sent();
                    match answer.await {
                        Ok(Some(status)) => {
                            attempt.answered(status);
                            status
                        }
                        _ => 504,
                    }
                }
                Err(_) => 504,
            };
            let mut response = http::Response::new(Full::new(Bytes::new()));
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    let service = layer.layer(inner);
    let mut model = Model::default();
    let mut open: Vec<Open> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let id = n as u64;
        match op {
            Op::Start => {
                let (go, go_rx) = oneshot::channel();
                let (answer, answer_rx) = oneshot::channel();
                waiting.lock().unwrap().insert(
                    id,
                    Waiting {
                        go: go_rx,
                        answer: answer_rx,
                    },
                );
                let mut req = http::Request::post("/login")
                    .header("x-attempt", id.to_string())
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                req.extensions_mut()
                    .insert(ClientAddr(IpAddr::from([192, 0, 2, 7])));
                let service = service.clone();
                let client = tokio::spawn(async move {
                    service.oneshot(req).await.unwrap();
                });
                settle_down().await;
                let called = !waiting.lock().unwrap().contains_key(&id);
                prop_assert_eq!(called, model.admit(id), "attempt {} admitted", id);
                if called {
                    open.push(Open {
                        id,
                        client: Some(client),
                        go: Some(go),
                        answer: Some(answer),
                        sent: false,
                    });
                } else {
                    waiting.lock().unwrap().remove(&id);
                }
            }
            Op::Act { pick, event } => {
                if open.is_empty() {
                    continue;
                }
                let i = pick % open.len();
                let a = &mut open[i];
                match event {
                    Event::Send if !a.sent => {
                        a.go.take().unwrap().send(()).unwrap();
                        a.sent = true;
                    }
                    Event::Answer(status) if a.sent => {
                        let _ = a.answer.take().unwrap().send(Some(*status));
                        model.settle(a.id, *status);
                        open.remove(i);
                    }
                    Event::NoStatus if a.sent => {
                        let _ = a.answer.take().unwrap().send(None);
                        // the client gets the proxy's 504, a status like any other; with
                        // the client gone nothing the upstream said arrived: the attempt
                        // stays counted but as no answer, which no reset forgives (it stays
                        // in the model as it was admitted)
                        if a.client.is_some() {
                            model.refund(a.id);
                        }
                        open.remove(i);
                    }
                    Event::Leave if a.client.is_some() => {
                        a.client.take().unwrap().abort();
                        if !a.sent {
                            // the upstream never saw it: refunded at once
                            model.refund(a.id);
                            open.remove(i);
                        }
                    }
                    _ => continue,
                }
                settle_down().await;
            }
        }
        prop_assert!(model.counting.len() <= LIMIT);
    }
    Ok(())
}

#[test]
fn clients_that_leave_at_random_moments_never_let_more_than_the_limit_through() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 256,
        max_shrink_iters: 512,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&ops(), |ops| rt.block_on(follows_the_model(&ops)))
        .unwrap_or_else(|e| panic!("{e}"));
}
