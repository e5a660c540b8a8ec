//! The load: [`CLIENTS`] clients, each on a keep-alive connection of its own (a new one after a
//! drop), sending GETs to both routes as fast as [`PACE`] lets them and recording what each got.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::run::Run;
use super::{CLIENTS, CLIENT_TIMEOUT, MAX_PER_CLIENT, PACE, ROUTES, USERS};

/// What one request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// 200 with the store's rate-limit headers.
    Decided,
    /// 200 without them: forwarded on a store error.
    Open,
    /// Any other status.
    Status(u16),
    /// Refused connect, reset, or no whole answer within [`CLIENT_TIMEOUT`].
    Dropped(&'static str),
}

/// One request: when it was sent and answered, its route (an index into [`ROUTES`]) and user
/// (an index into the users of [`Keys`]), and what it got.
pub struct Rec {
    pub start: Instant,
    pub end: Instant,
    pub route: usize,
    pub user: usize,
    pub outcome: Outcome,
}

/// Who the load asks for: `users[i]` at random, the first `hot` of them `hot_share` of the time.
#[derive(Clone)]
pub struct Keys {
    pub(super) users: Arc<Vec<String>>,
    hot: usize,
    hot_share: f64,
}

impl Keys {
    /// `u0` .. `u{USERS-1}`, after the hot users given.
    pub fn new(hot: Vec<String>, hot_share: f64) -> Keys {
        let n = hot.len();
        let mut users = hot;
        users.extend((0..USERS).map(|i| format!("u{i}")));
        Keys {
            users: Arc::new(users),
            hot: n,
            hot_share,
        }
    }
}

/// A running load: [`CLIENTS`] tasks until [`Load::stop`] (or a hard bound of 60 s).
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Rec>>>,
    keys: Keys,
}

impl Load {
    pub fn start(addr: SocketAddr, keys: Keys) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let until = Instant::now() + Duration::from_secs(60);
        let tasks = (0..CLIENTS)
            .map(|c| tokio::spawn(client(c, addr, keys.clone(), stop.clone(), until)))
            .collect();
        Load { stop, tasks, keys }
    }

    pub async fn stop(self) -> Run {
        self.stop.store(true, Ordering::Relaxed);
        let mut records = Vec::new();
        for t in self.tasks {
            records.extend(t.await.expect("a load client"));
        }
        records.sort_by_key(|r| r.start);
        Run {
            records,
            keys: self.keys,
        }
    }
}

async fn client(
    c: usize,
    addr: SocketAddr,
    keys: Keys,
    stop: Arc<AtomicBool>,
    until: Instant,
) -> Vec<Rec> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut sender: Option<SendRequest<Empty<Bytes>>> = None;
    let mut records = Vec::new();
    let mut n = c;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until && records.len() < MAX_PER_CLIENT
    {
        let route = n % 2;
        n += 1;
        let hot = keys.hot > 0 && (next() % 1000) as f64 / 1000.0 < keys.hot_share;
        let user = if hot {
            (next() % keys.hot as u64) as usize
        } else {
            keys.hot + (next() % USERS as u64) as usize
        };
        let start = Instant::now();
        let outcome = tokio::time::timeout(
            CLIENT_TIMEOUT,
            request(&mut sender, addr, ROUTES[route], &keys.users[user]),
        )
        .await
        .unwrap_or(Err("timeout"));
        let outcome = outcome.unwrap_or_else(|why| {
            sender = None;
            Outcome::Dropped(why)
        });
        records.push(Rec {
            start,
            end: Instant::now(),
            route,
            user,
            outcome,
        });
        tokio::time::sleep(PACE).await;
    }
    records
}

/// One GET on the client's connection (a new one when it has none, or the server ended it
/// between requests), read to the end.
async fn request(
    sender: &mut Option<SendRequest<Empty<Bytes>>>,
    addr: SocketAddr,
    route: &str,
    user: &str,
) -> Result<Outcome, &'static str> {
    let usable = match sender.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !usable {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|_| "connect")?;
        let _ = stream.set_nodelay(true);
        let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| "handshake")?;
        tokio::spawn(conn);
        *sender = Some(s);
    }
    let s = sender.as_mut().expect("a connection");
    let req = http::Request::get(format!("/{route}/x"))
        .header(http::header::HOST, addr.to_string())
        .header("x-user", user)
        .body(Empty::new())
        .expect("a request");
    let response = s.send_request(req).await.map_err(|_| "reset")?;
    let status = response.status().as_u16();
    let decided = response.headers().contains_key("ratelimit");
    response
        .into_body()
        .collect()
        .await
        .map_err(|_| "reset in body")?;
    Ok(match status {
        200 if decided => Outcome::Decided,
        200 => Outcome::Open,
        s => Outcome::Status(s),
    })
}
