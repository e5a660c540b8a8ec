//! A Sentinel master that hangs without closing its connections ([`SentinelWatch`]). The client
//! library asks the sentinels for the master only when its connection fails, and a stopped or
//! wedged process's connections never do: after the sentinels promote a replica, the client
//! (and the lanes, which follow it) would stay on the old master until the sentinels demote it,
//! seconds or minutes later, every decision meanwhile going to `on_error`, and the charges the
//! old master took once it ran again lost with its demotion. So while calls to a sentinel's
//! master fail, the sentinels are asked which master they name (one question at a time, at
//! most one per [`ASK_PAUSE`]); when it is another server than the client's, the client
//! reconnects, through the sentinels, to it, and the lanes follow within their check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::config::{Server, ServerConfig};
use tokio::net::TcpStream;
use tokio::runtime::Handle;

use super::direct_dial::exchange;
use super::node::Node;
use super::resp::{push_array, push_auth, push_bulk, Reply};

/// The shortest time between two questions to the sentinels.
const ASK_PAUSE: Duration = Duration::from_millis(250);
/// The most one sentinel may take to answer (connect, authenticate, answer).
const SENTINEL_WAIT: Duration = Duration::from_millis(250);
/// The most the client's reconnection is waited for.
const RECONNECT_WAIT: Duration = Duration::from_secs(2);

/// Asks the sentinels which master they name after a failed call, and moves the client there.
pub struct SentinelWatch {
    hosts: Vec<Server>,
    service: String,
    username: Option<String>,
    password: Option<String>,
    asking: AtomicBool,
    last: Mutex<Option<Instant>>,
}

impl SentinelWatch {
    /// The watch of `node`, when its client follows sentinels.
    pub fn of(node: &Node) -> Option<Arc<SentinelWatch>> {
        let config = node.client.client_config();
        let ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } = config.server
        else {
            return None;
        };
        Some(Arc::new(SentinelWatch {
            hosts,
            service: service_name,
            username: config.username,
            password: config.password,
            asking: AtomicBool::new(false),
            last: Mutex::new(None),
        }))
    }

    /// A call to `node` failed on its connection or timed out: unless a question is under way
    /// or one began less than [`ASK_PAUSE`] ago, the sentinels are asked, on `handle`.
    pub fn after_failure(self: &Arc<Self>, node: &Node, handle: &Handle) {
        if !self.claim() {
            return;
        }
        let (watch, node) = (self.clone(), node.clone());
        handle.spawn(async move {
            watch.follow(&node).await;
            watch.asking.store(false, Ordering::Release);
        });
    }

    fn claim(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < ASK_PAUSE) {
            return false;
        }
        if self.asking.swap(true, Ordering::AcqRel) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Moves `node`'s client to the master the sentinels name, when it is on another.
    async fn follow(&self, node: &Node) {
        let Some(named) = self.named_master().await else {
            return;
        };
        let on = node.client.active_connections();
        if on
            .iter()
            .any(|s| s.host == named.host && s.port == named.port)
        {
            return;
        }
        tracing::warn!(
            master = %format!("{}:{}", named.host, named.port),
            "the sentinels name another master than the one the store's connection is on (it \
             answers nothing); reconnecting"
        );
        let reconnect = node.client.force_reconnection();
        if let Ok(Err(e)) = tokio::time::timeout(RECONNECT_WAIT, reconnect).await {
            tracing::debug!(error = %e, "reconnecting to the sentinels' master failed");
        }
    }

    /// The master the first sentinel that answers names.
    async fn named_master(&self) -> Option<Server> {
        for host in &self.hosts {
            let asked = tokio::time::timeout(SENTINEL_WAIT, self.ask(host)).await;
            if let Ok(Ok(server)) = asked {
                return Some(server);
            }
        }
        None
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` of one sentinel (after `AUTH` with the store's
    /// credentials, as the client library authenticates to sentinels).
    async fn ask(&self, sentinel: &Server) -> Result<Server, String> {
        let mut stream = TcpStream::connect((&*sentinel.host, sentinel.port))
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let mut replies = 1;
        if let Some(password) = &self.password {
            push_auth(&mut out, self.username.as_deref(), password);
            replies += 1;
        }
        push_array(&mut out, 3);
        push_bulk(&mut out, b"SENTINEL");
        push_bulk(&mut out, b"GET-MASTER-ADDR-BY-NAME");
        push_bulk(&mut out, self.service.as_bytes());
        server_of(exchange(&mut stream, &out, replies).await?)
    }
}

/// The `[host, port]` a sentinel answers with.
fn server_of(reply: Reply) -> Result<Server, String> {
    let Reply::Array(Some(parts)) = reply else {
        return Err(format!("not a master's address: {reply:?}"));
    };
    let text = |r: &Reply| match r {
        Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let (Some(host), Some(port)) = (parts.first().and_then(text), parts.get(1).and_then(text))
    else {
        return Err("not a master's address".into());
    };
    let port = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port"))?;
    Ok(Server::new(host, port))
}
