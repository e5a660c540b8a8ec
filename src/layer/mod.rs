//! `slidegate::RateLimitLayer`: the limiter as a `tower::Layer` anyone can put in front of their
//! own service (an axum `Router`, a tonic service), with the same decisions, 429 bodies,
//! headers, metrics and exceed modes as the gateway, whose own request path is this layer in
//! front of its proxy service: what is tested through one is tested through the other.
//!
//! ```text
//! request -> route (normalise, match) -> client IP -> [body read] -> keys -> Deciding
//!         -> forwarded to the inner service (reservation settled by its status) | 429 / 4xx
//! ```
//!
//! Built from the same TOML as the gateway (`[store]`, `[keys]`, `[[routes]]` without
//! `upstream`, and of `[server]` only `trusted_proxies`, `client_ip_header` and `ipv6_prefix`)
//! or from a [`Builder`]. Behind a load balancer, `trusted_proxies` must name it: otherwise every
//! client is keyed as the balancer, and the layer says so once ([`ForwardingWarning`]). A layer of the gateway answers 404 to a request no route
//! takes; an embedded layer passes it to its service unlimited. Either refuses a path it cannot
//! normalise (400) before it looks for a route, since that path could be a route's in another
//! spelling, and hands the inner service the normalised path: wrap the whole router (not one
//! route, as `Router::layer` would) so that it routes what the layer counted.
//!
//! Differences from a stack of middleware (one layer per step): one future per request, a state
//! machine with no boxed future in it (`future.rs`); the steps' results travel inside it rather
//! than as request extensions. The inner service gets the matched route as a request extension
//! ([`MatchedRoute`]), and the response carries what was decided ([`Decided`]) for an access log.

mod ask;
mod attempt;
mod body;
mod builder;
mod future;
mod meter;
mod read;
mod service;
mod state;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use ask::{Allow, Asker};
pub use attempt::{Attempt, Departed, OnDeparted};
pub use body::{BoxError, RequestBody, ResponseBody};
pub use builder::{Builder, RouteBuilder};
pub use future::ResponseFuture;
pub use meter::MeteredBody;
pub use service::RateLimit;

use crate::config::{Config, Environment, Purpose};
use crate::limit::Limiter;
use crate::metrics::{DecisionLabel, Metrics};
use crate::route::{Route, RouteTable};

/// What a request that no route takes gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// A 404 problem body (the gateway's proxy listener: every path it serves is a route with
    /// an upstream; a route without one serves forward auth only, and is passed over here).
    NotFound,
    /// Passed to the inner service unlimited (an embedded layer: the app has other paths).
    PassThrough,
}

/// The client's address, as the server that accepted the connection saw it. The gateway sets
/// it; when it is absent, axum's `ConnectInfo<SocketAddr>` or tonic's `TcpConnectInfo` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Marks an inner service's response whose status says nothing of the request's outcome
/// (forward auth answers before the request is served): an outcome-counted attempt stays
/// counted instead of being settled by it (response extension).
#[derive(Debug, Clone, Copy)]
pub struct OutcomeUnseen;

/// Marks a request whose body was cut short before it reached the layer (Envoy's ext_authz
/// sends at most `max_request_bytes` of it, saying so in `x-envoy-auth-partial-body`): its
/// body key parts are missing, so `on_missing_key` decides (request extension).
#[derive(Debug, Clone, Copy)]
pub struct BodyCutShort;

/// The route a request matched and the client it came from (after trusted proxies), for the
/// inner service (request extension).
#[derive(Clone)]
pub struct MatchedRoute {
    /// The route.
    pub route: Arc<Route>,
    /// The client IP its keys were derived with.
    pub client_ip: IpAddr,
}

/// What the layer decided for a request (response extension), for an access log.
#[derive(Debug, Clone, Default)]
pub struct Decided {
    /// The route's name.
    pub route: Option<String>,
    /// Whether the route's requests are logged (`access_log`), and the share of its allowed
    /// requests that are (`access_log_sample`).
    pub log: Option<(bool, f64)>,
    /// The request's entry in `slidegate_requests_total`.
    pub label: Option<DecisionLabel>,
    /// The limit that decided (the rejecting one, else the tightest).
    pub limit: Option<String>,
    /// The derived key, as logs show it.
    pub key: Option<String>,
}

/// Why a layer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The config does not validate.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The store could not be set up (a malformed URL, say).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The routes could not be compiled.
    #[error(transparent)]
    Compile(#[from] crate::route::CompileError),
}

/// What every clone of the layer and its services shares: the route table in force (swapped
/// on reload), the limiter (and through it the store and the deny cache).
pub struct Shared {
    /// The route table in force.
    pub table: Arc<ArcSwap<RouteTable>>,
    /// The limiter.
    pub limiter: Arc<Limiter>,
    /// What a request no route takes gets.
    pub unmatched: Unmatched,
    /// An embedded layer's subscription to admin resets, ended with the last of its services
    /// (`None` in the gateway, which follows them until it stops).
    pub resets: Option<crate::limit::ResetFollower>,
    /// Whether the warning about forwarding headers no trusted proxy vouches for was logged.
    pub forwarding_warned: ForwardingWarning,
}

/// The once-per-layer warning that requests from a private or loopback peer carry forwarding
/// headers while `server.trusted_proxies` does not cover that peer: the sign of a layer behind
/// a load balancer that counts every client as the balancer. Once logged, a request costs one
/// relaxed atomic load.
#[derive(Debug, Default)]
pub struct ForwardingWarning(AtomicBool);

impl ForwardingWarning {
    /// Logs the warning if this request shows the sign and it was not logged yet.
    pub fn check(&self, peer: IpAddr, headers: &http::HeaderMap, trusted: &[ipnet::IpNet]) {
        if self.0.load(Ordering::Relaxed) {
            return;
        }
        let Some(header) = crate::key::unvouched_forwarding(peer, headers, trusted) else {
            return;
        };
        if self.0.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            peer = %peer,
            header = %header,
            "requests from {peer} carry {header}, but server.trusted_proxies does not list {peer}: every client behind it counts as {peer} for `ip` keys; list the load balancer's addresses in server.trusted_proxies (and the header it writes in server.client_ip_header). Logged once."
        );
    }
}

/// The rate-limit layer; cloning it (and the services it makes) shares one limiter.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
    metrics: Metrics,
}

impl RateLimitLayer {
    /// A layer over a route table and limiter that already exist (the gateway's).
    pub fn new(shared: Arc<Shared>, metrics: Metrics) -> RateLimitLayer {
        RateLimitLayer { shared, metrics }
    }

    /// A layer from a config file (routes need no `upstream`): its store connected, its
    /// routes compiled, requests no route takes passed through.
    pub async fn from_file(path: &std::path::Path) -> Result<RateLimitLayer, LayerError> {
        let config = Config::load_for(path, Environment::process(), Purpose::Layer)?;
        Self::from_config(config).await
    }

    /// A layer from a validated config; its warnings (settings that are legal but almost always
    /// a mistake) are logged, as the gateway logs its own at start.
    pub async fn from_config(config: Config) -> Result<RateLimitLayer, LayerError> {
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        let metrics = Metrics::new();
        let store =
            crate::store::Store::from_config(&config.store, metrics.store_error_hook(), &[])
                .await?;
        let limiter = Arc::new(Limiter::new(store, config.store.max_keys, metrics.clone()));
        let resets = limiter.follow_resets(config.store.reset_channel()).await?;
        let table = crate::route::RouteTable::build(
            config,
            &metrics,
            limiter.store().backend(),
            &Default::default(),
        )?;
        let shared = Arc::new(Shared {
            table: Arc::new(ArcSwap::from_pointee(table)),
            limiter,
            unmatched: Unmatched::PassThrough,
            resets,
            forwarding_warned: ForwardingWarning::default(),
        });
        Ok(RateLimitLayer { shared, metrics })
    }

    /// A builder of a layer in code.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The layer's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The layer's metrics in Prometheus text, as a `/metrics` endpoint serves them (the
    /// gauges read at scrape time brought up to date).
    pub fn scrape(&self) -> String {
        self.shared.limiter.scrape()
    }

    /// What its services share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.shared.clone())
    }
}

/// The client's address from the request's extensions: the gateway's [`ClientAddr`], else
/// axum's `ConnectInfo`, else the `TcpConnectInfo` a tonic server gives every request, else
/// unspecified (every client one key).
fn client_addr(extensions: &http::Extensions) -> IpAddr {
    if let Some(ClientAddr(ip)) = extensions.get::<ClientAddr>() {
        return *ip;
    }
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return addr.ip();
    }
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return addr.ip();
    }
    IpAddr::from([0, 0, 0, 0])
}
