//! Where the lane's own connection goes and how it is (re)opened ([`maintain`]): in the
//! background, never in a caller's way (while it is down, calls go through the client
//! library, which fails fast), with a short backoff between attempts.
//!
//! The server is the one the lane's client-library node serves: a cluster node's address, the
//! URL's server, or for Sentinel the master that node's client is connected to now (checked
//! every [`CHECK_EVERY`]: after a failover, the connection follows the client to the new
//! master). A connection the server closed while idle (a restart) is found at the same check
//! and opened again. The handshake is the URL's: `AUTH` with its username and password, `SELECT` of its
//! database.

use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::config::{Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::direct_io::Link;
use super::node::Node;
use super::resp::{parse, push_array, push_auth, push_bulk, Reply};

/// The first pause after a failed attempt to connect; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between two attempts to connect.
const MAX_BACKOFF: Duration = Duration::from_millis(500);
/// The most one attempt to connect and authenticate may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a connected link checks that its server has not closed it while idle and (with
/// Sentinel) is still the one to use: a non-blocking read, no system call while nothing came.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The name of every lane's connection (`CLIENT SETNAME`).
pub const CONNECTION_NAME: &str = "slidegate-lane";

/// Where and how to connect.
pub struct Endpoint {
    node: Node,
    username: Option<String>,
    password: Option<String>,
    database: Option<u8>,
    /// Sentinel: the server is whichever master the node's client uses now.
    follows_client: bool,
}

impl Endpoint {
    /// The endpoint of `node`; `None` where the lane keeps the client library's connection
    /// (TLS, Unix sockets).
    pub fn of(node: &Node) -> Option<Endpoint> {
        let config = node.client.client_config();
        if config.tls.is_some() {
            return None;
        }
        let follows_client = match &config.server {
            ServerConfig::Centralized { .. } | ServerConfig::Clustered { .. } => false,
            ServerConfig::Sentinel { .. } => true,
            #[allow(unreachable_patterns)]
            _ => return None,
        };
        Some(Endpoint {
            node: node.clone(),
            username: config.username,
            password: config.password,
            database: config.database.filter(|_| node.server.is_none()),
            follows_client,
        })
    }

    /// The server to connect to now (`None`: not known yet).
    fn server(&self) -> Option<Server> {
        if let Some(server) = &self.node.server {
            return Some(server.clone());
        }
        if !self.follows_client {
            if let ServerConfig::Centralized { server } = self.node.client.client_config().server {
                return Some(server);
            }
        }
        self.node.client.active_connections().into_iter().next()
    }

    /// Opens and authenticates a connection to `server`.
    async fn dial(&self, server: &Server) -> Result<TcpStream, String> {
        let mut stream = TcpStream::connect((&*server.host, server.port))
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut hello = Vec::new();
        let mut replies = 0;
        if let Some(password) = &self.password {
            push_auth(&mut hello, self.username.as_deref(), password);
            replies += 1;
        }
        // AUTH first (an unauthenticated `CLIENT SETNAME` is refused); the name lets
        // `CLIENT LIST` tell the lanes' connections from the library's.
        push_array(&mut hello, 3);
        push_bulk(&mut hello, b"CLIENT");
        push_bulk(&mut hello, b"SETNAME");
        push_bulk(&mut hello, CONNECTION_NAME.as_bytes());
        replies += 1;
        if let Some(db) = self.database.filter(|&db| db != 0) {
            push_array(&mut hello, 2);
            push_bulk(&mut hello, b"SELECT");
            push_bulk(&mut hello, db.to_string().as_bytes());
            replies += 1;
        }
        exchange(&mut stream, &hello, replies).await?;
        Ok(stream)
    }
}

/// Writes `commands` (`replies` of them) on `stream` and reads their replies: the last one, or
/// the first error a server answered.
pub async fn exchange(
    stream: &mut TcpStream,
    commands: &[u8],
    mut replies: usize,
) -> Result<Reply, String> {
    stream
        .write_all(commands)
        .await
        .map_err(|e| e.to_string())?;
    let mut input = Vec::new();
    loop {
        match parse(&input).map_err(|e| e.0)? {
            Some((Reply::Error(e), _)) => return Err(e),
            Some((reply, used)) => {
                input.drain(..used);
                replies -= 1;
                if replies == 0 {
                    return Ok(reply);
                }
            }
            None => {
                let read = stream.read_buf(&mut input).await;
                if read.map_err(|e| e.to_string())? == 0 {
                    return Err("the server closed the connection".into());
                }
            }
        }
    }
}

/// Keeps `link` connected to `endpoint` until the link is dropped: opens a connection whenever
/// it has none (told by `dialer`), and for Sentinel closes one whose server is no longer the
/// master the client uses.
pub async fn maintain(link: Weak<Link>, dialer: Arc<Notify>, endpoint: Endpoint) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(strong) = link.upgrade() else {
            return;
        };
        if let Some(connected) = strong.connected_to() {
            if endpoint.follows_client && endpoint.server().is_some_and(|now| now != connected) {
                strong.close("the sentinels' master changed");
                continue;
            }
            drop(strong);
            let _ = tokio::time::timeout(CHECK_EVERY, dialer.notified()).await;
            // a server that closed the idle connection (a restart) is redialed now, not when
            // a call finds the connection dead
            if let Some(strong) = link.upgrade() {
                strong.check_idle();
            }
            continue;
        }
        drop(strong);
        let dialed = match endpoint.server() {
            Some(server) => tokio::time::timeout(DIAL_TIMEOUT, endpoint.dial(&server))
                .await
                .unwrap_or_else(|_| Err("timed out".into()))
                .map(|stream| (stream, server)),
            None => Err("no server known yet".into()),
        };
        match (dialed, link.upgrade()) {
            (_, None) => return,
            (Ok((stream, server)), Some(link)) => {
                link.install(stream, server);
                backoff = MIN_BACKOFF;
            }
            (Err(why), Some(_)) => {
                tracing::debug!(%why, "the lane's connection to Redis did not open");
                // A call that finds the library's client on another server cuts the pause.
                let _ = tokio::time::timeout(backoff, dialer.notified()).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
