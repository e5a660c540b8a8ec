//! A gRPC load generator for slidegate's rate-limit service (`bench/run.sh`'s `rls` target):
//! `ShouldRateLimit` calls with one descriptor each, `KEY=<random one of N values>`, over a few
//! HTTP/2 connections with many calls in flight on each, as Envoy sends them. Closed loop (as
//! fast as answers come) or paced at a total rate, where each call's latency counts from when it
//! was due, so a stalled answer is not hidden by the calls that wait behind it.
//!
//! It speaks gRPC on the `h2` crate itself (a length-prefixed protobuf message, `grpc-status` in
//! the trailers) rather than through a full gRPC client: on a machine whose cores it shares with
//! what it measures, its own CPU per call must stay small (a tonic channel adds a task and a
//! queue per call).
//!
//! ```text
//! rls_load ADDR SECONDS [--domain D] [--key K] [--keys N] [--conns C] [--in-flight F] [--rate R]
//! ```
//!
//! Prints one line: `decisions=N dps=X p50_ms=X p99_ms=X allowed=N denied=N errors=N`.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;

/// The method's path.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What to send, and how.
#[derive(Clone)]
struct Load {
    domain: String,
    key: String,
    keys: u64,
    conns: usize,
    in_flight: usize,
    /// Calls a second, all callers together; 0 for as fast as answers come.
    rate: f64,
    seconds: f64,
}

/// What one caller saw.
#[derive(Default)]
struct Seen {
    latencies_us: Vec<u32>,
    allowed: u64,
    denied: u64,
    errors: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: rls_load ADDR SECONDS [--domain D] [--key K] [--keys N] [--conns C] [--in-flight F] [--rate R]";
    let addr = args.next().expect(usage);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let mut load = Load {
        domain: "bench".into(),
        key: "user".into(),
        keys: 100_000,
        conns: 4,
        in_flight: 16,
        rate: 0.0,
        seconds,
    };
    while let Some(flag) = args.next() {
        let value = args.next().expect(usage);
        match flag.as_str() {
            "--domain" => load.domain = value,
            "--key" => load.key = value,
            "--keys" => load.keys = value.parse().expect(usage),
            "--conns" => load.conns = value.parse().expect(usage),
            "--in-flight" => load.in_flight = value.parse().expect(usage),
            "--rate" => load.rate = value.parse().expect(usage),
            _ => panic!("{usage}"),
        }
    }
    // Two threads at most: the generator must leave the machine's cores to what it measures.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(addr, load));
}

async fn run(addr: String, load: Load) {
    let mut senders = Vec::with_capacity(load.conns);
    for _ in 0..load.conns {
        let tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("the rate-limit service accepts a connection");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        let (sender, connection) = h2::client::handshake(tcp)
            .await
            .expect("an HTTP/2 handshake");
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("connection ended: {e}");
            }
        });
        senders.push(sender);
    }
    let callers = load.conns * load.in_flight;
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(load.seconds);
    let mut tasks = Vec::with_capacity(callers);
    for i in 0..callers {
        let sender = senders[i % load.conns].clone();
        tasks.push(tokio::spawn(call_until(
            sender,
            load.clone(),
            i,
            callers,
            started,
            until,
        )));
    }
    let mut all = Seen::default();
    for t in tasks {
        let seen = t.await.expect("a caller finishes");
        all.latencies_us.extend(seen.latencies_us);
        all.allowed += seen.allowed;
        all.denied += seen.denied;
        all.errors += seen.errors;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.latencies_us.sort_unstable();
    let n = all.latencies_us.len();
    let at = |q: f64| match n {
        0 => 0.0,
        _ => all.latencies_us[((n as f64 * q) as usize).min(n - 1)] as f64 / 1000.0,
    };
    println!(
        "decisions={} dps={:.1} p50_ms={:.3} p99_ms={:.3} allowed={} denied={} errors={}",
        all.allowed + all.denied,
        (all.allowed + all.denied) as f64 / elapsed,
        at(0.50),
        at(0.99),
        all.allowed,
        all.denied,
        all.errors
    );
}

/// One caller: a call at a time until `until`, each due `callers / rate` after the last (or at
/// once, unpaced).
async fn call_until(
    sender: h2::client::SendRequest<bytes::Bytes>,
    load: Load,
    index: usize,
    callers: usize,
    started: Instant,
    until: Instant,
) -> Seen {
    let mut seen = Seen::default();
    let mut state =
        0x9e37_79b9_7f4a_7c15u64 ^ (index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let interval = (load.rate > 0.0).then(|| Duration::from_secs_f64(callers as f64 / load.rate));
    // Paced callers start spread over one interval, not all at once.
    let offset = interval.map_or(Duration::ZERO, |i| i.mul_f64(index as f64 / callers as f64));
    let mut next = started + offset;
    loop {
        // When this call is due: its turn when paced, now when not.
        let due = match interval {
            Some(i) => {
                tokio::time::sleep_until(next.into()).await;
                next += i;
                next - i
            }
            None => Instant::now(),
        };
        if due >= until {
            return seen;
        }
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let value = format!("u{}", state % load.keys);
        let request = RateLimitRequest {
            domain: load.domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: load.key.clone(),
                    value,
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        match call(sender.clone(), &request).await {
            Some(answer) => {
                let took = due.elapsed().as_micros().min(u32::MAX as u128) as u32;
                seen.latencies_us.push(took);
                match answer.overall_code {
                    1 => seen.allowed += 1,
                    _ => seen.denied += 1,
                }
            }
            None => seen.errors += 1,
        }
    }
}

/// One unary gRPC call: the request as one length-prefixed message, the answer's message and
/// its `grpc-status` (0) in the trailers; `None` on any failure.
async fn call(
    sender: h2::client::SendRequest<bytes::Bytes>,
    request: &RateLimitRequest,
) -> Option<RateLimitResponse> {
    let mut sender = sender.ready().await.ok()?;
    let head = http::Request::post(PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .ok()?;
    let mut framed = Vec::with_capacity(5 + request.encoded_len());
    framed.push(0);
    framed.extend_from_slice(&(request.encoded_len() as u32).to_be_bytes());
    request.encode(&mut framed).ok()?;
    let (answer, mut body) = sender.send_request(head, false).ok()?;
    body.send_data(framed.into(), true).ok()?;
    let answer = answer.await.ok()?;
    if answer.status() != http::StatusCode::OK {
        return None;
    }
    let mut recv = answer.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.ok()?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.ok()??;
    if trailers.get("grpc-status").is_none_or(|s| s != "0") || bytes.len() < 5 {
        return None;
    }
    RateLimitResponse::decode(&bytes[5..]).ok()
}
