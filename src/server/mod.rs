//! The proxy listener: accepts connections (at most `server.max_connections` open at once;
//! beyond, new ones wait in the kernel's listen backlog instead of failing), serves HTTP/1.1
//! and h2 on each with hyper, cuts clients that do not send a request head within
//! `server.header_read_timeout`, and on shutdown stops accepting and lets in-flight requests
//! finish within `server.shutdown_grace`.
//!
//! Differences from hyper-util's auto (h1/h2) builder: the protocol is told from the first bytes
//! under the same `header_read_timeout` as a request head (a connection that sends nothing is
//! cut, not parked forever holding a `max_connections` slot), and each read goes straight to the
//! socket, not through a rewind buffer. hyper's own refusals of unparsable requests are
//! re-written as the gateway's problem responses ([`refusals`]).

mod refusals;

use refusals::Refusals;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::config::ServerConfig;
use crate::gateway::Gateway;
use crate::proxy::Peer;

/// Binds `n` listening sockets on `addr` (with `SO_REUSEPORT` when more than one, so the kernel
/// spreads connections over the workers), as std listeners a worker's runtime takes over.
pub fn bind_listeners(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let bind = |addr: SocketAddr, shared: bool| -> std::io::Result<std::net::TcpListener> {
        let socket = match addr {
            SocketAddr::V4(_) => {
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?
            }
            SocketAddr::V6(_) => {
                socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)?
            }
        };
        socket.set_reuse_address(true)?;
        #[cfg(unix)]
        if shared {
            socket.set_reuse_port(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    let first = bind(addr, n > 1)?;
    // Port 0 picks a port once; the other workers share it.
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..n {
        listeners.push(bind(addr, true)?);
    }
    Ok(listeners)
}

/// Serves `gateway` on `listener` (taken over by the runtime this runs on) until `stopped`
/// turns true.
pub async fn serve(
    listener: std::net::TcpListener,
    gateway: Gateway,
    settings: ServerConfig,
    mut stopped: watch::Receiver<bool>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve the proxy listener");
            return;
        }
    };
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        // hyper's own bounds sit above the gateway's, which answer 431 with a problem body;
        // beyond them hyper refuses by itself (re-written as a problem body too).
        .max_headers(settings.max_headers * 2 + 16)
        .max_buf_size((settings.max_header_bytes * 2).max(16 * 1024));
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = stopped.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        // One Arc per connection, cloned per request; the future is not boxed.
        let connection_state = Arc::new((gateway.clone(), Peer::new(peer.ip())));
        let per_connection = hyper::service::service_fn(move |req: Request<Incoming>| {
            let state = connection_state.clone();
            async move { Ok::<_, Infallible>(state.0.handle(&state.1, req).await) }
        });
        let (http1, http2, watcher) = (http1.clone(), http2.clone(), graceful.watcher());
        let header_read_timeout = settings.header_read_timeout;
        let mut stopping = stopped.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let protocol = tokio::select! {
                protocol = sniff(&stream, header_read_timeout) => protocol,
                // A connection that has sent nothing when the drain starts has no request to
                // finish (a client's spare pooled connection): the drain does not wait for it.
                _ = stopping.wait_for(|stop| *stop) => None,
            };
            let Some(protocol) = protocol else {
                return;
            };
            let io = TokioIo::new(Refusals::new(stream));
            let served = match protocol {
                Protocol::Http1 => {
                    watcher
                        .watch(http1.serve_connection(io, per_connection))
                        .await
                }
                Protocol::Http2 => {
                    watcher
                        .watch(http2.serve_connection(io, per_connection))
                        .await
                }
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(settings.shutdown_grace) => tracing::warn!("shutdown grace elapsed with requests still in flight"),
    }
}

/// The protocol a connection speaks.
enum Protocol {
    Http1,
    Http2,
}

/// Tells h2 (prior knowledge: it starts with the `PRI * HTTP/2.0` preface) from HTTP/1 by the
/// first bytes, waiting for them at most `within`; `None` when none came or the client left.
async fn sniff(stream: &tokio::net::TcpStream, within: Duration) -> Option<Protocol> {
    const PREFACE: &[u8] = b"PRI ";
    let look = async {
        let mut first = [0u8; 4];
        loop {
            let n = stream.peek(&mut first).await.ok()?;
            if n == 0 {
                return None;
            }
            if !PREFACE.starts_with(&first[..n]) {
                return Some(Protocol::Http1);
            }
            if n == PREFACE.len() {
                return Some(Protocol::Http2);
            }
            // A preface cut short: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(within, look).await.ok().flatten()
}

/// Raises this process's soft limit of open descriptors to the hard limit, so a connection
/// flood meets `max_connections` before it meets `EMFILE`.
pub fn raise_open_file_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            let wanted = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) != 0 {
                tracing::warn!("could not raise the open-file limit to {}", limit.rlim_max);
            }
        }
    }
}
