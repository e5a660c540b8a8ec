//! Following a Sentinel master to wherever the sentinels move it ([`SentinelWatch`]). The client
//! library asks the sentinels for the master only when its connection fails, and two kinds of
//! failover never fail it: a planned one (`SENTINEL FAILOVER`, an upgrade), where the old master
//! keeps answering until the sentinels demote it seconds later, and a stopped or wedged master,
//! whose connections never close. Either way the client (and the lanes, which follow it) would
//! stay on the old master, every charge it took there lost with its demotion (a second quota
//! per key meanwhile, beside instances already on the new master), or every decision sent to
//! `on_error`. So each watch listens to one sentinel's `+switch-master` announcements
//! ([`SentinelWatch::listen`]), as Sentinel's own clients do, and while calls to the master
//! fail it also asks the sentinels which master they name (one question at a time, at most one
//! per [`ASK_PAUSE`]); when the sentinels name another server than the client's, the client
//! reconnects, through the sentinels, to it, and the lanes follow within their check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::config::{Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Handle;

use super::direct_dial::exchange;
use super::node::Node;
use super::resp::{parse, push_array, push_auth, push_bulk, Reply};

/// The shortest time between two questions to the sentinels.
const ASK_PAUSE: Duration = Duration::from_millis(250);
/// The most one sentinel may take to answer (connect, authenticate, answer).
const SENTINEL_WAIT: Duration = Duration::from_millis(250);
/// The most the client's reconnection is waited for.
const RECONNECT_WAIT: Duration = Duration::from_secs(2);
/// The pause before the listener tries the sentinels again, after none would take its
/// subscription or the one that had it went away.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
/// How often a listener that heard nothing checks that its store is still there.
const LISTEN_CHECK: Duration = Duration::from_secs(1);
/// The channel on which sentinels announce a new master.
const SWITCH_MASTER: &[u8] = b"+switch-master";

/// Moves the client to the master the sentinels name: when they announce a switch, and when
/// calls fail.
pub struct SentinelWatch {
    /// The connection that follows the sentinels' master.
    node: Node,
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
            node: node.clone(),
            hosts,
            service: service_name,
            username: config.username,
            password: config.password,
            asking: AtomicBool::new(false),
            last: Mutex::new(None),
        }))
    }

    /// A call to the master failed on its connection or timed out: unless a question is under
    /// way or one began less than [`ASK_PAUSE`] ago, the sentinels are asked, on `handle`.
    pub fn after_failure(self: &Arc<Self>, handle: &Handle) {
        if !self.claim() {
            return;
        }
        let watch = self.clone();
        handle.spawn(async move {
            watch.follow().await;
            watch.asking.store(false, Ordering::Release);
        });
    }

    /// Listens, on `handle`, to the first sentinel that takes the subscription for its
    /// `+switch-master` announcements, and follows the master each one that names this service
    /// announces (checking with the sentinels, as after a failure). On every new subscription
    /// the master is checked once too: a switch may have passed while none was heard. Ends once
    /// the watch is dropped (the store with it).
    pub fn listen(self: &Arc<Self>, handle: &Handle) {
        let watch = Arc::downgrade(self);
        handle.spawn(async move {
            loop {
                let Some(hosts) = watch.upgrade().map(|w| w.hosts.clone()) else {
                    return;
                };
                for host in &hosts {
                    let Some(stream) = Self::subscribe(&watch, host).await else {
                        continue;
                    };
                    if !Self::hear(&watch, stream).await {
                        return;
                    }
                }
                tokio::time::sleep(LISTEN_RETRY).await;
            }
        });
    }

    /// A connection to `sentinel` subscribed to `+switch-master`, after a first check of the
    /// master.
    async fn subscribe(watch: &Weak<Self>, sentinel: &Server) -> Option<TcpStream> {
        let (commands, replies) = watch.upgrade()?.subscription();
        let subscribing = async {
            let mut stream = TcpStream::connect((&*sentinel.host, sentinel.port))
                .await
                .map_err(|e| e.to_string())?;
            exchange(&mut stream, &commands, replies).await?;
            Ok::<_, String>(stream)
        };
        let stream = tokio::time::timeout(SENTINEL_WAIT, subscribing)
            .await
            .ok()?
            .inspect_err(|e| tracing::debug!(sentinel = %sentinel, error = %e, "no subscription"))
            .ok()?;
        watch.upgrade()?.follow().await;
        Some(stream)
    }

    /// [`Self::authenticated`] and `SUBSCRIBE +switch-master`, and how many replies they take.
    fn subscription(&self) -> (Vec<u8>, usize) {
        let (mut out, replies) = self.authenticated();
        push_array(&mut out, 2);
        push_bulk(&mut out, b"SUBSCRIBE");
        push_bulk(&mut out, SWITCH_MASTER);
        (out, replies + 1)
    }

    /// What a connection to a sentinel opens with: `AUTH` with the store's credentials, as the
    /// client library authenticates to sentinels (nothing without a password), and how many
    /// replies that takes.
    fn authenticated(&self) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        match &self.password {
            Some(password) => {
                push_auth(&mut out, self.username.as_deref(), password);
                (out, 1)
            }
            None => (out, 0),
        }
    }

    /// Reads the sentinel's announcements until its connection ends or stops answering
    /// (`true`: listen again, to the next sentinel) or the watch is dropped (`false`). A quiet
    /// connection is asked `PING` every [`LISTEN_CHECK`]; one that has not answered by the next
    /// check (a stopped sentinel) is left.
    async fn hear(watch: &Weak<Self>, mut stream: TcpStream) -> bool {
        let mut input = Vec::new();
        let mut pinged = false;
        loop {
            loop {
                let (message, used) = match parse(&input) {
                    Ok(Some(parsed)) => parsed,
                    Ok(None) => break,
                    // not RESP: listen to the next sentinel
                    Err(_) => return true,
                };
                input.drain(..used);
                let Some(watch) = watch.upgrade() else {
                    return false;
                };
                if watch.announces_a_switch(&message) {
                    watch.follow().await;
                }
            }
            match tokio::time::timeout(LISTEN_CHECK, stream.read_buf(&mut input)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => pinged = false,
                Err(_) if watch.strong_count() == 0 => return false,
                Err(_) if pinged => return true,
                Err(_) => {
                    let mut ping = Vec::new();
                    push_array(&mut ping, 1);
                    push_bulk(&mut ping, b"PING");
                    if stream.write_all(&ping).await.is_err() {
                        return true;
                    }
                    pinged = true;
                }
            }
        }
    }

    /// Whether `message` is a `+switch-master` announcement for this service (`<name> <old ip>
    /// <old port> <new ip> <new port>`).
    fn announces_a_switch(&self, message: &Reply) -> bool {
        let Reply::Array(Some(parts)) = message else {
            return false;
        };
        match parts.as_slice() {
            [Reply::Bulk(Some(kind)), Reply::Bulk(Some(channel)), Reply::Bulk(Some(text))] => {
                kind == b"message"
                    && channel == SWITCH_MASTER
                    && text.split(|&b| b == b' ').next() == Some(self.service.as_bytes())
            }
            _ => false,
        }
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

    /// Moves the client to the master the sentinels name, when it is on another.
    async fn follow(&self) {
        let Some(named) = self.named_master().await else {
            return;
        };
        let node = &self.node;
        let on = node.client.active_connections();
        // Not connected yet (at start): the client's connection asks the sentinels itself.
        if on.is_empty()
            || on
                .iter()
                .any(|s| s.host == named.host && s.port == named.port)
        {
            return;
        }
        tracing::warn!(
            master = %format!("{}:{}", named.host, named.port),
            "the sentinels name another master than the one the store's connection is on; \
             reconnecting"
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
        let (mut out, replies) = self.authenticated();
        push_array(&mut out, 3);
        push_bulk(&mut out, b"SENTINEL");
        push_bulk(&mut out, b"GET-MASTER-ADDR-BY-NAME");
        push_bulk(&mut out, self.service.as_bytes());
        server_of(exchange(&mut stream, &out, replies + 1).await?)
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
