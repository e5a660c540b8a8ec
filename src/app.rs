//! Wiring: build the store, the shared state and both listeners from a config; serve until told
//! to stop; reload on `SIGHUP`; on `SIGTERM`/`SIGINT` stop accepting and let in-flight requests
//! finish within `server.shutdown_grace`. The request path itself is [`Gateway`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{redact_url, Backend, Config};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::route::CompileError;
use crate::state::GatewayState;
use crate::store::{Store, StoreError};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The store could not be set up (a malformed URL, say).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The config could not be compiled.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// A started gateway: its bound addresses, its state, and the handle that stops it.
pub struct Running {
    /// Where the proxy listens (the real port when the config said 0).
    pub proxy_addr: SocketAddr,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// Where Envoy's rate-limit service API is served (`[rls]`).
    pub rls_addr: Option<SocketAddr>,
    /// Where Envoy's external authorization API is served (`[ext_authz]`; `rls_addr` when
    /// both share one address).
    pub ext_authz_addr: Option<SocketAddr>,
    /// Where forward-auth subrequests are answered (`[forward_auth]`).
    pub forward_auth_addr: Option<SocketAddr>,
    /// The shared state (for reloads and tests).
    pub state: Arc<GatewayState>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, waits for in-flight requests (up to the grace period), and returns.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// A handle that stops the gateway when sent `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

/// Binds both listeners and starts serving `config` on the current runtime.
pub async fn start(config: Config) -> Result<Running, StartError> {
    start_on(config, &[]).await
}

/// Connects the store, then binds the listeners and starts serving `config`: with worker
/// `handles`, one proxy listener per worker (`SO_REUSEPORT`) serving on that worker; without,
/// one on the current runtime. The store comes first: while it waits for a Redis that does not
/// answer yet (at most 2 s), no port accepts connections it would not serve.
pub async fn start_on(config: Config, handles: &[Handle]) -> Result<Running, StartError> {
    let metrics = Metrics::new();
    let store = Store::from_config(&config.store, metrics.store_error_hook(), handles).await?;
    let listen = config.server.listen;
    let bind_error = |source| StartError::Bind {
        addr: listen,
        source,
    };
    let proxy_listeners =
        crate::server::bind_listeners(listen, handles.len().max(1)).map_err(bind_error)?;
    let admin_listener = TcpListener::bind(config.admin.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.admin.listen,
            source: crate::server::in_use(source),
        })?;
    let state = GatewayState::new(config, store, metrics)?;
    start_with(state, proxy_listeners, admin_listener, handles).await
}

/// Serves `state` on listeners that are already bound: proxy listener `i` on worker `i` (all on
/// the current runtime when `handles` is empty).
pub async fn start_with(
    state: Arc<GatewayState>,
    proxy_listeners: Vec<std::net::TcpListener>,
    admin_listener: TcpListener,
    handles: &[Handle],
) -> Result<Running, StartError> {
    let local = |addr: std::io::Result<SocketAddr>| {
        addr.map_err(|source| StartError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })
    };
    let proxy_addr = local(proxy_listeners[0].local_addr())?;
    let admin_addr = local(admin_listener.local_addr())?;
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    tokio::spawn(state.clone().warn_if_store_may_evict());
    if let Some(task) = follow_resets(&state, stopped.clone()).await? {
        tasks.push(task);
    }
    // Every listener is bound before any serves: a port that fails leaves nothing running.
    let workers = handles.len().max(1);
    let bind = |addr: SocketAddr| {
        crate::server::bind_listeners(addr, workers)
            .map_err(|source| StartError::Bind { addr, source })
    };
    let grpc = crate::grpc::listeners(
        state.running.rls.as_ref().map(|r| {
            let service = crate::rls::RlsService::new(state.rls.clone(), state.limiter().clone());
            (r.listen, service)
        }),
        (state.running.ext_authz.as_ref()).map(|e| {
            let service = crate::ext_authz::ExtAuthzService::new(&state.shared);
            (e.listen, service)
        }),
    );
    let mut grpc_bound = Vec::with_capacity(grpc.len());
    for listener in grpc {
        let sockets = bind(listener.listen)?;
        grpc_bound.push((local(sockets[0].local_addr())?, listener, sockets));
    }
    let grpc_addr = |wanted: Option<SocketAddr>| {
        let wanted = wanted?;
        (grpc_bound.iter())
            .find(|(_, l, _)| l.listen == wanted)
            .map(|(bound, _, _)| *bound)
    };
    let rls_addr = grpc_addr(state.running.rls.as_ref().map(|r| r.listen));
    let ext_authz_addr = grpc_addr(state.running.ext_authz.as_ref().map(|e| e.listen));
    let forward_auth_listeners = (state.running.forward_auth.as_ref())
        .map(|f| bind(f.listen))
        .transpose()?;
    let forward_auth_addr = forward_auth_listeners
        .as_ref()
        .map(|l| local(l[0].local_addr()))
        .transpose()?;
    // One bound for every listener of every worker: max_connections is the whole process's.
    let serving = Serving {
        settings: state.running.server.clone(),
        slots: Arc::new(tokio::sync::Semaphore::new(
            state.running.server.max_connections,
        )),
        stopped: stopped.clone(),
        handles,
    };
    let gateway = Gateway::new(state.shared.clone(), state.upstreams.clone());
    tasks.extend(serving.on_workers(proxy_listeners, move |peer| gateway.service(peer)));
    let head_timeout = state.running.server.header_read_timeout;
    for (_, listener, sockets) in grpc_bound {
        let router = listener.router(head_timeout).await;
        tasks.extend(serving.on_workers(sockets, move |_| router.clone()));
    }
    if let Some(listeners) = forward_auth_listeners {
        let service = crate::forward_auth::ForwardAuth::new(&state.shared);
        tasks.extend(serving.on_workers(listeners, move |peer| service.service(peer)));
    }
    tasks.push(tokio::spawn(serve_admin(
        admin_listener,
        state.clone(),
        stopped,
    )));
    Ok(Running {
        proxy_addr,
        admin_addr,
        rls_addr,
        ext_authz_addr,
        forward_auth_addr,
        state,
        stop,
        tasks,
    })
}

/// What every listener is served with: the connection settings, the process's bound on open
/// connections, the stop signal, and the workers.
struct Serving<'h> {
    settings: crate::config::ServerConfig,
    slots: Arc<tokio::sync::Semaphore>,
    stopped: watch::Receiver<bool>,
    handles: &'h [Handle],
}

impl Serving<'_> {
    /// Serves listener `i` of `listeners` on worker `i` (all on the current runtime without
    /// workers), each connection with the service `service_for` makes for its peer.
    fn on_workers<S>(
        &self,
        listeners: Vec<std::net::TcpListener>,
        service_for: impl Fn(std::net::IpAddr) -> S + Clone + Send + 'static,
    ) -> Vec<JoinHandle<()>>
    where
        S: crate::server::Served,
        S::Future: Send + 'static,
    {
        listeners
            .into_iter()
            .enumerate()
            .map(|(i, listener)| {
                let serving = crate::server::serve(
                    listener,
                    service_for.clone(),
                    self.settings.clone(),
                    self.slots.clone(),
                    self.stopped.clone(),
                );
                match self.handles.get(i) {
                    Some(worker) => worker.spawn(serving),
                    None => tokio::spawn(serving),
                }
            })
            .collect()
    }
}

/// Follows admin resets from every instance (with Redis) until the gateway stops.
async fn follow_resets(
    state: &Arc<GatewayState>,
    mut stopped: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, StartError> {
    let Some(follower) = state.limiter().follow_resets(state.reset_channel()).await? else {
        return Ok(None);
    };
    Ok(Some(tokio::spawn(async move {
        let _ = stopped.wait_for(|s| *s).await;
        drop(follower);
    })))
}

async fn serve_admin(
    listener: TcpListener,
    state: Arc<GatewayState>,
    stopped: watch::Receiver<bool>,
) {
    let settings = state.running.server.clone();
    let router = crate::admin::router(state);
    crate::server::serve_admin(listener, router, settings, stopped).await;
}

/// Runs on the workers `handles` until `SIGTERM` or `SIGINT`; reloads the config on `SIGHUP`
/// and, unless `server.watch_files = false`, when a file it was read from changes.
pub async fn run(config: Config, handles: Vec<Handle>) -> Result<(), StartError> {
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let store_line = match config.store.backend {
        Backend::Redis => format!("redis {}", redact_url(&config.store.url)),
        Backend::Memory => "memory (embedded, single instance)".to_string(),
    };
    let running = start_on(config, &handles).await?;
    // Before the line that says it listens: a SIGHUP or SIGTERM sent once that line is seen
    // reloads or stops it, never kills it with the signal's default action; and a config file
    // changed once that line is seen is reloaded (a watch started after it could miss it).
    let signals = Signals::install();
    let watching = match running.state.running.server.watch_files {
        true => crate::watch::start(running.state.clone()),
        false => None,
    };
    let mut deciders = String::new();
    if let Some(a) = running.rls_addr {
        deciders.push_str(&format!(", rate-limit service (gRPC) {a}"));
    }
    if let Some(a) = running.ext_authz_addr {
        deciders.push_str(&format!(", ext_authz (gRPC) {a}"));
    }
    if let Some(a) = running.forward_auth_addr {
        deciders.push_str(&format!(", forward auth {a}"));
    }
    tracing::info!(
        "slidegate listening on {} (admin {}{deciders}), store: {}, {} worker(s)",
        running.proxy_addr,
        running.admin_addr,
        store_line,
        handles.len().max(1)
    );
    signals.wait(&running).await;
    drop(watching);
    tracing::info!("shutting down: finishing in-flight requests");
    running.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// The signals the gateway answers, installed once it listens.
#[cfg(unix)]
struct Signals {
    handlers: Option<[tokio::signal::unix::Signal; 3]>,
}

#[cfg(unix)]
impl Signals {
    /// Installs the handlers of `SIGTERM`, `SIGINT` and `SIGHUP`.
    fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(term), Ok(int), Ok(hup)) => Some([term, int, hup]),
            _ => None,
        };
        Signals { handlers }
    }

    /// Waits for `SIGTERM` or `SIGINT`, reloading the config on every `SIGHUP` meanwhile.
    async fn wait(self, running: &Running) {
        let Some([mut term, mut int, mut hup]) = self.handlers else {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => {
                    let state = running.state.clone();
                    let _ = tokio::task::spawn_blocking(move || state.reload()).await;
                }
            }
        }
    }
}

/// Ctrl-C, where there are no Unix signals.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> Signals {
        Signals
    }

    async fn wait(self, _running: &Running) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
