//! The listeners: accepts connections (at most `server.max_connections` open at once across
//! the whole process; beyond, new ones wait in the kernel's listen backlog instead of failing),
//! serves HTTP/1.1 and h2 on each ([`connection`]), and on shutdown stops accepting and lets
//! in-flight requests finish within `server.shutdown_grace`.
//!
//! Differences from hyper-util's auto (h1/h2) builder: the protocol is told from the first bytes
//! under the same `header_read_timeout` as a request head (a connection that sends nothing is
//! cut, not parked forever holding a `max_connections` slot), each read goes straight to the
//! socket, not through a rewind buffer, and a watchdog per connection cuts slow heads and idle
//! connections of both protocols. hyper's own refusals of unparsable requests are re-written as
//! the gateway's problem responses ([`refusals`]).
//!
//! The admin listener ([`serve_admin`]) serves its router on the same connections: the same
//! timeouts, and the same problem bodies for requests hyper refuses.

mod activity;
mod connection;
mod refusals;
mod reset_gate;
mod resets;
mod steering;
mod watchdog;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{watch, Notify, Semaphore};

pub use connection::{Served, MAX_CONCURRENT_STREAMS, MAX_PENDING_RESETS};
pub use resets::{RAPID_RESETS, RAPID_RESET_SPAN};

use crate::config::ServerConfig;

/// Binds `n` listening sockets on `addr` (with `SO_REUSEPORT` when more than one, so the kernel
/// spreads connections over the workers), as std listeners a worker's runtime takes over.
///
/// `SO_REUSEPORT` lets any socket of the same user join a port's group, a second gateway's
/// included, and the kernel would then split traffic between two processes without a word. So
/// the first socket binds without it: a port that any other process holds (with or without the
/// option) is refused there, `address in use`. Only once it holds the port does the first
/// socket take the option, so that this process's other workers can join it. A process that
/// joins the group later is never handed a connection ([`steering`]).
pub fn bind_listeners(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let first = bind_socket(addr, false).map_err(in_use)?;
    #[cfg(unix)]
    if n > 1 {
        first.set_reuse_port(true)?;
    }
    first.listen(1024)?;
    // Port 0 picks a port once; the other workers share it.
    let addr = first.local_addr()?.as_socket().unwrap_or(addr);
    let mut sockets = vec![first];
    for _ in 1..n {
        let socket = bind_socket(addr, true)?;
        socket.listen(1024)?;
        sockets.push(socket);
    }
    if n > 1 {
        if let Err(e) = steering::over_first(&sockets[0], n) {
            // the kernel's own choice then: a socket another program adds may take a share
            tracing::warn!(error = %e, %addr, "cannot keep the port's SO_REUSEPORT group to this gateway's sockets");
        }
    }
    Ok(sockets.into_iter().map(Into::into).collect())
}

/// Binds one socket on `addr` (not yet listening), joining the port's `SO_REUSEPORT` group
/// when `shared`.
fn bind_socket(addr: SocketAddr, shared: bool) -> std::io::Result<socket2::Socket> {
    let domain = match addr {
        SocketAddr::V4(_) => socket2::Domain::IPV4,
        SocketAddr::V6(_) => socket2::Domain::IPV6,
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    #[cfg(unix)]
    if shared {
        socket.set_reuse_port(true)?;
    }
    #[cfg(not(unix))]
    let _ = shared;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// A bind refused because the address is taken, said in words an operator searches for.
pub fn in_use(e: std::io::Error) -> std::io::Error {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "address in use: another process (a second slidegate?) already listens there",
        ),
        _ => e,
    }
}

/// Connections open on one listener, and a wake-up when the last one closes.
#[derive(Default)]
struct Open {
    count: AtomicUsize,
    closed: Notify,
}

/// Serves on `listener` (taken over by the runtime this runs on) until `stopped` turns true,
/// each connection with the service `service_for` makes for its peer (the gateway's, forward
/// auth's, the rate-limit service's). `slots` bounds the open connections of every listener of
/// the process together.
pub async fn serve<S: Served>(
    listener: std::net::TcpListener,
    service_for: impl Fn(IpAddr) -> S,
    settings: ServerConfig,
    slots: Arc<Semaphore>,
    mut stopped: watch::Receiver<bool>,
) where
    S::Future: Send + 'static,
{
    // Readiness first, then a slot, then the accept: a worker idle on its listener holds no
    // slot, so with several workers the bound is the whole process's, and a connection beyond
    // it waits in the kernel's backlog until a slot frees.
    // SAFETY: the AsyncFd owns the listener for as long as it is registered, so its
    // descriptor is neither closed nor reused while the runtime watches it.
    let registered = unsafe { tokio::io::unix::AsyncFd::register(listener) };
    let listener = match registered {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve the proxy listener");
            return;
        }
    };
    let builders = connection::Builders::new(&settings);
    let open = Arc::new(Open::default());
    loop {
        let mut ready = tokio::select! {
            ready = listener.readable() => match ready {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "a listener failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = stopped.changed() => break,
        };
        let (stream, peer) = match listener.get_ref().accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ready.clear_ready();
                continue;
            }
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let stream = match stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream))
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take an accepted connection");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service_for(peer.ip());
        let (builders, stopping, open) = (builders.clone(), stopped.clone(), open.clone());
        open.count.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let _slot = slot;
            connection::run(stream, service, builders, stopping).await;
            if open.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                open.closed.notify_waiters();
            }
        });
    }
    drop(listener);
    let drained = async {
        while open.count.load(Ordering::Acquire) > 0 {
            let closed = open.closed.notified();
            if open.count.load(Ordering::Acquire) == 0 {
                break;
            }
            closed.await;
        }
    };
    if tokio::time::timeout(settings.shutdown_grace, drained)
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed with requests still in flight");
    }
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

/// Serves the admin `router` on `listener` until `stopped`, each connection as the proxy
/// listener's are (protocol sniffed, watched, hyper's refusals re-written), the router seeing
/// the peer as axum's `ConnectInfo`. Connections still open when it stops finish on their own.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    settings: ServerConfig,
    mut stopped: watch::Receiver<bool>,
) {
    let builders = connection::Builders::new(&settings);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let service =
            tower::ServiceExt::map_request(router.clone(), move |mut req: http::Request<_>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            });
        tokio::spawn(connection::run(
            stream,
            service,
            builders.clone(),
            stopped.clone(),
        ));
    }
}
