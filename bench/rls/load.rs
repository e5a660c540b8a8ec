//! A gRPC load generator for slidegate's Envoy services (`bench/run.sh`'s `rls` and `ext-authz`
//! targets): `ShouldRateLimit` calls with one descriptor each, `KEY=<random one of N values>`,
//! or (`--service check`) ext_authz `Check` calls for `POST /otp/send` with a 200-byte JSON body
//! whose `phone` is one of N numbers, as Envoy sends them with `with_request_body` (the body as
//! `raw_body`, a stream id of its own per call); over a few HTTP/2 connections with many calls
//! in flight on each. Closed loop (as
//! fast as answers come) or paced at a total rate, where each call's latency counts from when it
//! was due, so a stalled answer is not hidden by the calls that wait behind it.
//!
//! It speaks gRPC on the `h2` crate itself (a length-prefixed protobuf message, `grpc-status` in
//! the trailers) rather than through a full gRPC client: on a machine whose cores it shares with
//! what it measures, its own CPU per call must stay small (a tonic channel adds a task and a
//! queue per call).
//!
//! ```text
//! rls_load ADDR SECONDS [--service rls|check] [--domain D] [--key K] [--keys N] [--conns C]
//!          [--in-flight F] [--rate R]
//! ```
//!
//! Prints one line: `decisions=N dps=X p50_ms=X p99_ms=X allowed=N denied=N errors=N`.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;

/// The methods' paths.
const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const CHECK_PATH: &str = "/envoy.service.auth.v3.Authorization/Check";

/// The service called.
#[derive(Clone, Copy, PartialEq)]
enum Service {
    Rls,
    Check,
}

/// What to send, and how.
#[derive(Clone)]
struct Load {
    service: Service,
    /// This run's part of every stream id (a repeated id would be answered from its first
    /// decision, uncharged).
    nonce: u64,
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
    let usage = "usage: rls_load ADDR SECONDS [--service rls|check] [--domain D] [--key K] [--keys N] [--conns C] [--in-flight F] [--rate R]";
    let addr = args.next().expect(usage);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let mut load = Load {
        service: Service::Rls,
        nonce: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
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
            "--service" => {
                load.service = match value.as_str() {
                    "rls" => Service::Rls,
                    "check" => Service::Check,
                    _ => panic!("{usage}"),
                }
            }
            "--domain" => load.domain = value,
            "--key" => load.key = value,
            "--keys" => load.keys = value.parse().expect(usage),
            "--conns" => load.conns = value.parse().expect(usage),
            "--in-flight" => load.in_flight = value.parse().expect(usage),
            "--rate" => load.rate = value.parse().expect(usage),
            _ => panic!("{usage}"),
        }
    }
    // One thread, as `wrk -t1`: the generator must leave the machine's cores to what it
    // measures. On one thread the callers' frames queue up while the connections' tasks wait
    // their turn, so each connection writes many calls at once (as Envoy's codec does in one
    // turn of its event loop) and no lock is contended.
    let runtime = tokio::runtime::Builder::new_current_thread()
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
        let n = state % load.keys;
        let answered = match load.service {
            Service::Rls => ask_rls(&sender, &load, n).await,
            Service::Check => {
                let id = format!(
                    "{}-{index}-{}",
                    load.nonce,
                    seen.allowed + seen.denied + seen.errors
                );
                ask_check(&sender, id, n).await
            }
        };
        match answered {
            Some(allowed) => {
                let took = due.elapsed().as_micros().min(u32::MAX as u128) as u32;
                seen.latencies_us.push(took);
                match allowed {
                    true => seen.allowed += 1,
                    false => seen.denied += 1,
                }
            }
            None => seen.errors += 1,
        }
    }
}

/// `ShouldRateLimit` with `KEY=u<n>`: whether the answer is OK.
async fn ask_rls(
    sender: &h2::client::SendRequest<bytes::Bytes>,
    load: &Load,
    n: u64,
) -> Option<bool> {
    let request = RateLimitRequest {
        domain: load.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: load.key.clone(),
                value: format!("u{n}"),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let answer: RateLimitResponse = call(sender.clone(), RLS_PATH, &request).await?;
    Some(answer.overall_code == 1)
}

/// `Check` of `POST /otp/send` with a 200-byte JSON body whose phone is number `n`, under the
/// stream id `id`: whether the answer is OK.
async fn ask_check(
    sender: &h2::client::SendRequest<bytes::Bytes>,
    id: String,
    n: u64,
) -> Option<bool> {
    use envoy_types::pb::envoy::config::core::v3::{address, socket_address};
    use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
    use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
        HttpRequest, Peer, Request,
    };
    use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
    let head = format!(r#"{{"phone":"+62812{n:08}","channel":"sms","locale":"id-ID","pad":""#);
    let body = format!("{head}{}\"}}", "x".repeat(200 - head.len() - 2));
    let headers = [
        ("content-type", "application/json".to_string()),
        ("content-length", body.len().to_string()),
        (":authority", "api.example.com".to_string()),
        (":method", "POST".to_string()),
        (":path", "/otp/send".to_string()),
    ];
    let source = Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: "10.0.0.1".into(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(40000)),
                ..SocketAddress::default()
            })),
        }),
        ..Peer::default()
    };
    let request = CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(source),
            request: Some(Request {
                http: Some(HttpRequest {
                    id,
                    method: "POST".into(),
                    path: "/otp/send".into(),
                    host: "api.example.com".into(),
                    headers: headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.clone()))
                        .collect(),
                    raw_body: body.into_bytes(),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    };
    let answer: CheckResponse = call(sender.clone(), CHECK_PATH, &request).await?;
    Some(answer.status.is_some_and(|s| s.code == 0))
}

/// One unary gRPC call to `path`: the request as one length-prefixed message, the answer's
/// message and its `grpc-status` (0) in the trailers; `None` on any failure.
async fn call<Q: Message, A: Message + Default>(
    sender: h2::client::SendRequest<bytes::Bytes>,
    path: &str,
    request: &Q,
) -> Option<A> {
    let mut sender = sender.ready().await.ok()?;
    let head = http::Request::post(path)
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
    A::decode(&bytes[5..]).ok()
}
